"""What the scaffolded kernel computes, by the shape of the operator it starts
from: a loop for elementwise operators whose formula kernelmap knows, a loop
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

__all__ = ["Pointwise", "POINTWISE", "family_of"]


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


def family_of(spec: CustomOpSpec, tags: tuple[str, ...] = ()) -> str:
    """"pointwise", "convolution", "batch_norm" or "aten" (Note [reference kernels])."""
    if _pointwise(spec, tags) is not None:
        return "pointwise"
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
