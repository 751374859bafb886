"""An exact call graph on the real 2.6.0 tree (issue 16): the build's `#if`
alternative, the overload the schema names, the template specialisation of
the dtype, the receiver's method, no bitset taken for an operator, and
where's stub kernel on the path the call takes. Ground truth is read from the
tree's files, never copied from output."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kernelmap import api, graph
from tests.graph.conftest import TREE_NAME, paths_to, walk


def file_lines(location) -> list[str]:
    return location.disk_path.read_text(encoding="utf-8", errors="replace").splitlines()


def enclosing_if(location) -> str | None:
    """The condition the innermost open `#if` above `location` puts on it, as
    written (`#if X`), or `#else of #if X` when it lies in the #else branch."""
    depth, in_else = 0, False
    for text in reversed(file_lines(location)[: location.line - 1]):
        s = text.strip()
        if s.startswith("#endif"):
            depth += 1
        elif s.startswith("#else") and depth == 0:
            in_else = True
        elif s.startswith(("#if", "#ifdef", "#ifndef")):
            if depth == 0:
                return f"#else of {s}" if in_else else s
            depth -= 1
    return None


def taken(guard: str, macro: str) -> bool:
    """`#if MACRO()` or `#else of #if !MACRO()`: the branch compiled when MACRO is 1."""
    negated = guard.replace(" ", "").startswith(("#if!", "#elseof#if!"))
    return macro in guard and negated == guard.startswith("#else")


def signature(location, name: str) -> str:
    """The parameter text of the definition at `location`, read from the file."""
    text = "\n".join(file_lines(location)[location.line - 1 : location.line + 12])
    start = re.search(rf"\b{re.escape(name)}\s*\(", text).end()
    depth, i = 1, start
    while depth:
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        i += 1
    return text[start : i - 1]


def steps(op: str, device: str, dtype: str = "float32"):
    answer = api.where(op, device=device, dtype=dtype, with_source=True, static=True, source=TREE_NAME)
    return {s.role: s for s in answer.source if s.role != "leaf"}, [s for s in answer.source if s.role == "leaf"]


# -- cause 2: the build configuration ---------------------------------------


def test_build_configuration_is_read_from_the_trees_cmake(indexed_tree):
    from kernelmap.source.config import build_config

    root = Path(indexed_tree.root)
    cmake = (root / "CMakeLists.txt").read_text()
    cudnn = re.search(r'cmake_dependent_option\(USE_CUDNN "[^"]*" (\w+) "(\w+)" (\w+)\)', cmake)
    assert cudnn and cudnn.group(2) == "USE_CUDA"
    assert "@AT_CUDNN_ENABLED@" in (root / "aten/src/ATen/cuda/CUDAConfig.h.in").read_text()
    cuda, cpu = build_config(root, "cuda"), build_config(root, "cpu")
    assert cuda.value("AT_CUDNN_ENABLED") == (cudnn.group(1) == "ON")
    assert cpu.value("AT_CUDNN_ENABLED") == (cudnn.group(3) == "ON")
    assert cuda.evaluate("!AT_CUDNN_ENABLED()") is False and cpu.evaluate("!AT_CUDNN_ENABLED()") is True
    assert cuda.evaluate("defined(USE_ROCM)") is False and build_config(root, "rocm").evaluate("defined(USE_ROCM)") is True
    assert cpu.evaluate("C10_MOBILE") is False
    assert cuda.evaluate("CUDA_VERSION >= 12000") is None  # a macro the model does not know: undecided
    assert "CMakeLists.txt" in cuda.why("AT_CUDNN_ENABLED()")



def test_apples_phone_build_is_not_compiled(tree_2_6, context):
    """c10/macros/Macros.h (read here) defines C10_IOS only for Apple's phones;
    cpublas::gemm (CPUBlas.cpp, read here) calls cblas_sgemm under `#if C10_IOS`
    and sgemm_ otherwise: a Linux release build compiles sgemm_ only."""
    macros = (tree_2_6 / "c10/macros/Macros.h").read_text()
    assert re.search(r"TARGET_OS_IPHONE\)\)\s*\n#define C10_IOS 1", macros)
    lines = (tree_2_6 / "aten/src/ATen/native/CPUBlas.cpp").read_text().splitlines()
    calls = [i for i, t in enumerate(lines) if "cblas_sgemm(" in t]
    opened = [i for i, t in enumerate(lines) if t.strip() == "#if C10_IOS"]
    # each call lies between an `#if C10_IOS` and that block's `#else`, with no other directive between
    assert calls and all(any(o < c and all(not t.strip().startswith("#") for t in lines[o + 1 : c]) for o in opened) for c in calls)
    ends = graph.call_ends(graph.stack("aten::mm", context("cpu")))
    assert "sgemm_" in [e.node.name for e in ends] and "cblas_sgemm" not in [e.node.name for e in ends]

def test_installed_torch_config_decides_its_own_device(indexed_tree):
    from kernelmap import env
    from kernelmap.source.config import build_config, installed_device

    install = env.torch_install()
    device = installed_device(install.site_packages)
    header = (install.site_packages / "torch/include/ATen/Config.h").read_text()
    mkldnn = int(re.search(r"#define AT_MKLDNN_ENABLED\(\) (\d)", header).group(1))
    config = build_config(Path(indexed_tree.root), device, install.site_packages)
    assert config.value("AT_MKLDNN_ENABLED") == mkldnn
    assert "installed torch" in config.sources["AT_MKLDNN_ENABLED"]


@pytest.mark.parametrize(
    "op, device, macro",
    [("aten::cudnn_convolution", "cuda", "AT_CUDNN_ENABLED"), ("aten::cudnn_batch_norm", "cuda", "AT_CUDNN_ENABLED"),
     ("aten::mkldnn_convolution", "cpu", "AT_MKLDNN_ENABLED")],
)
def test_where_names_the_kernel_the_build_compiles_not_the_placeholder(context, op, device, macro):
    roles, _ = steps(op, device)
    entry = roles["entry kernel"]
    guard = enclosing_if(entry.location)
    assert guard is not None and taken(guard, macro), (entry, guard)
    assert entry.name.rsplit("::", 1)[-1] in file_lines(entry.location)[entry.location.line - 1]
    # the placeholder is still in the tree, collapsed with its condition
    tree = graph.stack(op, context(device))
    placeholders = [n for n, _ in walk(tree) if n.kind == "kernel" and n.location and n.name == entry.name
                    and enclosing_if(n.location) and not taken(enclosing_if(n.location), macro)]
    assert placeholders and all("not compiled" in (n.attrs.get("collapsed") or n.attrs.get("branch") or "") for n in placeholders)
    assert all(f"!{macro}" in n.attrs.get("collapsed", n.attrs.get("branch", "")) for n in placeholders)


