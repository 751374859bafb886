"""Objective-C++ rewritten as the C++ it stands for, byte for byte, before
parsing (Note [Objective-C++]).

Note [Objective-C++]
The MPS and Metal backends are Objective-C++: C++ functions whose bodies send
messages (`[mpsGraph castTensor:t toType:type name:@"cast"]`) inside
`@autoreleasepool { ... }`, with literals (`@"s"`, `@[a, b]`, `@{k : v}`,
`@(x)`, `@1`), blocks (`^(args) {...}`) and classes (`@interface ... @end`).
The C++ grammar reads each as an error. Around them a file parsed askew (the
impl of `add.out` on MPS was indexed as `at::native::at::native::...` five
times over) and three times slower a byte than C++. Each construct is
rewritten to C++ of the same length on the same lines, so that what a message
passes stays an expression and the calls in it stay calls:

    [r sel:a other:b]      ->  (r ,   a ,     b)     a comma expression
    [r sel]                ->  (r    )
    @autoreleasepool {     ->                  {
    @"s"  @(x)  @1         ->   "s"   (x)   1
    @[a, b]  @{k : v}      ->   (a, b)   (k , v)     (`@[]` -> `(0)`)
    @selector(f:)          ->  0                     (`@encode`, `@protocol(P)` too)
    @available(macOS 13, *) -> 1
    x = ^(A a) {           ->  x =[](A a) {          (the space before it taken)
    ^T* (A a) {            ->  []  (A a) {
    T (^Name)(A)           ->  T (*Name)(A)          a block's type
    for (id x in xs)       ->  for (id x :  xs)

`@interface` and `@protocol` ... `@end` declare nothing a C++ reader needs
and are blanked. In an `@implementation`, a method is read as a member
function of its class named by the first part of its selector, on the line
of that name: `- (void)encode:(id)e image:(MPSImage*)i {` in
`@implementation MPSCNNConvOp` is `MPSCNNConvOp::encode`, and what its body
calls is its calls.
"""

from __future__ import annotations

import bisect
import re

# Strings, characters and comments (their insides are not code) and brackets.
_TOKEN = re.compile(rb'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|//[^\n]*|/\*.*?\*/|[\[\](){}]', re.S)
_OPEN = {ord("["): ord("]"), ord("("): ord(")"), ord("{"): ord("}")}
BLANKS = bytes(10 if b == 10 else 32 for b in range(256))  # every byte a space but newlines
# What a message's receiver can be, its groups blanked (`flat` in rewrite): a name, a
# member, a call, a cast, a nested message.
_RECEIVER = rb"(?:\w|\.|->|::|\*|&|\(\s*\)|\[\s*\]|<[^<>()\[\]]*>)+"
_CAST = re.compile(rb"\s*\(\s*\)\s*")  # `a[(int) i]`: a subscript, no message to `(int)`
_MAX_MESSAGE = 16384  # a message's inside, in bytes: real ones are under 2 KB (hostile nesting would be quadratic)
_UNARY = re.compile(rb"\s*" + _RECEIVER + rb"\s+([A-Za-z_]\w*)\s*")
_KEYWORD = re.compile(rb"\s*" + _RECEIVER + rb"\s+[A-Za-z_]\w*:(?!:)")
_SELECTOR_PART = re.compile(rb"(?<=\s)([A-Za-z_]\w*):(?!:)")
_DICT_COLON = re.compile(rb"(?<!:):(?!:)")
# `a[sizeof x]` is the one C++ subscript of a name and a word.
_NOT_RECEIVERS = {b"sizeof", b"alignof", b"new", b"delete", b"co_await", b"throw", b"not", b"compl"}
_AT = re.compile(
    rb"@(?:(autoreleasepool)\b|(interface|protocol)\b(?!\s*\()|(implementation)\b|(end)\b|(class|synthesize|dynamic|compatibility_alias)\b"
    rb"|(selector|encode|protocol)\s*(?=\()|(available)\s*(?=\()|(?=[\"(\[{])|(?=-?[0-9]|YES\b|NO\b|true\b|false\b))"
)
# The class an `@implementation` names.
_CLASS_NAME = re.compile(rb"[ \t]*([A-Za-z_]\w*)")
# A forward declaration: `@protocol P;`
_FORWARD = re.compile(rb"[ \t]*[\w, \t<>]*;")
# A method's head, up to its body: `- (T)sel:(A)a other:(B)b {`.
_METHOD_HEAD = re.compile(rb"^[ \t]*[-+][ \t]*\((?:[^()]|\([^()]*\))*\)\s*([A-Za-z_]\w*)[^{};]*?(?=\{)", re.M)
# A block: `^{`, `^(A a) {`, `^T* (A a) {`; `(^Name)` in a block type.
_BLOCK = re.compile(rb"\^[ \t]*(?:([A-Za-z_][\w:]*(?:<[^<>{};]*>)?[\s*&]*))?(?:\([^()]*\)\s*)?\{")
_BLOCK_TYPE = re.compile(rb"\(\s*(\^)\s*\w*\s*\)\s*\(")
_FOR_IN = re.compile(rb"\bfor\s*\([^;()]*?\s(in)\s+(?=[^\s=:])")
_QUALIFIERS = re.compile(rb"\b(?:__bridge(?:_transfer|_retained)?|__weak|__strong|__block|__autoreleasing|__unsafe_unretained"
                         rb"|__kindof|_Nullable|_Nonnull|nullable|nonnull)\b"
                         rb"|\b(?:API_AVAILABLE|API_UNAVAILABLE)\s*\((?:[^()]|\([^()]*\))*\)")
