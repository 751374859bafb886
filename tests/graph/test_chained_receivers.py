"""Note [a member call's result as a receiver] in graph.resolve: a method
named like an operator, called on what another member call returns
(`iter.output_base().fill_(ident)` on a TensorIterator), is the operator's
call when that method returns a Tensor. The calls are read from the native
stacks the installed torch ran (tests/golden/observed-cpu.jsonl.gz), the
lines and types from the 2.6.0 tree."""

from __future__ import annotations

import collections
import re

from kernelmap import graph
from kernelmap.graph.code import tree_lines
from kernelmap.model import NodeKind
from tests.golden.observed import kernel_operator_calls, load
from tests.graph.conftest import called_operator, walk

# `iter.output_base().fill_(`: a method named like an operator, called on another member call's result
_CHAINED = re.compile(r"\b([A-Za-z_]\w*)\s*(?:\.|->)\s*(\w+)\s*\([^()]*\)\s*\.\s*(\w+)\s*\(")


def _chained_calls(ctx, tree, ops: set[str]):
    """(node, line text) of each operator call in `tree` the map names at a
    line that writes it on a chained receiver."""
    for node, _ in walk(tree):
        for child in node.children:
            op = called_operator(child)
            site = op.attrs.get("call_site") or child.attrs.get("call_site")
            if op.kind is not NodeKind.OPERATOR or child.attrs.get("branch") or site is None:
                continue
            text = tree_lines(ctx, site.path)[site.line - 1]
            m = _CHAINED.search(text)
            if m and op.name.split("::", 1)[1].split(".")[0] == m.group(3) and op.name in ops:
                yield child, text


def test_an_operator_called_on_a_tensor_a_method_returns_is_the_call_the_binary_ran(context, indexed_tree):
    """Every recorded call of fill_.Scalar from the reduction kernels that
    write `iter.output_base().fill_(...)` (cascade_sum below sum_kernel_impl,
    binary_kernel_reduce_vec below the min/max kernels) is named in the
    map, at such a line, under the operator the stack entered."""
    golden = load()
    root = indexed_tree.root
    header = (root / "aten/src/ATen/TensorIterator.h").read_text()
    assert re.search(r"const TensorBase& output_base\(", header)  # what the chain's method returns
    assert re.search(r"struct TORCH_API TensorIterator final : public TensorIteratorBase", header)
    recorded = collections.defaultdict(set)
    for op, caller, ran in kernel_operator_calls(golden):
        if ran == "aten::fill_.Scalar" and caller.rsplit("::", 1)[-1] in ("sum_kernel_impl", "max_values_kernel_impl", "min_values_kernel_impl"):
            recorded[op].add(ran)
    chosen = sorted(recorded)[:6]
    assert len(chosen) >= 4, sorted(recorded)
    ctx = context("cpu")
    for op in chosen:
        found = list(_chained_calls(ctx, graph.stack(op, ctx, 40), recorded[op]))
        assert found, op
        for node, text in found:
            variable = _CHAINED.search(text).group(1)
            assert variable == "iter", text  # on a TensorIterator: the operator only through what output_base returns


def test_the_chains_type_is_what_the_last_method_returns(context, indexed_tree):
    """The type read for `iter.output_base()` at SumKernel.cpp's cascade_sum
    is output_base's, found in TensorIteratorBase, the class TensorIterator
    derives from; a Vectorized chain (`x_vec.neg().exp()` in silu_kernel)
    reads no Tensor."""
    from kernelmap.graph.resolve import chained_receiver_type

    ctx = context("cpu")
    [cascade] = [d for d in ctx.index.definitions("cascade_sum") if d.location.path.endswith("cpu/SumKernel.cpp")]
    [site] = [s for s in ctx.index.calls_from(cascade) if s.callee == ".fill_"]
    assert "iter.output_base().fill_(" in tree_lines(ctx, site.location.path)[site.location.line - 1]
    assert chained_receiver_type(site, cascade, ctx).replace(" ", "") == "constTensorBase&"
    [silu] = [d for d in ctx.index.definitions("silu_kernel") if d.location.path.endswith("cpu/Activation.cpp")]
    exp_sites = [s for s in ctx.index.calls_from(silu) if s.callee == ".exp"
                 and re.search(r"\bx_vec\w*\.neg\(\)\.exp\(\)", tree_lines(ctx, s.location.path)[s.location.line - 1])]
    assert exp_sites
    for exp_site in exp_sites:
        returned = chained_receiver_type(exp_site, silu, ctx)
        assert returned is None or "Tensor" not in returned
