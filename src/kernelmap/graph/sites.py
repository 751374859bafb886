"""A C++ definition's children in the static graph: each call site as a node (an
operator through the dispatcher, a stub, a device loop, a library, a direct
call), with the rules that decide which calls run: Note [steps that run],
Note [conditions around a call], Note [operators written as C++ operators],
Note [vectorized math], Note [unqualified operator calls], Note [template
arguments], Note [stub parameters], Note [a composite's utilities].
"""

from __future__ import annotations

import dataclasses
import functools
import re
from typing import Any

from kernelmap.errors import KernelmapError
from kernelmap.graph.code import (
    declaration_head,
    _name_followed,
    _argument_value,
    _bracket_items,
    _by_short_name,
    call_arguments,
    _COMMENT,
    code_only,
    compiled,
    _is_bool_parameter,
    _parameter_name,
    parameters,
    tree_lines,
)
from kernelmap.graph.context import GraphContext, kept_results, shared_results
from kernelmap.graph.grow import cpp_node, Node, vendor_node
from kernelmap.graph.kernel_loops import (
    _device_loop,
    _ITERATOR_LOOPS,
    _loop_call,
    _loop_lambdas,
    _own_loop,
    _PARALLEL_LOOPS,
)
from kernelmap.graph.nodes import (
    dedupe,
    entered,
    entered_op,
    _is_utility_kernel,
    is_view_alias,
    op_node,
    _own_overload,
    _utility_kernel,
)
from kernelmap.graph.overloads import (
    _all_distinct_conditions,
    _angle_items,
    argument_type,
    _ANGLE_TAIL,
    by_argument_count,
    by_argument_types,
    by_arity,
    by_build,
    by_class_specialisation,
    by_cpp_overload,
    by_dtype,
    by_enable_if,
    by_out_spelling,
    _DTYPE_TYPES,
    dtype_work,
    is_template,
    _nearest,
    not_compiled,
    _one_symbol,
    _parameter_names,
    _Spelled,
    _TEMPLATE_HEAD,
    _template_parameters,
)
from kernelmap.graph.resolve import chained_receiver_type, _declarations, _declared_at, receiver_declarations, receiver_type, _resolve_direct
from kernelmap.graph.rules import (
    is_inspection_op,
    is_utility_op,
    KERNEL_DIRS,
    launch_kind,
    moves_no_element,
    other_device_reason,
    VECTORIZED_MATH,
)
from kernelmap.graph.stubs import _generated_children, _generated_kernel_children, GeneratedKernel, _stub_children
from kernelmap.graph.values import (
    _assigned,
    by_literal_types,
    _CALLER_VALUES,
    _given,
    _is_number,
    literal_flags,
    _literal_parameters,
    node_flags,
)
from kernelmap.model import EdgeKind, Location, NodeKind, Op


# Note [operators written as C++ operators]
# `self * other`, `x == 0`, `out += bias` on a Tensor call the operator the
# tree's TensorOperators.h defines for it (`_(*, x.mul(y), y.mul(x))`: a
# Tensor on the left calls its method with the right operand, a Scalar on the
# left the reverse body, `1 - x` an empty_like filled with the Scalar, then
# sub_), and TensorBody.h's compound assignments (`operator+=` -> `add_`): an
# operator call like any, at the line of the expression, though the index
# records no call there. Both headers are read from the selected tree. An
# expression is read so where an operand is known to be a Tensor: a variable
# the caller declares a Tensor (`const Tensor& self`, `Tensor out`), the
# result of an operator that returns one (`(a * a).sum(dim) + EPSILON`,
# `at::all(x) == y`) or of a parenthesised Tensor expression; `i * 2` on ints
# is no call. The other operand picks the overload the header's definition
# reaches: a number, or a name declared a number or Scalar (`x + EPSILON` of
# `constexpr float EPSILON`, `Scalar(0)`), the `.Scalar` one, else `.Tensor`.
# A unary minus on a Tensor (`-target * (...)`, `return -(x * y).sum()`)
# calls TensorBody.h's `operator-()`, which returns neg(). `.item<T>()` (and `.item()`) on a Tensor is the operator item: TensorBody.h
# declares it beside the Tensor's generated methods, and each of its
# specialisations calls `item()`, which calls `at::_ops::item::call`. The arms
# around a call are the recorded call's on the same line, if any.
_FALLBACK_BINARY = {
    **{o: (m, (r,)) for o, m, r in (("+", "add", "add"), ("*", "mul", "mul"), ("&", "bitwise_and", "bitwise_and"), ("|", "bitwise_or", "bitwise_or"),
                                    ("^", "bitwise_xor", "bitwise_xor"), ("<", "lt", "gt"), ("<=", "le", "ge"), (">", "gt", "lt"),
                                    (">=", "ge", "le"), ("==", "eq", "eq"), ("!=", "ne", "ne"))},
    **{o: (m, ("empty_like", "fill_", f"{m}_")) for o, m in (("-", "sub"), ("/", "div"), ("%", "remainder"))}}
_FALLBACK_COMPOUND = {"+=": "add_", "-=": "sub_", "*=": "mul_", "/=": "div_", "&=": "bitwise_and_", "|=": "bitwise_or_", "^=": "bitwise_xor_"}
_BINARY_ENTRY = re.compile(r"_\(\s*([-+*/%&|^<>=!]+)\s*,")
_CALLED_NAME = re.compile(r"(?:::|\.)\s*([A-Za-z_]\w*)\s*\(\s*([A-Za-z_]\w*)?")
_COMPOUND_DEFINITION = re.compile(r"Tensor\s*&\s*operator\s*([-+*/%&|^]=)\s*\(\s*const\s+(Tensor|Scalar)\s*&\s*\w+\s*\)\s*\{\s*return\s+(\w+)\s*\(")
# an operator token: not `->`, `<<`, `>>`, `&&`, `||`, `++`, `--`, `::`, nor a token's first character
_OPERATOR_TOKEN = re.compile(r"(?<![-+*/%&|^<>=!])(==|!=|<=|>=|[-+*/%&|^]=|[-+*/%&|^<>])(?![-+*/%&|^<>=!])")
_ITEM_CALL = re.compile(r"(?:\.|->)\s*item\s*(?:<[^<>();]*>)?\s*\(\s*\)")
_TRAILING_NAME = re.compile(r"(?:(?:->|\.)\s*|::)?([A-Za-z_]\w*)\s*$")
_TENSOR_TYPE = re.compile(r"(?:at::)?Tensor")
_TENSOR_DECLARATION = re.compile(r"(?<![\w:])(?:at::)?Tensor\s*&{0,2}\s*([A-Za-z_]\w*)\s*[,)=;({]")
_TENSORS_DECLARED = re.compile(r"(?<![\w:(,]\s)(?<![\w:(,])(?:at::)?Tensor\s+([A-Za-z_]\w*(?:\s*,\s*[A-Za-z_]\w*)+)\s*;")


@functools.lru_cache(maxsize=8)
def _operator_table(root) -> tuple[dict[str, tuple[tuple[str, str], tuple[tuple[str, str], ...]]], dict[tuple[str, str], str]]:
    """({operator: (the method a Tensor on the left calls, the calls of the
    reverse body for a Scalar on the left)}, {(compound operator, right type):
    the in-place method}), read from the tree's TensorOperators.h and
    TensorBody.h (Note [operators written as C++ operators]); the 2.6.0
    headers' table where a tree lacks them."""
    from pathlib import Path

    binary: dict[str, tuple[tuple[str, str], tuple[tuple[str, str], ...]]] = {}
    try:
        text = Path(root, "aten/src/ATen/TensorOperators.h").read_text(errors="replace")
    except OSError:
        text = ""
    block = text.partition("#define AT_FORALL_BINARY_OPS(_)")[2].partition("#define DEFINE_OPERATOR")[0].replace("\\\n", " ")
    entries = list(_BINARY_ENTRY.finditer(block))
    for m, after in zip(entries, [*entries[1:], None]):
        body = block[m.end() : after.start() if after else len(block)]
        depth, split = 0, None
        for i, ch in enumerate(body):  # the forward body ends at the first top-level comma
            depth += (ch == "(") - (ch == ")")
            if ch == "," and depth == 0:
                split = i
                break
        if split is None:
            continue
        forward, reverse = _CALLED_NAME.findall(body[:split]), _CALLED_NAME.findall(body[split + 1 :])
        if forward and reverse:
            binary[m.group(1)] = (forward[0], tuple(reverse))
    compound: dict[tuple[str, str], str] = {}
    try:
        body_text = Path(root, "aten/src/ATen/templates/TensorBody.h").read_text(errors="replace")
    except OSError:
        body_text = ""
    for m in _COMPOUND_DEFINITION.finditer(body_text):
        compound[(m.group(1), m.group(2))] = m.group(3)
    if not binary:
        binary = {o: ((m, "y"), tuple((r, "y" if r != "fill_" else "x") for r in reverse)) for o, (m, reverse) in _FALLBACK_BINARY.items()}
    if not compound:
        compound = {(o, kind): method for o, method in _FALLBACK_COMPOUND.items() for kind in ("Tensor", "Scalar")}
    return binary, compound


