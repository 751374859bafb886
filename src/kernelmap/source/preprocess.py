"""A file's own preprocessor, read from its text: its directives, the
`#define`s it writes and where it uses them, and their expansion. The grammar
reads no directive's body, so definitions a file's macros write (Note
[definitions written by macros]) and calls written in a macro inside a
function (Note [calls in function-local macros]) are found here."""

from __future__ import annotations

import bisect
import functools
import re
from typing import NamedTuple

from kernelmap.source import objc as objc_source


# Macros the file defines itself: object-like ones whose every definition is
# empty or attributes only (`#define DEVICE_INLINE __device__
# C10_ALWAYS_INLINE`) are attributes too; function-like ones whose expansion
# holds no parenthesis (so neither a function nor a call: `_PS256_CONST(Name,
# Val)` declares a constant array) are blanked where they stand as statements
# at file scope.
_MAX_LOCAL_MACROS = 256  # real files have a few; thousands (generated, hostile) would cost seconds a file
_DEFINE = re.compile(rb"#[ \t]*define[ \t]+([A-Za-z_]\w*)(\([^()\n]*\))?((?:[^\n\\]|\\.)*)", re.S)


def _local_macros(original: bytes, masked: bytes) -> tuple[bytes, dict[bytes, _Macro]]:
    """`masked` with the uses of the file's own attribute-like and
    parenthesis-free macros blanked (see _DEFINE); and the macros that define
    functions (Note [definitions written by macros])."""
    attribute: dict[bytes, bool] = {}
    statement: dict[bytes, bool] = {}
    restore = []
    function_like = []
    for m in _DEFINE.finditer(original):
        if original[original.rfind(b"\n", 0, m.start()) + 1 : m.start()].strip():
            continue  # not a directive
        name = m.group(1)
        if m.group(2) is None:
            blank = not masked[m.start(3) : m.end(3)].strip()
            attribute[name] = attribute.get(name, True) and blank
            if blank and m.group(3).strip():
                # A definition left with blanks only would take the next line as its value.
                restore.append((m.start(3), m.end(3)))
        else:
            body = m.group(3)
            statement[name] = statement.get(name, True) and bool(body.strip()) and b"(" not in body
            function_like.append(m)
    defining = _defining_macros(function_like, original)
    if restore:
        out = bytearray(masked)
        for start, end in restore:
            out[start:end] = original[start:end]
        masked = bytes(out)
    if len(attribute) + len(statement) > _MAX_LOCAL_MACROS:
        return masked, defining
    names = [re.escape(n) for n, blank in attribute.items() if blank and n not in statement and n in masked]
    if names:
        masked = re.compile(rb"(?:" + b"|".join(names) + rb")\b").sub(functools.partial(_blank_outside_directive, Directives(masked)), masked)
    names = [re.escape(n) for n, blank in statement.items() if blank and n not in attribute and n in masked]
    if names:
        masked = re.compile(rb"(?:" + b"|".join(names) + rb")[ \t]*\([^;{}()]*\)[ \t]*;").sub(_blank_at_line_start, masked)
    return masked, defining


def _blank_at_line_start(m: re.Match) -> bytes:
    i = m.start()
    return _spaces(m) if i == 0 or m.string[i - 1 : i] == b"\n" else m.group(0)


def _blank_outside_directive(directives: Directives, m: re.Match) -> bytes:
    """`_blank`, except in a directive (continued lines included)."""
    return m.group(0) if directives.start_of(m.start()) is not None or not _starts_word(m) else _spaces(m)


def _starts_word(m: re.Match) -> bool:
    i = m.start()
    return i == 0 or not (m.string[i - 1 : i].isalnum() or m.string[i - 1 : i] == b"_")


_BLANKS = objc_source.BLANKS  # every byte a space but newlines


_LINE_CONTINUATION = re.compile(rb"(\\\r?\n)")


def _spaces(m: re.Match) -> bytes:
    """The match as spaces, its newlines and line continuations kept (a
    launch's `<<<\\` blanked in a `#define` must not end the directive there)."""
    text = m.group(0)
    if b"\\" not in text:
        return text.translate(_BLANKS)
    parts = _LINE_CONTINUATION.split(text)
    return b"".join(part if i % 2 else part.translate(_BLANKS) for i, part in enumerate(parts))


