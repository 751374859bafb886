"""Fixtures of the trace tests: traces recorded here on the CPU (a small
convolution, ResNet-50's forward and backward), and a writer of small Kineto
traces in the documented Chrome trace event format, for what needs a GPU."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def op_nodes(tree, name: str | None = None):
    return [n for _, n in tree.walk() if n.kind == "op" and (name is None or n.name == name)]


def child_ops(node):
    return [c for c in node.children if c.kind == "op"]


@pytest.fixture(scope="session")
def resnet():
    """The example ResNet-50 module (imported from examples/)."""
    sys.path.insert(0, str(EXAMPLES))
    try:
        import resnet50
    finally:
        sys.path.remove(str(EXAMPLES))
    return resnet50


@pytest.fixture(scope="session")
def conv_trace():
    """nn.Conv2d(3, 8, 3, padding=1) on a 1x3x32x32 input, forward only."""
    import torch

    from kernelmap.trace import trace

    torch.manual_seed(0)
    conv = torch.nn.Conv2d(3, 8, 3, padding=1)
    x = torch.randn(1, 3, 32, 32)
    return conv, x, trace(conv, x)


@pytest.fixture(scope="session")
def resnet_trace(resnet):
    """ResNet-50 forward and backward on one 224x224 image."""
    import torch

    from kernelmap.trace import trace

    torch.manual_seed(0)
    model = resnet.resnet50()
    x = resnet.example_input()
    return model, trace(lambda: model(x).sum().backward())


class KinetoWriter:
    """Builds a trace as torch.profiler writes it on a CUDA machine: host
    events (`cpu_op`, `python_function`, `cuda_runtime`) on a thread, device
    events (`kernel`) on a stream, joined by `correlation` args and `ac2g`
    flow events (`ph: s` on the launch, `ph: f` on the kernel)."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = [
            {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "thread 1 (python)"}},
        ]
        self.correlation = 100

    def host(self, cat: str, name: str, ts: float, dur: float, **args: Any) -> dict:
        e = {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": args}
        self.events.append(e)
        return e

    def op(self, name: str, ts: float, dur: float, dims=(), types=(), **args: Any) -> dict:
        return self.host("cpu_op", name, ts, dur, **{"Input Dims": [list(d) for d in dims], "Input type": list(types)}, **args)

    def launch(self, kernel: str, ts: float, kernel_ts: float, kernel_dur: float, *, correlation_arg: bool = True, flow: bool = True) -> int:
        """cudaLaunchKernel at `ts` on the host, and its kernel on stream 7."""
        self.correlation += 1
        c = self.correlation
        self.host("cuda_runtime", "cudaLaunchKernel", ts, 4.0, correlation=c)
        kargs = {"device": 0, "stream": 7, "grid": [80, 1, 1], "block": [128, 1, 1]}
        if correlation_arg:
            kargs["correlation"] = c
        self.events.append({"ph": "X", "cat": "kernel", "name": kernel, "pid": 0, "tid": 7, "ts": kernel_ts, "dur": kernel_dur, "args": kargs})
        if flow:
            self.events.append({"ph": "s", "id": c, "pid": 1, "tid": 1, "ts": ts, "cat": "ac2g", "name": "ac2g"})
            self.events.append({"ph": "f", "id": c, "pid": 0, "tid": 7, "ts": kernel_ts, "cat": "ac2g", "name": "ac2g", "bp": "e"})
        return c

    def write(self, path: Path) -> Path:
        doc = {
            "schemaVersion": 1,
            "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "computeMajor": 9, "computeMinor": 0}],
            "traceEvents": self.events,
            "traceName": path.name,
        }
        path.write_text(json.dumps(doc, indent=1))
        return path


@pytest.fixture
def kineto():
    return KinetoWriter()


# Kernel names as the CUDA profiler reports them for a ResNet-style step.
CUDNN_CONV = "sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x64x16_stage4_warpsize2x2x1_g1_tensor16x8x8"
CUDNN_TRANSPOSE = "void cudnn::ops::nchwToNhwcKernel<float, float, float, false, true, (cudnnKernelDataType_t)2>(cudnn::ops::nchw2nhwc_params_t<float>, float const*, float*)"
CUBLAS_GEMM = "ampere_sgemm_128x64_tn"
CUTLASS_GEMM = "void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_128x128_16x4_tn_align4>(cutlass_80_tensorop_s1688gemm_128x128_16x4_tn_align4::Params)"
ATEN_ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul>)"
ATEN_BN = "void at::native::batch_norm_collect_statistics_kernel<at::native::InvStd, float, float, float, int>(at::GenericPackedTensorAccessor<float const, 3ul, at::RestrictPtrTraits, int>, float, float, at::GenericPackedTensorAccessor<float, 1ul, at::RestrictPtrTraits, int>, at::GenericPackedTensorAccessor<float, 1ul, at::RestrictPtrTraits, int>)"


@pytest.fixture
def gpu_step(kineto, tmp_path) -> Path:
    """A conv (cuDNN), a linear (cuBLAS then a CUTLASS GEMM), a batch norm and
    an add (ATen kernels) on a GPU; one kernel is joined only by its flow."""
    k = kineto
    k.host("python_function", "nn.Module: Conv2d_0", 0, 200)
    k.op("aten::conv2d", 10, 180, [(8, 3, 32, 32), (16, 3, 3, 3), (16,)], ["float", "float", "float"])
    k.op("aten::convolution", 12, 175, [(8, 3, 32, 32), (16, 3, 3, 3), (16,)], ["float", "float", "float"])
    k.op("aten::_convolution", 14, 170, [(8, 3, 32, 32), (16, 3, 3, 3), (16,)], ["float", "float", "float"])
    k.op("aten::cudnn_convolution", 20, 100, [(8, 3, 32, 32), (16, 3, 3, 3)], ["float", "float"])
    k.launch(CUDNN_TRANSPOSE, 30, 1000, 5)
    k.launch(CUDNN_CONV, 50, 1010, 40)
    k.op("aten::add_", 130, 40, [(8, 16, 32, 32), (1, 16, 1, 1), ()], ["float", "float", "Scalar"])
    k.launch(ATEN_ADD, 140, 1060, 3, correlation_arg=False)  # only the flow joins this one
    k.host("python_function", "nn.Module: BatchNorm2d_0", 210, 60)
    k.op("aten::native_batch_norm", 215, 50, [(8, 16, 32, 32), (16,), (16,), (16,), (16,), (), (), ()],
         ["float", "float", "float", "float", "float", "Scalar", "Scalar", "Scalar"])
    k.launch(ATEN_BN, 220, 1070, 6)
    k.host("python_function", "nn.Module: Linear_0", 300, 100)
    k.op("aten::linear", 305, 90, [(8, 16), (10, 16), (10,)], ["float", "float", "float"])
    k.op("aten::addmm", 310, 40, [(10,), (8, 16), (16, 10), (), ()], ["float", "float", "float", "Scalar", "Scalar"])
    k.launch(CUBLAS_GEMM, 320, 1080, 7)
    k.op("aten::mm", 355, 30, [(8, 16), (16, 10)], ["float", "float"])
    k.launch(CUTLASS_GEMM, 360, 1090, 8)
    return k.write(tmp_path / "gpu_step.json")


from tests.source.conftest import no_user_selection, real_build, real_index, real_tree, real_tree_root  # noqa: E402,F401 - the 2.6.0 tree and its index
