"""Which definition a C++ call reaches when its name has several: the one whose
parameters fit the operator's schema, the one the dtype enables (Note [enable_if
overloads]) or the build compiles (Note [build configuration]), the class
specialisation a call names, the overload its argument count and types pick
(Note [overloads told apart by an argument's type]), an out= spelling; and the
declarations and template facts those read.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from pathlib import Path

from kernelmap.graph.code import (
    _bracket_items,
    call_arguments,
    _call_open,
    compiled,
    file_lines,
    _parameter_name,
    parameters,
    _parameters_from,
    tree_lines,
    _WORD_CHAR,
    declaration_head,
    tree_path,
    _COMMENTS,
)
from kernelmap.graph.context import GraphContext, shared_results
from kernelmap.graph.grow import Node
from kernelmap.graph.resolve import _MARK, _NOT_TYPES, _words_at
from kernelmap.graph.rules import balanced, _SCHEMA_ARGS, schema_arguments
from kernelmap.model import Location, Op
from kernelmap.safefiles import NotRegularFile, read_bytes


def _parameter_names(definition, ctx: GraphContext) -> frozenset[str]:
    """The names a definition's parameters are declared with (`FillStub& fill_stub` -> fill_stub)."""
    if definition is None or ctx.index is None:
        return frozenset()
    return frozenset(filter(None, (_parameter_name(p) for p in parameters(definition, ctx) or ())))


def _signature_distance(params: list[str], schema_args: list[str]) -> int:
    """How far a C++ parameter list is from an operator schema's arguments: a
    Dimname where the schema has none (or the reverse) rules a candidate out;
    then the difference in argument count (TensorOptions stands for the
    schema's dtype, layout, device and pin_memory)."""
    cpp_named = sum("Dimname" in p for p in params)
    schema_named = sum("Dimname" in a for a in schema_args)
    if cpp_named != schema_named:
        return 1000
    count = len(params)
    if any("TensorOptions" in p for p in params) and sum(a.split()[-1].split("=")[0] in ("dtype", "layout", "device", "pin_memory") for a in schema_args) == 4:
        count += 3
    return abs(count - len(schema_args))


def by_signature(definitions: list, schema: str | None, ctx: GraphContext) -> list:
    """The overloads of a kernel name whose parameters fit the operator's schema
    (C++ overloads share a name: `sort(Tensor, int64_t, bool)` in Sorting.cpp,
    `sort(Tensor, Dimname, bool)` in NamedTensor.cpp); all of them when none can be told apart."""
    if len(definitions) < 2 or not schema:
        return definitions
    args = schema_arguments(schema)
    scored = []
    for d in definitions:
        params = parameters(d, ctx)
        scored.append(((_signature_distance(params, args), _type_mismatches(params, args)) if params is not None else (500, 0), d))
    best = min(score for score, _ in scored)
    return [d for score, d in scored if score == best] if best[0] < 500 else definitions


def _schema_type_kind(argument: str) -> str | None:
    """`tensor`, `tensors` or `scalar` for a schema argument (`Tensor(a!) out`,
    `Tensor?[] indices`, `Scalar? alpha`), else None (not compared)."""
    kind = argument.rsplit(None, 1)[0] if " " in argument else ""
    if kind.startswith("Tensor"):
        return "tensors" if "[" in kind else "tensor"
    return "scalar" if kind in ("Scalar", "Scalar?") else None


class _lazy:
    """A regular expression compiled when first used: importing this module
    compiles none, and a cold question uses few of them."""

    __slots__ = ("_args", "_pattern")

    def __init__(self, *args):
        self._args, self._pattern = args, None

    def __getattr__(self, name: str):
        if self._pattern is None:
            self._pattern = re.compile(*self._args)
        return getattr(self._pattern, name)


_CPP_TENSORS = _lazy(r"\b(?:TensorList|ITensorListRef|MaterializedITensorListRef)\b|(?:ArrayRef|vector|List)\s*<\s*(?:const\s+)?(?:at::)?(?:std::optional<\s*)?(?:at::)?Tensor\b")


def _cpp_type_kind(param: str) -> str | None:
    """The same for a C++ parameter (`const Tensor& self`, `TensorList tensors`,
    `const Scalar& other`, `const std::optional<Tensor>& weight`)."""
    if _CPP_TENSORS.search(param):
        return "tensors"
    if re.search(r"\bTensor\b", param):
        return "tensor"
    return "scalar" if re.search(r"\bScalar\b", param) else None


def _type_mismatches(params: list[str], schema_args: list[str]) -> int:
    """How many arguments, place by place, are of another kind in C++ than in
    the schema, of a Tensor, a list of Tensors and a Scalar: overloads of one
    arity told apart (where.self runs `where(const Tensor&, const Tensor&, const
    Tensor&)`, not the ScalarSelf overload's `where(const Tensor&, const
    Scalar&, const Tensor&)` beside it)."""
    mismatches = 0
    for param, argument in zip(params, schema_args):
        want, have = _schema_type_kind(argument), _cpp_type_kind(param)
        mismatches += want is not None and have is not None and want != have
    return mismatches


# The C++ element types of a dtype, as ATen spells them (at::Half, c10::Half, Half).
_DTYPE_TYPES = {
    "float32": ("float",), "float64": ("double",), "float16": ("Half",), "bfloat16": ("BFloat16",),
    "complex64": ("complex<float>",), "complex128": ("complex<double>",), "int64": ("int64_t", "long"),
    "int32": ("int32_t", "int"), "int16": ("int16_t", "short"), "int8": ("int8_t",), "uint8": ("uint8_t",), "bool": ("bool",),
}
_POINTER_PARAM = _lazy(r"^(?:const\s+)?([\w:]+(?:<[\w:<> ]*>)?)\s*(?:const\s*)?\*")


def _element_types(definition, ctx: GraphContext) -> list[tuple[str | None, set[str]]]:
    """(the explicit specialisation `gemm<float>`, the element types of its
    pointer parameters) of a definition; of each function of its name that a
    macro's use writes there (cpu/vml.h's `IMPLEMENT_VML_MKL(exp, Exp)`: a
    `vexp` for `float *` and one for `double *`)."""
    path = ctx.index.tree.root / definition.location.path
    lines = file_lines(path)
    line = lines[definition.location.line - 1] if definition.location.line <= len(lines) else ""
    short = definition.name.rsplit("::", 1)[-1]
    if _call_open(line, short) is None:  # the name is not written on its line: a macro's use
        expanded = _macro_expansion(path, definition.location.line)
        if expanded:
            found, at = [], _call_open(expanded, short)
            while at is not None:
                found.append(_declared_types(expanded[expanded.rfind("\n", 0, at) + 1 : at], short, _parameters_from(expanded, at)))
                following = _call_open(expanded[at:], short)
                at = None if following is None else at + following
            return found
    return [_declared_types(line, short, parameters(definition, ctx) or ())]


def _declared_types(line: str, short: str, params) -> tuple[str | None, set[str]]:
    m = re.search(rf"\b{re.escape(short)}\s*<\s*([\w:<> ]+?)\s*>\s*\(", line)
    special = m.group(1).replace(" ", "").rsplit("::", 1)[-1] if m else None
    if special and "<" in m.group(1):
        special = _bare_type(m.group(1))
    pointers = set()
    for p in params:
        pm = _POINTER_PARAM.match(p)
        if pm:
            pointers.add(_bare_type(pm.group(1)))
    return special, pointers


