"""Kernel sources on the real PyTorch 2.6.0 tree: with its index built, every
operator node of a ResNet-50 trace has a source location or a reason, and the
locations point at the kernels' definitions."""

from __future__ import annotations

import os

import pytest

from tests.trace.conftest import op_nodes

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def indexed_tree(tree_2_6, session_cache):
    """The 2.6.0 tree registered and indexed (shared with the source tests when
    they run in the same session: the build is incremental)."""
    from kernelmap.source import add_tree, build_index

    tree = add_tree(tree_2_6, "debian-2.6.0")
    build_index(tree, jobs=min(2, os.cpu_count() or 1))
    return tree


def _line(tree, location) -> str:
    return (tree.root / location.split(":")[0]).read_text(errors="replace").splitlines()[int(location.split(":")[1]) - 1]


def test_resnet50_ops_link_to_kernel_definitions(resnet_trace, indexed_tree):
    from kernelmap.trace import load

    _, live = resnet_trace
    t = load(live.file, source_tree=indexed_tree.name)
    ops = op_nodes(t.tree)
    linked = [n for n in ops if n.attrs.get("source")]
    for n in ops:
        assert n.attrs.get("source") or n.attrs.get("source_reason"), n.name
    assert len(linked) > len(ops) // 2
    for n in linked:
        short = n.attrs["kernel"].rsplit("::", 1)[-1]
        text = _line(indexed_tree, n.attrs["source"])
        assert short in text or f"TORCH_IMPL_FUNC({short}" in text or short.removesuffix("_symint") in text, (n.name, text)
    [bn] = {n.attrs["source"] for n in op_nodes(t.tree, "aten::native_batch_norm")}
    assert bn.startswith("aten/src/ATen/native/Normalization.cpp:")
    assert any("kernel sources from the tree debian-2.6.0" in note for note in t.tree.notes)


def test_generated_kernels_say_why_they_have_no_source(resnet_trace, indexed_tree):
    from kernelmap.trace import load

    _, live = resnet_trace
    t = load(live.file, source_tree=indexed_tree.name)
    reasons = {n.attrs.get("source_reason") for n in op_nodes(t.tree, "aten::add_") if not n.attrs.get("source")}
    assert reasons and all(r and "generated" in r for r in reasons)


def test_gpu_kernel_families_link_to_their_definitions(kineto, tmp_path, indexed_tree):
    from kernelmap.trace import load
    from tests.trace.conftest import ATEN_ADD, ATEN_BN

    pool = (
        "void at::native::(anonymous namespace)::max_pool_forward_nchw<float, float>(int, float const*, long, long, long,"
        " int, int, int, int, int, int, int, int, int, int, float*, long*)"
    )
    kineto.op("aten::add_", 0, 40, [(8, 16), (8, 16), ()], ["float", "float", "Scalar"])
    kineto.launch(ATEN_ADD, 10, 100, 3)
    kineto.op("aten::native_batch_norm", 50, 40, [(8, 16, 4, 4)], ["float"])
    kineto.launch(ATEN_BN, 60, 200, 3)
    kineto.op("aten::max_pool2d_with_indices", 100, 40, [(8, 16, 4, 4)], ["float"])
    kineto.launch(pool, 110, 300, 3)
    t = load(kineto.write(tmp_path / "gpu.json"), source_tree=indexed_tree.name)
    kernels = {n.attrs["kernel"]: n.attrs for _, n in t.tree.walk() if n.kind == "gpu_kernel"}
    assert set(kernels) == {
        "at::native::vectorized_elementwise_kernel",
        "at::native::batch_norm_collect_statistics_kernel",
        "at::native::(anonymous namespace)::max_pool_forward_nchw",
    }
    for symbol, attrs in kernels.items():
        short = symbol.rsplit("::", 1)[-1]
        assert short in _line(indexed_tree, attrs["launcher"]), symbol
        if attrs["source"] != attrs["launcher"]:  # the functor's, when this tree has it
            assert attrs["functor"].rsplit("::", 1)[-1] in _line(indexed_tree, attrs["source"]), symbol
