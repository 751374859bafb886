"""The expansion rules of the call graph: which devices it follows, which
branches belong to another device or backend, which calls are tensor
plumbing, where direct calls are followed, and what a launch-like call is.

Note [branches]
A call under a simple switch on a backend (`case ConvBackend::Cudnn:`) is
followed only when the backend belongs to the selected device; the others are
marked (`branch`) and left unexpanded unless all branches are asked for, and
the `collapse_branches` processor shows them collapsed. Definitions that exist
several times under different preprocessor conditions (cuDNN v7 and v8,
placeholders without cuDNN) are all shown, each under its condition; the one
the device's release build compiles (Note [build configuration] in
kernelmap.source.config) is followed, the ones it leaves out are marked as a
branch "not compiled in a release <device> build: #if ..." and shown
collapsed. Conditions the build model cannot decide keep every alternative.
"""

from __future__ import annotations

import functools
import re

from kernelmap.dispatch import DEVICE_KEYS as _DISPATCH_DEVICE_KEYS
from kernelmap.model import NodeKind

DEFAULT_DEPTH = 24
MAX_NODES = 4000

# The operator functions a C++ name may end in (`sum_functor::operator()`,
# `Vectorized<float>::operator+`): the index names them so.
_OPERATOR_FUNCTION = r"operator\s*(?:\(\)|\[\]|->\*?|[-+*/%^&|!=<>~,]{1,3})"


def is_symbol_text(text: str, more: str = "") -> bool:
    """Whether `text` is spelled as a C++ name a user may give: identifiers
    joined by `::` (and the characters of `more`), the last of them perhaps
    an operator function."""
    name = rf"[A-Za-z_~][\w:~{re.escape(more)}]*"
    return re.fullmatch(rf"{name}|(?:{name}::)?{_OPERATOR_FUNCTION}", text) is not None


# Backend names in conditions (`case ConvBackend::Cudnn`, `if (use_mkldnn(...))`)
# that mark code for another device than the selected one (Note [branches]).
_OTHER_DEVICE_WORDS = {
    "cpu": ("cudnn", "miopen", "cuda", "mps", "hip", "rocm", "xpu", "cutlass", "cublas"),
    "cuda": ("mkldnn", "onednn", "mps", "xnnpack", "nnpack", "miopen", "rocm", "hip", "xpu", "mkl"),
    "mps": ("cudnn", "miopen", "cuda", "mkldnn", "onednn", "xnnpack", "nnpack", "hip", "xpu"),
    "meta": ("cudnn", "miopen", "cuda", "mkldnn", "onednn", "xnnpack", "nnpack", "mps", "hip", "xpu"),
}

# Tests that a tensor is on the selected device (`self.device().is_cpu()`): the
# branch they guard belongs to it, their else to the other devices.
_OWN_DEVICE_TESTS = {"cpu": "is_cpu", "cuda": "is_cuda", "mps": "is_mps", "meta": "is_meta"}
_OTHER_DEVICE_TESTS = tuple(_OWN_DEVICE_TESTS.values())
# A comparison with a device type (`iter.device_type() == kCPU`, `!= at::kCUDA`,
# `== DeviceType::CPU`), as `_mentions` reads the lowered text: `!=` negates it.
_DEVICE_TYPE = {"cpu": r"(?:\bk|devicetype::)cpu\b", "cuda": r"(?:\bk|devicetype::)cuda\b", "mps": r"(?:\bk|devicetype::)mps\b", "meta": r"(?:\bk|devicetype::)meta\b"}

# Tensor layouts other than dense strided have backends of their own.
_OTHER_BACKEND_WORDS = ("is_quantized", "is_sparse", "is_nested", "is_mkldnn", "is_vulkan", "is_metal")

# The devices a graph follows: the dispatcher's, for which branch rules exist.
DEVICE_KEYS = {device: key for device, key in _DISPATCH_DEVICE_KEYS.items() if device in _OTHER_DEVICE_WORDS}

