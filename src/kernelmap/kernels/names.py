"""A GPU kernel name as a profiler, Nsight or `cuobjdump` prints it -> a parsed
`KernelName`: the kernel's qualified name, its template arguments as a tree,
and the qualified names (functors, lambdas' enclosing functions) those
arguments mention.

Names arrive demangled (Kineto demangles) or mangled (`_Z...`, from Nsight's
raw view or a ROCm trace); mangled names are demangled with the C++ runtime's
`abi::__cxa_demangle` (the `cxxfilt` package), which is what `c++filt` uses.
Profilers cut long names, so a name may end inside its template arguments:
the parser closes what is open and marks the name `truncated`.

Parsing uses an explicit stack over the brackets `<>`, `()`, `{}` and `[]`,
never recursion, so a hostile name nested ten thousand levels deep costs
linear time and no Python stack.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_OPEN = {"<": ">", "(": ")", "{": "}", "[": "]"}
_CLOSE = {v: k for k, v in _OPEN.items()}
# A lambda's closure type as GCC/NVCC demangle it: `{lambda(float, float)#1}`.
LAMBDA = re.compile(r"\{lambda\((?P<params>[^{}]*)\)#(?P<n>\d+)\}")
# Operators whose names hold brackets the parser must not read as brackets.
_OPERATOR = re.compile(r"operator(\(\)|\[\]|<<=?|>>=?|<=>|<=|>=|->\*?|[<>](?!>))")
_LEADING_TYPE = re.compile(r"^(?:void|std::enable_if<.*?>::type|[A-Za-z_][\w:]*)\s+(?=[A-Za-z_(])")


def demangle(name: str) -> str:
    """`name` demangled if it is an Itanium-mangled symbol (`_Z...`), else as is.
    A mangled name the runtime cannot demangle is returned unchanged."""
    text = name.strip()
    if not text.startswith("_Z"):
        return text
    import cxxfilt

    try:
        return cxxfilt.demangle(text, external_only=False)
    except cxxfilt.InvalidName:
        return text


@dataclass(frozen=True)
class Arg:
    """One template argument: its text and the template arguments inside it."""

    text: str  # as written, e.g. "at::native::BinaryFunctor<float, float, float, at::native::MulFunctor<float> >"
    args: tuple[Arg, ...] = ()

    @property
    def head(self) -> str:
        """The text before its own template arguments: `at::native::BinaryFunctor`."""
        return _head(self.text)


@dataclass(frozen=True)
class KernelName:
    """A parsed kernel name."""

    text: str  # the demangled name, whitespace as given
    symbol: str  # the kernel's qualified name without template arguments or return type
    args: tuple[Arg, ...]  # the kernel's template arguments
    truncated: bool  # the name was cut before its brackets closed
    mangled: str | None = None  # the mangled form it was given in, if any

    def walk(self):
        """Every template argument, outermost first (explicit stack)."""
        stack = list(reversed(self.args))
        while stack:
            a = stack.pop()
            yield a
            stack.extend(reversed(a.args))


def _head(text: str) -> str:
    i = _top_level(text, "<")
    return (text if i < 0 else text[:i]).strip()


def _mask_operators(text: str) -> str:
    """The text with `operator<`, `operator()`... blanked so their brackets do not count."""
    return _OPERATOR.sub(lambda m: "operator" + "_" * (len(m.group(0)) - 8), text)


def _top_level(text: str, ch: str) -> int:
    """Index of the first `ch` outside any bracket, or -1."""
    masked = _mask_operators(text)
    depth = 0
    for i, c in enumerate(masked):
        if c == ch and depth == 0:
            return i
        if c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            depth = max(0, depth - 1)
    return -1


def _split_symbol(text: str) -> tuple[str, int, int]:
    """(qualified symbol, start, end of its template argument list or -1, -1)
    for a demangled function name: the return type and parameters left out."""
    masked = _mask_operators(text)
    # The parameter list is the last top-level '(' group that is not a
    # `(anonymous namespace)` or a lambda's own; find the name's end at depth 0.
    depth = 0
    start = 0
    tpl = (-1, -1)
    i = 0
    n = len(masked)
    while i < n:
        c = masked[i]
        if c == "(" and depth == 0:
            if masked.startswith("(anonymous namespace)", i):
                i += len("(anonymous namespace)")
                continue
            if i + 1 < n and masked[i + 1] in "*&":  # a function returning a function pointer
                i += 1
                continue
            # The parameter list, unless the name goes on after it (`f(int)::{lambda()#1}`).
            close = _matching(masked, i)
            if close < 0 or not masked.startswith("::", close + 1):
                break
            i = close + 1
            continue
        if c == " " and depth == 0:
            start = i + 1  # what came before was the return type
            tpl = (-1, -1)
        elif c == "<":
            if depth == 0:
                tpl = (i, -1)
            depth += 1
        elif c == ">":
            depth = max(0, depth - 1)
            if depth == 0 and tpl[0] >= 0:
                tpl = (tpl[0], i)
        elif c in "({[":
            depth += 1
        elif c in ")}]":
            depth = max(0, depth - 1)
        i += 1
    end = i
    if tpl[0] >= 0 and tpl[1] < 0:  # cut inside the template arguments
        tpl = (tpl[0], n)
        end = n
    symbol = text[start:end] if tpl[0] < 0 else text[start : tpl[0]] + text[tpl[1] + 1 : end] if tpl[1] < n else text[start : tpl[0]]
    return symbol.strip(), tpl[0], tpl[1]


def _matching(masked: str, i: int) -> int:
    """Index of the bracket closing the one at `i`, or -1 when the text ends first."""
    want = [_OPEN[masked[i]]]
    for j in range(i + 1, len(masked)):
        c = masked[j]
        if c in _OPEN:
            want.append(_OPEN[c])
        elif c in _CLOSE:
            if want and c == want[-1]:
                want.pop()
                if not want:
                    return j
    return -1


def parse_args(text: str) -> tuple[tuple[Arg, ...], bool]:
    """The comma-separated template arguments in `text` (without the outer
    `<>`) as trees, and whether the text ended with brackets still open."""
    masked = _mask_operators(text)
    # One frame per open '<': where its current argument starts, its finished
    # arguments, and the arguments of the '<...>' lists inside the current one.
    frames: list[_Frame] = [_Frame(0)]
    closers: list[str] = []
    for i, c in enumerate(masked):
        if c == "<":
            closers.append(">")
            frames.append(_Frame(i + 1))
        elif c in "({[":
            closers.append(_OPEN[c])
        elif c in ">)}]":
            if not closers or closers[-1] != c:
                continue  # a stray closer (`operator>` already masked): text, not structure
            closers.pop()
            if c == ">":
                done = frames.pop()
                done.finish(text, i)
                frames[-1].pending.extend(done.args)
        elif c == "," and (not closers or closers[-1] == ">"):
            frames[-1].finish(text, i)
            frames[-1].start = i + 1
    truncated = bool(closers)
    while len(frames) > 1:
        done = frames.pop()
        done.finish(text, len(text))
        frames[-1].pending.extend(done.args)
    frames[0].finish(text, len(text))
    return tuple(frames[0].args), truncated


class _Frame:
    """An open template argument list while parsing."""

    __slots__ = ("start", "args", "pending")

    def __init__(self, start: int):
        self.start = start
        self.args: list[Arg] = []
        self.pending: list[Arg] = []

    def finish(self, text: str, end: int) -> None:
        piece = text[self.start : end].strip()
        if piece:
            self.args.append(Arg(piece, tuple(self.pending)))
        self.pending = []


def parse(name: str) -> KernelName:
    """Parse a kernel name (mangled or demangled, possibly cut short)."""
    mangled = name.strip() if name.strip().startswith("_Z") else None
    text = demangle(name)
    symbol, lt, gt = _split_symbol(text)
    args: tuple[Arg, ...] = ()
    truncated = False
    if lt >= 0:
        args, truncated = parse_args(text[lt + 1 : gt])
        truncated = truncated or gt >= len(text)
    truncated = truncated or _unbalanced(text)
    return KernelName(text, symbol, args, truncated, mangled)


def _unbalanced(text: str) -> bool:
    """Whether brackets are still open at the end of the text (a name cut short)."""
    closers: list[str] = []
    for c in _mask_operators(text):
        if c in "({[":
            closers.append(_OPEN[c])
        elif c in ")}]" and closers and closers[-1] == c:
            closers.pop()
    return bool(closers)


def lambda_owner(text: str) -> str | None:
    """For a lambda's closure type `f(params)::{lambda()#1}::operator()() const::{lambda(float)#1}`,
    the function the outermost lambda is written in (`f`), without its parameters."""
    m = LAMBDA.search(text)
    if m is None:
        return None
    owner = text[: m.start()].removesuffix("::")
    masked = _mask_operators(owner)
    # Drop the owner's parameter list: the last top-level '(' group.
    depth = 0
    cut = len(owner)
    for i in range(len(masked) - 1, -1, -1):
        c = masked[i]
        if c == ")":
            depth += 1
        elif c == "(":
            depth -= 1
            if depth == 0:
                if masked.startswith("(anonymous namespace)", i):
                    continue
                cut = i
                break
    owner = owner[:cut].strip()
    return _strip_templates(_strip_return(owner))


def _strip_return(text: str) -> str:
    """`void at::native::f` -> `at::native::f`: a leading return type goes."""
    masked = _mask_operators(text)
    depth = 0
    last_space = -1
    for i, c in enumerate(masked):
        if c in "<({[":
            depth += 1
        elif c in ">)}]":
            depth = max(0, depth - 1)
        elif c == " " and depth == 0:
            last_space = i
    return text[last_space + 1 :] if last_space >= 0 else text


def _strip_templates(text: str) -> str:
    """`a::B<int>::operator()<X>` -> `a::B::operator()`: template argument lists removed."""
    masked = _mask_operators(text)
    out = []
    depth = 0
    for c, m in zip(text, masked):
        if m == "<":
            depth += 1
            continue
        if m == ">" and depth:
            depth -= 1
            continue
        if depth == 0:
            out.append(c)
    return "".join(out).strip()


def unqualified_symbol(text: str) -> str:
    """A symbol without template arguments or anonymous namespaces, as the index looks names up."""
    return _strip_templates(text).replace("(anonymous namespace)::", "")
