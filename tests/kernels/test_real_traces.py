"""Every GPU kernel of four real traces recorded elsewhere (tests/trace/data,
MIT-licensed Holistic Trace Analysis test data) named: >= 99% of each trace's
GPU time has a source location in the 2.6.0 tree or a named library; every
ATen launcher template is answered with its launcher and its functor or
lambda, and each location printed is checked against the file itself."""

from __future__ import annotations

import gzip
import json
import re
from collections import Counter
from pathlib import Path

import pytest

from kernelmap.kernels import KernelResolver

DATA = Path(__file__).resolve().parents[1] / "trace" / "data"
TRACES = sorted(DATA.glob("hta-*.json.gz"))
DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
# Launcher templates: kernels instantiated with the op's functor or lambda.
LAUNCHERS = re.compile(r"\b(elementwise_kernel|vectorized_elementwise_kernel|unrolled_elementwise_kernel|reduce_kernel|"
                       r"multi_tensor_apply_kernel|_scatter_gather_elementwise_kernel|index_elementwise_kernel)<")


def device_time(path: Path) -> Counter:
    with gzip.open(path) as f:
        events = json.load(f)["traceEvents"]
    out: Counter = Counter()
    for e in events:
        if e.get("cat") in DEVICE_CATS:
            out[e["name"]] += e.get("dur", 0)
    return out


@pytest.fixture(scope="module")
def resolver(real_index, real_tree):
    return KernelResolver(real_index, real_tree.root, real_tree.name)


def line_of(root: Path, location) -> str:
    return (root / location.path).read_text(errors="replace").splitlines()[location.line - 1]


def test_the_four_traces_are_here_with_their_notice():
    assert len(TRACES) == 4
    assert "MIT License" in (DATA / "LICENSE-HolisticTraceAnalysis").read_text()


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name[:40])
def test_gpu_time_is_named(path, resolver):
    times = device_time(path)
    total = sum(times.values())
    named = sum(t for name, t in times.items() if resolver.resolve(name).library is not None
                and (resolver.resolve(name).library != "ATen" or resolver.resolve(name).has_source))
    assert total > 0
    assert named / total >= 0.99, [n for n in times if resolver.resolve(n).library is None]


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name[:40])
def test_every_location_holds_its_symbol(path, resolver, real_tree_root):
    checked = 0
    for name in device_time(path):
        answer = resolver.resolve(name)
        for site in (answer.kernel, answer.functor, *answer.launches):
            if site is None or site.location is None:
                continue
            line = line_of(real_tree_root, site.location)
            if site.role == "lambda":
                want = site.symbol.removesuffix("::{lambda}").rsplit("::", 1)[-1]
            elif site.role == "library call":
                want = site.symbol.rsplit("::", 1)[-1]
            else:
                want = site.symbol.rsplit("::", 1)[-1]
            assert want in line, (name, site, line)
            checked += 1
    assert checked > 0


def test_every_launcher_template_gets_its_functor_or_lambda(resolver, real_tree_root):
    """A launcher's functor is located when the tree has it; a functor of an
    older torch (the traces predate 2.6) is named and verifiably absent."""
    seen = 0
    tree_text = None
    for path in TRACES:
        for name in device_time(path):
            if not LAUNCHERS.search(name):
                continue
            answer = resolver.resolve(name)
            assert answer.library == "ATen", name
            assert answer.kernel is not None and answer.kernel.role == "launcher" and answer.kernel.location is not None, name
            assert answer.kernel.location.path.endswith((".cuh", ".cu")), answer.kernel
            assert answer.functor is not None, name
            if answer.functor.location is None:
                if tree_text is None:
                    tree_text = "\n".join(p.read_text(errors="replace") for p in (real_tree_root / "aten/src/ATen/native/cuda").glob("*.cu*"))
                short = answer.functor.symbol.rsplit("::", 1)[-1]
                assert not re.search(rf"\b{re.escape(short)}\b", tree_text), answer.functor
            seen += 1
    assert seen > 20


def test_known_answers_read_from_the_tree(resolver, real_tree_root):
    mul = ("void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, float, float, "
           "at::native::binary_internal::MulFunctor<float> >, at::detail::Array<char*, 3> >(int, at::native::BinaryFunctor<float, float, float, "
           "at::native::binary_internal::MulFunctor<float> >, at::detail::Array<char*, 3>)")
    a = resolver.resolve(mul)
    assert a.functor.symbol == "at::native::binary_internal::MulFunctor::operator()"
    assert "operator()" in line_of(real_tree_root, a.functor.location)
    assert "vectorized_elementwise_kernel" in line_of(real_tree_root, a.kernel.location)
    assert a.kernel.location.path == "aten/src/ATen/native/cuda/CUDALoops.cuh"
    clamp = next(n for p in TRACES for n in device_time(p) if "launch_clamp_scalar" in n)
    a = resolver.resolve(clamp)
    assert a.functor.role == "lambda" and "launch_clamp_scalar" in line_of(real_tree_root, a.functor.location)
    assert a.launches and all("gpu_kernel" in line_of(real_tree_root, s.location) for s in a.launches)
    sort = next(n for p in TRACES for n in device_time(p) if n.startswith("void cub::DeviceRadixSortOnesweepKernel"))
    a = resolver.resolve(sort)
    assert a.library == "CUB/Thrust" and not a.closed
    assert any("radix_sort" in line_of(real_tree_root, s.location) for s in a.launches)
    nccl = resolver.resolve("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)")
    assert (nccl.library, nccl.closed, nccl.repository) == ("NCCL", False, "https://github.com/NVIDIA/nccl")


def test_answer_json_round_trips(resolver):
    from kernelmap.errors import BadInput
    from kernelmap.kernels import KernelAnswer

    a = resolver.resolve("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)")
    doc = a.to_json()
    assert doc["kernelmap"] == "kernel/1"
    assert KernelAnswer.from_json(json.loads(json.dumps(doc))) == a
    with pytest.raises(BadInput):
        KernelAnswer.from_json({**doc, "kernelmap": "kernel/9"})


def test_a_cublas_kernels_library_calls_are_atens_calls_of_the_wrapper(resolver, real_tree_root):
    """An sgemm kernel's library calls are ATen's calls of at::cuda::blas::gemm /
    bgemm (cuda/Blas.cpp, read here), not CUDABlas.cpp's calls of its local
    tunable `gemm` object nor cpublas's own bare `gemm`."""
    answer = resolver.resolve("ampere_sgemm_128x64_nn")
    calls = [s for s in answer.launches if s.role == "library call"]
    assert calls and answer.library == "cuBLAS"
    for site in calls:
        line = line_of(real_tree_root, site.location)
        assert site.symbol.startswith("at::cuda::blas::") and re.search(rf"{site.symbol}\s*[<(]", line), (site, line)
        assert not site.caller.startswith("at::cuda::blas::") and not site.location.path.endswith("CPUBlas.cpp")
    blas = (real_tree_root / "aten/src/ATen/native/cuda/Blas.cpp").read_text().splitlines()
    assert any(site.location.path.endswith("cuda/Blas.cpp") and "at::cuda::blas::gemm<" in blas[site.location.line - 1] for site in calls)
