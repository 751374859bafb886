"""Helpers of the tree's own code that a kernel calls are steps of the default
answer (issue "Witness it", Note [helpers as steps] in kernelmap.processors),
and a view asked for runs its views down to the one that sets the metadata
(Note [a utility asked for] in kernelmap.graph.nodes). The ground truth is
read from the recorded native stacks of torch 2.13.0
(tests/golden/observed-cpu.jsonl.gz) and the definitions from the tree."""

from __future__ import annotations

import functools

from kernelmap import api, graph
from kernelmap.observe.mark import name_key
from tests.golden.observed import load
from tests.graph.conftest import walk


@functools.cache
def observed_pairs(op: str) -> frozenset[tuple[str, str]]:
    """(caller, callee) for each graded frame of `op`'s recorded stacks and the frame right above it."""
    golden = load()
    out: set[tuple[str, str]] = set()
    for stack in golden.by_operator()[op]:
        frames, _ = golden.graded(stack)
        out.update((a.function, b.function) for a, b in zip(frames, frames[1:]))
    return frozenset(out)


def _is(node, function: str) -> bool:
    """Whether a node stands for a recorded frame's function (anonymous namespaces, parameters aside)."""
    return name_key(node.name) == name_key(function)


def _children_named(tree, caller: str, callee: str):
    return [c for n, _ in walk(tree) if _is(n, caller) for c in n.children if _is(c, callee)]


def _defines(node, name: str) -> bool:
    """Whether the line a node names in the tree holds the definition of `name` (its last part)."""
    lines = node.location.disk_path.read_text().splitlines()
    return name.rsplit("::", 1)[-1] in " ".join(lines[node.location.line - 1 : node.location.line + 1])


def _below(tree, caller: str, callee: str):
    """The nodes for `callee` right below a node for `caller` (below a repeat, its expanded twin's)."""
    twins = {n.attrs.get("identity"): n for n, _ in walk(tree) if n.children and not n.attrs.get("repeat")}
    callers = [n for n, _ in walk(tree) if _is(n, caller)]
    return [c for n in callers for c in (n.children or getattr(twins.get(n.attrs.get("identity")), "children", ())) if _is(c, callee)]


def test_a_helper_a_kernel_calls_is_a_step(context):
    """Helpers that reach no operator, loop or vendor call were plumbing;
    the recorded stacks show each of these right below the function the
    answer names: any's make_reduction reviews the result
    (review_reduce_result), fft_fft's fft_r2c reads its norm
    (norm_from_string) and promotes its input (promote_tensor_fft). The default answer has
    each there, at its definition in the tree, off the main path."""
    ctx = context("cpu")
    cases = {"aten::any": [("at::meta::make_reduction", "at::native::review_reduce_result")],
             "aten::fft_fft": [("at::native::fft_r2c", "at::native::norm_from_string"), ("at::native::fft_r2c", "at::native::promote_tensor_fft")]}
    for op, pairs in cases.items():
        tree = api.with_main_path(graph.stack(op, ctx))
        for caller, callee in pairs:
            assert (caller, callee) in observed_pairs(op), (op, caller, callee)
            found = _below(tree, caller, callee)
            assert found, (op, caller, callee)
            assert all(not f.attrs.get("utility") and f.location is not None and _defines(f, callee) for f in found)
            assert not any(f.attrs.get("main") for f in found)


def test_a_utility_a_helper_calls_stays_with_the_helper(context):
    """any's review_reduce_result restores the reduced dims with
    `result.as_strided(...)`: the recorded stacks enter as_strided's
    operator below it. The helper is a step, and the utility it calls stays
    under it, unexpanded, at the line of the call."""
    helper = "at::native::review_reduce_result"
    assert (helper, "at::_ops::as_strided::call") in observed_pairs("aten::any")
    tree = api.with_main_path(graph.stack("aten::any", context("cpu")))
    nodes = [n for n, _ in walk(tree) if _is(n, helper) and n.children]
    assert nodes and _defines(nodes[0], helper)
    utilities = [c for c in nodes[0].children if c.attrs.get("utility")]
    assert utilities and all(not c.children for c in utilities)
    strided = [c for c in utilities if c.name == "aten::as_strided"]
    assert strided
    site = strided[0].attrs["call_site"]
    assert "as_strided" in site.disk_path.read_text().splitlines()[site.line - 1]


def test_a_view_asked_for_runs_its_views(context):
    """transpose and unsqueeze set a view's metadata through as_strided,
    whose kernel checks the storage's bounds, and t through transpose: the
    recorded stacks of each show as_strided_tensorimpl and
    checkInBoundsForStorage below the view's kernel. Asked for, the view's
    tree has them, below its as_strided call, however deep; where another
    kernel calls the view (matmul's transpose), it stays one unexpanded
    step, and what a view asked for calls that may copy (ravel's
    contiguous) stays one step too."""
    ctx = context("cpu")
    for op, kernel in (("aten::transpose.int", "at::native::transpose"), ("aten::unsqueeze", "at::native::unsqueeze"), ("aten::t", "at::native::t")):
        pairs = observed_pairs(op)
        assert ("at::_ops::as_strided::call", "at::native::as_strided_tensorimpl") in pairs
        assert ("at::native::as_strided_tensorimpl", "at::native::checkInBoundsForStorage") in pairs
        tree = graph.stack(op, ctx)
        paths = {n.name: [p.name for p in path] for n, path in walk(tree)}
        assert "at::native::checkInBoundsForStorage" in paths, op
        route = paths["at::native::checkInBoundsForStorage"]
        assert kernel in route and "aten::as_strided" in route and "at::native::as_strided_tensorimpl" in route
        assert route.index(kernel) < route.index("aten::as_strided") < route.index("at::native::as_strided_tensorimpl")
        impl = next(n for n, _ in walk(tree) if n.name == "at::native::as_strided_tensorimpl")
        assert _defines(impl, "as_strided_tensorimpl")
    matmul = graph.stack("aten::matmul", ctx)
    views = [n for n, _ in walk(matmul) if n.name == "aten::transpose.int"]
    assert views and all(v.attrs.get("utility") and not v.children for v in views)
    ravel = graph.stack("aten::ravel", ctx)
    copies = [n for n, _ in walk(ravel) if n.name == "aten::contiguous" or n.name.startswith("at::_ops::contiguous")]
    assert copies and all(not c.children or c.attrs.get("utility") for c in copies if c.name == "aten::contiguous")
    assert not any(n.name == "aten::clone" for n, _ in walk(ravel))


def test_a_view_not_named_as_a_utility_is_followed_where_it_is_called(context):
    """unfold is a view by its schema but no utility by name: instance_norm's
    repeat calls it, and the recorded stacks run unfold's own kernel below
    its operator. The default answer follows it there, down to the view its
    kernel calls (as_strided), which stays one step."""
    assert ("at::_ops::unfold::call", "at::native::unfold") in observed_pairs("aten::instance_norm")
    tree = graph.stack("aten::instance_norm", context("cpu"))
    kernels = [n for n, path in walk(tree) if n.name == "at::native::unfold" and any(p.name == "aten::unfold" for p in path)]
    assert kernels and _defines(kernels[0], "unfold")
    assert any(c.name == "aten::as_strided" and c.attrs.get("utility") and not c.children for c in kernels[0].children)
