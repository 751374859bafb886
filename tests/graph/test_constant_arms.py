"""Arms that cannot run for a call are branches, not leaves (issue "Witness
it", leaf precision): the values a call fixes (the dtype a template tests,
the global settings at their defaults, the overload of a predicate the build
compiles) decide tests in the callees. Graded against the stacks torch
2.13's CPU build really ran (tests/golden/observed-cpu.jsonl.gz) and read
from the real 2.6.0 tree, never copied from output."""

from __future__ import annotations

import re

import pytest

from kernelmap import api
from tests.golden.observed import load

MATMUL = "aten/src/ATen/native/mkldnn/Matmul.cpp"


def _leaves(op: str, indexed_tree) -> list:
    answer = api.where(op, device="cpu", static=True, with_source=True, source=indexed_tree.name)
    return [s for s in answer.source if s.role == "leaf"]


def _ran(op: str) -> set[str]:
    golden = load()
    return {golden.frames[i].function for s in golden.by_operator()[op] for i in s}


def test_settings_are_read_at_their_defaults_from_the_tree(tree_2_6, context):
    """at::globalContext()'s getters return a member whose initializer
    Context.h writes (read here); an environment variable left unset takes
    the `:` arm of a `check_env(...) == true ? A : B` initializer."""
    from kernelmap.graph import arms

    header = (tree_2_6 / "aten/src/ATen/Context.h").read_text()
    m = re.search(r"float32_matmul_precision =\s*c10::utils::check_env\([^()]*\) == true\s*\?\s*([\w:]+)\s*:\s*([\w:]+);", header)
    assert m is not None
    enabled = re.search(r"\bbool enabled_mkldnn = (true|false);", header).group(1)
    ctx = context("cpu")
    assert arms.setting_default("float32MatmulPrecision", ctx) == m.group(2)
    assert arms.setting_default("userEnabledMkldnn", ctx) == enabled
    medium = "at::globalContext().float32MatmulPrecision() == at::Float32MatmulPrecision::MEDIUM"
    assert arms.decide(medium, {}, ctx) is (m.group(2).rsplit("::", 1)[-1] == "MEDIUM")
    assert arms.decide(f"!{medium}", {}, ctx) is not (m.group(2).rsplit("::", 1)[-1] == "MEDIUM")


def test_an_element_type_tested_in_a_template(context):
    """`std::is_same_v<scalar_t, X>` holds for the selected dtype's element
    type only; a type that is no element type (opmath_t) is not read."""
    from kernelmap.graph import arms, dtypes

    for dtype, same, other in (("float32", "float", "c10::BFloat16"), ("bfloat16", "c10::BFloat16", "float")):
        ctx = context("cpu", dtype=dtype)
        assert arms.decide(f"std::is_same_v<scalar_t, {same}>", {}, ctx) is True
        assert arms.decide(f"std::is_same_v<scalar_t, {other}> && anything_else()", {}, ctx) is False
    assert dtypes.evaluate("if (std::is_same_v<scalar_t, opmath_t>)", "float32") is None


def test_the_overload_the_build_compiles_is_the_predicate_read(tree_2_6, context):
    """mkldnn/Matmul.cpp defines use_mkldnn_bf32_matmul three times (read
    here): `return false;` for a build without oneDNN, and with oneDNN a
    static one taking no arguments and one taking three tensors. A call's
    arguments pick among those the release CPU build compiles."""
    from kernelmap.graph import arms

    text = (tree_2_6 / MATMUL).read_text()
    assert len(re.findall(r"^(?:static )?bool use_mkldnn_bf32_matmul\(", text, re.M)) == 3
    assert text.index("#if !AT_MKLDNN_ENABLED()") < text.index("bool use_mkldnn_bf32_matmul(") < text.index("#else // AT_MKLDNN_ENABLED")
    ctx = context("cpu")
    assert "float32MatmulPrecision()" in arms._one_return("use_mkldnn_bf32_matmul", ctx, 0)
    assert arms._one_return("use_mkldnn_bf32_matmul", ctx, 3).startswith("( use_mkldnn_bf32_matmul() &&")