# Note [definitions written by macros]
# `CREATE_UNARY_TORCH_IMPL_FUNC(sin_out, sin_stub)` at file scope defines
# `structured_sin_out::impl`, which calls `sin_stub`: the file's own
# `#define CREATE_UNARY_TORCH_IMPL_FUNC(func_out, func_stub)` writes the
# definition. The grammar reads no directive's body, so these definitions and
# their calls were lost, and the kernel of every unary and binary pointwise op
# was unresolved. A use, at file scope, of a function-like macro that the file
# defines once with a braced body is expanded: parameters replaced by the
# arguments, `#x` made a string, `##` pasted; the expansion is extracted on its
# own, inside the namespaces of the use. Each fact keeps a line that holds its
# name: a name written in the body is at its line of the `#define`, a name an
# argument gives at the argument's line. A name made by pasting
# (`foreach_tensor_##OP##_...`) is written on no line: it is not kept, nor
# what its body calls.
_MAX_MACRO_USES = 1024  # real files use a macro at most a few hundred times


class _Macro(NamedTuple):
    params: tuple[bytes, ...]
    line: int  # of the `#define`
    lines: tuple[bytes, ...]  # the body's physical lines, continuations and comments blanked; the first follows the parameters


_MACRO_PARAM = re.compile(rb"[A-Za-z_]\w*")
_BODY_COMMENT = re.compile(rb"/\*.*?\*/|//.*")


def _defining_macros(directives: list[re.Match], original: bytes) -> dict[bytes, _Macro]:
    """Of the function-like macros `original` defines (`directives`, matches
    of _DEFINE), those it defines exactly once, with a braced body (Note
    [definitions written by macros])."""
    found: dict[bytes, _Macro | None] = {}
    line, counted = 1, 0  # the directives come in order: their lines are counted on
    for m in directives:
        name = m.group(1)
        if name in found:
            found[name] = None  # defined in several places (#if branches): which one is used is not known here
            continue
        found[name] = None
        params = tuple(p.strip() for p in m.group(2)[1:-1].split(b","))
        if not all(_MACRO_PARAM.fullmatch(p) for p in params):
            continue  # variadic, or no parameters
        lines = tuple(_BODY_COMMENT.sub(_spaces, line.rstrip(b"\r").removesuffix(b"\\")) for line in m.group(3).split(b"\n"))
        line += original.count(b"\n", counted, m.start())
        counted = m.start()
        found[name] = _Macro(params, line, lines)
    # Those with a braced body, and those that use one of them at the start of a body line.
    macros = {k: v for k, v in found.items() if v is not None}
    defining = {k for k, v in macros.items() if any(b"{" in line for line in v.lines)}
    for _ in range(_MAX_EXPANSION_DEPTH):
        more = {k for k, v in macros.items() if k not in defining
                and any((u := _NESTED_USE.match(line.lstrip())) is not None and u.group(1) in defining for line in v.lines)}
        if not more:
            break
        defining |= more
    return {k: macros[k] for k in defining}


def _macro_uses(data: bytes, macros: dict[bytes, _Macro]) -> list[tuple[int, bytes, list[tuple[bytes, int]], int]]:
    """(offset, macro, [(argument, its offset)], offset of the closing
    parenthesis) of each use of `macros` that starts a line outside a directive."""
    # Each name is found by a substring search: a regex of the file's own names
    # would be compiled anew for every file, which cost more than the search.
    # A name starts a line (blanks before it) and is a whole word, as `(`
    # follows it: at most one name starts at a place.
    starts = []
    for name in macros:
        i = data.find(name)
        while i >= 0:
            line = data.rfind(b"\n", 0, i) + 1
            if (line == i or not data[line:i].translate(None, b" \t")) and (opening := _OPENING.match(data, i + len(name))):
                starts.append((i, name, opening.end() - 1))
            i = data.find(name, i + 1)
    if not starts:
        return []
    starts.sort()
    uses = []
    directives = Directives(data)
    for at, name, open_at in starts:
        if directives.start_of(at) is not None:
            continue
        args, close = _macro_arguments(data, open_at)
        if close is None or len(args) != len(macros[name].params):
            continue
        uses.append((at, name, args, close))
        if len(uses) >= _MAX_MACRO_USES:
            break
    return uses


_OPENING = re.compile(rb"[ \t]*\(")


