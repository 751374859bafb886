"""One answer, one version (Note [graph versions]): with the real 2.6.0 tree
selected, `stack`, `callers`, `where` and `explain` take every static layer
from it (its yaml and derivatives, its own Python files, the files its own
torchgen regenerates); only live facts carry the installed torch's label, and
they are announced by exactly one note. Every location is opened and the
named symbol is looked for on that line."""

from __future__ import annotations

import json
import re

import pytest

from kernelmap import env, graph
from kernelmap.model import NodeKind, OriginKind
from tests.conftest import pastes_into, run_kernelmap
from tests.graph.conftest import TREE_NAME, walk

OPS = ("torch.nn.Conv2d", "torch.nn.functional.batch_norm", "torch.add", "torch.mm", "torch.relu", "torch.softmax")


def lines_at(location, before: int = 0, after: int = 2) -> str:
    text = location.disk_path.read_text(errors="replace").splitlines()
    return "\n".join(text[max(0, location.line - 1 - before) : location.line + after])


def check_symbol_on_line(node) -> bool:
    """Whether the file a node names holds its symbol on that line; True when
    checked, False when the node is of a kind this reading does not check."""
    loc = node.location
    assert loc.disk_path is not None and loc.disk_path.is_file(), (node.name, str(loc))
    line = lines_at(loc, after=0)
    short = node.name.rsplit(".", 1)[-1] if node.kind in (NodeKind.PYTHON, NodeKind.MODULE) else node.name.rsplit("::", 1)[-1]
    if node.kind is NodeKind.MODULE:
        assert re.match(rf"\s*class {short}\b", line), (node.name, str(loc), line)
    elif node.kind is NodeKind.PYTHON:
        assert re.match(rf"\s*def {short}\b", line) or re.match(rf"{short}\s*=", line), (node.name, str(loc), line)
    elif node.kind is NodeKind.OPERATOR and "call_site" not in node.attrs and loc.path.endswith("native_functions.yaml"):
        assert line.startswith(f"- func: {node.name.removeprefix('aten::')}("), (node.name, str(loc), line)
    elif node.kind in (NodeKind.BINDING, NodeKind.WRAPPER):
        assert short in line, (node.name, str(loc), line)
    elif node.kind is NodeKind.HEADER:
        assert line.startswith("inline ") and f"{short}(" in line, (node.name, str(loc), line)
    elif node.kind is NodeKind.OPS_ENTRY:
        struct, method = node.name.rsplit("::", 2)[-2:]
        assert f"{struct}::{method}(" in line, (node.name, str(loc), line)
    elif node.kind in (NodeKind.KERNEL, NodeKind.GENERATED):
        if short in ("meta", "impl"):
            owner = node.name.rsplit("::", 2)[-2].removeprefix("structured_")
            spelled = re.sub(r"TORCH_(META|IMPL)_FUNC2\((\w+),\s*(\w+)\)", r"\2_\3", lines_at(loc))  # FUNC2(add, Tensor): add_Tensor
            assert owner in spelled or pastes_into(loc.disk_path.read_text(errors="replace").splitlines(), loc.line, owner), \
                (node.name, str(loc))  # a macro's use that pastes it: CREATE_COMPARISON_SCALAR_TENSOR_META_FUNC(eq)
        else:
            name = short.split("<")[0]
            assert name in lines_at(loc) or pastes_into(loc.disk_path.read_text(errors="replace").splitlines(), loc.line, name), \
                (node.name, str(loc))
    else:
        return False
    return True


@pytest.fixture(scope="module", params=OPS)
def stacked(request, context):
    device = "cpu" if request.param in ("torch.mm", "torch.softmax") else "cuda"
    return request.param, graph.stack(request.param, context(device))


def test_every_stack_location_is_the_trees_and_holds_its_symbol(stacked, indexed_tree):
    target, tree = stacked
    assert not [n for n in tree.notes if "mismatch" in n], tree.notes
    checked = 0
    kinds = set()
    for node, _ in walk(tree):
        if node.location is None or node.attrs.get("unresolved"):
            continue
        origin = node.location.origin
        assert origin is not None and origin.version == indexed_tree.origin.version, (node.name, origin)
        if origin.kind is OriginKind.GENERATED:
            assert origin.label.startswith("generated from tree ") and origin.root is not None
        if check_symbol_on_line(node):
            checked += 1
            kinds.add(node.kind)
    assert checked >= 5, target
    assert {NodeKind.OPERATOR, NodeKind.WRAPPER, NodeKind.BINDING, NodeKind.HEADER, NodeKind.OPS_ENTRY} <= kinds, (target, kinds)


