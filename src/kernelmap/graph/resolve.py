"""A direct C++ call -> the definitions it may reach, best first: looked up
from the caller's own class and namespaces outwards, and through the type its
receiver is declared with (`iter.for_each(...)` where `auto iter =
TensorIterator...`). Used by graph.sites to follow calls and by graph.arms to
read the selector a `switch` is on."""

from __future__ import annotations

import functools
import re

from kernelmap.graph.code import declaration_head, tree_lines
from kernelmap.graph.context import GraphContext, shared_results
from kernelmap.graph.rules import KERNEL_DIRS
from kernelmap.model import EdgeKind


def _resolve_direct(site, caller, ctx: GraphContext) -> list:
    """Definitions a direct call may reach, best first: the caller's own
    namespace and its parents, then the call's file, then the rest. Found
    once per call and caller (a warm process asks of the same helpers again)."""
    cache = shared_results(ctx, "_resolve_direct")
    key = (site.callee, site.name, site.location, caller)
    found = cache.get(key)
    if found is None:
        found = cache[key] = tuple(_resolved(site, caller, ctx))
    return list(found)


def _resolved(site, caller, ctx: GraphContext) -> list:
    callee = site.callee.lstrip(":")
    if "::" not in callee and not callee.startswith(".") and _is_local(callee, site, caller, ctx):
        return []  # `static GemmTunableOp<...> gemm{}; gemm(&params);` calls the object, not at::cuda::blas::gemm
    if callee.startswith("."):
        receiver = receiver_type(site, caller, ctx)
        if receiver is None:
            return []
        callee = f"{receiver}::{callee[1:]}"
    if callee.startswith("std::") or len(site.name) < 3:
        return []
    found = _kernel_definitions(callee, ctx)
    if not found and "::" in callee:  # `HelperInterpLinear::init_indices_weights(...)`: a static method of a class it derives from
        owner, _, method = callee.rpartition("::")
        for base in class_bases(owner, ctx, site.location.path):
            found = _kernel_definitions(f"{base}::{method}", ctx)
            if found:
                callee = f"{base}::{method}"
                break
    if not found:
        return []
    bodies = [d for d in found if not _is_statement(d, ctx)]
    found = bodies or found
    caller_ns = caller.lookup.rsplit("::", 1)[0] if "::" in caller.lookup else ""
    # a qualified call names its definition; an unqualified one is looked up from the caller's namespace first
    # (build_opgraph's getConvDescriptor is its own file's, not the global one of quantized/cudnn/Conv.cpp)
    exact = [d for d in found if d.lookup == callee] if "::" in callee else []
    if exact:
        found = exact
    else:
        scoped = []
        ns = caller_ns
        while True:
            qualified = f"{ns}::{callee}" if ns else callee
            scoped = [d for d in found if d.lookup == qualified]
            if scoped or not ns:
                break
            ns = ns.rsplit("::", 1)[0] if "::" in ns else ""
        if scoped:
            found = scoped
        elif caller_ns.split("::", 1)[0] == "at" and _operator_function(callee, ctx):
            return []  # Note [an operator's function hides another namespace's]
    same_file = [d for d in found if d.location.path == caller.location.path]
    if same_file and len(same_file) < len(found):
        # a static helper in the caller's file shadows others of the same name
        if all(d.lookup == same_file[0].lookup for d in same_file):
            return same_file
    return found


# Note [an operator's function hides another namespace's]
# An unqualified call is looked up from the caller's scope outwards: from
# at::native, at::native then at, where ATen's generated functions declare
# every operator's function (`at::empty`). upsample's init_indices_weights
# calls `empty(new_shape, at::device(kCPU)...)`: at::empty.memory_format
# through the dispatcher, which the binary ran, not at::native::metal::empty,
# which no enclosing namespace holds. So in namespace at, an unqualified call
# whose definitions all lie in namespaces around none of the caller's, of the
# name of an operator with a function variant, is no direct call: it is the
# operator's (Note [unqualified operator calls] in graph.sites decides).
def _operator_function(name: str, ctx: GraphContext) -> bool:
    """Whether `name` is the function of an operator (`empty`, `zeros_out`)."""
    from kernelmap.source.facts import FUNCTION_SUFFIXES

    spelled_as = (name, *(name.removesuffix(s) for s in FUNCTION_SUFFIXES if name.endswith(s)))
    return any(b and any("function" in op.variants for op in ctx.overloads(b)) for b in spelled_as)


