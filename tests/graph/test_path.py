"""`kernelmap path FROM TO` on the real Debian 2.6.0 tree: the routes users ask
for word for word, each step's location read back from its file, the golden
chains as the yardstick, and the answer's exits and documents."""

from __future__ import annotations

import json

import pytest

from kernelmap import answers
from kernelmap.graph.path import path
from kernelmap.model import CallNode, EdgeKind, Location, NodeKind, PathAnswer, Route
from kernelmap.render import render
from tests.conftest import pastes_into, run_kernelmap
from tests.golden.golden import answers as answers_step
from tests.golden.golden import load
from tests.graph.conftest import TREE_NAME, line_of

CHAINS, _ = load()


def chain(chain_id):
    return next(c for c in CHAINS if c.id == chain_id)


def golden_in_order(route, golden, first=0):
    """How many golden steps (from `first`) the route holds, in order."""
    steps = golden.steps[first:]
    i = 0
    for node in route.steps:
        if i < len(steps) and answers_step(node, steps[i]):
            i += 1
    return i


def check_lines(route):
    """Each located C++ step's line holds its name (vendor calls: the call)."""
    for step in route.steps:
        if step.location is None or step.location.disk_path is None or step.kind not in (NodeKind.KERNEL, NodeKind.VENDOR):
            continue
        short = step.name.rsplit("::", 1)[-1]
        if short in ("impl", "meta"):
            continue
        assert short in line_of(step) or pastes_into(step.location.disk_path.read_text(errors="replace").splitlines(), step.location.line, short), \
            (step.name, str(step.location))


@pytest.fixture(scope="module")
def conv_v7(context):
    return path("torch.nn.Conv2d", "cudnnConvolutionForward", context("cuda"))


@pytest.fixture(scope="module")
def conv_v8(context):
    return path("torch.nn.Conv2d", "cudnnBackendExecute", context("cuda"))


def test_conv2d_to_cudnn_v7_follows_the_golden_chain(conv_v7):
    assert conv_v7.routes, "nn.Conv2d reaches cudnnConvolutionForward on cuda"
    best = conv_v7.routes[0]
    assert best.steps[0].name == "torch.nn.modules.conv.Conv2d" and best.steps[-1].name == "cudnnConvolutionForward"
    golden = chain("conv2d-cuda-cudnn-v7")
    assert golden_in_order(best, golden) == len(golden.steps)
    check_lines(best)
    assert "case ConvBackend::Cudnn" in best.conditions
    assert any("cudnnv8_enabled_check_debug" in c and c.startswith("else of") for c in best.conditions), best.conditions
    # shortest first, each route ends at the target
    assert [len(r.steps) for r in conv_v7.routes] == sorted(len(r.steps) for r in conv_v7.routes)
    assert all(r.steps[-1].name == "cudnnConvolutionForward" for r in conv_v7.routes)


def test_conv2d_to_cudnn_v8_goes_through_the_backend_api(conv_v8):
    best = conv_v8.routes[0]
    golden = chain("conv2d-cuda-cudnn-v8")
    names = [s.name for s in best.steps]
    assert "at::native::run_single_conv" in names and "at::native::run_conv_plan" in names
    assert any(c.startswith("if (at::native::cudnnv8_enabled_check_debug())") for c in best.conditions)
    assert golden_in_order(best, golden) == len(golden.steps)
    check_lines(best)
    assert best.steps[-1].kind is NodeKind.VENDOR and best.steps[-1].attrs["closed"] is True


def test_a_route_through_a_repeated_definition_continues_below_its_twin(context, conv_v8):
    """run_conv_plan is expanded once in the grown graph, yet its callers'
    routes all reach cudnnBackendExecute (run_single_conv and try_plans)."""
    assert conv_v8.searched["routes"] > len(conv_v8.routes)
    full = path("torch.nn.Conv2d", "cudnnBackendExecute", context("cuda"), limit=50)
    callers_of_plan = set()
    for route in full.routes:
        names = [s.name for s in route.steps]
        if "at::native::run_conv_plan" in names:
            callers_of_plan.add(names[names.index("at::native::run_conv_plan") - 1])
    assert {"at::native::run_single_conv", "at::native::try_plans"} <= callers_of_plan


