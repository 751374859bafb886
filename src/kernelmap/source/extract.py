"""Turn one C++/CUDA file of a PyTorch tree into facts: definitions with
qualified names and preprocessor conditions, classified call sites, stub
declarations and registrations, library registrations, dtype dispatch sites.

tree-sitter finds the nodes with the queries in `queries/*.scm`; Python only
reads the captures. Scopes and conditions are found by one sweep over the
captured regions in byte order (Note [regions]), never by walking the tree.

Facts are plain tuples (cheap to send between processes); `store` turns
them into rows. The rules below that decide what the graph grows from are
listed, with an example and a test each, in docs/graph-rules.md.

Note [regions]
Every capture that qualifies or conditions what lies inside it (a namespace
body, a class body, a switch case, an if branch, a #if body, a #else, a
function body) becomes a region (start byte, end byte, tag, payload). Syntax
nodes nest, so the regions are laminar: a sweep over regions and points
(definition starts, call sites) in byte order with a stack gives, at each
point, exactly its enclosing regions, innermost on top.

Note [calls kept]
Calls that can never be an edge of interest are not recorded: casts
(`static_cast<...>(x)` reads as a call), `std::` functions, ALL-CAPS macros
(TORCH_CHECK, C10_CUDA_KERNEL_LAUNCH_CHECK) unless they name a vendor API,
and member calls of containers and TensorBase accessors (`.size()`,
`.push_back()`, `.data_ptr()`). They were a third of all call sites.

Note [stub calls]
`x_stub(kCPU, ...)` is a DispatchStub call only when `x_stub` is declared by
DECLARE_DISPATCH / DEFINE_DISPATCH somewhere in the tree, which one file
cannot know: the extractor records such calls as direct and `store` promotes
them once the tree's stubs are known, except where the file itself defines a
function of that name (the CPU padding kernel's local `add_stub` helper
shadows the real `add_stub`).

Note [named lambdas]
A kernel often binds a lambda to a name and calls it in one arm only:
index_select's `outer_loop`, which calls `copy_stub`, runs when a slice holds
at least the grain size, and a memcpy loop runs otherwise. A call in such a
body takes the condition of the name's first call in the same definition,
not the condition around the lambda's definition, unless a case/if of the
body itself conditions it.
"""

from __future__ import annotations

import bisect
import functools
import hashlib
import itertools
import operator
import _signal
import re
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import tree_sitter
import tree_sitter_cpp

from kernelmap import vendors
from kernelmap.source import objc as objc_source

QUERY_DIR = Path(__file__).with_name("queries")
QUERY_FILES = ("scopes", "preproc", "definitions", "calls", "errors", "macros")
SOURCE_SUFFIXES = (".cpp", ".cc", ".h", ".hpp", ".cu", ".cuh", ".mm")
MAX_FILE_BYTES = 4 * 1024 * 1024  # larger files are generated tables, not code worth parsing
# Per-file time budget. The slowest real file of 2.6.0 takes well under a
# second; hostile nesting (100k namespaces, 1 MB of `template<`) takes tens of
# seconds and would hold a build's lock meanwhile.
MAX_FILE_SECONDS = 10.0
# Files up to this size are parsed from bytes with no deadline inside the
# parse (Note [bytes-backed tree]): tree-sitter's error recovery keeps a
# bounded number of stack versions, so a parse is linear in the input, and the
# most hostile inputs found (`a<a<a<...`) cost about 8 us a byte: 2 s here.
# Spaces are not counted: the lexer skips them at next to no cost, and masking
# (Note [data tables]) leaves megabytes of them.
UNTIMED_PARSE_BYTES = 256 * 1024


# tree-sitter's query engine is not interruptible and grows much faster than
# linearly on degenerate trees (100k nested namespaces: 80 s; 110k unclosed
# `template<` in one flat ERROR node: 60 s). Real code of 2.6.0 nests braces
# at most ~30 deep and puts at most ~550 nodes side by side under one node.
MAX_BRACE_DEPTH = 512
MAX_SIBLINGS = 50_000
_BRACES = bytes(b for b in range(256) if b not in b"{}")


def _brace_depths(braces: bytes, ceiling: int) -> tuple[int, int, int]:
    """(lowest, deepest, last) depth reached reading `braces` (only `{` and
    `}`) from depth 0; stops once deeper than `ceiling`."""
    depth = lowest = deepest = 0
    for b in braces:
        if b == 123:
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > ceiling:
                    break
        else:
            depth -= 1
            if depth < lowest:
                lowest = depth
    return lowest, deepest, depth


def degenerate(data: bytes, root=None) -> str | None:
    """Why a file is too degenerate to query (None when it is not): braces
    nested deeper than MAX_BRACE_DEPTH, or (given its parse) more than
    MAX_SIBLINGS nodes under the root or one of its children."""
    braces = data.translate(None, _BRACES)
    if len(braces) > MAX_BRACE_DEPTH and _brace_depths(braces, MAX_BRACE_DEPTH)[1] > MAX_BRACE_DEPTH:
        return f"braces nested more than {MAX_BRACE_DEPTH} deep"
    if root is not None:
        widest = max([root.child_count, *(c.child_count for c in root.children)])
        if widest > MAX_SIBLINGS:
            return f"{widest} nodes side by side (more than {MAX_SIBLINGS})"
    return None


# Note [masked attributes]
# Attribute-like macros and CUDA qualifiers read to the grammar as types or
# declarators (`C10_LAUNCH_BOUNDS_1(256) __global__ void k(`, `struct
# alignas(16) v`, `C10_HOST_DEVICE inline T f(`): a whole file can parse
# askew after one (layer_norm_kernel.cu's `layer_norm_cuda` was indexed as
# `std::tuplelayer_norm_cuda`). They are blanked before parsing, byte for
# byte (same offsets, same lines); names are read from the blanked text, and
# what they say (`__global__`) from the original.
_ARGS = rb"\s*\((?:[^()]|\([^()]*\))*\)"
# Each group starts with a literal, so the regex engine finds it by a fast
# substring search; the group only runs on files that hold its prefix. Its
# names are bare words, or take arguments: a bare word's parentheses are not
# its own (`[] GPU_LAMBDA(scalar_t a) -> scalar_t {` keeps the lambda's
# parameters, `__launch_bounds__(256)` goes whole).
def _attribute_pattern(prefix: bytes, bare: bytes | None, with_args: bytes | None) -> re.Pattern:
    words = [] if bare is None else [rb"(?:" + bare + rb")\b"]
    words += [] if with_args is None else [rb"(?:" + with_args + rb")\b(?:" + _ARGS + rb")?"]
    return re.compile(re.escape(prefix) + rb"(?:" + b"|".join(words) + rb")")


_ATTRIBUTE_GROUPS = tuple(
    (prefix, _attribute_pattern(prefix, bare, with_args))
    for prefix, bare, with_args in (
        (b"__", rb"global__|device__|host__|forceinline__|inline__|noinline__|restrict__|shared__|ubsan_ignore_\w+__", rb"launch_bounds__|align__"),
        (b"C10_", rb"HOST_DEVICE|DEVICE|HOST|ALWAYS_INLINE_ATTRIBUTE|ALWAYS_INLINE|NOINLINE|RESTRICT|UNUSED|NODISCARD|API|EXPORT|IMPORT|HIDDEN|"
                  rb"CUDA_API|DEPRECATED|MAYBE_UNUSED|ERASE", rb"LAUNCH_BOUNDS_[012]|ALIGNAS|DEPRECATED_MESSAGE|CLANG_DIAGNOSTIC_\w+"),
        (b"TORCH_", rb"API|PYTHON_API|CUDA_CPP_API|CUDA_CU_API|HIP_API|XPU_API", None),
        (b"CUTLASS_", rb"HOST_DEVICE|DEVICE|GLOBAL|HOST", None),
        (b"CAFFE2_API", b"", None),
        (b"AT_CUDA_API", b"", None),
        (b"GPU_LAMBDA", b"", None),  # `__host__ __device__` (cuda/thread_constants.h)
        (b"alignas", None, b""),
        # A Python binding's try/catch brackets take no `;`: the grammar read
        # `HANDLE_TH_ERRORS if (...) {...}` as a function inside the binding.
        (b"HANDLE_TH_ERRORS", b"", None),
        (b"END_HANDLE_TH_ERRORS", None, rb"\w*"),  # END_HANDLE_TH_ERRORS_RET(retval)
        (b"PyVarObject_HEAD_INIT", None, b""),  # see _TORCH_ARG
    )
)

# Macros whose arguments are no C++ expression:
# - `TORCH_ARG(double, lr) = 1e-3;` (the C++ API's options) declares a member
#   and its accessors: read as the member, `double  lr = 1e-3;`.
# - `PyVarObject_HEAD_INIT(nullptr, 0)` opens a Python type's initializer
#   with no comma after it: blanked (in the attribute groups).
_TORCH_ARG = re.compile(rb"\bTORCH_ARG\(((?:[^()]|\([^()]*\))*),(\s*\w+\s*)\)")


def _member_of_arg(directives: Directives, m: re.Match) -> bytes:
    if directives.start_of(m.start()) is not None:
        return m.group(0)
    return b" " * len(b"TORCH_ARG(") + m.group(1) + b" " + m.group(2) + b" "


# `extern template int f<2>();` (an explicit instantiation declaration) is
# beyond the grammar and swallows the definitions after it; without `extern`
# it reads as the instantiation it declares.
_EXTERN_TEMPLATE = re.compile(rb"extern(?=\s+template\b)")
# An `#if` whose only branch ends in a dangling `else` (Indexing.cu: `if (n <
# 50000) {...} else` under `#if CUDA_VERSION < 11030`, then the `{` after
# #endif) leaves an if statement the grammar cannot close: the branch is
# blanked, as a build without it reads.
_DANGLING_ELSE = re.compile(rb"#[ \t]*if[^\n]*\n(?:(?![ \t]*#)[^\n]*\n){0,40}?[^\n#]*\belse[ \t]*\n[ \t]*#[ \t]*endif\b")
# Likewise an `#ifdef USE_ROCM` whose only branch opens with `} else if (...) {`
# (Indexing.cu): it continues an if statement across the directive.
_SPLIT_BRANCH = re.compile(rb"#[ \t]*if[^\n]*\n[ \t]*\}[ \t]*else\b(?:(?![ \t]*#)[^\n]*\n){0,200}?[ \t]*#[ \t]*endif\b")
# `#ifdef A` / `if (w == 8) {` / `#else` / `if (w == 16) {` / `#endif`: two
# one-line alternatives each opening the block that follows, which the grammar
# reads as two unclosed blocks: the first alternative is kept, without the
# directives, as a build with A reads.
_ALTERNATIVE_OPENINGS = re.compile(rb"#[ \t]*if[^\n]*\n([^\n#]*\{[ \t]*\n)[ \t]*#[ \t]*else[ \t]*(?://[^\n]*)?\n[^\n#]*\{[ \t]*\n[ \t]*#[ \t]*endif\b[^\n]*")
# Likewise two function heads over several lines each, then one body
# (cudnn/RNN.cpp's two `void set(...) {`, FlashAttentionKernel.cpp's two
# `_scale_attn_mask_fusion_kernel` for GCC 11 on SVE and the rest): both are
# kept, the first closed by a `}` where `#else` was, so each is a definition at
# its own line and the body is the second's.
_ALTERNATIVE_HEADS = re.compile(
    rb"#[ \t]*if[^\n]*\n((?:(?![ \t]*#)[^\n{};]*\n){1,30}[^\n#{};]*\{[ \t]*\n)([ \t]*#[ \t]*else[^\n]*\n)"
    rb"((?:(?![ \t]*#)[^\n{};]*\n){1,30}[^\n#{};]*\{[ \t]*\n)[ \t]*#[ \t]*endif\b[^\n]*"
)


