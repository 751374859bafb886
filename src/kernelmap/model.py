"""The shared vocabulary of kernelmap: frozen types every producer returns and
every renderer reads.

Nothing here imports torch, torchgen, sqlite, rich or click. Producers
(catalog, dispatch, codegen, source, graph, trace, extend) build these types;
renderers only read them. Types with a text form (operator names) have one
`parse()` and one `str()` that round-trip.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PYTORCH_REPO_URL = "https://github.com/pytorch/pytorch"


# ---------------------------------------------------------------------------
# Where facts come from
# ---------------------------------------------------------------------------


class OriginKind(str, enum.Enum):
    WHEEL = "wheel"  # files of the installed torch wheel (python, packaged yaml)
    TREE = "tree"  # a PyTorch source tree (local checkout or fetched archive)
    GENERATED = "generated"  # files regenerated with torchgen, as a build would write them
    BUILD = "build"  # a path reported by the live dispatcher from the wheel's own build


@dataclass(frozen=True)
class Origin:
    """A set of files with one version: the installed wheel, a source tree, or
    the generated files of one torch version."""

    kind: OriginKind
    version: str  # torch.__version__ or the tree's version.txt
    commit: str | None = None  # full git commit, when known; pins links
    root: str | None = None  # directory on this machine holding the files, if any
    # Repository path prefix -> path prefix under `root`, for files whose place on
    # disk differs from their place in the repository (the wheel ships
    # aten/src/ATen/native/native_functions.yaml as torchgen/packaged/ATen/native/...).
    remap: tuple[tuple[str, str], ...] = ()
    label: str = ""  # short human name: "torch 2.13.0", "tree 2.6.0a0"

    def __post_init__(self) -> None:
        if self.commit is not None and not re.fullmatch(r"[0-9a-f]{7,40}", self.commit):
            raise ValueError(f"an origin's commit is a hex git id, not {self.commit!r}")

    def disk_path(self, path: str) -> Path | None:
        """Where the repository-relative `path` lies on this machine, if it does."""
        if self.root is None:
            return None
        for repo_prefix, disk_prefix in self.remap:
            if path.startswith(repo_prefix):
                return Path(self.root) / (disk_prefix + path[len(repo_prefix) :])
        return Path(self.root) / path

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "version": self.version,
            "commit": self.commit,
            "label": self.label,
        }


def is_generated_path(path: str) -> bool:
    """True for files a build generates (they exist in no repository)."""
    return path.startswith("build/") or "/generated/" in path


@dataclass(frozen=True)
class Location:
    """A line range in a file, named by its path in the PyTorch repository (or,
    for generated files, in a build directory: `build/aten/src/ATen/...`)."""

    path: str
    line: int
    end_line: int | None = None
    origin: Origin | None = None

    def __post_init__(self) -> None:
        if self.line < 1:
            raise ValueError(f"lines count from 1; got {self.line} for {self.path}")
        if self.end_line is not None and self.end_line < self.line:
            raise ValueError(f"a location ends at or after its start: {self.path}:{self.line}-{self.end_line}")
        if self.path.startswith("/"):
            raise ValueError(f"a location's path is relative to its origin: {self.path}")

    def __str__(self) -> str:
        return f"{self.path}:{self.line}"

    @property
    def url(self) -> str | None:
        """A link to these lines at the origin's exact commit on the public
        repository; None for generated files, which exist in no repository."""
        o = self.origin
        if o is None or o.commit is None or o.kind is OriginKind.GENERATED or is_generated_path(self.path):
            return None
        anchor = f"#L{self.line}" + (f"-L{self.end_line}" if self.end_line and self.end_line != self.line else "")
        return f"{PYTORCH_REPO_URL}/blob/{o.commit}/{self.path}{anchor}"

    @property
    def disk_path(self) -> Path | None:
        return self.origin.disk_path(self.path) if self.origin else None

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "line": self.line,
            "end_line": self.end_line,
            "origin": self.origin.label if self.origin else None,
            "url": self.url,
        }


# ---------------------------------------------------------------------------
# Operators
# ---------------------------------------------------------------------------

_OP_NAME = re.compile(r"(?:(?P<ns>[A-Za-z_][A-Za-z0-9_]*)::)?(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:\.(?P<overload>[A-Za-z_][A-Za-z0-9_]*))?")


@dataclass(frozen=True, order=True)
class OperatorName:
    """`aten::add.Tensor`: namespace, base name and overload ("" for the default)."""

    name: str
    overload: str = ""
    namespace: str = "aten"

    @staticmethod
    def parse(text: str) -> OperatorName:
        m = _OP_NAME.fullmatch(text.strip())
        if m is None:
            raise ValueError(f"not an operator name: {text!r} (expected [ns::]name[.overload])")
        return OperatorName(m["name"], m["overload"] or "", m["ns"] or "aten")

    def __str__(self) -> str:
        return f"{self.namespace}::{self.unqualified}"

    @property
    def unqualified(self) -> str:
        """The name as native_functions.yaml writes it: `add.Tensor`."""
        return f"{self.name}.{self.overload}" if self.overload else self.name


class OpKind(str, enum.Enum):
    """How an operator gets its kernels (Note [operator kinds] in catalog)."""

    COMPOSITE_IMPLICIT = "composite implicit"
    COMPOSITE_EXPLICIT = "composite explicit"
    COMPOSITE_EXPLICIT_NON_FUNCTIONAL = "composite explicit non-functional"
    STRUCTURED = "structured"  # a functional/inplace op whose kernel is its structured_delegate's
    STRUCTURED_OUT = "structured out"  # the out= op that carries the structured kernel
    UFUNC = "ufunc"  # a structured out= op whose CPU/CUDA kernels are generated from ufunc_inner_loop
    DISPATCH = "dispatch"  # plain per-backend kernels named in `dispatch:`
    NONE = "no kernel"  # declared without any kernel (e.g. only registered from C++ elsewhere)


@dataclass(frozen=True)
class Kernel:
    """The kernel one dispatch key runs for an operator."""

    key: str  # dispatch key or alias key: "CPU", "CompositeImplicitAutograd"
    symbol: str  # "at::native::conv2d_symint", or a Python qualname for Python kernels
    location: Location | None = None
    # "native" (yaml dispatch entry), "cpp" (a C++ registration the dispatcher
    # reports), "python" (registered from Python), "fallthrough", "alias" (the key
    # runs the kernel of an alias key), "fallback" (a backend fallback).
    kind: str = "native"
    structured: bool = False


@dataclass(frozen=True)
class DerivativeFormula:
    inputs: tuple[str, ...]  # "self", "other", or several ("self, other")
    formula: str


@dataclass(frozen=True)
class Autograd:
    """An operator's derivatives.yaml entry and the backward node it generates."""

    backward_node: str | None  # "ConvolutionBackward0"; None when not differentiable
    location: Location | None
    formulas: tuple[DerivativeFormula, ...] = ()
    signature: str = ""  # the `- name:` line it came from


