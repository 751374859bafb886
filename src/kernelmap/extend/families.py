"""What the scaffolded kernel computes, by the shape of the operator it starts
from: a loop for elementwise operators whose formula kernelmap knows, a loop
per output element for reductions (sum, prod, mean, amax, amin), a loop
for batch norm, a call into ATen for convolution (and for anything else), each
a correct reference the user then edits.

Note [reference kernels]
A scaffold must pass its own tests before the user changes a line, so every
family's kernel is correct against ATen on the generated cases. Where a loop
would be long (convolution) or unknown (an arbitrary operator), the kernel
calls the ATen operator *below* the one it may override (`at::_convolution`
for `aten::convolution`), so that an override of the original does not call
itself. The generic family calls the original operator itself; overriding that
same operator with it is refused at run time (see `kernelmap.extend.overrides`).
"""

from __future__ import annotations

from dataclasses import dataclass

from kernelmap.extend.schema import CustomOpSpec

__all__ = ["Pointwise", "POINTWISE", "Reduction", "REDUCTIONS", "family_of", "pointwise_formula", "reduction_of"]


@dataclass(frozen=True)
class Pointwise:
    """The scalar formula of an elementwise operator, over `opmath_t` values named
    like the operator's tensor arguments; scalar arguments are read into
    `<name>_` once per call (Scalar -> opmath_t, float -> opmath_t)."""

    tensors: tuple[str, ...]  # the tensor arguments, in schema order
    cpp: str  # the formula in C++ (host); may use at::_isnan, std:: math
    cuda: str  # the formula on the device, with no torch header
    floating_only: bool = False  # true for transcendental formulas: integer inputs compute in the default float dtype
    integral_ok: bool = True  # false where integer inputs are no test case (bench/tests use floats anyway)


_UNARY_FLOAT = ("self",)
_BINARY = ("self", "other")

POINTWISE: dict[str, Pointwise] = {
    "relu": Pointwise(_UNARY_FLOAT, "(at::_isnan(self) || self > opmath_t(0)) ? self : opmath_t(0)",
                      "(self != self || self > opmath_t(0)) ? self : opmath_t(0)"),
    "add": Pointwise(_BINARY, "self + alpha_ * other", "self + alpha_ * other"),
    "sub": Pointwise(_BINARY, "self - alpha_ * other", "self - alpha_ * other"),
    "mul": Pointwise(_BINARY, "self * other", "self * other"),
    "div": Pointwise(_BINARY, "self / other", "self / other", floating_only=True),
    "neg": Pointwise(_UNARY_FLOAT, "-self", "-self"),
    "abs": Pointwise(_UNARY_FLOAT, "std::abs(self)", "fabs(self)"),
    "sigmoid": Pointwise(_UNARY_FLOAT, "opmath_t(1) / (opmath_t(1) + std::exp(-self))",
                         "opmath_t(1) / (opmath_t(1) + exp(-self))", floating_only=True),
    "tanh": Pointwise(_UNARY_FLOAT, "std::tanh(self)", "tanh(self)", floating_only=True),
    "exp": Pointwise(_UNARY_FLOAT, "std::exp(self)", "exp(self)", floating_only=True),
    "silu": Pointwise(_UNARY_FLOAT, "self / (opmath_t(1) + std::exp(-self))",
                      "self / (opmath_t(1) + exp(-self))", floating_only=True),
    "maximum": Pointwise(_BINARY, "(at::_isnan(self) || self > other) ? self : other",
                         "(self != self || self > other) ? self : other"),
    "minimum": Pointwise(_BINARY, "(at::_isnan(self) || self < other) ? self : other",
                         "(self != self || self < other) ? self : other"),
}

_SCALAR_TYPES = {"Scalar", "float", "int", "bool"}


def _pointwise(spec: CustomOpSpec, tags: tuple[str, ...]) -> Pointwise | None:
    base = spec.op.split("::", 1)[1].split(".")[0]
    formula = POINTWISE.get(base)
    if formula is None or spec.returns != ("Tensor",):
        return None
    tensors = tuple(p.name for p in spec.originals if p.is_tensor)
    others = [p for p in spec.originals if not p.is_tensor]
    if tensors != formula.tensors or any(p.type not in _SCALAR_TYPES for p in others):
        return None  # e.g. add.Scalar: `other` is a Scalar, not the tensor the formula reads
    return formula


@dataclass(frozen=True)
class Reduction:
    """A reduction over some dimensions of `self` into one tensor: how the
    accumulator starts, how it takes one value, and how it ends."""

    init: str  # C++ over acc_t
    step: str  # `acc = ...` given `acc` and the value `v`
    finish: str  # the result from `acc` and `count`, the number of values reduced
    integral_to_long: bool  # integer and bool inputs give int64 results (sum, prod)
    dim_type: str | None = None  # the schema type of `dim`, None when the operator has none
    has_dtype: bool = False  # takes `ScalarType? dtype`
    has_keepdim: bool = False


REDUCTIONS: dict[str, Reduction] = {
    "sum": Reduction("acc_t(0)", "acc + v", "acc", True),
    "prod": Reduction("acc_t(1)", "acc * v", "acc", True),
    "mean": Reduction("acc_t(0)", "acc + v", "acc / acc_t(count)", False),
    "amax": Reduction("std::numeric_limits<acc_t>::lowest()", "(at::_isnan(v) || v > acc) ? v : acc", "acc", False),
    "amin": Reduction("std::numeric_limits<acc_t>::max()", "(at::_isnan(v) || v < acc) ? v : acc", "acc", False),
}

_DIM_TYPES = {"int[1]?", "int[1]", "int[]", "int[]?", "int"}


def reduction_of(spec: CustomOpSpec) -> Reduction | None:
    """The reduction `spec`'s operator computes, if it has the shape
    `(Tensor self, [dim], [bool keepdim], *, [ScalarType? dtype]) -> Tensor`."""
    base = spec.op.split("::", 1)[1].split(".")[0]
    r = REDUCTIONS.get(base)
    if r is None or spec.returns != ("Tensor",):
        return None
    params = {p.name: p for p in spec.originals}
    if list(params)[:1] != ["self"] or not params["self"].is_tensor:
        return None
    if set(params) - {"self", "dim", "keepdim", "dtype"}:
        return None
    if "dim" in params and params["dim"].type not in _DIM_TYPES:
        return None
    if "keepdim" in params and params["keepdim"].type != "bool":
        return None
    if "dtype" in params and params["dtype"].type != "ScalarType?":
        return None
    return Reduction(r.init, r.step, r.finish, r.integral_to_long,
                     dim_type=params["dim"].type if "dim" in params else None,
                     has_dtype="dtype" in params, has_keepdim="keepdim" in params)


def family_of(spec: CustomOpSpec, tags: tuple[str, ...] = ()) -> str:
    """"pointwise", "reduction", "convolution", "batch_norm" or "aten" (Note [reference kernels])."""
    if _pointwise(spec, tags) is not None:
        return "pointwise"
    if reduction_of(spec) is not None:
        return "reduction"
    if spec.op == "aten::convolution":
        return "convolution"
    if spec.op == "aten::native_batch_norm":
        return "batch_norm"
    return "aten"


def pointwise_formula(spec: CustomOpSpec) -> Pointwise:
    formula = _pointwise(spec, ())
    if formula is None:
        raise ValueError(f"{spec.op} has no pointwise formula")
    return formula