def _both_heads(m: re.Match) -> bytes:
    if not _starts_line(m):
        return m.group(0)
    out = bytearray(_spaces(m))
    for group in (1, 3):
        out[m.start(group) - m.start() : m.end(group) - m.start()] = m.group(group)
    out[m.group(0).index(b"#", m.start(2) - m.start())] = ord("}")
    return bytes(out)

# Directives inside a parameter or argument list (cudnn/RNN.cpp: `const
# RNNDescriptor& rnn_desc,` / `#ifndef USE_CUDNN_RNN_V8_API` / `const
# TensorDescriptor& x_desc,` / `#endif` / `cudnnDataType_t datatype) {`) are
# beyond the grammar, which then loses the namespaces and classes around
# every later definition of the file; so are alternative ends of one
# expression (`auto num_weights =` / `#ifndef ...` / `get_num_weights(handle,
# rnn_desc, x_desc, t);` / `#else` / `get_num_weights(handle, rnn_desc, t);` /
# `#endif`). The directives are blanked; the branches are both kept where
# each is whole items or statements (balanced, ending in `,` or `;`: both
# builds' calls are read), else the first is kept, as a build with its
# condition reads. Only where a list or an expression goes on across the
# directive (the line before ends with `,`, `(` or `=`) and the branches open
# or close no block.
_LIST_BRANCH = re.compile(
    rb"(?<=[,(=])[ \t]*\n([ \t]*#[ \t]*if[^\n]*\n)((?:(?![ \t]*#)[^\n{}]*\n){1,20})"
    rb"([ \t]*#[ \t]*else[^\n]*\n(?:(?![ \t]*#)[^\n{}]*\n){1,20})?([ \t]*#[ \t]*endif[^\n]*)"
)


_HASH_IF = re.compile(rb"#[ \t]*if")


def _may_have_list_branch(data: bytes) -> bool:
    """Whether some `#if` starts a line after a line ending in `,`, `(` or
    `=`: what every _LIST_BRANCH match needs. That regex begins with a
    look-behind, so it is tried at every byte (a third of all masking time);
    `#if` is found by a literal search, and 30 files of 4,210 have one there."""
    for m in _HASH_IF.finditer(data):
        j = m.start()
        while j > 0 and data[j - 1] in b" \t":
            j -= 1
        if j == 0 or data[j - 1] != 0x0A:
            continue
        j -= 1
        while j > 0 and data[j - 1] in b" \t":
            j -= 1
        if j > 0 and data[j - 1] in b",(=":
            return True
    return False


def _list_branch(m: re.Match) -> bytes:
    blank = bytearray(_spaces(m))
    kept = [2]
    if m.group(3) is not None:
        first, other = m.group(2), m.group(3).split(b"\n", 1)[1]
        if all(b.count(b"(") == b.count(b")") and b.rstrip()[-1:] in (b",", b";") for b in (first, other)):
            kept.append(3)  # two whole items or statements: both read, as either build reads one
    for group in kept:
        blank[m.start(group) - m.start() : m.end(group) - m.start()] = m.group(group)
    if len(kept) == 2:  # the `#else` line itself stays blank
        else_line = m.group(3).split(b"\n", 1)[0]
        blank[m.start(3) - m.start() : m.start(3) - m.start() + len(else_line)] = else_line.translate(_BLANKS)
    return bytes(blank)


def _first_alternative(m: re.Match) -> bytes:
    if not _starts_line(m):
        return m.group(0)
    blank = _spaces(m)
    return blank[: m.start(1) - m.start()] + m.group(1) + blank[m.end(1) - m.start() :]


def _starts_line(m: re.Match) -> bool:
    return not m.string[m.string.rfind(b"\n", 0, m.start()) + 1 : m.start()].strip()


# An explicit specialisation of a call operator, `void operator()<float,
# float>(float& c)`, is beyond the grammar: its template arguments are blanked
# (not in a call, `f.template operator()<T>(x)`, which the grammar reads).
_CALL_OPERATOR_ARGS = re.compile(rb"(?<=operator\(\))[ \t]*<[^<>;{}()]*(?:<[^<>;{}()]*>[^<>;{}()]*)*>(?=\s*\()")


def _blank_specialisation(m: re.Match) -> bytes:
    before = m.string[max(0, m.start() - 40) : m.start() - len(b"operator()")].rstrip()
    return m.group(0) if before.endswith((b".", b"->", b"template")) else _spaces(m)
# `kernel<T><<<grid, block, 0, stream>>>(...)`: the launch configuration is no
# C++ the grammar knows and derails the rest of the file; blanked, the launch
# reads as a call (the launches themselves are read from the original text).
_LAUNCH_CONFIG = re.compile(rb"<<<[^;{}]*?>>>")
# Two-word builtin types as macro arguments (`SMALL_INDEX(scalar_t, index_t,
# unsigned int, 1, 1, -2)` in Indexing.cu) are no expression to the grammar:
# joined into one identifier of the same length, they read as a type name
# where a type is meant, and as an argument in a macro call.
_TWO_WORD_TYPES = tuple((word + b" ", re.compile(re.escape(word) + rb" (?=(?:int|long|char|short)\b)")) for word in (b"unsigned", b"signed", b"long", b"short"))


# A temporary of a dependent type as an argument (`gpu_reduce_kernel<scalar_t,
# out_t, 2>(iter, ops, typename ops_t::acc_t{});` in ReduceMomentKernel.cu)
# makes the grammar read the statement as a function definition, and the call
# is lost: `typename` blanked, the argument reads as a temporary of that type.
# The pattern starts with the word, which the regex engine finds by a fast
# search; what must come before it (an opening parenthesis or a comma, and
# blanks) is read back from there: a pattern starting with them was tried at
# every `(` and `,` of a file.
_TYPENAME_TEMPORARY = re.compile(rb"typename\b(?=\s+[A-Za-z_][\w:<>, ]*\{[^{};]*\})")
_WHITESPACE = b" \t\n\r\f\v"  # what `\s` matches in a bytes pattern


def _blank_typename(m: re.Match) -> bytes:
    text, i = m.string, m.start()
    while i > 0 and text[i - 1] in _WHITESPACE:
        i -= 1
    return b" " * len(b"typename") if i > 0 and text[i - 1] in b"(," else m.group(0)


# A braced default argument (`ArrayRef<Scalar> scalarList = {}`) makes the
# grammar read the whole function as a declaration of a variable: the braces
# read as `0`, same length.
_BRACED_DEFAULT = re.compile(rb"=[ \t]*\{[^{}()\n;]*\}(?=\s*[,)])")
# A check macro needs no `;` (TORCH_CHECK expands to an if statement), and one
# left without before a `}` derails the function: the macro's name gives its
# last letter to a `;` after the call (same length, same lines).
_CHECK_MACROS = (b"TORCH_CHECK", b"TORCH_INTERNAL_ASSERT", b"TORCH_WARN", b"AT_ASSERT", b"AT_ERROR")
# Note [calls in checks]
# A call in the arguments of a check (`TORCH_CHECK((repeats >= 0).all().item<uint8_t>(),
# ...)` in Repeat.h; any macro named as _CHECK_MACROS start) validates the
# inputs; it is not the work. Its condition is "inside TORCH_CHECK", with the
# case/ifs around the check as the ones around it (Note [conditions around a
# call] in graph.down), and its ends rank as setup.
_CLOSE_BEFORE_BRACE = re.compile(rb"\)(?=\s*\})")
_NAME_BEFORE = re.compile(rb"([A-Za-z_]\w*)[ \t]*$")


def _terminate_checks(data: bytes) -> bytes:
    """A `;` after each check macro's call that has none before a `}`."""
    out = None
    for m in _CLOSE_BEFORE_BRACE.finditer(data):
        depth, i = 0, m.start()
        stop = max(-1, i - 4096)  # a check's arguments are short; bounded for hostile input
        while i > stop:  # back to the matching parenthesis
            c = data[i]
            depth += (c == 41) - (c == 40)
            if depth == 0:
                break
            i -= 1
        name = _NAME_BEFORE.search(data, max(0, i - 80), i) if i > stop and i > 0 else None
        if name is None or not name.group(1).startswith(_CHECK_MACROS):
            continue
        if out is None:
            out = bytearray(data)
        # the name gives its last letter to the `;`: same length, same lines
        out[name.end(1) - 1 : m.end()] = data[name.end(1) : m.end()] + b";"
    return bytes(out) if out is not None else data


# A use of a macro the file defines to launch a kernel in a block
# (DepthwiseConv3d.cu's `DWCONV3D_FORWARD_DISPATCH_SPECIALIZATION(3, 3, 3, 1,
# 1, 1)`, `DWCONV3D_FORWARD_DISPATCH_OTHERS`), written as a statement with no
# `;`, derails the function it is in: the grammar ran it on over the
# functions after it. Such a use, alone on its line, gives its name's last
# letter to a `;` after it (same length, same lines).
_STATEMENT_USE = re.compile(rb"^([ \t]*)([A-Z_][A-Z0-9_]*)((?:[ \t]*\((?:[^;()\\]|\([^;()\\]*\))*\))?)[ \t]*$", re.M)


def _terminate_launch_macros(data: bytes, original: bytes) -> bytes:
    """A `;` after each use of a launching block macro that has none (see _STATEMENT_USE)."""
    blocks = {m.group(1) for m in _DEFINE.finditer(original) if b"<<<" in m.group(3) and b"{" in m.group(3)}
    if not blocks:
        return data

    def terminate(m: re.Match) -> bytes:
        if m.group(2) not in blocks:
            return m.group(0)
        return m.group(1) + m.group(2)[:-1] + m.group(3) + b";" + m.group(0)[len(m.group(1)) + len(m.group(2)) + len(m.group(3)) + 1:]

    return _STATEMENT_USE.sub(terminate, data)


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


def _zero_braces(m: re.Match) -> bytes:
    text = m.group(0)
    i = text.index(b"{")
    return text[:i] + b"0" + b" " * (len(text) - i - 1)



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


_DEFINED_NAME = re.compile(rb"[ \t]*#[ \t]*define[ \t]+\w+")


def _blank(directives: Directives, m: re.Match) -> bytes:
    """`_spaces`, only where the match starts a word; in a directive, only in
    the value of a `#define` (it is restored by `_local_macros`): `#ifndef
    GPU_LAMBDA` or `#define GPU_LAMBDA __host__ __device__` left with no name
    is an error."""
    if not _starts_word(m):
        return m.group(0)
    start = directives.start_of(m.start())
    if start is not None:
        name = _DEFINED_NAME.match(m.string, start)
        if name is None or name.end() > m.start():
            return m.group(0)
    return _spaces(m)


def _blank_line(m: re.Match) -> bytes:
    """Like `_blank`, for a directive: only where it starts its line."""
    before = m.string[m.string.rfind(b"\n", 0, m.start()) + 1 : m.start()]
    return _spaces(m) if not before.strip() else m.group(0)


def _join(m: re.Match) -> bytes:
    return m.group(0)[:-1] + b"_" if _starts_word(m) else m.group(0)


