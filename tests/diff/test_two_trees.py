"""The same questions asked of two real trees, Debian's 1.13.1 and 2.6.0:
each answer comes from the selected tree, and every location it gives is
checked by opening the file (the tree's, or the files regenerated with the
tree's own torchgen) and finding the named symbol on that line."""

from __future__ import annotations

import re

import pytest

from kernelmap.model import NodeKind, OriginKind
from tests.conftest import pastes_into
from tests.diff.conftest import YAML, defines, line_at, yaml_entry

# (operator, a Python name reaching it)
OPS = [
    ("conv2d", "torch.nn.functional.conv2d"),
    ("batch_norm", "torch.nn.functional.batch_norm"),
    ("add.Tensor", "torch.add"),
    ("mm", "torch.mm"),
    ("relu", "torch.relu"),
    ("prelu", "torch.nn.functional.prelu"),
]
VERSIONS = ["1.13", "2.6"]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("op,python", OPS)
def test_where_reads_the_selected_tree(both, version, op, python):
    from kernelmap import api

    tree, source = both[version]
    answer = api.where(f"aten::{op}", device="cpu", static=True, with_source=True, source=source)
    found = answer.ops[0]
    line, fields, dispatch = yaml_entry(tree.root, op)
    if "dispatch" not in fields and "structured_delegate" not in fields:
        dispatch = {"CompositeImplicitAutograd": op.split(".")[0]}  # torchgen's default for an entry with none
    assert found.location.origin == tree.origin and found.location.path == YAML
    assert found.location.line == line
    assert line_at(found.location).startswith(f"- func: {op}(")
    assert {k.key: k.symbol.removeprefix("at::native::") for k in found.dispatch} == dispatch
    assert answer.source, f"{op}: no source steps from tree {tree.name}"
    for step in answer.source:
        if step.location is None:
            continue
        assert step.location.origin.kind in (OriginKind.TREE, OriginKind.GENERATED, OriginKind.WHEEL), step
        if step.location.origin.kind is OriginKind.TREE:
            assert step.location.origin == tree.origin, step
            assert defines(step.location, step.name) or _is_structured(step.location), (step, line_at(step.location))


def _is_structured(location) -> bool:
    return re.search(r"\bTORCH_(PRECOMPUTE_)?(META|IMPL)_FUNC", line_at(location)) is not None


def _by_macro(location, name: str) -> bool:
    """A definition the file's own macro writes, at the macro's use: the use
    names its structured op (`CREATE_UNARY_FLOAT_META_FUNC(sqrt)`) or a word
    pasted into its name (`FOREACH_BINARY_OP_TENSOR(mul)`)."""
    parts = name.split("::")
    word = parts[-2].removeprefix("structured_") if parts[-1] in ("meta", "impl") else parts[-1]
    return pastes_into(location.disk_path.read_text(errors="replace").splitlines(), location.line, word)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("op,python", OPS)
def test_gen_regenerates_with_the_trees_torchgen(both, version, op, python):
    from kernelmap.codegen import Layer, locate

    tree, _ = both[version]
    code = locate(op, tree=tree.root)
    assert code.origin.kind is OriginKind.GENERATED and code.origin.version == tree.version
    _, _, dispatch = yaml_entry(tree.root, op)
    registered = {r.key for r in code.registrations if r.layer is Layer.REGISTER}
    # MPS and XPU wrappers exist only in macOS / XPU builds (Note [codegen options of a release build])
    expected = set(dispatch) - {"MPS", "XPU"}
    assert expected <= registered, f"{op}: {sorted(expected - registered)} not generated from tree {tree.name}"
    for r in code.registrations:
        assert f'm.impl("{op}"' in r.impl.text or f"m.impl(\"{op.split('.')[0]}" in r.impl.text, r.impl
        assert line_at(r.impl.location).strip() == r.impl.text.splitlines()[0].strip()
        if r.definition is not None:
            assert r.definition.location.origin.version == tree.version
            assert defines(r.definition.location, r.symbol), (r.symbol, line_at(r.definition.location))
    assert code.ops, f"{op}: no at::_ops entry generated from tree {tree.name}"
    for f in code.ops:  # at::_ops::<op>::call, where the dispatcher is entered
        assert re.search(rf"\b{f.symbol.split('::')[-2]}::{f.symbol.split('::')[-1]}\(", line_at(f.definition.location)), f
    for b in code.bindings:
        assert defines(b.definition.location, b.function), (b.function, line_at(b.definition.location))
        assert b.definition.location.origin == code.origin
    for k in code.ufunc:
        assert k.definition.text.splitlines()[0] == line_at(k.definition.location)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("op,python", OPS)
