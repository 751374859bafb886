"""Kernels that a file's own macros define: `stack aten::sin` goes from the
structured kernel written by `CREATE_UNARY_TORCH_IMPL_FUNC(sin_out,
sin_stub)` through sin_stub to the CPU kernel that
`STATIC_IMPLEMENT_COMPLEX_KERNEL_WITHOUT_AVX512(sin)` defines and registers,
and to the CUDA one. Lines are read from the tree's files."""

from __future__ import annotations

import re

from kernelmap import graph
from kernelmap.model import NodeKind
from kernelmap.render.tree import render


def line_of(tree_2_6, path: str, pattern: str) -> int:
    lines = (tree_2_6 / path).read_text(errors="replace").splitlines()
    [line] = [i for i, text in enumerate(lines, 1) if re.search(pattern, text)]
    return line


def walk(node):
    yield node
    for child in node.children:
        yield from walk(child)


def test_sin_reaches_its_kernels_through_the_macros_that_write_them(context, tree_2_6):
    impl_line = line_of(tree_2_6, "aten/src/ATen/native/UnaryOps.cpp", r"^CREATE_UNARY_TORCH_IMPL_FUNC\(sin_out, sin_stub\)")
    cpu_line = line_of(tree_2_6, "aten/src/ATen/native/cpu/UnaryOpsKernel.cpp", r"^STATIC_IMPLEMENT_COMPLEX_KERNEL\w*\(sin\)")
    cuda_line = line_of(tree_2_6, "aten/src/ATen/native/cuda/UnaryGeometricSinKernel.cu", r"REGISTER_DISPATCH\(sin_stub,")
    for device, path, registered in (("cpu", "aten/src/ATen/native/cpu/UnaryOpsKernel.cpp", cpu_line),
                                     ("cuda", "aten/src/ATen/native/cuda/UnaryGeometricSinKernel.cu", cuda_line)):
        nodes = list(walk(graph.stack("aten::sin", context(device), depth=5).root))
        [impl] = [n for n in nodes if n.name == "at::native::structured_sin_out::impl"]
        assert (impl.location.path, impl.location.line) == ("aten/src/ATen/native/UnaryOps.cpp", impl_line)
        [stub] = [n for n in impl.children if n.kind is NodeKind.STUB]
        assert (stub.name, stub.location.line) == ("sin_stub", impl_line)
        kernels = [n for n in stub.children if n.kind is NodeKind.KERNEL and n.via is not None and n.via.value == "stub"]
        assert [k.location.path for k in kernels] == [path], device
        if device == "cpu":  # defined by the macro: at its use, which names `sin`
            assert kernels[0].location.line == registered and kernels[0].name.endswith("::sin_kernel")
        else:
            assert kernels[0].location.line < registered and kernels[0].name == "at::native::sin_kernel_cuda"


def test_a_recursion_cut_is_said_once(context):
    text = render(graph.stack("aten::sin", context("cuda"), depth=12), width=400)
    assert "(recursion cut: already on the path above)" in text
    assert "recursion cut: recursion cut" not in text


def test_a_member_call_in_a_macro_body_has_its_receivers_type_from_the_macro(context, tree_2_6):
    """exp_kernel is written by STATIC_IMPLEMENT_COMPLEX_KERNEL(op), whose body
    declares `TensorIteratorBase& iter` and calls `iter.for_each(...)` above
    the line of the use that defines the kernel: the receiver's type is read
    from the macro's lines."""
    from kernelmap.graph.down import receiver_type

    path = "aten/src/ATen/native/cpu/UnaryOpsKernel.cpp"
    lines = (tree_2_6 / path).read_text().splitlines()
    define = line_of(tree_2_6, path, r"^#define STATIC_IMPLEMENT_COMPLEX_KERNEL\(op\)")
    declared = re.search(r"op##_kernel\((\w+)& iter\)", "\n".join(lines[define - 1 : define + 3])).group(1)
    ctx = context("cpu")
    [kernel] = ctx.index.definitions("at::native::CPU_CAPABILITY::exp_kernel")
    sites = [s for s in ctx.index.calls_from(kernel) if s.callee == ".for_each"]
    assert sites and all(define < s.location.line < kernel.location.line for s in sites)
    assert all("iter.for_each(" in lines[s.location.line - 1] for s in sites)
    assert {receiver_type(s, kernel, ctx) for s in sites} == {declared}


def test_a_cpu_unary_kernel_reaches_its_vectorized_loop_through_a_macro_inside_a_macro(context, tree_2_6):
    """exp_kernel's body, written by STATIC_IMPLEMENT_COMPLEX_KERNEL(op), passes
    `IMPLEMENT_ITERATOR_LAMBDA(op)` to `iter.for_each`: that macro, used inside
    a line, calls `vml::v##op`. Expanded in its place, the call is
    `vml::vexp`, which `namespace at::native { inline namespace CPU_CAPABILITY`
    resolves to at::vml::CPU_CAPABILITY::vexp, defined by
    `IMPLEMENT_VML(exp)` (Note [inline namespaces]). Its lambda's `x.exp()` is
    on a Vectorized, never the exp operator again."""
    use = line_of(tree_2_6, "aten/src/ATen/native/cpu/UnaryOpsKernel.cpp", r"^STATIC_IMPLEMENT_COMPLEX_KERNEL\w*\(exp\)")
    vml = line_of(tree_2_6, "aten/src/ATen/cpu/vml.h", r"^IMPLEMENT_VML\(exp\)")
    for op, name in (("exp", "vexp"), ("log1p", "vlog1p")):
        nodes = list(walk(graph.stack(f"aten::{op}", context("cpu")).root))
        [kernel] = {n.name: n for n in nodes if n.name == f"at::native::CPU_CAPABILITY::{op}_kernel"}.values()
        loops = [n for n in walk(kernel) if n.name == f"at::vml::CPU_CAPABILITY::{name}"]
        assert loops, f"{op}_kernel reaches no {name}"
        assert all(n.location.path == "aten/src/ATen/cpu/vml.h" for n in loops)
        assert not [n for n in walk(kernel) if n is not kernel and n.name == f"aten::{op}"], "the Vectorized method read as the operator"
    nodes = list(walk(graph.stack("aten::exp", context("cpu")).root))
    [kernel] = [n for n in nodes if n.name == "at::native::CPU_CAPABILITY::exp_kernel"]
    assert kernel.location.line == use
    assert vml in {n.location.line for n in walk(kernel) if n.name == "at::vml::CPU_CAPABILITY::vexp"}
