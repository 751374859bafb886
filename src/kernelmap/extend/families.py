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

__all__ = ["Backend", "BACKEND_OPS", "BATCH_NORM_MUTATED", "Pointwise", "POINTWISE", "Reduction", "REDUCTIONS",
           "family_of", "pointwise_formula", "reduction_of"]


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


# Note [backend-specific operators]
# On a GPU the operators that run are often a library's own: eval-mode batch
# norm is aten::cudnn_batch_norm, a convolution aten::cudnn_convolution (or
# miopen_* on ROCm). They have kernels for CUDA only, so a reference that calls
# them cannot run on a CPU, and an override of them whose kernel calls them
# calls itself. Their scaffold computes the same results with portable ATen
# operators that never reach the library again: batch norm through
# native_batch_norm (its CUDA kernel is ATen's own, not cuDNN's), convolution
# through at::_convolution with cudnn_enabled=false (which also turns MIOpen
# off: `use_miopen` reads the same flag), taking benchmark, deterministic and
# allow_tf32 from the call itself. The Python reference the tests, the fake
# kernel and the backward use is built the same way.

@dataclass(frozen=True)
class Backend:
    """A library-specific operator and its portable equivalent."""

    library: str  # "cuDNN", "MIOpen"
    family: str  # the family whose reference loop computes it
    portable: str  # the portable operator its reference computes with
    cpp: str  # C++: the original's results from its own argument names, through portable operators only
    python: str  # Python: the same, over `torch.ops.aten`
    canonical: str  # C++: the family's reference arguments (input, weight, bias, ...) from the original's names
    returns: str  # C++: the original's results from the family reference's `r`


_BN_CANONICAL = "input, weight, bias, running_mean, running_var, training, exponential_average_factor, epsilon"
_BN_PORTABLE_CPP = f"at::native_batch_norm({_BN_CANONICAL})"
_BN_PORTABLE_PY = f"torch.ops.aten.native_batch_norm.default({_BN_CANONICAL})"
_RESERVE_CPP = "at::empty({0}, input.options().dtype(at::kByte))"  # cuDNN's reserve space; nothing to keep
_RESERVE_PY = "input.new_empty((0,), dtype=torch.uint8)"


def _conv(transposed: bool, bias: bool, tf32: bool) -> tuple[str, str, str]:
    """(cpp, python, canonical) of a cuDNN/MIOpen convolution as at::_convolution with cuDNN and MIOpen off."""
    b_cpp, b_py = ("bias", "bias") if bias else ("::std::optional<at::Tensor>()", "None")
    op_cpp = "output_padding" if transposed else "std::vector<int64_t>(stride.size(), 0)"
    op_py = "output_padding" if transposed else "[0] * len(stride)"
    t = "true" if transposed else "false"
    tf32_cpp, tf32_py = ("allow_tf32", "allow_tf32") if tf32 else ("at::globalContext().allowTF32CuDNN()", "torch.backends.cudnn.allow_tf32")
    cpp = (f"at::_convolution(self, weight, {b_cpp}, stride, padding, dilation, {t}, {op_cpp}, groups, benchmark, "
           f"deterministic, /*cudnn_enabled=*/false, {tf32_cpp})")
    py = (f"torch.ops.aten._convolution.default(self, weight, {b_py}, stride, padding, dilation, {t == 'true'}, {op_py}, "
          f"groups, benchmark, deterministic, False, {tf32_py})")
    canonical = f"self, weight, {b_cpp}, stride, padding, dilation, {t}, {op_cpp}, groups"
    return cpp, py, canonical


def _conv_backend(library: str, transposed: bool, bias: bool, tf32: bool) -> Backend:
    cpp, py, canonical = _conv(transposed, bias, tf32)
    return Backend(library, "convolution", "aten::_convolution", cpp, py, canonical, "r")


# cuDNN's batch norm saves no statistics in evaluation: save_mean and save_var come back empty.
_CUDNN_BN_RETURNS_CPP = ("::std::make_tuple(std::get<0>(r), training ? std::get<1>(r) : at::empty({0}, weight.options()), "
                         f"training ? std::get<2>(r) : at::empty({{0}}, weight.options()), {_RESERVE_CPP})")
_CUDNN_BN_RETURNS_PY = (f"(lambda r: (r[0], r[1] if training else weight.new_empty((0,)), r[2] if training else weight.new_empty((0,)), "
                        f"{_RESERVE_PY}))")

BACKEND_OPS: dict[str, Backend] = {
    "aten::cudnn_batch_norm": Backend(
        "cuDNN", "batch_norm", "aten::native_batch_norm",
        f"[&] {{ auto r = {_BN_PORTABLE_CPP}; return {_CUDNN_BN_RETURNS_CPP}; }}()",
        f"{_CUDNN_BN_RETURNS_PY}({_BN_PORTABLE_PY})",
        _BN_CANONICAL,
        _CUDNN_BN_RETURNS_CPP),
    "aten::miopen_batch_norm": Backend("MIOpen", "batch_norm", "aten::native_batch_norm", _BN_PORTABLE_CPP,
                                       _BN_PORTABLE_PY, _BN_CANONICAL, "r"),
    "aten::cudnn_convolution": _conv_backend("cuDNN", False, False, True),
    "aten::cudnn_convolution_transpose": _conv_backend("cuDNN", True, False, True),
    "aten::miopen_convolution": _conv_backend("MIOpen", False, True, False),
    "aten::miopen_depthwise_convolution": _conv_backend("MIOpen", False, True, False),
    "aten::miopen_convolution_transpose": _conv_backend("MIOpen", True, True, False),
}

# Batch norm writes its running statistics when training (Note [mutated arguments]).
BATCH_NORM_MUTATED = {"running_mean": "a!", "running_var": "b!"}
BATCH_NORM_OPS = ("aten::native_batch_norm", "aten::cudnn_batch_norm", "aten::miopen_batch_norm")


def family_of(spec: CustomOpSpec, tags: tuple[str, ...] = ()) -> str:
    """"pointwise", "reduction", "convolution", "batch_norm" or "aten" (Note [reference kernels])."""
    if spec.op in BACKEND_OPS:
        return BACKEND_OPS[spec.op].family
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