def test_add_reaches_its_inner_loop_on_cpu(context):
    answer = path("torch.add", "ufunc::add", context("cpu"))
    best = answer.routes[0]
    assert best.steps[0].name == "torch.add" and best.steps[-1].kind is NodeKind.INNER_LOOP
    assert "add" in line_of(best.steps[-1])
    assert any(s.kind is NodeKind.STUB and s.name == "add_stub" for s in best.steps)


def _line(tree, relative, pattern, after=0):
    """The first line of a tree file (after line `after`) that matches `pattern`."""
    import re

    lines = (tree / relative).read_text().splitlines()
    return next(n for n, text in enumerate(lines, 1) if n > after and re.search(pattern, text))


def test_add_reaches_the_vectorized_loop_on_cpu(context, tree_2_6):
    """Cause 7: the device loop is followed through the TensorIterator
    machinery to the vectorized inner loop, each step at its definition and
    reached from the line that calls it, as the tree's files say."""
    answer = path("torch.add", "vectorized_loop", context("cpu"))
    best = answer.routes[0]
    loops, iterator, internal = "aten/src/ATen/native/cpu/Loops.h", "aten/src/ATen/TensorIterator.cpp", "aten/src/ATen/TensorIteratorInternal.h"
    vec_def = _line(tree_2_6, loops, r"^void cpu_kernel_vec\(")
    for_each = _line(tree_2_6, iterator, r"^void TensorIteratorBase::for_each\(loop2d_t")
    serial = _line(tree_2_6, iterator, r"^void TensorIteratorBase::serial_for_each\(loop2d_t")
    internal_def = _line(tree_2_6, internal, r"^inline void serial_for_each\(")
    operator = _line(tree_2_6, loops, r"void operator\(\)\(char\*\* base", after=_line(tree_2_6, loops, r"^struct VectorizedLoop2d"))
    vectorized = _line(tree_2_6, loops, r"^vectorized_loop\(")
    expected = [  # (name ends with, definition file, definition line, call site file, call site line)
        ("cpu_kernel_vec", loops, vec_def, None, None),
        ("TensorIteratorBase::for_each", iterator, for_each, loops, _line(tree_2_6, loops, r"iter\.for_each\(make_vectorized_loop2d\(", after=vec_def)),
        ("TensorIteratorBase::serial_for_each", iterator, serial, iterator, _line(tree_2_6, iterator, r"serial_for_each\(loop, \{0, numel\}\)", after=for_each)),
        ("internal::serial_for_each", internal, internal_def, iterator, _line(tree_2_6, iterator, r"at::internal::serial_for_each\(", after=serial)),
        ("VectorizedLoop2d::operator()", loops, operator, internal, _line(tree_2_6, internal, r"loop\(ptrs\.data\(\), strides\.data\(\), step\[0\], step\[1\]\)", after=internal_def)),
        ("vectorized_loop", loops, vectorized, loops, _line(tree_2_6, loops, r"vectorized_loop\(data\.data\(\), size0, 0, op, vop\)", after=operator)),
    ]
    steps = list(best.steps)
    at = 0
    for name, file, line, site_file, site_line in expected:
        found = next(i for i in range(at, len(steps)) if steps[i].name.endswith(name) and steps[i].location.path == file)
        step = steps[found]
        assert step.location.line == line, (name, step.location, line)
        if site_file is not None:
            site = step.attrs["call_site"]
            assert (site.path, site.line) == (site_file, site_line), (name, site, site_line)
        at = found + 1
    # below the vectorized loop, the inner loop the Vectorized lambda calls: ufunc::add's Vectorized overload
    below = path("torch.add", "ufunc::add", context("cpu"))
    add_h = "aten/src/ATen/native/ufunc/add.h"
    overload = _line(tree_2_6, add_h, r"Vectorized<T>\s+add\s*\(")
    through_loop = [r for r in below.routes if any(s.name.endswith("::vectorized_loop") for s in r.steps)]
    assert through_loop and (through_loop[0].steps[-1].location.path, through_loop[0].steps[-1].location.line) == (add_h, overload)
    # the generated kernel calls cpu_kernel_vec for float32 from its Float case, at that line
    loop = next(s for s in steps if s.name == "cpu_kernel_vec")
    assert "ScalarType::Float" in loop.condition
    assert "cpu_kernel_vec(" in line_of(CallNode(loop.name, loop.kind, loop.attrs["call_site"]))