# Note [data tables]
# A large initializer of numbers (SobolEngineOpsUtils.cpp's 2 MB of direction
# numbers) holds no definition, call or registration, yet parsing its 800,000
# literals took 7% of all parsing of 2.6.0. Its inside is blanked and made
# a comment, the braces around it kept: `= {/*   */}` reads as the same
# declaration (tree-sitter's C++ lexer skips a blank in 40 to 90 ns, and
# reads a comment's in under 10: SobolEngineOpsUtils.cpp parsed in 80 ms
# blanked, in 18 as a comment). Only where the inside is numbers, commas and
# balanced braces, 4 KB or more of them.
_DATA_TABLE = re.compile(rb"=\s*\{([0-9a-fA-FxXuUlL.+\-,{}\s]{4096,})\}")


def _blank_table(m: re.Match) -> bytes:
    braces = m.group(1).translate(None, _BRACES)
    if _brace_depths(braces, len(braces))[::2] != (0, 0):  # unbalanced: not one initializer
        return m.group(0)
    inside = m.group(1).translate(_BLANKS)
    # `/*` and `*/` take two blanks each, never a newline: the lines stay where they are.
    opening, closing = inside.find(b"  "), inside.rfind(b"  ")
    if 0 <= opening and opening + 2 <= closing:
        inside = inside[:opening] + b"/*" + inside[opening + 2 : closing] + b"*/" + inside[closing + 2 :]
    return m.group(0)[: m.start(1) - m.start()] + inside + b"}"


def mask_attributes(data: bytes, objc: bool = False) -> bytes:
    """`data` with attribute macros blanked (Note [masked attributes]), data
    tables emptied (Note [data tables]) and, if `objc`, its Objective-C
    written as C++ (Note [Objective-C++])."""
    return _masked(data, objc)[0]


def _masked(data: bytes, objc: bool = False) -> tuple[bytes, dict[bytes, _Macro]]:
    """`mask_attributes`, and the file's macros that define functions (Note
    [definitions written by macros]), read on the way."""
    if objc:
        data = objc_source.rewrite(data)
    if len(data) > 4096:
        data = _DATA_TABLE.sub(_blank_table, data)
    original = data
    # Each test of a text for a word reads the whole file, and most files hold
    # few of the words: the tests that several passes share are made once,
    # before them (blanking never adds a word a later pass needs).
    directives = b"#" in data
    alternatives = directives and b"else" in data
    # Blanking keeps every `#`, backslash and newline: the directives of `data` stay where they are.
    places = Directives(data)
    blank = functools.partial(_blank, places)
    for prefix, pattern in _ATTRIBUTE_GROUPS:
        if prefix in data:
            data = pattern.sub(blank, data)
    if b"extern" in data:
        data = _EXTERN_TEMPLATE.sub(blank, data)
    if b"TORCH_ARG(" in data:
        data = _TORCH_ARG.sub(functools.partial(_member_of_arg, places), data)
    if alternatives:
        data = _SPLIT_BRANCH.sub(_blank_line, _DANGLING_ELSE.sub(_blank_line, data))
        data = _ALTERNATIVE_OPENINGS.sub(_first_alternative, data)
        data = _ALTERNATIVE_HEADS.sub(_both_heads, data)
    if directives and _may_have_list_branch(data):
        data = _LIST_BRANCH.sub(_list_branch, data)
    if b"operator()" in data and (b"operator()<" in data or b"operator() <" in data):
        data = _CALL_OPERATOR_ARGS.sub(_blank_specialisation, data)
    if b"<<<" in data:
        data = _LAUNCH_CONFIG.sub(_spaces, data)
    signed = b"signed " in data  # also in "unsigned "
    for word, pattern in _TWO_WORD_TYPES:
        if (signed or not word.endswith(b"signed ")) and word in data:
            data = pattern.sub(_join, data)
    if b"{}" in data or b"= {" in data:
        data = _BRACED_DEFAULT.sub(_zero_braces, data)
        if b"typename" in data:
            data = _TYPENAME_TEMPORARY.sub(_blank_typename, data)
    if b"TORCH_" in data or b"AT_" in data:
        data = _terminate_checks(data)
    if directives and b"<<<" in original and b"define" in data:
        data = _terminate_launch_macros(data, original)
    if directives and b"define" in data:
        return _local_macros(original, data)
    return data, {}


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


def _once(placed: dict, facts: list, fact) -> None:
    if fact not in placed:
        placed[fact] = True
        facts.append(fact)


def _holds_word(text: bytes, word: bytes) -> bool:
    i = text.find(word)
    while i >= 0:
        before = text[i - 1 : i]
        after = text[i + len(word) : i + len(word) + 1]
        if not (before.isalnum() or before == b"_") and not (after.isalnum() or after == b"_"):
            return True
        i = text.find(word, i + 1)
    return False


class FileTimeout(Exception):
    """Raised inside the extraction of a file that ran past its time budget."""
_COND_MAX = 120  # longer case/if conditions are cut: they are for reading, not evaluation


# ---------------------------------------------------------------------------
# Facts
# ---------------------------------------------------------------------------


# Note [inline namespaces]
# `inline namespace CPU_CAPABILITY { void exp_kernel(...) }` in at::native (each
# cpu/ kernel file, built once per capability) declares members of at::native
# too: `vml::vexp` written in at::native::CPU_CAPABILITY means
# at::vml::CPU_CAPABILITY::vexp. A definition's name keeps its inline
# namespaces; its lookup name, which calls are matched against, drops them,
# as it drops anonymous namespaces.
class InlineNamespace(str):
    """The name of an inline namespace, as a scope's payload."""


class Definition(NamedTuple):
    name: str  # "at::native::(anonymous namespace)::helper", "at::native::structured_mul_out::impl"
    lookup: str  # the name without anonymous and inline namespaces: "at::native::helper"
    short: str  # the last component: "helper", "impl"
    kind: str  # function | method | structured_impl | structured_meta | global_kernel
    line: int
    end_line: int
    condition: str | None  # enclosing preprocessor conditions joined by " && "
    op: str | None  # structured kernels: the op as the macro names it, "add.Tensor", "mul_out"


class Call(NamedTuple):
    definition: int  # index into FileFacts.definitions; -1 at file scope
    callee: str  # as written, without template arguments: "at::cudnn_convolution", ".add"
    short: str  # the called name: "cudnn_convolution", "add"
    kind: str  # dispatcher | stub | direct | launch | vendor | argument (Note [stubs passed on])
    library: str | None  # vendor calls: cudnn, cublas, onednn, ...
    op: str | None  # dispatcher calls: the operator's base name (or name_overload for _ops)
    line: int
    condition: str | None  # innermost `case X` or `if (...)` in the definition
    preproc: str | None
    outer: str | None = None  # the `case`/`if` conditions around `condition` in the definition, outermost first, a line each


class Registration(NamedTuple):
    definition: int  # enclosing definition, -1 at file scope
    kind: str  # register_dispatch | library_impl | library_def | at_dispatch
    name: str  # stub name, operator name, or the dispatch site's name string
    target: str | None  # kernel function, or dtype groups for at_dispatch
    key: str | None  # device (stubs), dispatch key (library), macro (at_dispatch)
    detail: str | None  # CPU capability (stubs), namespace (library)
    line: int
    preproc: str | None


class StubDecl(NamedTuple):
    kind: str  # declare | define
    name: str
    detail: str | None  # DECLARE_DISPATCH's function type
    line: int
    preproc: str | None


class FileFacts(NamedTuple):
    path: str  # repository-relative
    size: int
    sha1: str
    errors: int  # ERROR nodes: regions the grammar could not parse
    skipped: str | None  # why the file was not parsed, if it was not
    definitions: tuple[Definition, ...]
    calls: tuple[Call, ...]
    registrations: tuple[Registration, ...]
    stubs: tuple[StubDecl, ...]
    # Read by kernelmap.source.includes (the build adds them), not by the extractor:
    includes: tuple = ()  # includes.Include
    defines: tuple = ()  # includes.Define


# How ATen's C++ API spells an operator's function besides its name: `add_out`, `conv2d_symint`.
FUNCTION_SUFFIXES = ("_symint", "_outf", "_out", "_symint_out", "_symint_outf")


@dataclass(frozen=True)
class OperatorNames:
    """Operator names of a tree's native_functions.yaml, for telling
    dispatcher calls from direct ones."""

    functions: frozenset[str]  # base names: "add", "add_", "cudnn_convolution"
    methods: frozenset[str]  # base names with a Tensor method variant

    def is_function(self, name: str) -> str | None:
        """The op base name behind a C++ API function name (`add_out`, `conv2d_symint`)."""
        if name in self.functions:
            return name
        for suffix in FUNCTION_SUFFIXES:
            if name.endswith(suffix) and name[: -len(suffix)] in self.functions:
                return name[: -len(suffix)]
        return None


_YAML_FUNC = re.compile(r"^- func: ([A-Za-z0-9_]+)(?:\.[A-Za-z0-9_]+)?\(", re.M)
_YAML_VARIANTS = re.compile(r"^\s+variants:\s*(.*)$")

# TensorBase accessors are inline methods, not operators, though some share an op's name.
_NOT_DISPATCHED_METHODS = frozenset(
    "size sizes sym_size sym_sizes stride strides sym_stride sym_strides dim numel sym_numel data_ptr "
    "const_data_ptr mutable_data_ptr scalar_type dtype device options layout is_contiguous storage_offset "
    "defined is_cuda is_cpu is_mps is_sparse is_mkldnn is_quantized is_complex is_floating_point "
    "item element_size nbytes itemsize".split()
)


# Note [calls kept]: member calls never recorded.
_SKIPPED_METHODS = _NOT_DISPATCHED_METHODS | frozenset(
    "end begin cbegin cend rbegin rend get value value_or has_value push_back emplace_back emplace at data front back "
    "reserve resize clear insert erase find count empty c_str str append def release reset".split()
)
_SKIPPED_FUNCTIONS = frozenset(("static_cast", "reinterpret_cast", "const_cast", "dynamic_cast", "c10::irange", "irange"))


def read_operator_names(yaml_path: Path) -> OperatorNames:
    """Operator base names and method variants from native_functions.yaml, by
    pattern (the file's entry shape is stable; torchgen is not needed here)."""
    try:
        text = yaml_path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return OperatorNames(frozenset(), frozenset())
    functions: set[str] = set()
    methods: set[str] = set()
    current: str | None = None
    for line in text.splitlines():
        m = _YAML_FUNC.match(line)
        if m:
            current = m.group(1)
            functions.add(current)
            continue
        v = _YAML_VARIANTS.match(line)
        if v and current and "method" in v.group(1):
            methods.add(current)
    return OperatorNames(frozenset(functions), frozenset(methods - _NOT_DISPATCHED_METHODS))


# ---------------------------------------------------------------------------
# Call classification
# ---------------------------------------------------------------------------

_LAUNCH = re.compile(r"^(gpu_kernel\w*|cpu_kernel\w*|cpu_serial_kernel\w*|binary_kernel_reduce\w*|launch_\w+|\w+_kernel_launch\w*|jitted_gpu_kernel\w*)$")
_OPS_CALL = re.compile(r"^at::_ops::(\w+)::(call|redispatch)$")
_AT_FUNC = re.compile(r"^at::(?:redispatch::)?(\w+)$")
_TEMPLATE_ARGS = re.compile(r"<[^<>]*>")
_NOT_NAME = re.compile(r"//[^\n]*|/\*.*?\*/|\\\n", re.S)
_LAST_NAME = re.compile(r"[\w:]*$")
_TEMPLATE_KEYWORD = re.compile(r"(?:(?<=::)|(?<=\.)|(?<=->)|^)\s*template\s+")
_SPACE = re.compile(r"\s+")
# A launch written in a function-local `#define` (Indexing.cu's SMALL_INDEX and
# LARGE_INDEX) continues its lines with `\`: a continuation is blank space here.
_TRIPLE_CHEVRON = re.compile(rb"([A-Za-z_][\w:]*)[\s\\]*(?:<[^;{}<>]*(?:<[^;{}<>]*>[^;{}<>]*)*>)?[\s\\]*<<<")


