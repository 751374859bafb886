"""The extractor on the real 2.6.0 files whose definitions and calls it used
to lose or garble (issue 16, causes 4, 5 and 9): each fact is checked
against the line of the file it names."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kernelmap.source.extract import Extractor
from kernelmap.source.facts import read_operator_names


@pytest.fixture(scope="module")
def extract(real_tree_root: Path):
    ex = Extractor(read_operator_names(real_tree_root / "aten/src/ATen/native/native_functions.yaml"))
    cache = {}

    def facts(path: str):
        if path not in cache:
            cache[path] = ex.extract(path, (real_tree_root / path).read_bytes())
        return cache[path]

    return facts


def lines(root: Path, path: str) -> list[str]:
    return (root / path).read_text(encoding="utf-8", errors="replace").splitlines()


def defined_at(root: Path, path: str, name: str) -> list[int]:
    """Lines that start a definition of `name` (its name, then `(`, a `{` before the next `;`)."""
    text = lines(root, path)
    found = []
    for i, line in enumerate(text):
        if re.search(rf"(^|[\s*&>:]){re.escape(name)}\s*\(", line) and not line.lstrip().startswith(("//", "return", "#")):
            rest = "\n".join(text[i : i + 30])
            brace, semi = rest.find("{"), rest.find(";")
            if brace >= 0 and (semi < 0 or brace < semi):
                found.append(i + 1)
    return found


@pytest.mark.parametrize(
    "path, name, qualified",
    [
        # a return type spelled std::tuple<...> after CUDA attribute macros parsed askew
        ("aten/src/ATen/native/cuda/layer_norm_kernel.cu", "layer_norm_cuda", "at::native::layer_norm_cuda"),
        # an #if branch ending in a dangling `else` lost the namespace of what followed
        ("aten/src/ATen/native/cuda/Indexing.cu", "index_select_cuda", "at::native::index_select_cuda"),
        ("aten/src/ATen/native/cuda/Indexing.cu", "index_select_out_cuda", "at::native::index_select_out_cuda"),
        # `extern template int f<2>();` swallowed the definition after it
        ("aten/src/ATen/native/quantized/cudnn/Conv.cpp", "getConvDescriptor", "getConvDescriptor"),
        # a braced default argument (`ArrayRef<Scalar> scalarList = {}`) made the function a declaration
        ("aten/src/ATen/native/ForeachUtils.h", "check_fast_path_restrictions", "at::native::check_fast_path_restrictions"),
        # a check macro with no `;` before the closing brace
        ("aten/src/ATen/native/Copy.cpp", "_propagate_xla_data", "at::native::_propagate_xla_data"),
        ("aten/src/ATen/native/quantized/TensorFactories.cpp", "empty_strided_unknown_quantized",
         "at::native::empty_strided_unknown_quantized"),
        # `void collapseDims() {};` read as a brace-initialised declaration
        ("aten/src/ATen/native/cuda/RNN.cu", "collapseDims", "at::native::collapseDims"),
        # the file's own `#define DEVICE_INLINE __device__ C10_ALWAYS_INLINE`
        ("aten/src/ATen/native/nested/cuda/NestedTensorTransformerFunctions.cu", "div_round_up", "at::native::div_round_up"),
        # `#ifdef A` / `if (w == 8) {` / `#else` / `if (w == 16) {` / `#endif` made the whole file one error
        ("aten/src/ATen/native/quantized/cpu/kernels/QuantizedOpKernels.cpp", "do_avg_pool_on_AVX_n", "at::native::do_avg_pool_on_AVX_n"),
        # file-scope `_PS256_CONST(1, 1.0f);` of the file's own parenthesis-free macro
        ("aten/src/ATen/native/cpu/avx_mathfun.h", "log256_ps", "log256_ps"),
    ],
)
def test_definitions_after_parse_failures_keep_name_namespace_and_line(extract, real_tree_root, path, name, qualified):
    want = defined_at(real_tree_root, path, name)
    assert want, f"{name} is not defined in {path} any more"
    got = [d for d in extract(path).definitions if d.short == name]
    assert got, f"{name} not indexed in {path}"
    for d in got:
        assert d.lookup == qualified, (d.name, d.line)
        text = "\n".join(lines(real_tree_root, path)[d.line - 1 : d.line + 2])
        assert name in text, (d.name, d.line)
    assert {d.line for d in got} & set(range(min(want) - 2, max(want) + 1))


def test_global_kernel_behind_launch_bounds_is_a_global_kernel(extract, real_tree_root):
    path = "aten/src/ATen/native/cuda/layer_norm_kernel.cu"
    text = lines(real_tree_root, path)
    kernels = [d for d in extract(path).definitions if d.short == "RowwiseMomentsCUDAKernel"]
    assert kernels and all(d.kind == "global_kernel" for d in kernels)
    assert any("__global__" in text[d.line - 2] + text[d.line - 1] for d in kernels)


def test_masking_keeps_every_offset_and_line(real_tree_root):
    from kernelmap.source.masking import mask_attributes

    data = (real_tree_root / "aten/src/ATen/native/cuda/layer_norm_kernel.cu").read_bytes()
    masked = mask_attributes(data)
    assert len(masked) == len(data) and masked.count(b"\n") == data.count(b"\n")
    assert b"__global__" in data and b"__global__" not in masked


def test_register_dispatch_with_a_qualified_stub(extract, real_tree_root):
    path = "aten/src/ATen/native/cpu/BlasKernel.cpp"
    text = lines(real_tree_root, path)
    regs = [r for r in extract(path).registrations if r.kind == "register_dispatch" and r.name == "gemm_stub"]
    assert len(regs) == 1
    assert "REGISTER_DISPATCH(cpublas::gemm_stub" in text[regs[0].line - 1]
    assert regs[0].target == "cpublas::cpublas_gemm_impl"


def test_template_call_written_as_a_statement_is_a_call(extract, real_tree_root):
    """`gemm_internal<float>(CUDABLAS_GEMM_ARGS(float));` reads to the grammar as a declaration."""
    path = "aten/src/ATen/cuda/CUDABlas.cpp"
    text = lines(real_tree_root, path)
    want = {i + 1 for i, line in enumerate(text) if re.match(r"\s*gemm_internal<float>\(CUDABLAS_GEMM_ARGS\(float\)\);", line)}
    assert want
    got = {c.line for c in extract(path).calls if c.short == "gemm_internal"}
    assert want <= got


def test_method_of_a_temporary_is_not_an_operator(extract, real_tree_root):
    """`DimMask().flip()` (a std::bitset) is no call of aten::flip (cause 9)."""
    path = "aten/src/ATen/native/ReduceOpsUtils.h"
    text = lines(real_tree_root, path)
    sites = [c for c in extract(path).calls if c.short == "flip"]
    assert sites and all(".flip()" in text[c.line - 1] for c in sites)
    assert all(c.kind == "direct" and c.op is None for c in sites)
    # a Tensor's flip is still the operator
    other = [c for c in extract("aten/src/ATen/native/TensorTransformations.cpp").calls if c.kind == "dispatcher"]
    assert other


@pytest.mark.parametrize(
    "path, short, qualified",
    [
        ("aten/src/ATen/cuda/CUDAEvent.h", "operator cudaEvent_t", "at::cuda::CUDAEvent::operator cudaEvent_t"),
        ("aten/src/ATen/native/vulkan/api/StringUtil.h", "operator const std::string&",
         "at::native::vulkan::api::detail::CompileTimeEmptyString::operator const std::string&"),
    ],
)
def test_conversion_operators_are_definitions(extract, real_tree_root, path, short, qualified):
    text = lines(real_tree_root, path)
    want = [i + 1 for i, line in enumerate(text) if re.search(rf"^\s*{re.escape(short)}\(\)", line)]
    assert want
    got = [d for d in extract(path).definitions if d.short == short]
    assert [d.line for d in got] == want and {d.lookup for d in got} == {qualified}


def test_explicit_specialisations_of_the_call_operator(extract, real_tree_root):
    path = "aten/src/ATen/native/hip/ck_gemm_template.h"
    text = lines(real_tree_root, path)
    want = [i + 1 for i, line in enumerate(text) if "void operator()<" in line]
    assert len(want) == 3
    got = [d.line for d in extract(path).definitions if d.short == "operator()"]
    assert set(want) <= set(got)


@pytest.mark.parametrize("path", [
    "aten/src/ATen/native/SobolEngineOpsUtils.cpp",  # 2 MB of direction numbers
    "aten/src/ATen/native/Math.h",  # a 16 KB table of coefficients among many definitions
    "aten/src/ATen/native/cuda/IGammaKernel.cu",
])
def test_emptying_data_tables_changes_no_fact(real_tree_root, monkeypatch, path):
    """Note [data tables]: the same facts with the tables read as without."""
    from kernelmap.source import masking as module

    data = (real_tree_root / path).read_bytes()
    ops = read_operator_names(real_tree_root / "aten/src/ATen/native/native_functions.yaml")
    emptied = Extractor(ops).extract(path, data)
    masked = module.mask_attributes(data)
    assert len(masked) == len(data) and data.count(b" ") + 4096 < masked.count(b" ")  # a table was emptied
    monkeypatch.setattr(module, "_DATA_TABLE", re.compile(rb"(?!)"))
    assert module.mask_attributes(data).count(b" ") < masked.count(b" ")
    assert Extractor(ops).extract(path, data) == emptied