@pytest.mark.parametrize("op", ["aten::mm", "aten::bmm", "aten::addmv", "aten::dot"])
def test_onednn_matmul_is_no_leaf_of_a_float_gemm(op, tree_2_6, indexed_tree):
    """A float32 matrix product goes to oneDNN only with
    float32MatmulPrecision at MEDIUM (mkldnn_gemm's `bf32_usable`, and
    use_mkldnn_matmul's bf32 test; read here), which is not its default: the
    recorded runs never reached ideep::matmul_forward::compute, and `where`
    names no oneDNN leaf; BLAS's gemm, which mm's recorded runs called, is
    still a leaf."""
    text = (tree_2_6 / MATMUL).read_text()
    assert "bool bf32_usable = std::is_same_v<scalar_t, float> && use_mkldnn_bf32_matmul();" in text
    assert "if ( !(bf16_usable || fp16_usable || bf32_usable) ||" in text
    ran = _ran(op)
    assert not any(name.startswith("ideep::") for name in ran)
    leaves = [leaf.name for leaf in _leaves(op, indexed_tree)]
    assert not any(name.startswith("ideep::") for name in leaves), leaves
    if op == "aten::mm":
        assert "sgemm_" in ran and "sgemm_" in leaves


def test_numbers_a_call_passes_decide_the_comparisons_below(tree_2_6, context):
    """mm's kernel calls `addmm_impl_cpu_(..., 0, 1)` (read here): the
    helper's `beta` is 0 for it, so the `else` of its `if
    (beta.toComplexDouble() == 0.0)`, which scales the result by beta with
    at::mul_, is a branch that cannot run; the recorded runs of mm never
    entered mul_."""
    from kernelmap import graph
    from tests.graph.conftest import walk

    text = (tree_2_6 / "aten/src/ATen/native/LinearAlgebra.cpp").read_text()
    assert "addmm_impl_cpu_(const_cast<Tensor&>(result), result, self, mat2, 0, 1);" in text
    helper = text[text.index("static void addmm_impl_cpu_(") :]
    assert "const Scalar& beta, const Scalar& alpha" in helper[: helper.index("{")]
    assert "if (beta.toComplexDouble() == 0.0) {" in helper
    assert not any(name.startswith("at::_ops::mul_") for name in _ran("aten::mm"))
    tree = graph.stack("aten::mm", context("cpu"))
    helper_node = next(n for n, _ in walk(tree) if n.name.endswith("::addmm_impl_cpu_"))
    assert set(helper_node.attrs["given_values"]) == {"beta=0", "alpha=1"}
    scaled = [n for n, _ in walk(tree) if n.name in ("aten::mul_.Scalar", "at::Tensor::mul_") and "beta" in (n.condition or "")]
    assert scaled and all("cannot run" in str(n.attrs.get("branch")) for n in scaled)


def test_no_tensor_of_a_call_has_its_negative_bit_set(tree_2_6, context):
    """CopyKernel.cpp's copy_kernel sets `requires_neg` from the two tensors'
    negative bits (read here), which only at::_neg_view sets: for any other
    tensor the copy is not negated, neg_kernel is a branch that cannot run,
    and the recorded runs of copy_ never entered it."""
    from kernelmap import graph
    from tests.graph.conftest import walk

    text = (tree_2_6 / "aten/src/ATen/native/cpu/CopyKernel.cpp").read_text()
    assert "const bool requires_neg = (iter.tensor_base(0).is_neg() != iter.tensor_base(1).is_neg());" in text
    assert not any(name.endswith("::neg_kernel") for name in _ran("aten::copy_"))
    tree = graph.stack("aten::copy_", context("cpu"))
    negated = [n for n, _ in walk(tree) if n.name.endswith("::neg_kernel") and n.condition and "requires_conj" in n.condition]
    assert negated and all(n.attrs.get("branch") for n in negated)


@pytest.mark.parametrize("op", ["aten::dot", "aten::vdot"])
def test_a_library_routine_wrapped_out_of_the_build_is_the_leaf(op, tree_2_6, indexed_tree):
    """BlasKernel.cpp wraps cblas_sdot in a `static inline sdot_` only under
    `#if AT_BLAS_USE_CBLAS_DOT()` (read here), which the release CPU build
    leaves out: the build calls BLAS's own sdot_, as the recorded runs show,
    and `where` names it, at the line that holds its name."""
    text = (tree_2_6 / "aten/src/ATen/native/BlasKernel.cpp").read_text()
    guarded = text[text.index("#if AT_BLAS_USE_CBLAS_DOT()") :]
    assert guarded.index("static inline ffloat sdot_(") < guarded.index("#endif")
    ran = _ran(op)
    leaves = _leaves(op, indexed_tree)
    assert [leaf.name for leaf in leaves] == ["sdot_"] and "sdot_" in ran
    leaf = leaves[0]
    assert "sdot_(" in (tree_2_6 / leaf.location.path).read_text().splitlines()[leaf.location.line - 1]
