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