@functools.lru_cache(maxsize=256)
def _macro_expansion(path: Path, line: int) -> str | None:
    from kernelmap.source import preprocess

    try:
        data = read_bytes(path)
    except (OSError, NotRegularFile):
        return None
    expanded = preprocess.macro_expansion(data, line)
    return None if expanded is None else expanded.decode("utf-8", "replace")


def _bare_type(text: str) -> str:
    """A type as spelled, without spaces or a leading c10::/at:: (`c10::complex<float>` -> `complex<float>`)."""
    return re.sub(r"^(?:c10::|at::)", "", text.replace(" ", ""))


def by_dtype(definitions: list, ctx: GraphContext) -> list:
    """The template specialisation or overload of a call that runs for the
    selected dtype: `gemm<float>` of the seven `at::cuda::blas::gemm`, the
    `cpublas::gemm` whose arrays are all `float*`. The `--dtype` given (float32
    by default) decides; none when no candidate is spelled for it."""
    wanted = set(_DTYPE_TYPES.get(ctx.dtype, ()))
    if not wanted:
        return definitions
    special, typed = [], []
    for d in definitions:
        declared = _element_types(d, ctx)
        if any(spec is not None and spec in wanted for spec, _ in declared):
            special.append(d)
        elif any(spec is None and pointers and pointers <= wanted for spec, pointers in declared):
            typed.append(d)
    return special or typed


def by_class_specialisation(definitions: list, ctx: GraphContext) -> tuple[list, str | None]:
    """The methods of a class template that run for the selected dtype, of
    several defined in its primary template and in explicit specialisations
    (`sum_functor<scalar_t>{}(iter)` of ReduceSumProdKernel.cu: the primary's
    `operator()`, not `sum_functor<c10::complex<at::Half>>`'s; UniqueCub<bool>'s
    for bool): a specialisation spelled for the dtype, else the primary's.
    Also why, or None when the definitions are not of that kind."""
    heads = [_class_arguments(d, ctx) for d in definitions]
    special = [a for a in heads if a is not None]
    if not special or len(special) == len(heads):
        return definitions, None
    wanted = set(_DTYPE_TYPES.get(ctx.dtype, ()))
    spelled = [d for d, a in zip(definitions, heads) if a is not None and _bare_type(a) in wanted]
    if spelled:
        return spelled, f"{ctx.dtype}: the class specialisation for it"
    return [d for d, a in zip(definitions, heads) if a is None], f"{ctx.dtype}: the primary template, not its specialisation for {', '.join(dict.fromkeys(special))}"


# The head of the class a method is defined in: `struct sum_functor<c10::complex<at::Half>> {` (arguments: a specialisation).
_CLASS_HEAD = r"\b(?:struct|class)\s+(?:\w+\s+)*?{name}\s*(<(?:[^<>;{{}}]|<(?:[^<>;{{}}]|<[^<>;{{}}]*>)*>)*>)?\s*(?::[^;{{]*)?\{{"


def _class_arguments(definition, ctx: GraphContext) -> str | None:
    """The template arguments of the explicit specialisation of the class a
    method is defined in (`c10::complex<at::Half>`), read from the nearest
    head of that class above the method; None for the primary template, a
    class that is no template, or a class not found within 200 lines."""
    parts = definition.name.rsplit("::", 2)
    if len(parts) < 3:
        return None
    lines = tree_lines(ctx, definition.location.path)
    line = definition.location.line
    text = "\n".join(lines[max(0, line - 200) : line])
    m = None
    for m in re.finditer(_CLASS_HEAD.format(name=re.escape(parts[1])), text):
        pass
    if m is None or m.group(1) is None:
        return None
    return m.group(1)[1:-1].strip()


_ANGLE_TAIL = _lazy(r"\s*<")


def is_template(definition, ctx: GraphContext) -> bool:
    """Whether a definition is a function template over a type (`template <typename scalar_t>`)."""
    return re.search(r"\btemplate\s*<[^;{}]*\b(?:typename|class)\b", declaration_head(definition, ctx)) is not None


# `std::enable_if_t<COND, ...>` conditions on the element type that a dtype decides
# (Note [enable_if overloads]): the opmath type of Half and BFloat16 is float.
_ENABLE_IF = _lazy(r"enable_if(?:_t)?\s*<\s*(!?)\s*(?:std::)?(is_same_v\s*<\s*(\w+)\s*,\s*(?:at::)?opmath_type\s*<\s*\3\s*>\s*>|(?:c10::|at::)?is_reduced_floating_point_v\s*<\s*\w+\s*>)")
_REDUCED_DTYPES = ("float16", "bfloat16")


def by_enable_if(definitions: list, ctx: GraphContext) -> list:
    """Note [enable_if overloads]: template overloads of one name told apart by
    `std::enable_if_t` on the element type (batch_norm_cpu_contiguous_impl,
    LayerNormKernelImplInternal, _vec_softmax_lastdim: one for float and
    double, one for the reduced floating types Half and BFloat16). The one the
    selected dtype enables is the one called; all of them when a condition is
    not one of these."""
    reduced = ctx.dtype in _REDUCED_DTYPES
    enabled = []
    for d in definitions:
        lines = tree_lines(ctx, d.location.path)
        if not any("enable_if" in text for text in lines[max(0, d.location.line - 8) : d.location.line]):
            return definitions  # the common case, answered without parsing the declaration
        m = _ENABLE_IF.search(declaration_head(d, ctx))
        if m is None:
            return definitions
        holds = (not reduced) if m.group(2).startswith("is_same") else reduced
        if holds != bool(m.group(1)):
            enabled.append(d)
    return enabled or definitions


# A dtype dispatch in a kernel's body: `AT_DISPATCH_FLOATING_TYPES(...)`, `AT_DISPATCH_V2(...)`,
# a file's own wrapper of one (`_AT_DISPATCH_GEMM_TYPES`).
_DTYPE_DISPATCH = _lazy(r"\b\w*AT_DISPATCH\w*\s*\(")


@functools.lru_cache(maxsize=4096)
def _dtype_cases(path: Path, start: int, end: int) -> tuple[tuple[int, int], ...]:
    """The line spans of the dtype dispatches between lines `start` and `end` of a file."""
    lines = file_lines(path)
    text = "\n".join(lines[start - 1 : end])
    spans = []
    for m in _DTYPE_DISPATCH.finditer(text):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        spans.append((start + text.count("\n", 0, m.start()), start + text.count("\n", 0, i)))
    return tuple(spans)


def dtype_work(line: int, callee_name: str, caller, caller_node: Node, callee, ctx: GraphContext) -> str | None:
    """Why a direct call is the kernel's per-dtype work, kept though it reaches
    no loop, launch or vendor call (cat_serial_kernel_impl<scalar_t> copies with
    its own loops): a template over the element type (or a call spelling
    template arguments, `vec_host_softmax_lastdim<scalar_t, false>::apply`)
    made in an AT_DISPATCH case of the caller, or called from such work.
    None otherwise."""
    location = caller.location
    if callee is not None and not callee.location.path.startswith("aten/src/ATen/native/"):
        return None  # ATen's utilities (getTensorInfo<scalar_t, ...> of ATen/cuda/detail) are plumbing
    why = None
    for first, last in _dtype_cases(tree_path(ctx, location.path), location.line, location.end_line or location.line):
        if first <= line <= last:
            why = f"called in the dtype dispatch at line {first}"
            break
    if why is None and caller_node.attrs.get("dtype_work") and callee is not None and callee.location.path == location.path:
        why = "a template over the element type, called by per-dtype work"
    if why is None:
        return None
    if (callee is not None and is_template(callee, ctx)) or _templated_call(line, callee_name, location, ctx):
        return why
    return None  # a helper called in the case (getCurrentDeviceProperties) is plumbing like any other