# -- cause 3: overloads by signature ----------------------------------------


@pytest.mark.parametrize("op, name", [("aten::sort", "sort"), ("aten::transpose.int", "transpose")])
def test_where_chooses_the_overload_the_schema_names(context, op, name):
    roles, _ = steps(op, "cpu")
    entry = roles["entry kernel"]
    assert "Dimname" not in signature(entry.location, name)
    # the Dimname overload exists in the tree under the same name
    ix = context("cpu").index
    named = [d for d in ix.definitions(f"at::native::{name}") if "Dimname" in signature(d.location, name)]
    assert named and all(d.location != entry.location for d in named)


@pytest.mark.parametrize("op, scalars", [("aten::where.self", []), ("aten::where.ScalarSelf", [1]), ("aten::where.ScalarOther", [2])])
def test_where_tells_overloads_of_one_arity_apart_by_their_tensor_and_scalar_arguments(context, op, scalars):
    """TensorCompare.cpp defines four at::native::where of three arguments
    (read here); each overload of aten::where runs the one whose Tensor and
    Scalar arguments are the schema's."""
    roles, _ = steps(op, "cpu")
    entry = roles["entry kernel"]
    params = [p.strip() for p in signature(entry.location, "where").split(",")]
    assert [i for i, p in enumerate(params) if "Scalar" in p] == scalars and len(params) == 3
    ix = context("cpu").index
    others = [d for d in ix.definitions("at::native::where") if d.location != entry.location
              and d.location.path == entry.location.path and len(signature(d.location, "where").split(",")) == 3]
    assert len(others) == 3


def test_an_argument_a_call_returns_tells_overloads_apart(tree_2_6, context):
    """rsub's Scalar overload (BinaryOps.cpp, read here) calls native::rsub
    with `wrapped_scalar_tensor(other)`, which ScalarOps.h (read here) declares
    to return a Tensor: the Tensor overload, not itself."""
    ops = (tree_2_6 / "aten/src/ATen/ScalarOps.h").read_text()
    assert re.search(r"inline Tensor wrapped_scalar_tensor\(", ops)
    binary = (tree_2_6 / "aten/src/ATen/native/BinaryOps.cpp").read_text()
    scalar = binary.index("Tensor rsub(const Tensor& self, const Scalar& other, const Scalar& alpha)")
    assert "native::rsub(self, wrapped_scalar_tensor(other), alpha)" in binary[scalar : scalar + 200]
    tensor_line = binary[: binary.index("Tensor rsub(const Tensor& self, const Tensor& other, const Scalar& alpha)")].count("\n") + 1
    tree = graph.stack("aten::rsub.Scalar", context("cpu"))
    called = [n for n, _ in walk(tree) if n.name == "at::native::rsub" and n.via == "direct"]
    assert [n.location.line for n in called] == [tensor_line]


def test_a_function_named_in_a_comment_is_not_passed_as_an_argument(tree_2_6, context):
    """_linalg_check_errors (BatchLinearAlgebra.cpp, read here) names
    `inverse` in a comment, `// inv, inverse, cholesky_inverse, etc.`: no call
    of at::native::inverse."""
    text = (tree_2_6 / "aten/src/ATen/native/BatchLinearAlgebra.cpp").read_text()
    body = text[text.index("void _linalg_check_errors("):]
    assert "// inv, inverse, cholesky_inverse, etc." in body[: body.index("\n}\n")]
    tree = graph.stack("aten::_linalg_check_errors", context("cuda"))
    assert not [n for n, _ in walk(tree) if n.name == "at::native::inverse"]
    assert [n for n, _ in walk(tree) if n.name == "aten::any"]


# -- cause 5: template specialisations per dtype -----------------------------


@pytest.mark.parametrize("dtype, spelled", [("float32", "float"), ("bfloat16", "at::BFloat16")])
def test_template_gemm_resolved_by_dtype_reaches_cublas_under_mm(context, dtype, spelled):
    tree = graph.stack("aten::mm", context("cuda", dtype=dtype))
    gemms = [n for n, _ in walk(tree) if n.name == "at::cuda::blas::gemm" and n.kind == "kernel"]
    assert gemms, "at::cuda::blas::gemm<scalar_t> not resolved"
    for n in gemms:
        assert f"gemm<{spelled}>(" in file_lines(n.location)[n.location.line - 1]
        assert "gemm<scalar_t>(" in file_lines(n.attrs["call_site"])[n.attrs["call_site"].line - 1]  # not the local `gemm(&params)`
    below = paths_to(tree, lambda n: n.kind == "vendor" and n.attrs.get("library") in ("cuBLAS", "cuBLASLt") and "gemm" in n.name.lower())
    assert any(any(p.name == "at::cuda::blas::gemm" for p in path) for path in below)


def test_cpublas_gemm_overload_by_dtype_reaches_blas_on_cpu(context):
    tree = graph.stack("aten::mm", context("cpu"))
    gemms = [n for n, _ in walk(tree) if n.name == "at::native::cpublas::gemm" and n.kind == "kernel"]
    assert gemms
    for n in gemms:
        params = signature(n.location, "gemm")
        assert "float *c" in params or "float* c" in params, params
        assert not re.search(r"double|Half|BFloat16|complex|int64_t \*", params)
    assert not [n for n, _ in walk(tree) if n.kind == "ambiguous" and n.name.endswith("cpublas::gemm")]


# -- cause 8: member calls on typed receivers --------------------------------


def test_method_calls_on_conv_params_are_followed(context):
    tree = graph.stack("at::native::_select_conv_backend", context("cuda"), depth=2)
    found = [n for n, _ in walk(tree) if n.name.endswith("ConvParams::use_cudnn")]
    assert found
    sites = []
    for n in found:
        assert re.search(r"\buse_cudnn\s*\(", file_lines(n.location)[n.location.line - 1])
        site = n.attrs["call_site"]
        sites.append(file_lines(site)[site.line - 1])
        assert re.search(r"\buse_cudnn\s*\(", sites[-1])
    assert any(re.search(r"\bparams\.use_cudnn\s*\(", text) for text in sites)
    # the struct holding it is ConvParams, as the file says
    assert "ConvParams" in "\n".join(file_lines(found[0].location)[: found[0].location.line])


