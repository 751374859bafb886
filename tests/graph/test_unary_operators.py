"""Note [operators written as C++ operators] in graph.sites, for the unary
minus: `-target * (input1 - input2)` in margin_ranking_loss and `-(input *
target * weight_).sum()` in cross_entropy_loss_prob_target call TensorBody.h's
`Tensor operator-() const { return neg(); }`, the neg operator through the
dispatcher, as the native stacks the installed torch ran show
(tests/golden/observed-cpu.jsonl.gz)."""

from __future__ import annotations

import collections
import re

from kernelmap import graph
from kernelmap.graph import sites
from kernelmap.graph.code import tree_lines
from kernelmap.model import NodeKind
from tests.golden.observed import kernel_operator_calls, load
from tests.graph.conftest import called_operator, walk


def test_the_unary_table_is_the_one_tensorbody_defines(indexed_tree):
    body = (indexed_tree.root / "aten/src/ATen/templates/TensorBody.h").read_text()
    written = dict(re.findall(r"Tensor operator([-~])\(\) const \{\s*return (\w+)\(\);", body))
    assert written.get("-") == "neg", written
    assert sites._unary_table(str(indexed_tree.root)) == written


def test_a_unary_minus_on_a_tensor_is_the_neg_call_the_binary_ran(context):
    """Each recorded call of aten::neg from an ATen kernel whose definition
    calls no neg by name is named under that kernel, at a line that writes a
    unary minus."""
    golden = load()
    ctx = context("cpu")
    calls = collections.defaultdict(set)
    for op, caller, ran in kernel_operator_calls(golden):
        if ran == "aten::neg":
            calls[op].add(caller)
    checked = 0
    for op in sorted(calls):
        tree = graph.stack(op, ctx, 40)
        for caller in calls[op]:
            nodes = [n for n, _ in walk(tree) if n.name.replace("(anonymous namespace)::", "") == caller and n.location is not None]
            if not nodes:
                continue
            lines = tree_lines(ctx, nodes[0].location.path)
            body = "\n".join(lines[nodes[0].location.line - 1 : nodes[0].location.line + 60])
            if re.search(r"\bneg\s*\(", body):
                continue  # calls neg by name: not the unary operator's
            negs = [c for n in nodes for c in n.children if called_operator(c).kind is NodeKind.OPERATOR and called_operator(c).name == "aten::neg"]
            assert negs, (op, caller)
            for c in negs:
                site = c.attrs.get("call_site") or called_operator(c).attrs.get("call_site")
                line = tree_lines(ctx, site.path)[site.line - 1]
                assert re.search(r"(?:^|[-+*/=(,?:]|\breturn)\s*-\s*[(A-Za-z_]", line), line
            checked += 1
    assert checked >= 2, dict(calls)