def test_conv2d_python_and_generated_lines_are_the_trees(context, indexed_tree):
    """The issue's example: Conv2d.forward in the tree's conv.py, and
    THPVariable_conv2d / wrapper_CompositeImplicitAutograd__conv2d in the files
    the tree's torchgen writes (no shards in 2.6.0's composite registrations)."""
    tree = graph.stack("torch.nn.Conv2d", context("cuda"))
    found = {node.name: node for node, _ in walk(tree)}
    forward = found["torch.nn.modules.conv.Conv2d.forward"]
    tree_conv = (indexed_tree.root / "torch/nn/modules/conv.py").read_text().splitlines()
    conv2d_class = next(i for i, t in enumerate(tree_conv) if t.startswith("class Conv2d("))
    expected = next(i for i, t in enumerate(tree_conv) if i > conv2d_class and t.strip().startswith("def forward(")) + 1
    assert forward.location.line == expected and forward.location.disk_path.is_relative_to(indexed_tree.root)
    wheel_conv = (env.torch_install().torch_dir / "nn/modules/conv.py").read_text().splitlines()
    assert wheel_conv[expected - 1 : expected] != tree_conv[expected - 1 : expected] or len(wheel_conv) != len(tree_conv)
    binding = found["THPVariable_conv2d"]
    assert binding.location.disk_path.is_relative_to(context("cuda").generated.root)
    assert "THPVariable_conv2d" in lines_at(binding.location, after=0)
    wrapper = found["wrapper_CompositeImplicitAutograd__conv2d"]
    assert wrapper.location.path == "build/aten/src/ATen/RegisterCompositeImplicitAutograd.cpp"
    assert "wrapper_CompositeImplicitAutograd__conv2d" in lines_at(wrapper.location, after=0)


def test_callers_reach_the_trees_python(context, indexed_tree):
    tree = graph.callers("at::native::cudnn_convolution", context("cuda"))
    checked = 0
    for node, _ in walk(tree):
        if node.location is not None and node.location.origin is not None:
            assert node.location.origin.version == indexed_tree.origin.version, (node.name, node.location.origin)
            checked += check_symbol_on_line(node)
    assert checked >= 3
    assert "torch.nn.functional.conv2d" in {node.name for node, _ in walk(tree)}


@pytest.mark.parametrize("op", ["aten::conv2d", "aten::batch_norm", "aten::add.Tensor", "aten::mm", "aten::relu", "aten::_softmax"])
def test_explain_steps_are_the_trees(op, context, indexed_tree):
    from kernelmap.graph.explain import explain

    answer = explain(op, context("cpu"))
    located = [s for s in answer.steps if s.location is not None]
    assert located
    for step in located:
        assert step.location.origin.version == indexed_tree.origin.version, (step.title, step.location.origin)
        lines = step.location.disk_path.read_text(errors="replace").splitlines()
        if step.excerpt and step.location.line <= len(lines):  # the excerpt is the file's text from that line
            first = step.excerpt.splitlines()[0]
            if not first.startswith("//"):
                assert first.strip() in lines[step.location.line - 1] or lines[step.location.line - 1].strip() in first, (step.title, str(step.location))