_UNARY_BEFORE = re.compile(r"(?:^|[-+*/%&|^<>=!(,?:\[{]|\breturn)\s*$")


@functools.lru_cache(maxsize=8)
def _unary_table(root) -> dict[str, str]:
    """{unary operator: the method it returns} of a Tensor, read from the tree's TensorBody.h (`Tensor operator-() const { return neg(); }`)."""
    from pathlib import Path

    try:
        text = Path(root, "aten/src/ATen/templates/TensorBody.h").read_text(errors="replace")
    except OSError:
        return {"-": "neg"}
    return dict(re.findall(r"Tensor\s+operator\s*([-~])\s*\(\s*\)\s*const\s*\{\s*return\s+(\w+)\s*\(\s*\)", text))


def _matching_open(text: str, close: int) -> int | None:
    """The index of the `(` that the `)` at `close` closes; None if none."""
    depth = 0
    for i in range(close, -1, -1):
        depth += (text[i] == ")") - (text[i] == "(")
        if depth == 0:
            return i
    return None


def _returns_tensor(name: str, ctx: GraphContext) -> bool:
    overloads = ctx.overloads(name)
    # one overload that returns a Tensor (where.self beside where's Tensor[]): the call's, where its result is an operand
    return any(o.schema.rsplit("->", 1)[-1].strip() in ("Tensor", "Tensor(a)", "Tensor(a!)") for o in overloads)


def _operand_kind(text: str, end: int, tensors: set[str], spelled, definition, lines, dispatched: dict[int, dict[str, str]], ctx, depth: int = 0) -> str | None:
    """"Tensor", "Scalar" or None (not known) for the operand that ends just
    before `end` in `text`."""
    left = text[:end].rstrip()
    if not left or depth > 4:
        return None
    if left.endswith(")"):
        start = _matching_open(left, len(left) - 1)
        if start is None:
            return None
        before = left[:start].rstrip()
        m = _TRAILING_NAME.search(before)
        if m is None and before[-1:] and (before[-1].isalnum() or before[-1] in "_>]"):
            return None  # a call of a template's specialisation, of an element: not read here
        if m is not None and m.group(1) in _KEYWORDS and not m.group(0).startswith((".", "->", "::")):
            m = None  # `return (1 + at::erf(x)) * 0.5`: a parenthesised expression
        if m is None:  # a parenthesised expression: its last operand's kind
            inner = left[start + 1 : -1]
            ops = [t for t in _OPERATOR_TOKEN.finditer(inner) if not t.group(1).endswith("=") or t.group(1) in ("==", "!=", "<=", ">=")]
            if not ops:
                return _operand_kind(inner, len(inner), tensors, spelled, definition, lines, dispatched, ctx, depth + 1)
            kinds = {_operand_kind(inner, t.start(), tensors, spelled, definition, lines, dispatched, ctx, depth + 1) for t in ops}
            kinds |= {_right_kind(inner, t.end(), tensors, spelled, definition, lines, dispatched, ctx, depth + 1) for t in ops} if depth < 3 else set()
            return "Tensor" if "Tensor" in kinds else None
        name = m.group(1)
        if name == "Scalar":
            return "Scalar"
        op = dispatched.get(spelled.location.line, {}).get(name)
        return "Tensor" if op is not None and _returns_tensor(op, ctx) else None
    if _NUMBER_TAIL.search(left):
        return "Scalar"
    m = _TRAILING_NAME.search(left)
    if m is None or m.group(0).lstrip().startswith((".", "->", "::")):
        return None  # a member or qualified name: its type is not read here
    name = m.group(1)
    if _CONSTANT.fullmatch(name):
        return "Scalar"  # a macro's or a constant's name (`INFINITY`, `M_SQRT1_2`, `EPSILON`)
    if name in tensors:
        # the nearest declaration above the line (`(a * a)` on it reads as a pointer's): a Tensor still
        number = spelled.location.line
        declared = [t for i, t in _declared_at(lines, definition.location.line - 1, number, name) if (i < number - 1 or number == definition.location.line)
                    and t.strip(" *&") not in tensors]  # `(input1 * input2)` is no declaration of input2
        if not declared or _TENSOR_TYPE.fullmatch(declared[-1].strip()):  # `Tensor a, b;` is read as tensors' names only
            return "Tensor"
        return None
    if _is_number(name, spelled, ctx):
        return "Scalar"
    if depth < 3:  # `auto cos = prod_sum / denom;`: a local the caller initialises with a Tensor expression
        number = spelled.location.line
        for i in range(number - 2, definition.location.line - 1, -1):
            # a plain substring test first: the pattern names `name`, and compiling one per name is dear
            m = _auto_pattern(name).search(lines[i]) if name in lines[i] and "auto" in lines[i] else None
            if m is not None:
                before = dataclasses.replace(spelled, location=dataclasses.replace(spelled.location, line=i + 1))
                start = m.end()
                if m.group(1):  # `auto [sign, logabsdet] = at::linalg_slogdet(A)`: the elements of the Tensors it returns
                    call = re.match(r"\s*(?:at::|[\w.]+\.)?(\w+)\s*\(", lines[i][start:])
                    op = dispatched.get(i + 1, {}).get(call.group(1)) if call else None
                    returned = [o.schema.rsplit("->", 1)[-1].strip() for o in ctx.overloads(op)] if op else []
                    return "Tensor" if returned and all(r.startswith("(Tensor") and "[]" not in r for r in returned) else None
                question = re.match(r"[^?;()]*\?", lines[i][start:])  # `auto counts = include_self ? at::ones_like(r) : ...`
                if question:
                    start += question.end()
                return _right_kind(lines[i], start, tensors, before, definition, lines, dispatched, ctx, depth + 1)
    return None


@functools.lru_cache(maxsize=1024)
def _auto_pattern(name: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![\w:])auto\s*&{{0,2}}\s*(?:{re.escape(name)}|(\[[^\]]*\b{re.escape(name)}\b[^\]]*\]))\s*=")


_KEYWORDS = frozenset(("return", "if", "while", "for", "switch", "case", "else", "do", "sizeof", "co_return", "throw"))
_CONSTANT = re.compile(r"(?:[A-Z][A-Z0-9]*_)*[A-Z][A-Z0-9]+(?:_[A-Z0-9]+)*")
_NUMBER_TAIL = re.compile(r"(?<![\w.])\.?\d[\w.]*\s*$")


_PRIMARY = re.compile(r"\s*(?:[-+]\s*(?=[.\d]))?(?:\.?\d[\w.]*|(?:::)?[A-Za-z_]\w*(?:\s*<[^<>();]*>)?(?:\s*::\s*[A-Za-z_]\w*(?:\s*<[^<>();]*>)?)*|(?=\())")
_POSTFIX = re.compile(r"\s*(?:(?:\.|->)\s*(?:template\s+)?[A-Za-z_]\w*)?\s*(?:<[^<>();]*>)?\s*(?=[(\[])")


def _closing(text: str, start: int) -> int | None:
    """The index just past the bracket that closes the one at `start`."""
    depth = 0
    for i in range(start, len(text)):
        depth += (text[i] in "([") - (text[i] in ")]")
        if depth == 0:
            return i + 1
    return None


def _right_kind(text: str, start: int, tensors: set[str], spelled, definition, lines, dispatched, ctx, depth: int = 0) -> str | None:
    """The kind of the operand that starts at `start` in `text`: its primary
    expression and the calls and members after it (what binds to the
    operator first)."""
    m = _PRIMARY.match(text, start)
    if m is None:
        return None
    if m.group().strip().startswith(("std::", "::std::")):
        return "Scalar"  # `std::numeric_limits<scalar_t>::infinity()`: the standard library's values are no Tensors
    end = m.end()
    while True:  # `(rtol * other).abs()`, `x.sum(dim)`, `Scalar(0)`
        p = _POSTFIX.match(text, end)
        if p is None:
            break
        close = _closing(text, p.end())
        if close is None:
            return None
        end = close
    if end == m.end() and re.match(r"\s*(?:\.|->)", text[end:]):
        return None  # a member, not read here
    return _operand_kind(text, end, tensors, spelled, definition, lines, dispatched, ctx, depth)