def _kernel_definitions(callee: str, ctx: GraphContext) -> list:
    """The definitions of `callee` in kernel code: its folders, ATen's functions
    of namespace at::native elsewhere (ScalarOps.h's wrapped_scalar_tensor),
    and ATen's own helpers that call operators (Note [ATen's helpers that call operators])."""
    return [d for d in ctx.index.definitions(callee)
            if d.location.path.startswith(KERNEL_DIRS) or (d.lookup.startswith("at::native::") and d.location.path.startswith("aten/src/ATen/"))
            or _calls_operators(d, ctx)]


# Note [ATen's helpers that call operators]
# The headers at the top of ATen (ExpandUtils.h, TensorSubclassLikeUtils.h)
# define helpers of namespace at that kernels call: cov's
# `at::is_scalar_tensor_true(w.min().ge(0))` runs `at::equal(t,
# t.new_ones({}, t.options()))`, addr's `expand_size(self, ...)` runs
# `to_expand.expand(sizes)`; the binary inlines the helper and shows the
# operators' entries right below the kernel. Such a helper, written in a
# header directly under aten/src/ATen/ and calling an operator through the
# dispatcher (itself, or through another helper of its header it calls:
# sum_to's _sum_to), is followed like kernel code; ATen's other helpers (dimension
# wrapping, size inference) call no operator and stay unfollowed.
def _calls_operators(definition, ctx: GraphContext) -> bool:
    path = definition.location.path
    if not (path.startswith("aten/src/ATen/") and path.endswith(".h") and path.count("/") == 3 and definition.lookup.startswith("at::")
            and definition.lookup.count("::") == 1):
        return False
    cache = shared_results(ctx, "_calls_operators")
    key = (definition.name, str(definition.location))
    if key not in cache:
        cache[key] = False  # a helper that calls itself is read once
        sites = ctx.index.calls_from(definition)
        # an operator called by the helper, or by another of its header's it forwards to (sum_to's _sum_to)
        cache[key] = any(s.kind is EdgeKind.DISPATCHER and s.op for s in sites) or any(
            _calls_operators(d, ctx) for s in sites if s.kind is EdgeKind.DIRECT and "::" not in s.callee
            for d in ctx.index.definitions(s.callee) if d.location.path == path and d.name != definition.name)
    return cache[key]


def _is_statement(definition, ctx: GraphContext) -> bool:
    """A "definition" that is one line ending in `;`: a call the parser read as
    a declaration (`gpu_reduce_kernel<scalar_t, out_t, 2>(iter, ops, typename
    ops_t::acc_t{});` in ReduceMomentKernel.cu), never the function's body."""
    location = definition.location
    if location.end_line not in (None, location.line):
        return False
    lines = tree_lines(ctx, location.path)
    text = lines[location.line - 1].strip() if location.line <= len(lines) else ""
    return text.endswith(");") and not text.startswith(("#", "//"))


def _is_local(name: str, site, caller, ctx: GraphContext) -> bool:
    """Whether `name` is declared as a variable in the caller before the call (`T gemm{}`, `auto gemm =`)."""
    lines = tree_lines(ctx, site.location.path)
    text = "\n".join(lines[caller.location.line : site.location.line - 1])
    # `[\w>&*]\s+NAME\s*(?:\{|=[^=]|;)` read at each place the name is written,
    # with patterns that do not name it: compiling one pattern per name is dear.
    if not name or name[0].isspace():
        return bool(re.search(rf"[\w>&*]\s+{re.escape(name)}\s*(?:\{{|=[^=]|;)", text))
    q = text.find(name)
    while q != -1:
        j = q
        while j > 0 and text[j - 1].isspace():  # str.isspace is what \s matches
            j -= 1
        if j < q and j > 0 and _DECLARATOR_END.match(text, j - 1) and _LOCAL_TAIL.match(text, q + len(name)):
            return True
        q = text.find(name, q + 1)
    return False


_DECLARATOR_END = re.compile(r"[\w>&*]")
_LOCAL_TAIL = re.compile(r"\s*(?:\{|=[^=]|;)")
# Words a declaration pattern may take for a type that are none (`return x;`, `else y =`).
_NOT_TYPES = frozenset(("auto", "const", "return", "else", "case", "if", "while", "for", "new", "delete", "typename", "struct", "class",
                        "goto", "throw", "sizeof", "using", "co_return"))
