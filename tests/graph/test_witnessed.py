"""The static map as the installed binary runs it (issue "Witness it"): each
class of native frame torch 2.13's stacks show (captured under gdb, kept
outside the project) that the map lacked or got wrong, on the real 2.6.0
tree. Ground truth is read from the tree's files and generated files, and
the names a frame must have from the wheel's own symbol table (`nm`), never
copied from output."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from kernelmap import api, graph
from kernelmap.model import EdgeKind, NodeKind
from tests.graph.conftest import TREE_NAME, called_operator, walk


def line_at(location) -> str:
    """The line a location names, read from its file."""
    return location.disk_path.read_text(encoding="utf-8", errors="replace").splitlines()[location.line - 1]


@pytest.fixture(scope="session")
def binary_names() -> str:
    """The demangled names of the functions libtorch_cpu.so defines, one a line."""
    from kernelmap import env

    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("nm (binutils) is not installed")
    library = env.torch_install().torch_dir / "lib/libtorch_cpu.so"
    out = subprocess.run([nm, "--defined-only", "-C", str(library)], capture_output=True, text=True, check=True).stdout
    return "\n".join(line.split(" ", 2)[2] for line in out.splitlines() if line.count(" ") >= 2 and line.split(" ", 2)[1] in "tTwW")


def below(node, name_test):
    """The first node below `node` (itself included) `name_test` accepts, pre-order."""
    stack = [node]
    while stack:
        n = stack.pop()
        if name_test(n):
            return n
        stack.extend(reversed(n.children))
    return None


# -- 1. the autograd layer ------------------------------------------------------


def test_the_autograd_layer_runs_when_no_input_requires_grad(context, binary_names):
    """A release build runs with grad mode on: aten::exp from Python enters
    its VariableType wrapper, then `at::_ops::exp::redispatch` below the
    autograd keys, then the CPU wrapper, though no input requires grad; the
    wrapper says what it does then. Both frames are the binary's."""
    tree = graph.stack("aten::exp", context("cpu"))
    autograd = below(tree.root, lambda n: n.kind is NodeKind.WRAPPER and n.via is EdgeKind.AUTOGRAD)
    assert autograd is not None and autograd.name == "VariableType::exp"
    assert re.search(r"\bexp\(", line_at(autograd.location))
    assert "no input requires grad" in autograd.condition and "ExpBackward0" in autograd.condition
    redispatch = autograd.children[0]
    assert redispatch.kind is NodeKind.OPS_ENTRY and redispatch.name == "at::_ops::exp::redispatch"
    assert "exp::redispatch(" in line_at(redispatch.location)
    assert "redispatch" in line_at(redispatch.attrs["call_site"])  # the wrapper's line that redispatches
    assert [c.name for c in redispatch.children] == ["wrapper_CPU_exp"]
    assert "torch::autograd::VariableType::(anonymous namespace)::exp(" in binary_names
    assert "at::_ops::exp::redispatch(" in binary_names


def test_a_kernel_below_the_autograd_wrapper_calls_operators_below_it(tree_2_6, context):
    """at::native::sum (ReduceOps.cpp, read here) runs below sum's autograd
    wrapper (its yaml kernel is CompositeExplicitAutograd) and calls at::sum:
    sum.dim_IntList is reached without a VariableType wrapper of its own."""
    yaml = (tree_2_6 / "aten/src/ATen/native/native_functions.yaml").read_text()
    entry = yaml[yaml.index("- func: sum(Tensor self, *, ScalarType? dtype=None)"):]
    assert "CompositeExplicitAutograd: sum" in entry[: entry.index("\n- func:")]
    tree = graph.stack("aten::sum", context("cpu"))
    kernel = below(tree.root, lambda n: n.name == "at::native::sum")
    inner = below(kernel, lambda n: n.name == "aten::sum.dim_IntList")
    assert inner is not None
    assert not any(c.via is EdgeKind.AUTOGRAD for c in inner.children)


# -- 2. composites followed through every operator they call ---------------------


