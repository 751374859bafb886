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
    from kernelmap.graph.resolve import receiver_type

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
    vml = line_of(tree_2_6, "aten/src/ATen/cpu/vml.h", r"^IMPLEMENT_VML\(log1p\)")  # exp has MKL's specialisations too: the next test
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
    nodes = list(walk(graph.stack("aten::log1p", context("cpu")).root))
    assert vml in {n.location.line for n in nodes if n.name == "at::vml::CPU_CAPABILITY::vlog1p"}


def test_a_cpu_unary_kernel_ends_in_mkls_vector_math_for_its_precision(context, tree_2_6):
    """cpu/vml.h (read here) writes `vexp` twice: IMPLEMENT_VML(exp), a
    template over scalar_t, and IMPLEMENT_VML_MKL(exp, Exp), whose
    IMPLEMENT_VML_MKL_STUB specialises it for `float` and `double`, calling
    MKL's `vm##mkltype##mklop`: vmsExp and vmdExp. exp on the CPU ends in
    the one of the selected precision, at the use that writes it."""
    from kernelmap import api
    from tests.graph.conftest import TREE_NAME

    text = (tree_2_6 / "aten/src/ATen/cpu/vml.h").read_text()
    stub = text[text.index("#define IMPLEMENT_VML_MKL_STUB(op, mklop, type, mkltype)"):]
    assert "template <>" in stub[:200] and "vm##mkltype##mklop(" in stub[:600]
    assert re.search(r"IMPLEMENT_VML_MKL_STUB\(op, mklop, float, s\)\s*\\\s*IMPLEMENT_VML_MKL_STUB\(op, mklop, double, d\)", text)
    use = line_of(tree_2_6, "aten/src/ATen/cpu/vml.h", r"^IMPLEMENT_VML_MKL\(exp, Exp\)")
    for dtype, routine in (("float32", "vmsExp"), ("float64", "vmdExp")):
        answer = api.where("aten::exp", device="cpu", dtype=dtype, with_source=True, static=True, source=TREE_NAME)
        leaves = [s for s in answer.source if s.role == "leaf"]
        assert [(s.name, s.location.line) for s in leaves[:1]] == [(routine, use)], (dtype, leaves)
        # the name is written on no line: the leaf says the macro used on its line pastes it together
        assert routine not in text.splitlines()[use - 1] and leaves[0].detail == "MKL VM; its name is pasted together by the macro used on this line"
        assert all(s.name not in ("vmsExp", "vmdExp") or s.name == routine for s in leaves)
        nodes = list(walk(graph.stack("aten::exp", context("cpu", dtype=dtype)).root))
        vexp = {n.location.line for n in nodes if n.name == "at::vml::CPU_CAPABILITY::vexp"}
        assert vexp == {use}, (dtype, vexp)  # not IMPLEMENT_VML(exp)'s template: the specialisation for the dtype


def test_a_routine_written_for_another_precision_is_a_branch_for_another_dtype(context, tree_2_6):
    """exponential_kernel (cpu/DistributionKernels.cpp, read here) calls MKL's
    vdRngExponential under `if constexpr (std::is_same_v<scalar_t, double>)`
    and vsRngExponential otherwise: the BLAS naming convention (s and c single,
    d and z double) says which runs for a float32 or a float64 input."""
    from kernelmap.graph.dtypes import other_precision_reason

    text = (tree_2_6 / "aten/src/ATen/native/cpu/DistributionKernels.cpp").read_text()
    body = text[text.index("if constexpr (std::is_same_v<scalar_t, double>) {"):]
    assert body.index("vdRngExponential(") < body.index("} else {") < body.index("vsRngExponential(")
    for dtype, taken, other in (("float32", "vsRngExponential", "vdRngExponential"), ("float64", "vdRngExponential", "vsRngExponential")):
        nodes = list(walk(graph.stack("aten::exponential_", context("cpu", dtype=dtype)).root))
        assert [n for n in nodes if n.name == taken] and all(not n.attrs.get("branch") for n in nodes if n.name == taken)
        assert [n for n in nodes if n.name == other] and all("precision routine, not for" in n.attrs.get("branch", "") for n in nodes if n.name == other)
    assert other_precision_reason("cblas_zgemm", "blas", "float32") == "a double-precision routine, not for float32"
    assert other_precision_reason("sgeqrf_", "blas", "complex128") == "a single-precision routine, not for complex128"
    # a routine of no such convention, or a dtype of neither precision, decides nothing
    assert other_precision_reason("cublasDgemm", "cublas", "float32") is None and other_precision_reason("mkl_gemm_batched", "mkl", "float32") is None
    assert other_precision_reason("vmdExp", "mkl_vml", "bfloat16") is None and other_precision_reason("vmdExp", "mkl_vml", "float32") is not None


