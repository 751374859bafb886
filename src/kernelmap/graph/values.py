"""The values a call passes: the flags it writes as literals (Note [flags
passed as literals]), the values it passes on by name (Note [values a call
passes]), and the overload a literal's type picks (Note [overloads told apart
by a literal]).
"""

from __future__ import annotations

import contextvars
import re

from kernelmap.graph import arms
from kernelmap.graph.arms import _NUMBER_LITERAL, number_value
from kernelmap.graph.code import (
    _argument_value,
    _blank_keeping_lines,
    _bound_flags,
    call_arguments,
    _CODE_ONLY,
    parameters,
    tree_lines,
)
from kernelmap.graph.context import GraphContext
from kernelmap.graph.grow import Node
from kernelmap.graph.overloads import _accepts, _declared_type
from kernelmap.graph.rules import schema_arguments
from kernelmap.model import Op


# Note [flags passed as literals]
# at::native::sort calls `at::sort(self, false, dim, descending)`: aten::sort.stable
# with `stable` false. Below that call, sort_kernel_impl's `if (stable)` arm is
# not taken and its else is, as an arm of a flag left at its default is
# (Note [ranking a call's ends] in graph.ends). A call of an operator records
# the `bool` and `bool?` arguments it passes as `true` or `false`, matched to
# the schema by position in the C++ signature: a method call's tensor is
# `self`; `at::<name>_out` puts the out arguments first. Operators that gather
# `dtype`, `layout`, `device` and `pin_memory` into TensorOptions are left
# out (their C++ positions differ from the schema's). A direct call records
# the `bool` parameters of the definition it reaches that it passes so
# (`_exec_fft(..., /*forward=*/false)` in _fft_c2r_mkl). The flags join the
# node's identity: _exec_fft called with `forward` false is expanded again
# where it was expanded above with `forward` as its caller passes it.


def _given(node: Node, flags: dict[str, bool | float]) -> Node:
    """`node` with the flags its call passes as literals (Note [flags passed
    as literals]) and the numbers (Note [numbers passed as literals]); a
    call with other values is expanded on its own."""
    if flags and node.identity is not None:
        bools = {name: value for name, value in flags.items() if isinstance(value, bool)}
        numbers = {name: value for name, value in flags.items() if not isinstance(value, bool)}
        if bools:
            node.attrs["given_flags"] = tuple(f"{name}={'true' if value else 'false'}" for name, value in bools.items())
        if numbers:
            node.attrs["given_values"] = tuple(f"{name}={value:g}" for name, value in numbers.items())
        node.identity = (*node.identity, *node.attrs.get("given_flags", ()), *node.attrs.get("given_values", ()))
        node.attrs["identity"] = ":".join(str(part) for part in node.identity)
    return node


# Note [numbers passed as literals]
# A call passes numbers as well as flags: mm's kernel runs
# `addmm_impl_cpu_(result, result, self, mat2, 0, 1)`, the addmm helper with
# `beta` 0 and `alpha` 1, and dot calls `mkldnn_matmul(self, other, r,
# /*beta=*/0)`. A direct call records the number parameters of the
# definition it reaches (`const Scalar& beta`, `float alpha`, `int64_t dim`)
# that it passes a number literal (`0`, `1.0f`, `-1`), or a number its own
# caller passed it by name, read as a number (`beta.to<float>()`,
# `beta.toComplexDouble()`). The numbers join the node's identity as the
# flags do, and decide the tests that compare them with a number below
# (`if (beta.toComplexDouble() == 0.0)`, `beta != scalar_t(1)`: Note [arms
# that cannot run] in graph.arms), so the arm mm never takes (`result.mul_(beta)`)
# is a branch, not a leaf.
_NUMBER_PARAMETER = re.compile(r"(?:const\s+)?(?:at::|c10::|std::)?(Scalar|double|float|int64_t|int32_t|int|long|SymInt|opmath_t|scalar_t|acc_t)"
                               r"\s*&?\s+([A-Za-z_]\w*)(?:\s*=.*)?", re.S)


def _bound_numbers(declared: list[str], arguments: list[str], known: dict) -> dict[str, float]:
    """The number parameters of `declared` that `arguments` pass a number to (Note [numbers passed as literals])."""
    numbers = {}
    for parameter, text in zip(declared, arguments):
        m = _NUMBER_PARAMETER.fullmatch(parameter.strip())
        if m is not None and (value := number_value(text, known)) is not None:
            numbers[m.group(2)] = value
    return numbers


