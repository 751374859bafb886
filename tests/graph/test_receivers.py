"""A member call named like an operator is a dispatcher call only when its
receiver may be a Tensor: `exp.equal(0.0)` on a `const Scalar& exp` is
c10::Scalar::equal. Ground truth is read from the 2.6.0 tree."""

from __future__ import annotations

import re

from kernelmap import graph
from kernelmap.graph.sites import _tensor_like
from kernelmap.model import NodeKind
from tests.graph.conftest import called_operator


def test_a_scalars_method_named_like_an_operator_is_no_operator_call(context, tree_2_6):
    text = (tree_2_6 / "aten/src/ATen/native/Pow.cpp").read_text()
    impl = re.search(r"TORCH_IMPL_FUNC\(pow_Tensor_Scalar_out\) \(([^)]*)\) \{(.*?)\n\}", text, re.S)
    assert re.search(r"\bconst Scalar& exp\b", impl.group(1)) and "exp.equal(" in impl.group(2)
    assert "out.fill_(" in impl.group(2) and "out.copy_(" in impl.group(2)  # methods of the Tensor `out`
    for device in ("cpu", "cuda"):
        root = graph.stack("aten::pow.Tensor_Scalar", context(device, all_calls=True), depth=3).root
        [impl_node] = [n for _, n in _walk(root) if n.name == "at::native::structured_pow_Tensor_Scalar_out::impl"]
        ops = {called_operator(c).name for c in impl_node.children if called_operator(c).kind is NodeKind.OPERATOR}
        assert not any(name.startswith("aten::equal") for name in ops), ops
        assert any(name.startswith("aten::fill_") for name in ops) and any(name.startswith("aten::copy_") for name in ops), ops



def test_a_vectorized_lambdas_method_is_no_operator_call_though_a_scalar_lambda_above_declares_the_name(context, tree_2_6):
    """sigmoid_kernel (cpu/UnaryOpsKernel.cpp, read here) passes cpu_kernel_vec
    a scalar lambda of `scalar_t a` and then a Vectorized one of
    `Vectorized<scalar_t> a` that calls `a.exp()`; silu_kernel
    (cpu/Activation.cpp, read here) calls `x_vec.neg().exp()` on its
    `Vectorized<scalar_t> x_vec`; the softmax kernels (cpu/SoftMaxKernel.cpp,
    read here) call `(x - Vec(max_input)).exp()` on a `Vec x`: Vectorized's
    exp, never the exp operator."""
    unary = (tree_2_6 / "aten/src/ATen/native/cpu/UnaryOpsKernel.cpp").read_text()
    sigmoid = unary[unary.index("static void sigmoid_kernel("):]
    sigmoid = sigmoid[sigmoid.index("} else {"):sigmoid.index("\n}\n")]
    assert sigmoid.index("[=](scalar_t a)") < sigmoid.index("[=](Vectorized<scalar_t> a)") < sigmoid.index("a = a.exp();")
    activation = (tree_2_6 / "aten/src/ATen/native/cpu/Activation.cpp").read_text()
    silu = activation[activation.index("void silu_kernel("):]
    silu = silu[silu.index("} else {"):silu.index("\n}\n")]
    assert "[kOneVec](Vectorized<scalar_t> x_vec)" in silu and "x_vec.neg().exp()" in silu
    softmax = (tree_2_6 / "aten/src/ATen/native/cpu/SoftMaxKernel.cpp").read_text()
    assert "[max_input](Vec x) { return (x - Vec(max_input)).exp(); }" in softmax  # in _vec_log_softmax_lastdim
    assert re.search(r"\(Vec::loadu\(input_data \+ d \* dim_stride\) - max_vec\)\.exp\(\)", softmax)  # in _vec_softmax
    for op, kernel in (("aten::sigmoid", "::sigmoid_kernel"), ("aten::silu", "::silu_kernel"),
                       ("aten::_log_softmax", "::_vec_log_softmax_lastdim"), ("aten::_softmax", "::_vec_softmax")):
        root = graph.stack(op, context("cpu"), depth=8).root
        nodes = [n for _, n in _walk(root) if n.name.endswith(kernel)]
        called = [called_operator(c) for n in nodes for c in n.children if called_operator(c).kind is NodeKind.OPERATOR and called_operator(c).name == "aten::exp" and not c.attrs.get("branch")]
        assert nodes and not called, (op, [c.condition for c in called])

def test_types_that_may_be_tensors():
    for declared in ("Tensor", "at::Tensor", "TensorBase", "TensorArg", "OptionalTensorRef", "c10::MaybeOwned", "SparseTensor", "auto", "scalar_t"):
        assert _tensor_like(declared), declared
    for declared in ("Scalar", "c10::Scalar", "Vectorized", "TensorIterator", "TensorIteratorBase", "IntArrayRef", "Device", "ideep::tensor"):
        assert not _tensor_like(declared), declared


def _walk(node, parent=None):
    yield parent, node
    for child in node.children:
        yield from _walk(child, node)