# -- cause 9: a bitset's flip is no aten::flip -------------------------------


def test_sum_does_not_reach_flip(context):
    tree = graph.stack("aten::sum.dim_IntList", context("cpu"))
    assert not [n for n, _ in walk(tree) if n.name == "aten::flip"]
    roles, _ = steps("aten::sum.dim_IntList", "cpu")
    stub = roles["stub kernel"]
    assert "flip" not in stub.name
    # the kernel sum_stub registers on CPU, as the tree's REGISTER_DISPATCH says
    short = stub.name.rsplit("::", 1)[-1]
    registered = [line for line in file_lines(stub.location) if re.search(rf"REGISTER_\w*DISPATCH\(\s*sum_stub\s*,\s*&?{short}\b", line)]
    assert registered


# -- cause 14: the stub kernel on the path to the call's ends ----------------


def test_where_conv2d_cpu_names_no_bias_add_as_its_stub_kernel(context):
    roles, leaves = steps("aten::conv2d", "cpu")
    stub = roles.get("stub kernel")
    assert stub is None or "add" not in stub.name.rsplit("::", 1)[-1], stub
    # add's stub is in the tree (the bias add), just not where the convolution goes
    tree = graph.stack("aten::conv2d", context("cpu"))
    assert [n for n, _ in walk(tree) if n.kind == "stub" and n.name == "add_stub"] or stub is None


def test_where_add_cpu_still_names_its_stub_kernel(context):
    roles, _ = steps("aten::add.Tensor", "cpu")
    stub = roles["stub kernel"]
    assert "add_kernel" in stub.name
    assert "add_kernel" in file_lines(stub.location)[stub.location.line - 1]


def test_where_mm_cpu_names_no_elementwise_stub_for_a_gemm(context):
    """mm on CPU ends in BLAS through cpublas::gemm, no stub: mul_stub of an
    `if (beta != 1)` scaling is not its stub kernel."""
    roles, leaves = steps("aten::mm", "cpu")
    assert "stub kernel" not in roles or "mul" not in roles["stub kernel"].name
    assert leaves and leaves[0].name in file_lines(leaves[0].location)[leaves[0].location.line - 1]


# -- cause 7: device loops as nodes ------------------------------------------


def test_gpu_kernel_is_followed_into_the_cuda_kernel_templates(context):
    tree = graph.stack("aten::mul.Tensor", context("cuda"))
    loops = [n for n, _ in walk(tree) if n.kind == "device_loop" and n.name == "gpu_kernel" and n.children]
    assert loops
    for n in loops:
        assert re.search(r"\bgpu_kernel\s*\(", file_lines(n.location)[n.location.line - 1])
        assert n.location.path.endswith("Loops.cuh")
    wanted = {"vectorized_elementwise_kernel", "unrolled_elementwise_kernel", "elementwise_kernel"}
    launches = [n for n, _ in walk(tree) if n.kind == "launch" and n.name in wanted]
    assert {n.name for n in launches} == wanted
    for n in launches:  # each at its __global__ template in CUDALoops.cuh
        assert n.location.path.endswith("CUDALoops.cuh")
        assert n.name in file_lines(n.location)[n.location.line - 1]
        assert "__global__" in "\n".join(file_lines(n.location)[n.location.line - 3 : n.location.line])


def test_cpu_stub_shows_how_the_capability_is_chosen(context):
    tree = graph.stack("aten::sum.dim_IntList", context("cpu"))
    stubs = [n for n, _ in walk(tree) if n.kind == "stub" and n.name == "sum_stub" and n.children]
    assert stubs
    call = stubs[0].children[0]
    assert call.name == "at::native::DispatchStub::operator()"
    assert "operator()" in file_lines(call.location)[call.location.line - 1]
    choose = call.children[0]
    assert choose.name.endswith("choose_cpu_impl") and "choose_cpu_impl" in file_lines(choose.location)[choose.location.line - 1]


# -- device tests in conditions ------------------------------------------------


def call_line(node) -> str:
    site = node.attrs.get("call_site") or node.location
    return file_lines(site)[site.line - 1]


def test_else_of_another_devices_test_is_the_path_this_device_takes(context):
    """`if (input_.is_cuda() && half) ... else ...`: the else is every other device's path."""
    tree = graph.stack("at::native::softmax", context("cpu"), depth=3)
    calls = [n for n, _ in walk(tree) if n.name == "aten::_softmax"]
    guarded = [n for n in calls if n.condition and "is_cuda()" in n.condition and "&&" in n.condition]
    assert guarded
    for n in guarded:
        assert re.search(r"\b_softmax\s*\(", call_line(n)), call_line(n)
        assert n.condition.startswith("else of ") != bool(n.attrs.get("branch")), n.condition
    followed = [n for n in guarded if n.condition.startswith("else of ")]
    assert followed and followed[0].children  # expanded on the CPU


def test_a_test_for_the_cpu_is_another_devices_branch_on_cuda(context):
    """structured_mean_out::impl sums and divides `if (self.device().is_cpu())`;
    on CUDA the mean goes to mean_stub's kernel instead."""
    roles, _ = steps("aten::mean.dim", "cuda")
    stub = roles["stub kernel"]
    short = stub.name.rsplit("::", 1)[-1]
    assert [line for line in file_lines(stub.location) if re.search(rf"REGISTER_\w*DISPATCH\(\s*mean_stub\s*,\s*&?{short}\b", line)]
    cpu_tree = graph.stack("aten::mean.dim", context("cpu"), depth=4)
    cuda_tree = graph.stack("aten::mean.dim", context("cuda"), depth=4)
    for tree, is_branch in ((cpu_tree, False), (cuda_tree, True)):
        under = [n for n, _ in walk(tree) if n.condition and "is_cpu()" in n.condition and n.kind == "op"]
        assert under
        for n in under:
            assert "is_cpu()" in "\n".join(file_lines(n.attrs.get("call_site") or n.location)[: (n.attrs.get("call_site") or n.location).line])
            assert bool(n.attrs.get("branch")) == (is_branch and not n.condition.startswith("else of ")), (n.name, n.condition)