def _overload(base: str, kind: str, ctx: GraphContext) -> str:
    return f"{base}.{kind}" if any(o.name.name == base and o.name.overload == kind for o in ctx.overloads(base)) else base


def _kept_operator_sites(definition, sites, span, ctx: GraphContext) -> tuple:
    """`_operator_sites`, read once per definition and span: it reads only the
    tree's code, its index (the definition's `sites` are its calls, in `span`)
    and the catalog's overloads, so it is kept with the code's results, under
    the catalog's stamp (Note [shared results on disk] in graph.context)."""
    cache = shared_results(ctx, "_operator_sites")
    key = (definition.symbol, span, getattr(ctx.catalog, "stamp", None))
    found = cache.get(key)
    if found is None:
        found = cache[key] = tuple(_operator_sites(definition, sites, span, ctx))
    return found


def _operator_sites(definition, sites, span, ctx: GraphContext) -> list:
    """Call sites for the operators a definition writes as C++ operators on
    Tensors and its `.item<T>()` calls (Note [operators written as C++
    operators]), in `span` if given."""
    from kernelmap.source.index import CallSite

    location = definition.location
    lines = tree_lines(ctx, location.path)
    first, last = (span if span is not None else (location.line, location.end_line or location.line))
    if not any(("Tensor" in line) for line in lines[location.line - 1 : location.end_line or location.line]):
        return []
    body = code_only(lines, first, last).split("\n")
    # the names the definition declares a Tensor (its parameters, its locals): one reading of its text
    whole = code_only(lines, location.line, location.end_line or location.line)
    tensors = set(_TENSOR_DECLARATION.findall(whole))
    tensors.update(name for names in _TENSORS_DECLARED.findall(whole) for name in re.findall(r"\w+", names))  # `Tensor a, b;`
    by_line: dict[int, Any] = {}
    dispatched_by_line: dict[int, dict[str, str]] = {}  # line -> {called name (`reshape_symint`): its operator's base name}
    for s in sites:
        by_line.setdefault(s.location.line, s)
        if s.kind is EdgeKind.DISPATCHER and s.op and (not s.callee.startswith(".") or _tensor_receiver(s, definition, ctx)):
            # a method named like an operator on another type gives no Tensor (`(a * b_vec).exp() - one_vec` on a Vec a)
            dispatched_by_line.setdefault(s.location.line, {}).update({s.name: s.op.split(".")[0], s.op.split(".")[0]: s.op.split(".")[0]})
        elif s.callee.startswith(".") and s.name.endswith("_symint") and ctx.overloads(s.name.removesuffix("_symint")):
            # `self.reshape_symint(...)`: the Tensor method of an operator's SymInt spelling
            dispatched_by_line.setdefault(s.location.line, {})[s.name] = s.name.removesuffix("_symint")
    binary, compound = _operator_table(str(ctx.index.tree.root))
    found = []

    def add(number: int, base: str, op: str) -> None:
        near = by_line.get(number)
        found.append(CallSite(definition.symbol, f".{base}", base, EdgeKind.DISPATCHER, Location(location.path, number, origin=location.origin),
                              near.condition if near else None, near.preproc if near else None, None, op, near.outer if near else ()))

    for offset, text in enumerate(body):
        number = first + offset
        if "item" in text:
            for m in _ITEM_CALL.finditer(text):
                spelled = _Spelled(Location(location.path, number, origin=location.origin), "item", "item")
                if _operand_kind(text, m.start(), tensors, spelled, definition, lines, dispatched_by_line, ctx) == "Tensor":
                    add(number, "item", "item")
        if not tensors and number not in dispatched_by_line and "auto" not in whole:
            continue
        if not any(c in text for c in "+-*/%<>=!&|^"):
            continue
        dispatched = dispatched_by_line
        for m in _OPERATOR_TOKEN.finditer(text):
            operator = m.group(1)
            if operator == "=" or (operator.endswith("=") and operator not in ("==", "!=", "<=", ">=") and (operator, "Tensor") not in compound):
                continue
            if operator == "<" and re.match(r"\s*[A-Z]", text[m.end():]):
                continue  # `Foo<Bar>`, not a comparison
            spelled = _Spelled(Location(location.path, number, origin=location.origin), operator, operator)
            left = _operand_kind(text, m.start(), tensors, spelled, definition, lines, dispatched, ctx)
            if left is None:  # `-target * (...)`, `return -(x * y).sum()`: TensorBody.h's unary operator-, the neg it returns
                unary = _unary_table(str(ctx.index.tree.root)).get(operator)
                if unary and _UNARY_BEFORE.search(text, 0, m.start()) and _right_kind(text, m.end(), tensors, spelled, definition, lines,
                                                                                        dispatched, ctx) == "Tensor":
                    add(number, unary, unary)
                continue
            right = _right_kind(text, m.end(), tensors, spelled, definition, lines, dispatched, ctx)
            if any(o == operator for o, _ in compound):
                if left == "Tensor":
                    kind = right or "Tensor"
                    method = compound.get((operator, kind)) or compound.get((operator, "Tensor"))
                    add(number, method, _overload(method, kind, ctx))
                continue
            if operator not in binary:
                continue
            forward, reverse = binary[operator]
            if left == "Tensor":  # x.mul(y): the overload of the right operand's kind
                add(number, forward[0], _overload(forward[0], right or "Tensor", ctx))
            elif left == "Scalar" and right == "Tensor":  # y.mul(x), or empty_like(y).fill_(x).sub_(y)
                for method, argument in reverse:
                    add(number, method, _overload(method, "Scalar" if argument == "x" else "Tensor", ctx))
    return found


# Note [stub parameters]
# A helper that takes a stub as a parameter (`impl_func_cum_ops(..., Stub&
# stub)`, scatter_impl's `ReduceStub& reduce_stub, FillStub& fill_stub`) calls
# it by the parameter's name, which may shadow a global stub (fill_stub). The
# index records the stub passed at the caller's line (Note [stubs passed on] in
# the extractor). When the helper's node is made, the stubs its call site
# passes, or passes on from the caller's own parameters, are bound to its
# parameters (`bound`, beside template arguments); a call of such a parameter
# is a call of the bound stub, at the helper's line and under its tests
# (`else of if (reduce.has_value()); fill_stub = scatter_stub`), and the edge
# at the passing line is dropped. A call of a stub parameter left unbound names
# nothing. A helper that only passes the parameter on keeps the caller's edge.
def _stub_bindings(node: Node, definition, ctx: GraphContext, outer: dict[str, str] | None = None) -> dict[str, str]:
    """The parameters of `definition` bound to the stubs its call site passes
    (`scatter_impl(self, dim, index, src, out, scatter_reduce_stub, scatter_stub)`
    binds `ReduceStub& reduce_stub` and `FillStub& fill_stub`), or passes on
    from its caller's own bound parameters (`outer`: `unary_op_impl_out(result,
    self, stub)`); empty when either cannot be read."""
    site = node.attrs.get("call_site")
    if not isinstance(site, Location) or ctx.index is None:
        return {}
    short = definition.name.rsplit("::", 1)[-1]
    arguments = call_arguments(_Spelled(site, short, short), ctx)
    passed_on = {name: stub for name, stub in (outer or {}).items() if stub.endswith("_stub")}
    if not arguments or not any(a.endswith("_stub") or a in passed_on for a in arguments):
        return {}
    names = [_parameter_name(p) for p in parameters(definition, ctx) or ()]
    bound = {}
    for name, argument in zip(names, arguments):
        stub = passed_on.get(argument) or argument.rsplit("::", 1)[-1]
        if name and stub.endswith("_stub") and re.fullmatch(r"[A-Za-z_][\w:]*", argument) and ctx.index.is_stub(stub):
            bound[name] = stub
    return bound


# -- C++ ---------------------------------------------------------------------


# Note [a composite's utilities]
# A tensor utility (Note on _UTILITY_OPS in graph.rules) is a leaf where a
# kernel calls it: the kernel's own work is elsewhere. A composite operator
# has no work of its own but the operators it calls, and some do nothing but
# call utilities: Tensor.to(torch.float64) runs at::native::to, whose to_impl
# calls at::_to_copy, whose kernel makes an empty tensor and calls copy_,
# whose kernel copies with copy_kernel. So in the kernel of a composite
# operator (reached through a Composite* key), and the helpers it calls
# directly when it calls no operator itself (to's to_impl), the utility calls
# are followed when they are all the operators it calls (a view followed
# below a utility asked for moves no element: _conj_physical's conj) and it calls no stub,
# loop, launch or library itself: they are its work. A composite that calls
# other operators (conv2d's convolution, beside its input.dim()) leaves its
# utilities as leaves, and so do its helpers (_convolution's subtensor, whose
# contiguous() copies only a tensor that is not).