def _templated_call(line: int, name: str, location: Location, ctx: GraphContext) -> bool:
    """Whether the call of `name` on `line` spells template arguments (`f<scalar_t>(`, `S<scalar_t>::f(`)."""
    lines = tree_lines(ctx, location.path)
    text = lines[line - 1] if line <= len(lines) else ""
    short = re.escape(name.rsplit("::", 1)[-1].lstrip("."))
    return re.search(rf"\b{short}\s*<|>\s*::\s*{short}\s*\(", text) is not None


def by_build(definitions: list, ctx: GraphContext) -> list:
    """Definitions the build compiles first, then the undecided, then the ones it leaves out."""
    order = {True: 0, None: 1, False: 2}
    return sorted(definitions, key=lambda d: order[compiled(d.symbol.condition, ctx)])


def not_compiled(node: Node, condition: str | None, ctx: GraphContext) -> Node:
    """Mark `node` as a branch the device's build leaves out, when its `#if` is false:
    shown collapsed with its condition, never followed (unless all branches are asked for)."""
    if condition and compiled(condition, ctx) is False:
        why = ctx.build.why(condition) if ctx.build is not None else ""
        node.attrs["branch"] = f"not compiled in a release {ctx.device} build: #if {condition}" + (f" ({why})" if why else "")
        if not ctx.all_branches:
            node.leaf().payload = None
    return node


def _structured_functional(op: Op, ctx: GraphContext) -> str | None:
    """The functional operator whose name a structured group's TORCH_META_FUNC carries."""
    out = ctx.catalog.delegate(op) or op
    for candidate in ctx.overloads(out.name.name.rstrip("_")):
        if candidate.structured_delegate == out.name.unqualified and not candidate.is_inplace:
            return candidate.name.unqualified
    return op.name.unqualified


@dataclasses.dataclass(frozen=True)
class _Spelled:
    """A call site as `call_arguments` reads it: where it is and the name it calls."""

    location: Location
    name: str
    callee: str


def _template_parameters(text: str, start: int) -> list[str]:
    """The names, in order, of the parameters of the template head whose `<`
    ends at `start`: `template<template<typename> class K, typename RNG, int N = 2>`
    -> K, RNG, N (an unnamed one is '')."""
    return [(re.findall(r"\w+", item.split("=", 1)[0]) or [""])[-1] for item in _angle_items(text, start)]


def _angle_items(text: str, start: int) -> list[str]:
    """The top-level items of the `<...>` list that begins at `start` (after its `<`)."""
    return [i.strip() for i in _bracket_items(text, start, "<([{", ">)]}") or () if i.strip()]


def call_argument_count(site, ctx: GraphContext) -> int | None:
    """How many arguments a call site passes, read from its lines in the tree
    (None when the call cannot be read there)."""
    arguments = call_arguments(site, ctx)
    return None if arguments is None else len(arguments)


# A declaration of a name: `static ReduceAdd reduce_add;`, `const Tensor& self,` (a parameter).
_DECLARED = r"(?:^|[;{{(,])\s*(?:(?:static|const|constexpr|inline)\s+)*((?:\w+::)*\w+\s*(?:<[^;{{}}()]*>)?)\s*(?:const\s*)?[&*]?\s*\b{name}\s*(?:[;=,)]|\{{)"
_CAST = _lazy(r"(?:static|reinterpret|const)_cast\s*<(.+)>\s*\(.*\)", re.S)


def _type_key(text: str) -> str | None:
    """A type as written, made comparable: qualifiers, `const`, `&`, `*` and
    spaces dropped (`const std::optional<at::Generator>&` -> `optional<Generator>`)."""
    text = re.sub(r"\b(?:const|volatile|struct|class|typename)\b|[&*\s]", "", text)
    text = re.sub(r"\b\w+::", "", text)
    return text if re.fullmatch(r"[\w<>,]+", text or "") else None


def _declared_type(name: str, site, ctx: GraphContext) -> str | None:
    """The type (_type_key) of the nearest declaration of `name` above a
    call site in its file; None when not found."""
    cache = shared_results(ctx, "_declared_types")
    key = (name, site.location.path, site.location.line)
    if key not in cache:
        cache[key] = _find_declared_type(name, site, ctx)
    return cache[key]


@functools.lru_cache(maxsize=2048)
def _declared_pattern(name: str) -> re.Pattern[str]:
    """Compiled once per name: `re`'s own cache is overflowed by a graph's per-name patterns."""
    return re.compile(_DECLARED.format(name=re.escape(name)), re.M)


# _DECLARED of a name written as resolve's marker (`_declared_in`): one pattern for every name.
_DECLARED_MARKED = _lazy(_DECLARED.replace(r"\b{name}", "{name}").format(name=_MARK), re.M)


def _declared_in(text: str, name: str) -> list[str]:
    """The types of `name` the matches of `_declared_pattern(name)` in `text`
    read, through one pattern where the name stands as a word once (as
    resolve._declared_types_in does)."""
    places = _words_at(text, name)
    if not places:
        return []
    if len(places) > 1 or _MARK in text or not _WORD_CHAR.match(name[0]) or not _WORD_CHAR.match(name[-1]):
        return [m.group(1) for m in _declared_pattern(name).finditer(text)]
    q = places[0]
    return [m.group(1) for m in _DECLARED_MARKED.finditer(f"{text[:q]}{_MARK}{text[q + len(name):]}")]


def _find_declared_type(name: str, site, ctx: GraphContext) -> str | None:
    lines = tree_lines(ctx, site.location.path)
    for i in range(site.location.line - 1, -1, -1):
        if name not in lines[i]:
            continue
        text = "\n".join(lines[max(0, i - 1) : i + 1])
        found = [t for t in _declared_in(text, name) if re.match(r"\w+", t).group() not in _NOT_TYPES]
        if found:
            return _type_key(found[-1])
    return None


# A value passed on as it is: `std::move(storage_size)`, `std::forward<T>(x)`.
_PASSED_ON = _lazy(r"std::(?:move|forward\s*<[^<>()]*>)\s*\(\s*([A-Za-z_]\w*)\s*\)")


def _argument_type(argument: str, site, ctx: GraphContext) -> str | None:
    """The type of an argument where it is written out: a name's declaration
    above the call (passed on by `std::move` or `std::forward` too), a cast's
    target (`static_cast<std::optional<Generator>>(std::nullopt)`), or what
    the function it calls returns (`wrapped_scalar_tensor(other)`)."""
    moved = _PASSED_ON.fullmatch(argument)
    if moved:
        argument = moved.group(1)
    if re.fullmatch(r"[A-Za-z_]\w*", argument):
        return _declared_type(argument, site, ctx)
    cast = _CAST.fullmatch(argument)
    if cast:
        return _type_key(cast.group(1))
    call = _CALL_ARGUMENT.fullmatch(argument)
    # `f(a)`, not `f(a) + g(b)`: what lies between the first `(` and the last `)` is balanced
    return _returned_type(call.group(1), ctx) if call and balanced(call.group(2)) else None


_CALL_ARGUMENT = _lazy(r"((?:[A-Za-z_]\w*::)*[A-Za-z_]\w*)\s*\((.*)\)", re.S)
# Words before a function's name that are not its return type (`static inline`, `C10_API`, `TORCH_API`).
_SPECIFIERS = _lazy(r"\b(?:static|inline|constexpr|extern|virtual|explicit|friend|[A-Z][A-Z0-9_]*[A-Z0-9])\b")




