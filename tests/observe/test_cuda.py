"""The CUDA host-stack path, on recorded stacks: the launches of a real
Kineto trace (tests/trace/data, recorded on a GPU), each nested in its
operators as the trace records them, joined to the kernels the GPU ran."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelmap.model import NodeKind
from kernelmap.observe.cuda import HostStack, host_kind, join_launches, read_kineto

from tests.observe.conftest import walk

TRACE = Path(__file__).resolve().parents[1] / "trace" / "data" / "hta-timeline_analysis-sampled_rank-0.json.gz"


@pytest.fixture(scope="module")
def recorded():
    return read_kineto(TRACE)


def test_every_launch_meets_the_kernel_it_ran(recorded):
    kernels, stacks = recorded
    assert stacks and kernels
    tree = join_launches(stacks, kernels)
    names = {k.name for k in kernels}
    by_corr = {k.correlation: k.name for k in kernels}
    shown = [(n, path) for n, path in walk(tree) if n.kind is NodeKind.GPU_KERNEL]
    assert shown
    for node, path in shown:
        assert node.name in names
        assert path[-2].kind is NodeKind.RUNTIME and path[-2].name.startswith("cuda")
        assert node.attrs["linked_by"] == "correlation"
    assert sum(n.attrs["hits"] for n, _ in shown) == sum(1 for s in stacks if s.correlation in by_corr)
    # a launch made inside an aten operator hangs under that operator
    assert any(p.kind is NodeKind.OPERATOR for n, path in shown for p in path)


def test_gdb_stacks_join_by_launch_order(recorded):
    """Stacks captured under gdb carry no correlation: the i-th launch is the i-th kernel."""
    kernels, _ = recorded
    ordered = sorted(kernels, key=lambda k: k.correlation)[:3]
    stacks = [HostStack(("at::native::cudnn_convolution", "cudnnConvolutionForward", "cudaLaunchKernel")) for _ in ordered]
    tree = join_launches(stacks, ordered)
    [launch] = [n for n, _ in walk(tree) if n.kind is NodeKind.RUNTIME]
    assert {c.name for c in launch.children} == {k.name for k in ordered}
    assert all(c.attrs["linked_by"] == "launch order" for c in launch.children)
    assert host_kind("cudnnConvolutionForward") is NodeKind.VENDOR and host_kind("cublasLtMatmul") is NodeKind.VENDOR
