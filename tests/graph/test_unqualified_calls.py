"""How an unqualified call in ATen's kernels is resolved: through the
template argument a call site binds (read from a head with a comment above
it, Note [template arguments] in graph.sites), and to the operator's function
C++ finds in namespace at when no enclosing namespace defines the name (Note
[an operator's function hides another namespace's] in graph.resolve). The
calls are read from the native stacks the installed torch ran
(tests/golden/observed-cpu.jsonl.gz), the text from the 2.6.0 tree."""

from __future__ import annotations

import collections
import re

from kernelmap import graph
from kernelmap.graph.code import tree_lines
from kernelmap.model import NodeKind
from tests.golden.observed import load
from tests.graph.conftest import called_operator, walk


def _recorded_below(golden, wanted) -> dict[str, set[str]]:
    """Entry operator -> the functions `wanted` accepts that its recorded stacks ran."""
    found = collections.defaultdict(set)
    for op, stacks in golden.by_operator().items():
        for stack in stacks:
            found[op].update(f.function for i in stack if (f := golden.frames[i]).is_real and wanted(f.function))
    return {op: names for op, names in found.items() if names}


def test_a_template_argument_is_bound_below_a_comment_that_writes_a_template_head(context, indexed_tree):
    """upsample_generic_Nd_kernel_impl's head `template <int out_ndims, typename
    scale_type, class F>` has a comment above it that writes `template<typename>
    class F`; `upsample_generic_Nd_kernel_impl<1, scale_t, HelperInterpNearest>(...)`
    binds F, and `F::compute_indices_weights(...)` in its body runs
    HelperInterpNearest's, as the recorded stacks of the upsample operators
    show (with the init_indices_weights it calls)."""
    text = (indexed_tree.root / "aten/src/ATen/native/cpu/UpSampleKernel.cpp").read_text()
    head = re.search(r"((?://[^\n]*\n)+)template <int out_ndims, typename scale_type, class F>\nvoid upsample_generic_Nd_kernel_impl\(", text)
    assert head and "template<typename> class F" in head.group(1)
    assert "F::compute_indices_weights(" in text
    recorded = _recorded_below(load(), lambda f: re.fullmatch(r"at::native::HelperInterp\w*::(?:compute|init)_indices_weights", f) is not None)
    chosen = sorted(op for op in recorded if op.startswith("aten::upsample_"))
    assert len(chosen) >= 3, sorted(recorded)
    ctx = context("cpu")
    for op in chosen:
        names = {n.name.replace("(anonymous namespace)::", "") for n, _ in walk(graph.stack(op, ctx, 40))}
        for function in recorded[op]:
            assert function in names, (op, function)


def test_an_unqualified_call_in_namespace_at_of_an_operators_name_is_the_operator(context, indexed_tree):
    """`empty(new_shape, at::device(kCPU).dtype(...))` in upsample's
    init_indices_weights (namespace at::native) is at::empty through the
    dispatcher, as the recorded stacks show (empty.memory_format's entry right
    below it), not at::native::metal::empty, which no namespace around the
    caller holds. The map names the operator at each such line (or in the
    helper of a base class called there: `HelperInterpLinear::init_indices_weights(...)`
    is HelperInterpBase's)."""
    golden = load()
    calls = collections.defaultdict(set)  # entry operator -> callers the recorded stacks show calling empty.memory_format
    for op, stacks in golden.by_operator().items():
        for stack in stacks:
            real = [golden.frames[i] for i in stack if golden.frames[i].is_real]
            for caller, callee in zip(real, real[1:]):
                if callee.function == "at::_ops::empty_memory_format::call" and caller.function.startswith("at::native::HelperInterp"):
                    calls[op].add(caller.function)
    ctx = context("cpu")
    assert [d.lookup for d in ctx.index.definitions("empty") if d.symbol.kind == "function"] == ["at::native::metal::empty"]
    checked = 0
    for op in sorted(calls):
        tree = graph.stack(op, ctx, 40)
        for caller in calls[op]:
            # a caller the 2.6.0 tree reaches (2.13's upsample_separable_1d path is its own)
            nodes = [n for n, _ in walk(tree) if n.name.replace("(anonymous namespace)::", "") == caller]
            if not nodes:
                continue
            checked += 1
            # at its line, or in the helper it calls there that 2.13's compiler folded in (HelperInterpBase::init_indices_weights)
            below = [c for n in nodes for c in n.children] + [g for n in nodes for c in n.children if c.kind is NodeKind.KERNEL for g in c.children]
            empties = [c for c in below if called_operator(c).kind is NodeKind.OPERATOR and called_operator(c).name == "aten::empty.memory_format"]
            assert empties, (op, caller, [c.name for n in nodes for c in n.children])
            for node in empties:
                site = node.attrs.get("call_site") or called_operator(node).attrs.get("call_site")
                line = tree_lines(ctx, site.path)[site.line - 1]
                assert re.search(r"(?<![\w:.])empty\(", line), line
    assert checked >= 3, calls
