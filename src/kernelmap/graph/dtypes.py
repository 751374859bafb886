"""The selected dtype in the source's own spelling: the `ScalarType` a
`--dtype` names, its C++ element type, and whether a branch that tests the
call's dtype (`if (dtype == ScalarType::Bool)`, `at::isReducedFloatingType(dtype)`,
`AT_DISPATCH_CASE(at::ScalarType::Float, ...)`) is taken for it.

Note [dtype branches]
A kernel often switches on its dtype before the AT_DISPATCH macro
(BinaryOpsKernel.cpp's mul_kernel: Bool, ComplexHalf, a reduced floating
type with a CPU scalar, then the rest). A branch whose condition is false
for the selected dtype is marked like a branch for another device (Note
[branches]): shown collapsed, never followed. Only conditions that test
the dtype alone decide: `a && is_reduced(dtype)` is false when the dtype
is not reduced, and undecided (followed) when it is; anything the tests
below do not read leaves the branch as it was. Every tensor of the call is
taken to be of the selected dtype: mean_kernel_cuda's `iter.dtype(1) ==
kHalf && iter.dtype() == kFloat` (a Half input, a float output) is false for
float32.

Note [a comparison's output dtype]
A comparison's kernel tests the output's dtype, not the inputs':
BinaryOpsKernel.cpp's eq_kernel runs `cpu_kernel` with a `-> bool` lambda
`if (iter.dtype() == ScalarType::Bool)` and `cpu_kernel_vec` otherwise, and
`iter.dtype()` is operand 0's, the output's. A structured operator whose
meta function builds its iterator with `build_borrowing_comparison_op` (or
`build_comparison_op`, `build_borrowing_except_last_argument_comparison_op`)
gets TensorIterator.cpp's comparison_op_config, which declares the output
`kBool` when no output is given: a functional call (`eq.Tensor`, not its
out= or in-place form) writes a bool tensor whatever its inputs' dtype. Its
impl node carries that output dtype (in its identity) to the stub kernels it
calls, where `iter.dtype()` and `iter.dtype(0)` are read as the output's;
every other dtype expression stays the inputs' (the selected dtype).
"""

from __future__ import annotations

import functools
import re

from kernelmap import vendors
from kernelmap.graph.rules import balanced

# torch dtype name -> (ScalarType, C++ element type as ATen spells it)
SCALAR_TYPES = {
    "float32": ("Float", "float"), "float64": ("Double", "double"), "float16": ("Half", "Half"),
    "bfloat16": ("BFloat16", "BFloat16"), "complex64": ("ComplexFloat", "c10::complex<float>"),
    "complex128": ("ComplexDouble", "c10::complex<double>"), "complex32": ("ComplexHalf", "c10::complex<Half>"),
    "int64": ("Long", "int64_t"), "int32": ("Int", "int32_t"), "int16": ("Short", "int16_t"), "int8": ("Char", "int8_t"),
    "uint8": ("Byte", "uint8_t"), "bool": ("Bool", "bool"),
}
_ALIASES = {"float": "float32", "double": "float64", "half": "float16", "cfloat": "complex64", "cdouble": "complex128",
            "chalf": "complex32", "long": "int64", "int": "int32", "short": "int16"}
# The type ATen computes a reduced-precision dtype in (at::opmath_type).
OPMATH = {"float16": "float", "bfloat16": "float"}
_FLOATING = {"Float", "Double", "Half", "BFloat16"}
_REDUCED = {"Half", "BFloat16"}
_COMPLEX = {"ComplexFloat", "ComplexDouble", "ComplexHalf"}
_INTEGRAL = {"Long", "Int", "Short", "Char", "Byte"}