# A `#` and the rest of its line, continued lines included (a loop unrolled:
# one step per run of plain bytes, not per byte). The regex starts with a
# literal, which the engine finds by a fast search: most lines hold no `#`.
_HASH_TO_LINE_END = re.compile(rb"#[^\\\n]*(?:\\[\s\S][^\\\n]*)*")


class Directives:
    """Where a text's preprocessor directives lie (continued lines included),
    found in one pass when first asked: a question per match of a pass over
    the text (`_blank`) must not read back over the line each time (a 200 KB
    line of attributes, or thousands of continued lines, made it quadratic)."""

    def __init__(self, text: bytes):
        self.text = text
        self.starts: list[int] | None = None
        self.ends: list[int] = []

    def start_of(self, at: int) -> int | None:
        """Where the directive that holds offset `at` starts (its line's start), if one does."""
        if self.starts is None:
            self.starts, self.ends = _directive_spans(self.text)
        i = bisect.bisect_right(self.starts, at) - 1
        return self.starts[i] if i >= 0 and at < self.ends[i] else None


def _directive_spans(text: bytes) -> tuple[list[int], list[int]]:
    """Where each directive of `text` starts (its line's start) and ends: a
    `#` with only blanks before it on its line."""
    starts: list[int] = []
    ends: list[int] = []
    search = _HASH_TO_LINE_END.search
    m = search(text)
    while m is not None:
        at = m.start()
        line = text.rfind(b"\n", 0, at) + 1
        if line == at or not text[line:at].translate(None, b" \t"):
            starts.append(line)
            ends.append(m.end())
            m = search(text, m.end())
        else:  # a `#` in code, a string or a comment: a directive may start on the next line, not on this one
            after = text.find(b"\n", at)
            m = search(text, after + 1) if after >= 0 else None
    return starts, ends


def _macro_arguments(text: bytes, open_at: int, limit: int = 4096) -> tuple[list[tuple[bytes, int]], int | None]:
    """The arguments of the macro use whose `(` is at `open_at` (split at
    commas outside parentheses, as the preprocessor does), each stripped with
    its offset; and the offset of its `)` (None when not found within `limit`)."""
    args = []
    depth = 0
    start = open_at + 1
    for i in range(open_at, min(len(text), open_at + limit)):
        c = text[i]
        if c == 40:  # (
            depth += 1
        elif c == 41:  # )
            depth -= 1
            if depth == 0:
                args.append((start, i))
                return [(_strip_span(text, a, b)) for a, b in args], i
        elif c == 44 and depth == 1:  # ,
            args.append((start, i))
            start = i + 1
    return [], None


def _strip_span(text: bytes, start: int, end: int) -> tuple[bytes, int]:
    piece = text[start:end]
    lead = len(piece) - len(piece.lstrip())
    return piece.strip(), start + lead


_EXPANSION_TOKEN = re.compile(rb'"(?:\\.|[^"\\])*"|##|#[ \t]*([A-Za-z_]\w*)|[A-Za-z_]\w*')


def _expand_line(line: bytes, values: dict[bytes, bytes]) -> bytes:
    """One line of a macro's body with its parameters replaced (Note
    [definitions written by macros])."""
    if b"#" not in line and not any(p in line for p in values):
        return line  # no parameter, no `#`: as written

    def token(m: re.Match) -> bytes:
        word = m.group(0)
        if m.group(1) is not None:
            return b'"' + values[m.group(1)].replace(b"\\", b"\\\\").replace(b'"', b'\\"') + b'"' if m.group(1) in values else word
        return values.get(word, word)

    expanded = _EXPANSION_TOKEN.sub(token, line)
    return re.sub(rb"[ \t]*##[ \t]*", b"", expanded) if b"##" in expanded else expanded


_MAX_EXPANSION_DEPTH = 4  # macros that use the file's macros: UnaryOpsKernel.cpp's nest two deep
_MAX_EXPANDED_LINES = 10_000


