"""What a composite kernel's calls of operators reach, on the real 2.6.0 tree:
the overload a number passed picks (Note [overloads told apart by a
literal]), an unqualified call of an operator's function (Note [unqualified
operator calls]), and a reduction's own loop beside the pointwise op that
follows it (Note [ranking a call's ends]). Ground truth is read from the
tree's files, never copied from output."""

from __future__ import annotations

import re

from kernelmap import graph
from kernelmap.model import NodeKind
from tests.graph.conftest import called_operator, walk
from tests.graph.test_exact import file_lines, steps

LAYER_NORM = "aten/src/ATen/native/layer_norm.cpp"


def _rms_norm(tree_2_6) -> tuple[str, int]:
    """rms_norm_symint's body in layer_norm.cpp and the line its body starts on."""
    text = (tree_2_6 / LAYER_NORM).read_text()
    start = text.index("Tensor rms_norm_symint(")
    return text[start : text.index("\n}\n", start)], text.count("\n", 0, start) + 1


def _calls_of(tree, caller_suffix: str):
    """The children of the first node whose name ends with `caller_suffix`, an
    operator's call as the operator (below the inline function and
    `at::_ops::<op>::call` it is called through)."""
    caller = next(n for n, _ in walk(tree) if n.name.endswith(caller_suffix))
    return [called_operator(c) for c in caller.children]


def test_a_number_passed_for_a_tensor_parameter_picks_the_scalar_overload(tree_2_6, context):
    """native_functions.yaml (read here) lists pow.Tensor_Tensor before
    pow.Tensor_Scalar, and rms_norm_symint calls `at::pow(upcasted_input, 2)`:
    a Tensor parameter cannot take the 2, so the call is pow.Tensor_Scalar's,
    at the line of the call."""
    yaml = (tree_2_6 / "aten/src/ATen/native/native_functions.yaml").read_text()
    assert yaml.index("- func: pow.Tensor_Tensor(Tensor self, Tensor exponent)") < yaml.index("- func: pow.Tensor_Scalar(Tensor self, Scalar exponent)")
    body, first = _rms_norm(tree_2_6)
    call = re.search(r"at::pow\(\w+, \d+\)", body)
    assert call is not None
    line = first + body.count("\n", 0, call.start())
    pows = [n for n in _calls_of(graph.stack("aten::rms_norm", context("cpu")), "::rms_norm_symint") if n.name.startswith("aten::pow.")]
    assert [n.name for n in pows] == ["aten::pow.Tensor_Scalar"]
    site = pows[0].attrs["call_site"]
    assert (site.path, site.line) == (LAYER_NORM, line)


def test_a_tensor_overload_stays_when_no_number_is_passed(tree_2_6, context):
    """rms_norm_symint's `upcasted_input.mul(rqrst_input)` passes a Tensor:
    mul.Tensor, the overload the name resolves to, stays."""
    body, _ = _rms_norm(tree_2_6)
    assert re.search(r"upcasted_input\.mul\(rqrst_input\)", body)
    names = {n.name for n in _calls_of(graph.stack("aten::rms_norm", context("cpu")), "::rms_norm_symint")}
    assert "aten::mul.Tensor" in names and "aten::mul.Scalar" not in names


def test_an_unqualified_call_of_an_operator_in_at_native_is_the_operators(tree_2_6, context):
    """rms_norm_symint, in namespace at::native, calls `rsqrt(at::pow(...)...)`.
    No at::native::rsqrt is defined: UnaryOps.cpp (read here) defines rsqrt as
    a structured kernel, so C++ finds at::rsqrt, the operator's function."""
    text = (tree_2_6 / LAYER_NORM).read_text()
    assert re.search(r"^namespace at::native \{", text, re.M)
    body, _ = _rms_norm(tree_2_6)
    assert re.search(r"[^\w:.]rsqrt\(at::pow\(", body)
    unary = (tree_2_6 / "aten/src/ATen/native/UnaryOps.cpp").read_text()
    assert re.search(r"CREATE_UNARY_TORCH_IMPL_FUNC\(rsqrt_out, rsqrt_stub\)", unary)
    assert not re.search(r"^Tensor rsqrt\(", unary, re.M)
    calls = _calls_of(graph.stack("aten::rms_norm", context("cpu")), "::rms_norm_symint")
    rsqrt = [n for n in calls if n.name == "aten::rsqrt"]
    assert rsqrt and rsqrt[0].kind is NodeKind.OPERATOR