def literal_flags(op: Op, site, ctx: GraphContext) -> dict[str, bool]:
    """The flags (`bool`, `bool?` arguments) a call of `op` at `site` passes
    as `true` or `false`, by name (Note [flags passed as literals])."""
    arguments = call_arguments(site, ctx)
    known = _CALLER_VALUES.get()
    if not arguments or "Layout? layout" in op.schema or not any(_argument_value(a, known) is not None for a in arguments):
        return {}
    declared = _passed_parameters(op, site)
    if len(arguments) > len(declared):
        return {}
    flags = {}
    for (kind, name), text in zip(declared, arguments):
        value = _argument_value(text, known)
        if kind in ("bool", "bool?") and value is not None:
            flags[name] = value
    return flags


# Note [values a call passes]
# Note [flags passed as literals] reads the `true` and `false` a call writes.
# A value is also passed on by name: at::native::convolution calls
# `at::_convolution(..., transposed, ...)` with the `transposed` conv2d's
# `at::convolution_symint(..., false, ...)` gave it; _convolution, whose
# parameter is `transposed_`, sets `params.transposed = transposed_` and
# passes `params` to _select_conv_backend. So the flags a node's call
# passes (its `given_flags`, its parameters by name) are the values its own
# calls can pass: an argument that names one (or negates it, `!train`), or a
# field of one set from one, is that value for the callee's parameter at its
# place (an operator's kernel takes its schema's arguments in order; a stub's
# kernel takes the stub call's arguments after the device type). An arm
# whose test these values decide against (`if (transposed)`, the `else` of
# `if (!train)`) cannot run for the call: it is a branch, not a leaf
# (Note [arms that cannot run]).
_CALLER_VALUES: contextvars.ContextVar[dict[str, bool]] = contextvars.ContextVar("caller_values", default={})


# `params.transposed = transposed_;` (a field set from a value the call passes), `const bool train = false;`
# (a constant): a name set to a known value. A local `bool` set from a test the call decides is known too:
# mkldnn_gemm's `bool bf32_usable = std::is_same_v<scalar_t, float> && use_mkldnn_bf32_matmul();`.
_ASSIGNMENT = re.compile(r"(?:^|[;{])\s*(?:(const|constexpr)\s+bool\s+)?([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)?)\s*=\s*(!?\s*[A-Za-z_]\w*)\s*;", re.M)


def _assigned(definition, known: dict[str, bool], ctx: GraphContext) -> dict[str, bool]:
    """What a definition's body sets from values its call passes, or a
    constant it declares (Note [values a call passes]): `params.transposed =
    transposed_` in _convolution. A name set anywhere else (`x = ...;`, `x |= ...`)
    is not known; a local set to a literal only where declared `const`."""
    if ctx.index is None:
        return {}
    location = definition.location
    lines = tree_lines(ctx, location.path)
    text = "\n".join(lines[location.line - 1 : location.end_line or location.line])
    if "=" not in text:
        return {}
    code = _CODE_ONLY.sub(_blank_keeping_lines, text)
    found: dict[str, bool | None] = {}
    for m in _ASSIGNMENT.finditer(code):
        constant, name, value_text = m.group(1), m.group(2), m.group(3)
        literal = value_text.strip() in ("true", "false")
        value = _argument_value(value_text, known) if (constant or not literal) else None
        found[name] = value if name not in found and value is not None else None
    for m in _DECLARED_FROM_TEST.finditer(code):  # `bool bf16_usable = std::is_same_v<scalar_t, c10::BFloat16> && ...;`
        name, test = m.group(1), re.sub(r"\s+", " ", m.group(2)).strip()
        if name in found or _ASSIGNMENT_VALUE.fullmatch(test):
            continue
        found[name] = _decided(test, known, definition, ctx)
    for name in [n for n, v in found.items() if v is not None]:  # set once, and nowhere else
        if len(re.findall(rf"(?<![\w.]){re.escape(name)}\s*(?:[-+*/|&^]|<<|>>)?=(?!=)", code)) != 1:
            found[name] = None
    return {name: value for name, value in found.items() if value is not None and name not in known}


# `bool bf16_usable = std::is_same_v<scalar_t, c10::BFloat16> && use_mkldnn_bf16_matmul();`: a local flag set from a test.
_DECLARED_FROM_TEST = re.compile(r"(?:^|[;{}])\s*(?:const\s+|constexpr\s+)?bool\s+([A-Za-z_]\w*)\s*=\s*([^;{}]+?)\s*;", re.M)
_ASSIGNMENT_VALUE = re.compile(r"!?\s*[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)?")


def _decided(test: str, known: dict[str, bool], definition, ctx: GraphContext) -> bool | None:
    """The value of a local flag set from a test (Note [values a call
    passes]) where the call decides it: the values it passes, the dtype
    (Note [an element type tested] in graph.dtypes), the settings at their
    defaults (Note [settings at their defaults] in graph.arms); None otherwise."""
    if "(" not in test and not any(k.split(".", 1)[0] in test for k in known):
        return None
    return arms.decide(test, known, ctx, path=definition.location.path)