def test_tensor_to_reaches_the_copy_kernel(tree_2_6, context):
    """x.to(torch.float64) runs at::native::to -> at::_to_copy -> copy_ ->
    copy_impl -> copy_kernel (TensorConversions.cpp and Copy.cpp, read here):
    a composite whose calls are all tensor utilities does its work through
    them, so `path` finds the route."""
    conversions = (tree_2_6 / "aten/src/ATen/native/TensorConversions.cpp").read_text()
    assert "return at::_to_copy(" in conversions and ".copy_(self, non_blocking)" in conversions
    from kernelmap.graph.path import path

    answer = path("torch.Tensor.to", "at::native::copy_kernel", context("cpu"))
    assert answer.routes
    names = [s.name for s in answer.routes[0].steps]
    assert names.index("aten::_to_copy") < names.index("aten::copy_") < names.index("at::native::copy_impl")
    assert names[-1].endswith("copy_kernel")


def test_dropout_in_training_reaches_the_bernoulli_kernel(tree_2_6, context):
    """F.dropout(training=True) runs at::native::dropout -> _dropout_impl ->
    bernoulli_ -> bernoulli_scalar_kernel (Dropout.cpp, read here): the
    composite is followed through the in-place operator it calls."""
    source = (tree_2_6 / "aten/src/ATen/native/Dropout.cpp").read_text()
    assert ".bernoulli_(1 - p)" in source
    from kernelmap.graph.path import path

    answer = path("torch.nn.functional.dropout", "bernoulli_scalar_kernel", context("cpu"))
    assert answer.routes
    names = [s.name for s in answer.routes[0].steps]
    assert "aten::bernoulli_.float" in names and names[-1].endswith("bernoulli_scalar_kernel")


def test_an_operator_written_as_a_cpp_operator_is_called(tree_2_6, context):
    """margin_ranking_loss (Loss.cpp, read here) computes
    `-target * (input1 - input2)` on Tensors it declares: the `*` and `-`
    are Tensor's operators, which call mul.Tensor and sub.Tensor, at that line."""
    lines = (tree_2_6 / "aten/src/ATen/native/Loss.cpp").read_text().splitlines()
    line = next(i for i, t in enumerate(lines, 1) if "auto unclamped_output = (-target * (input1 - input2)" in t)
    tree = graph.stack("aten::margin_ranking_loss", context("cpu"))
    kernel = below(tree.root, lambda n: n.name == "at::native::margin_ranking_loss")
    called = {called_operator(c).name: c.attrs["call_site"].line for c in kernel.children if c.kind is NodeKind.HEADER}
    assert called.get("aten::mul.Tensor") == line and called.get("aten::sub.Tensor") == line


# -- 3. iteration internals -------------------------------------------------------


@pytest.mark.parametrize("op", ["exp", "tanh", "sqrt", "sort", "topk", "cumsum", "argmax"])
def test_a_kernels_own_loop_is_expanded(op, context):
    """A kernel's own `iter.for_each(...)` (or the loop of its reduction) runs
    TensorIteratorBase::for_each, serial_for_each and the loop it was given,
    as cpu_kernel_vec's does (TensorIterator.cpp, read here)."""
    tree = graph.stack(f"aten::{op}", context("cpu"))
    kernel = below(tree.root, lambda n: n.kind is NodeKind.KERNEL and n.via is EdgeKind.STUB)
    serial = below(kernel, lambda n: n.name == "at::TensorIteratorBase::serial_for_each" and n.location.path.endswith(".cpp"))
    assert serial is not None, op
    assert re.search(r"\bserial_for_each\(", line_at(serial.location))
    loop = below(serial, lambda n: n.attrs.get("loop") == "loop object")
    assert loop is not None and loop.location is not None


def test_sum_names_the_loop_that_runs(context):
    """sum on the CPU runs cascade_sum's `iter.parallel_reduce(lambda)`, whose
    lambda serial_for_each calls (SumKernel.cpp, read here): the lambda is a
    step, at the line of its head, in the call that hands it to parallel_reduce."""
    tree = graph.stack("aten::sum.dim_IntList", context("cpu"))
    reduce = below(tree.root, lambda n: n.name == "at::TensorIteratorBase::parallel_reduce")
    assert reduce is not None
    lam = below(reduce, lambda n: n.attrs.get("loop") == "loop object" and "cascade_sum" in n.name)
    assert lam is not None and "[&](char** data" in line_at(lam.location)
    lines = lam.location.disk_path.read_text().splitlines()
    call = max(i for i in range(1, lam.location.line + 1) if "parallel_reduce(" in lines[i - 1])
    assert lam.location.line - call < 3  # the lambda is the call's argument