_LAUNCH_OPEN = re.compile(rb"<<<")


def _launches(body: bytes) -> list[re.Match]:
    """_TRIPLE_CHEVRON's matches in `body`, searched only before each `<<<`:
    a launch's name and template arguments hold no `;`, `{` or `}`, so each
    lies after the last of those before its `<<<` (tried at every identifier
    of a body, the pattern cost more than the rest of the launch search)."""
    found = []
    after = 0  # the end of the last match: matches do not overlap
    for chevron in _LAUNCH_OPEN.finditer(body):
        if chevron.start() < after:
            continue
        start = max(after, body.rfind(b";", 0, chevron.start()) + 1, body.rfind(b"{", 0, chevron.start()) + 1,
                    body.rfind(b"}", 0, chevron.start()) + 1)
        m = _TRIPLE_CHEVRON.search(body, start, chevron.end())
        if m is not None:
            found.append(m)
            after = m.end()
    return found


def _strip_templates(text: str) -> str:
    if "/" in text or "\\" in text:  # comments and line continuations inside a name spelled over lines
        text = _NOT_NAME.sub(" ", text)
    if "template" in text:  # `ALayout::template load<K>`: the keyword is no part of the name
        text = _TEMPLATE_KEYWORD.sub("", text)
    text = "".join(text.split())  # no white space (as _SPACE.sub, cheaper for the short texts here)
    for _ in range(4):
        if "<" not in text:
            break
        text = _TEMPLATE_ARGS.sub("", text)
    return text.lstrip(":")


def classify_call(callee: str, is_member: bool, ops: OperatorNames) -> tuple[str, str | None, str | None]:
    """(kind, vendor library, operator) of a call to `callee` (template
    arguments removed; member calls spelled `.name`)."""
    short = callee.rsplit("::", 1)[-1].lstrip(".>-")
    if is_member:
        if short in ops.methods:
            return "dispatcher", None, short
        return "direct", None, None
    library = vendors.of_call(callee)
    if library is not None:
        return "vendor", library.id, None
    m = _OPS_CALL.match(callee)
    if m:
        return "dispatcher", None, m.group(1)
    m = _AT_FUNC.match(callee)
    if m:
        op = ops.is_function(m.group(1))
        if op:
            return "dispatcher", None, op
    if _LAUNCH.match(short):
        return "launch", None, None
    return "direct", None, None


# ---------------------------------------------------------------------------
# The extractor
# ---------------------------------------------------------------------------

_STRUCTURED = {
    "TORCH_IMPL_FUNC": ("structured_impl", "native", "impl"),
    "TORCH_META_FUNC": ("structured_meta", "meta", "meta"),
    "TORCH_META_FUNC2": ("structured_meta", "meta", "meta"),
    "TORCH_PRECOMPUTE_META_FUNC": ("structured_meta", "meta", "meta"),
    "TORCH_PRECOMPUTE_META_FUNC2": ("structured_meta", "meta", "meta"),
}
_UNWRAP = frozenset(("pointer_declarator", "reference_declarator", "attributed_declarator", "parenthesized_declarator"))
_INCLUDE_GUARD = re.compile(r"(_H|_H_|_HPP|_INCLUDED|_INCLUDED_)$")
_IDENT = re.compile(r"[A-Za-z_]\w*(?:::[A-Za-z_~]\w*)*")
_LIB_WRAPPERS = frozenset(("TORCH_FN", "TORCH_SELECTIVE_NAME", "TORCH_SELECTIVE_SCHEMA", "makeFromBoxedFunction",
                           "makeFromUnboxedFunction", "torch::CppFunction::makeFromBoxedFunction",
                           "torch::CppFunction::makeFromUnboxedFunction",
                           "CppFunction::makeFromBoxedFunction", "c10::guts::if_constexpr"))
_STRING = re.compile(r'"((?:[^"\\]|\\.)*)"')


def _device_of(path: str) -> str:
    """The device a stub registration serves, implied by its folder."""
    parts = path.split("/")
    for part, device in (("mps", "MPS"), ("cuda", "CUDA"), ("cudnn", "CUDA"), ("miopen", "HIP"), ("hip", "HIP"),
                         ("xpu", "XPU"), ("vulkan", "Vulkan"), ("metal", "Metal"), ("mtia", "MTIA")):
        if part in parts:
            return device
    return "CPU"


def _register_key(macro: str, path: str, args: list[str]) -> tuple[str, str | None]:
    """(device, CPU capability) of a REGISTER_*DISPATCH macro in `path`."""
    word = macro.removeprefix("ALSO_").removeprefix("REGISTER_").removesuffix("DISPATCH").rstrip("_")
    if word == "":
        device = _device_of(path)
        return device, ("each CPU capability" if device == "CPU" and "/cpu/" in path else None)
    if word in ("AVX2", "AVX512", "VSX", "ZVECTOR", "SVE256"):
        return "CPU", word
    if word == "ARCH":
        return "CPU", args[1] if len(args) > 2 else None
    if word == "ALL_CPU":
        return "CPU", "all"
    if word in ("NO_CPU", "NO_AVX512"):
        return "CPU", "none" if word == "NO_CPU" else "not AVX512"
    return {"PRIVATEUSE1": "PrivateUse1"}.get(word, word), None


