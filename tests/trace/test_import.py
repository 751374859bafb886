"""Importing traces: CPU traces exported by torch.profiler here, GPU traces
written in the Kineto event format, and files that are broken."""

from __future__ import annotations

import gzip
import json

import pytest

from kernelmap.trace import TraceFormatError, load
from tests.trace.conftest import (
    ATEN_ADD,
    ATEN_BN,
    CUBLAS_GEMM,
    CUDNN_CONV,
    CUDNN_TRANSPOSE,
    CUTLASS_GEMM,
    child_ops,
    op_nodes,
)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A conv forward and backward recorded with torch.profiler and exported, as a user would elsewhere."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    conv = torch.nn.Conv2d(3, 8, 3, padding=1)
    x = torch.randn(1, 3, 32, 32)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_stack=True) as prof:
        conv(x).sum().backward()
    path = tmp_path_factory.mktemp("exported") / "conv.json"
    prof.export_chrome_trace(str(path))
    return path


def test_exported_cpu_trace_imports_into_the_same_shape_as_a_live_one(exported):
    t = load(exported)
    [conv2d] = op_nodes(t.tree, "aten::conv2d")
    assert [c.name for c in child_ops(conv2d)] == ["aten::convolution"]
    [backward] = [n for _, n in t.tree.walk() if n.name == "ConvolutionBackward0"]
    assert [c.name for c in child_ops(backward)] == ["aten::convolution_backward"]
    module = [n for _, n in t.tree.walk() if n.kind == "module"]
    assert [m.name for m in module] == ["Conv2d_0"]


def test_gzipped_trace_gives_the_same_tree(exported, tmp_path):
    from kernelmap.render.json import to_json

    gz = tmp_path / "conv.json.gz"
    gz.write_bytes(gzip.compress(exported.read_bytes()))
    plain, zipped = to_json(load(exported).tree), to_json(load(gz).tree)
    plain["meta"].pop("file"), zipped["meta"].pop("file")
    assert plain == zipped


def _kernel(tree, name):
    [k] = [n for _, n in tree.walk() if n.kind == "gpu_kernel" and n.name == name]
    return k


def _parent_op(tree, node):
    parents = {id(c): p for _, p in tree.walk() for c in p.children}
    p = parents[id(node)]
    while p.kind != "op":
        p = parents[id(p)]
    return p


def test_gpu_kernels_hang_under_their_launch_and_operator(gpu_step):
    t = load(gpu_step)
    for name, op in [
        (CUDNN_CONV, "aten::cudnn_convolution"),
        (CUDNN_TRANSPOSE, "aten::cudnn_convolution"),
        (ATEN_ADD, "aten::add_"),
        (ATEN_BN, "aten::native_batch_norm"),
        (CUBLAS_GEMM, "aten::addmm"),
        (CUTLASS_GEMM, "aten::mm"),
    ]:
        k = _kernel(t.tree, name)
        assert _parent_op(t.tree, k).name == op
        assert k.attrs["launched_by"] == op
    assert _kernel(t.tree, ATEN_ADD).attrs["linked_by"] == "flow"
    assert _kernel(t.tree, CUDNN_CONV).attrs["linked_by"] == "correlation"
    assert not any("could not be joined" in n for n in t.tree.notes)


def test_vendor_kernels_are_marked_closed_and_aten_kernels_linked_to_source(gpu_step, real_tree, real_index):
    t = load(gpu_step, source_tree=real_tree.name)
    for name, library in [(CUDNN_CONV, "cuDNN"), (CUDNN_TRANSPOSE, "cuDNN"), (CUBLAS_GEMM, "cuBLAS"), (CUTLASS_GEMM, "cuBLAS")]:
        k = _kernel(t.tree, name)
        assert (k.attrs["library"], k.attrs["closed"]) == (library, True), name
    add = _kernel(t.tree, ATEN_ADD)
    assert add.attrs["kernel"] == "at::native::vectorized_elementwise_kernel"
    assert add.attrs["launcher"].startswith("aten/src/ATen/native/cuda/CUDALoops.cuh:")
    # the functor is torchgen's CUDAFunctor_add (generated at build time): its arithmetic is ufunc::add
    assert add.attrs["functor"] == "at::native::ufunc::add"
    path, line = add.attrs["source"].rsplit(":", 1)
    assert path == add.attrs["source_file"] == "aten/src/ATen/native/ufunc/add.h"
    assert " add(" in (real_tree.root / path).read_text().splitlines()[int(line) - 1]
    assert add.attrs["closed"] is False
    bn = _kernel(t.tree, ATEN_BN)
    assert bn.attrs["source_file"] == "aten/src/ATen/native/cuda/Normalization.cuh"
    path, line = bn.attrs["launcher"].rsplit(":", 1)
    assert "batch_norm_collect_statistics_kernel" in (real_tree.root / path).read_text().splitlines()[int(line) - 1]