def test_a_negated_or_alternative_rocm_test_is_no_branch_for_another_device():
    from kernelmap.graph.rules import other_device_reason

    for condition in ("!defined(USE_ROCM)", "defined(USE_MEM_EFF_ATTENTION) && !defined(USE_ROCM)",
                      "defined(CUDART_VERSION) || defined(USE_ROCM)", "AT_CUDNN_ENABLED() || AT_ROCM_ENABLED()",
                      "!(defined(USE_ROCM) || defined(_MSC_VER) || (defined(CUDA_VERSION) && CUDA_VERSION < 11080))"):
        assert other_device_reason(condition, "cuda") is None, condition
    for condition in ("defined(USE_ROCM)", "AT_MKLDNN_ENABLED()", "if (self.is_mps() || self.is_xpu())", "!(!defined(USE_ROCM))"):
        assert other_device_reason(condition, "cuda"), condition
    assert other_device_reason("defined(__CUDACC__) || defined(__HIPCC__)", "cpu")


def test_cholesky_on_cuda_reaches_cusolver_under_its_cuda_or_rocm_test(tree_2_6, context):
    """CUDASolver.cpp (read here) calls cusolverDnSpotrf under `#if
    defined(CUDART_VERSION) || defined(USE_ROCM)`, which a CUDA build compiles:
    linalg_cholesky_ex on CUDA reaches it."""
    text = (tree_2_6 / "aten/src/ATen/native/cuda/linalg/CUDASolver.cpp").read_text()
    assert "defined(CUDART_VERSION) || defined(USE_ROCM)" in text and "cusolverDnSpotrf(" in text
    roles, leaves = steps("aten::linalg_cholesky_ex", "cuda")
    assert roles["stub kernel"].name.endswith("cholesky_kernel")
    potrf = [leaf for leaf in leaves if leaf.name.startswith("cusolverDn") and "potrf" in leaf.name]
    assert potrf
    for leaf in potrf:
        assert f"{leaf.name}(" in file_lines(leaf.location)[leaf.location.line - 1]


# -- overloads by the call's argument count -----------------------------------


def test_call_reaches_the_overload_its_arguments_fit(context):
    """`at::sort(self, false, dim, descending)` passes four arguments: the
    schema of aten::sort takes three, aten::sort.stable's four."""
    tree = graph.stack("at::native::sort", context("cpu"), depth=3)
    calls = [n for n, _ in walk(tree) if n.kind == "op" and n.name.startswith("aten::sort")]
    assert calls
    ctx = context("cpu")
    for n in calls:
        line = call_line(n)
        args = re.search(r"\bat::sort\s*\((.*)\)", line).group(1)
        count = args.count(",") + 1
        schema = ctx.catalog.resolve(n.name)[0].schema
        params = [a for a in re.search(r"\((.*)\)\s*->", schema).group(1).split(",") if a.strip() != "*"]
        assert len(params) == count, (line, schema)
        assert sum("=" not in a for a in params) <= count
    assert any(n.name == "aten::sort.stable" and n.children for n in calls)


# -- kernels named after `index` are work, not plumbing -----------------------


def test_index_select_is_followed_to_its_kernel(context):
    tree = graph.stack("aten::embedding", context("cuda"))
    calls = [n for n, _ in walk(tree) if n.name == "aten::index_select"]
    assert calls and not calls[0].attrs.get("utility")
    assert re.search(r"\bindex_select\s*\(", call_line(calls[0]))
    impls = [n for n, _ in walk(tree) if n.name == "at::native::index_select_out_cuda"]
    assert impls and re.search(r"\bindex_select_out_cuda\s*\(", file_lines(impls[0].location)[impls[0].location.line - 1])


# -- a call the parser read as a declaration is no definition -----------------


def test_call_statement_does_not_shadow_the_definition(context):
    """ReduceMomentKernel.cu calls `gpu_reduce_kernel<...>(iter, ops, typename
    ops_t::acc_t{});`, which the index holds as a declaration; mean_kernel_impl
    still reaches Reduce.cuh's gpu_reduce_kernel and its launch."""
    tree = graph.stack("at::native::mean_kernel_impl", context("cuda"), depth=4)
    reached = [n for n, _ in walk(tree) if n.name == "at::native::gpu_reduce_kernel"]
    assert reached
    for n in reached:
        line = file_lines(n.location)[n.location.line - 1]
        assert re.search(r"\bgpu_reduce_kernel\s*\(", line) and not line.rstrip().endswith(";"), line
    assert [n for n, _ in walk(tree) if n.name == "at::native::launch_reduce_kernel"]


# -- stubs passed as arguments ------------------------------------------------


@pytest.mark.parametrize("device, kernel", [("cpu", "scatter_cpu_kernel"), ("cuda", "scatter_cuda_kernel")])
def test_a_stub_passed_to_a_parameter_is_the_stub_the_parameter_calls(tree_2_6, device, kernel):
    """scatter_src_out passes scatter_reduce_stub and scatter_stub to
    scatter_impl, whose `FillStub& fill_stub` parameter (TensorAdvancedIndexing.cpp,
    read here) shadows the global fill_stub: scatter.src runs scatter_stub's
    kernel, in the else of `if (reduce.has_value())`."""
    text = (tree_2_6 / "aten/src/ATen/native/TensorAdvancedIndexing.cpp").read_text()
    impl = text[text.index("void scatter_impl("):]
    assert "FillStub& fill_stub" in impl and re.search(r"\} else \{\s*fill_stub\(", impl)
    assert re.search(r"scatter_impl\(self, dim, index, src, out,\s*scatter_reduce_stub,\s*scatter_stub\)", text)
    roles, _ = steps("aten::scatter.src", device)
    stub = roles["stub kernel"]
    assert stub.name.endswith(f"::{kernel}") and "fill_stub = scatter_stub" in stub.detail
    assert f"{kernel}(" in file_lines(stub.location)[stub.location.line - 1]


def test_a_stub_passed_on_through_helpers_reaches_its_kernel(tree_2_6):
    """abs passes abs_stub to unary_op_impl_with_complex_to_float_out, which
    passes its `Stub& stub` on to unary_op_impl_out (UnaryOps.cpp, read here)."""
    text = (tree_2_6 / "aten/src/ATen/native/UnaryOps.cpp").read_text()
    assert re.search(r"unary_op_impl_with_complex_to_float_out\(result, self, abs_stub", text)
    assert "return unary_op_impl_out(result, self, stub);" in text
    roles, leaves = steps("aten::abs", "cuda")
    assert roles["stub kernel"].name.endswith("::abs_kernel_cuda") and "stub = abs_stub" in roles["stub kernel"].detail
    assert leaves and leaves[0].name == "vectorized_elementwise_kernel"