def _returned_type(name: str, ctx: GraphContext) -> str | None:
    """The type (_type_key) a call of `name` returns, when every definition of
    that name in the tree declares the same one, written out (ScalarOps.h's
    `inline Tensor wrapped_scalar_tensor(`); None for a template, `auto`, or
    definitions that disagree."""
    found = ctx.index.definitions(name)
    if not found or len(found) > 8:
        return None
    types = set()
    for d in found:
        head = _COMMENTS.sub(" ", declaration_head(d, ctx))  # the comment above it is none of its type
        if re.search(r"\b(?:template|auto|decltype|operator)\b|[#()]", head):
            return None
        types.add(_type_key(_SPECIFIERS.sub("", head)))
    return types.pop() if len(types) == 1 and None not in types else None


def _parameter_type(parameter: str) -> str | None:
    """`const ReduceAdd& f` -> ReduceAdd, `const Arguments&` -> Arguments (unnamed),
    `std::optional<Generator> generator` -> optional<Generator> (_type_key);
    None when it cannot be read (a function pointer)."""
    text = re.sub(r"=.*", "", parameter, flags=re.S).strip()
    if "(" in text or not text:
        return None
    named = re.search(r"(?<=[\s&*>])[A-Za-z_]\w*$", text)
    if named is not None and re.search(r"\w", text[: named.start()]) and text[: named.start()].strip() not in ("unsigned", "signed", "long", "short"):
        text = text[: named.start()]
    return _type_key(text)


_CLASS = _lazy(r"^(template\s*<[^;{}]*>\s*)?(?:class|struct)\s+(\w+)\s*(?:final\s*)?\{", re.M)


@functools.lru_cache(maxsize=256)
def _plain_classes(path: Path) -> frozenset[str]:
    """The classes a file defines at the start of a line, not templates, with
    no constructor of one argument (so nothing converts to them implicitly):
    ScatterGatherKernel.cpp's functors ReduceMean, TensorAssign."""
    text = "\n".join(file_lines(path))
    found = set()
    for m in _CLASS.finditer(text):
        name = m.group(2)
        if m.group(1) or re.search(rf"\b{name}\s*\(\s*(?:const\s+)?\w[\w:<>]*\s*[&*]*\s*\w*\s*\)", text):
            continue  # a template, or a constructor that may convert
        found.add(name)
    return frozenset(found)


_TEMPLATE_HEAD = _lazy(r"\btemplate\s*<")
_ALIAS = _lazy(r"\busing\s+(\w+)\s*=|\btypedef\b[^;{}]*\btypename\b[^;{}]*?\b(\w+)\s*;")


@functools.lru_cache(maxsize=256)
def _dependent_names(path: Path) -> frozenset[str]:
    """The names a file declares as template type parameters or aliases
    (`typename scalar_t`, `using opmath_t = ...`): a type spelled so stands
    for one a template's instantiation decides."""
    text = "\n".join(file_lines(path))
    names = set()
    for m in _TEMPLATE_HEAD.finditer(text):
        names.update(_template_parameters(text[m.end() : m.end() + 2000], 0))  # a head is short: read no further
    names.update(a or b for a, b in _ALIAS.findall(text))
    names.discard("")
    return frozenset(names)


def bound_type(declared: str | None, bound: dict[str, str] | None) -> str | None:
    """A declared type (_type_key) with the template parameters the caller's
    instantiation binds put in (`T` -> `int64_t` in `_resize_impl_<int64_t>`,
    Note [overloads told apart by an argument's type])."""
    if declared is None or not bound:
        return declared
    return _type_key(re.sub(r"\b\w+\b", lambda m: bound.get(m.group(), m.group()), declared))


# `using IntArrayRef = ArrayRef<int64_t>;`: an alias of one instantiation of a class template.
_USING = _lazy(r"^\s*using\s+(\w+)\s*=\s*((?:\w+::)*\w+\s*<[^;<>{}()]*>)\s*;", re.M)


@functools.lru_cache(maxsize=4)
def _core_aliases(root: Path) -> dict[str, str]:
    """The aliases c10's headers give instantiations of class templates
    (`IntArrayRef` -> `ArrayRef<int64_t>`, `SymIntArrayRef` -> `ArrayRef<SymInt>`),
    as _type_key writes them; a name aliased to two types is left out."""
    found: dict[str, set] = {}
    for path in sorted((root / "c10").rglob("*.h")):
        text = "\n".join(file_lines(path))
        if "using" not in text:
            continue
        for m in _USING.finditer(text):
            found.setdefault(m.group(1), set()).add(_type_key(m.group(2)))
    return {name: types.pop() for name, types in found.items() if len(types) == 1 and None not in types}


def argument_type(argument: str, site, ctx: GraphContext, bound: dict[str, str] | None = None) -> str | None:
    """The type (_type_key) of an argument written out at a call site, with the
    caller's template bindings put in and a c10 alias spelled out
    (`IntArrayRef size` -> `ArrayRef<int64_t>`): what a callee's template
    parameters are deduced from (Note [template arguments])."""
    declared = bound_type(_argument_type(argument, site, ctx), bound)
    if declared is None or ctx.index is None:
        return declared
    return _core_aliases(ctx.index.tree.root).get(declared, declared)


def by_argument_types(definitions: list, site, ctx: GraphContext, bound: dict[str, str] | None = None) -> list:
    """Note [overloads told apart by an argument's type]: the overloads of a
    call whose parameters differ in type where the call passes an argument
    whose type is written out (a name declared above the call in its file, or
    a cast): the overloads that take exactly that type
    (`cuda_scatter_gather_base_kernel::operator()` of a `ReduceAdd& f`, for
    `reduce_add`, declared `static ReduceAdd reduce_add;`; native::randn's
    `std::optional<Generator>` overload, for
    `static_cast<std::optional<Generator>>(std::nullopt)`), as C++ prefers an
    exact match to a template or a conversion. Types are compared whole,
    template arguments included, qualifiers and references dropped. A type a
    template decides (`scalar_t`, `opmath_t`) decides nothing here, unless the
    caller's instantiation binds it (`bound`: `_resize_impl_<T>`'s `T
    storage_size`, with T = int64_t where `_resize_` was given an IntArrayRef,
    picks `_maybe_resize_storage(TensorImpl*, int64_t)` over its SymInt
    overload). All of them when the types cannot be read or none matches."""
    if len(definitions) < 2 or ctx.index is None:
        return definitions
    arguments = call_arguments(site, ctx)
    if not arguments:
        return definitions
    aliases = _core_aliases(ctx.index.tree.root)  # `IntArrayRef` and `ArrayRef<int64_t>` are one type
    types = []
    for d in definitions:
        params = parameters(d, ctx)
        if params is None or len(params) < len(arguments):
            return definitions
        types.append([aliases.get(t, t) for t in map(_parameter_type, params[: len(arguments)])])
    matching = list(range(len(definitions)))
    for position, argument in enumerate(arguments):
        if len({t[position] for t in types}) < 2:
            continue  # every overload takes the same type here
        declared = argument_type(argument, site, ctx, bound)
        if declared is None or set(re.findall(r"\w+", declared)) & _dependent_names(tree_path(ctx, site.location.path)):
            continue  # unknown, or a template's type (`opmath_t`: `float` for Half, so gemm_notrans_'s Half overload)
        exact = [i for i in matching if types[i][position] == declared]
        if exact:
            matching = exact
            continue
        # no overload takes it exactly: one whose parameter is another plain class of the file cannot take it
        # (cpu_scatter_gather_base_kernel's `ReduceMean& kernel_func` for a TensorAssign): a template can
        classes = _plain_classes(tree_path(ctx, site.location.path))
        if declared in classes:
            viable = [i for i in matching if types[i][position] not in classes]
            if viable:
                matching = viable
    return [definitions[i] for i in matching] if len(matching) < len(definitions) else definitions