def _composite_utilities(children: list[Node], spelled: dict[int, str], ctx: GraphContext) -> list[Node]:
    """`children` of a composite's kernel with its utility calls followed when
    they are all the work it does (Note [a composite's utilities])."""
    from kernelmap.graph.ends import other_layouts_only

    # a strided tensor's arms: not another device's, not another layout's (Note [ranking a call's ends])
    running = [c for c in children if not c.attrs.get("branch")
               and not any(other_layouts_only(x) for x in (entered_op(c).condition, *entered_op(c).attrs.get("outer_conditions", ())))]
    utilities = [c for c in running if c.kind is NodeKind.OPERATOR and c.attrs.get("utility") and isinstance(c.payload, Op)]
    inspections = [c for c in utilities if is_inspection_op(c.payload.name.name, c.payload.is_view)]  # move no element
    utilities = [c for c in utilities if c not in inspections]
    work = (NodeKind.STUB, NodeKind.LAUNCH, NodeKind.DEVICE_LOOP, NodeKind.VENDOR, NodeKind.GENERATED, NodeKind.INNER_LOOP,
            NodeKind.HEADER, NodeKind.OPS_ENTRY, NodeKind.OPERATOR)
    views = [c for c in running if isinstance(entered_op(c).payload, Op) and moves_no_element(entered_op(c).payload.name.name, entered_op(c).payload.is_view)]
    if not utilities or any(c.kind in work and c not in utilities and c not in inspections and c not in views for c in running):
        return children
    followed = []
    for child in children:
        if child in utilities:
            del child.attrs["utility"]
            child.identity = ("op", str(child.payload.name), *child.attrs.get("given_flags", ()))
            child.attrs["identity"] = ":".join(child.identity)
            child.attrs["keep"] = True
            child = entered(child, spelled.get(id(child), ""), ctx)
        followed.append(child)
    return followed


# Note [steps that run]
# A direct call whose callee reaches no operator, stub, loop or library is
# plumbing, pruned from `stack` unless all calls are asked for. Some are
# steps a native stack shows, kept: the helpers of a structured kernel's meta
# and impl functions, three levels down (resize_reduction,
# make_reduction_from_out_ty's make_reduction and its review_reduce_result:
# every call runs them), those an operator's kernel
# calls itself (wrapped_scalar_tensor, batchCount), and a call of a function
# another translation unit defines (a .cpp of its own: at::native::resize_output
# from a kernel of another file), which the compiler cannot inline without
# link-time optimisation, which release builds do not use: a real frame, and
# its own helpers (_resize_output_check). A stub's kernel is an operator's
# kernel too (lu_factor_kernel's batchCount and matrixStride). A forwarder,
# a function whose body is one call (resize_output's `return
# _resize_output(output, shape);`, native_resize_'s `native::resize_(...)`,
# lu_factor_kernel's one call in its AT_DISPATCH lambda), uses up no level: the compiler folds it into the function next to it, and
# what it forwards to is the step the binary shows.
_META_HELPER_LEVELS = 3


_FORWARDING_CALL = re.compile(r"\s*(?:return\s+)?[\w:]+\s*(?:<[^;{}]*>)?\s*\([^;{}]*\)\s*;\s*")
# a dtype switch whose one case is a lambda (`AT_DISPATCH_FLOATING_TYPES(t, "name", [&] { ... });`)
_DTYPE_SWITCH = re.compile(r"\s*AT_DISPATCH_\w+\s*\([^{};]*\[&\]\s*(?:\(\s*\))?\s*\{(?P<body>[^{}]*)\}\s*\)\s*;\s*", re.S)


def forwarder(definition, ctx: GraphContext) -> bool:
    """Whether a definition's body is one call, passed on or returned (`bool
    resize_output(...) { return _resize_output(output, shape); }`): a forwarder,
    which the compiler folds into its caller or its callee, so that a helper
    level passes through it (Note [steps that run])."""
    location = definition.location
    if not location.end_line or location.end_line - location.line > 8:
        return False
    text = "\n".join(tree_lines(ctx, location.path)[location.line - 1 : location.end_line])
    opened, closed = text.find("{"), text.rfind("}")
    if opened < 0 or closed < opened:
        return False
    body = text[opened + 1 : closed]
    switch = _DTYPE_SWITCH.fullmatch(body)
    return _FORWARDING_CALL.fullmatch(switch.group("body") if switch else body) is not None


def _another_unit(caller, callee) -> bool:
    """Whether `callee` is defined in another translation unit (.cpp) of kernel code than `caller` (Note [steps that run])."""
    path = callee.location.path
    return path.endswith(".cpp") and path != caller.location.path and path.startswith(KERNEL_DIRS)


def _vectorized_math(node: Node) -> bool:
    """Whether a direct call's node is (every candidate of it is) in ATen's vectorized math."""
    nodes = node.children if node.kind in (NodeKind.AMBIGUOUS, NodeKind.ALTERNATIVES) and node.children else [node]
    return all(n.location is not None and n.location.path == VECTORIZED_MATH for n in nodes)


# Note [conditions around a call]
# A call is shown under its innermost case/if (`if (stable)`), but the ones
# around it in its caller decide as much: sort_kernel_impl's std::stable_sort
# is under `if (stable)` in `if (descending)`, mean_out's mean_stub under
# `else of if (iter.numel() == 0)` in `else of if (self.device().is_cpu())`.
# The index keeps them (calls.outer_id, outermost first); a call in another
# device's or dtype's arm of any of them is that arm's, and the ranking of
# ends reads all of them (Note [ranking a call's ends]; not for counting
# `else` arms, which stay the innermost's). They are carried as the node's
# `outer_conditions`.


def _code_children(node: Node, ctx: GraphContext, owner=None, span: tuple[int, int] | None = None) -> list[Node]:
    """The calls a definition makes (`owner`, else the node's own); with
    `span`, only those made in the lambda on those lines, and without it, none
    made in the lambda a kernel hands its own loop (they are below the loop)."""
    if node.kind == "generated":
        return _generated_children(node.payload, ctx)
    if node.kind == "stub":  # called: the kernels of the stub the call names; at its declaration (asked for itself): all
        at_declaration = node.location is not None and node.location == node.attrs.get("declared_at")
        kernels = _stub_children(node.payload, ctx, None if at_declaration else node.location)
        if node.passed:  # the stub call's known values, at their places of each kernel's parameters
            for kernel in kernels:
                declared = parameters(kernel.payload, ctx) if kernel.kind is NodeKind.KERNEL and kernel.payload is not None and ctx.index else None
                flags = {name: node.passed[i] for i, p in enumerate(declared or ()) if i in node.passed and (name := _parameter_name(p))
                         and _is_bool_parameter(p, name)}
                _given(kernel, flags)
        from kernelmap.graph.dtypes import output_of, with_output_dtype

        for kernel in kernels:  # Note [a comparison's output dtype] in graph.dtypes
            with_output_dtype(kernel, output_of(node))
        return kernels
    if isinstance(node.payload, GeneratedKernel) and owner is None:
        return _generated_kernel_children(node, ctx)
    if ctx.index is None or (node.payload is None and owner is None):
        return []
    definition = owner if owner is not None else node.payload
    sites = ctx.index.calls_from(definition)
    if span is not None:  # a lambda's calls, not the loop's own call it is written in
        sites = [s for s in sites if span[0] <= s.location.line <= span[1] and not (s.location.line == span[0] and _loop_call(s))]
    lambdas = [] if span is not None else _loop_lambdas(sites, definition, ctx)
    sites = [*sites, *_kept_operator_sites(definition, sites, span, ctx)]  # Note [operators written as C++ operators]
    if lambdas:  # made in the lambdas its loops are given: below the loops (Note [device loop machinery])
        sites = [s for s in sites if _loop_call(s) or not any(first <= s.location.line <= last for first, last in lambdas)]
    bound = node.bound if node.bound is not None else {**_template_bindings(node, definition, ctx), **_stub_bindings(node, definition, ctx)}
    node.bound = bound  # the lambda of its own loop binds the same (Note [device loop machinery])
    passed: list[tuple[int, set[str]]] = []  # (call line, stubs) of calls that pass stubs the callee's parameters take
    spelled: dict[int, str] = {}  # utility operator calls left unexpanded: the name each call spells
    if node.known is None or span is None:  # a lambda knows what the kernel it is written in knows
        given = {**(node.known or {}), **node_flags(node)}
        node.known = {**given, **_assigned(definition, given, ctx)}  # Note [values a call passes]
    known = node.known
    token = _CALLER_VALUES.set(known)
    try:
        children = _site_children(node, ctx, definition, sites, span, lambdas, bound, passed, spelled, known)
    finally:
        _CALLER_VALUES.reset(token)
    return children