@dataclass(frozen=True)
class Op:
    """One entry of native_functions.yaml, as torchgen reads it."""

    name: OperatorName
    schema: str  # "add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor"
    location: Location  # the `- func:` line
    kind: OpKind
    variants: tuple[str, ...] = ("function",)
    python_module: str | None = None  # "nn", "linalg", "special", "fft", ...
    tags: tuple[str, ...] = ()
    dispatch: tuple[Kernel, ...] = ()  # from the yaml, key order as written
    structured_delegate: str | None = None  # "add.out"
    ufunc_inner_loop: tuple[tuple[str, str], ...] = ()  # (key, "add (AllAndComplex, BFloat16, Half, ComplexHalf)")
    autograd: Autograd | None = None
    python_entry_points: tuple[str, ...] = ()  # "torch.add", "torch.Tensor.add"
    is_view: bool = False
    is_inplace: bool = False
    is_out: bool = False
    manual_cpp_binding: bool = False

    def __post_init__(self) -> None:
        if self.kind is OpKind.STRUCTURED and not self.structured_delegate:
            raise ValueError(f"{self.name}: a structured (delegating) operator names its structured_delegate")

    def kernel_for(self, key: str) -> Kernel | None:
        for k in self.dispatch:
            if k.key == key:
                return k
        return None


# ---------------------------------------------------------------------------
# C++ symbols and edges between them
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Symbol:
    """A definition in C++/CUDA source: `at::native::cudnn_convolution`."""

    qualified_name: str
    location: Location
    kind: str = "function"  # function | method | structured_impl | structured_meta | global_kernel
    condition: str | None = None  # enclosing preprocessor condition: "AT_CUDNN_ENABLED()"


class EdgeKind(str, enum.Enum):
    PYTHON = "python"
    BINDING = "binding"
    DISPATCHER = "dispatcher"
    DIRECT = "direct"
    STUB = "stub"
    LAUNCH = "launch"
    VENDOR = "vendor"
    AUTOGRAD = "autograd"


@dataclass(frozen=True)
class Edge:
    caller: str
    callee: str
    via: EdgeKind
    condition: str | None = None  # "case ConvBackend::Cudnn", "#if AT_CUDNN_ENABLED()"
    location: Location | None = None  # the call site


# ---------------------------------------------------------------------------
# Call trees: the one shape of every answer (static stack/callers, dynamic trace)
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class CallNode:
    name: str
    kind: str  # module | python | binding | op | kernel | stub | launch | vendor | gpu_kernel | note ...
    location: Location | None = None
    via: EdgeKind | None = None  # how the parent reaches this node
    condition: str | None = None
    children: tuple[CallNode, ...] = ()
    attrs: Mapping[str, Any] = field(default_factory=dict)  # durations, shapes, dispatch key, reasons


@dataclass(frozen=True)
class CallTree:
    root: CallNode
    notes: tuple[str, ...] = ()  # stated once at the top: version mismatches, missing layers
    meta: Mapping[str, Any] = field(default_factory=dict)

    def walk(self):
        """(depth, node) in pre-order, without recursion."""
        stack: list[tuple[int, CallNode]] = [(0, self.root)]
        while stack:
            depth, node = stack.pop()
            yield depth, node
            stack.extend((depth + 1, c) for c in reversed(node.children))