class Extractor:
    """A parser and compiled queries; one per process."""

    def __init__(self, ops: OperatorNames, budget: float = MAX_FILE_SECONDS):
        self.ops = ops
        self.budget = budget  # seconds per file
        self.language = tree_sitter.Language(tree_sitter_cpp.language())
        self.parser = tree_sitter.Parser(self.language)
        # One query made of every .scm file, so the tree is walked once; where
        # each pattern starts in the text says which file (and so which
        # handler) it came from.
        texts = [(QUERY_DIR / f"{name}.scm").read_text() for name in QUERY_FILES]
        self.query = tree_sitter.Query(self.language, "\n".join(texts))
        ends = list(itertools.accumulate(len(t.encode()) + 1 for t in texts))
        self.pattern_file = [QUERY_FILES[bisect.bisect_right(ends, self.query.start_byte_for_pattern(i))]
                             for i in range(self.query.pattern_count)]
        self._callees: dict[tuple[int, bytes], tuple[tuple | None, str | None]] = {}
        self._members: dict[bytes, tuple | None] = {}

    def extract(self, path: str, data: bytes) -> FileFacts:
        """Facts of one file; `path` is repository-relative (it decides stub devices)."""
        sha1 = hashlib.sha1(data).hexdigest()
        if len(data) > MAX_FILE_BYTES:
            return FileFacts(path, len(data), sha1, 0, f"larger than {MAX_FILE_BYTES // 2**20} MB", (), (), (), ())
        if b"\0" in data:
            return FileFacts(path, len(data), sha1, 0, "binary (NUL bytes)", (), (), (), ())
        why = degenerate(data)
        if why:
            return FileFacts(path, len(data), sha1, 0, why, (), (), (), ())
        try:
            with _time_budget(self.budget):
                return self._extract(path, data, sha1)
        except FileTimeout:
            self.parser.reset()  # a cancelled parse would otherwise be resumed by the next file
            return FileFacts(path, len(data), sha1, 0, f"took more than {self.budget:g} s to parse", (), (), (), ())
        except RecursionError:
            return FileFacts(path, len(data), sha1, 0, "nested too deeply to parse", (), (), (), ())
        except Exception as e:  # a bug: say which file
            raise RuntimeError(f"while extracting {path}: {e!r}") from e

    def _extract(self, path: str, data: bytes, sha1: str, expand: bool = True) -> FileFacts:
        """`expand`: whether to expand the file's own macros that define
        functions (Note [definitions written by macros]); not inside an expansion."""
        # tree-sitter checks the deadline itself while it parses: the SIGALRM
        # budget only interrupts Python code. (Not while it matches: a
        # progress callback there crashes tree-sitter 0.26.1.)
        deadline = time.monotonic() + self.budget if self.budget > 0 else float("inf")
        past = lambda *state: time.monotonic() > deadline  # noqa: E731
        original, (data, macros) = data, _masked(data, objc_source.is_objc(path, data))
        # Note [bytes-backed tree]: only a parse from a callback can be given a
        # deadline, but a tree parsed from a callback reads every node's text
        # (and every `#match?` of the queries) through that callback again,
        # 100x slower than from bytes. Small files are parsed from bytes
        # (UNTIMED_PARSE_BYTES); larger ones from a callback under the deadline,
        # then again from the bytes with the finished tree as old tree (no
        # edits): every subtree is reused, the same tree at a quarter of a parse.
        if len(data) <= UNTIMED_PARSE_BYTES or len(data) - data.count(b" ") <= UNTIMED_PARSE_BYTES:
            tree = self.parser.parse(data)
        else:
            tree = self.parser.parse(lambda offset, point: data[offset : offset + 65536], progress_callback=past)
            if tree is None or past():
                raise FileTimeout()
            tree = self.parser.parse(data, old_tree=tree)
        if past():
            raise FileTimeout()
        root = tree.root_node
        why = degenerate(b"", root)
        if why:
            return FileFacts(path, len(data), sha1, 0, why, (), (), (), ())
        by_file: dict[str, list[dict]] = {name: [] for name in QUERY_FILES}
        into = [by_file[name].append for name in self.pattern_file]  # by pattern: a match each, half a million a tree
        for pattern, cap in tree_sitter.QueryCursor(self.query).matches(root):
            into[pattern](cap)
        error_nodes = [n for c in by_file["errors"] for n in c.get("error", ())]

        regions: list[tuple[int, int, str, object]] = []  # Note [regions]
        self._scope_regions(by_file["scopes"], regions)
        self._preproc_regions(by_file["preproc"], regions)
        _recover_namespaces(error_nodes, regions)
        libraries: list[tuple[int, int, tuple[str, str | None, str]]] = []

        defs_raw = []
        for cap in by_file["definitions"]:
            node = cap["definition"][0]
            if node.type == "declaration" and _body(node) is None:
                continue
            info = self._declarator(cap["declarator"][0])
            if info is None:
                continue
            if info[0] == "library":
                libraries.append((node.start_byte, node.end_byte, info[1]))
                continue
            defs_raw.append((node, info))
        defs_raw.sort(key=lambda d: d[0].start_byte)
        for i, (node, _) in enumerate(defs_raw):
            body = _body(node)
            regions.append((body.start_byte, body.end_byte, "def", i))
        for start, end, payload in libraries:
            regions.append((start, end, "lib", payload))

        # (start byte, kind, payload): kind 0 = definition, 1 = call or registration
        points: list[tuple[int, int, object]] = [(n.start_byte, 0, (i, n, info)) for i, (n, info) in enumerate(defs_raw)]
        sites = []  # registrations: Note [registrations among calls]
        callees = self._callees
        for cap in by_file["calls"]:
            callee = cap["callee"][0]
            start = callee.start_byte
            text = data[start : callee.end_byte]  # its `.text`, at half the cost: the tree is parsed from `data`
            key = (callee.kind_id, text)  # (`_callee`, `_registers`), remembered by the callee's spelling
            known = callees.get(key)
            if known is None:
                kind = callee.type
                known = callees[key] = (self._callee(callee, kind, text), _registers(callee, kind, text))
            if known[0] is not None:  # Note [calls kept]: the rest never reach the sweep
                # The call's place is where it starts (a call expression starts
                # where its callee does: calls.scm); its line, the called name's.
                declared = cap.get("call")
                named = _called_name(callee) if b"\n" in text else callee
                if declared is None:
                    points.append((start, 1, ("call", named, known[0])))
                else:
                    points.append((declared[0].start_byte, 1, ("call", named, known[0])))
            if known[1] is not None:
                sites.append((known[1], callee.parent, callee))
            if known[0] is None and text.startswith(_CHECK_MACROS):  # a macro, never a call kept: Note [calls in checks]
                arguments = callee.parent.child_by_field_name("arguments")
                if arguments is not None:
                    regions.append((arguments.start_byte, arguments.end_byte, "cond", ("check", callee)))
        points += [(call.start_byte, 1, ("reg", (registers, call, callee), None)) for registers, call, callee in sites]
        if error_nodes and b"DISPATCH" in original:
            points.extend(_lost_registrations(sites, original))
        if _STUB_SUFFIX in data:
            points += _stub_arguments(data, root)
        if b"at::" in data:
            points += _operator_arguments(data, root, self.ops)
        if expand and macros:
            points += [(use[0], 2, use) for use in _macro_uses(data, macros)]
        # The `#define` bodies `_local_macro_calls` reads (Note [calls in function-local macros]).
        # (an object-like one only when it launches: DWCONV3D_FORWARD_DISPATCH_OTHERS)
        macro_bodies = [body for cap in by_file["macros"] for body in cap["macro.body"]
                        if body.end_byte - body.start_byte <= _MAX_LOCAL_MACRO_BYTES
                        and (body.parent is None or body.parent.type == "preproc_function_def" or b"<<<" in body.text)][:_MAX_LOCAL_MACROS_READ] if expand else []
        # Launches written `kernel<<<grid, block>>>(...)`: the grammar has no such
        # syntax (it reads shifts and comparisons), so they are found in the body
        # text, and placed among the calls: the regions around them give their
        # case/if and `#if` conditions (a launch in a nested definition once, as its).
        if b"<<<" in original:
            found = {}
            # a launch in a `#define`'s body read on its own is its macro's; spans in order, none inside another
            in_macros = [(b.start_byte, b.end_byte) for b in macro_bodies if b"<<<" in original[b.start_byte : b.end_byte]]
            macro_starts = [start for start, _ in in_macros]
            for node, _ in defs_raw:
                body = _body(node)
                chunk = original[body.start_byte : body.end_byte]
                if b"<<<" in chunk:
                    for m in _launches(chunk):
                        at = body.start_byte + m.start()
                        k = bisect.bisect_right(macro_starts, at) - 1
                        if k >= 0 and at < in_macros[k][1]:
                            continue
                        line = body.start_point[0] + 1 + chunk.count(b"\n", 0, m.start())
                        found[at] = ("launch", (_strip_templates(m.group(1).decode("utf-8", "replace")), line), None)
            points += [(at, 1, payload) for at, payload in found.items()]
        points += [(body.start_byte, 3, body) for body in macro_bodies]  # Note [calls in function-local macros]
        expansions = []

        definitions: list[Definition] = [None] * len(defs_raw)  # type: ignore[list-item]
        calls: list[Call] = []
        registrations: list[Registration] = []
        stubs: list[StubDecl] = []
        labels: dict[tuple[str, int], str] = {}
        in_lambdas: list[tuple[int, int, str]] = []  # (call, definition, lambda name): Note [named lambdas]
        local_macros: list[tuple[object, int, str | None]] = []  # (body, definition, preprocessor condition)
        file_macros: list[tuple[object, str | None]] = []  # (body, condition) of `#define`s outside any function
        kernels = b"__global__" in original
        seen = None
        launches: set[tuple[int, str]] = set()  # (line, name) of each launch
        for at, kind, payload, here in _sweep(regions, points):
            if here is not seen:  # what the regions around the point say, read once per set of regions
                seen = here
                live, _, pp, def_index, cond, lib, lam, around = here
                if cond is not None:
                    cond = _label(labels, cond)
                outer = "\n".join(_label(labels, c) for c in around) if around else None
            if kind == 0:
                i, node, info = payload
                definitions[i] = self._definition(node, info, live, pp, original, data, kernels)
                continue
            if kind == 2:  # a use of a macro that defines functions: at file scope only
                if def_index == -1 and not any(tag == "class" for (_, _, tag, _) in live):
                    expansions.append((payload, [p for (_, _, tag, p) in live if tag == "scope"], pp))
                continue
            if kind == 3:  # the body of a `#define`: its launches and calls are those of the functions that use it
                if def_index == -1:
                    file_macros.append((payload, pp))
                elif _macro_used(original, payload, defs_raw, def_index, payload.end_byte):
                    local_macros.append((payload, def_index, pp))
                continue
            what, item, known = payload  # item: the called name's node, a registration's (kind, call, callee), or a lost one's (macro, args, line)
            if what == "call":
                if lam is not None:
                    in_lambdas.append((len(calls), def_index, lam))
                callee, short, call_kind, library, op = known
                calls.append(Call(def_index, callee, short, call_kind, library, op, item.start_point[0] + 1, cond, pp, outer))
            elif what == "launch":
                name, line = item
                short = name.rsplit("::", 1)[-1]
                if lam is not None:
                    in_lambdas.append((len(calls), def_index, lam))
                calls.append(Call(def_index, name, short, "launch", None, None, line, cond, pp, outer))
                launches.add((line, short))
            elif what == "lost":
                macro, args, line = item
                device, capability = _register_key(macro, path, args)
                kernel = None if macro.endswith("NO_CPU_DISPATCH") or len(args) < 2 else _kernel_name(args[-1])
                registrations.append(Registration(-1, "register_dispatch", args[0].rsplit("::", 1)[-1], kernel, device, capability, line, pp))
            else:
                self._registration(path, item, def_index, lib, pp, registrations, stubs)
        if in_lambdas:
            _lambda_conditions(calls, in_lambdas)
        for body, pp in file_macros:  # a launch a macro defined outside a function writes: the using function's
            if b"<<<" in original[body.start_byte : body.end_byte]:
                local_macros.extend((body, i, pp) for i in range(len(defs_raw)) if _macro_used(original, body, defs_raw, i, 0))
        for body, def_index, pp in local_macros:
            for call in self._local_macro_calls(path, original, body, def_index, pp):
                calls.append(call)
                if call.kind == "launch":
                    launches.add((call.line, call.short))
        if launches:  # the blanked launch read as a call of the kernel: it is the launch
            calls = [c for c in calls if c.kind == "launch" or (c.line, c.short) not in launches]
        placed: dict = {}  # a macro used for several types defines the same function at the same line: once
        for use, scopes, pp in expansions:
            self._expansion(path, original, macros, use, scopes, pp, (definitions, calls, registrations, stubs), placed)
        return FileFacts(path, len(data), sha1, len(error_nodes), None, tuple(definitions), tuple(calls), tuple(registrations), tuple(stubs))

    def _local_macro_calls(self, path: str, original: bytes, body, def_index: int, pp: str | None) -> list[Call]:
        """The calls written in the body of a function-local `#define` (Note
        [calls in function-local macros]), as calls of the function it is in;
        read from the file as written (the snippet is masked on its own)."""
        text = _LINE_CONTINUATION.sub(lambda m: b" " + m.group(1)[1:], original[body.start_byte : body.end_byte])
        if not text.strip():
            return []
        first = body.start_point[0] + 1  # the body's first line, the snippet's second
        snippet = b"void __macro__() {\n" + b" " * body.start_point[1] + text + b";\n}"
        facts = self._extract(path, snippet, "", expand=False)
        # a call of one of the macro's parameters (`#define M(fn) fn(x)`) calls what each use passes: no name here
        params = body.parent.child_by_field_name("parameters") if body.parent is not None else None
        own = {p.text for p in params.named_children} if params is not None else set()
        return [c._replace(definition=def_index, line=c.line - 2 + first, preproc=" && ".join(p for p in (pp, c.preproc) if p) or None)
                for c in facts.calls if c.definition == 0 and "#" not in c.callee and 2 <= c.line < snippet.count(b"\n") + 1
                and c.callee.split("::", 1)[0].encode() not in own]

    def _expansion(self, path, original, macros, use, scopes, pp, facts_so_far, placed) -> None:
        """Add the facts of one macro use (Note [definitions written by
        macros]) to `facts_so_far` (definitions, calls, registrations, stubs),
        each once (`placed`: what earlier uses added)."""
        definitions, calls, registrations, stubs = facts_so_far
        at, name, args, close = use
        use_line = original.count(b"\n", 0, at) + 1
        use_end = use_line + original.count(b"\n", at, close)
        arg_lines = [(a.replace(b"\n", b" "), use_line + original.count(b"\n", at, offset), True) for a, offset in args]
        table = _expanded_lines(macros, name, arg_lines, use_line)
        if table is None:
            return
        opening = b"".join(b"namespace {" if s == "(anonymous namespace)" else b"inline namespace " + s.encode() + b" {" if isinstance(s, InlineNamespace)
                           else b"namespace " + s.encode() + b" {" for s in scopes)
        snippet = opening + b"\n".join(text for text, _, _, _ in table) + b"}" * len(scopes)
        facts = self._extract(path, snippet, "", expand=False)

        def place(word: str, k: int) -> int | None:
            """The line that holds `word`, written at line `k` of the expansion:
            of the body, or of the argument that gives it; a name pasted from
            an argument (`op##_kernel`), at that argument's line."""
            if not 0 < k <= len(table):
                return None
            _, origin, written, context = table[k - 1]
            w = word.encode()
            if _holds_word(written, w):
                return origin
            found = next((line for a, line, _ in context if _holds_word(a, w)), None)
            if found is None and b"##" in written:
                found = next((line for a, line, at_use in context if at_use and len(a) > 1 and a in w and _MACRO_PARAM.fullmatch(a)), None)
            return found

        def both(a: str | None, b: str | None) -> str | None:
            return " && ".join(c for c in (a, b) if c) or None

        index: dict[int, int] = {}
        for i, d in enumerate(facts.definitions):
            line = place(d.op.split(".")[0] if d.op else d.short, d.line)
            if line is None:
                continue
            end = table[d.end_line - 1][1] if d.end_line <= len(table) else use_end
            d = d._replace(line=line, end_line=end if end >= line else max(use_end, line), condition=both(pp, d.condition))
            if d not in placed:
                placed[d] = len(definitions)
                definitions.append(d)
            index[i] = placed[d]
        for c in facts.calls:
            line = place(c.short, c.line)
            if c.definition in index and line is not None:
                _once(placed, calls, c._replace(definition=index[c.definition], line=line, preproc=both(pp, c.preproc)))
        for r in facts.registrations:
            line = place(r.name, r.line)
            if line is not None and r.kind == "register_dispatch" and r.definition == -1:
                _once(placed, registrations, r._replace(line=line, preproc=both(pp, r.preproc)))
        for st in facts.stubs:
            line = place(st.name, st.line)
            if line is not None:
                _once(placed, stubs, st._replace(line=line, preproc=both(pp, st.preproc)))

    # -- regions ----------------------------------------------------------

    def _scope_regions(self, matches, regions) -> None:
        for cap in matches:
            if "namespace" in cap:
                body = cap["namespace.body"][0]
                regions.append((body.start_byte, body.end_byte, "scope", _namespace_name(cap["namespace"][0])))
            elif "class.body" in cap:
                body = cap["class.body"][0]
                name = _strip_templates(cap["class.name"][0].text.decode("utf-8", "replace"))
                regions.append((body.start_byte, body.end_byte, "class", name))
            elif "case" in cap:
                case = cap["case"][0]
                regions.append((case.start_byte, case.end_byte, "cond", ("case", case)))
            elif "lambda.body" in cap:
                body = cap["lambda.body"][0]
                regions.append((body.start_byte, body.end_byte, "lambda", cap["lambda.name"][0].text.decode("utf-8", "replace")))
            elif "if.then" in cap:
                # Labels are written only for the regions a call is found in.
                then = cap["if.then"][0]
                condition = cap["if.condition"][0]
                regions.append((then.start_byte, then.end_byte, "cond", ("if", condition)))
                other = cap["if"][0].child_by_field_name("alternative")
                if other is not None and other.type == "else_clause":
                    regions.append((other.start_byte, other.end_byte, "cond", ("else", condition)))

    def _preproc_regions(self, matches, regions) -> None:
        for cap in matches:
            if "ifdef" in cap:
                node = cap["ifdef"][0]
                name = cap["name"][0].text.decode("utf-8", "replace")
                negated = node.child(0).type == "#ifndef"
                if negated and _INCLUDE_GUARD.search(name):
                    continue
                cond = f"!defined({name})" if negated else f"defined({name})"
                body_start = cap["name"][0].end_byte
            else:
                node = cap["if"][0]
                cond = _SPACE.sub(" ", cap["condition"][0].text.decode("utf-8", "replace")).strip()
                body_start = cap["condition"][0].end_byte
            alt = node.child_by_field_name("alternative")
            body_end = alt.start_byte if alt is not None else node.end_byte
            regions.append((body_start, body_end, "pp", cond))
            if alt is not None:
                regions.append((alt.start_byte, alt.end_byte, "pp", _negate(cond)))

    # -- definitions ------------------------------------------------------

    def _declarator(self, node) -> tuple | None:
        """("name", text) | ("structured", macro, args) | ("library", (macro, ns, key))."""
        while node is not None and node.type in _UNWRAP:
            node = node.child_by_field_name("declarator") or (node.named_children[-1] if node.named_children else None)
        if node is not None and node.type in ("operator_cast", "qualified_identifier"):
            cast = _conversion_operator(node)
            return ("name", cast) if cast else None
        if node is None or node.type != "function_declarator":
            return None
        inner = node.child_by_field_name("declarator")
        if inner is None:
            return None
        if inner.type == "function_declarator":
            macro = inner.child_by_field_name("declarator")
            params = inner.child_by_field_name("parameters")
            if macro is not None and macro.type == "identifier" and params is not None:
                name = macro.text.decode()
                if name in _STRUCTURED:
                    args = [_SPACE.sub("", p.text.decode("utf-8", "replace")) for p in params.named_children]
                    return ("structured", name, args)
            return None
        text = inner.text.decode("utf-8", "replace")
        if inner.type == "identifier" and text.startswith("TORCH_LIBRARY"):
            params = node.child_by_field_name("parameters")
            args = [_SPACE.sub("", p.text.decode("utf-8", "replace")) for p in params.named_children] if params else []
            ns = args[0] if args else None
            key = args[1] if text.startswith("TORCH_LIBRARY_IMPL") and len(args) > 1 else None
            return ("library", (text, ns, key))
        return ("name", _strip_templates(text))

    def _definition(self, node, info, stack, pp, data: bytes, masked: bytes, kernels: bool) -> Definition:
        """`kernels`: whether the file holds `__global__` anywhere."""
        declarator = node.child_by_field_name("declarator")
        scopes = [payload for (_, _, tag, payload) in stack if tag in ("scope", "class")]
        in_class = bool(stack) and any(tag == "class" for (_, _, tag, _) in stack)
        op = None
        if info[0] == "structured":
            kind, namespace, method = _STRUCTURED[info[1]]
            args = info[2]
            op = ".".join(args[:2]) if info[1].endswith("2") else (args[0] if args else "?")
            struct = "structured_" + "_".join(args[:2] if info[1].endswith("2") else args[:1])
            # The macro expands to `structured_<op>::impl` in at::native (meta: at::meta).
            name = "::".join([*scopes, struct, method]) if scopes else f"at::{namespace}::{struct}::{method}"
        else:
            name = "::".join([*scopes, info[1]]) if scopes else info[1]
            kind = "method" if in_class or ("::" in info[1] and not info[1].startswith(("at::", "c10::", "torch::"))) else "function"
            if kernels:
                start = node.start_byte
                while start > 0 and masked[start - 1] in b" \t\r\n":  # back over blanked attributes
                    start -= 1
                if b"__global__" in data[start : declarator.start_byte]:
                    kind = "global_kernel"
        name = name.replace("::::", "::")
        hidden = {"(anonymous namespace)", *(s for s in scopes if isinstance(s, InlineNamespace))}  # Note [inline namespaces]
        lookup = "::".join([p for p in name.split("::") if p not in hidden]) if "(anon" in name or len(hidden) > 1 else name
        short = name.rsplit("::", 1)[-1]
        cast = name.find("operator ")  # a conversion operator's type may hold `::` (`operator const std::string&`)
        if cast >= 0 and name[cast - 2 : cast] in ("", "::"):
            short = name[cast:]
        # The line is the name's: a return type spread over lines before it
        # (`inline std::enable_if_t<...>\nmkldnn_gemm(`) must not move the location
        # off the name, nor a `&` or `*` it ends with (`Tensor&\n_scaled_mm_out_cuda(`:
        # the reference declarator starts at the `&`).
        named = declarator
        while named is not None and named.type in _UNWRAP:
            named = named.child_by_field_name("declarator") or (named.named_children[-1] if named.named_children else None)
        if named is not None and named.type == "function_declarator":
            named = named.child_by_field_name("declarator") or named
        line = (named or declarator or node).start_point[0] + 1
        return Definition(name, lookup, short, kind, line, node.end_point[0] + 1, pp, op)

    # -- calls and registrations -----------------------------------------

    def _member(self, field: bytes) -> tuple | None:
        """(callee, short, kind, library, op) of a call of the method `field`
        on an object that is no temporary of a class."""
        short = _strip_templates(field.decode("utf-8", "replace"))  # `x.template data_ptr<T>()`: data_ptr
        if short in _SKIPPED_METHODS:
            return None
        kind, library, op = classify_call("." + short, True, self.ops)
        return "." + short, short, kind, library, op

    def _callee(self, callee_node, t: str, text: bytes) -> tuple | None:
        """(callee, short, kind, library, op) of a call's function node (of
        type `t` and text `text`); None when no name is called."""
        if t == "field_expression":
            field = callee_node.child_by_field_name("field")
            if field is None:
                return None
            # Remembered by the method's spelling alone: the receiver's varies far more.
            known = self._members.get(field.text, False)
            if known is False:
                known = self._members[field.text] = self._member(field.text)
            if known is None:
                return None
            receiver = _constructed_type(callee_node.child_by_field_name("argument"))
            if receiver is not None:
                # `DimMask().flip()`: a method of a temporary of a class, never a Tensor's operator
                return f"{receiver}::{known[1]}", known[1], "direct", None, None
            return known if known[1] else None
        elif t in ("identifier", "qualified_identifier", "template_function", "scoped_identifier", "template_type"):
            callee = _strip_templates(text.decode("utf-8", "replace"))
            if "<" in callee:  # `mi < size<1>(acc)` misread as a template's arguments: the call is the name after them
                callee = _LAST_NAME.search(callee).group()
            short = callee.rsplit("::", 1)[-1]
        elif t == "call_expression" and (made := _called_temporary(callee_node)) is not None:
            callee, short = f"{made}::operator()", "operator()"  # `cuda_scatter_gather_base_kernel<true, false>()(self, ...)`
        elif t == "compound_literal_expression" and (made := _braced_temporary(callee_node)) is not None:
            callee, short = f"{made}::operator()", "operator()"  # `sum_functor<scalar_t>{}(iter)`
        else:
            return None  # calls of lambdas, of call results, of parenthesised expressions
        if not short or callee in _SKIPPED_FUNCTIONS or (callee.startswith("std::") and vendors.of_call(callee) is None):
            return None
        kind, lib, op = classify_call(callee, False, self.ops)
        if kind == "direct" and not any(c.islower() for c in short):
            return None  # a macro (Note [calls kept])
        return callee, short, kind, lib, op

    def _registration(self, path, found, def_index, lib, pp, registrations, stubs) -> None:
        """Facts of a call that may register: `found` is (what `_registers`
        said of its callee, the call, the callee). A registration's line is
        that of the name it registers (the operator's string, the stub), which
        may follow the macro's: `REGISTER_DISPATCH(` / `    some_stub, ...`; a
        dtype switch's, its macro's (`AT_DISPATCH_...(` / `    "sum_cpu", ...`)."""
        registers, site, callee = found
        arguments = site.child_by_field_name("arguments").named_children
        if registers == "library":
            method = callee.child_by_field_name("field").text.decode()
            if not arguments:  # `m.impl()` names no operator
                return
            first = arguments[0].text.decode("utf-8", "replace")
            m = _STRING.search(first)
            if m is None:
                return
            op = m.group(1)
            line = arguments[0].start_point[0] + 1 + first.count("\n", 0, m.start())  # `m.def(torch::schema(` / `"ns::op(...)"`
            macro, ns, key = lib if lib else (None, None, None)
            if method == "def":
                op = op.split("(", 1)[0].strip()
            if "::" in op:
                ns, op = op.split("::", 1)
            target = None
            if len(arguments) > 1 and arguments[1].type != "initializer_list":  # m.def(schema, {tags}) names no kernel
                target = _kernel_name(arguments[1].text.decode("utf-8", "replace"))
            kind = "library_def" if method == "def" else "library_impl"
            registrations.append(Registration(def_index, kind, op, target, key, ns, line, pp))
            return
        macro = callee.text.decode()
        args = [_SPACE.sub("", a.text.decode("utf-8", "replace")) for a in arguments]
        line = site.start_point[0] + 1
        if macro == "DECLARE_DISPATCH":
            if args:
                stubs.append(StubDecl("declare", args[-1], ",".join(args[:-1]) or None, arguments[-1].start_point[0] + 1, pp))
        elif macro == "DEFINE_DISPATCH":
            if args:
                stubs.append(StubDecl("define", args[0], None, arguments[0].start_point[0] + 1, pp))
        elif macro.startswith("AT_DISPATCH_"):
            name = None
            groups = [macro]
            for a in arguments:
                text = a.text.decode("utf-8", "replace")
                if a.type == "string_literal" and name is None:
                    m = _STRING.search(text)
                    name = m.group(1) if m else text
                elif a.type in ("identifier", "qualified_identifier") and re.fullmatch(r"(at::)?(ScalarType::|k)[A-Z]\w*", text):
                    groups.append(text.rsplit("::", 1)[-1])
                elif a.type == "call_expression" and text.startswith("AT_EXPAND("):
                    groups.append(_SPACE.sub("", text[len("AT_EXPAND(") : -1]))
            registrations.append(Registration(def_index, "at_dispatch", name or "", ", ".join(groups[1:]) or None, macro, None, line, pp))
        elif args:
            device, capability = _register_key(macro, path, args)
            kernel = None if macro.endswith("NO_CPU_DISPATCH") or len(args) < 2 else _kernel_name(args[-1])
            # `REGISTER_DISPATCH(cpublas::gemm_stub, ...)`: the stub is declared (and called) by its own name
            stub = args[0].rsplit("::", 1)[-1]
            registrations.append(Registration(def_index, "register_dispatch", stub, kernel, device, capability, arguments[0].start_point[0] + 1, pp))