def _site_children(node: Node, ctx: GraphContext, definition, sites, span, lambdas, bound, passed, spelled, known) -> list[Node]:
    from kernelmap.graph import arms, dtypes, loops

    children = []
    output = dtypes.output_of(node)  # Note [a comparison's output dtype]
    for site in sites:
        condition = site.condition
        if site.preproc:
            condition = f"{condition}  #if {site.preproc}" if condition else f"#if {site.preproc}"
        branch = other_device_reason(site.condition, ctx.device) or other_device_reason(site.preproc, ctx.device)
        branch = branch or dtypes.other_dtype_reason(site.condition, ctx.dtype, output)
        if site.kind is EdgeKind.VENDOR:
            branch = branch or dtypes.other_precision_reason(site.callee, site.library, ctx.dtype)
        for around in site.outer:  # Note [conditions around a call]
            branch = branch or other_device_reason(around, ctx.device) or dtypes.other_dtype_reason(around, ctx.dtype, output)
        branch = branch or arms.cannot_run((site.condition, *site.outer), known, definition, ctx, node.rank)  # Note [arms that cannot run]
        branch = branch or arms.returned_before(site.location.line, definition, known, ctx, node.rank)  # Note [returns before a call]
        if not branch and site.condition is None and site.preproc:  # a `#if` in a case hides the case from the index
            branch = arms.case_cannot_run(site.location.line, definition, known, ctx, node.rank)
        child = _site_node(site, definition, ctx, condition, bound)
        if child is None:
            continue
        if output and child.kind is NodeKind.STUB:
            dtypes.with_output_dtype(child, output)
        if site.outer:
            child.attrs["outer_conditions"] = tuple(site.outer)
        if child.identity is not None and child.kind is NodeKind.KERNEL and child.payload is not None:
            stubs = _stub_bindings(child, child.payload, ctx, bound)
            if stubs:  # only the parameters the callee calls: the others' stubs stay where they are passed
                called = {c.name for c in ctx.index.calls_from(child.payload) if "::" not in c.callee and c.kind in (EdgeKind.STUB, EdgeKind.DIRECT)}
                stubs = {name: stub for name, stub in stubs.items() if name in called}
            child.bound = {**_template_bindings(child, child.payload, ctx, bound), **stubs}
            if stubs:
                passed.append((site.location.line, set(stubs.values())))
            if child.bound:  # each instantiation is its own: sortCommon with SmallBitonicSort, then with MediumRadixSort
                child.identity = (*child.identity, *sorted(child.bound.items()))
                child.attrs["identity"] = ":".join(str(part) for part in child.identity)
        if site.kind is EdgeKind.DIRECT and _vectorized_math(child):
            for n in (child, *child.children):
                n.attrs["keep"] = True
        if site.preproc and compiled(site.preproc, ctx) is False:
            not_compiled(child, site.preproc, ctx)
            children.append(child)
            continue
        if branch:
            child.attrs["branch"] = branch
            if not ctx.all_branches:
                child.leaf().payload = None
        elif site.kind is EdgeKind.DIRECT and child.kind in (NodeKind.KERNEL, NodeKind.ALTERNATIVES, NodeKind.AMBIGUOUS):
            work = dtype_work(site.location.line, site.callee, definition, node, child.payload if child.kind is NodeKind.KERNEL else None, ctx)
            if work is not None:
                child.attrs["dtype_work"] = work
                child.attrs["keep"] = True
        elif child.kind is NodeKind.OPERATOR and child.identity is not None:
            child = entered(child, site.callee, ctx)  # Note [the way into the dispatcher]
        elif child.kind is NodeKind.OPERATOR and child.attrs.get("utility"):
            spelled[id(child)] = site.callee
        if site.kind is EdgeKind.DIRECT and child.kind is NodeKind.KERNEL and not child.attrs.get("branch") and child.payload is not None:
            if span is not None or (node.loop_work and is_template(child.payload, ctx)):
                child.loop_work = True  # the lambda's work (layer_norm's RowwiseMoments), and the templates it runs (RowwiseMomentsImpl)
                child.attrs["keep"] = True
            if node.helper_levels > 0 or _another_unit(definition, child.payload):  # Note [steps that run]
                child.attrs["keep"] = True
                # a forwarder, calling or called, uses up no level: the compiler folds it into its neighbour
                spent = 0 if forwarder(definition, ctx) or forwarder(child.payload, ctx) else 1
                child.helper_levels = max(node.helper_levels - spent, 1 if _another_unit(definition, child.payload) else 0)
        children.append(child)
    for target, site in _callbacks(definition, ctx):
        if (span is not None and not span[0] <= site.line <= span[1]) or any(first <= site.line <= last for first, last in lambdas):
            continue
        child = cpp_node(target, ctx, EdgeKind.DIRECT, "passed as a function argument", site)
        work = dtype_work(site.line, target.name, definition, node, target, ctx)
        if work is not None:
            child.attrs["dtype_work"] = work
            child.attrs["keep"] = True
        children.append(child)
    if span is None:
        children.extend(loops.iteration_nodes(node, definition, ctx))  # a CPU device loop's, called or asked for
    if node.composite and not ctx.all_calls:
        children = _composite_utilities(children, spelled, ctx)
        if not any(entered_op(c).kind is NodeKind.OPERATOR and not c.attrs.get("branch") for c in children):
            for child in children:  # a composite that calls no operator itself does its work in its helpers (to's to_impl)
                if child.kind is NodeKind.KERNEL and child.via is EdgeKind.DIRECT:
                    child.composite = True
    if passed:  # a stub passed to a callee that calls it is shown there, under the callee's test of it
        children = [c for c in children if not (c.kind is NodeKind.STUB and c.via is EdgeKind.STUB and c.location is not None and any(
            c.payload in taken and line <= c.location.line < line + 12 for line, taken in passed))]
    return dedupe(children)


# A function named as an argument: `split_batch_dim_to_32bit_out(..., raw_cudnn_convolution_forward_out_32bit)`.
_ARGUMENT_NAME = r"(?:^|[(,])\s*&?\s*(?P<qualifier>(?:[\w:]*::)?)(?P<name>{name})\s*(?=[,)])"


_ANY_ARGUMENT_NAME = re.compile(_ARGUMENT_NAME.format(name=r"\w+"))
_WORDS = re.compile(r"\w+")


@functools.lru_cache(maxsize=2048)
def _word(name: str) -> re.Pattern[str]:
    return re.compile(rf"\b{name}\b")


@functools.lru_cache(maxsize=2048)
def _assigned_or_declared(name: str) -> re.Pattern[str]:
    """`name = ...` or `Type name;`: a variable of that name (compiled once per name: `re`'s cache overflows)."""
    return re.compile(rf"\b{name}\s*=[^=]|[\w>&*]\s+{name}\s*[;=({{]")


def _callbacks(definition, ctx: GraphContext) -> list[tuple[Any, Location]]:
    """Functions of the same file that `definition` passes as arguments: calls
    made through a function pointer, which no call site shows. Read once per
    definition (the text and the index never change under a context)."""
    location = definition.location
    cache = shared_results(ctx, "_callbacks")
    key = (definition.name, location.path, location.line, location.end_line)
    if key not in cache:
        cache[key] = tuple(_find_callbacks(definition, ctx))
    return list(cache[key])