def _expanded_lines(macros: dict[bytes, _Macro], name: bytes, args: list[tuple[bytes, int, bool]], use_line: int,
                    depth: int = 0) -> list[tuple[bytes, int, bytes, list[tuple[bytes, int, bool]]]] | None:
    """The expansion of a use of macro `name` with `args` ((value, line it is
    written at, whether that is the line of the use in the code)), line by
    line: (expanded text, line of the file its body line is at, that body line
    as written, the arguments in play). A use of another of the file's macros
    in a body line is expanded in its place (the first of the line; what comes
    before and after it stays on the line: `iter.for_each(LAMBDA(op), n);`).
    None when it nests or grows past the limits."""
    macro = macros[name]
    values = dict(zip(macro.params, (a for a, _, _ in args)))
    table = []
    for k, written in enumerate(macro.lines):
        origin = macro.line + k
        text = _expand_line(written, values)
        inner = next((u for u in _NESTED_USE.finditer(text) if u.group(1) in macros), None) if any(n in text for n in macros) else None
        if inner is not None:
            if depth >= _MAX_EXPANSION_DEPTH:
                return None
            found, close = _macro_arguments(text, inner.end() - 1)
            if close is not None and len(found) == len(macros[inner.group(1)].params):
                # An argument written in this body line is at its line; one an argument gave, at that one's.
                inner_args = [(a, origin, False) if _holds_word(written, a)
                              else next(((a, line, at_use) for v, line, at_use in args if v and v in a), (a, use_line, False))
                              for a, _ in found]
                nested = _expanded_lines(macros, inner.group(1), inner_args, use_line, depth + 1)
                if nested is None:
                    return None
                if text[: inner.start()].strip():
                    table.append((text[: inner.start()], origin, written, args))
                table += nested
                text = b" " * (close + 1) + text[close + 1 :]
        table.append((text, origin, written, args))
        if len(table) > _MAX_EXPANDED_LINES:
            return None
    return table


def macro_expansion(data: bytes, line: int) -> bytes | None:
    """What the use, starting at `line`, of a macro the file defines to write
    functions expands to (Note [definitions written by macros]): cpu/vml.h's
    `IMPLEMENT_VML_MKL(exp, Exp)` is `template <> inline void vexp(float * out,
    ...)` and its double twin. None when no such use starts there."""
    if b"define" not in data:
        return None
    _, macros = _local_macros(data, data)
    for at, name, args, close in _macro_uses(data, macros):
        use_line = data.count(b"\n", 0, at) + 1
        if use_line == line:
            table = _expanded_lines(macros, name, [(a.replace(b"\n", b" "), use_line, True) for a, _ in args], use_line)
            return None if table is None else b"\n".join(text for text, _, _, _ in table)
        if use_line > line:
            break
    return None


# Note [calls in function-local macros]
# `#define HANDLE_SORT_CASE(TYPE, A) sorter.template sort<A>(keyInfo, ...)`
# written inside sortCommon's body (cuda/Sort.cu), then used in it: the
# grammar reads no directive's body, so the call that does the sorting was
# lost, and CUDA sort's small-input route (sortKeyValueInplace) reached no
# kernel. The body of a `#define` that lies inside a function's body, and
# that the function uses after it, is parsed on its own, as the body of a
# function, and its calls are the enclosing function's, each at the line of
# the `#define` that holds its name (the macro's uses hold only the macro's
# name); a name made by pasting (`##`) is written on no line and is not
# kept. A `#define` at file scope whose body launches a kernel
# (DepthwiseConv3d.cu's DWCONV3D_FORWARD_DISPATCH_SPECIALIZATION) is read so
# for each function that uses it: conv_depthwise3d_cuda launches
# conv_depthwise3d_cuda_kernel, not the backward kernels of the macros
# defined after it, which a parse error had stretched it over. Its launches too are read from the
# parsed body, under the body's own conditions (`if (isContig) {\` in
# Shape.cu's HANDLE_CASE), not from the function's text.
_MAX_LOCAL_MACRO_BYTES = 16384
_MAX_LOCAL_MACROS_READ = 256  # a parse each: real files have a few (generated or hostile ones, thousands)

_NESTED_USE = re.compile(rb"([A-Za-z_]\w*)[ \t]*\(")  # a word starts each match: finditer never starts inside one


def _holds_word(text: bytes, word: bytes) -> bool:
    i = text.find(word)
    while i >= 0:
        before = text[i - 1 : i]
        after = text[i + len(word) : i + len(word) + 1]
        if not (before.isalnum() or before == b"_") and not (after.isalnum() or after == b"_"):
            return True
        i = text.find(word, i + 1)
    return False