def _accepts(op: Op, count: int) -> bool:
    arguments = schema_arguments(op.schema)
    required = sum("=" not in a for a in arguments)
    return required <= count <= len(arguments)


_OUT_SPELLINGS = ("_out", "_outf", "_symint_out", "_symint_outf")


def by_out_spelling(op: Op, site, ctx: GraphContext) -> Op:
    """The out= overload a call spelled `at::<name>_out` / `_outf` reaches
    (`at::abs_out(result, self)`, or `at::abs_out` passed to a helper): the
    one that takes as many arguments, else the first. The resolved operator
    when the spelling is the operator's own name or none fits."""
    base = op.name.name
    if op.is_out or site.name == base or not site.name.endswith(_OUT_SPELLINGS) or site.name.removeprefix(base) not in _OUT_SPELLINGS:
        return op
    outs = [o for o in ctx.overloads(base) if o.is_out and o.name.name == base]
    count = call_argument_count(site, ctx)
    fitting = [o for o in outs if count is None or _accepts(o, count)]
    return (fitting or outs or [op])[0]


def by_argument_count(op: Op, site, ctx: GraphContext) -> Op:
    """The overload a C++ call reaches: `at::sort(self, false, dim, descending)`
    passes four arguments, which `sort(Tensor self, int dim=-1, bool
    descending=False)` cannot take and `sort.stable` can. The resolved operator
    stays when it accepts the count or no other overload of its name does."""
    count = call_argument_count(site, ctx)
    if count is not None and site.callee.startswith("."):
        count += 1  # `self.sort(...)`: the tensor is the first argument
    if count is None or _accepts(op, count):
        return op
    for other in ctx.overloads(op.name.name.rstrip("_")):
        if other.name.name == op.name.name and other.is_out == op.is_out and other.is_inplace == op.is_inplace and _accepts(other, count):
            return other
    return op


def by_arity(definitions: list, site, ctx: GraphContext) -> list:
    """The overloads of a direct call that take as many arguments as it passes
    (`cudnn_convolution_backward_input(input.sizes(), grad_output, ...)` with ten
    arguments is ConvShared.cpp's Tensor overload, not the one that takes a
    CheckedFrom first); all of them when the count cannot be read or none fits."""
    if len(definitions) < 2:
        return definitions
    count = call_argument_count(site, ctx)
    if count is None:
        return definitions
    fitting = []
    for d in definitions:
        params = parameters(d, ctx)
        if params is None:
            return definitions
        required = sum("=" not in p for p in params if p != "...")
        if required <= count and (count <= len(params) or any(p.endswith("...") for p in params)):
            fitting.append(d)
    return fitting or definitions


def _one_symbol(definitions) -> bool:
    return len({d.lookup for d in definitions}) == 1


def _all_distinct_conditions(candidates) -> bool:
    conditions = [d.symbol.condition for d in candidates]
    return all(conditions) and len(set(conditions)) == len(conditions)


def _nearest(definitions: list, callee: str, caller) -> list:
    """The definitions a name written in `caller` means: a qualified name's
    own, else the ones of the caller's namespace or the nearest enclosing one
    (`gatherTopK<<<...>>>` in sbtopk::launch is sbtopk::gatherTopK, not mbtopk's)."""
    if len(definitions) < 2:
        return definitions
    callee = callee.lstrip(":")
    if "::" in callee:
        exact = [d for d in definitions if f"::{d.lookup}".endswith(f"::{callee}")]
        return exact or definitions
    ns = caller.lookup.rsplit("::", 1)[0] if "::" in caller.lookup else ""
    while True:
        scoped = [d for d in definitions if d.lookup == (f"{ns}::{callee}" if ns else callee)]
        if scoped or not ns:
            return scoped or definitions
        ns = ns.rsplit("::", 1)[0] if "::" in ns else ""


# Note [the C++ overload a call reaches]
# An operator's overloads are C++ overloads of one name in the API torchgen
# writes (ATen/ops/<op>.h, TensorBody.h): `at::empty(sizes, options)` is one
# of `empty(IntArrayRef size, optional<DimnameList> names, TensorOptions
# options={}, ...)` (empty.names) and `empty(IntArrayRef size, TensorOptions
# options={}, optional<MemoryFormat> memory_format=nullopt)`
# (empty.memory_format), and C++ picks the one whose parameters take the
# arguments. The parameters are read from each schema by torchgen's rules
# (torchgen.api.cpp.arguments; the tree's own torchgen runs only in the
# catalog's interpreter, Note [one torchgen per interpreter]): a Tensor, a
# Scalar, an `int[]` (IntArrayRef), the keyword-only dtype/layout/device/
# pin_memory as one `TensorOptions options` (`={}` when the four default to
# None), and beside it the "faithful" signature that takes the four apart with
# no defaults at all; the yaml's `cpp_no_default_args` drop a default; a
# method call's receiver is `self`; `at::<op>_out` takes its outputs first,
# `_outf` last. tests/graph/test_cpp_overloads.py holds these against every
# inline function of the wheel's generated headers.
# An argument's kind is what the call site shows of it: `.options()` (or a
# chain on it, `at::dtype(...)`, `TensorOptions()`) is TensorOptions, `kLong`
# a ScalarType and `A.dtype()` a TypeMeta (both make TensorOptions), a braced
# list of numbers or a `.sizes()` an int list, a literal a number,
# `std::nullopt` any optional, an operator's result what its schema returns
# (`S.reciprocal()`, `at::zeros(...)`: a Tensor), arithmetic or a comparison
# with a Tensor a Tensor, else the type a name is declared with above the call
# (a local, a parameter, an `auto` local's initialiser). An overload is viable
# when it takes as many arguments and each known kind converts to its
# parameter; of the viable ones, one that takes every known argument at least
# as exactly as another and one more exactly wins (as C++ ranks implicit
# conversions). Where the arguments cannot tell, the overload chosen before stays.

# A schema type's base -> the kind of its C++ parameter (SymInt is int: `at::<op>_symint` spells the SymInt one).
_SCHEMA_KINDS = {"SymInt": "int", "int": "int", "float": "float", "bool": "bool", "Scalar": "Scalar", "Tensor": "Tensor",
                 "ScalarType": "ScalarType", "Layout": "Layout", "Device": "Device", "MemoryFormat": "MemoryFormat",
                 "Dimname": "Dimname", "Generator": "Generator", "str": "str", "Storage": "Storage", "Stream": "Stream"}
_OPTIONS_GROUP = (("ScalarType?", "dtype"), ("Layout?", "layout"), ("Device?", "device"), ("bool?", "pin_memory"))