def test_a_tensors_own_dtype_test_decides_its_branch(tree_2_6):
    """sgn (UnaryOps.cpp, read here) runs sgn_stub for a complex tensor and
    sign_stub otherwise: float32 runs sign's kernel."""
    text = (tree_2_6 / "aten/src/ATen/native/UnaryOps.cpp").read_text()
    body = text[text.index("TORCH_IMPL_FUNC(sgn_out)"):]
    body = body[: body.index("\n}\n")]
    assert body.index("is_complex()") < body.index("sgn_stub(") < body.index("sign_stub(")
    roles, _ = steps("aten::sgn", "cpu")
    assert roles["stub kernel"].name.endswith("::sign_kernel")
    assert roles["stub kernel"].name.rsplit("::", 1)[-1] in file_lines(roles["stub kernel"].location)[roles["stub kernel"].location.line - 1]


def test_the_entry_kernel_is_not_a_helper_of_the_meta_function(tree_2_6):
    """index.Tensor's meta function (TensorAdvancedIndexing.cpp, read here)
    calls make_info; the kernel that runs is structured_index_out's impl."""
    text = (tree_2_6 / "aten/src/ATen/native/TensorAdvancedIndexing.cpp").read_text()
    meta = text[text.index("TORCH_PRECOMPUTE_META_FUNC2(index, Tensor)"):]
    assert "make_info(" in meta[: meta.index("\n}\n")]
    roles, _ = steps("aten::index.Tensor", "cpu")
    entry = roles["entry kernel"]
    assert entry.name == "at::native::structured_index_out::impl"
    assert "TORCH_IMPL_FUNC(index_out)" in file_lines(entry.location)[entry.location.line - 1]


# -- function objects brace-initialised and called ------------------------------


def test_sum_on_cuda_runs_the_primary_templates_operator_and_reaches_the_reduction(tree_2_6, context):
    """sum_kernel_cuda calls `sum_functor<scalar_t>{}(iter)`; ReduceSumProdKernel.cu
    (read here) also specialises sum_functor for c10::complex<at::Half>. float32
    runs the primary template's operator(), whose gpu_reduce_kernel launches
    reduce_kernel."""
    text = (tree_2_6 / "aten/src/ATen/native/cuda/ReduceSumProdKernel.cu").read_text()
    lines = text.splitlines()
    assert "sum_functor<scalar_t>{}(iter);" in text
    primary = next(i + 1 for i, t in enumerate(lines) if t.startswith("struct sum_functor {"))
    special = [i + 1 for i, t in enumerate(lines) if re.match(r"struct sum_functor<.+> \{", t)]
    assert special and primary < min(special)
    tree = graph.stack("at::native::sum_kernel_cuda", context("cuda"), depth=1)
    [called] = [n for n in tree.root.children if n.name.endswith("sum_functor::operator()")]
    assert called.kind.value == "kernel" and primary < called.location.line < min(special)
    assert "primary template" in called.attrs["dtype_case"]
    roles, leaves = steps("aten::sum.dim_IntList", "cuda")
    assert roles["stub kernel"].name.endswith("::sum_kernel_cuda")
    assert leaves and leaves[0].name == "reduce_kernel"
    line = file_lines(leaves[0].location)[leaves[0].location.line - 1]
    assert "__global__" in line and "reduce_kernel(" in line


def test_a_class_specialisation_for_the_selected_dtype_is_the_one_called(tree_2_6, context):
    """unique_cuda_template calls `UniqueCub<scalar_t>{}(...)`; UniqueCub.cu (read
    here) specialises UniqueCub for bool: bool runs that operator(), float32 the
    primary template's."""
    text = (tree_2_6 / "aten/src/ATen/native/cuda/UniqueCub.cu").read_text()
    lines = text.splitlines()
    assert "return UniqueCub<scalar_t>{}(*self_c, consecutive, return_inverse, return_counts);" in text
    primary = next(i + 1 for i, t in enumerate(lines) if t.startswith("struct UniqueCub {"))
    special = next(i + 1 for i, t in enumerate(lines) if t.startswith("struct UniqueCub<bool> {"))
    for dtype, low, high in (("float32", primary, special), ("bool", special, len(lines))):
        tree = graph.stack("at::native::internal::unique_cuda_template", context("cuda", dtype=dtype), depth=1)
        [called] = [n for n in tree.root.children if n.name.endswith("UniqueCub::operator()")]
        assert low < called.location.line < high, (dtype, called.location)
        assert "operator()" in lines[called.location.line - 1]


# -- arguments at their defaults, and the stub named for the operator -----------


def test_a_flag_left_at_its_default_ranks_its_other_arm_last(tree_2_6, context):
    """linalg_matrix_rank (LinearAlgebra.cpp, read here) takes the singular
    values from an SVD under `if (!hermitian)`, else from eigvalsh; its schema
    (native_functions.yaml, read here) defaults hermitian to False: every end
    of the eigvalsh route ranks after every other end."""
    yaml = (tree_2_6 / "aten/src/ATen/native/native_functions.yaml").read_text()
    assert re.search(r"- func: linalg_matrix_rank\.atol_rtol_float\([^\n]*bool hermitian=False\)", yaml)
    text = (tree_2_6 / "aten/src/ATen/native/LinearAlgebra.cpp").read_text()
    body = text[text.index("'hermitian' controls whether SVD"):]
    assert body.index("if (!hermitian) {") < body.index("linalg_svdvals(") < body.index("linalg_eigvalsh(")
    ends = graph.call_ends(graph.stack("aten::linalg_matrix_rank.atol_rtol_float", context("cpu")))
    eigh = [i for i, e in enumerate(ends) if any(n.condition == "else of if (!hermitian)" for n in e.path)]
    svd = [i for i, e in enumerate(ends) if any(n.name == "aten::linalg_svdvals" for n in e.path)]
    assert any(n.name == "aten::linalg_eigvalsh" for i in eigh for n in ends[i].path)
    assert svd and max(svd) < min(eigh) and eigh == list(range(len(ends) - len(eigh), len(ends))), [e.node.name for e in ends]