def _find_callbacks(definition, ctx: GraphContext) -> list[tuple[Any, Location]]:
    location = definition.location
    lines = tree_lines(ctx, location.path)
    by_short = _by_short_name(ctx.index, location.path)
    if not any(d.name != definition.name for ds in by_short.values() for d in ds):
        return []
    # a callback's name is a whole word of the body as written (blanking puts spaces for comments and strings, which
    # start on no word character and end on none or at the line's end): most bodies name none of the file's other functions
    words = set(_WORDS.findall("\n".join(lines[location.line - 1 : location.end_line or location.line])))
    if not any(d.name != definition.name for w in words & by_short.keys() for d in by_short[w]):
        return []
    # comments and strings blanked, lines kept: `// inv, inverse, cholesky_inverse, etc.` passes nothing
    body = code_only(lines, location.line, location.end_line or location.line).split("\n")
    head = "\n".join(body[: next((i for i, text in enumerate(body) if "{" in text), 0) + 1])
    text = "\n".join(body)
    found = []
    for number in range(location.line + 1, (location.end_line or location.line) + 1):  # not the signature
        line = body[number - location.line] if number - location.line < len(body) else ""
        if "," not in line and ")" not in line:  # an argument is followed by one of them
            continue
        for m in _ANY_ARGUMENT_NAME.finditer(line):
            qualifier, name = m.group("qualifier"), m.group("name")
            if name not in by_short:
                continue
            # `RUN_K(INDEX_T, DIM, sbtopk::launch)`: the qualifier tells sbtopk::launch from mbtopk::launch
            named = [d for d in by_short.get(name, ()) if d.name != definition.name and f"::{d.lookup}".endswith(f"::{qualifier}{name}")]
            target = named[0] if named else None
            # a parameter or local variable that shares a function's name (`min`) is no callback
            # (a plain substring test first: every pattern below names `name`, and compiling one per name is dear)
            if target is None or (name in head and _word(name).search(head)) or _assigned_or_declared(name).search(text):
                continue
            found.append((target, Location(location.path, number, origin=location.origin)))
    return found


def _site_node(site, caller, ctx: GraphContext, condition: str | None, bound: dict[str, str] | None = None) -> Node | None:
    if bound and site.callee.startswith(".") and ctx.index is not None:
        # Note [template arguments]: `sorter.template sort<A>(...)` on a `Sorter sorter` calls the method of the
        # class the call site binds Sorter to (a method named like an operator included: it is no Tensor's)
        receiver = receiver_type(site, caller, ctx)
        argument = bound.get(receiver) if receiver is not None else None
        if argument is not None:
            callee = f"{argument}::{site.callee[1:]}"
            site = dataclasses.replace(site, callee=callee, kind=EdgeKind.DIRECT, op=None)
            condition = f"{condition}; {receiver} = {argument}" if condition else f"{receiver} = {argument}"
    kind = site.kind
    if (kind is EdgeKind.STUB or (kind is EdgeKind.DIRECT and bound and site.name in bound)) and "::" not in site.callee \
            and site.name in _parameter_names(caller, ctx):
        # Note [stub parameters]: a call through a parameter (scatter_impl's `FillStub& fill_stub`, not the
        # global fill_stub; a helper's `Stub& stub`) calls the stub its caller passes
        passed = (bound or {}).get(site.name)
        if passed is not None and passed.endswith("_stub"):
            condition = f"{condition}; {site.name} = {passed}" if condition else f"{site.name} = {passed}"
            return Node(passed, "stub", site.location, EdgeKind.STUB, condition, {"call_site": str(site.location)}, payload=passed, identity=("stub", passed))
        if kind is EdgeKind.STUB:
            return None
    if kind is EdgeKind.DISPATCHER:
        if not site.op or (site.callee.startswith(".") and ctx.index is not None and not _tensor_receiver(site, caller, ctx)):
            return _vectorized_method(site, caller, ctx, condition) if site.callee.startswith(".") and ctx.index is not None else None
        try:
            op = ctx.catalog.resolve(site.op)[0]
        except KernelmapError:
            return Node(site.callee, "op", site.location, kind, condition, {"unresolved": f"{site.op} is not in the catalog"})
        op = by_literal_types(by_argument_count(by_out_spelling(op, site, ctx), site, ctx), site, ctx)
        op = by_cpp_overload(op, site, ctx)  # Note [the C++ overload a call reaches]
        node = op_node(op, ctx, kind, condition, site.location)
        _given(node, literal_flags(op, site, ctx))
        # a utility's own kernel calling its other overload is the utility's work, not plumbing
        # (at::native::arange calls arange.start_out, whose loop fills the range)
        if (is_utility_op(op.name.name, op.is_view) and not _own_overload(op.name.name, caller) and not _utility_kernel(caller, ctx, op)
                and not is_view_alias(op)):
            node.attrs["utility"] = True
            if not ctx.all_calls:
                node.leaf()
        return node
    if kind is EdgeKind.STUB:
        node = Node(site.name, "stub", site.location, kind, condition, {"call_site": str(site.location)}, payload=site.name, identity=("stub", site.name))
        known = _CALLER_VALUES.get()
        arguments = call_arguments(site, ctx) if known or ctx.index is not None else None
        passed = {i: v for i, a in enumerate((arguments or [])[1:]) if (v := _argument_value(a, known)) is not None}
        if passed:  # a stub called with known flags: its kernels' arms are decided by them (Note [values a call passes])
            node.passed = passed
            node.identity = (*node.identity, *(f"#{i}={'true' if v else 'false'}" for i, v in sorted(passed.items())))
            node.attrs["identity"] = ":".join(node.identity)
        return node
    if kind is EdgeKind.LAUNCH:
        if launch_kind(site.callee) is NodeKind.LAUNCH and ctx.index is not None:
            # a host function named like a launcher (launch_clamp_scalar) is a call to follow, not a leaf
            hosts = [d for d in _resolve_direct(site, caller, ctx) if d.symbol.kind != "global_kernel"]
            if hosts:
                return cpp_node(hosts[0], ctx, EdgeKind.DIRECT, condition, site.location)
        if launch_kind(site.callee) is NodeKind.DEVICE_LOOP and ctx.index is not None:
            loop = _device_loop(site, caller, ctx, condition)
            if loop is not None:
                return loop
        attrs = {"call_site": site.location}
        kernels = _nearest(ctx.index.global_kernels(site.name), site.callee, caller) if ctx.index else []
        location = kernels[0].location if len(kernels) == 1 else site.location
        return Node(site.callee, launch_kind(site.callee), location, kind, condition, attrs)
    if kind is EdgeKind.VENDOR:
        # a name the vendor table matches that the tree defines is PyTorch's own function: its
        # body calls the library (mkl/LinearAlgebra.cpp's mkl_gemm_batched calls cblas_sgemm_batch)
        own = _resolve_direct(site, caller, ctx) if ctx.index is not None else []
        if own:
            site = dataclasses.replace(site, kind=EdgeKind.DIRECT)
            return _site_node(site, caller, ctx, condition, bound)
        return vendor_node(site.callee, site.library, site.location, kind, condition)
    # direct: resolve to definitions in the tree, namespace-aware
    spelled = site  # as the call is written, for reading its arguments
    if _names_template_parameter(site.callee, caller, ctx):
        # Note [template arguments]: `bernoulli_scalar_kernel<RNG>()(self, p, gen)` in `template<template<typename>
        # class bernoulli_scalar_kernel, ...> bernoulli_impl_` calls what the instantiation passes, not the name
        parameter, _, rest = site.callee.partition("::")
        argument = (bound or {}).get(parameter)
        if argument is None:
            return Node(site.callee, "kernel", None, kind, condition,
                        {"call_site": site.location, "unresolved": "a template parameter of its caller: each instantiation passes its own"}).leaf()
        callee = f"{argument}::{rest}" if rest else argument
        site = dataclasses.replace(site, callee=callee, name=callee.rsplit("::", 1)[-1])
        condition = f"{condition}; {parameter} = {argument}" if condition else f"{parameter} = {argument}"
    if (site.callee in _ITERATOR_LOOPS or site.callee in _PARALLEL_LOOPS) and ctx.index is not None:
        loop = _own_loop(site, caller, ctx, condition)
        if loop is not None:
            return loop
    candidates = _resolve_direct(site, caller, ctx)
    if not candidates:
        op = _unqualified_operator(spelled, caller, ctx)
        if op is None:
            return _vectorized_method(site, caller, ctx, condition) if site.callee.startswith(".") else None
        return _site_node(dataclasses.replace(spelled, kind=EdgeKind.DISPATCHER, op=op), caller, ctx, condition, bound)
    if _is_utility_kernel(site.name, candidates, ctx) and not _own_overload(site.name, caller) and not _utility_kernel(caller, ctx):
        # `copy_(nt, t)` in Shape.cu calls at::native::copy_ itself: the same tensor
        # plumbing as `nt.copy_(t)` through the dispatcher, shown and not expanded
        node = cpp_node(candidates[0], ctx, kind, condition, site.location)
        node.attrs["utility"] = True
        return node if ctx.all_calls else node.leaf()
    if len(candidates) > 1:
        candidates = by_argument_types(by_arity(by_enable_if(candidates, ctx), spelled, ctx), spelled, ctx, bound)
    if len(candidates) > 1:
        typed = by_dtype(candidates, ctx)
        if len(typed) > 1:  # the one the build compiles (mkl_gemm_batched for float, beside its placeholder without MKL)
            typed = [d for d in typed if compiled(d.symbol.condition, ctx) is not False] or typed
        if len(typed) == 1:
            node = cpp_node(typed[0], ctx, kind, condition, site.location)
            node.attrs["dtype_case"] = f"{ctx.dtype}: the {_DTYPE_TYPES[ctx.dtype][0]} overload of {len(candidates)}"
            return _given(node, _literal_parameters(typed[0], spelled, ctx))
        candidates, chosen = by_class_specialisation(candidates, ctx)
        if len(candidates) == 1 and chosen:
            node = cpp_node(candidates[0], ctx, kind, condition, site.location)
            node.attrs["dtype_case"] = chosen
            return _given(node, _literal_parameters(candidates[0], spelled, ctx))
    if len(candidates) == 1:
        return _given(cpp_node(candidates[0], ctx, kind, condition, site.location), _literal_parameters(candidates[0], spelled, ctx))
    built = [d for d in candidates if compiled(d.symbol.condition, ctx) is not False]
    if _all_distinct_conditions(candidates) or (built and len(built) < len(candidates) and _one_symbol(built)):
        group = Node(site.callee, "alternatives", site.location, kind, condition, {"reason": "defined once per preprocessor condition; a build compiles one"})
        group.children = [
            not_compiled(_given(cpp_node(d, ctx, kind, f"#if {d.symbol.condition}" if d.symbol.condition else None, site.location),
                                _literal_parameters(d, spelled, ctx)), d.symbol.condition, ctx)
            for d in by_build(candidates, ctx)
        ]
        return group
    group = Node(site.callee, "ambiguous", site.location, kind, condition, {"candidates": len(candidates), "reason": "several definitions match; ranked by namespace and file"})
    group.children = [cpp_node(d, ctx, kind) for d in candidates[:10]]
    for child in group.children:
        child.leaf()  # shown, not expanded: the call is ambiguous
    return group