def test_add_reaches_the_vectorized_kernel_template_on_cuda(context, tree_2_6):
    """The generated add_kernel's gpu_kernel is followed through CUDALoops.cuh
    to the kernel template a profiler names, each launcher at its definition."""
    answer = path("torch.add", "vectorized_elementwise_kernel", context("cuda"))
    steps = list(answer.routes[0].steps)
    loops_cuh, cuda_loops = "aten/src/ATen/native/cuda/Loops.cuh", "aten/src/ATen/native/cuda/CUDALoops.cuh"
    expected = [
        ("gpu_kernel", loops_cuh, _line(tree_2_6, loops_cuh, r"^void gpu_kernel\(")),
        ("gpu_kernel_impl", cuda_loops, _line(tree_2_6, cuda_loops, r"^void gpu_kernel_impl\(")),
        ("gpu_kernel_impl_nocast", cuda_loops, _line(tree_2_6, cuda_loops, r"^void gpu_kernel_impl_nocast\(")),
        ("launch_vectorized_kernel", cuda_loops, _line(tree_2_6, cuda_loops, r"^static inline void launch_vectorized_kernel\(")),
        ("vectorized_elementwise_kernel", cuda_loops, _line(tree_2_6, cuda_loops, r"__global__ void vectorized_elementwise_kernel\(")),
    ]
    at = 0
    for name, file, line in expected:
        found = next(i for i in range(at, len(steps)) if steps[i].name.rsplit("::", 1)[-1] == name)
        assert (steps[found].location.path, steps[found].location.line) == (file, line), (name, steps[found].location)
        at = found + 1
    assert "ScalarType::Float" in next(s for s in steps if s.name == "gpu_kernel").condition


def test_mm_reaches_cublas_on_cuda(context):
    answer = path("torch.mm", "cublasSgemm", context("cuda"))
    golden = chain("mm-cuda-cublas")
    assert answer.routes and golden_in_order(answer.routes[0], golden) == len(golden.steps)


def test_mm_reaches_blas_on_cpu(context):
    """cpublas::gemm is overloaded per dtype: the route takes the overload whose
    arrays are float32's (`const float *a`), the one that calls sgemm_."""
    answer = path("torch.mm", "sgemm_", context("cpu"))
    golden = chain("mm-cpu-blas")
    best = answer.routes[0]
    assert golden_in_order(best, golden) == len(golden.steps)
    gemm = next(s for s in best.steps if s.name == "at::native::cpublas::gemm")
    text = gemm.location.disk_path.read_text().splitlines()
    signature = "\n".join(text[gemm.location.line - 1 : gemm.location.line + 8])
    assert "const float *a" in signature, signature
    check_lines(best)


def test_an_ambiguous_template_call_follows_the_dtypes_specialisation(context):
    """at::cuda::blas::gemm<scalar_t> for float32 is gemm<float>, not gemm<c10::complex<float>>."""
    from kernelmap.graph import down
    from kernelmap.graph.grow import grow
    from kernelmap.graph.path import _follow_candidates

    ctx = context("cuda")
    tree = grow(down._root_for("aten::mm", ctx), lambda n: _follow_candidates(down._expand_down(n, ctx), ctx), 12)
    followed, stack = [], [tree]
    while stack:
        node = stack.pop()
        if node.name == "at::cuda::blas::gemm":
            followed.append(node)
        stack.extend(node.children)
    assert [str(n.location) for n in followed] == ["aten/src/ATen/cuda/CUDABlas.cpp:1157"]
    assert "gemm<float>" in line_of(followed[0])


def test_routes_stay_on_the_device(context):
    """On the CPU, cuDNN is a branch for another device: no route, and that is an answer."""
    answer = path("torch.nn.Conv2d", "cudnnConvolutionForward", context("cpu"))
    assert answer.routes == () and answer.searched["routes"] == 0
    assert "no route" in render(answer, "text", width=120)


def test_operator_and_cpp_symbols_as_ends(context):
    answer = path("aten::_convolution", "aten::cudnn_convolution", context("cuda"))
    assert answer.routes[0].steps[-1].name == "aten::cudnn_convolution"
    answer = path("at::native::cudnn_convolution", "run_single_conv", context("cuda"))
    assert answer.routes[0].steps[0].name == "at::native::cudnn_convolution"
    assert answer.routes[0].steps[-1].name == "at::native::run_single_conv"
    check_lines(answer.routes[0])