def _schema_kind(schema_type: str) -> str:
    """`Tensor(a!)` -> Tensor, `SymInt[]` -> int[], `int[2]?` -> int[]?, `Tensor?[]` -> Tensor?[] (a kind _converts reads)."""
    text = re.sub(r"\([^()]*\)", "", schema_type).strip()
    optional = text.endswith("?")
    text = text.rstrip("?")
    listed = re.search(r"\[\d*\]$", text)
    base = text[: listed.start()] if listed else text
    inner_optional = base.endswith("?")
    kind = _SCHEMA_KINDS.get(base.rstrip("?"), base.rstrip("?"))
    if inner_optional:
        kind += "?"
    if listed:
        kind += "[]"
    return kind + ("?" if optional else "")


def _cpp_signatures(op: Op, site) -> list[list[tuple[str, bool]]]:
    """(kind, has a default) of the parameters of each C++ overload `op` is
    spelled as at `site` (Note [the C++ overload a call reaches])."""
    no_default = _no_default_arguments(op)
    declared = []
    for argument in schema_arguments(op.schema):
        head, eq, default = argument.partition("=")
        kind, _, name = head.strip().rpartition(" ")
        declared.append((kind.strip(), name, default.strip() if eq and name not in no_default else None))
    # torchgen groups the four among the keyword-only arguments; the outputs are the mutable ones that end them
    keyword = _keyword_start(op.schema)
    group = [i for i, (kind, name, _) in enumerate(declared) if (kind, name) in _OPTIONS_GROUP and i >= keyword]
    outputs = 0
    while op.is_out and outputs < len(declared) - keyword and "!" in declared[len(declared) - 1 - outputs][0]:
        outputs += 1
    if site.callee.startswith(".") and declared and declared[0][1] == "self":
        declared, group = declared[1:], [i - 1 for i in group]
    if outputs and site.name.endswith(("_out", "_symint_out")):
        declared, group = declared[-outputs:] + declared[:-outputs], [i + outputs for i in group]
    plain = [(_schema_kind(kind), default is not None) for kind, _, default in declared]
    if len(group) < len(_OPTIONS_GROUP):
        return [plain]
    # torchgen's `options={}` when the four default to None (or dtype to long), else none
    defaulted = all(declared[i][2] == "None" for i in group) or declared[group[0]][2] == "long"
    grouped = [("TensorOptions", defaulted) if i == group[0] else p for i, p in enumerate(plain) if i == group[0] or i not in group]
    return [grouped, [(kind, False) for kind, _ in plain]]


def _keyword_start(schema: str) -> int:
    """How many of a schema's arguments come before its `*` (all of them when it has none)."""
    m = _SCHEMA_ARGS.search(schema)
    items = [i.strip() for i in _split_top(m.group(1))] if m else []
    return items.index("*") if "*" in items else len(items)


_NO_DEFAULT = re.compile(r"^\s*cpp_no_default_args:\s*\[([^\]]*)\]")


def _no_default_arguments(op: Op) -> frozenset[str]:
    """The arguments whose schema default the C++ API leaves out: the
    entry's `cpp_no_default_args: ['dim']` in native_functions.yaml (any.dims)."""
    path = op.location.disk_path
    return _yaml_no_defaults(path, op.location.line) if path is not None else frozenset()


@functools.lru_cache(maxsize=8192)
def _yaml_no_defaults(path: Path, line: int) -> frozenset[str]:
    lines = file_lines(path)
    for text in lines[line : line + 40]:
        if text.startswith("- func:"):
            break
        m = _NO_DEFAULT.match(text)
        if m:
            return frozenset(re.findall(r"\w+", m.group(1)))
    return frozenset()


# What an argument's kind converts to, with its rank (0: exactly, 1: by a conversion); kinds not listed take nothing else.
_CONVERTS = {
    "Tensor": {"Tensor": 0, "Tensor[]": 1},
    "Tensor[]": {"Tensor[]": 0},
    "Scalar": {"Scalar": 0},
    "int": {"int": 0, "float": 1, "bool": 1, "Scalar": 1, "int[]": 1},
    "float": {"float": 0, "int": 1, "bool": 1, "Scalar": 1},
    "bool": {"bool": 0, "int": 1, "float": 1, "Scalar": 1},
    "int[]": {"int[]": 0},
    "ScalarType": {"ScalarType": 0, "TensorOptions": 1},
    "TensorOptions": {"TensorOptions": 0},
    "Dimname": {"Dimname": 0, "Dimname[]": 1},
    "Dimname[]": {"Dimname[]": 0},
    "MemoryFormat": {"MemoryFormat": 0, "TensorOptions": 1},
    "Device": {"Device": 0, "TensorOptions": 1},
    "Layout": {"Layout": 0, "TensorOptions": 1},
    "Generator": {"Generator": 0},
    "str": {"str": 0, "Device": 1, "TensorOptions": 1},
    "TypeMeta": {"TensorOptions": 1},  # `A.dtype()`: a caffe2::TypeMeta, which TensorOptions is made from
    "number": {"int": 1, "float": 1, "bool": 1, "Scalar": 1},  # an element type: float, Half, c10::complex<double>...
}


def _converts(argument: str, parameter: str) -> int | None:
    """The rank of passing an argument of a kind to a parameter of a kind; None when it cannot be passed."""
    if argument == "nullopt":
        return 0 if parameter.endswith("?") else None
    if argument.endswith("?"):  # an optional is passed to an optional of its kind only
        return 0 if parameter == argument else None
    if parameter.endswith("?") and not parameter.endswith("?[]"):
        rank = _CONVERTS.get(argument, {}).get(parameter[:-1])
        return None if rank is None else rank + (argument != parameter[:-1])
    return _CONVERTS.get(argument, {}).get(parameter)


_SCALAR_TYPE_NAMES = frozenset(("Byte", "Char", "Short", "Int", "Long", "Half", "Float", "Double", "ComplexHalf", "ComplexFloat", "ComplexDouble",
                                "Bool", "BFloat16", "QInt8", "QUInt8", "QInt32", "QUInt4x2", "QUInt2x4", "Float8_e5m2", "Float8_e4m3fn",
                                "UInt16", "UInt32", "UInt64"))
_DEVICE_TYPE_NAMES = frozenset(("CPU", "CUDA", "Meta", "XPU", "MPS", "HIP", "XLA", "Lazy", "IPU", "MTIA", "PrivateUse1"))
_LAYOUT_NAMES = frozenset(("Strided", "Sparse", "SparseCsr", "SparseCsc", "SparseBsr", "SparseBsc", "Mkldnn", "Jagged"))
_CONSTANT = re.compile(r"(?:(?:at|c10|torch)::)?(?:(ScalarType|MemoryFormat|Layout|DeviceType)::(\w+)|k(\w+))")
_NUMBER = re.compile(r"-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?[fFlLuU]*")
# A chain of calls on a value: `.dtype(kLong).memory_format(...)` (balanced parentheses are checked apart).
_CHAIN = r"(?:\s*\.\s*\w+\s*\(.*\))*"
_OPTIONS = re.compile(rf"(?:.*\.\s*options\s*\(\s*\)|(?:(?:at|c10|torch)::)?(?:TensorOptions\s*\(.*\)|(?:dtype|device|layout)\s*(?:<[\w:]+>)?\s*\(.*\))){_CHAIN}", re.S)
# What a method of a tensor returns, by name.
_TENSOR_METHODS = {"sizes": "int[]", "strides": "int[]", "sym_sizes": "int[]", "sym_strides": "int[]", "size": "int", "stride": "int",
                   "dim": "int", "ndimension": "int", "numel": "int", "sym_numel": "int", "sym_size": "int", "scalar_type": "ScalarType",
                   "suggest_memory_format": "MemoryFormat", "device": "Device", "layout": "Layout", "dtype": "TypeMeta",
                   "vec": "int[]"}
