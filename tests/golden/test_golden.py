"""The golden chains are checked against the tree they describe: every file
exists and holds the step's symbol on the step's line, and the data is well
formed (known devices and edge kinds, at least 15 chains over both devices)."""

from __future__ import annotations

import re

import pytest

from tests.golden.golden import HOW, load, short_name

CHAINS, LANDMARKS = load()


def _line(tree, step) -> str:
    path = tree / step.file
    assert path.is_file(), f"{step}: no such file in the tree"
    lines = path.read_text(errors="replace").splitlines()
    assert 1 <= step.line <= len(lines), f"{step}: the file has {len(lines)} lines"
    return lines[step.line - 1]


def _holds(text: str, symbol: str) -> bool:
    name = short_name(symbol)
    if name == "operator()":
        return "operator()" in text
    return re.search(rf"(?<![\w]){re.escape(name)}(?![\w])", text) is not None


@pytest.mark.parametrize("chain", CHAINS, ids=lambda c: c.id)
def test_every_step_is_on_its_line(tree_2_6, chain):
    for step in chain.steps:
        assert step.how in HOW, f"{chain.id}: {step}: unknown edge kind"
        assert _holds(_line(tree_2_6, step), step.symbol), f"{chain.id}: {step}: the line reads {_line(tree_2_6, step).strip()!r}"


@pytest.mark.parametrize("marks", LANDMARKS, ids=lambda m: f"{m.op}-{m.device}")
def test_entry_and_stub_kernels_are_on_their_lines(tree_2_6, marks):
    for step in (marks.entry, marks.stub):
        if step is not None:
            assert _holds(_line(tree_2_6, step), step.symbol), f"{marks.op} {marks.device}: {step}: the line reads {_line(tree_2_6, step).strip()!r}"


def test_the_set_covers_the_operator_families_on_both_devices():
    assert len(CHAINS) >= 15
    assert {c.device for c in CHAINS} == {"cpu", "cuda"}
    assert len({c.id for c in CHAINS}) == len(CHAINS), "chain ids are unique"
    starts = {c.start for c in CHAINS}
    for family in ("aten::conv2d", "aten::convolution_backward", "aten::batch_norm", "aten::layer_norm", "aten::softmax.int",
                   "aten::add.Tensor", "aten::mul.Tensor", "aten::mm", "aten::bmm", "aten::relu", "aten::gelu", "aten::sum.dim_IntList",
                   "aten::mean.dim", "aten::embedding", "aten::cat", "aten::sort", "aten::topk", "aten::scaled_dot_product_attention",
                   "aten::copy_", "aten::max_pool2d"):
        assert family in starts, f"no golden chain starts at {family}"
    vendors = {s.symbol for c in CHAINS for s in c.steps if s.how == "vendor"}
    assert {"cudnnConvolutionForward", "cudnnBackendExecute", "cublasSgemm", "sgemm_"} <= vendors


def test_a_wrong_line_is_caught(tree_2_6):
    """The check itself: the same symbol one line off is refused."""
    step = CHAINS[0].steps[0]
    assert _holds(_line(tree_2_6, step), step.symbol)
    shifted = type(step)(step.symbol, step.file, step.line + 1, step.how)
    assert not _holds(_line(tree_2_6, shifted), shifted.symbol)


def test_grading_counts_steps_in_order_along_one_path():
    """The grader on a tiny tree: two steps on one path, a third only on a sibling path."""
    from kernelmap.model import CallNode, CallTree, Location, NodeKind
    from tests.golden.golden import grade

    chain = next(c for c in CHAINS if c.id == "conv2d-cuda-cudnn-v8")
    s0, s1, s2 = chain.steps[:3]

    def node(step, *children, end=5):
        return CallNode(step.symbol, NodeKind.KERNEL, Location(step.file, step.line, step.line + end), children=children)

    off_path = node(s2)
    tree = CallTree(CallNode("aten::conv2d", NodeKind.OPERATOR, children=(node(s0, node(s1)), off_path)))
    g = grade(chain, tree)
    assert g.present[:3] == (True, True, True) and not any(g.present[3:])
    assert g.in_order == 2 and g.first_missing == s2
    # a node of the right name at another line answers nothing
    moved = CallNode(s0.symbol, NodeKind.KERNEL, Location(s0.file, s0.line + 100))
    assert grade(chain, CallTree(moved)).present[0] is False