def test_a_flag_passed_as_a_literal_decides_its_arms(tree_2_6, context):
    """at::native::sort (Sorting.cpp, read here) calls `at::sort(self, false,
    dim, descending)`: sort.stable with `stable` false. sort_kernel_impl
    (cpu/SortingKernel.cpp, read here) calls std::stable_sort under `if
    (stable)` and std::sort in its else, in each arm of `if (descending)`,
    which aten::sort defaults to False: the first end is the std::sort of the
    ascending arm, and the last the std::stable_sort of the descending arm."""
    sorting = (tree_2_6 / "aten/src/ATen/native/Sorting.cpp").read_text()
    native_sort = sorting[sorting.index("std::tuple<Tensor, Tensor> sort(\n"):]
    assert "return at::sort(self, false, dim, descending);" in native_sort[:native_sort.index("}")]
    lines = (tree_2_6 / "aten/src/ATen/native/cpu/SortingKernel.cpp").read_text().splitlines()
    start = next(i for i, t in enumerate(lines) if "void sort_kernel_impl(" in t)
    body = lines[start : next(i for i in range(start, len(lines)) if lines[i] == "}")]
    at = {name: [start + 1 + i for i, t in enumerate(body) if f"{name}(" in t] for name in ("std::sort", "std::stable_sort")}
    ascending = next(start + 1 + i for i, t in enumerate(body) if "} else {" in t and "if (stable)" in body[i + 1])
    assert len(at["std::sort"]) == 2 and len(at["std::stable_sort"]) == 2
    tree = graph.stack("aten::sort", context("cpu"))
    stable_call = [n for n, _ in walk(tree) if n.kind.value == "op" and n.name == "aten::sort.stable"]
    assert stable_call and all(n.attrs.get("given_flags") == ("stable=false",) for n in stable_call)
    ends = [e for e in graph.call_ends(tree) if e.node.name in at]
    assert ends[0].node.name == "std::sort" and ends[0].node.location.line == max(at["std::sort"]) > ascending
    assert (ends[-1].node.name, ends[-1].node.location.line) == ("std::stable_sort", min(at["std::stable_sort"])), ends  # both arms not taken


def test_a_flag_a_direct_call_passes_as_a_literal_decides_its_arms(tree_2_6, context):
    """_fft_c2r_mkl (mkl/SpectralOps.cpp, read here) calls `_exec_fft(...,
    /*forward=*/false)`, whose body calls DftiComputeForward under `if
    (forward)` and DftiComputeBackward in its else: aten::_fft_c2r on the CPU
    ends in the backward transform; its forward one cannot run."""
    text = (tree_2_6 / "aten/src/ATen/native/mkl/SpectralOps.cpp").read_text()
    bodies = [b[:b.index("\n}\n")] for b in text.split("Tensor _fft_c2r_mkl(const Tensor& self")[1:]]
    assert [b for b in bodies if "_exec_fft(" in b] == [b for b in bodies if "_exec_fft(out, input, out_sizes, dim, normalization, /*forward=*/false);" in b] != []
    lines = text.splitlines()
    forward = next(i for i, t in enumerate(lines, 1) if "DftiComputeForward(" in t)
    backward = next(i for i, t in enumerate(lines, 1) if "DftiComputeBackward(" in t)
    assert lines[forward - 2].strip() == "if (forward) {" and lines[backward - 2].strip() == "} else {"
    roles, leaves = steps("aten::_fft_c2r", "cpu")
    assert (leaves[0].name, leaves[0].location.line) == ("DftiComputeBackward", backward)
    tree = graph.stack("aten::_fft_c2r", context("cpu"))
    # the forward transform's arm cannot run for the call (Note [arms that cannot run]): a branch, no end
    forward_calls = [n for n, _ in walk(tree) if n.name == "DftiComputeForward"]
    assert forward_calls and all("cannot run" in n.attrs["branch"] and "forward=false" in n.attrs["branch"] for n in forward_calls)
    assert not [e for e in graph.call_ends(tree) if e.node.name == "DftiComputeForward"]


def test_an_arm_a_literal_flag_rules_out_is_no_end(tree_2_6, context):
    """_batch_norm_with_update_cpu_out (Normalization.cpp, read here) passes
    `/*update*/true` as batch_norm_cpu_out's `train`, whose body calls
    batch_norm_cpu_transform_input_template under `if (!train)` and again,
    after the statistics, in its else. The first arm cannot run for the call
    (Note [arms that cannot run]): no end is reached through it, and the
    first end is the statistics' (batch_norm_cpu_update_stats_template, the
    else's first call), whose first stub for contiguous inputs,
    batch_norm_cpu_collect_stats_stub, names the stub kernel
    (cpu/batch_norm_kernel.cpp, read here)."""
    text = (tree_2_6 / "aten/src/ATen/native/Normalization.cpp").read_text()
    caller = text[text.index("_batch_norm_with_update_cpu_out("):]
    assert "running_mean, running_var, /*update*/true, momentum, eps, out, save_mean, save_var);" in caller[:caller.index("\n}\n")]
    body = text[text.index("batch_norm_cpu_out(const Tensor& self"):]
    body = body[:body.index("\n}\n")]
    assert body.index("if (!train) {") < body.index("batch_norm_cpu_transform_input_template") < body.index("} else {") \
        < body.index("batch_norm_cpu_update_stats_template") < body.rindex("batch_norm_cpu_transform_input_template")
    kernel = re.search(r"REGISTER_DISPATCH\(batch_norm_cpu_collect_stats_stub, &(\w+)\)",
                       (tree_2_6 / "aten/src/ATen/native/cpu/batch_norm_kernel.cpp").read_text()).group(1)
    tree = graph.stack("aten::_batch_norm_with_update.out", context("cpu"))
    ends = graph.call_ends(tree)
    assert ends and all(not (n.condition or "").startswith("if (!train)") for e in ends for n in e.path)
    stats = [n for n in ends[0].path if n.name.endswith("::batch_norm_cpu_update_stats_template")]
    assert ends[0].rank[0] == 0 and stats and stats[0].condition.startswith("else of if (!train)")
    roles, _ = steps("aten::_batch_norm_with_update.out", "cpu")
    assert roles["stub kernel"].name.endswith(f"::{kernel}")
    assert kernel in file_lines(roles["stub kernel"].location)[roles["stub kernel"].location.line - 1]


def test_a_foreach_kernels_per_tensor_fallback_is_not_the_default(tree_2_6, context):
    """foreach_tensor_add_list_kernel_cuda (ForeachBinaryOpList.cu, read here)
    runs the per-tensor slow kernel only `if (!can_use_fast_route(...))`: every
    end through it ranks as an arm away from the defaults, and says so."""
    text = (tree_2_6 / "aten/src/ATen/native/cuda/ForeachBinaryOpList.cu").read_text()
    assert re.search(r"if \(!can_use_fast_route\(\{tensors1, tensors2\}, alpha\)\) \{\s*\\\s*return at::native::foreach_tensor_##NAME##_list_kernel_slow", text)
    ends = graph.call_ends(graph.stack("aten::_foreach_add.List", context("cuda")))
    slow = [e for e in ends if any(n.name.endswith("_list_kernel_slow") for n in e.path)]
    assert slow and all(e.rank[0] >= 1 and e.opted_by.startswith("if (!can_use_fast_route(") for e in slow)
    _, leaves = steps("aten::_foreach_add.List", "cuda")
    assert leaves and all("not at the defaults: under if (!can_use_fast_route(" in s.detail for s in leaves if s.name in {e.node.name for e in slow})