# Note [registrations among calls]
# Note [stubs passed on]
# `impl_func_cum_ops(self, dim, result, cumsum_stub)` hands a stub to a helper
# that calls it by its parameter's name (`stub(self.device().type(), ...)`):
# no line calls cumsum_stub, yet running the caller runs it. A name ending in
# `_stub` passed as an argument of a call is recorded as an "argument" at its
# line; `store` makes it a stub call when the tree declares that stub and the
# file defines no function of its name (Note [stub calls]), and it is no edge
# otherwise. Every stub passed on in 2.6.0 (116 places) is named `*_stub`: the
# suffix finds them cheaply, the declaration makes them stubs.
_STUB_SUFFIX = b"_stub"
_NAME_BYTES = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_:")
_ARGUMENT_END = re.compile(rb"[ \t\r\n]*[,)]")


def _stub_arguments(data: bytes, root) -> list[tuple[int, int, tuple]]:
    """Sweep points of the `*_stub` names passed as arguments of calls other
    than macros' (Note [stubs passed on])."""
    points = []
    i = data.find(_STUB_SUFFIX)
    while i >= 0:
        end = i + len(_STUB_SUFFIX)
        start = i
        while start > 0 and data[start - 1] in _NAME_BYTES:
            start -= 1
        before = start
        while before > 0 and data[before - 1] in b" \t\r\n&":
            before -= 1
        if before > 0 and data[before - 1] in b"(," and start < i and _ARGUMENT_END.match(data, end):
            point = _stub_argument(data, root, start, end)
            if point is not None:
                points.append(point)
        i = data.find(_STUB_SUFFIX, end)
    return points