# -- 4. helpers reached through a lambda or a template ------------------------------


def test_layer_norms_rowwise_moments_are_shown(context):
    """LayerNormKernelImplInternal (cpu/layer_norm_kernel.cpp) calls
    RowwiseMoments in the lambda it hands at::parallel_for; RowwiseMoments
    (cpu/moments_utils.h) runs the template RowwiseMomentsImpl<T, depth>,
    whose frame the binary shows: both are steps, below the lambda."""
    tree = graph.stack("aten::native_layer_norm", context("cpu"))
    threads = below(tree.root, lambda n: n.name == "at::parallel_for" and n.kind is NodeKind.DEVICE_LOOP)
    lam = below(threads, lambda n: n.attrs.get("loop") == "loop object")
    assert lam is not None and "parallel_for(" in line_at(lam.location)
    impl = below(lam, lambda n: n.name.endswith("::RowwiseMomentsImpl"))
    assert impl is not None and re.search(r"\bRowwiseMomentsImpl\(", line_at(impl.location))


# -- 5. library entries -------------------------------------------------------------


def _vendor(tree, name):
    return below(tree.root, lambda n: n.kind is NodeKind.VENDOR and n.name == name)


def test_library_entries_are_named(context, binary_names):
    """The library function each kernel's work ends in, at the line that
    calls it: bmm's cblas_sgemm_batch (in at::native::mkl_gemm_batched,
    PyTorch's own function, not MKL's), SLEEF's vectorised exp under sigmoid
    and softmax (Vectorized<float>::exp of vec512_float.h), and oneDNN's
    functions below ideep's convolution compute_v3 (the binary's names)."""
    ctx = context("cpu")
    gemm = _vendor(graph.stack("aten::bmm", ctx), "cblas_sgemm_batch")
    assert gemm is not None and "cblas_sgemm_batch(" in line_at(gemm.location)
    for op in ("aten::sigmoid", "aten::_softmax"):
        sleef = _vendor(graph.stack(op, ctx), "Sleef_expf16_u10")
        assert sleef is not None and sleef.attrs["library"] == "SLEEF" and "Sleef_expf16_u10(" in line_at(sleef.location), op
    compute = _vendor(graph.stack("aten::mkldnn_convolution", ctx), "ideep::convolution_forward::compute_v3")
    assert compute is not None and "compute_v3(" in line_at(compute.location)
    inner = [n.name for n in (below(compute, lambda n: n is not compute and n.kind is NodeKind.VENDOR),) if n]
    assert inner == ["ideep::convolution_forward::compute_dispatch"]
    for name in ("ideep::convolution_forward::compute_dispatch<", "dnnl_primitive_execute", "cblas_sgemm_batch"):
        assert name in binary_names


def test_the_standard_librarys_sort_and_memcpy_are_named(tree_2_6, context, binary_names):
    """sort's CPU kernel calls std::sort (SortingKernel.cpp, read here), which
    runs libstdc++'s std::__introsort_loop, a frame the binary keeps; an
    embedding's rows are copied with memcpy by index_select."""
    assert "std::sort(" in (tree_2_6 / "aten/src/ATen/native/cpu/SortingKernel.cpp").read_text()
    ctx = context("cpu")
    sort = _vendor(graph.stack("aten::sort", ctx), "std::sort")
    assert sort is not None and "std::sort(" in line_at(sort.location)
    assert [n.name for n in sort.children] == ["std::__introsort_loop"]  # the library's own frame, below the call
    assert "std::__introsort_loop<" in binary_names
    memcpy = _vendor(graph.stack("aten::embedding", ctx), "memcpy")
    assert memcpy is not None and "memcpy(" in line_at(memcpy.location)


# -- 6. generated inline functions ----------------------------------------------------


