"""Live captures under gdb (one per call, shared by the session): what
`observe` shows for torch.nn.Conv2d and torch.add on this machine's torch,
and `stack --observe`. Every location is checked against the file it names."""

from __future__ import annotations

import pytest

from kernelmap.model import NodeKind

from tests.conftest import run_kernelmap
from tests.observe.conftest import TREE_NAME, holds_function, needs_gdb, walk

pytestmark = [needs_gdb, pytest.mark.slow]


def _line(node) -> str:
    return node.location.disk_path.read_text(errors="replace").splitlines()[node.location.line - 1]


def test_conv2d_from_the_module_line_to_the_onednn_entry(conv_run):
    paths = [path for node, path in walk(conv_run) if node.kind is NodeKind.VENDOR and (node.name.startswith(("dnnl", "ideep")) or "dnnl" in node.name)]
    assert paths, "no oneDNN frame observed under Conv2d"
    path = paths[0]
    forward = [n for n in path if n.kind is NodeKind.PYTHON and n.name == "forward"]
    assert forward and forward[0].location.path == "torch/nn/modules/conv.py"
    assert "_conv_forward" in _line(forward[0]) or "conv2d" in _line(forward[0])
    names = [n.name for n in path]
    assert any("THPVariable_conv2d" in n for n in names)
    assert any(n.startswith("at::_ops::conv2d") for n in names)
    located = [n for n in path if n.location is not None and n.kind is not NodeKind.PYTHON]
    assert len(located) >= 5
    for node in located:
        assert holds_function(node), (node.name, str(node.location), _line(node))


def test_add_says_the_capability_and_dtype_case_that_ran(add_run):
    loops = [n for n, _ in walk(add_run) if n.kind is NodeKind.DEVICE_LOOP and "ran" in n.attrs]
    assert loops
    assert any("case ScalarType::Float" in n.attrs["ran"] for n in loops)
    assert all(n.attrs["capability"] in ("DEFAULT", "AVX2", "AVX512") for n in loops)
    assert add_run.meta["capability"] in ("DEFAULT", "AVX2", "AVX512")
    for node, _ in walk(add_run):
        if node.location is not None and node.kind is not NodeKind.PYTHON:
            assert holds_function(node), (node.name, str(node.location))


def test_break_shows_the_python_line_above_the_blas_call(indexed_tree):
    code = "import torch\nx = torch.ones(64, 64)\ny = torch.mm(x, x)\n"
    result = run_kernelmap("observe", "-c", code, "--break", "sgemm_", "--source", TREE_NAME, "--json", "--timeout", "300")
    assert result.returncode == 0, result.stderr
    import json

    from kernelmap.model import CallTree

    tree = CallTree.from_json(json.loads(result.stdout))
    [path] = [path for node, path in walk(tree) if node.name == "sgemm_"][:1]
    assert [n.name for n in path if n.kind is NodeKind.PYTHON] == ["<module>"]
    assert path[1].attrs["source"] == "<string>:3"
    assert any(n.name == "at::native::structured_mm_out_cpu::impl" for n in path)


def test_stack_of_conv2d_leads_with_the_observed_path(conv_run):
    """`stack torch.nn.Conv2d --device cpu --observe`: at every step the
    children that ran come first, and the first path down reaches oneDNN."""
    from kernelmap import graph
    from kernelmap.observe.mark import INLINED, NOT_TAKEN, OBSERVED, mark_tree

    static = graph.stack("torch.nn.Conv2d", graph.open_context("cpu", source=TREE_NAME), 24)
    marked = mark_tree(static, conv_run)
    order = {OBSERVED: 0, INLINED: 1, None: 2, NOT_TAKEN: 3}
    for node, _ in walk(marked):
        states = [order.get(c.attrs.get("observed"), 0) for c in node.children]
        assert states == sorted(states), node.name
    # the oneDNN convolution that ran is reached through steps that all ran
    ran = [path for node, path in walk(marked) if node.name == "at::native::_mkldnn_convolution_out" and node.attrs.get("observed") == OBSERVED]
    assert ran
    assert all(n.attrs.get("observed") in (OBSERVED, INLINED, None) for n in ran[0][1:])
    assert any(n.attrs.get("observed") == NOT_TAKEN for n, _ in walk(marked))
