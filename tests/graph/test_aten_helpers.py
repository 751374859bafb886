"""Note [ATen's helpers that call operators] in graph.resolve: a helper of
namespace at in a header directly under aten/src/ATen/ (ExpandUtils.h's
expand_size, TensorSubclassLikeUtils.h's is_scalar_tensor_true) that calls
an operator is followed like kernel code. The calls are read from the native
stacks the installed torch ran (tests/golden/observed-cpu.jsonl.gz: the
compiler folds the helper in, so the operator's entry is right below the
kernel), the helpers from the 2.6.0 tree."""

from __future__ import annotations

import collections
import re

from kernelmap import graph
from kernelmap.graph.code import tree_lines
from kernelmap.model import NodeKind
from tests.golden.observed import kernel_operator_calls, load
from tests.graph.conftest import called_operator, walk

_TOP_HEADER = re.compile(r"aten/src/ATen/\w+\.h")


def test_an_operator_a_kernel_calls_through_atens_helper_is_named_below_it(context):
    """Each recorded call of an operator from a kernel whose node in the map
    calls one of ATen's top-level header helpers that calls that operator
    (cov's at::is_scalar_tensor_true -> equal and new_ones, addr's
    expand_size -> expand) is named below the helper, which the tree
    defines in namespace at."""
    golden = load()
    ctx = context("cpu")
    recorded = collections.defaultdict(set)
    for op, caller, ran in kernel_operator_calls(golden):
        recorded[op].add((caller, ran))
    found = collections.Counter()
    for op in ("aten::cov", "aten::corrcoef", "aten::addr", "aten::quantile.scalar", "aten::broadcast_tensors"):
        assert op in recorded, op
        tree = graph.stack(op, ctx, 40)
        for caller, ran in sorted(recorded[op]):
            nodes = [n for n, _ in walk(tree) if n.name.replace("(anonymous namespace)::", "") == caller]
            helpers = [c for n in nodes for c in n.children if c.kind is NodeKind.KERNEL and c.location is not None
                       and _TOP_HEADER.fullmatch(c.location.path)]
            calling = [h for h in helpers if any(called_operator(g).kind is NodeKind.OPERATOR and called_operator(g).name == ran
                                                 for g in h.children)]
            for helper in calling:
                assert helper.name.count("::") == 1 and helper.name.startswith("at::"), helper.name
                text = tree_lines(ctx, helper.location.path)[helper.location.line - 1]
                assert helper.name.split("::")[1] in text, text
                found[ran] += 1
    assert {"aten::equal", "aten::new_ones", "aten::expand"} <= set(found), found


def test_a_helper_that_forwards_to_another_that_calls_operators_is_followed(context, indexed_tree):
    """sum_to_size_symint's `sum_to(self, size)` forwards to ExpandUtils.h's
    _sum_to, whose `tensor.sum(reduce_dims, /*keepdim=*/true)` the recorded
    stacks run right below the kernel: the map names the operator below the
    two helpers."""
    text = (indexed_tree.root / "aten/src/ATen/ExpandUtils.h").read_text()
    assert re.search(r"inline Tensor sum_to\([^{]*\{\s*return _sum_to\(", text) and "tensor.sum(reduce_dims, /*keepdim=*/true)" in text
    ran = {r for op, caller, r in kernel_operator_calls(load()) if op == "aten::sum_to_size" and caller == "at::native::sum_to_size_symint"}
    assert ran, "no recorded call from sum_to_size_symint"
    tree = graph.stack("aten::sum_to_size", context("cpu"), 40)
    [kernel] = [n for n, _ in walk(tree) if n.name == "at::native::sum_to_size_symint"]
    below, stack = set(), list(kernel.children)
    while stack:
        n = stack.pop()
        if n.kind is NodeKind.KERNEL and _TOP_HEADER.fullmatch(n.location.path if n.location else ""):
            stack.extend(n.children)
        elif called_operator(n).kind is NodeKind.OPERATOR:
            below.add(called_operator(n).name)
    assert ran <= below, (ran, below)