def test_gpu_operators_resolve_to_cuda_kernels(gpu_step):
    t = load(gpu_step)
    [cudnn] = op_nodes(t.tree, "aten::cudnn_convolution")
    assert cudnn.attrs["device"] == "cuda"
    assert (cudnn.attrs["library"], cudnn.attrs["closed"]) == ("cuDNN", True)
    assert cudnn.attrs["dispatch_key"] == "CUDA"
    [_conv] = op_nodes(t.tree, "aten::_convolution")
    assert _conv.attrs["conv_backend_ran"] == "Cudnn"
    [addmm] = op_nodes(t.tree, "aten::addmm")
    assert (addmm.attrs["library"], addmm.attrs["closed"]) == ("cuBLAS", True)


def test_gpu_summary_sums_device_time_per_operator(gpu_step):
    t = load(gpu_step)
    rows = {r.name: r for r in t.summary().ops}
    kernels = {n.name: n.attrs["duration_us"] for _, n in t.tree.walk() if n.kind == "gpu_kernel"}
    assert rows["aten::cudnn_convolution"].device_us == pytest.approx(kernels[CUDNN_CONV] + kernels[CUDNN_TRANSPOSE])
    assert rows["aten::_convolution"].device_us == pytest.approx(
        kernels[CUDNN_CONV] + kernels[CUDNN_TRANSPOSE] + kernels[ATEN_ADD]
    )
    assert rows["aten::addmm"].closed and rows["aten::addmm"].kernels[CUBLAS_GEMM] == 1
    assert not rows["aten::native_batch_norm"].closed
    files = {f.name for f in t.summary().files}
    assert "aten/src/ATen/native/ufunc/add.h" in files  # the add kernel's arithmetic


def test_kernels_without_any_link_are_kept_and_reported(kineto, tmp_path):
    kineto.op("aten::relu", 0, 10, [(4,)], ["float"])
    kineto.launch(ATEN_ADD, 2, 50, 1, correlation_arg=False, flow=False)
    t = load(kineto.write(tmp_path / "orphan.json"))
    assert any("could not be joined" in n for n in t.tree.notes)
    assert _kernel(t.tree, ATEN_ADD)


def test_unknown_operators_are_shown_and_flagged(kineto, tmp_path):
    kineto.op("aten::frobnicate_v99", 0, 10, [(4,)], ["float"])
    kineto.op("aten::relu", 20, 10, [(4,)], ["float"])
    t = load(kineto.write(tmp_path / "newer.json"))
    [unknown] = op_nodes(t.tree, "aten::frobnicate_v99")
    assert unknown.attrs["unknown"]
    assert any("aten::frobnicate_v99" in n for n in t.tree.notes)
    [relu] = op_nodes(t.tree, "aten::relu")
    assert relu.attrs["op"] == "aten::relu"
    rows = {r.name: r for r in t.summary().ops}
    assert rows["aten::frobnicate_v99"].unknown and not rows["aten::relu"].unknown


def test_truncated_trace_names_the_byte_offset(exported, tmp_path):
    data = exported.read_bytes()
    cut = len(data) // 2
    bad = tmp_path / "cut.json"
    bad.write_bytes(data[:cut])
    with pytest.raises(TraceFormatError) as info:
        load(bad)
    assert info.value.offset == cut
    assert "truncated" in str(info.value) and f"byte {cut}" in str(info.value)


def test_malformed_event_names_its_byte_offset(tmp_path):
    text = json.dumps({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::relu", "ts": 1, "dur": 2}]})
    broken = text.replace('"cat"', "oops", 1)
    bad = tmp_path / "bad.json"
    bad.write_text(broken)
    with pytest.raises(TraceFormatError) as info:
        load(bad)
    assert info.value.offset == broken.index("oops")


def test_truncated_gzip_is_an_error_not_a_crash(exported, tmp_path):
    data = gzip.compress(exported.read_bytes())
    bad = tmp_path / "cut.json.gz"
    bad.write_bytes(data[: len(data) // 2])
    with pytest.raises(TraceFormatError):
        load(bad)


def test_a_json_file_without_trace_events_is_refused(tmp_path):
    bad = tmp_path / "other.json"
    bad.write_text('{"name": "not a trace"}')
    with pytest.raises(TraceFormatError, match="no traceEvents"):
        load(bad)


def test_reader_streams_events_across_chunk_boundaries(tmp_path, monkeypatch):
    from kernelmap.trace import reader

    monkeypatch.setattr(reader, "CHUNK", 64)  # every event straddles reads
    events = [{"ph": "X", "name": f"e{i}", "args": {"s": "ü" * i}} for i in range(50)]
    path = tmp_path / "small.json"
    path.write_text(json.dumps({"a": 1, "traceEvents": events, "b": [1, 2]}, ensure_ascii=False))
    header = reader.TraceHeader()
    assert list(reader.read_trace(path, header)) == events
    assert header.fields == {"a": 1, "b": [1, 2]}
