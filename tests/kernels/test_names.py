"""The kernel-name parser on tricky names: nested templates, lambdas,
anonymous namespaces, function pointers in template arguments, operators
with brackets in their names, mangled and truncated names."""

from __future__ import annotations

from kernelmap.kernels.names import demangle, lambda_owner, parse

ELEMENTWISE = (
    "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl<at::native::BinaryFunctor<float, float, float, "
    "at::native::binary_internal::MulFunctor<float> > >(at::TensorIteratorBase&, at::native::BinaryFunctor<float, float, float, "
    "at::native::binary_internal::MulFunctor<float> > const&)::{lambda(int)#1}>(int, at::native::gpu_kernel_impl<"
    "at::native::BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> > >(at::TensorIteratorBase&, "
    "at::native::BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> > const&)::{lambda(int)#1})"
)


def test_nested_templates_give_a_tree():
    k = parse(ELEMENTWISE)
    assert k.symbol == "at::native::elementwise_kernel"
    assert [a.text for a in k.args[:2]] == ["128", "2"]
    third = k.args[2]
    assert third.text.startswith("at::native::gpu_kernel_impl<") and third.text.endswith("::{lambda(int)#1}")
    heads = [a.head for a in k.walk()]
    assert "at::native::BinaryFunctor" in heads
    assert "at::native::binary_internal::MulFunctor" in heads
    assert not k.truncated


def test_lambda_owner_is_the_function_it_is_written_in():
    clamp = ("at::native::(anonymous namespace)::launch_clamp_scalar(at::TensorIteratorBase&, c10::Scalar, c10::Scalar, "
             "at::native::detail::ClampLimits)::{lambda()#1}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}")
    assert lambda_owner(clamp) == "at::native::(anonymous namespace)::launch_clamp_scalar"
    scatter = ("at::native::_cuda_scatter_gather_internal_kernel<true, float>::operator()<at::native::ReduceAdd>(at::TensorIterator&, "
               "long, long, long, at::native::ReduceAdd const&)::{lambda(int)#1}")
    assert lambda_owner(scatter) == "at::native::_cuda_scatter_gather_internal_kernel::operator()"


def test_anonymous_namespace_and_return_type():
    k = parse("void (anonymous namespace)::softmax_warp_forward<float, float, float, 1, false, false>(float*, float const*, int, int, int, bool const*, int, bool)")
    assert k.symbol == "(anonymous namespace)::softmax_warp_forward"
    assert [a.text for a in k.args] == ["float", "float", "float", "1", "false", "false"]
    k = parse("std::enable_if<!(false), void>::type internal::gemvx::kernel<int, int, float, float, float, float, false, true, true, false, 7, cublasGemvParams<cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float>, float> >(cublasGemvParams<int>)")
    assert k.symbol == "internal::gemvx::kernel"
    assert k.args[-1].head == "cublasGemvParams"


def test_function_pointer_and_operator_in_template_arguments():
    k = parse("void k<void (*)(float*, int), &foo::operator<, bar<(cub::BlockLoadAlgorithm)3> >(int)")
    assert k.symbol == "k"
    assert [a.text for a in k.args] == ["void (*)(float*, int)", "&foo::operator<", "bar<(cub::BlockLoadAlgorithm)3>"]
    assert k.args[2].args[0].text == "(cub::BlockLoadAlgorithm)3"


def test_truncated_names_close_what_is_open():
    cut = ELEMENTWISE[:180]
    k = parse(cut)
    assert k.truncated
    assert k.symbol == "at::native::elementwise_kernel"
    assert k.args[0].text == "128"
    assert parse("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::NormTwoOps<float, float, float>, unsigned int, float, 4> >(at::native::ReduceOp<float, at::nat").truncated


def test_plain_and_mangled_names():
    k = parse("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)")
    assert k.symbol == "ncclKernel_AllReduce_RING_LL_Sum_float" and k.args == ()
    assert parse("Memcpy HtoD (Pageable -> Device)").text == "Memcpy HtoD (Pageable -> Device)"
    mangled = "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEENS_6detail5ArrayIPcLi1EEEEEviT0_T1_"
    k = parse(mangled)
    assert k.mangled == mangled
    assert k.symbol == "at::native::vectorized_elementwise_kernel"
    assert [a.head for a in k.args] == ["4", "at::native::FillFunctor", "at::detail::Array"]
    assert demangle("_Znot a symbol") == "_Znot a symbol"


def test_hostile_nesting_is_linear_and_recursion_free():
    deep = "void k<" + "a<" * 20000 + "int" + ">" * 20000 + ">(int)"
    k = parse(deep)
    assert k.symbol == "k" and not k.truncated
    depth = 0
    a = k.args[0]
    while a.args:
        a = a.args[0]
        depth += 1
    assert depth == 20000 and a.text == "int"