# A declared type (_type_key) -> its kind.
_TYPE_KINDS = {"Tensor": "Tensor", "TensorBase": "Tensor", "Scalar": "Scalar", "TensorOptions": "TensorOptions", "ScalarType": "ScalarType",
               "MemoryFormat": "MemoryFormat", "Device": "Device", "Layout": "Layout", "Dimname": "Dimname", "DimnameList": "Dimname[]",
               "ArrayRef<Dimname>": "Dimname[]", "Generator": "Generator", "TensorList": "Tensor[]", "ArrayRef<Tensor>": "Tensor[]",
               "vector<Tensor>": "Tensor[]", "ITensorListRef": "Tensor[]", "bool": "bool", "double": "float", "float": "float",
               "string_view": "str", "DimVector": "int[]", "SymDimVector": "int[]", "IntArrayRef": "int[]", "SymIntArrayRef": "int[]",
               "OptionalIntArrayRef": "int[]?", "OptionalSymIntArrayRef": "int[]?", "List<optional<Tensor>>": "Tensor?[]",
               "ArrayRef<double>": "float[]", "ArrayRef<Scalar>": "Scalar[]", "Storage": "Storage", "Stream": "Stream"}
_INT_TYPES = frozenset(("int", "long", "int64_t", "int32_t", "int16_t", "int8_t", "uint8_t", "uint32_t", "uint64_t", "size_t", "SymInt", "unsigned"))
# The names AT_DISPATCH and the kernels give a tensor's element type (each a number, never a Tensor).
_ELEMENT_TYPES = frozenset(("scalar_t", "opmath_t", "accscalar_t", "acc_t", "value_t", "Half", "BFloat16"))
_INT_LIST = re.compile(r"(?:ArrayRef|vector|SmallVector|array|OptionalArrayRef)<(?:int64_t|SymInt|long)(?:,\w+)?>|(?:Sym)?DimVector")


def _type_kind(declared: str | None) -> str | None:
    """The kind (Note [the C++ overload a call reaches]) of a type as _type_key writes it."""
    if declared is None:
        return None
    m = re.fullmatch(r"optional<(.+)>", declared)
    if m:
        inner = _type_kind(m.group(1))
        return None if inner is None else f"{inner}?"
    if declared in _INT_TYPES:
        return "int"
    if declared in _ELEMENT_TYPES:
        return "number"
    if _INT_LIST.fullmatch(declared):
        return "int[]"
    return _TYPE_KINDS.get(declared)


def argument_kind(argument: str, site, ctx: GraphContext, depth: int = 0) -> str | None:
    """The kind of an argument written at a call site (Note [the C++ overload
    a call reaches]); None when the site does not show it."""
    text = argument.strip()
    moved = _PASSED_ON.fullmatch(text)
    if moved:
        text = moved.group(1)
    if text in ("std::nullopt", "c10::nullopt", "nullopt", "::std::nullopt"):
        return "nullopt"
    if text in ("true", "false"):
        return "bool"
    if _NUMBER.fullmatch(text):
        return "float" if re.search(r"[.eE]|[fF]$", text) and not text.lower().startswith("0x") else "int"
    if text.startswith('"'):
        return "str"
    if text.startswith("{") and text.endswith("}") and balanced(text[1:-1]):
        items = [i.strip() for i in _split_top(text[1:-1])]
        if items and depth < 2 and all(argument_kind(i, site, ctx, depth + 1) == "int" for i in items):
            return "int[]"
        return None
    constant = _CONSTANT.fullmatch(text)
    if constant:
        scope, member, short = constant.groups()
        if scope:
            return {"ScalarType": "ScalarType", "MemoryFormat": "MemoryFormat", "Layout": "Layout", "DeviceType": "Device"}[scope]
        return "ScalarType" if short in _SCALAR_TYPE_NAMES else "Device" if short in _DEVICE_TYPE_NAMES else "Layout" if short in _LAYOUT_NAMES else None
    if text in _FLOAT_MACROS:
        return "float"
    if not balanced(text) or depth > 4:
        return None
    if _OPTIONS.fullmatch(text) and balanced(text):
        return "TensorOptions"
    braced = _BRACED_CAST.fullmatch(text)
    if braced and balanced(braced.group(2)):  # `IntArrayRef{*dim}`
        return _type_kind(_type_key(braced.group(1)))
    if ctx.index is None:
        return None
    expression = _expression_kind(text, site, ctx, depth)
    if expression is not _NOT_AN_EXPRESSION:
        return expression
    call = _last_call(text)
    if call is not None:
        return _call_kind(*call, text, site, ctx)
    if text.startswith("*") and re.fullmatch(r"\*\s*[A-Za-z_]\w*", text):  # `*opt_dtype`: what an optional holds
        held = argument_kind(text[1:].strip(), site, ctx, depth + 1)
        return held[:-1] if held and held.endswith("?") else None
    if re.fullmatch(r"[A-Za-z_]\w*", text):
        declared = _auto_declared(text, site, ctx)
        if declared is not None:
            return argument_kind(declared[0], declared[1], ctx, depth + 1)
    if not re.fullmatch(r"[\w:<>,\s()*&.\[\]-]+", text):
        return None
    return _type_kind(argument_type(text, site, ctx))


_FLOAT_MACROS = frozenset(("NAN", "INFINITY", "M_PI", "M_E", "M_SQRT2", "M_SQRT1_2", "M_2_SQRTPI", "M_LN2"))
_BRACED_CAST = re.compile(r"((?:\w+::)*\w+(?:\s*<[\w:,\s<>]*>)?)\s*\{(.*)\}", re.S)
_NOT_AN_EXPRESSION = object()
# The operators of an expression at its top level, longest first; `->` and `::` are none.
# A `<` or `>` is a comparison when spaced (`S > tol`), a template's bracket when not (`static_cast<int64_t>(x)`).
_BINARY = re.compile(r"&&|\|\||==|!=|(?<=\s)(?:<=|>=|<|>)(?=\s)|(?<![-+])[+\-](?![+\->=])|[*/%](?!=)")


def _expression_kind(text: str, site, ctx: GraphContext, depth: int):
    """The kind of an expression of operators at its top level (`rtol * max_val`,
    `S > tol`, `c ? kDouble : kFloat`): a Tensor when an operand is one, a
    number of numbers, a bool of a comparison of numbers; _NOT_AN_EXPRESSION
    when the text has no operator at its top level."""
    chars, depth_now = [], 0
    for ch in text:  # the text with what lies inside brackets blanked out
        closing = ch in ")]}"
        depth_now -= closing
        chars.append(ch if depth_now == 0 and ch not in "([{" and not closing else " ")
        depth_now += ch in "([{"
    flat = "".join(chars).replace("::", "  ")
    question = flat.find("?")
    if question > 0:
        colon = flat.find(":", question)
        if colon == -1:
            return None
        # the branches have one type: the one known, where the other is not
        kinds = {argument_kind(text[question + 1 : colon], site, ctx, depth + 1), argument_kind(text[colon + 1 :], site, ctx, depth + 1)} - {None}
        return kinds.pop() if len(kinds) == 1 else None
    operators = [m for m in _BINARY.finditer(flat) if m.start() > 0]
    if not operators:
        return _NOT_AN_EXPRESSION
    pieces, start = [], 0
    for m in operators:
        pieces.append(text[start : m.start()])
        start = m.end()
    pieces.append(text[start:])
    kinds = [argument_kind(p, site, ctx, depth + 1) for p in pieces if p.strip()]
    if "Tensor" in kinds:
        return "Tensor"
    names = {m.group() for m in operators}
    if names & {"&&", "||"}:
        return "bool"
    if kinds and all(k in ("int", "float", "bool", "number") for k in kinds):
        if names & {"==", "!=", "<", ">", "<=", ">="}:
            return "bool"
        return "number" if "number" in kinds else "float" if "float" in kinds else "int"
    return None


