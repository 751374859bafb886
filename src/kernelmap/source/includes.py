"""A C++/CUDA file's `#include` directives, each with the `#if` conditions
around it, read from its bytes as the preprocessor reads directives (no
tree-sitter: a directive is a line, and the index build must stay fast).
What one include names is found later, against a build's include roots
(kernelmap.impact.graph): this module only reads.

Note [include conditions]
An include's condition is the conjunction, outermost first, of the branches
it sits in: `#if A` / `#elif B` / `#else` give `A`, `!(A) && (B)` and
`!(A) && !(B)`; `#ifdef X` is `defined(X)`. A header's own guard (`#ifndef
X_H` / `#define X_H` opening the file, its `#endif` closing it) is no
condition. Directives inside block comments and raw string literals are not
directives (the CUDA fuser's kernel templates hold `#include` lines in
`R"(...)"` strings); continued lines (`\\`) are joined. `#include MACRO`
(a computed include) is recorded with its macro as the name and no bracket
kind: kernelmap does not expand it and says so.
"""

from __future__ import annotations

import re
from typing import NamedTuple

# A read include: `angled` is 1 for <...>, 0 for "...", -1 for a computed include.
ANGLED, QUOTED, COMPUTED = 1, 0, -1


class Include(NamedTuple):
    line: int
    name: str  # as written between the brackets: "ATen/native/cpu/Loops.h"
    angled: int  # ANGLED | QUOTED | COMPUTED
    condition: str | None  # Note [include conditions]; None when unconditional


class Define(NamedTuple):
    """`#define NAME value` or `#define NAME() value` (a macro that takes no
    arguments), or `#undef NAME` (value None)."""

    line: int
    name: str
    value: str | None  # the replacement text, spaces squeezed, cut at _VALUE_MAX; "" for an empty one
    condition: str | None


_VALUE_MAX = 80


# Block comments, raw strings and string/char literals, which may hide a `#`
# at the start of a line; `//` comments, which may hold `/*` or a quote.
_SKIP = re.compile(
    rb"//[^\n]*|/\*.*?(?:\*/|\Z)|(?:\bu8|\b[uUL])?R\"([^()\\\s\"]{0,16})\(.*?(?:\)\1\"|\Z)|\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])*'",
    re.S,
)
# Where a directive may be hidden: a block comment or a raw string over several
# lines (found fast, by their literal openings; a `/*` inside a `//` comment or a
# string opens a false one, which only costs a precise reading of that file).
_MAYBE_HIDDEN = re.compile(rb"/\*.*?(?:\*/|\Z)|R\"([^()\\\s\"]{0,16})\(.*?(?:\)\1\"|\Z)", re.S)
# A directive: found by its `#` (a literal the regex engine searches for fast),
# then checked to open its line.
_DIRECTIVE = re.compile(rb"#[ \t]*(if|ifdef|ifndef|elif|else|endif|include|include_next|import|define|undef)\b((?:\\\r?\n|[^\n])*)")
_DEFINE = re.compile(r"([A-Za-z_]\w*)(?:\(\s*\))?(?:\s+(.*))?$")  # no macro with parameters
_INCLUDE = re.compile(r"\s*(?:<([^>\n]+)>|\"([^\"\n]+)\"|([A-Za-z_]\w*(?:\([^)]*\))?))")
_LINE_COMMENT = re.compile(r"//.*$|/\*.*?\*/")
_SPACE = re.compile(r"\s+")
_GUARD_IF = re.compile(r"!\s*defined\s*\(?\s*(\w+)\s*\)?$")