def _stub_argument(data: bytes, root, start: int, end: int) -> tuple[int, int, tuple] | None:
    node = _passed_name(data, root, start, end)
    if node is None:
        return None
    name = data[start:end].decode("utf-8", "replace").removeprefix("::")
    return (start, 1, ("call", node, (name, name.rsplit("::", 1)[-1], "argument", None, None)))


def _passed_name(data: bytes, root, start: int, end: int):
    """The node of the name at `start:end` when it is an argument of a call
    other than a macro's (`&name` and `static_cast<T>(name)` too); else None."""
    node = root.descendant_for_byte_range(start, end)
    if node is None or (node.start_byte, node.end_byte) != (start, end) or node.type not in ("identifier", "qualified_identifier"):
        return None
    holder = node.parent
    if holder is not None and holder.type == "pointer_expression":  # `&cumsum_stub`
        holder = holder.parent
    call = holder.parent if holder is not None and holder.type == "argument_list" else None
    function = call.child_by_field_name("function") if call is not None and call.type == "call_expression" else None
    if function is not None and data[function.start_byte : function.end_byte].startswith(_CASTS):  # `static_cast<OutFunc>(name)`
        holder = call.parent
        call = holder.parent if holder is not None and holder.type == "argument_list" else None
        function = call.child_by_field_name("function") if call is not None and call.type == "call_expression" else None
    if function is None or _MACRO_NAME.fullmatch(data[function.start_byte : function.end_byte].rsplit(b"::", 1)[-1]):
        return None  # not an argument; or a macro's (REGISTER_DISPATCH, DECLARE_DISPATCH...), which registrations read
    return node


_MACRO_NAME = re.compile(rb"[A-Z][A-Z0-9_]*")
_CASTS = (b"static_cast", b"reinterpret_cast")

# Note [operators passed on]
# `unary_op_impl_with_complex_to_float(self, at::abs_out)` and
# `comparison_op(self, other, static_cast<OutFunc>(at::logical_and_out))` pass
# an operator's function to a helper that calls its parameter
# (`out_impl(result, self)`): no line calls `at::abs_out` by name, and
# `stack aten::abs` ended at the helper. An `at::` function of an operator
# passed as an argument of a call (not a macro's; through `&` or a cast too) is
# a dispatcher call of that operator at the line that passes it, as a stub
# passed on is a stub call (Note [stubs passed on]).
# Found by the name first (a pattern that starts with a literal is searched
# fast; one that starts at every `(` and `,` cost 0.5 s over the 2.6.0 tree),
# then what comes before it is read.
_OPERATOR_ARGUMENT = re.compile(rb"at::[a-z_][a-z0-9_]*(?=[ \t\r\n]*[,)])")
_ARGUMENT_START = re.compile(rb"[(,][ \t\r\n&]*(?:(?:static|reinterpret)_cast<[^<>()]*>\()?(::)?$")


def _operator_arguments(data: bytes, root, ops: OperatorNames) -> list[tuple[int, int, tuple]]:
    """Sweep points of the operator functions passed as arguments of calls (Note [operators passed on])."""
    points = []
    for m in _OPERATOR_ARGUMENT.finditer(data):
        before = _ARGUMENT_START.search(data, max(0, m.start() - 96), m.start())
        if before is None:
            continue
        name = m.group(0).decode("ascii")
        kind, library, op = classify_call(name, False, ops)
        if kind != "dispatcher":
            continue
        start = m.start() - (2 if before.group(1) else 0)  # `::at::abs_out` is one name
        node = _passed_name(data, root, start, m.end())
        if node is not None:
            points.append((start, 1, ("call", node, (name, name.rsplit("::", 1)[-1], kind, library, op))))
    return points


# Registrations are calls: of a macro (`REGISTER_DISPATCH(add_stub, &add_kernel)`,
# `DECLARE_DISPATCH`, `AT_DISPATCH_FLOATING_TYPES(...)`) or of a library's
# `m.impl(...)` / `m.def(...)` in a TORCH_LIBRARY block. They are picked from
# the calls the query finds, by the callee's spelling (remembered with its
# call kind), not by patterns of their own: a `#match?` predicate is checked
# by calling back into Python for every candidate call, which cost more than
# reading the few hundred registrations of a tree.
_REGISTRATION_MACRO = re.compile(r"DECLARE_DISPATCH|DEFINE_DISPATCH|(ALSO_)?REGISTER_[A-Z0-9_]*DISPATCH|AT_DISPATCH_[A-Z0-9_]+")
_LIBRARY_METHODS = frozenset((b"impl", b"def"))


def _registers(callee, t: str, text: bytes) -> str | None:
    """"macro" when a call of `callee` (a function node of type `t` and text
    `text`) may be a registration macro's, "library" when it may be
    `m.impl`/`m.def`, else None."""
    if t == "identifier" and text[:1] in b"ADR":  # DECLARE_, DEFINE_, REGISTER_, ALSO_, AT_DISPATCH_
        return "macro" if _REGISTRATION_MACRO.fullmatch(text.decode("utf-8", "replace")) else None
    if t == "field_expression" and text.endswith((b"impl", b"def")):
        argument = callee.child_by_field_name("argument")
        field = callee.child_by_field_name("field")
        if argument is not None and argument.type == "identifier" and field is not None and field.type == "field_identifier" and field.text in _LIBRARY_METHODS:
            return "library"
    return None


# A stub registration written at the start of a line, as every file writes them.
_REGISTER_LINE = re.compile(rb"^[ \t]*((?:ALSO_)?REGISTER_[A-Z0-9_]*DISPATCH)[ \t]*\(([^()]*(?:\([^()]*\)[^()]*)*)\)", re.M)


def _lost_registrations(sites, original: bytes) -> list[tuple[int, int, tuple]]:
    """Note [lost registrations]: REGISTER_DISPATCH lines that an error region
    swallowed (FlashAttentionKernel.cpp's `ALSO_REGISTER_AVX512_DISPATCH`
    after `} // anonymous namespace` parses as part of a broken expression),
    read from the text: sweep points (byte, 1, ("lost", (macro, args, line), None))."""
    seen = {call.start_byte for registers, call, _ in sites if registers == "macro"}
    lost = []
    for m in _REGISTER_LINE.finditer(original):
        if m.start(1) in seen or original[max(0, m.start() - 3) : m.start()].rstrip(b"\r\n").endswith(b"\\"):
            continue  # captured already, or a line of a macro's definition
        args = [_SPACE.sub("", a.decode("utf-8", "replace")) for a in m.group(2).split(b",")]
        if args and args[0]:
            stub_at = m.end(2) - len(m.group(2).lstrip())  # its line is the stub's, as for the others
            line = original.count(b"\n", 0, stub_at) + 1
            lost.append((m.start(1), 1, ("lost", (m.group(1).decode(), args, line), None)))
    return lost


_STRAY_CLOSE = re.compile(rb"^(\s*}\s*;?\s*(//[^\n]*)?)+$")


def _namespace_name(node) -> str:
    """A namespace definition's name (`a::b` for a nested one); an InlineNamespace for `inline namespace`."""
    name = node.child_by_field_name("name")
    text = _SPACE.sub("", name.text.decode("utf-8", "replace")) if name else "(anonymous namespace)"
    return InlineNamespace(text) if node.child(0).type == "inline" else text


def _recover_namespaces(error_nodes, regions) -> None:
    """Note [early-closed namespaces]: when unbalanced braces in the branches
    of an #if make the grammar close a namespace early, the namespace's real
    closing brace is left over as an ERROR holding only `}`. The definitions
    between the two still belong to the namespace: extend its region to the
    stray brace (as many namespaces as stray braces, innermost last). A
    namespace takes the last of its stray braces only: a region each would
    qualify what lies inside it by the namespace once per brace."""
    extended: dict[tuple[int, int], tuple[int, str]] = {}
    for err in error_nodes:
        text = err.text
        if b"}" not in text or not _STRAY_CLOSE.match(text):
            continue
        count = text.count(b"}")
        sib = err.prev_named_sibling
        while sib is not None and sib.type != "namespace_definition":
            sib = sib.prev_named_sibling
        if sib is None:
            continue
        names = [_namespace_name(sib)]
        cur = sib
        while len(names) < count:
            body = cur.child_by_field_name("body")
            inner = [c for c in body.named_children if c.type != "comment"] if body else []
            if not inner or inner[-1].type != "namespace_definition":
                break
            cur = inner[-1]
            names.append(_namespace_name(cur))
        key = (sib.start_byte, sib.end_byte)
        if key not in extended or extended[key][0] < err.end_byte:
            extended[key] = (err.end_byte, "::".join(names))
    regions.extend((start, end, "scope", names) for (_, start), (end, names) in extended.items())


def _macro_used(original: bytes, macro_body, defs_raw, index: int, after: int) -> bool:
    """Whether function `index` of `defs_raw` uses the macro whose `#define`
    body is `macro_body`, after byte `after`, in its own text (Note [calls in
    function-local macros]): a function whose text a parse error stretched
    over later `#define`s and functions does not own those (DepthwiseConv3d.cu's
    forward function, over the backward kernels' launch macros and the
    functions that use them), and a function that uses a macro defined before
    it, at file scope, runs its launches."""
    name_node = macro_body.parent.child_by_field_name("name") if macro_body.parent is not None else None
    body = _body(defs_raw[index][0])
    if name_node is None or body is None:
        return True
    start, end = max(body.start_byte, after), body.end_byte
    if start >= end:
        return False
    # the other functions inside this one's text: their uses are theirs
    inside = [(b.start_byte, b.end_byte) for j, (node, _) in enumerate(defs_raw)
              if j != index and (b := _body(node)) is not None and start <= b.start_byte and b.end_byte <= end]
    name, text = name_node.text, original[start:end]
    at = text.find(name)
    while at >= 0:
        before, following = text[at - 1 : at], text[at + len(name) : at + len(name) + 1]
        if not (before.isalnum() or before == b"_") and not (following.isalnum() or following == b"_") \
                and not any(a <= start + at < b for a, b in inside):
            return True
        at = text.find(name, at + 1)
    return False