def test_where_takes_yaml_and_derivatives_from_the_tree_and_notes_live_facts_once(indexed_tree):
    yaml = (indexed_tree.root / "aten/src/ATen/native/native_functions.yaml").read_text().splitlines()
    yaml_line = yaml.index("- func: add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor") + 1
    derivatives = (indexed_tree.root / "tools/autograd/derivatives.yaml").read_text().splitlines()
    derivatives_line = derivatives.index("- name: add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor") + 1
    out = run_kernelmap("where", "aten::add.Tensor", "--source", TREE_NAME, "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    op = doc["operator"]
    assert (op["location"]["path"], op["location"]["line"]) == ("aten/src/ATen/native/native_functions.yaml", yaml_line)
    assert op["autograd"]["location"]["line"] == derivatives_line
    assert sum("version mismatch" in n for n in doc["notes"]) == 1
    text = run_kernelmap("where", "aten::add.Tensor", "--source", TREE_NAME)
    assert text.returncode == 0 and (text.stdout + text.stderr).count("version mismatch") == 1
    assert f"native_functions.yaml:{yaml_line}" in text.stdout and f"derivatives.yaml:{derivatives_line}" in text.stdout
    static = run_kernelmap("where", "aten::add.Tensor", "--source", TREE_NAME, "--static")
    assert static.returncode == 0 and "version mismatch" not in static.stdout + static.stderr
    assert f"native_functions.yaml:{yaml_line}" in static.stdout


def test_where_selects_the_default_tree_like_stack(indexed_tree):
    """KERNELMAP_SOURCE selects the tree for `where` as for `stack`: the yaml
    line is the tree's without --source."""
    yaml = (indexed_tree.root / "aten/src/ATen/native/native_functions.yaml").read_text().splitlines()
    yaml_line = yaml.index("- func: add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor") + 1
    out = run_kernelmap("where", "aten::add.Tensor", "--static", env={"KERNELMAP_SOURCE": TREE_NAME})
    assert out.returncode == 0, out.stderr
    assert f"native_functions.yaml:{yaml_line}" in out.stdout


def _locations(item):
    """Every location object in a JSON document part, without recursion."""
    stack, found = [item], []
    while stack:
        x = stack.pop()
        if isinstance(x, dict):
            if {"path", "line", "origin"} <= x.keys():
                found.append(x)
            stack.extend(x.values())
        elif isinstance(x, list):
            stack.extend(x)
    return found


def test_where_json_names_the_tree_for_static_facts_and_the_installed_torch_for_live_ones(indexed_tree):
    out = run_kernelmap("where", "torch.nn.functional.conv2d", "--device", "cpu", "--source", TREE_NAME, "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    origins = doc["origins"]
    static = _locations([doc["operator"], doc["also"], doc["structured_delegate"], doc["source"]])
    live = _locations(doc["live"])
    assert static and live
    for loc in static:
        assert origins[loc["origin"]]["version"] == indexed_tree.origin.version, loc
        lines = open(loc["file"], errors="replace").read().splitlines()
        assert loc["line"] <= len(lines), loc
    for loc in live:
        assert origins[loc["origin"]]["version"] == env.torch_install().version, loc
    assert sum("version mismatch" in n for n in doc["notes"]) == 1


def test_generated_locations_name_the_registered_tree(context, indexed_tree):
    """The files a tree's torchgen regenerates are labelled with the tree's
    registered name, as its own files are, not with its directory's name."""
    assert indexed_tree.name != indexed_tree.root.name  # the fixture registers the tree under another name
    tree = graph.stack("aten::index_select", context("cpu"))
    generated = [n.location.origin for n, _ in walk(tree) if n.location is not None and n.location.origin is not None
                 and n.location.origin.kind is OriginKind.GENERATED]
    assert generated
    assert {o.label for o in generated} == {f"generated from {indexed_tree.origin.label}"}


def test_a_file_edited_since_the_index_is_named_by_every_answer(tree_2_6, indexed_tree, generated):
    """A line added to BinaryOps.cpp after indexing: stack, where and find
    answer from the index as built and each names the file in one note; the
    file put back as it was (content and mtime), the note goes."""
    import os

    from kernelmap import api, graph
    from kernelmap.source import find, open_index

    path = tree_2_6 / "aten/src/ATen/native/BinaryOps.cpp"
    before, st = path.read_bytes(), path.stat()
    wanted = "1 file of debian-2.6.0 changed since it was indexed (aten/src/ATen/native/BinaryOps.cpp)"
    try:
        path.write_bytes(b"// a line added after indexing\n" + before)
        tree = graph.stack("aten::mul.Tensor", graph.open_context("cpu", source=TREE_NAME))
        assert sum(wanted in n for n in tree.notes) == 1, tree.notes
        answer = api.where("aten::mul.Tensor", device="cpu", static=True, with_source=True, source=TREE_NAME)
        assert sum(wanted in n for n in answer.notes) == 1, answer.notes
        with open_index(indexed_tree) as ix:
            assert find(ix, "mul_stub").stub_declarations and wanted in (ix.stale_note() or "")
    finally:
        path.write_bytes(before)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    with open_index(indexed_tree) as ix:
        assert ix.stale_note() is None
