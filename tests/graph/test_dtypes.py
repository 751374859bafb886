"""Which dtype branches a kernel takes (Note [dtype branches]): conditions as
the index records them, evaluated for one dtype; undecided ones stay open."""

from __future__ import annotations

import pytest

from kernelmap.graph.dtypes import canonical, dispatch_case, evaluate, other_dtype_reason, checks_dtype

MUL_REDUCED = "if (iter.is_scalar(2) && iter.data_ptr(2) != nullptr && at::isReducedFloatingType(dtype))"


@pytest.mark.parametrize(
    "condition, dtype, expected",
    [
        ("if (dtype == ScalarType::Bool)", "float32", False),
        ("if (dtype == ScalarType::Bool)", "bool", True),
        ("if (dtype == kComplexHalf)", "float32", False),
        ("if (iter.common_dtype() != at::kBFloat16)", "bfloat16", False),
        (MUL_REDUCED, "float32", False),
        (MUL_REDUCED, "bfloat16", None),  # depends on whether the second operand is a CPU scalar
        ("else of " + MUL_REDUCED, "float32", True),
        ("else of " + MUL_REDUCED, "half", None),
        ("if (isFloatingType(dtype) || isComplexType(dtype))", "int64", False),
        ("if (at::isIntegralType(self.scalar_type(), /*includeBool=*/true))", "int32", True),
        ("if (!at::isFloatingType(dtype))", "float64", False),
        ("if (numel < grain_size || at::get_num_threads() == 1)", "float32", None),
    ],
)
def test_evaluate(condition, dtype, expected):
    assert evaluate(condition, dtype) is expected


def test_only_false_branches_are_marked():
    assert other_dtype_reason("if (dtype == ScalarType::Bool)", "float") == "a branch for another dtype than float32"
    assert other_dtype_reason(MUL_REDUCED, "bfloat16") is None
    assert other_dtype_reason("if (contiguous)", "float32") is None
    assert checks_dtype(MUL_REDUCED) and not checks_dtype("if (contiguous)")
    assert canonical("torch.half") == "float16" and canonical("no_such_dtype") is None


def test_dispatch_case_spans_one_case():
    lines = ["AT_DISPATCH_SWITCH(st, \"add_stub\",", "AT_DISPATCH_CASE(at::ScalarType::Bool,", "  cpu_kernel(iter, op);", ")",
             "AT_DISPATCH_CASE(at::ScalarType::Float,", "  cpu_kernel_vec(iter, op, vop);", ")", ")"]
    assert dispatch_case(lines, "float32") == (4, 7)
    assert dispatch_case(lines, "bool") == (1, 3)
    assert dispatch_case(lines, "int64") is None
