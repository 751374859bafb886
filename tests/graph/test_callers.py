"""Cause 12: bottom-up answers on the real 2.6.0 tree climb from loop machinery,
stub kernels and vendor calls through the generated wrapper, the binding and
the Python code up to the nn.Module, every step at a line that holds it."""

from __future__ import annotations

import pytest

from kernelmap import graph
from kernelmap.model import NodeKind
from tests.conftest import pastes_into
from tests.graph.conftest import line_of, paths_to, walk


def check_lines(tree):
    """Every located node's line names it: C++ definitions, wrappers and bindings
    (their generated files), Python functions (their `def`/`class`), call sites."""
    checked = 0
    for node, _ in walk(tree):
        if node.location is None or node.location.disk_path is None:
            continue
        short = node.name.rsplit("::", 1)[-1].rsplit(".", 1)[-1]
        if short in ("impl", "meta") or node.kind not in (NodeKind.KERNEL, NodeKind.WRAPPER, NodeKind.BINDING, NodeKind.PYTHON, NodeKind.MODULE, NodeKind.STUB):
            continue
        text = node.location.disk_path.read_text(errors="replace").splitlines()
        if pastes_into(text, node.location.line, short):  # a name the file's macro makes with `##`
            continue
        lines = text[node.location.line - 1: (node.location.end_line or node.location.line) + 2]
        head = lines[:3]  # a registration may spread its macro's arguments over lines
        if node.kind is not NodeKind.STUB:
            head = []  # a definition's location starts at its declaration: the name is before its first "("
            for text in lines:
                head.append(text)
                if "(" in text:
                    break
        assert short in "\n".join(head), (node.name, str(node.location))
        site = node.attrs.get("call_site")
        if node.kind in (NodeKind.PYTHON, NodeKind.MODULE) and site is not None:
            assert node.location.path == site.path and node.location.line <= site.line <= (node.location.end_line or site.line)
        checked += 1
    return checked


@pytest.fixture(scope="module")
def cudnn_up(context):
    return graph.callers("cudnnConvolutionForward", context("cuda"))


def test_cudnn_reaches_nn_conv2d_through_every_layer(cudnn_up):
    paths = paths_to(cudnn_up, lambda n: n.name == "torch.nn.modules.conv.Conv2d" and n.kind is NodeKind.MODULE)
    assert paths, "cudnnConvolutionForward is reached from nn.Conv2d"
    names = [n.name for n in paths[0]]
    for step in ("at::native::raw_cudnn_convolution_forward_out_32bit", "at::native::cudnn_convolution", "wrapper_CUDA__cudnn_convolution",
                 "aten::cudnn_convolution", "at::native::_convolution", "aten::conv2d", "THPVariable_conv2d", "torch.conv2d",
                 "torch.nn.functional.conv2d", "torch.nn.modules.conv.Conv2d._conv_forward", "torch.nn.modules.conv.Conv2d.forward"):
        assert step in names, f"{step} missing from {names}"
    assert names.index("wrapper_CUDA__cudnn_convolution") < names.index("aten::cudnn_convolution") < names.index("THPVariable_conv2d")
    binding = next(n for n in paths[0] if n.kind is NodeKind.BINDING)
    assert "THPVariable_conv2d" in line_of(binding)
    assert check_lines(cudnn_up) > 20


def test_callers_of_a_stub_kernel_registered_with_qualified_names(context):
    """REGISTER_DISPATCH(cpublas::gemm_stub, &cpublas::cpublas_gemm_impl) leads to gemm_stub, its callers, and mm."""
    tree = graph.callers("cpublas_gemm_impl", context("cpu"))
    assert tree.root.children, "more than the root"
    stub = tree.root.children[0]
    assert stub.kind is NodeKind.STUB and stub.name == "gemm_stub" and "cpublas_gemm_impl" in line_of(stub)
    gemms = [n for n in stub.children if n.name == "at::native::cpublas::gemm"]
    assert len(gemms) > 1, "each dtype's cpublas::gemm overload is a caller of its own"
    assert not any("cuda" in n.location.path for n, _ in walk(tree) if n.location is not None and n.kind is NodeKind.KERNEL and n.name.endswith("::gemm")), \
        "at::cuda::blas::gemm calls another gemm"
    assert paths_to(tree, lambda n: n.name == "aten::mm")
    check_lines(tree)


def test_callers_of_the_cuda_launcher(context):
    tree = graph.callers("launch_vectorized_kernel", context("cuda"))
    names = {n.name for n, _ in walk(tree)}
    assert "at::native::gpu_kernel_impl_nocast" in names
    assert len(names) > 3
    check_lines(tree)
    # a CUDA kernel is registered by its own file, never by a CPU file's kernel of the same name (elu_kernel)
    for path in paths_to(tree, lambda n: n.kind is NodeKind.STUB):
        kernel, stub = path[-2], path[-1]
        if kernel.kind is NodeKind.KERNEL and kernel.location is not None and "/cuda/" in kernel.location.path:
            assert stub.location.path == kernel.location.path or "/cuda/" in stub.location.path, (kernel.name, str(stub.location))


def test_callers_of_the_cpu_loop_reach_operators(context):
    tree = graph.callers("cpu_kernel_vec", context("cpu"), depth=8)
    kernels = {n.name for n in tree.root.children}
    assert len(kernels) > 10, "many kernels hand their loops to cpu_kernel_vec"
    assert any(n.kind is NodeKind.STUB for n, _ in walk(tree))
    assert paths_to(tree, lambda n: n.kind is NodeKind.OPERATOR), kernels
    check_lines(tree)


def test_the_root_of_a_cpp_symbol_is_its_definition_at_its_line(context):
    """`callers cpublas_gemm_impl` starts at the one definition, not a bare name;
    a symbol defined once per preprocessor branch (cudnn_convolution: ConvShared.cpp
    and the placeholder) lists each definition with its `#if`, callers below each."""
    tree = graph.callers("cpublas_gemm_impl", context("cpu"), depth=2)
    root = tree.root
    assert root.kind is NodeKind.KERNEL and root.location is not None and root.name.endswith("::cpublas_gemm_impl")
    assert check_lines(tree) >= 2
    assert root.children and root.children[0].kind is NodeKind.STUB

    tree = graph.callers("cudnn_convolution", context("cuda"), depth=3)
    definitions = [n for n in tree.root.children if n.kind is NodeKind.KERNEL]
    assert tree.root.location is None and len(definitions) == len(tree.root.children) >= 2
    assert {n.condition for n in definitions} == {"#if AT_CUDNN_ENABLED()", "#if !AT_CUDNN_ENABLED()"}
    assert all(n.location is not None and n.children for n in definitions)
    check_lines(tree)


def test_a_binding_python_hides_is_called_by_the_python_that_hides_it(context, tree_2_6):
    """torch.frobenius_norm is called as `_VF.frobenius_norm` in torch/functional.py's
    norm, the function `torch.norm` is (Note [bindings Python hides])."""
    tree = graph.callers("at::native::frobenius_norm", context("cpu"), depth=8)
    paths = paths_to(tree, lambda n: n.name == "torch.functional.norm" and n.kind is NodeKind.PYTHON)
    assert paths
    node = paths[0][-1]
    assert line_of(node).startswith("def norm(")
    site = node.attrs["call_site"]
    assert "_VF.frobenius_norm(" in (tree_2_6 / site.path).read_text().splitlines()[site.line - 1]
    check_lines(tree)