def test_an_unqualified_call_on_scalars_is_no_operator(tree_2_6, context):
    """fmax_kernel_cuda (MaxMinElementwiseKernel.cu, read here) calls
    `fmax(a, b)` on the `scalar_t` arguments of its device lambda: CUDA's
    fmax, not aten::fmax, which its kernel implements."""
    text = (tree_2_6 / "aten/src/ATen/native/cuda/MaxMinElementwiseKernel.cu").read_text()
    body = text[text.index("void fmax_kernel_cuda("):]
    body = body[: body.index("\n}\n")]
    assert re.search(r"\(scalar_t a, scalar_t b\)[^{]*\{\s*return (?:::)?fmax\(a, b\);", body)
    tree = graph.stack("aten::fmax", context("cuda"))
    below = [n for n, path in walk(tree) if any(p.name.endswith("::fmax_kernel_cuda") for p in path[:-1])]
    assert below and not any(n.kind is NodeKind.OPERATOR for n in below)


def test_a_reductions_own_loop_ranks_with_the_loops_of_the_ops_beside_it(tree_2_6):
    """mean_out on the CPU (ReduceOps.cpp, read here) sums, then divides:
    `at::sum_out(...).div_(...)`. cascade_sum's `iter.parallel_reduce(...)`
    (SumKernel.cpp) is its kernel's own loop with nothing below it that does
    the work, so it ranks with div_'s cpu_kernel_vec, and comes first: the
    stub kernel is sum's."""
    reduce_ops = (tree_2_6 / "aten/src/ATen/native/ReduceOps.cpp").read_text()
    mean = reduce_ops[reduce_ops.index("TORCH_IMPL_FUNC(mean_out)"):]
    mean = mean[: mean.index("\n}\n")]
    assert re.search(r"at::sum_out\([^;]*\)\.div_\(", mean)
    sum_kernel = (tree_2_6 / "aten/src/ATen/native/cpu/SumKernel.cpp").read_text()
    kernel = re.search(r"REGISTER_DISPATCH\(sum_stub, &(\w+)\)", sum_kernel).group(1)
    assert "iter.parallel_reduce(" in sum_kernel
    roles, leaves = steps("aten::mean.dim", "cpu")
    assert roles["stub kernel"].name.endswith(f"::{kernel}")
    assert leaves[0].name == "at::TensorIteratorBase::parallel_reduce"
    assert "parallel_reduce(" in file_lines(leaves[0].location)[leaves[0].location.line - 1]
    assert [s.name for s in leaves[1:2]] == ["cpu_kernel_vec"]


def test_a_utility_targeted_follows_the_utilities_that_are_its_work(tree_2_6):
    """at::native::stack (TensorShape.cpp, read here) concatenates with
    at::cat, and zero_ (Fill.cpp) fills with fill_: both are tensor utilities,
    not expanded where other kernels call them, but they are the work of the
    utility asked for, whose stub kernel is theirs (read from CatKernel.cpp
    and FillKernel.cpp)."""
    shape = (tree_2_6 / "aten/src/ATen/native/TensorShape.cpp").read_text()
    stack = shape[shape.index("Tensor stack(TensorList tensors, int64_t dim)"):]
    assert "at::cat(" in stack[: stack.index("\n}\n")]
    fill = (tree_2_6 / "aten/src/ATen/native/Fill.cpp").read_text()
    zero = fill[fill.index("Tensor& zero_(Tensor &self)"):]
    assert "self.fill_(0)" in zero[: zero.index("\n}\n")]
    for op, stub, kernel_file in [("aten::stack", "cat_serial_stub", "aten/src/ATen/native/cpu/CatKernel.cpp"),
                                  ("aten::zero_", "fill_stub", "aten/src/ATen/native/cpu/FillKernel.cpp")]:
        kernel = re.search(rf"REGISTER_DISPATCH\({stub}, &(\w+)\)", (tree_2_6 / kernel_file).read_text()).group(1)
        roles, leaves = steps(op, "cpu")
        assert roles["stub kernel"].name.endswith(f"::{kernel}") and roles["stub kernel"].location.path == kernel_file, op
        assert leaves, op


def test_a_leaf_reached_while_growing_a_storage_says_so(tree_2_6):
    """empty_out (TensorFactories.cpp, read here) resizes its output with
    `result.resize_(size)`, a utility followed as empty's work; on CUDA a
    storage that grows copies its old data with cudaMemcpyAsync in
    resize_bytes_cuda (Resize.cpp, read here): the leaf says it is reached so."""
    factories = (tree_2_6 / "aten/src/ATen/native/TensorFactories.cpp").read_text()
    empty = factories[factories.index("Tensor& empty_out(IntArrayRef size,"):]
    assert "result.resize_(size);" in empty[: empty.index("\n}\n")]
    resize = (tree_2_6 / "aten/src/ATen/native/cuda/Resize.cpp").read_text()
    grow = resize[resize.index("void resize_bytes_cuda("):]
    assert "cudaMemcpyAsync(" in grow[: grow.index("\n}\n")]
    _, leaves = steps("aten::empty.out", "cuda")
    copies = [s for s in leaves if s.name == "cudaMemcpyAsync"]
    assert copies and copies[0].location.path == "aten/src/ATen/native/cuda/Resize.cpp"
    assert re.search(r"as at::native::\w*resize\w*_cuda grows a tensor's storage", copies[0].detail)
