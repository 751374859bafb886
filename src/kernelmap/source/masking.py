"""A file's text made parseable, byte for byte: attribute macros, CUDA
qualifiers, launch configurations, data tables and preprocessor alternatives
that make tree-sitter's grammar read a file askew are blanked, with every
offset and line kept, so the facts read from the masked text point into the
file as it is (Note [masked attributes], Note [data tables], Note [calls in
checks])."""

from __future__ import annotations

import functools
import re

from kernelmap.source import objc as objc_source
from kernelmap.source.preprocess import _BLANKS, _DEFINE, Directives, _local_macros, _Macro, _spaces, _starts_word


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
# call] in graph.sites), and its ends rank as setup.
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


def _zero_braces(m: re.Match) -> bytes:
    text = m.group(0)
    i = text.index(b"{")
    return text[:i] + b"0" + b" " * (len(text) - i - 1)


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