def test_a_kernels_own_loop_over_its_iterator_is_a_device_loop(context, tree_2_6):
    """cascade_sum (cpu/SumKernel.cpp, read here) runs its reduction in
    `iter.parallel_reduce(...)`, and the unary kernels IMPLEMENT_FLOAT_KERNEL
    writes (cpu/UnaryOpsKernel.cpp, read here) theirs in `iter.for_each(...)`,
    not through cpu_kernel_vec: each is a device loop, at TensorIteratorBase's
    definition of the method, called at the kernel's line; so is a loop over
    an `auto` the kernel sets to an iterator it builds."""
    from kernelmap import api
    from tests.graph.conftest import TREE_NAME

    summing = (tree_2_6 / "aten/src/ATen/native/cpu/SumKernel.cpp").read_text().splitlines()
    cascade = next(i for i, t in enumerate(summing, 1) if t.startswith("void cascade_sum("))
    called = next(i for i in range(cascade, len(summing)) if "iter.parallel_reduce(" in summing[i - 1])
    reduce_cpp = (tree_2_6 / "aten/src/ATen/native/TensorIteratorReduce.cpp").read_text().splitlines()
    defined = next(i for i, t in enumerate(reduce_cpp, 1) if t.startswith("void TensorIteratorBase::parallel_reduce("))
    answer = api.where("aten::sum.dim_IntList", device="cpu", with_source=True, static=True, source=TREE_NAME)
    leaves = [s for s in answer.source if s.role == "leaf"]
    assert [(s.name, s.location.path, s.location.line) for s in leaves[:1]] == [
        ("at::TensorIteratorBase::parallel_reduce", "aten/src/ATen/native/TensorIteratorReduce.cpp", defined)]
    loops = [n for n in walk(graph.stack("aten::sum.dim_IntList", context("cpu")).root) if n.name == "at::TensorIteratorBase::parallel_reduce"]
    assert loops and all(n.kind is NodeKind.DEVICE_LOOP and n.attrs["call_site"].line == called for n in loops)
    text = (tree_2_6 / "aten/src/ATen/native/cpu/UnaryOpsKernel.cpp").read_text()
    assert "iter.for_each(IMPLEMENT_ITERATOR_LAMBDA(op), grain_size);" in text[text.index("#define IMPLEMENT_FLOAT_KERNEL(op)"):]
    leaves = [s for s in api.where("aten::exp", device="cpu", dtype="bfloat16", with_source=True, static=True, source=TREE_NAME).source if s.role == "leaf"]
    assert "at::TensorIteratorBase::for_each" in [s.name for s in leaves]
    # an `auto` the kernel sets to the iterator it builds: compare_base_kernel_core's, which max.dim's kernel calls
    compare = (tree_2_6 / "aten/src/ATen/native/cpu/TensorCompareKernel.cpp").read_text()
    core = compare[compare.index("static inline void compare_base_kernel_core("):]
    core = core[: core.index("\n}\n")]
    assert core.index("auto iter = TensorIteratorConfig()") < core.index("iter.for_each(loop")
    leaves = [s for s in api.where("aten::max.dim", device="cpu", with_source=True, static=True, source=TREE_NAME).source if s.role == "leaf"]
    assert leaves and leaves[0].name == "at::TensorIteratorBase::for_each"
    # the machinery's own calls stay its steps: cpu_kernel_vec's for_each is no device loop of its own
    nodes = list(walk(graph.stack("aten::add.Tensor", context("cpu")).root))
    assert not [n for n in nodes if n.kind is NodeKind.DEVICE_LOOP and n.name.startswith("at::TensorIteratorBase::")]