def _body(definition):
    """A definition's body: its compound statement, or the `{}` of a function
    the grammar reads as brace-initialised (definitions.scm), only where that
    declaration declares nothing else and parsed cleanly (error recovery can
    read a constructor's initializer list so); else None."""
    if definition.type != "declaration":
        return definition.child_by_field_name("body")
    declarators = definition.children_by_field_name("declarator")
    if len(declarators) != 1 or definition.has_error:
        return None
    value = declarators[0].child_by_field_name("value")
    return value if value is not None and value.type == "initializer_list" and value.named_child_count == 0 else None


def _conversion_operator(node) -> str | None:
    """The name of a conversion operator's declarator (`operator bool`,
    `A::operator const std::string&`: no parameter list, and the type's
    spelling kept as written), else None."""
    top = node
    while node.type == "qualified_identifier":
        node = node.child_by_field_name("name")
        if node is None:
            return None
    if node.type != "operator_cast":
        return None
    fn = node.child_by_field_name("declarator")
    while fn is not None and fn.type != "abstract_function_declarator":
        fn = fn.child_by_field_name("declarator") or (fn.named_children[-1] if fn.named_children else None)
    params = fn.child_by_field_name("parameters") if fn is not None else None
    if params is None:
        return None
    text = top.text
    scope = _strip_templates(text[: node.start_byte - top.start_byte].decode("utf-8", "replace"))
    return scope + _SPACE.sub(" ", text[node.start_byte - top.start_byte : params.start_byte - top.start_byte].decode("utf-8", "replace")).strip()


def _constructed_type(node) -> str | None:
    """The class of a temporary built in place (`DimMask()`, `at::cuda::OptionalCUDAGuard(d)`), else None."""
    if node is None or node.type != "call_expression":
        return None
    function = node.child_by_field_name("function")
    if function is None or function.type not in ("identifier", "qualified_identifier", "template_function"):
        return None
    name = _strip_templates(function.text.decode("utf-8", "replace"))
    short = name.rsplit("::", 1)[-1]
    # a class name: CamelCase, not a macro, not a Tensor-returning factory
    if short[:1].isupper() and any(c.islower() for c in short) and short not in ("Tensor", "TensorBase", "Scalar"):
        return name
    return None


def _called_temporary(call) -> str | None:
    """The class of a function object built in place to be called at once
    (`cpu_scatter_gather_base_kernel<>()(self, dim, ...)`): a class by its
    spelling (`_constructed_type`), or any name given template arguments and
    no arguments. None for other calls of a call's result (`get_fn()(x)`)."""
    made = _constructed_type(call)
    if made is not None:
        return made
    function = call.child_by_field_name("function")
    arguments = call.child_by_field_name("arguments")
    if function is None or function.type != "template_function" or arguments is None or arguments.named_child_count:
        return None
    return _strip_templates(function.text.decode("utf-8", "replace"))


def _braced_temporary(literal) -> str | None:
    """The class of a function object brace-initialised to be called at once
    (`UniqueCub<scalar_t>{}(self, ...)`, `sum_functor<scalar_t>{}(iter)`):
    the literal's type, named (not `decltype(...)` or a primitive type)."""
    kind = literal.child_by_field_name("type")
    if kind is None or kind.type not in ("type_identifier", "template_type", "qualified_identifier"):
        return None
    return _strip_templates(kind.text.decode("utf-8", "replace"))


def _kernel_name(text: str) -> str | None:
    """The function a registration names: `&mul_kernel`, `TORCH_FN(wrapper_CPU_add)`."""
    text = _strip_templates(text)
    names = [n for n in _IDENT.findall(text) if n not in _LIB_WRAPPERS and n not in ("static_cast", "reinterpret_cast")]
    if not names:
        return None
    return names[-1] if not text.startswith("&") else names[0]


_ATOM = re.compile(r"!?\s*(defined\s*\(\s*\w+\s*\)|defined\s+\w+|[\w:]+(\([^()]*\))?)")


def _called_name(callee):
    """The node of the name a callee calls, for a callee over several lines
    (`TensorIteratorConfig()` / `.check_all_same_dtype(false)`): the field of
    a member access, the last part of a qualified name, the template's name."""
    node = callee
    while node.type in _NAMED_CALLEES:
        inner = node.child_by_field_name(_NAMED_CALLEES[node.type])
        if inner is None:
            break
        node = inner
    return node


_NAMED_CALLEES = {"field_expression": "field", "qualified_identifier": "name", "template_function": "name", "template_method": "name",
                  "template_type": "name"}


def _negate(cond: str) -> str:
    """`!cond`, parenthesised unless `cond` is one name, call or defined(X)."""
    if not _ATOM.fullmatch(cond):
        return f"!({cond})"
    return cond[1:].strip() if cond.startswith("!") else f"!{cond}"


def _condition_label(kind: str, node) -> str:
    """"case ConvBackend::Cudnn", "default", "if (x)", "else of if (x)",
    "inside TORCH_CHECK"."""
    if kind == "check":
        return f"inside {node.text.decode('utf-8', 'replace')}"
    if kind == "case":
        value = node.child_by_field_name("value")
        return f"case {_SPACE.sub(' ', value.text.decode('utf-8', 'replace'))}" if value else "default"
    text = _SPACE.sub(" ", node.text.decode("utf-8", "replace"))
    if len(text) > _COND_MAX:
        text = text[: _COND_MAX - 4] + "...)"
    return f"if {text}" if kind == "if" else f"else of if {text}"


def _preproc_of(live) -> str | None:
    """The preprocessor conditions of the regions around a point, joined."""
    conds = [r[3] for r in live if r[2] == "pp"]
    return " && ".join(conds) if conds else None


def _label(labels: dict, cond: tuple) -> str:
    """The label of a case/if region's condition, made once per region."""
    key = (cond[0], cond[1].start_byte)
    label = labels.get(key)
    if label is None:
        label = labels[key] = _condition_label(*cond)
    return label


def _context_of(live) -> tuple[int, tuple | None, tuple | None, str | None, list[tuple]]:
    """Of the regions around a point, outer to inner: (innermost definition,
    innermost case/if inside it, TORCH_LIBRARY block, the named lambda whose
    body holds the point with no case/if between them, the case/ifs around
    the innermost inside the definition, outermost first)."""
    cond = None
    def_index = -1
    lib = None
    lam = None
    around: list[tuple] = []
    for _, _, tag, payload in reversed(live):
        if tag == "cond" and def_index == -1:
            if cond is None:
                cond = payload
            else:
                around.append(payload)
        elif tag == "lambda" and cond is None and lam is None and def_index == -1:
            lam = payload
        elif tag == "def" and def_index == -1:
            def_index = payload
        elif tag == "lib" and lib is None:
            lib = payload
    around.reverse()
    return def_index, cond, lib, lam, around


def _lambda_conditions(calls: list[Call], in_lambdas: list[tuple[int, int, str]]) -> None:
    """Note [named lambdas]: a call in the body of `auto loop = [&](...) {...};`,
    under no case/if of the body, runs where `loop(...)` is first called in
    the same definition, so it takes that call's condition. A lambda only
    passed on (`parallel_for(0, n, grain, loop)`) keeps the condition around
    its definition."""
    first_use: dict[tuple[int, str], tuple[str | None, str | None]] = {}
    for c in calls:
        if c.kind == "direct" and c.callee == c.short:
            first_use.setdefault((c.definition, c.short), (c.condition, c.outer))
    for i, definition, name in in_lambdas:
        if (definition, name) in first_use:
            condition, outer = first_use[(definition, name)]
            calls[i] = calls[i]._replace(condition=condition, outer=outer)


def _sweep(regions, points):
    """(start, kind, payload, context) for each point in byte order (Note
    [regions]). A context is what the regions around the point say: (the
    regions, outer to inner; the first end among them; then as `_preproc_of`
    and `_context_of` read them: preprocessor condition, innermost
    definition, case/if, TORCH_LIBRARY block, named lambda, the case/ifs
    around the case/if). It is the same object as for the previous point when
    the regions are the same, so a reader works out what they say once for a
    run of points.

    Each region pushed on the stack gets its context from the one below it
    (`_inner`): reading all the regions again at every change cost more than
    the rest of the sweep. The stack may hold regions that ended before the
    point (preprocessor regions can cross syntax regions, and only the top is
    popped): those are left out, and the context is read from the rest.
    Nothing changes before `boundary`, the next start of a region or the
    first end of a region around the point."""
    regions.sort(key=_region_order)
    points.sort(key=_POINT_ORDER)
    stack: list[tuple] = []  # contexts, each of the stack up to its region (the last of its regions)
    here = _OUTSIDE
    boundary = -1
    ri = 0
    n = len(regions)
    for start, kind, payload in points:
        if start < boundary:
            yield start, kind, payload, here
            continue
        while ri < n and regions[ri][0] <= start:
            r = regions[ri]
            ri += 1
            while stack and stack[-1][0][-1][1] <= r[0]:
                stack.pop()
            if r[1] > start:
                stack.append(_inner(stack[-1] if stack else _OUTSIDE, r))
        while stack and stack[-1][0][-1][1] <= start:
            stack.pop()
        top = stack[-1] if stack else _OUTSIDE
        if top[1] > start:  # no region on the stack has ended
            here = top
        else:
            live = [c[0][-1] for c in stack if c[0][-1][1] > start]
            if live != here[0]:
                def_index, cond, lib, lam, around = _context_of(live)
                here = (live, min(map(_END, live), default=_NEVER), _preproc_of(live), def_index, cond, lib, lam, tuple(around))
        boundary = here[1]
        if ri < n and regions[ri][0] < boundary:
            boundary = regions[ri][0]
        yield start, kind, payload, here


def _inner(outer: tuple, region: tuple) -> tuple:
    """The context (see `_sweep`) of the regions of `outer` and `region`
    inside them: what `_preproc_of` and `_context_of` read of them, from what
    they read of `outer`'s."""
    live, end, pp, def_index, cond, lib, lam, around = outer
    tag, payload = region[2], region[3]
    if tag == "cond":
        around = (*around, cond) if cond is not None else ()
        cond, lam = payload, None
    elif tag == "def":
        def_index, cond, lam, around = payload, None, None, ()
    elif tag == "lambda":
        lam = payload
    elif tag == "pp":
        pp = payload if pp is None else f"{pp} && {payload}"
    elif tag == "lib":
        lib = payload
    return [*live, region], min(end, region[1]), pp, def_index, cond, lib, lam, around


_NEVER = float("inf")
_END = operator.itemgetter(1)
_OUTSIDE = ([], _NEVER, None, -1, None, None, None, ())  # the context of a point in no region


def _region_order(r):
    return (r[0], -r[1])


_POINT_ORDER = operator.itemgetter(0, 1)


@functools.lru_cache(maxsize=4)
class _time_budget:
    """Raise FileTimeout in this thread after `seconds` (main thread only: a
    SIGALRM timer; elsewhere no budget). Python code is interrupted between
    bytecodes; a long call into tree-sitter ends first, which is why parsing
    also checks a deadline itself (see `Extractor._extract`)."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.previous = None

    def __enter__(self) -> None:
        if self.seconds <= 0 or threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
            return
        # _signal's own functions: signal.signal converts handlers to and from
        # enums, which cost more than the timer, twice a file.
        self.previous = _signal.signal(signal.SIGALRM, _expire)
        _signal.setitimer(signal.ITIMER_REAL, self.seconds)

    def __exit__(self, *exc) -> None:
        if self.previous is not None:
            _signal.setitimer(signal.ITIMER_REAL, 0)
            _signal.signal(signal.SIGALRM, self.previous)


def _expire(signum, frame):
    raise FileTimeout()


def extractor(ops: OperatorNames) -> Extractor:
    return Extractor(ops)