_RECEIVER = re.compile(r"\b([A-Za-z_]\w*)\s*(?:\.|->)\s*(?:template\s+)?")  # `sorter.template sort<A>(`
_CALL_TAIL = re.compile(r"\s*(?:<[^()]*>)?\s*\(")
_PIECE_ENDS = ";(){}"


def _statement_pieces(text: str, variable: str) -> list[tuple[int, int]]:
    """(begin, end) of the stretches of `text` between two of `;(){}` (the
    closing one included) that hold `variable`: a declaration's pattern holds
    none of them but as its last character, so its matches in `text` are its
    matches in these stretches, and no other stretch has one."""
    pieces = []
    q = text.find(variable)
    while q != -1:
        begin = max(text.rfind(c, 0, q) for c in _PIECE_ENDS) + 1
        ends = [e for e in (text.find(c, q) for c in _PIECE_ENDS) if e != -1]
        end = min(ends) + 1 if ends else len(text)
        pieces.append((begin, end))
        q = text.find(variable, end)
    return pieces


def receiver_type(site, caller, ctx: GraphContext) -> str | None:
    """The class of the object a member call is made on, from its declaration
    in the calling definition (`const ConvParams<T>& params` in the parameters,
    `ConvParams<T> params;` in the body): `params.use_cudnn(...)` calls
    `ConvParams::use_cudnn`. None when the receiver's type is not written out."""
    found = receiver_declarations(site, caller, ctx)
    if not found:
        return None
    name = found[-1]
    return name if name[:1].isupper() or "::" in name else None


def receiver_declarations(site, caller, ctx: GraphContext, through_call: bool = False) -> list[str]:
    """Every type the receiver of a member call is declared with in the
    calling definition, up to the call, in order (an inner scope or a lambda
    may declare the name again); the class `this` is in for `this->`.
    `through_call`: of a receiver that is an expression, another call's
    result (`x_vec.neg().exp()`) or one in parentheses (`(x -
    Vec(max_input)).exp()`), the first variable in it declared in the caller."""
    cache = shared_results(ctx, "_receiver_declarations")
    key = (site.callee, site.location, caller, through_call)
    found = cache.get(key)
    if found is None:
        found = cache[key] = tuple(_receiver_declarations(site, caller, ctx, through_call))
    return list(found)


def _receiver_declarations(site, caller, ctx: GraphContext, through_call: bool) -> list[str]:
    lines = tree_lines(ctx, site.location.path)
    if site.location.line > len(lines):
        return []
    line, method = lines[site.location.line - 1], site.callee.lstrip(".")
    if method not in line:
        return []
    # `\b(\w+)\s*(?:\.|->)\s*METHOD\s*(?:<[^()]*>)?\s*\(`, leftmost, read without
    # compiling a pattern per method: the receiver and its `.`/`->` have one end
    # each, so the method is looked for right there, then what follows it
    variables: list[str] = []
    if method[:1].isspace():
        m = re.search(rf"\b([A-Za-z_]\w*)\s*(?:\.|->)\s*{re.escape(method)}\s*(?:<[^()]*>)?\s*\(", line)
        variables = [m.group(1)] if m else []
    elif not through_call:
        variables = [m.group(1) for m in _RECEIVER.finditer(line) if line.startswith(method, m.end()) and _CALL_TAIL.match(line, m.end() + len(method))][:1]
    else:
        variables = _expression_variables(line, method)
    for variable in variables:
        if variable == "this":
            return [caller.lookup.rsplit("::", 2)[-2]] if caller.lookup.count("::") >= 1 else []
        found = _declarations(variable, site, caller, lines)
        if found:
            return found
    return []