# A dtype-valued expression of a kernel: `dtype`, `common_dtype`, `iter.dtype()`, `self.scalar_type()`,
# an operand's `iter.dtype(1)`: every tensor of the call is taken to be of the selected dtype.
_DTYPE_EXPR = r"[\w.>\-]*(?:dtype|scalar_type)\w*(?:\(\d?\))?"
_COMPARE = re.compile(rf"^({_DTYPE_EXPR})\s*(==|!=)\s*(?:(?:at|c10)::)?(?:ScalarType::|k)(\w+)$")
# The output operand's dtype in a TensorIterator kernel: `iter.dtype()`, `iter.dtype(0)`.
_OUTPUT_EXPR = re.compile(r"^\w+(?:\.|->)dtype\(0?\)$")
_PREDICATE = re.compile(rf"^(?:(?:at|c10)::)?is(ReducedFloating|Floating|Complex|Integral|QInt|Bits|Float8)Type\(\s*({_DTYPE_EXPR})\s*(?:,\s*(\w+)\s*)?\)$")
# A tensor's own test of its dtype: `self.is_complex()`, `result.is_floating_point()`.
_TENSOR_PREDICATE = re.compile(r"^[\w.>\-]*?\bis_(complex|floating_point)\(\)$")
# The call's own input, whose dtype is the selected one whichever way it is tested (`!self.is_complex()`)
_INPUT_RECEIVER = re.compile(r"^(?:self|input)\.is_")
# A tensor's test of its conjugate bit: `self.is_conj()`, `!src.is_conj()`
_CONJ_BIT = re.compile(r"^[\w.>\-]*?\bis_conj\(\)$")
# A tensor's test of its negative bit: `iter.tensor_base(0).is_neg()`
_NEG_BIT = re.compile(r"^[\w.>\-]*?(?:\(\d?\)\.)?\bis_neg\(\)$")
# A template's test of its element type: `std::is_same_v<scalar_t, c10::BFloat16>`, `std::is_same<scalar_t, float>::value`
# (Note [an element type tested]).
_SAME_TYPE = re.compile(r"^(?:std::)?is_same(?:_v<\s*scalar_t\s*,\s*([\w:<> ]+?)\s*>|<\s*scalar_t\s*,\s*([\w:<> ]+?)\s*>::value)$")


def canonical(dtype: str | None) -> str | None:
    """`float` -> `float32`; None when the name is not one this module knows."""
    if not dtype:
        return None
    name = dtype.removeprefix("torch.")
    name = _ALIASES.get(name, name)
    return name if name in SCALAR_TYPES else None


def scalar_type(dtype: str | None) -> str | None:
    """The ScalarType of a dtype name: `float32` -> `Float`."""
    name = canonical(dtype)
    return SCALAR_TYPES[name][0] if name else None


def _atom(text: str, scalar: str, output: str | None = None) -> bool | None:
    text = re.sub(r"/\*.*?\*/", "", text).strip()
    negated = False
    while text.startswith("!"):
        negated, text = not negated, text[1:].strip()
    while text.startswith("(") and text.endswith(")") and balanced(text[1:-1]):
        text = text[1:-1].strip()
    value: bool | None = None
    m = _COMPARE.match(text)
    if m:
        tested = output if output is not None and _OUTPUT_EXPR.match(m.group(1)) else scalar
        value = (m.group(3) == tested) == (m.group(2) == "==")
    m = _TENSOR_PREDICATE.match(text) if value is None else None
    if m:  # `self.is_complex()`: every input of the call is of the selected dtype; not always an output
        if negated and not _INPUT_RECEIVER.match(text):  # (`!result.is_complex()`: abs of a complex tensor gives a real one)
            return None
        value = scalar in (_COMPLEX if m.group(1) == "complex" else _FLOATING)
    if value is None and _CONJ_BIT.match(text) and scalar not in _COMPLEX:
        value = False  # a real tensor never has its conjugate bit set (at::conj of one is itself)
    if value is None and _NEG_BIT.match(text):
        value = False  # nor has a tensor made by any call but at::_neg_view its negative bit (answers are for such tensors)
    m = _SAME_TYPE.match(text) if value is None else None
    if m:
        value = same_element_type(m.group(1) or m.group(2), scalar)
    m = _PREDICATE.match(text) if value is None else None
    if m:
        kind = m.group(1)
        if kind == "ReducedFloating":
            value = scalar in _REDUCED
        elif kind == "Floating":
            value = scalar in _FLOATING
        elif kind == "Complex":
            value = scalar in _COMPLEX
        elif kind in ("QInt", "Bits", "Float8"):
            value = False  # quantized, bit and float8 types: none of the dtypes a call is asked for
        else:
            value = scalar in _INTEGRAL or (scalar == "Bool" and m.group(3) in ("true", "True", "includeBool"))
    if value is None:
        return None
    return not value if negated else value


