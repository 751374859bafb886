"""Note [an out= call's resize] in graph.operators: the meta function of a
structured kernel's out= overload runs its own helpers (resize_reduction
below sum.IntList_out's) and then resizes the tensor it was given. The calls
are read from the native stacks the installed torch ran
(tests/golden/observed-cpu.jsonl.gz)."""

from __future__ import annotations

import collections
import re

from kernelmap import graph
from tests.golden.observed import load
from tests.graph.conftest import walk


def _out_meta_frames(golden) -> dict[str, set[str]]:
    """out= overload -> the at::meta:: functions a recorded stack runs right
    below its entry (its meta function, or the helper the meta function
    calls where the compiler folded the meta function in)."""
    found = collections.defaultdict(set)
    for stacks in golden.by_operator().values():
        for stack in stacks:
            real = [golden.frames[i] for i in stack if golden.frames[i].is_real]
            for entry, below in zip(real, real[1:]):
                if not (entry.function.startswith("at::_ops::") and entry.function.endswith("::call")):
                    continue
                op = golden.structs.get(entry.function.split("::")[2], "")
                if (op.endswith(".out") or op.rsplit(".", 1)[-1].endswith("_out")) and below.function.startswith("at::meta::"):
                    found[op].add(below.function)
    return found


def test_an_out_calls_meta_function_runs_its_own_helpers_before_the_resize(context):
    """sum.IntList_out's and mean.out's meta functions call resize_reduction
    (the recorded stacks show it right below the operator's entry); the map
    names it under the out= overload's meta function, beside the resize of
    the tensor given."""
    golden = load()
    recorded = _out_meta_frames(golden)
    helpers = {op: names for op, names in recorded.items() if any(not n.endswith("::meta") for n in names)}
    assert len(helpers) >= 2, recorded
    ctx = context("cpu")
    for op in sorted(helpers):
        tree = graph.stack(op, ctx, 40)
        metas = [n for n, _ in walk(tree) if n.name.endswith("::meta") and (n.condition or "").startswith("meta")]
        assert metas, op
        below = {d.name for m in metas for d in (m, *_below(m))}
        for name in helpers[op]:
            assert name in below, (op, name, sorted(below))
        assert any(d.name == "at::native::resize_output" for m in metas for d in m.children), op


def _below(node):
    stack = list(node.children)
    while stack:
        n = stack.pop()
        yield n
        stack.extend(n.children)


def test_an_out_call_below_another_resizes_though_its_meta_function_was_expanded_above(context):
    """huber_loss's mean calls sum.IntList_out after the functional sum's meta
    function was expanded above in the same tree; the out= call's meta still
    resizes the tensor given: the recorded stacks run resize_output and its
    _resize_output_check below sum.IntList_out's entry, and the map names them."""
    golden = load()
    recorded = collections.defaultdict(set)
    for op, stacks in golden.by_operator().items():
        if op.endswith(".out") or op.rsplit(".", 1)[-1].endswith("_out"):
            continue
        for stack in stacks:
            names = [golden.frames[i].function for i in stack if golden.frames[i].is_real]
            if "at::_ops::sum_IntList_out::call" in names:
                below = names[names.index("at::_ops::sum_IntList_out::call") + 1 :]
                recorded[op].update(n for n in below if n in ("at::native::resize_output", "at::native::_resize_output_check"))
    chosen = sorted(op for op, names in recorded.items() if names)[:4]
    assert len(chosen) >= 3, sorted(recorded)
    ctx = context("cpu")
    for op in chosen:
        named = {n.name for n, _ in walk(graph.stack(op, ctx, 40))}
        assert recorded[op] <= named, (op, recorded[op] - named)


def test_an_out_calls_resize_restrides_where_the_meta_function_gives_strides(context, indexed_tree):
    """_linalg_solve_ex's meta function gives its result's strides
    (`set_output_strided(0, result_shape, result_strides, ...)`, read from
    the tree), so the generated resize_out restrides the out= tensor it
    resized with `out.as_strided_(sizes, strides)`: the recorded stacks run
    as_strided_'s entry right below the meta function, and the map names it
    there."""
    golden = load()
    recorded = collections.defaultdict(set)
    for op, stacks in golden.by_operator().items():
        for stack in stacks:
            real = [golden.frames[i].function for i in stack if golden.frames[i].is_real]
            for meta, below in zip(real, real[1:]):
                if meta.startswith("at::meta::structured_") and meta.endswith("::meta") and below == "at::_ops::as_strided_::call":
                    recorded[op].add(meta)
    chosen = sorted(recorded)[:3]
    assert len(chosen) >= 2, sorted(recorded)
    text = (indexed_tree.root / "aten/src/ATen/native/BatchLinearAlgebra.cpp").read_text()
    assert re.search(r"TORCH_META_FUNC\(_linalg_solve_ex\)[^{]*\{(?:(?!\nTORCH_)[\s\S])*?set_output_strided\(0,", text)
    ctx = context("cpu")
    for op in chosen:
        tree = graph.stack(op, ctx, 40)
        for meta in recorded[op]:
            nodes = [n for n, _ in walk(tree) if n.name == meta]
            assert nodes, (op, meta)
            assert any(c.name == "aten::as_strided_" and c.attrs.get("utility") for n in nodes for c in n.children), (op, meta)