@pytest.mark.parametrize("op, stub, kernel_file", [
    ("aten::histogramdd", "histogramdd_stub", "aten/src/ATen/native/cpu/HistogramKernel.cpp"),
    ("aten::_weight_norm", "weight_norm_stub", "aten/src/ATen/native/cpu/WeightNormKernel.cpp"),
])
def test_the_stub_named_for_the_operator_gives_its_stub_kernel(tree_2_6, op, stub, kernel_file):
    """histogramdd calls at::linspace_out for its bin edges (Histogram.cpp,
    read here) and _weight_norm the norm it divides by, whose loops may rank
    first; the work of each is the kernel registered for the stub named for it
    (read here)."""
    assert "at::linspace_out(" in (tree_2_6 / "aten/src/ATen/native/Histogram.cpp").read_text()
    kernel = re.search(rf"REGISTER_DISPATCH\({stub}, &(\w+)\)", (tree_2_6 / kernel_file).read_text()).group(1)
    roles, _ = steps(op, "cpu")
    found = roles["stub kernel"]
    assert found.name.endswith(f"::{kernel}") and found.location.path == kernel_file
    assert kernel in file_lines(found.location)[found.location.line - 1]


# -- the conditions around a call ------------------------------------------------


def test_a_call_in_another_devices_arm_around_its_own_condition_is_that_arms(tree_2_6, context):
    """softmax_out (SoftMax.cpp, read here) calls at::_softmax_out under
    `if (!output_.is_contiguous())` twice: in an arm for a CUDA half input, and in
    its else. On the CPU the first is another device's arm and the second runs:
    both are shown, one collapsed, and the CPU's softmax kernel is named."""
    text = (tree_2_6 / "aten/src/ATen/native/SoftMax.cpp").read_text()
    body = text[text.index("Tensor& softmax_out("):]
    body = body[: body.index("\n}\n")]
    cuda_arm, _, other = body.partition("} else {\n    Tensor converted")
    assert "input_.is_cuda()" in cuda_arm and cuda_arm.count("at::_softmax_out(") == 2 and other.count("at::_softmax_out(") == 2
    tree = graph.stack("aten::softmax.int_out", context("cpu"), depth=4)
    calls = [n for n, _ in walk(tree) if n.name == "aten::_softmax.out"]
    collapsed = [n for n in calls if n.attrs.get("branch")]
    assert collapsed and all("input_.is_cuda()" in " ".join(n.attrs["outer_conditions"]) for n in collapsed)
    assert any(not n.attrs.get("branch") for n in calls)
    roles, _ = steps("aten::softmax.int_out", "cpu")
    assert "softmax" in roles["stub kernel"].name


def test_a_device_type_compared_decides_the_device_of_an_arm(tree_2_6):
    """std_var_out (ReduceOps.cpp, read here) takes std_var_all_cpu under
    `if (result.numel() == 1 && iter.device_type() == kCPU && ...)`, else the
    stub: on CUDA, var reaches std_var_stub's kernel and its reduction launch,
    on the CPU the general case's stub kernel (read from the registrations)."""
    text = (tree_2_6 / "aten/src/ATen/native/ReduceOps.cpp").read_text()
    assert re.search(r"result\.numel\(\) == 1 &&\s*iter\.device_type\(\) == kCPU", text)
    cuda = re.search(r"REGISTER_DISPATCH\(std_var_stub, &(\w+)\)", (tree_2_6 / "aten/src/ATen/native/cuda/ReduceMomentKernel.cu").read_text()).group(1)
    cpu = re.search(r"REGISTER_DISPATCH\(std_var_stub, &(\w+)\)", (tree_2_6 / "aten/src/ATen/native/cpu/ReduceOpsKernel.cpp").read_text()).group(1)
    roles, leaves = steps("aten::var.dim", "cuda")
    assert roles["stub kernel"].name.endswith(f"::{cuda}") and leaves and leaves[0].name == "reduce_kernel"
    roles, _ = steps("aten::var.dim", "cpu")
    assert roles["stub kernel"].name.endswith(f"::{cpu}")
    from kernelmap.graph.rules import other_device_reason

    assert other_device_reason("if (iter.device_type() != kCPU)", "cpu") and not other_device_reason("if (iter.device_type() != kCPU)", "cuda")
    assert other_device_reason("else of if (t.device().type() == DeviceType::CPU)", "cpu") is not None
    assert other_device_reason("if (x.device_type() == at::kCUDA)", "cuda") is None


def test_a_leaf_reached_only_otherwise_than_at_the_defaults_says_so(tree_2_6):
    """compute_unique (UniqueCub.cu, read here) launches its kernels in the else
    of `if (!return_inverse)`; _unique2's schema defaults return_inverse to False."""
    yaml = (tree_2_6 / "aten/src/ATen/native/native_functions.yaml").read_text()
    assert re.search(r"- func: _unique2\([^\n]*bool return_inverse=False", yaml)
    text = (tree_2_6 / "aten/src/ATen/native/cuda/UniqueCub.cu").read_text()
    compute = text[text.index("compute_unique("):]
    assert compute.index("if (!return_inverse) {") < compute.index("scatter_kernel<<<")
    _, leaves = steps("aten::_unique2", "cuda")
    scatter = [leaf for leaf in leaves if leaf.name == "scatter_kernel"]
    assert scatter and "not at the defaults: under else of if (!return_inverse)" in scatter[0].detail
    assert all("not at the defaults" in leaf.detail for leaf in leaves)