# Note [an element type tested]
# A kernel templated on its element type tests it in C++ too:
# mkldnn/Matmul.cpp's mkldnn_gemm sets `bool bf16_usable =
# std::is_same_v<scalar_t, c10::BFloat16> && use_mkldnn_bf16_matmul();`
# and returns before its oneDNN call unless one such flag holds. `scalar_t`
# is the element type of the selected dtype (every tensor of the call is of
# it, Note [dtype branches]): `std::is_same_v<scalar_t, X>` (or
# `std::is_same<scalar_t, X>::value`) holds when X spells that type (`float`,
# `c10::BFloat16`, `at::Half`), and fails when X spells another element type
# this module knows; any other X (`opmath_t`, a class) is not read.
_ELEMENT_TYPES = {element.removeprefix("c10::"): scalar for scalar, element in SCALAR_TYPES.values()}
_ELEMENT_TYPES.update({"Half": "Half", "BFloat16": "BFloat16", "complex<float>": "ComplexFloat", "complex<double>": "ComplexDouble",
                       "complex<Half>": "ComplexHalf", "long": "Long", "int": "Int", "short": "Short"})


def same_element_type(spelled: str, scalar: str) -> bool | None:
    """Whether the type `spelled` is the element type of the ScalarType
    `scalar` (Note [an element type tested]); None when `spelled` is no
    element type this module knows."""
    name = re.sub(r"\s+", "", spelled)
    name = re.sub(r"\b(?:c10|at)::", "", name)
    found = _ELEMENT_TYPES.get(name)
    return None if found is None else found == scalar


def _split(text: str, operator: str) -> list[str]:
    parts, depth, current, i = [], 0, [], 0
    while i < len(text):
        ch = text[i]
        depth += ch == "("
        depth -= ch == ")"
        if depth == 0 and text.startswith(operator, i):
            parts.append("".join(current))
            current, i = [], i + len(operator)
            continue
        current.append(ch)
        i += 1
    parts.append("".join(current))
    return parts


def evaluate(condition: str, dtype: str | None, output: str | None = None) -> bool | None:
    """Whether the `if (...)` / `else of if (...)` condition holds for `dtype`
    (None: undecided, Note [dtype branches]); `output`, the output's dtype
    where the operator decides it (Note [a comparison's output dtype])."""
    scalar = scalar_type(dtype)
    out = scalar_type(output)
    if scalar is None or not condition:
        return None
    text = condition.strip()
    negate = text.startswith("else of ")
    text = text.removeprefix("else of ").strip()
    m = re.fullmatch(r"if\s*\((.*)\)", text, re.S)
    if m is None:
        return None
    body = m.group(1)
    if "||" in body:
        values = [evaluate_conjunction(part, scalar, out) for part in _split(body, "||")]
        value = True if True in values else (False if all(v is False for v in values) else None)
    else:
        value = evaluate_conjunction(body, scalar, out)
    if value is None:
        return None
    return not value if negate else value


def evaluate_conjunction(text: str, scalar: str, output: str | None = None) -> bool | None:
    values = [_atom(part, scalar, output) for part in _split(text, "&&")]
    if False in values:
        return False
    return True if all(v is True for v in values) else None


