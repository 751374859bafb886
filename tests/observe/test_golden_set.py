"""The recorded runtime golden set: what it holds, and that joining its
stacks to the 2.6.0 tree gives locations that hold the functions named
(each read from the file)."""

from __future__ import annotations

from pathlib import Path

from kernelmap import env
from kernelmap.model import NodeKind
from kernelmap.observe.capture import Capture, RawFrame, RawStack
from kernelmap.observe.join import observed_tree

from tests.golden.observed import OBSERVED
from tests.observe.conftest import holds_function, walk


def test_it_is_the_installed_torch_and_small(golden):
    install = env.torch_install()
    assert golden.header["torch"] == install.version
    assert golden.header["git_version"] == install.commit
    assert golden.header["capability"] in ("DEFAULT", "AVX2", "AVX512")
    assert OBSERVED.stat().st_size < 8 * 1024 * 1024


def test_it_covers_at_least_300_operators(golden):
    ops = golden.by_operator()
    assert len(ops) >= 300
    assert {"aten::add.Tensor", "aten::mm", "aten::sort"} <= set(ops)


def test_every_stack_reaches_an_operator_entry(golden):
    for call in golden.calls:
        for stack in call.stacks:
            assert golden.entry(stack) is not None, call.opinfo


def _capture(golden, op: str) -> Capture:
    stacks = tuple(
        RawStack("break", 0, 1, tuple(RawFrame(name=golden.frames[i].name, lib=golden.frames[i].lib) for i in reversed(s)))
        for s in golden.by_operator()[op]
    )
    return Capture(stacks, {"capability": golden.header["capability"]})


def test_recorded_stacks_join_to_lines_that_hold_their_functions(golden, source_map):
    """Each located frame of add, mm and sort: its line in the tree (or the
    generated file) names the function (a structured kernel by its kernel name)."""
    checked = 0
    for op in ("aten::add.Tensor", "aten::mm", "aten::sort"):
        tree = observed_tree(_capture(golden, op), source_map, op)
        for node, _ in walk(tree):
            if node.location is None or node.kind is NodeKind.PYTHON:
                continue
            path = node.location.disk_path
            assert path is not None and path.exists(), node.location
            assert holds_function(node), (node.name, str(node.location))
            checked += 1
    assert checked >= 20


def test_the_capability_and_dtype_case_of_a_recorded_add(golden, source_map):
    tree = observed_tree(_capture(golden, "aten::add.Tensor"), source_map, "aten::add.Tensor")
    ran = [n.attrs["ran"] for n, _ in walk(tree) if "ran" in n.attrs]
    assert any("case ScalarType::Float" in r for r in ran)
    assert all(r.split(",")[0] in ("DEFAULT", "AVX2", "AVX512") or r.startswith("case") for r in ran)
