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

import re

from kernelmap.dispatch import DEVICE_KEYS as _DISPATCH_DEVICE_KEYS
from kernelmap.model import NodeKind

DEFAULT_DEPTH = 24
MAX_NODES = 4000

# Backend names in conditions (`case ConvBackend::Cudnn`, `if (use_mkldnn(...))`)
# that mark code for another device than the selected one (Note [branches]).
_OTHER_DEVICE_WORDS = {
    "cpu": ("cudnn", "miopen", "cuda", "mps", "hip", "rocm", "xpu", "cutlass", "cublas"),
    "cuda": ("mkldnn", "onednn", "mps", "xnnpack", "nnpack", "miopen", "rocm", "hip", "xpu", "mkl"),
    "mps": ("cudnn", "miopen", "cuda", "mkldnn", "onednn", "xnnpack", "nnpack", "hip", "xpu"),
    "meta": ("cudnn", "miopen", "cuda", "mkldnn", "onednn", "xnnpack", "nnpack", "mps", "hip", "xpu"),
}

# Tensor layouts other than dense strided have backends of their own.
_OTHER_BACKEND_WORDS = ("is_quantized", "is_sparse", "is_nested", "is_mkldnn", "is_vulkan", "is_metal")

# The devices a graph follows: the dispatcher's, for which branch rules exist.
DEVICE_KEYS = {device: key for device, key in _DISPATCH_DEVICE_KEYS.items() if device in _OTHER_DEVICE_WORDS}

# Operators that every kernel calls to shape, allocate or inspect tensors. They
# are shown where they are called but not expanded (give one as TARGET to see it).
_UTILITY_OPS = re.compile(
    r"(empty|new_empty|is_|_is_|size|stride|sym_|numel|dim|resize|contiguous|clone|copy|to|_to_copy|fill|zero_|"
    r"zeros|ones|full|select|unsqueeze|squeeze|view|reshape|expand|permute|transpose|t|narrow|slice|as_strided|"
    r"detach|resolve_conj|resolve_neg|alias|item|_local_scalar_dense|set_|conj|_conj|real|imag|index|split|chunk|"
    r"unbind|cat|stack|flatten|unflatten|movedim|squeeze_|unsqueeze_|result_type|can_cast|promote_types|"
    r"scalar_tensor|lift|_has_compatible_shallow_copy_type|_unsafe_view|_reshape_alias|diagonal)(_|\b|$)"
)

# Where direct calls are followed: kernel code, not tensor plumbing in c10 or core.
KERNEL_DIRS = (
    "aten/src/ATen/native/",
    "aten/src/ATen/cuda/",
    "aten/src/ATen/cudnn/",
    "aten/src/ATen/miopen/",
    "aten/src/ATen/mkl/",
    "aten/src/ATen/mps/",
)

# The loop machinery a kernel hands its per-element work to: a device loop, not a launch.
_DEVICE_LOOPS = re.compile(r"^(cpu_kernel\w*|cpu_serial_kernel\w*|gpu_kernel\w*|opmath_gpu_kernel\w*|jitted_gpu_kernel\w*|opmath_symmetric_gpu_kernel\w*)$")

# Kinds whose nodes are where a call's work is, not plumbing.
INTERESTING_KINDS = frozenset(
    {NodeKind.OPERATOR, NodeKind.STUB, NodeKind.LAUNCH, NodeKind.DEVICE_LOOP, NodeKind.VENDOR, NodeKind.GENERATED, NodeKind.INNER_LOOP}
)
# Kinds that are where a call ends: never marked as cut for depth.
LEAF_KINDS = frozenset({NodeKind.VENDOR, NodeKind.LAUNCH, NodeKind.DEVICE_LOOP, NodeKind.NOTE, NodeKind.UNRESOLVED, NodeKind.INNER_LOOP})


def other_device_reason(condition: str | None, device: str) -> str | None:
    """Why a branch under `condition` is for another device or backend than `device`; None if it is not."""
    if not condition:
        return None
    text = condition.lower()
    if re.search(r"!\s*\w*(enabled|available)", text):  # `#if !AT_CUDNN_ENABLED()`: the library-absent variant
        return None
    words = _OTHER_DEVICE_WORDS[device] + _OTHER_BACKEND_WORDS
    if any(w in text for w in words):
        return f"a branch for another device or backend than {device}"
    return None


def is_utility_op(name: str, is_view: bool) -> bool:
    return is_view or bool(_UTILITY_OPS.match(name))


def launch_kind(callee: str) -> NodeKind:
    """A launch-like call: the loop machinery (cpu_kernel_vec, gpu_kernel) or a kernel launch."""
    short = callee.rsplit("::", 1)[-1]
    return NodeKind.DEVICE_LOOP if _DEVICE_LOOPS.match(short) else NodeKind.LAUNCH