def checks_dtype(condition: str | None) -> bool:
    """Whether a condition tests the call's dtype somewhere (decided or not)."""
    if not condition:
        return False
    text = re.sub(r"^(else of )?if\s*\(|\)$", "", condition.strip())
    return any(_atom(atom.replace("||", ""), "Float") is not None for part in _split(text, "||") for atom in _split(part, "&&"))


@functools.lru_cache(maxsize=4096)
def other_dtype_reason(condition: str | None, dtype: str | None, output: str | None = None) -> str | None:
    """Why a branch under `condition` is not taken for `dtype` (and the
    output's dtype `output`, Note [a comparison's output dtype]); None when it may be."""
    if not condition or ("dtype" not in condition and "scalar_type" not in condition and "is_complex" not in condition
                         and "is_floating_point" not in condition and "is_conj" not in condition):
        return None  # most conditions test no dtype: answered without parsing them
    if evaluate(condition, dtype, output) is not False:
        return None
    if output is not None and evaluate(condition, dtype) is not False:
        return f"a branch for another output dtype than {canonical(output)}"
    return f"a branch for another dtype than {canonical(dtype)}"


# The TensorIterator builds whose config declares a bool output when none is given (TensorIterator.cpp's comparison_op_config)
_COMPARISON_BUILDS = {"build_comparison_op", "build_borrowing_comparison_op", "build_borrowing_except_last_argument_comparison_op"}


def output_dtype(op, metas, index) -> str | None:
    """The dtype a structured operator's functional call writes whatever its
    inputs' (Note [a comparison's output dtype]): "bool" when its meta
    functions (`metas`: their definitions) build a comparison iterator."""
    if op.is_out or op.is_inplace or index is None:
        return None
    for meta in metas:
        if any(site.name in _COMPARISON_BUILDS for site in index.calls_from(meta)):
            return "bool"
    return None


def with_output_dtype(node, output: str | None):
    """`node`, carrying the output dtype its operator decides (Note [a
    comparison's output dtype]); expanded on its own, apart from a call of
    it that leaves the output to the inputs."""
    if output and node.identity is not None and output_of(node) != output:
        node.identity = (*node.identity, f"output={output}")
        node.attrs["identity"] = ":".join(str(part) for part in node.identity)
    return node


def output_of(node) -> str | None:
    """The output dtype a node carries (with_output_dtype); None when the inputs' decides."""
    return next((part[len("output="):] for part in node.identity or () if isinstance(part, str) and part.startswith("output=")), None)


_PRECISIONS = {"float32": "single", "complex64": "single", "float64": "double", "complex128": "double"}


def other_precision_reason(callee: str, library_id: str | None, dtype: str | None) -> str | None:
    """Why a call of a vendor's routine written for another precision (`vmdExp`
    for double beside `vmsExp` in one macro's expansion, cpu/vml.h) does not run
    for `dtype`; None when it may (a dtype of neither precision decides nothing)."""
    wanted = _PRECISIONS.get(canonical(dtype) or "")
    written = vendors.precision(callee, library_id) if wanted else None
    if written is None or written == wanted:
        return None
    return f"a {written}-precision routine, not for {canonical(dtype)}"


# AT_DISPATCH_CASE(at::ScalarType::Float, ...) of a generated ufunc kernel
_CASE = re.compile(r"AT_DISPATCH_CASE\(\s*(?:at::|c10::)?ScalarType::(\w+)")


def dispatch_case(lines: list[str], dtype: str | None) -> tuple[int, int] | None:
    """(first, last) 0-based line indices of the AT_DISPATCH_CASE block for
    `dtype` in a generated kernel's lines; None when it has no such case."""
    scalar = scalar_type(dtype)
    if scalar is None:
        return None
    starts = [(i, m.group(1)) for i, text in enumerate(lines) for m in [_CASE.search(text)] if m]
    for n, (i, name) in enumerate(starts):
        if name == scalar:
            end = starts[n + 1][0] - 1 if n + 1 < len(starts) else len(lines) - 1
            return i, end
    return None