_MARKERS = re.compile(rb"@(?:autoreleasepool|interface|implementation|end)\b")


def is_objc(path: str, data: bytes) -> bool:
    """Whether `data` is Objective-C++: a .mm file, or a header declaring classes."""
    return path.endswith(".mm") or (b"@" in data and _MARKERS.search(data) is not None)


def rewrite(data: bytes) -> bytes:
    """`data` with its Objective-C written as C++ (Note [Objective-C++]): the
    same length, newlines where they were."""
    skeleton = bytearray(data)  # strings and comments blanked: what the rules read
    pairs: dict[int, int] = {}  # an opening bracket's offset -> its closing one's
    children: dict[int, list[int]] = {}  # an opening bracket -> the groups directly inside it
    stack: list[int] = []
    for m in _TOKEN.finditer(data):
        start = m.start()
        c = data[start]
        if m.end() - start > 1:
            if c in b"\"'":
                skeleton[start + 1 : m.end() - 1] = data[start + 1 : m.end() - 1].translate(BLANKS)
            else:
                skeleton[start : m.end()] = m.group().translate(BLANKS)
        elif c in _OPEN:
            if stack:
                children.setdefault(stack[-1], []).append(start)
            stack.append(start)
        elif stack and _OPEN[data[stack[-1]]] == c:
            pairs[stack.pop()] = start
    view = bytes(skeleton)
    out = bytearray(data)

    def flat(open_at: int) -> bytes:
        """The inside of a group with the groups in it blanked: its top level."""
        close = pairs[open_at]
        inside = bytearray(view[open_at + 1 : close])
        for child in children.get(open_at, ()):
            end = pairs.get(child)
            if end is not None:
                inside[child - open_at : end - open_at - 1] = inside[child - open_at : end - open_at - 1].translate(BLANKS)
        return bytes(inside)

    def blank(start: int, end: int) -> None:
        out[start:end] = out[start:end].translate(BLANKS)

    declarations: list[tuple[int, int]] = []
    classes: list[tuple[int, bytes]] = []  # (where an @implementation starts, its class), in order
    covered = 0  # the end of the last span blanked up to a mark it searched for: nothing in it is read again
    for m in _AT.finditer(view):
        at = m.start()
        if at < covered:
            continue
        forward = _FORWARD.match(view, m.end()) if m.group(2) == b"protocol" else None
        if m.group(1) or m.group(4):  # @autoreleasepool, @end
            blank(at, m.end())
        elif m.group(2) and forward is None:  # @interface / @protocol ... @end: nothing a C++ reader needs (blanked last)
            end = view.find(b"@end", m.end())
            covered = len(view) if end < 0 else end + 4
            declarations.append((at, covered))
        elif m.group(3):  # @implementation Name: its methods follow
            end = view.find(b"\n", at)
            covered = len(view) if end < 0 else end
            blank(at, covered)
            name = _CLASS_NAME.match(view, m.end())
            if name is not None:
                classes.append((at, name.group(1)))
        elif m.group(5) or forward is not None:  # @class A, B;  @synthesize x = _x;  @protocol P;
            end = view.find(b";", m.end())
            covered = len(view) if end < 0 else end + 1
            blank(at, covered)
        elif m.group(6) or m.group(7):  # @selector(...), @available(...): a constant
            open_at = view.index(b"(", m.end())
            close = pairs.get(open_at)
            if close is not None:
                blank(at, close + 1)
                out[at] = ord("1" if m.group(7) else "0")
        else:  # a literal: @"s", @(x), @[a, b], @{k : v}, @1
            out[at] = 32
            opener = view[m.end()] if m.end() < len(view) else 0
            if opener in b"[{" and m.end() in pairs and pairs[m.end()] - m.end() <= _MAX_MESSAGE:
                close = pairs[m.end()]
                out[m.end()], out[close] = ord("("), ord(")")
                inside = flat(m.end())
                if not inside.strip():
                    out[at], out[m.end()] = ord("("), ord("0")
                else:
                    if opener == ord("{"):
                        for colon in _DICT_COLON.finditer(inside):
                            out[m.end() + 1 + colon.start()] = ord(",")
                    last = inside.rstrip()
                    if last.endswith(b","):  # `@[a, b,]`: no trailing comma in C++
                        out[m.end() + len(last)] = 32

    for open_at, close in pairs.items():
        if view[open_at] != ord("[") or (open_at and view[open_at - 1] == ord("@")):
            continue
        if close - open_at > _MAX_MESSAGE:
            continue
        inside = flat(open_at)
        unary = _UNARY.fullmatch(inside)
        if unary is not None:
            parts = [(unary.start(1), unary.end(1))]
        elif _KEYWORD.match(inside):
            parts = [(p.start(1), p.end()) for p in _SELECTOR_PART.finditer(inside)]
        else:
            continue  # a subscript, a lambda's captures, an attribute
        receiver = inside[: parts[0][0]]
        if inside.split(None, 1)[0] in _NOT_RECEIVERS or _CAST.fullmatch(receiver):
            continue
        out[open_at], out[close] = ord("("), ord(")")
        for start, end in parts:
            blank(open_at + 1 + start, open_at + 1 + end)
            if unary is None:  # `sel:` -> `,   `: room for a block's `[]` after it
                out[open_at + 1 + start] = ord(",")

    for m in _QUALIFIERS.finditer(view):  # before the method heads: what they write must stay
        blank(m.start(), m.end())
    for m in _METHOD_HEAD.finditer(view):  # `- (T)sel:(A)a {` -> `void Class::sel()   {`
        blank(m.start(), m.end())
        line = view.rfind(b"\n", m.start(), m.start(1)) + 1 or m.start()  # the start of the name's line
        line_end = view.find(b"\n", m.start(1), m.end())
        line_end = m.end() if line_end < 0 else line_end
        i = bisect.bisect_right(classes, (m.start(), b"")) - 1
        for name in ([classes[i][1] + b"::" + m.group(1)] if i >= 0 else []) + [m.group(1)]:
            if line + 5 + len(name) + 2 <= line_end:
                out[line : line + 5 + len(name) + 2] = b"void " + name + b"()"
                break
    for m in _BLOCK.finditer(view):
        at = m.start()
        before = view[max(0, at - 64) : at].rstrip()
        if before and before[-1:] not in b"(,=:?{;}" and not before.endswith(b"return"):
            continue  # an exclusive or
        if m.group(1):  # `^T* (A a) {` -> `[]   (A a) {`
            blank(at, m.end(1))
            out[at : at + 2] = b"[]"
        elif at and out[at - 1] in b" \t":
            out[at - 1 : at + 1] = b"[]"
        elif view[m.end() - 2] in b" \t" and b"\n" not in m.group():  # `(^(A) {` -> `([](A){`
            params = view[at + 1 : m.end() - 1].strip()
            out[at : m.end()] = b"[]" + params.ljust(m.end() - at - 3) + b"{"
        else:  # no room for a lambda's `[]`: the block stays an error
            out[at] = 32
    for m in _BLOCK_TYPE.finditer(view):  # `T (^Name)(A)`: a function pointer's type
        if out[m.start(1)] == ord("^"):  # not in a method head, blanked
            out[m.start(1)] = ord("*")
    for m in _FOR_IN.finditer(view):
        out[m.start(1) : m.end(1)] = b": "
    for start, end in declarations:
        blank(start, end)
    return bytes(out)