def test_stack_kernels_are_the_trees(both, version, op, python):
    from kernelmap import graph

    tree, source = both[version]
    call = graph.stack(python, graph.open_context("cpu", source=source))
    checked = 0
    for _, node in call.walk():
        loc = node.location
        if loc is None or node.attrs.get("collapsed") or loc.origin is None or loc.origin.kind is not OriginKind.TREE:
            continue
        assert loc.origin == tree.origin, node
        if node.kind is NodeKind.KERNEL:
            assert defines(loc, node.name) or _is_structured(loc) or _by_macro(loc, node.name), (node.name, loc, line_at(loc))
            checked += 1
    assert checked, f"{python}: the stack read no kernel from tree {tree.name}"


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("op,python", OPS)
def test_explain_excerpts_are_the_trees_lines(both, version, op, python):
    from kernelmap import graph
    from kernelmap.graph.explain import explain

    tree, source = both[version]
    answer = explain(f"aten::{op}", graph.open_context("cpu", source=source))
    from_tree = [s for s in answer.steps if s.location is not None and s.location.origin.kind is OriginKind.TREE]
    assert from_tree, f"{op}: no step read from tree {tree.name}"
    for step in from_tree:
        assert step.location.origin == tree.origin, step
        lines = step.location.disk_path.read_text(errors="replace").splitlines()
        for i, text in enumerate(step.excerpt.splitlines()):
            numbered = re.match(r"(\d+): (.*)", text)  # picked lines ("701: TORCH_CHECK(...") or a run from the location
            if numbered:
                assert lines[int(numbered[1]) - 1].strip() == numbered[2].strip(), (step.title, text)
            else:
                assert lines[step.location.line - 1 + i].rstrip() == text.rstrip(), (step.title, text)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("op,python", OPS)
def test_callers_are_the_trees(both, version, op, python):
    """Bottom-up from the kernel `where` names: every location is the selected
    tree's (its sources, or code regenerated with its torchgen), and each
    definition read from the tree holds its name on that line."""
    from kernelmap import api, graph

    tree, source = both[version]
    answer = api.where(f"aten::{op}", device="cpu", static=True, with_source=True, source=source)
    kernels = [s for s in answer.source if s.location is not None and s.location.origin.kind is OriginKind.TREE]
    assert kernels, f"{op}: where read no kernel from tree {tree.name}"
    call = graph.callers(kernels[0].name, graph.open_context("cpu", source=source))
    checked, ops = 0, 0
    for _, node in call.walk():
        loc = node.location
        ops += node.kind is NodeKind.OPERATOR
        if loc is None or loc.origin is None:
            continue
        if loc.origin.kind is OriginKind.TREE:
            assert loc.origin == tree.origin, node
            if node.kind is NodeKind.KERNEL:
                assert defines(loc, node.name, span=3) or _is_structured(loc) or _by_macro(loc, node.name), (node.name, loc, line_at(loc))
            checked += 1
        elif loc.origin.kind is OriginKind.GENERATED:
            assert loc.origin.version == tree.version, node
    assert checked, f"{op}: callers read nothing from tree {tree.name}"
    assert ops, f"{op}: callers of {kernels[0].name} reach no operator"
