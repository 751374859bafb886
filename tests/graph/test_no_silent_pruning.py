"""Cause 13 on the real tree: with the autograd layer shown, `stack
torch.nn.Conv2d --device cuda` keeps the cuDNN subtree (a chain the depth cuts
stays, marked), and only the autograd wrappers that run are shown."""

from __future__ import annotations

import pytest

from kernelmap import graph
from kernelmap.model import EdgeKind, NodeKind
from tests.graph.conftest import paths_to


@pytest.fixture(scope="module")
def conv_grad(context):
    return graph.stack("torch.nn.Conv2d", context("cuda", requires_grad=True))


def test_the_cudnn_subtree_survives_at_the_default_depth(conv_grad):
    paths = paths_to(conv_grad, lambda n: n.name == "at::native::cudnn_convolution" and "ConvShared.cpp" in str(n.location))
    assert paths, "the cuDNN kernel is shown"
    node = paths[0][-1]
    assert node.children, "its calls are shown, not pruned away"
    # every chain under it ends in work, a vendor call, or a visible cut
    stack = [node]
    cuts = 0
    while stack:
        n = stack.pop()
        cuts += bool(n.attrs.get("truncated"))
        stack.extend(n.children)
    vendor = paths_to(conv_grad, lambda n: n.kind is NodeKind.VENDOR and n.name.startswith("cudnn"))
    assert vendor or cuts, "the cuDNN calls are reached, or the cut that hides them is marked"


def test_only_the_outermost_autograd_wrapper_runs(conv_grad):
    wrappers = paths_to(conv_grad, lambda n: n.kind is NodeKind.WRAPPER and n.via is EdgeKind.AUTOGRAD)
    assert any(p[-1].name == "VariableType::convolution" for p in wrappers)
    for p in wrappers:
        above = [n.name for n in p[:-1] if n.kind is NodeKind.WRAPPER and n.via is EdgeKind.AUTOGRAD]
        assert not above, f"{p[-1].name} is shown below {above}, where autograd is already handled"