# Note [vectorized math]
# A CPU kernel's Vectorized lambda (`[=](Vectorized<scalar_t> a) { return
# a.exp(); }`, softmax's `(x - Vec(max_input)).exp()`) calls a method of
# at::vec::Vectorized, a class specialised per element type and per CPU
# capability in ATen/cpu/vec: vec512/vec512_float.h for a kernel compiled for
# AVX512, vec256/vec256_float.h for AVX2. Where the method's body calls a
# library (SLEEF: `Sleef_expf16_u10(values)`), it is where the element's math
# is done, and is shown at its definition for the selected dtype, one per
# capability; a method that calls none (operator+, neg) is the loop's own
# arithmetic and is not shown.
_VECTORIZED_TYPE = re.compile(r"(?:^|::)(?:Vectorized\b|Vec$|[a-z]+Vec$|vec_t$|Vectorized16\b)")
_VECTOR_HEADERS = {"float32": "float", "float64": "double"}


def _vectorized_method(site, caller, ctx: GraphContext, condition: str | None) -> Node | None:
    """The Vectorized method a member call on a vector runs, per CPU capability
    (Note [vectorized math]); None when the receiver is no vector, or the
    method calls no library."""
    suffix = _VECTOR_HEADERS.get(ctx.dtype)
    if suffix is None or ctx.device != "cpu":
        return None
    method = site.callee[1:]
    headers = {f"aten/src/ATen/cpu/vec/vec512/vec512_{suffix}.h": "AVX512", f"aten/src/ATen/cpu/vec/vec256/vec256_{suffix}.h": "AVX2"}
    cache = kept_results(ctx, "_vectorized_methods")  # asked of many member calls: once per method
    if method not in cache:
        cache[method] = [d for d in ctx.index.definitions(f"at::vec::CPU_CAPABILITY::Vectorized::{method}")
                         if d.location.path in headers and _calls_library(d, ctx)]
    found = list(cache[method])
    if not found:
        return None
    declared = receiver_declarations(site, caller, ctx) or receiver_declarations(site, caller, ctx, through_call=True)
    if not declared or not _VECTORIZED_TYPE.search(re.sub(r"<.*", "", declared[-1]).strip()):
        return None
    found.sort(key=lambda d: list(headers).index(d.location.path))
    if len(found) == 1:
        node = cpp_node(found[0], ctx, EdgeKind.DIRECT, condition, site.location)
        node.attrs["keep"] = True
        return node
    group = Node(f"at::vec::Vectorized::{method}", NodeKind.ALTERNATIVES, site.location, EdgeKind.DIRECT, condition,
                 {"reason": "Vectorized is defined once per CPU capability: a kernel runs the one it was compiled for"})
    for d in found:
        child = cpp_node(d, ctx, EdgeKind.DIRECT, f"the kernel compiled for {headers[d.location.path]}", site.location)
        child.attrs["keep"] = True
        group.children.append(child)
    return group


def _calls_library(definition, ctx: GraphContext) -> bool:
    cache = kept_results(ctx, "_calls_library")
    key = (definition.name, str(definition.location))
    if key not in cache:
        cache[key] = any(s.kind is EdgeKind.VENDOR for s in ctx.index.calls_from(definition))
    return cache[key]


# Receivers whose methods named like an operator may be Tensor methods, which call
# it through the dispatcher: a Tensor, an alias (`using SparseTensor = Tensor;`),
# or what gives one through `->` (TensorArg, OptionalTensorRef, MaybeOwned<Tensor>).
_TENSOR_RECEIVERS = frozenset(("Variable", "MaybeOwned", "ExclusivelyOwned", "IValue", "auto", "T", "scalar_t"))


def _tensor_receiver(site, caller, ctx: GraphContext) -> bool:
    """Whether a member call named like an operator (`.equal`, `.add_`) may be
    made on a Tensor: not when the receiver's declaration nearest above the
    call has another type (`exp_scalar.equal(.5)` on a `const Scalar&
    exp_scalar` is c10::Scalar::equal; `a.exp()` in sigmoid_kernel's
    Vectorized lambda, on its `Vectorized<scalar_t> a`, is Vectorized::exp,
    though the scalar lambda above declares a `scalar_t a`: no operator).
    A receiver that is an expression (another call's result, or one in
    parentheses) is taken to be a Tensor unless the first variable in it is
    of another type (`x_vec.neg().exp()` on a `Vectorized<scalar_t> x_vec`,
    `(x - Vec(max_input)).exp()` on a `Vec x`: Vectorized's methods and
    operators give Vectorized).
    True when no declaration can be read. Never in ATen's vectorized math,
    which works on raw arrays and Vectorized (`x.log1p()` on a `vec_t x` in
    vlog1p)."""
    if caller.location.path == VECTORIZED_MATH:
        return False
    declared = receiver_declarations(site, caller, ctx) or receiver_declarations(site, caller, ctx, through_call=True)
    if declared and not _tensor_like(declared[-1]):  # `iter.output_base().fill_(...)`: what output_base returns decides
        returned = chained_receiver_type(site, caller, ctx)  # Note [a member call's result as a receiver] in graph.resolve
        return returned is not None and _TENSOR_RESULT.fullmatch(returned) is not None
    return not declared or _tensor_like(declared[-1])


_TENSOR_RESULT = re.compile(r"(?:const\s+)?(?:at::)?(?:Tensor|TensorBase)\s*&?")


# Note [unqualified operator calls]
# rms_norm_symint, in namespace at::native, calls `rsqrt(at::pow(...)...)`:
# no rsqrt is defined in at::native (structured kernels define
# structured_rsqrt_out), so C++ finds at::rsqrt, the operator's function, in
# the enclosing namespace and by the Tensor argument's. An unqualified call
# that resolves to no definition, made in namespace at, of the name of an
# operator with a function variant (or its `_out`, `_symint` spelling), that
# passes a Tensor, is that operator's call through the dispatcher. A Tensor:
# a variable declared one nearest above the call, or a call of at::
# (`at::pow(x, 2).mean(...)`); not the scalars of `fmax(a, b)` in a CUDA
# kernel's lambda, CUDA's own function. Likewise a method call spelled with
# `_symint` on a Tensor (tile's `self.repeat_symint(reps)`, chunk's
# `self.split_symint(...)`) is the method TensorBody.h declares for the
# operator of the base name, which calls it through the dispatcher.
_TENSOR_DECLARED = re.compile(r"(?:const\s+)?(?:at::)?Tensor\s*&{0,2}")
_AT_CALL = re.compile(r"at::\w+\s*\(")