def test_the_inline_function_a_kernel_calls_is_a_step(tree_2_6, context, binary_names):
    """conv2d_symint (Convolution.cpp, read here) calls
    `at::convolution_symint(...)`, the inline function of the generated
    ops/convolution.h, which the binary keeps as a frame; it calls
    `at::_ops::convolution::call`, which enters the dispatcher."""
    source = (tree_2_6 / "aten/src/ATen/native/Convolution.cpp").read_text()
    body = source[source.index("at::Tensor conv2d_symint("):]
    assert "at::convolution_symint(" in body[: body.index("\n}\n")]
    tree = graph.stack("aten::conv2d", context("cpu"))
    kernel = below(tree.root, lambda n: n.name == "at::native::conv2d_symint")
    header = next(c for c in kernel.children if c.name == "at::convolution_symint")
    assert header.kind is NodeKind.HEADER and " convolution_symint(" in line_at(header.location)
    assert "at::convolution_symint(" in line_at(header.attrs["call_site"])
    entry = header.children[0]
    assert entry.name == "at::_ops::convolution::call" and "convolution::call(" in line_at(entry.location)
    assert called_operator(header).name == "aten::convolution"
    assert "at::convolution_symint(" in binary_names


# -- 7. constant arguments ----------------------------------------------------------------


def test_arms_a_constant_argument_rules_out_are_not_leaves(tree_2_6, context):
    """conv2d_symint passes `false` for convolution's `transposed`
    (Convolution.cpp, read here), which _convolution sets as
    `params.transposed` for _select_conv_backend, and conv2d's tensors are
    4-D: the transposed and 3-D backends cannot run, so their calls are
    branches, not leaves: no cudnnConvolutionBackwardData on CUDA, no
    batched gemm of the 3-D slow path on the CPU, whose 2-D slow path's gemm
    is a leaf."""
    source = (tree_2_6 / "aten/src/ATen/native/Convolution.cpp").read_text()
    body = source[source.index("at::Tensor conv2d_symint("):]
    assert re.search(r"at::convolution_symint\([^;]*dilation, false,", body[: body.index("\n}\n")])
    assert "params.transposed = transposed_;" in source
    cuda = [s.name for s in api.where("aten::conv2d", device="cuda", with_source=True, static=True, source=TREE_NAME).source if s.role == "leaf"]
    assert cuda and "cudnnConvolutionBackwardData" not in cuda
    cpu = [s.name for s in api.where("aten::conv2d", device="cpu", with_source=True, static=True, source=TREE_NAME).source if s.role == "leaf"]
    assert not {"mkl_gemm_batched", "cblas_sgemm_batch", "ideep::convolution_transpose_forward::compute_v3"} & set(cpu)
    assert "sgemm_" in cpu
    tree = graph.stack("aten::conv2d", context("cpu"))
    transposed = [n for n, _ in walk(tree) if n.name == "mkldnn_convolution_transpose_stub"]
    assert transposed and all("cannot run" in (n.attrs.get("branch") or "") for n in transposed)


def test_a_macro_launches_its_own_kernel(tree_2_6, context):
    """conv_depthwise3d_cuda uses DWCONV3D_FORWARD_DISPATCH_SPECIALIZATION,
    a macro defined above it whose body launches conv_depthwise3d_cuda_kernel
    (DepthwiseConv3d.cu, read here); the backward kernels' macros, defined
    after it, are not its launches."""
    lines = (tree_2_6 / "aten/src/ATen/native/cuda/DepthwiseConv3d.cu").read_text().splitlines()
    forward = next(i for i, t in enumerate(lines, 1) if "__global__ void conv_depthwise3d_cuda_kernel(" in t)
    tree = graph.stack("at::native::conv_depthwise3d_cuda", context("cuda"))
    launches = [n for n, _ in walk(tree) if n.kind is NodeKind.LAUNCH]
    assert launches and {n.name for n in launches} == {"conv_depthwise3d_cuda_kernel"}
    assert {n.location.line for n in launches} == {forward}


# -- every step keeps its call line -----------------------------------------------------------


def test_every_step_keeps_the_line_it_is_called_from(context):
    """Conv2d._conv_forward calls F.conv2d on a line of conv.py: the functional's
    step keeps that line beside its definition, as a kernel's calls keep theirs."""
    tree = graph.stack("torch.nn.Conv2d", context("cpu"))
    functional = below(tree.root, lambda n: n.name == "torch.nn.functional.conv2d")
    site = functional.attrs["call_site"]
    assert site.path == "torch/nn/modules/conv.py" and "F.conv2d(" in line_at(site)
    assert functional.location.path == "torch/nn/functional.py"
    kernel = below(tree.root, lambda n: n.name == "at::native::conv2d_symint")
    for child in kernel.children:
        if child.kind is NodeKind.HEADER:
            assert child.attrs["call_site"].path == kernel.location.path