def _expression_variables(line: str, method: str) -> list[str]:
    """The variables a receiver that is an expression starts from, for the
    first `.METHOD(` of `line` whose receiver is one: of calls on calls
    (`x_vec.exp().log1p().tanh(`), the variable the first is made on; of an
    expression in parentheses (`(a - b).abs().neg().exp(`), the names in it
    that are no call, type or namespace, outside the arguments of its calls
    (`max_vec` of `(Vec::loadu(data + d) - max_vec).exp(`)."""
    for m in re.finditer(rf"(?:\.|->)\s*{re.escape(method)}\s*\(", line):
        j = _blanks_back(line, m.start() - 1)
        if j < 0 or line[j] != ")":
            continue  # a plain variable's member call: not an expression
        while j >= 0 and line[j] == ")":
            opened = _opening(line, j)
            if opened is None:
                break
            name_end = _blanks_back(line, opened - 1) + 1
            k = _word_back(line, name_end - 1)
            if k + 1 == name_end or line[k + 1 : name_end] in _KEYWORDS_BEFORE_EXPRESSIONS:  # `(...)` is the expression itself
                flat = line[opened + 1 : j]
                while flat != (flat := re.sub(r"\([^()]*\)", "()", flat)):
                    pass  # what nested parentheses hold is arguments, not the expression's own operands
                return [w.group(1) for w in re.finditer(r"\b([A-Za-z_]\w*)\b(?!\s*(?:\(|::|<))", flat) if not w.group(1)[0].isupper()]
            k = _blanks_back(line, k)
            if (k >= 0 and line[k] == ".") or (k >= 1 and line[k - 1 : k + 1] == "->"):  # `.name(...)`: a call on what stands before
                j = _blanks_back(line, k - (2 if line[k] == ">" else 1))
                if j >= 0 and (line[j].isalnum() or line[j] == "_"):
                    return [line[_word_back(line, j) + 1 : j + 1]]
                continue
            break  # a free function's call (`f(x).exp(`): no variable
    return []


_KEYWORDS_BEFORE_EXPRESSIONS = frozenset(("return", "co_return", "case", "throw", "else", "do", "and", "or", "not"))


def _blanks_back(line: str, i: int) -> int:
    """The last index at or before `i` that is no blank (-1 if none)."""
    while i >= 0 and line[i].isspace():
        i -= 1
    return i


def _word_back(line: str, i: int) -> int:
    """The index just before the word that ends at `i` (`i` itself when no word ends there)."""
    while i >= 0 and (line[i].isalnum() or line[i] == "_"):
        i -= 1
    return i


def _opening(line: str, close: int) -> int | None:
    """Where the `(` that the `)` at `close` closes is, if on the line."""
    depth = 0
    for i in range(close, -1, -1):
        depth += (line[i] == ")") - (line[i] == "(")
        if depth == 0:
            return i
    return None


def _declarations(variable: str, site, caller, lines) -> list[str]:
    """The types `variable` is declared with in `caller`, above the call `site`, in order."""
    start = caller.location.line - 1
    if start >= site.location.line:  # the call is written in the body of the macro whose use defines the caller
        start = macro_start(lines, site.location.line)
    end = max(site.location.line, caller.location.end_line or 0)
    # every declaration of the variable in the caller, read once: a graph asks of the same receivers (`iter`, `self`) many times
    found = _declared_at(lines, start, end, variable)
    return [t for line, t in found if line < site.location.line]


_DECLARED_AT: dict[tuple, tuple[tuple[str, ...], tuple[tuple[int, str], ...]]] = {}


def _declared_at(lines: tuple[str, ...], start: int, end: int, variable: str) -> tuple[tuple[int, str], ...]:
    """(index of the line, type) of each declaration of `variable` in lines
    `start` to `end` (indexes) of a file, in order: only the lines that name
    it are read (with the line before: a type may end a line)."""
    key = (id(lines), start, end, variable)
    kept = _DECLARED_AT.get(key)
    if kept is not None and kept[0] is lines:
        return kept[1]
    found = []
    for i in range(start, min(end, len(lines))):
        if variable not in lines[i] or not _words_at(lines[i], variable):
            continue
        text = f"{lines[i - 1] if i > start else ''}\n{lines[i]}"
        found.extend((i, t) for begin, stop in _statement_pieces(text, variable) for t in _declared_types_in(text, begin, stop, variable)
                     if t not in _NOT_TYPES and not t.startswith("std::"))
    if len(_DECLARED_AT) > 20000:
        _DECLARED_AT.clear()
    _DECLARED_AT[key] = (lines, tuple(found))
    return tuple(found)


def macro_start(lines: list[str], line: int) -> int:
    """The index of the first line of the directive that continues onto
    `line` (1-based): the `#define` of a macro whose body holds it (Note
    [definitions written by macros]); `line`'s own index when it continues none."""
    i = line - 1
    while i > 0 and lines[i - 1].rstrip().endswith("\\"):
        i -= 1
    return i