def _unqualified_operator(site, caller, ctx: GraphContext) -> str | None:
    """The operator an unqualified call of no definition reaches (Note
    [unqualified operator calls]), by its base name; None when it is none."""
    if "::" in site.callee or caller is None or not caller.name.startswith("at::") or ctx.index is None:
        return None
    if site.callee.startswith("."):  # `self.repeat_symint(reps)`: Tensor's method of that spelling (TensorBody.h)
        base = site.name.removesuffix("_symint")
        if base == site.name or not any("method" in op.variants for op in ctx.overloads(base)):
            return None
        return base if _tensor_receiver(site, caller, ctx) else None
    from kernelmap.source.facts import FUNCTION_SUFFIXES

    spelled_as = (site.name, *(site.name.removesuffix(s) for s in FUNCTION_SUFFIXES if site.name.endswith(s)))
    base = next((b for b in spelled_as if b and any("function" in op.variants for op in ctx.overloads(b))), None)
    if base is None:
        return None
    lines = tree_lines(ctx, site.location.path)
    for argument in call_arguments(site, ctx) or ():
        if _AT_CALL.match(argument):
            return base
        if re.fullmatch(r"[A-Za-z_]\w*", argument):
            declared = _declarations(argument, site, caller, lines)
            if declared and _TENSOR_DECLARED.fullmatch(declared[-1].strip()):
                return base
    return None


def _tensor_like(declared: str) -> bool:
    last = declared.rsplit("::", 1)[-1]
    # a lowercase name unqualified may be a template's parameter (`scalar_t`, `T`) or `auto`; `ideep::tensor` is a class
    return ("Tensor" in last and "Iterator" not in last) or last in _TENSOR_RECEIVERS or (not last[:1].isupper() and "::" not in declared)


# Note [template arguments]
# `bernoulli_impl_<BernoulliStub, Generator>(self, p, gen)` instantiates
# `template<template<typename> class bernoulli_scalar_kernel, typename RNG>
# Tensor& bernoulli_impl_(...)`, whose body calls
# `bernoulli_scalar_kernel<RNG>()(self, p, gen)`: the call runs
# BernoulliStub's operator(), which calls bernoulli_scalar_stub. The template
# arguments a call spells are bound, in order, to the parameters of the
# callee's template head; a call in its body of one of them is a call of the
# argument. A call that spells no template arguments binds by deduction where
# it passes a temporary of a named class for a parameter declared with a
# template parameter's type alone: `sortCommon(SmallBitonicSort{}, ...)` of
# `template <typename Sorter> void sortCommon(Sorter sorter, ...)` binds
# Sorter, and `sorter.template sort<A>(...)` in its body (a member call on a
# receiver of that type) runs SmallBitonicSort::sort. A parameter declared
# as a class template of a type parameter (`ArrayRef<T> size`) is bound by an
# argument declared as that template's instantiation, or as an alias of one
# that c10 writes (resize_'s `IntArrayRef size`: T = int64_t); a template
# argument spelled with the caller's own parameter (`_resize_impl_<T>`) is
# what the caller's instantiation binds, and a value of that type picks its
# overload (Note [overloads told apart by an argument's type]: `T
# storage_size` reaches `_maybe_resize_storage(TensorImpl*, int64_t)`, not
# its SymInt twin). A parameter no call binds is unresolved (never resolved by its name: at::native::bernoulli_scalar_kernel
# of cuda/ was drawn for CPU).


def _template_bindings(node: Node, definition, ctx: GraphContext, outer: dict[str, str] | None = None) -> dict[str, str]:
    """The template parameters of `definition` (read from its head) bound
    to the arguments its call site spells (`bernoulli_impl_<BernoulliStub,
    Generator>(...)`; an argument that is a template parameter of the caller,
    `_resize_impl_<T>(...)`, is what `outer`, the caller's bindings, binds
    it to); empty when either cannot be read."""
    site = node.attrs.get("call_site")
    if not isinstance(site, Location) or ctx.index is None:
        return {}
    short = definition.name.rsplit("::", 1)[-1]
    lines = tree_lines(ctx, site.path)
    text = "\n".join(lines[site.line - 1 : site.line + 3])
    starts = _name_followed(text, short, _ANGLE_TAIL)  # `\bNAME\s*<`, without a pattern per name
    m = _ANGLE_TAIL.match(text, starts[0] + len(short)) if starts else None
    head = declaration_head(definition, ctx)
    h = re.search(r"\btemplate\s*<", head)
    if h is None:
        return {}
    parameters = _template_parameters(head, h.end())
    if m is None:
        return _deduced_bindings(site, short, definition, parameters, ctx, outer)
    arguments = _angle_items(text, m.end())
    bound = {p: (outer or {}).get(a, a) for p, a in zip(parameters, arguments) if p and re.fullmatch(r"[A-Za-z_][\w:]*", a)}
    if len(arguments) < len(parameters):  # `run_launcher<scalar_t, index_t>(..., KthValueLauncher(k))`: the rest deduced
        rest = parameters[len(arguments):]
        bound.update(_deduced_bindings(site, short, definition, rest, ctx, outer))
    return bound


# A temporary of a named class passed as an argument: `SmallBitonicSort{}`, `ReduceAdd()`, `KthValueLauncher(k)`.
_CLASS_TEMPORARY = re.compile(r"((?:[A-Za-z_]\w*::)*[A-Z]\w*(?:<[^<>(){}]*>)?)\s*(?:\{[^{}]*\}|\((?:[^()]|\([^()]*\))*\))")


def _deduced_bindings(site: Location, short: str, definition, parameters: list[str], ctx: GraphContext,
                      outer: dict[str, str] | None = None) -> dict[str, str]:
    """Template parameters a call binds by deduction (Note [template
    arguments]): a function parameter declared with a template parameter's
    type alone (`template <typename Sorter> void sortCommon(Sorter sorter,
    ...)`, also `const Sorter&`, `Sorter&&`), given a temporary of a named
    class (`sortCommon(SmallBitonicSort{}, ...)`, `run_launcher<scalar_t,
    index_t>(..., KthValueLauncher(k))`), binds it to that class; one declared
    as a class template of it (`ArrayRef<T> size`), given an argument whose
    declared type is that template's instantiation, or an alias of one
    (`IntArrayRef size`, c10's `ArrayRef<int64_t>`), binds it to the
    instantiation's argument (T = int64_t)."""
    wanted = {p for p in parameters if p}
    lines = tree_lines(ctx, definition.location.path)
    text = "\n".join(lines[definition.location.line - 1 : definition.location.line + 12])
    opened = re.search(rf"\b{re.escape(short)}\s*(?:<[^(){{}};]*>)?\s*\(", text)
    declared = _bracket_items(text, opened.end(), "([{<", ")]}>") if opened else None
    if not declared or not any(p in " ".join(declared) for p in wanted):
        return {}
    arguments = call_arguments(_Spelled(site, short, short), ctx)
    bound = {}
    for declaration, argument in zip(declared, arguments or ()):
        words = re.findall(r"[\w:]+", _COMMENT.sub("", declaration.split("=", 1)[0]))
        words = [w for w in words if w not in ("const", "volatile")]
        temporary = _CLASS_TEMPORARY.fullmatch(argument)
        if len(words) == 2 and words[0] in wanted and temporary is not None:
            bound.setdefault(words[0], temporary.group(1))
            continue
        of = _TEMPLATE_OF.fullmatch(re.sub(r"\b(?:const|volatile)\b|[&*]", "", _COMMENT.sub("", declaration.split("=", 1)[0])).strip())
        if of is not None and of.group(2) in wanted:
            given = argument_type(argument, _Spelled(site, short, short), ctx, outer)
            instance = re.fullmatch(rf"{re.escape(of.group(1).rsplit('::', 1)[-1])}<(\w+)>", given or "")
            if instance is not None:
                bound.setdefault(of.group(2), instance.group(1))
    return bound


# A parameter declared as a class template of one type parameter: `ArrayRef<T> size`, `c10::ArrayRef<T> size`.
_TEMPLATE_OF = re.compile(r"((?:\w+::)*\w+)\s*<\s*(\w+)\s*>\s*\w+")


def _names_template_parameter(callee: str, caller, ctx: GraphContext) -> bool:
    """Whether a call's callee (its first name: `kernel_t::operator()` ->
    `kernel_t`) is a type parameter of the caller's template head."""
    if caller is None or ctx.index is None or callee.startswith(("::", ".")):
        return False
    name = callee.split("::", 1)[0]
    head = declaration_head(caller, ctx)
    if "template" not in head or name not in head:
        return False
    return any(name in _template_parameters(head, m.end()) for m in _TEMPLATE_HEAD.finditer(head))