def test_document_round_trips(conv_v7):
    doc = json.loads(render(conv_v7, "json"))
    assert doc["kernelmap"] == "path/1" and doc["routes"][0]["conditions"]
    again = answers.load(doc)
    assert isinstance(again, PathAnswer)
    assert again.routes[0].steps == conv_v7.routes[0].steps and again.searched == conv_v7.searched
    assert "<html" in render(conv_v7, "html").lower()


def test_text_at_a_fixed_width():
    """The renderer alone, on a small answer: exact text."""
    steps = (
        CallNode("aten::mm", NodeKind.OPERATOR, Location("aten/src/ATen/native/native_functions.yaml", 4000)),
        CallNode("at::native::addmm_impl_cpu_", NodeKind.KERNEL, Location("aten/src/ATen/native/LinearAlgebra.cpp", 1395), EdgeKind.DIRECT, "if (use_blas)"),
        CallNode("sgemm_", NodeKind.VENDOR, Location("aten/src/ATen/native/CPUBlas.cpp", 213), EdgeKind.VENDOR, None, (), {"library": "BLAS", "closed": False}),
    )
    answer = PathAnswer("aten::mm", "sgemm_", "cpu", (Route(steps),), (), {"nodes": 9, "depth": 48, "cut": "", "routes": 1, "more": 0})
    # the first route one line a step: the name and condition shortened, the location whole
    assert render(answer, "text", width=62) == (
        "aten::mm -> sgemm_ on cpu: 1 route\n"
        "\n"
        "route 1: 3 steps\n"
        "  1. aten::mm  aten/src/ATen/native/native_functions.yaml:4000\n"
        "  2. at::native:…  aten/src/ATen/native/LinearAlgebra.cpp:1395\n"
        "  3. sgemm_  <BLAS>  aten/src/ATen/native/CPUBlas.cpp:213\n"
        "(--all shows every route with its kinds, edges and conditions)\n"
    )
    assert render(answer, "text", width=62, full=True) == (
        "aten::mm -> sgemm_ on cpu: 1 route\n"
        "\n"
        "route 1: 3 steps\n"
        "  when if (use_blas)\n"
        "  1. aten::mm  aten/src/ATen/native/native_functions.yaml:4000\n"
        "       op, start\n"
        "  2. at::native::addmm_impl_cpu_\n"
        "       aten/src/ATen/native/LinearAlgebra.cpp:1395\n"
        "       kernel, via direct [if (use_blas)]\n"
        "  3. sgemm_  aten/src/ATen/native/CPUBlas.cpp:213\n"
        "       vendor <BLAS>, via vendor\n"
    )


def test_cli_exits(indexed_tree, generated):
    found = run_kernelmap("path", "torch.nn.Conv2d", "cudnnConvolutionForward", "--device", "cuda", "--source", TREE_NAME, "--limit", "1", "--width", "200")
    assert found.returncode == 0, found.stderr
    assert "route 1:" in found.stdout and "cudnnConvolutionForward" in found.stdout
    none = run_kernelmap("path", "torch.nn.Conv2d", "cudnnConvolutionForward", "--device", "cpu", "--source", TREE_NAME)
    assert none.returncode == 1 and "no route" in none.stdout
    unknown_to = run_kernelmap("path", "torch.nn.Conv2d", "cudnnNoSuchCall", "--device", "cuda", "--source", TREE_NAME)
    assert unknown_to.returncode == 2 and unknown_to.stderr.startswith("kernelmap: error: unknown name 'cudnnNoSuchCall'")
    unknown_from = run_kernelmap("path", "torch.nn.Conv2dd", "cudnnConvolutionForward", "--device", "cuda", "--source", TREE_NAME)
    assert unknown_from.returncode == 2 and unknown_from.stderr.count("\n") == 1
    as_json = run_kernelmap("path", "torch.add", "ufunc::add", "--device", "cpu", "--source", TREE_NAME, "--json")
    assert as_json.returncode == 0 and json.loads(as_json.stdout)["kernelmap"] == "path/1"


def test_a_cpp_target_without_an_index_says_why_not_unknown(tmp_path, generated):
    from tests.graph.conftest import no_tree_cache

    cache = no_tree_cache(tmp_path, generated)
    done = run_kernelmap("path", "torch.add", "ufunc::add", "--device", "cpu", env={"KERNELMAP_CACHE_DIR": str(cache)})
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and "need an indexed tree" in lines[0] and "unknown name" not in lines[0], done.stderr