def _hidden(data: bytes, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Byte spans of block comments and (raw) string literals over several
    lines, read precisely (`spans`: the fast candidates, which hold a directive)."""
    out = []
    for m in _SKIP.finditer(data):
        start = m.start()
        if data[start : start + 2] == b"//":
            continue
        if data.find(b"\n", start, m.end()) >= 0:
            out.append((start, m.end()))
    return out


def _directive_lines(data: bytes) -> list[re.Match]:
    """The directives of `data` that open their line and lie in no block comment or raw string."""
    found = []
    for m in _DIRECTIVE.finditer(data):
        start = m.start()
        line_start = data.rfind(b"\n", 0, start) + 1
        if line_start == start or not data[line_start:start].strip(b" \t"):
            found.append(m)
    if not found or (b"/*" not in data and b'R"' not in data):
        return found
    spans = [(m.start(), m.end()) for m in _MAYBE_HIDDEN.finditer(data) if data.find(b"\n", m.start(), m.end()) >= 0]
    if not spans:
        return found
    import bisect

    def inside(spans: list[tuple[int, int]], at: int) -> bool:
        i = bisect.bisect_right(spans, (at, len(data) + 1)) - 1
        return i >= 0 and spans[i][1] > at

    if not any(inside(spans, m.start()) for m in found):
        return found
    hidden = _hidden(data, spans)
    return [m for m in found if not inside(hidden, m.start())]


def _clean(text: bytes) -> str:
    """A directive's argument text: continuations joined, comments dropped, spaces squeezed."""
    s = text.decode("utf-8", "replace").replace("\\\r\n", " ").replace("\\\n", " ")
    return _SPACE.sub(" ", _LINE_COMMENT.sub(" ", s)).strip()


def _atomic(cond: str) -> bool:
    """Whether `cond` is one operand as it stands: a name, `defined(X)`, `X()`, a group, or one negated."""
    c = cond.strip()
    if c.startswith("!"):
        return _atomic(c[1:])
    return bool(re.fullmatch(r"\w+|defined\s*\(\s*\w+\s*\)|defined\s+\w+|\w+\s*\(\s*\)", c)) or _enclosed(c)


def _group(cond: str) -> str:
    """`cond` as one operand of `&&` or `!`."""
    return cond if _atomic(cond) else f"({cond})"


def _not(cond: str) -> str:
    if cond.startswith("!") and _atomic(cond):
        rest = cond[1:].strip()
        return rest[1:-1].strip() if _enclosed(rest) else rest
    return f"!{_group(cond)}"


def _enclosed(cond: str) -> bool:
    """Whether `cond` is one parenthesized group: `(a || b)`, not `(a) || (b)`."""
    if not cond.startswith("(") or not cond.endswith(")"):
        return False
    depth = 0
    for i, ch in enumerate(cond):
        depth += ch == "("
        depth -= ch == ")"
        if depth == 0 and i < len(cond) - 1:
            return False
    return True


class _Frame:
    """One open #if: its branches' conditions so far and the live one."""

    __slots__ = ("taken", "live", "guard")

    def __init__(self, cond: str, guard: bool = False):
        self.taken = [cond]
        self.live: str | None = cond
        self.guard = guard  # the file's include guard: no condition


def read(data: bytes) -> tuple[tuple[Include, ...], tuple[Define, ...]]:
    """The `#include` directives of one file's bytes, in order, each with its
    condition (Note [include conditions]), and its `#define`s of macros that
    take no arguments (Note [macros an include condition reads])."""
    if b"#" not in data:
        return (), ()
    found = _directive_lines(data)
    guard_end = _guard(found)
    includes: list[Include] = []
    defines: list[Define] = []
    stack: list[_Frame] = []
    line = 1
    last = 0

    def condition() -> str | None:
        conds = [f.live for f in stack if not f.guard]
        if not conds:
            return None
        return " && ".join(_group(c) for c in conds) if len(conds) > 1 else conds[0]

    for index, m in enumerate(found):
        kind = m.group(1)
        arg = m.group(2)
        if kind in (b"include", b"include_next", b"import"):
            line += data.count(b"\n", last, m.start())
            last = m.start()
            inc = _INCLUDE.match(_clean(arg))
            if inc is None:
                continue
            name = inc.group(1) or inc.group(2) or inc.group(3)
            angled = ANGLED if inc.group(1) else QUOTED if inc.group(2) else COMPUTED
            includes.append(Include(line, name.strip(), angled, condition()))
        elif kind in (b"define", b"undef"):
            if index == 1 and guard_end is not None:
                continue  # the include guard's own macro
            d = _DEFINE.match(_clean(arg))
            if d is None:
                continue
            line += data.count(b"\n", last, m.start())
            last = m.start()
            value = None if kind == b"undef" else (d.group(2) or "").strip()[:_VALUE_MAX]
            defines.append(Define(line, d.group(1), value, condition()))
        elif kind == b"if":
            stack.append(_Frame(_clean(arg) or "0", guard=index == 0 and guard_end is not None))
        elif kind == b"ifdef":
            stack.append(_Frame(f"defined({_clean(arg).split(' ')[0]})"))
        elif kind == b"ifndef":
            stack.append(_Frame(f"!defined({_clean(arg).split(' ')[0]})", guard=index == 0 and guard_end is not None))
        elif not stack:
            continue  # an #elif, #else or #endif with no #if: the file is broken there; read on
        elif kind == b"elif":
            frame = stack[-1]
            cond = _clean(arg) or "0"
            frame.live = " && ".join([*(_group(_not(c)) for c in frame.taken), _group(cond)])
            frame.taken.append(cond)
        elif kind == b"else":
            frame = stack[-1]
            negated = [_not(c) for c in frame.taken]
            frame.live = negated[0] if len(negated) == 1 else " && ".join(map(_group, negated))
        elif kind == b"endif":
            stack.pop()
    return tuple(includes), tuple(defines)


def _guard(found: list[re.Match]) -> int | None:
    """The index of the #endif that closes the file's include guard, when its
    first directive opens one: `#ifndef X` (or `#if !defined(X)`) then
    `#define X`, closed by the last directive."""
    if len(found) < 3:
        return None
    first, second = found[0], found[1]
    if second.group(1) != b"define":
        return None
    if first.group(1) == b"ifndef":
        name = _clean(first.group(2)).split(" ")[0]
    elif first.group(1) == b"if":
        m = _GUARD_IF.match(_clean(first.group(2)))
        if m is None:
            return None
        name = m.group(1)
    else:
        return None
    if _clean(second.group(2)).split(" ")[0] != name:
        return None
    # the guard's #endif must be the file's last directive, matching the first #if
    depth = 0
    for i, m in enumerate(found):
        k = m.group(1)
        if k in (b"if", b"ifdef", b"ifndef"):
            depth += 1
        elif k == b"endif":
            depth -= 1
            if depth == 0:
                return i if i == len(found) - 1 or all(f.group(1) in (b"define", b"undef") for f in found[i + 1 :]) else None
    return None