def _last_call(text: str) -> tuple[str, str, str, bool] | None:
    """(receiver, `.`/`->`/`::`/'', name, template arguments spelled) of the
    call that ends `text` (`self.isnan().__iand__(other.isnan())` ->
    `self.isnan()`, `.`, `__iand__`); None when `text` is no call."""
    if not text.endswith(")"):
        return None
    depth = 0
    for i in range(len(text) - 1, -1, -1):
        depth += (text[i] == ")") - (text[i] == "(")
        if depth == 0:
            break
    else:
        return None
    m = re.search(r"(\.|->|::)?\s*(\w+)\s*(<[^()]*>)?\s*$", text[:i])
    if m is None:
        return None
    return text[: m.start()].strip(), m.group(1) or "", m.group(2), m.group(3) is not None


def _call_kind(receiver: str, separator: str, name: str, templated: bool, text: str, site, ctx: GraphContext) -> str | None:
    """The kind of what a call returns: a tensor's method (`.sizes()`, an
    operator's method `.isnan()`), an operator's function (`at::zeros(...)`,
    `at::native::zeros_like`), a type's constructor (`Scalar(1)`), or the
    type a function of the tree is declared to return."""
    if separator in (".", "->"):
        if name in ("value", "value_or") and receiver:  # an optional's value
            held = argument_kind(receiver, site, ctx, 1)
            return held[:-1] if held and held.endswith("?") else None
        if name in _TENSOR_METHODS:
            return _TENSOR_METHODS[name]
        return None if templated else _operator_returns(name, ctx)
    if separator == "::" and receiver.lstrip(":") not in ("at", "at::native", "native", "torch"):
        constructed = _type_kind(_type_key(f"{receiver}::{name}"))
        return constructed if constructed is not None else _type_kind(argument_type(text, site, ctx))
    constructed = _type_kind(name) if not separator and not receiver else None
    if constructed is not None:
        return constructed
    if separator == "::" and not templated:
        return _operator_returns(name, ctx)
    return _type_kind(argument_type(text, site, ctx)) if not receiver else None


def _operator_returns(name: str, ctx: GraphContext) -> str | None:
    """The kind every overload of the operator `name` returns (`Tensor`, `Scalar`, `bool`); None when they differ or none is."""
    ops = [o for o in ctx.overloads(name) or ctx.overloads(name.rstrip("_")) if o.name.name == name and not o.is_out]
    kinds = set()
    for o in ops:
        returned = re.sub(r"\([^()]*\)", "", o.schema.rsplit("->", 1)[-1]).strip()
        kinds.add(_SCHEMA_KINDS.get(returned, "Tensor[]" if returned == "Tensor[]" else None))
    return kinds.pop() if len(kinds) == 1 else None


_AUTO = r"\bauto\s*&{0,2}\s*\b%s\s*=(?!=)"


def _auto_declared(name: str, site, ctx: GraphContext):
    """(the initialiser, a site at its line) of the nearest declaration of
    `name` above a call when it is `auto name = ...;`; None when the nearest
    one states its type, or none is found."""
    cache = shared_results(ctx, "_auto_declared")
    key = (name, site.location.path, site.location.line)
    if key not in cache:
        cache[key] = _find_auto(name, site, ctx)
    return cache[key]


def _find_auto(name: str, site, ctx: GraphContext):
    lines = tree_lines(ctx, site.location.path)
    pattern = re.compile(_AUTO % re.escape(name))
    for i in range(site.location.line - 1, max(-1, site.location.line - 200), -1):
        if name not in lines[i]:
            continue
        m = pattern.search(lines[i])
        if m is not None:
            text = "\n".join(lines[i : i + 8])
            start = text.index(m.group()) + len(m.group())
            depth, end = 0, None
            for j in range(start, len(text)):
                depth += (text[j] in "([{") - (text[j] in ")]}")
                if depth < 0 or (depth == 0 and text[j] == ";"):
                    end = j
                    break
            if end is None:
                return None
            at = dataclasses.replace(site.location, line=i + 1)
            return text[start:end].strip(), _Spelled(at, site.name, site.callee)
        text = "\n".join(lines[max(0, i - 1) : i + 1])
        if [t for t in _declared_in(text, name) if re.match(r"\w+", t).group() not in _NOT_TYPES]:
            return None  # stated with its type: argument_type reads it
    return None


def _split_top(text: str) -> list[str]:
    """The comma-separated items of `text` at its top level."""
    items, depth, current = [], 0, []
    for ch in text:
        depth += ch in "([{<" and ch != "<"
        depth -= ch in ")]}"
        if ch == "," and depth == 0:
            items.append("".join(current))
            current = []
        else:
            current.append(ch)
    items.append("".join(current))
    return items


def _ranks(signature: list[tuple[str, bool]], kinds: list[str | None]) -> list[int | None] | None:
    """The rank of each argument passed to a signature (None: unknown); None when the signature cannot take them."""
    if len(kinds) > len(signature) or any(not default for _, default in signature[len(kinds):]):
        return None
    ranks = []
    for kind, (parameter, _) in zip(kinds, signature):
        if kind is None:
            ranks.append(None)
            continue
        rank = _converts(kind, parameter)
        if rank is None:
            return None
        ranks.append(rank)
    return ranks


def _better(a: list[int | None], b: list[int | None]) -> bool:
    """Whether ranks `a` beat `b`: no known argument worse, one better."""
    pairs = [(x, y) for x, y in zip(a, b) if x is not None and y is not None]
    return all(x <= y for x, y in pairs) and any(x < y for x, y in pairs)


def by_cpp_overload(op: Op, site, ctx: GraphContext) -> Op:
    """Note [the C++ overload a call reaches]: the overload of `op`'s name (and
    kind: out=, in-place) that C++ resolves the call at `site` to, by the kinds
    of the arguments it passes: `at::empty(sizes, self.options())` is
    empty.memory_format, not empty.names. `op` stays when it takes the
    arguments and no other overload takes them better, or when none does."""
    arguments = call_arguments(site, ctx)
    if arguments is None:
        return op
    name = op.name.name
    candidates = {str(o.name): o for base in dict.fromkeys((name, name.rstrip("_"))) for o in ctx.overloads(base)
                  if o.name.name == name and o.is_out == op.is_out and o.is_inplace == op.is_inplace}
    if len(candidates) < 2:
        return op
    kinds = [argument_kind(a, site, ctx) for a in arguments]
    ranked = []
    for candidate in candidates.values():
        fits = [r for r in (_ranks(s, kinds) for s in _cpp_signatures(candidate, site)) if r is not None]
        if fits:
            best = min(fits, key=lambda r: sum(x or 0 for x in r))
            ranked.append((candidate, best))
    if not ranked:
        return op
    mine = next((r for c, r in ranked if str(c.name) == str(op.name)), None)
    if mine is not None:
        better = [c for c, r in ranked if _better(r, mine) and all(not _better(other, r) for _, other in ranked)]
        return better[0] if len(better) == 1 else op
    winners = [c for c, r in ranked if not any(_better(other, r) for _, other in ranked)]
    return winners[0]