# Operators that every kernel calls to shape, allocate, fill or inspect tensors
# (at::arange fills the indices sort and topk return). They are shown where
# they are called but not expanded (give one as TARGET to see it).
# `index` is the indexing operator itself, not the kernels named after it
# (index_select, index_add gather and scatter data: work, not plumbing).
_UTILITY_OPS = re.compile(
    r"(empty|new_empty|is_\w+|_is_\w+|size|stride|sym_|numel|dim|resize|contiguous|clone|copy|to|_to_copy|fill|zero_|"
    r"zeros|ones|full|arange|select|unsqueeze|squeeze|view|reshape|expand|permute|transpose|t|narrow|slice|as_strided|"
    r"detach|resolve_conj|resolve_neg|alias|item|_local_scalar_dense|set_|conj|_conj|real|imag|index(?!_)|split|chunk|"
    r"unbind|cat|stack|flatten|unflatten|movedim|squeeze_|unsqueeze_|result_type|can_cast|promote_types|"
    r"scalar_tensor|lift|_has_compatible_shallow_copy_type|_unsafe_view|_reshape_alias|diagonal)(_|\b|$)"
)

# Utilities that only inspect a tensor (its sizes, dtype, flags) or promote types: never
# the work of a composite that calls them (Note [a composite's utilities] in graph.sites).
_INSPECTIONS = re.compile(
    r"(is_\w+|_is_\w+|size|stride|sym_\w+|numel|dim|result_type|can_cast|promote_types|_has_compatible_shallow_copy_type|"
    r"item|_local_scalar_dense|qscheme|q_\w+|_nnz|lift\w*)(_|\b|$)"
)


def is_inspection_op(name: str, is_view: bool) -> bool:
    """A utility that moves no element: an inspection, or a view."""
    return is_view or bool(_INSPECTIONS.match(name))


# ATen's vectorized math over a contiguous run of elements (vexp, vlog, ...):
# where the CPU unary kernels' work is done, never plumbing.
VECTORIZED_MATH = "aten/src/ATen/cpu/vml.h"

# Where direct calls are followed: kernel code, not tensor plumbing in c10 or core.
KERNEL_DIRS = (
    "aten/src/ATen/native/",
    "aten/src/ATen/cuda/",
    "aten/src/ATen/cudnn/",
    "aten/src/ATen/miopen/",
    "aten/src/ATen/mkl/",
    "aten/src/ATen/mps/",
    VECTORIZED_MATH,
)

# The loop machinery a kernel hands its per-element work to: a device loop, not a launch.
_DEVICE_LOOPS = re.compile(r"^(cpu_kernel\w*|cpu_serial_kernel\w*|binary_kernel_reduce\w*|gpu_kernel\w*|opmath_gpu_kernel\w*|jitted_gpu_kernel\w*|opmath_symmetric_gpu_kernel\w*)$")

# Kinds whose nodes are where a call's work is, not plumbing.
INTERESTING_KINDS = frozenset(
    {NodeKind.OPERATOR, NodeKind.STUB, NodeKind.LAUNCH, NodeKind.DEVICE_LOOP, NodeKind.VENDOR, NodeKind.GENERATED, NodeKind.INNER_LOOP}
)
# Kinds that are where a call ends: never marked as cut for depth.
LEAF_KINDS = frozenset({NodeKind.VENDOR, NodeKind.LAUNCH, NodeKind.DEVICE_LOOP, NodeKind.NOTE, NodeKind.UNRESOLVED, NodeKind.INNER_LOOP})


@functools.lru_cache(maxsize=16384)  # a pure reading of the text, asked of every call's conditions
def other_device_reason(condition: str | None, device: str) -> str | None:
    """Why a branch under `condition` is for another device or backend than `device`; None if it is not."""
    if not condition:
        return None
    text = condition.lower()
    if re.search(r"!\s*\w*(enabled|available)", text):  # `#if !AT_CUDNN_ENABLED()`: the library-absent variant
        return None
    own = _OWN_DEVICE_TESTS[device]
    words = _OTHER_DEVICE_WORDS[device] + _OTHER_BACKEND_WORDS + tuple(t for t in _OTHER_DEVICE_TESTS if t != own)
    words += tuple(pattern for other, pattern in _DEVICE_TYPE.items() if other != device)
    own = f"{own}|{_DEVICE_TYPE[device]}"
    if text.startswith("else of "):
        other = _mentions(text, words)
        mine = _mentions(text, (own,))
        single = "&&" not in text and "||" not in text
        # the else of `if (x.is_cuda() && ...)` is the path every other device takes;
        # the else of `if (!x.is_cuda())` or of `if (x.is_cpu())` on the CPU is another device's
        if single and ((other == {True} ) or mine == {False}):
            return f"a branch for another device or backend than {device}"
        return None
    # `defined(CUDART_VERSION) || defined(USE_ROCM)`: another device's only if every alternative is
    alternatives = terms(text[3:] if text.startswith("if ") else text, "||")
    for alternative in alternatives:
        other = _mentions(alternative, words)
        single = "&&" not in alternative and "||" not in alternative
        if not (False in other or (single and _mentions(alternative, (own,)) == {True})):
            return None
    return f"a branch for another device or backend than {device}"