_WORD_CHAR = re.compile(r"\w")


def _words_at(text: str, word: str, begin: int = 0, end: int | None = None) -> list[int]:
    """Where `word` (a C++ identifier) stands in `text[begin:end]` as a whole
    word: what `\\bWORD\\b` finds, without compiling a pattern per word."""
    end = len(text) if end is None else end
    found, q = [], text.find(word, begin, end)
    while q != -1:
        after = q + len(word)
        if (q == 0 or not _WORD_CHAR.match(text, q - 1)) and (after == len(text) or not _WORD_CHAR.match(text, after)):
            found.append(q)
        q = text.find(word, q + 1, end)
    return found


# A marker for the one place a variable stands in a statement: no C++ source holds it.
_MARK = "\x01"
_TEMPLATE = r"<[^;(){}<>\n]*(?:<[^;(){}<>\n]*>[^;(){}<>\n]*)*>"
# `Type<...> const& variable`: the type a variable is declared with, the variable written as _MARK.
_DECLARATION = re.compile(rf"([A-Za-z_][\w:]*)\s*(?:{_TEMPLATE})?\s*(?:const\s*)?[&*]*\s*{_MARK}\s*[,)=;({{\[]")


def _declared_types_in(text: str, begin: int, stop: int, variable: str) -> list[str]:
    """The types `variable` is declared with in `text[begin:stop]`: the
    matches of `_declaration_pattern(variable)` there. Where the variable
    stands as a word once, that place is written as _MARK and one pattern
    serves every variable: a match needs the variable's place, and the
    pattern's other parts match the marker only where the variable would
    leave none for the match to end on, so it finds the same matches, without
    a pattern compiled per variable (hundreds a graph, and dear)."""
    places = _words_at(text, variable, begin, stop)
    if not places:
        return []  # `\\bvariable\\s*[,)=;({[]` has no place to match
    if len(places) > 1 or _MARK in text or not _WORD_CHAR.match(variable[0]) or not _WORD_CHAR.match(variable[-1]):
        return [d.group(1) for d in _declaration_pattern(variable).finditer(text, begin, stop)]
    q = places[0]
    marked = f"{text[:q]}{_MARK}{text[q + len(variable):]}"
    return [d.group(1) for d in _DECLARATION.finditer(marked, begin, stop - len(variable) + 1)]


@functools.lru_cache(maxsize=2048)
def _declaration_pattern(variable: str) -> re.Pattern[str]:
    """`Type<...> const& variable`: the type a variable is declared with (compiled
    once per variable: only where `_declared_types_in` cannot use `_DECLARATION`)."""
    return re.compile(rf"([A-Za-z_][\w:]*)\s*(?:{_TEMPLATE})?\s*(?:const\s*)?[&*]*\s*\b{re.escape(variable)}\s*[,)=;({{\[]")


# Note [a member call's result as a receiver]
# `iter.output_base().fill_(ident)` (binary_kernel_reduce_vec, cascade_sum)
# calls fill_ on what TensorIteratorBase::output_base returns, a `const
# TensorBase&`: a Tensor's method, the operator's call through the
# dispatcher, though the variable the chain starts from is a TensorIterator.
# A receiver that is a chain of member calls on a declared variable
# (`var.m1(...).m2(...)`) has the type the last method returns, read from the
# method's definition in the variable's class or a class it derives from
# (`struct TensorIterator final : public TensorIteratorBase`, read from the
# file that defines the class's members), where the head writes the type out;
# unknown otherwise (a template, `auto`), and the variable's type decides as before.
def chained_receiver_type(site, caller, ctx: GraphContext) -> str | None:
    """The type (as written in the head, `const TensorBase&`) of a member
    call's receiver that is a chain of member calls on a declared variable
    (Note [a member call's result as a receiver]); None when it is no such
    chain or a type cannot be read."""
    cache = shared_results(ctx, "_chained_receiver_type")
    key = (site.callee, site.location, caller)
    if key not in cache:
        cache[key] = _chained_receiver_type(site, caller, ctx)
    return cache[key]