def node_flags(node) -> dict[str, bool | float]:
    """The flags a node's call passes (`given_flags`), by name, and the
    numbers (`given_values`: Note [numbers passed as literals])."""
    flags: dict[str, bool | float] = {name: value == "true" for name, _, value in (f.partition("=") for f in node.attrs.get("given_flags", ()))}
    flags.update({name: float(value) for name, _, value in (f.partition("=") for f in node.attrs.get("given_values", ()))})
    return flags


def _passed_parameters(op: Op, site) -> list[tuple[str, str]]:
    """(type, name) of the schema's arguments in the order a C++ call passes
    them: a member call's receiver is `self`; `at::<op>_out` passes its
    outputs first."""
    declared = []
    for argument in schema_arguments(op.schema):
        kind, _, name = argument.partition("=")[0].strip().rpartition(" ")
        declared.append((kind.strip(), name))
    if site.callee.startswith(".") and declared and declared[0][1] == "self":
        declared = declared[1:]
    if op.is_out and site.name.endswith(("_out", "_symint_out")):
        declared = [d for d in declared if "!" in d[0]] + [d for d in declared if "!" not in d[0]]
    return declared


def by_literal_types(op: Op, site, ctx: GraphContext) -> Op:
    """Note [overloads told apart by a literal]: the overload a dispatcher call
    reaches when it passes a number where the resolved overload takes a
    Tensor: rms_norm's `at::pow(upcasted_input, 2)` is pow.Tensor_Scalar,
    not pow.Tensor_Tensor, and `x.add(1)` is add.Scalar. A number is a
    literal, or a name or arithmetic of names the caller declares as
    numbers (`double p`: dropout's `noise.bernoulli_(1 - p)` is
    bernoulli_.float, not bernoulli_.Tensor). The resolved operator stays
    when it takes the numbers, or when no other overload of its name and
    kind (out=, in-place) takes every argument passed."""
    arguments = call_arguments(site, ctx)
    if not arguments:
        return op
    declared = _passed_parameters(op, site)
    numbers = {i for i, ((kind, _), text) in enumerate(zip(declared, arguments))
               if kind.startswith("Tensor") and _is_number(text, site, ctx)}
    if not numbers:
        return op

    count = len(arguments) + site.callee.startswith(".")  # `self.add(1)`: the tensor is the first argument

    def fits(candidate: Op) -> bool:
        declared = _passed_parameters(candidate, site)
        if not _accepts(candidate, count) or len(arguments) > len(declared):
            return False
        return not any(declared[i][0].startswith("Tensor") for i in numbers)

    for other in ctx.overloads(op.name.name):  # an in-place operator's overloads are listed under its own name (bernoulli_)
        if other.name.name == op.name.name and other.is_out == op.is_out and other.is_inplace == op.is_inplace and fits(other):
            return other
    return op


# Types of a number a C++ caller declares (`double p`, `const Scalar& alpha`).
_NUMBER_TYPES = frozenset(("double", "float", "int", "long", "int64_t", "int32_t", "uint8_t", "size_t", "Scalar", "SymInt"))
_ARITHMETIC = re.compile(r"[\w\s.+\-*/()]+")
_NAME = re.compile(r"(?<![\w.])[A-Za-z_]\w*")


def _is_number(text: str, site, ctx: GraphContext) -> bool:
    """Whether an argument is a number: a literal, or a name or arithmetic of
    names and literals whose names the caller declares with a number's type
    (`1 - p` of `double p`); a call or a member in it is not read."""
    if _NUMBER_LITERAL.fullmatch(text):
        return True
    if not _ARITHMETIC.fullmatch(text) or re.search(r"\w\s*\(|\.\s*[A-Za-z_]", text):
        return False
    names = _NAME.findall(text)
    return bool(names) and all(_declared_type(name, site, ctx) in _NUMBER_TYPES for name in names)


def _literal_parameters(definition, site, ctx: GraphContext) -> dict[str, bool | float]:
    """The `bool` parameters of `definition` a direct call at `site` passes as
    `true` or `false`, by name (`_exec_fft(out, self, out_sizes, dims,
    normalization, /*forward=*/false)`): Note [flags passed as literals]; and
    the number parameters it passes a number (Note [numbers passed as literals])."""
    arguments = call_arguments(site, ctx)
    known = _CALLER_VALUES.get()
    if not arguments or not any(_argument_value(a, known) is not None or f"{a.strip()}." in "".join(known) or number_value(a, known) is not None
                                for a in arguments):
        return {}
    declared = parameters(definition, ctx)
    if declared is None or len(arguments) > len(declared):
        return {}
    bools = {name: value for name, value in known.items() if isinstance(value, bool)}
    return {**_bound_numbers(declared, arguments, known), **_bound_flags(declared, arguments, bools)}