def _mentions(text: str, words) -> set[bool]:
    """For each mention of one of `words` in a condition: whether the name it is
    part of is negated (`!x.is_cuda()`, `!defined(USE_ROCM)`, a mention inside
    `!(defined(USE_ROCM) || ...)`: True; `use_cudnn(...)`: False)."""
    found = set()
    for m in re.finditer("|".join(words), text):
        before = text[: m.start()]
        atom = re.search(r"(!?)\s*(?:defined\s*\(\s*)?[\w.:>\-]*$", before)  # the name the word is part of, and its `!`
        negated = bool(atom and atom.group(1)) or re.search(r"!=\s*(?:at::|c10::)*$", before) is not None  # `!= kcpu`
        groups = []  # whether each `(` still open before the mention follows a `!`
        for i, ch in enumerate(before):
            if ch == "(":
                groups.append(before[:i].rstrip().endswith("!"))
            elif ch == ")" and groups:
                groups.pop()
        found.add(negated != (sum(groups) % 2 == 1))
    return found


def terms(text: str, operator: str) -> list[str]:
    """`text` (its outer parentheses removed) split at `operator` outside any parentheses."""
    return list(_terms(text, operator))


@functools.lru_cache(maxsize=65536)  # a pure reading of the text: the ranking of a call's ends asks it of every condition on every path
def _terms(text: str, operator: str) -> tuple[str, ...]:
    text = text.strip()
    while text.startswith("(") and text.endswith(")") and _closes_at_end(text):
        text = text[1:-1].strip()
    found, depth, start = [], 0, 0
    for i, c in enumerate(text):
        depth += (c == "(") - (c == ")")
        if depth == 0 and text.startswith(operator, i):
            found.append(text[start:i].strip())
            start = i + len(operator)
    found.append(text[start:].strip())
    return tuple(found)


@functools.lru_cache(maxsize=65536)
def balanced(text: str) -> bool:
    """Whether `text` keeps its parentheses balanced, never closing one it did
    not open: `a) + g(b` is not."""
    depth = 0
    for ch in text:
        depth += (ch == "(") - (ch == ")")
        if depth < 0:
            return False
    return depth == 0


_SCHEMA_ARGS = re.compile(r"\((.*)\)\s*->", re.S)


def schema_arguments(schema: str) -> list[str]:
    """The arguments of an operator schema as written (`Tensor(a!) out`,
    `Generator? generator=None`), the `*` that starts keyword-only ones left out."""
    m = _SCHEMA_ARGS.search(schema)
    if m is None:
        return []
    depth, current, out = 0, [], []
    for ch in m.group(1):
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
    if "".join(current).strip():
        out.append("".join(current).strip())
    return [a for a in out if a != "*"]


def _closes_at_end(text: str) -> bool:
    """Whether the `(` that opens `text` is closed by its last character."""
    depth = 0
    for i, c in enumerate(text):
        depth += (c == "(") - (c == ")")
        if depth == 0:
            return i == len(text) - 1
    return False


# Views by their schema (`-> Tensor(a)`) that return a copy when no view can
# describe the result (torch's documentation of each says "may return a copy"):
# followed below a utility asked for only where a copy is asked for
# (Note [a utility asked for] in graph.nodes).
_COPYING_VIEWS = re.compile(r"(contiguous|reshape|reshape_as|flatten|ravel)$")


def moves_no_element(name: str, is_view: bool) -> bool:
    """A view that never copies: `transpose`, `narrow`, `as_strided`, not `reshape`."""
    return is_view and not _COPYING_VIEWS.match(name)


def is_utility_op(name: str, is_view: bool) -> bool:
    return is_view or bool(_UTILITY_OPS.match(name))


def launch_kind(callee: str) -> NodeKind:
    """A launch-like call: the loop machinery (cpu_kernel_vec, gpu_kernel) or a kernel launch."""
    short = callee.rsplit("::", 1)[-1]
    return NodeKind.DEVICE_LOOP if _DEVICE_LOOPS.match(short) else NodeKind.LAUNCH