def _chained_receiver_type(site, caller, ctx: GraphContext) -> str | None:
    lines = tree_lines(ctx, site.location.path)
    if site.location.line > len(lines):
        return None
    chain = _member_chain(lines[site.location.line - 1], site.callee.lstrip("."))
    if chain is None:
        return None
    variable, methods = chain
    found = _declarations(variable, site, caller, lines)
    if not found:
        return None
    declared = found[-1]
    for method in methods:
        declared = _method_returns(re.sub(r"<.*", "", declared).strip(), method, ctx)
        if declared is None:
            return None
    return declared


def _member_chain(line: str, method: str) -> tuple[str, list[str]] | None:
    """(variable, [m1, m2, ...]) of the first `.METHOD(` on `line` made on a
    chain of member calls `variable.m1(...).m2(...)`; None when there is none."""
    for m in re.finditer(rf"(?:\.|->)\s*{re.escape(method)}\s*\(", line):
        j, methods = m.start() - 1, []
        while True:
            j = _blanks_back(line, j)
            if j < 0 or line[j] != ")":
                break
            opened = _opening(line, j)
            if opened is None:
                break
            end = _blanks_back(line, opened - 1) + 1
            k = _word_back(line, end - 1)
            name = line[k + 1 : end]
            k = _blanks_back(line, k)
            if not name or name[0].isdigit():
                break
            if k >= 0 and line[k] == ".":
                j = k - 1
            elif k >= 1 and line[k - 1 : k + 1] == "->":
                j = k - 2
            else:
                break
            methods.insert(0, name)
            j = _blanks_back(line, j)
            if j >= 0 and (line[j].isalnum() or line[j] == "_"):
                e, j = j + 1, _word_back(line, j)
                variable = line[j + 1 : e]
                before = line[:j + 1].rstrip()
                if variable[0].isdigit() or before.endswith((".", "->", "::")):
                    break
                return variable, methods
    return None


# `struct TORCH_API TensorIterator final : public TensorIteratorBase {`: the classes a class derives from
_BASES = r"\b(?:struct|class)\s+(?:[A-Z][A-Z0-9_]*\s+)*{name}\s*(?:final\s*)?:\s*([^{{;]*)\{{"


def _method_returns(cls: str, method: str, ctx: GraphContext) -> str | None:
    """The return type written in the head of `cls::method`, or of the method
    in a class `cls` derives from; None when it is not written out."""
    for name in (cls.rsplit("::", 1)[-1], *class_bases(cls, ctx)):
        found = [d for d in ctx.index.definitions(method) if d.lookup.rsplit("::", 2)[-2:-1] == [name]]
        heads = {re.sub(r"\s+", " ", _HEAD_SPECIFIERS.sub("", declaration_head(d, ctx))).strip() for d in found}
        if len(heads) == 1:
            head = heads.pop()
            return None if not head or re.search(r"\b(?:template|auto|decltype)\b|[#()]", head) else head
        if heads:
            return None
    return None


def class_bases(cls: str, ctx: GraphContext, near: str | None = None) -> list[str]:
    """The classes `cls` derives from, nearest first, by their last names
    (`struct TORCH_API TensorIterator final : public TensorIteratorBase`),
    read from the files that define the class's members, and `near` (the
    file of a call that names it)."""
    cache = shared_results(ctx, "_class_bases")
    key = (cls, near)
    if key not in cache:
        found: list[str] = []
        pending = [cls.rsplit("::", 1)[-1]]
        while pending:
            name = pending.pop(0)
            members = [d for d in ctx.index.definitions(name) if d.lookup.rsplit("::", 2)[-2:-1] == [name]]  # its constructors
            for path in sorted({d.location.path for d in members} | ({near} if near else set())):
                text = "\n".join(tree_lines(ctx, path))
                if name not in text:
                    continue
                for b in re.finditer(_BASES.format(name=re.escape(name)), text):
                    for part in b.group(1).split(","):
                        base = re.sub(r"<.*", "", part).split()[-1].rsplit("::", 1)[-1] if part.split() else ""
                        if base and base not in found and base != cls.rsplit("::", 1)[-1]:
                            found.append(base)
                            pending.append(base)
        cache[key] = tuple(found)
    return list(cache[key])


_HEAD_SPECIFIERS = re.compile(r"//[^\n]*|/\*.*?\*/|\b(?:static|inline|constexpr|virtual|explicit|C10_ALWAYS_INLINE|[A-Z][A-Z0-9_]*_API)\b", re.S)