def test_an_argument_compared_with_a_literal_decides_its_arms_at_its_default(tree_2_6, context):
    """cross_entropy_loss (LossNLL.cpp, read here) smooths the labels under
    `else if (label_smoothing > 0.0)`, and its schema (native_functions.yaml,
    read here) defaults label_smoothing to 0.0: every end reached through the
    smoothing ranks after every end reached at the defaults, and says why."""
    yaml = (tree_2_6 / "aten/src/ATen/native/native_functions.yaml").read_text()
    assert re.search(r"- func: cross_entropy_loss\([^\n]*float label_smoothing=0\.0\)", yaml)
    text = (tree_2_6 / "aten/src/ATen/native/LossNLL.cpp").read_text()
    body = text[text.index("Tensor cross_entropy_loss_symint("):]
    assert body.index("} else if (label_smoothing > 0.0) {") < body.index("cross_entropy_loss_label_smoothing(") < body.index("\n}\n")
    ends = graph.call_ends(graph.stack("aten::cross_entropy_loss", context("cuda")))
    smoothing = [i for i, e in enumerate(ends) if any(n.name.endswith("::cross_entropy_loss_label_smoothing") for n in e.path)]
    at_defaults = [i for i, e in enumerate(ends) if e.rank[0] == 0]
    assert smoothing and at_defaults and max(at_defaults) < min(smoothing), [e.node.name for e in ends]
    assert all(ends[i].opted_by.startswith("if (label_smoothing > 0.0)") for i in smoothing)


def test_arguments_at_their_defaults_decide_tests_of_numbers_enumerators_and_conjunctions():
    """The test of an arm, read with the schema's defaults: numbers by value,
    an enumerator by its name, `&&` and `||` by the terms that are known; an
    `int` compared with a number is left undecided (a kernel tests it once
    wrapped: `dim=-1` as `dim == 0`)."""
    from kernelmap.graph.ends import _Arguments
    from kernelmap.model import CallNode, CallTree, NodeKind

    schema = ("f(Tensor self, Tensor? weight=None, float eps=1e-05, Scalar alpha=1, int reduction=Mean, int dim=-1, bool train=False)"
              " -> Tensor")
    arguments = _Arguments(CallTree(CallNode("aten::f", NodeKind.OPERATOR, attrs={"schema": schema})))
    away = ["if (eps > 0.001)", "if (alpha != 1)", "else of if (eps < 1)", "if (reduction == Reduction::None && n == 2)",
            "else of if (reduction == at::Reduction::Mean)", "if (train || weight.has_value())", "if (!(eps == 1e-05))",
            "if (train)  #if defined(X)", "if (train && x)"]
    default = ["if (eps < 1)", "else of if (eps > 0.001)", "if (reduction != Reduction::Sum)", "if (n == 2 || alpha == 1)",
               "if (dim == 0)", "else of if (dim == -1)", "if (x.is_sparse())", "case Reduction::None", "if (!weight.has_value())",
               "else of if (reduction == Reduction::None && n == 2)"]
    assert [c for c in away if not arguments.non_default(c)] == []
    assert [c for c in default if arguments.non_default(c)] == []


# -- CPU reduction loops, launchers passed as temporaries, calls in checks -----------


def test_a_cpu_reduction_ends_in_its_reduction_loop(tree_2_6):
    """max_values_kernel_impl (ReduceOpsKernel.cpp, read here) hands amax's
    work to binary_kernel_reduce_vec, the loop machinery of cpu/Reduce.h."""
    text = (tree_2_6 / "aten/src/ATen/native/cpu/ReduceOpsKernel.cpp").read_text()
    assert "REGISTER_DISPATCH(max_values_stub, &max_values_kernel_impl)" in text
    body = text[text.index("static void max_values_kernel_impl("):]
    assert body.index("binary_kernel_reduce_vec(") < body.index("\n}\n")
    roles, leaves = steps("aten::amax", "cpu")
    assert roles["stub kernel"].name.endswith("::max_values_kernel_impl")
    assert leaves and leaves[0].name == "binary_kernel_reduce_vec" and leaves[0].location.path == "aten/src/ATen/native/cpu/Reduce.h"
    assert "binary_kernel_reduce_vec(" in file_lines(leaves[0].location)[leaves[0].location.line - 1]


@pytest.mark.parametrize("op, launcher, kernel", [("aten::kthvalue", "KthValueLauncher", "gatherKthValue"),
                                                  ("aten::median.dim", "MedianLauncher", "gatherMedian")])
def test_a_launcher_passed_as_a_temporary_with_arguments_is_followed(tree_2_6, op, launcher, kernel):
    """Sorting.cu (read here) calls `run_launcher<scalar_t, index_t>(..., KthValueLauncher(k))`:
    two template arguments spelled, the launcher's deduced from a temporary built
    with an argument; its launch runs the kernel."""
    text = (tree_2_6 / "aten/src/ATen/native/cuda/Sorting.cu").read_text()
    assert re.search(rf"run_launcher<scalar_t, \w+>\(\s*\w+, \w+, self, dim, {launcher}\(\w+\)\);", text)
    assert re.search(rf"{kernel}<scalar_t, index_t, all_dims><<<", text)
    _, leaves = steps(op, "cuda")
    assert leaves and leaves[0].name == kernel and f"{kernel}(" in file_lines(leaves[0].location)[leaves[0].location.line - 1]


def test_a_check_of_the_inputs_is_not_the_work(tree_2_6):
    """repeat_interleave (Repeat.h, read here) checks `(repeats >= 0).all()` inside
    TORCH_CHECK, after the cumsum that is its work: the all()'s reduction is
    marked as the check's, and the stub kernel and the first leaf are cumsum's
    (its kernel's own loop over its iterator, cpu_cum_base_kernel's, read here)."""
    text = (tree_2_6 / "aten/src/ATen/native/Repeat.h").read_text()
    assert re.search(r"TORCH_CHECK\(\s*\(repeats >= 0\)\.all\(\)", text) and "repeats.cumsum(0)" in text
    kernel = re.search(r"REGISTER_DISPATCH\(cumsum_stub, &(\w+)\)", (tree_2_6 / "aten/src/ATen/native/cpu/ReduceOpsKernel.cpp").read_text()).group(1)
    ops_kernel = (tree_2_6 / "aten/src/ATen/native/cpu/ReduceOpsKernel.cpp").read_text()
    base = ops_kernel[ops_kernel.index("static inline void cpu_cum_base_kernel("):]
    assert "iter.for_each(loop, grain_size);" in base[: base.index("\n}\n")]
    roles, leaves = steps("aten::repeat_interleave.Tensor", "cpu")
    assert roles["stub kernel"].name.endswith(f"::{kernel}")
    assert leaves[0].name == "at::TensorIteratorBase::for_each" and "inside TORCH_CHECK" not in leaves[0].detail
    assert leaves[1:] and all("inside TORCH_CHECK" in leaf.detail for leaf in leaves[1:])
