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
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelmap.errors import KernelmapError

PYTORCH_REPO_URL = "https://github.com/pytorch/pytorch"


# ---------------------------------------------------------------------------
# Where facts come from
# ---------------------------------------------------------------------------


class OriginKind(str, enum.Enum):
    WHEEL = "wheel"  # files of the installed torch wheel (python, packaged yaml)
    TREE = "tree"  # a PyTorch source tree (local checkout or fetched archive)
    GENERATED = "generated"  # files regenerated with torchgen, as a build would write them
    BUILD = "build"  # a path reported by the live dispatcher from the wheel's own build
    EXTENSION = "extension"  # a C++ extension's own sources on this machine (Note [registrations from outside torch])


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
            "root": self.root,
            "remap": [list(pair) for pair in self.remap],
        }

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> Origin:
        return Origin(
            OriginKind(d["kind"]),
            d["version"],
            d.get("commit"),
            d.get("root"),
            tuple((a, b) for a, b in d.get("remap") or ()),
            d.get("label", ""),
        )


def is_generated_path(path: str) -> bool:
    """True for files a build generates (they exist in no repository)."""
    return path.startswith("build/") or "/generated/" in path


# Generated files whose template is not named like them (shards and per-key
# or per-operator files are matched by the rules in `generated_template`).
_ATEN_TEMPLATES = "aten/src/ATen/templates/"
_AUTOGRAD_TEMPLATES = "tools/autograd/templates/"
_REGISTER_OWN_TEMPLATE = ("RegisterSchema", "RegisterBackendSelect", "RegisterFunctionalization", "RegisterCodegenUnboxedKernels")


def generated_template(path: str) -> str | None:
    """The repository path of the torchgen template a generated file is
    written from: `build/aten/src/ATen/RegisterCPU_0.cpp` ->
    `aten/src/ATen/templates/RegisterDispatchKey.cpp`,
    `torch/csrc/autograd/generated/VariableType_3.cpp` ->
    `tools/autograd/templates/VariableType.cpp`; None for other files."""
    name = path.rsplit("/", 1)[-1]
    stem, dot, suffix = name.rpartition(".")
    if not dot:
        return None
    stem = re.sub(r"_\d+$", "", stem)  # shards: Operators_3, VariableType_7
    if path.startswith("torch/csrc/autograd/generated/"):
        return f"{_AUTOGRAD_TEMPLATES}{stem}.{suffix}"
    if not path.startswith("build/aten/src/ATen/"):
        return None
    rel = path[len("build/aten/src/ATen/") :]
    if rel.startswith("ops/"):  # per-operator headers
        for ending, template in (("_ops", "Operator.h"), ("_native", "NativeFunction.h"), ("_meta", "NativeMetaFunction.h")):
            if stem.endswith(ending):
                return _ATEN_TEMPLATES + template
        if stem.endswith("_dispatch"):  # ops/add_cpu_dispatch.h
            return _ATEN_TEMPLATES + "DispatchKeyFunction.h"
        return _ATEN_TEMPLATES + "Function.h"
    if rel.startswith("core/"):
        return f"{_ATEN_TEMPLATES}{stem}.{suffix}"
    if stem == "VmapGeneratedPlumbing":  # written by torchgen/gen_vmap_plumbing.py from code, no template
        return None
    per_key = re.fullmatch(r"[A-Z]\w*Functions(_inl)?", stem)
    if per_key and stem not in ("Functions", "NativeFunctions", "NativeMetaFunctions", "RedispatchFunctions", "UnboxingFunctions"):
        return f"{_ATEN_TEMPLATES}DispatchKeyFunctions{per_key.group(1) or ''}.h"  # CPUFunctions.h, CPUFunctions_inl.h
    if stem.startswith("Register") and stem not in _REGISTER_OWN_TEMPLATE:
        return _ATEN_TEMPLATES + "RegisterDispatchKey.cpp"
    ufunc = re.match(r"(Ufunc(?:CPU|CUDA|CPUKernel))_\w+$", stem)
    if ufunc:
        return f"{_ATEN_TEMPLATES}{ufunc.group(1)}.{suffix}"
    return f"{_ATEN_TEMPLATES}{stem}.{suffix}"


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

    @property
    def template(self) -> str | None:
        """For a generated file, the torchgen template it is written from (its repository path)."""
        return generated_template(self.path) if is_generated_path(self.path) else None

    @property
    def template_url(self) -> str | None:
        """The template's pinned link, when the generating version's commit is known."""
        template, o = self.template, self.origin
        if template is None or o is None or o.commit is None:
            return None
        return f"{PYTORCH_REPO_URL}/blob/{o.commit}/{template}"

    def to_json(self, origins: OriginTable | None = None) -> dict[str, Any]:
        """`origin` names the origin: its key in `origins` (the document's origin
        table) when given, else its label. `file` is where the file lies on this
        machine (generated files live in the cache), `url` its pinned link."""
        disk = self.disk_path
        return {
            "path": self.path,
            "line": self.line,
            "end_line": self.end_line,
            "origin": (origins.key(self.origin) if origins is not None else self.origin.label) if self.origin else None,
            "url": self.url,
            "file": str(disk) if disk is not None else None,
            **({"template": self.template, "template_url": self.template_url} if self.template else {}),
        }

    @staticmethod
    def from_json(d: Mapping[str, Any], origins: OriginTable | None = None) -> Location:
        origin = origins.get(d.get("origin")) if origins is not None else None
        return Location(d["path"], d["line"], d.get("end_line"), origin)


def extension_origin(root: str, torch_version: str = "") -> Origin:
    """The origin of a C++ extension project's files, in the folder `root`
    (Note [registrations from outside torch] in kernelmap.dispatch); the torch
    version it was loaded by, when a live dispatcher reported it."""
    return Origin(OriginKind.EXTENSION, torch_version, root=root, label=f"extension {root}")


class OriginTable:
    """The origins one JSON document names, each once, by a short key (its
    label, made unique): locations refer to them by key, so that a document
    loads back with every location's origin intact."""

    def __init__(self, origins: Mapping[str, Origin] | None = None):
        self._by_key: dict[str, Origin] = dict(origins or {})
        self._keys: dict[Origin, str] = {o: k for k, o in self._by_key.items()}

    def key(self, origin: Origin) -> str:
        found = self._keys.get(origin)
        if found is None:
            found = origin.label or origin.kind.value
            n = 2
            while found in self._by_key:
                found = f"{origin.label or origin.kind.value} #{n}"
                n += 1
            self._by_key[found] = origin
            self._keys[origin] = found
        return found

    def get(self, key: str | None) -> Origin | None:
        if key is None:
            return None
        if key not in self._by_key:
            raise ValueError(f"a location names origin {key!r}, which the document's origin table lacks")
        return self._by_key[key]

    def to_json(self) -> dict[str, Any]:
        return {k: o.to_json() for k, o in self._by_key.items()}

    @staticmethod
    def from_json(d: Mapping[str, Any] | None) -> OriginTable:
        return OriginTable({k: Origin.from_json(v) for k, v in (d or {}).items()})


# Note [versions on locations]
# One answer may hold locations of several versions: a selected 2.6.0 tree's
# yaml and kernels beside the installed 2.13 wheel's live registrations; or of
# one version that is not the installed torch's (a tree answers alone). Then
# a line number alone misleads (native_functions.yaml:1724 is the tree's, the
# wheel's entry is at :1701), so every location of such an answer carries its
# version in text, as it does in JSON through its origin. `tags_versions`
# decides, once per answer; renderers write each location with `located`.


def tags_versions(locations: Iterable[Location | None], installed: str | None = None) -> bool:
    """Whether an answer's locations need their versions said: they come from
    more than one version, or from one that is not `installed` (the installed
    torch's, when the answer knows it)."""
    versions = {loc.origin.version for loc in locations if loc is not None and loc.origin is not None and loc.origin.version}
    return len(versions) > 1 or (bool(installed) and bool(versions) and versions != {installed})


def located(location: Location | None, versions: bool = False, missing: str = "") -> str:
    """`path:line`, with `(version)` after it when `versions` (Note [versions on locations])."""
    if location is None:
        return missing
    if versions and location.origin is not None and location.origin.version:
        return f"{location} ({location.origin.version})"
    return str(location)


def location_json(location: Location | None, origins: OriginTable | None = None) -> dict[str, Any] | None:
    return location.to_json(origins) if location is not None else None


def location_from_json(d: Mapping[str, Any] | None, origins: OriginTable | None = None) -> Location | None:
    return Location.from_json(d, origins) if d is not None else None


# ---------------------------------------------------------------------------
# Answer documents
# ---------------------------------------------------------------------------

# Note [answer documents]
# Every answer kernelmap gives has one JSON form, a document: an object whose
# key "kernelmap" names the answer and its version ("calltree/2", "where/2"),
# beside the answer's own fields. A version changes whenever a field changes
# meaning or goes away; fields may be added within a version. `from_json`
# refuses any other name or version with a clear error. The answers and their
# versions are listed in kernelmap.answers.


# Note [notebook view]
# A notebook shows an answer as its HTML report. The model imports no
# renderer: the view is registered from above (kernelmap/__init__.py registers
# render.html's, so any answer has it once the package is imported), and an
# answer asks for it when it is shown.
_notebook_view: Callable[[Any], str] | None = None


def show_in_notebooks(view: Callable[[Any], str]) -> None:
    """Make `view(answer)` the HTML a notebook shows for every answer."""
    global _notebook_view
    _notebook_view = view


class Answer:
    """What every answer shares: a notebook shows it as its HTML report (Note [notebook view])."""

    def _repr_html_(self) -> str | None:
        return None if _notebook_view is None else _notebook_view(self)


class DocumentError(KernelmapError):
    """A JSON document that is not the answer it should be."""


def document(answer: str, version: int, /, **fields: Any) -> dict[str, Any]:
    """A document's top level: {"kernelmap": "answer/version", **fields}."""
    return {"kernelmap": f"{answer}/{version}", **fields}


def check_document(d: Any, name: str, version: int) -> Mapping[str, Any]:
    """`d` itself when it is the document `name/version`; DocumentError otherwise."""
    expected = f"{name}/{version}"
    if not isinstance(d, Mapping):
        raise DocumentError(f"not a kernelmap document: expected a JSON object holding {expected}")
    found = d.get("kernelmap")
    if found != expected:
        raise DocumentError(f"not a {expected} document: it says {found!r}" if found else f"not a kernelmap document: no \"kernelmap\" key (expected {expected})")
    return d


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

    def to_json(self, origins: OriginTable | None = None) -> dict[str, Any]:
        return {"key": self.key, "symbol": self.symbol, "kind": self.kind, "structured": self.structured, "location": location_json(self.location, origins)}

    @staticmethod
    def from_json(d: Mapping[str, Any], origins: OriginTable | None = None) -> Kernel:
        return Kernel(d["key"], d["symbol"], location_from_json(d.get("location"), origins), d.get("kind", "native"), bool(d.get("structured")))


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

    def to_json(self, origins: OriginTable | None = None) -> dict[str, Any]:
        return {
            "backward_node": self.backward_node,
            "location": location_json(self.location, origins),
            "signature": self.signature,
            "formulas": [{"inputs": list(f.inputs), "formula": f.formula} for f in self.formulas],
        }

    @staticmethod
    def from_json(d: Mapping[str, Any], origins: OriginTable | None = None) -> Autograd:
        formulas = tuple(DerivativeFormula(tuple(f["inputs"]), f["formula"]) for f in d.get("formulas") or ())
        return Autograd(d.get("backward_node"), location_from_json(d.get("location"), origins), formulas, d.get("signature", ""))


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

    def to_json(self, origins: OriginTable | None = None) -> dict[str, Any]:
        return {
            "name": str(self.name),
            "schema": self.schema,
            "kind": self.kind.value,
            "location": location_json(self.location, origins),
            "variants": list(self.variants),
            "python_module": self.python_module,
            "tags": list(self.tags),
            "is_view": self.is_view,
            "is_inplace": self.is_inplace,
            "is_out": self.is_out,
            "manual_cpp_binding": self.manual_cpp_binding,
            "structured_delegate": self.structured_delegate,
            "ufunc_inner_loop": [list(pair) for pair in self.ufunc_inner_loop],
            "dispatch": [k.to_json(origins) for k in self.dispatch],
            "python_entry_points": list(self.python_entry_points),
            "autograd": self.autograd.to_json(origins) if self.autograd else None,
        }

    @staticmethod
    def from_json(d: Mapping[str, Any], origins: OriginTable | None = None) -> Op:
        location = location_from_json(d["location"], origins)
        if location is None:
            raise DocumentError(f"operator {str(d.get('name'))[:100]} has no location: an operator has its yaml line")
        return Op(
            OperatorName.parse(d["name"]),
            d["schema"],
            location,
            OpKind(d["kind"]),
            tuple(d.get("variants") or ()),
            d.get("python_module"),
            tuple(d.get("tags") or ()),
            tuple(Kernel.from_json(k, origins) for k in d.get("dispatch") or ()),
            d.get("structured_delegate"),
            tuple((a, b) for a, b in d.get("ufunc_inner_loop") or ()),
            Autograd.from_json(d["autograd"], origins) if d.get("autograd") else None,
            tuple(d.get("python_entry_points") or ()),
            bool(d.get("is_view")),
            bool(d.get("is_inplace")),
            bool(d.get("is_out")),
            bool(d.get("manual_cpp_binding")),
        )


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
# Call trees: the one shape of every tree answer (static stack/callers/path, dynamic trace)
# ---------------------------------------------------------------------------


class NodeKind(str, enum.Enum):
    """What a call-tree node is. Static trees (stack, callers, path) and
    dynamic ones (trace) share these kinds; each belongs to one layer of a
    PyTorch call (Note [layers])."""

    # grouping
    TRACE = "trace"  # the root of a recorded trace
    THREAD = "thread"  # a host thread of a trace, or a group of device events
    SYMBOL = "symbol"  # a name that stands for several definitions (callers' root)
    ALTERNATIVES = "alternatives"  # one definition per preprocessor condition: a build compiles one
    AMBIGUOUS = "ambiguous"  # a call several definitions could answer
    # Python
    MODULE = "module"  # an nn.Module class, or its call in a trace
    PYTHON = "python"  # a Python function
    BUILTIN = "builtin"  # a function of torch's C extension (torch.conv2d, Tensor.add_)
    ANNOTATION = "annotation"  # a profiler range (record_function) that is no operator
    # generated code and the dispatcher
    BINDING = "binding"  # the generated THPVariable_* that parses Python arguments
    HEADER = "header"  # the inline at::<op> / Tensor::<op> of a generated header
    OPS_ENTRY = "ops_entry"  # at::_ops::<op>::call, where the dispatcher is entered
    OPERATOR = "op"  # aten::<name>.<overload>
    WRAPPER = "wrapper"  # a generated wrapper registered for a dispatch key (Register<Key>, VariableType)
    AUTOGRAD = "autograd"  # an autograd node running its backward (trace)
    # native code
    KERNEL = "kernel"  # a C++/CUDA definition in a source tree
    GENERATED = "generated"  # a kernel generated at build time (ufunc)
    STUB = "stub"  # a DispatchStub, dispatching on device type and CPU capability
    DEVICE_LOOP = "device_loop"  # cpu_kernel_vec, gpu_kernel, TensorIterator loops
    INNER_LOOP = "inner_loop"  # the scalar / vectorised operation a loop applies
    LAUNCH = "launch"  # a call site that launches device code (<<<...>>>, launch_* helpers)
    RUNTIME = "runtime"  # a CUDA runtime or driver call a trace recorded (cudaLaunchKernel, ...)
    VENDOR = "vendor"  # a call into a library outside ATen (cuDNN, cuBLAS, oneDNN, ...)
    # device activity
    GPU_KERNEL = "gpu_kernel"
    GPU_MEMCPY = "gpu_memcpy"
    GPU_MEMSET = "gpu_memset"
    # compiled and DSL code
    COMPILED = "compiled"  # a kernel generated by torch.compile (Inductor)
    OVERRIDE = "override"  # a DSL kernel registered over an aten operator (torch._native)
    # markers
    NOTE = "note"  # a statement in place of a subtree
    UNRESOLVED = "unresolved"  # a step that could not be followed; the fact `unresolved` says why

    def __str__(self) -> str:
        return self.value

    # equal to its value, so hash like it: a kind finds its entry in tables keyed by plain strings
    __hash__ = str.__hash__

    @property
    def layer(self) -> str:
        return _LAYERS[self]


# Note [layers]
# The layer of a call each node kind belongs to, outermost first: what the
# HTML report filters by and `--compact` shows one line of.
LAYERS = ("python", "binding", "operator", "dispatch", "native", "device", "vendor", "gpu", "compiled", "other")
_LAYERS: dict[NodeKind, str] = {
    NodeKind.MODULE: "python",
    NodeKind.PYTHON: "python",
    NodeKind.BUILTIN: "python",
    NodeKind.BINDING: "binding",
    NodeKind.HEADER: "operator",
    NodeKind.OPS_ENTRY: "operator",
    NodeKind.OPERATOR: "operator",
    NodeKind.WRAPPER: "dispatch",
    NodeKind.AUTOGRAD: "dispatch",
    NodeKind.KERNEL: "native",
    NodeKind.GENERATED: "native",
    NodeKind.STUB: "native",
    NodeKind.SYMBOL: "native",
    NodeKind.ALTERNATIVES: "native",
    NodeKind.AMBIGUOUS: "native",
    NodeKind.DEVICE_LOOP: "device",
    NodeKind.INNER_LOOP: "device",
    NodeKind.LAUNCH: "device",
    NodeKind.RUNTIME: "device",
    NodeKind.VENDOR: "vendor",
    NodeKind.GPU_KERNEL: "gpu",
    NodeKind.GPU_MEMCPY: "gpu",
    NodeKind.GPU_MEMSET: "gpu",
    NodeKind.COMPILED: "compiled",
    NodeKind.OVERRIDE: "compiled",
    NodeKind.TRACE: "other",
    NodeKind.THREAD: "other",
    NodeKind.ANNOTATION: "other",
    NodeKind.NOTE: "other",
    NodeKind.UNRESOLVED: "other",
}


@dataclass(frozen=True)
class Fact:
    """One declared fact a call-tree node may carry."""

    type: str  # str | int | float | number | bool | list | dict | location | any
    meaning: str


# Note [node facts]
# What a producer learns about a node beyond its name, kind, location and
# edge goes into `CallNode.attrs`, under one of these names only: the table is
# the contract between producers (graph, trace, compile) and renderers (text,
# JSON, HTML). A node with an undeclared name is refused at construction.
# "list" values are tuples in the model and arrays in JSON; "location" values
# are Locations.
FACTS: dict[str, Fact] = {
    # static trees: what a node is
    "op_kind": Fact("str", "how the operator gets its kernels (OpKind value)"),
    "schema": Fact("str", "the operator's schema (in traces, as an execution trace recorded it: its exact overload)"),
    # a location fact carries its origin, so its version (Note [versions on locations]); older documents hold "path:line" text
    "yaml": Fact("location", "the operator's native_functions.yaml entry (of the installed torch in traces)"),
    "symbol_kind": Fact("str", "kind of C++ definition: function, method, structured_impl, structured_meta, global_kernel"),
    "preprocessor": Fact("str", "the #if condition enclosing the definition"),
    "call_site": Fact("location", "where the parent calls this node"),
    "candidates": Fact("int", "how many definitions the name or call could mean"),
    "definitions": Fact("int", "how many definitions the root symbol has"),
    "signatures": Fact("list", "a binding's PythonArgParser signatures"),
    "calls": Fact("list", "what a generated function calls"),
    "key": Fact("str", "the dispatch key a wrapper is registered for"),
    "backward_node": Fact("str", "the autograd node a wrapper records for the backward pass"),
    "derivatives": Fact("location", "the derivatives.yaml entry of the operator"),
    "declared_at": Fact("location", "where a stub is declared (DECLARE_DISPATCH)"),
    "redispatch": Fact("location", "the line of an autograd wrapper that redispatches below the autograd keys"),
    "header": Fact("str", "the header that holds an inner loop"),
    "utility": Fact("bool", "a tensor utility operator (empty, view, contiguous...) every kernel calls"),
    "keep": Fact("bool", "a step of the call itself (meta, impl): never pruned as plumbing"),
    "branch": Fact("str", "why this branch is for another device or backend than the selected one"),
    "identity": Fact("str", "what makes two nodes the same definition: repeats and recursion are told by it"),
    "reason": Fact("str", "why a grouping node groups"),
    "library": Fact("str", "the library outside ATen this node's code is in (a name of kernelmap.vendors)"),
    "closed": Fact("bool", "the library's source is closed"),
    "repository": Fact("str", "where an open library's source lives"),
    "dtype_case": Fact("str", "the AT_DISPATCH case taken for the selected dtype"),
    "given_flags": Fact("list", "the flags a C++ call of the operator passes as literals (`stable=false`): the arms they decide below it"),
    "outer_conditions": Fact("list", "the case/if conditions around the call's own condition in its caller, outermost first"),
    "dtype_work": Fact("str", "why a direct call is the kernel's per-dtype work (made in an AT_DISPATCH case, or a template below one): never pruned"),
    "loop": Fact("str", "the node's part in a device loop: iteration, threads, loop object, vectorized or scalar inner loop"),
    # DSL overrides (torch._native)
    "dsl": Fact("str", "the DSL an override is written in: triton, cutedsl, nvmath"),
    "condition_at": Fact("str", "path:line of the condition function that decides whether an override runs"),
    "aten_runs_when": Fact("str", "when ATen's kernel runs instead of the override"),
    "registered": Fact("any", "whether the override is registered in this process (None: not asked)"),
    "served_by": Fact("str", "the torch._native DSL override that may serve a traced operator instead of ATen's kernel"),
    # observation (kernelmap.observe): what a run of the installed torch showed
    "observed": Fact("str", "observed (ran), inlined (folded into the frame above), not taken (never ran for these inputs), or observed, not in the static map"),
    "native_frame": Fact("str", "the frame's function as the binary's symbol table names it, demangled"),
    "library_file": Fact("str", "the native library file the frame ran in"),
    "capability": Fact("str", "the CPU capability the frame's code was compiled for (DEFAULT, AVX2, AVX512)"),
    "ran": Fact("str", "what ran, in a word: the CPU capability and the dtype case"),
    "hits": Fact("int", "how many observed stacks pass through the node"),
    # markers set by the builders and processors
    "collapsed": Fact("str", "children not shown: a branch for another device or backend"),
    "cycle": Fact("str", "recursion cut: the node is already on the path above"),
    "repeat": Fact("str", "expanded above: the same definition is expanded elsewhere in the tree"),
    "truncated": Fact("str", "children not shown: a depth or size limit was reached"),
    "unresolved": Fact("str", "why the node could not be followed further"),
    "hidden": Fact("int", "how many children a processor hid"),
    "more": Fact("dict", "children a bounded reply left out: {id (expand it for them), children, nodes} (Note [bounded answers] in kernelmap.mcp.bound)"),
    "main": Fact("bool", "on the main path: the path a default call takes (observed when observed, else the ranked static path)"),
    "folded": Fact("list", "a note's folded alternatives, each [name, condition or null, path:line or null]"),
    # traces: the event
    "frame": Fact("str", "the profiler's name of a Python frame"),
    "pid": Fact("any", "process id of the event"),
    "tid": Fact("any", "thread id of the event"),
    "event": Fact("int", "index of the event in the trace file"),
    "duration_us": Fact("number", "duration in microseconds"),
    "start_us": Fact("number", "a device event's start in the trace's clock, microseconds"),
    "functor": Fact("str", "a GPU kernel's functor or lambda: the op's arithmetic"),
    "launcher": Fact("str", "path:line of a GPU kernel's __global__ definition: launcher template or op-specific kernel"),
    "input_shapes": Fact("list", "shapes of the inputs as recorded"),
    "et_node": Fact("int", "the node's id in the PyTorch execution trace"),
    "node": Fact("int", "on a bounded view's note of left-out calls: the number of the node they are under (pre-order), to open its subtree"),
    "output_shapes": Fact("list", "shapes of the outputs, as an execution trace recorded them"),
    "sequence_nr": Fact("any", "autograd sequence number"),
    "forward_op": Fact("str", "the forward operator that recorded an autograd node"),
    # traces: the operator's resolution
    "op": Fact("str", "the operator with its overload, as the catalog names it"),
    "device": Fact("str", "device of the call (cpu, cuda)"),
    "dtype": Fact("str", "dtype of the call's tensors"),
    "requires_grad": Fact("bool", "the call's tensors require grad"),
    "inferred": Fact("list", "facts inferred rather than recorded"),
    "unknown": Fact("str", "why the name is unknown to the catalog or the vendor table"),
    "dispatch_key": Fact("str", "the dispatch key whose kernel answered"),
    "kernel_key": Fact("str", "the alias key the answering kernel is registered under (CompositeImplicitAutograd)"),
    "dispatch_keys": Fact("list", "the dispatch keys the call passed through"),
    "dispatch_error": Fact("str", "why the dispatch path could not be computed"),
    "dispatch_note": Fact("str", "a note on the dispatch path (a backend this build lacks)"),
    "kernel": Fact("str", "the kernel symbol that served the call"),
    "registered_at": Fact("location", "where the kernel is registered (a location; path:line text in older documents)"),
    "source": Fact("str", "path:line of the kernel's definition in the source tree"),
    "source_url": Fact("any", "pinned link of `source`"),
    "source_reason": Fact("str", "why there is no source location"),
    "source_file": Fact("str", "the file of a GPU kernel's family"),
    "conv_backend": Fact("str", "the backend select_conv_backend chooses for the recorded arguments"),
    "conv_backend_ran": Fact("str", "the backend whose operator ran"),
    "conv_backend_reason": Fact("str", "why the backend could not be asked"),
    # traces: device activity
    "launched_by": Fact("str", "the operator that launched a GPU kernel"),
    "linked_by": Fact("str", "how a GPU event was joined to its launch: correlation, flow, external id"),
    "gpu": Fact("any", "GPU index"),
    "stream": Fact("any", "CUDA stream"),
    "grid": Fact("list", "launch grid"),
    "block": Fact("list", "launch block"),
    "correlation": Fact("any", "correlation id of launch and kernel"),
}
FACT_NAMES = frozenset(FACTS)


@dataclass(frozen=True)
class CallNode:
    name: str
    kind: NodeKind
    location: Location | None = None
    via: EdgeKind | None = None  # how the parent reaches this node
    condition: str | None = None  # the condition on that edge: "case ConvBackend::Cudnn", "#if AT_CUDNN_ENABLED()"
    children: tuple[CallNode, ...] = ()
    attrs: Mapping[str, Any] = field(default_factory=dict)  # Note [node facts]

    def __post_init__(self) -> None:
        if not isinstance(self.kind, NodeKind):
            object.__setattr__(self, "kind", NodeKind(self.kind))
        undeclared = self.attrs.keys() - FACT_NAMES
        if undeclared:
            raise ValueError(f"{self.name}: undeclared node facts {sorted(undeclared)}; every fact is declared in model.FACTS")

    @property
    def facts(self) -> Mapping[str, Any]:
        return self.attrs

    @property
    def duration_us(self) -> float | None:
        value = self.attrs.get("duration_us")
        return float(value) if value is not None else None


CALLTREE_VERSION = 2


@dataclass(frozen=True)
class CallTree(Answer):
    root: CallNode
    notes: tuple[str, ...] = ()  # stated once at the top: version mismatches, missing layers
    meta: Mapping[str, Any] = field(default_factory=dict)  # kind (stack, callers, path, trace), target, device, ...

    DOCUMENT = "calltree"

    @property
    def kind(self) -> str:
        """What the tree answers: stack, callers, path or trace."""
        return str(self.meta.get("kind", self.root.kind.value))

    def walk(self):
        """(depth, node) in pre-order, without recursion."""
        stack: list[tuple[int, CallNode]] = [(0, self.root)]
        while stack:
            depth, node = stack.pop()
            yield depth, node
            stack.extend((depth + 1, c) for c in reversed(node.children))

    def to_json(self) -> dict[str, Any]:
        """The calltree/2 document (kernelmap.answers describes it), built
        with an explicit stack: traces nest deeper than Python recurses."""
        origins = OriginTable()
        root = _node_json(self.root, origins)
        stack: list[tuple[CallNode, dict[str, Any]]] = [(self.root, root)]
        while stack:
            node, out = stack.pop()
            for child in node.children:
                c = _node_json(child, origins)
                out["children"].append(c)
                stack.append((child, c))
        return document(
            self.DOCUMENT,
            CALLTREE_VERSION,
            kind=self.kind,
            notes=list(self.notes),
            meta=_plain(dict(self.meta), origins),
            origins=origins.to_json(),
            root=root,
        )

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> CallTree:
        """The tree a calltree/2 document describes (post-order, explicit stack)."""
        d = check_document(d, cls.DOCUMENT, CALLTREE_VERSION)
        origins = OriginTable.from_json(d.get("origins"))
        order: list[Mapping[str, Any]] = []
        stack = [d["root"]]
        while stack:
            n = stack.pop()
            order.append(n)
            stack.extend(n.get("children") or ())
        done: dict[int, CallNode] = {}
        for n in reversed(order):
            location = n.get("location")
            done[id(n)] = CallNode(
                n["name"],
                NodeKind(n["kind"]),
                Location.from_json(location, origins) if location else None,
                EdgeKind(n["via"]) if n.get("via") else None,
                n.get("condition"),
                tuple(done.pop(id(c)) for c in n.get("children") or ()),
                {k: _fact_from_json(k, v, origins) for k, v in (n.get("facts") or {}).items()},
            )
        root = done[id(d["root"])]
        meta = dict(d.get("meta") or {})
        if d.get("kind") and d["kind"] != root.kind.value:
            meta.setdefault("kind", d["kind"])  # what the tree answers, when its root does not say it
        return cls(root, tuple(d.get("notes") or ()), _tuples(meta))


def _plain(value: Any, origins: OriginTable) -> Any:
    """A fact or meta value as JSON data."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, Location):
        return value.to_json(origins)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Mapping):
        return {str(k): _plain(v, origins) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_plain(v, origins) for v in value]
    if hasattr(value, "to_json"):
        return value.to_json()
    return str(value)


def _tuples(value: Any) -> Any:
    """JSON arrays back as tuples (the model's immutable lists)."""
    if isinstance(value, list):
        return tuple(_tuples(v) for v in value)
    if isinstance(value, dict):
        return {k: _tuples(v) for k, v in value.items()}
    return value


def _fact_from_json(name: str, value: Any, origins: OriginTable) -> Any:
    fact = FACTS.get(name)
    if fact is not None and fact.type == "location" and isinstance(value, Mapping):
        return Location.from_json(value, origins)
    return _tuples(value)


def _node_json(node: CallNode, origins: OriginTable) -> dict[str, Any]:
    return {
        "name": node.name,
        "kind": node.kind.value,
        "layer": node.kind.layer,
        "location": node.location.to_json(origins) if node.location else None,
        "via": node.via.value if node.via is not None else None,
        "condition": node.condition,
        "facts": {str(k): _plain(v, origins) for k, v in node.attrs.items()},
        "children": [],
    }


# ---------------------------------------------------------------------------
# The dispatcher's path, and the `where` answer
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class DispatchStep:
    key: str
    kernel: Kernel | None
    # "falls through" (a fallthrough kernel: the next key is tried), "redispatches"
    # (does its part, then calls the keys below), "answers" (the call ends here,
    # a composite kernel decomposing into further calls), "from yaml" (a backend
    # this build lacks: answered from native_functions.yaml).
    action: str
    tag: str = ""


@dataclass(frozen=True)
class DispatchPath:
    """The dispatch keys one call passes through, and what each does (live)."""

    op: str
    device: str
    dtype: str
    requires_grad: bool
    autocast: bool
    inference_mode: bool
    keys: tuple[str, ...]  # the call's dispatch key set, highest priority first
    steps: tuple[DispatchStep, ...]
    live: bool  # False when this build lacks the device's backend
    note: str | None = None

    def __iter__(self):
        return iter(self.steps)

    def to_json(self, origins: OriginTable | None = None) -> dict[str, Any]:
        return {
            "op": self.op,
            "device": self.device,
            "dtype": self.dtype,
            "requires_grad": self.requires_grad,
            "autocast": self.autocast,
            "inference_mode": self.inference_mode,
            "live": self.live,
            "note": self.note,
            "keys": list(self.keys),
            "steps": [
                {"key": s.key, "action": s.action, "tag": s.tag, "kernel": s.kernel.to_json(origins) if s.kernel else None} for s in self.steps
            ],
        }

    @staticmethod
    def from_json(d: Mapping[str, Any], origins: OriginTable | None = None) -> DispatchPath:
        steps = tuple(
            DispatchStep(s["key"], Kernel.from_json(s["kernel"], origins) if s.get("kernel") else None, s["action"], s.get("tag", ""))
            for s in d.get("steps") or ()
        )
        return DispatchPath(
            d["op"], d["device"], d["dtype"], d["requires_grad"], d["autocast"], d["inference_mode"], tuple(d["keys"]), steps, d["live"], d.get("note")
        )


@dataclass(frozen=True)
class LiveAnswer:
    """What the live dispatcher of the installed torch says about one operator."""

    registrations: tuple[Kernel, ...]  # active registrations, alias keys included
    schema_location: Location | None
    path: DispatchPath


@dataclass(frozen=True)
class SourceStep:
    """One landmark of the operator's code on a device, from an indexed source tree."""

    role: str  # "entry kernel", "stub kernel", "leaf"
    name: str
    location: Location | None
    detail: str = ""  # the edge's condition, the vendor library


@dataclass(frozen=True)
class FunctionRef:
    """A Python function (or a name bound to one) at its line."""

    name: str
    location: Location

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "path": self.location.path, "line": self.location.line}


@dataclass(frozen=True)
class NativeOverride:
    """One DSL override of one operator at one dispatch key (`torch._native`),
    read by kernelmap.dispatch.native."""

    op: str  # "aten::bmm", "aten::scatter_add.out"
    dispatch_key: str
    dsl: str  # "triton", "cutedsl", "native" (the registry's DSL name)
    condition: FunctionRef
    condition_text: str | None  # the condition in words, where it is a simple expression
    implementation: FunctionRef
    registered_at: Location  # the register_op_override call
    kernels: tuple[FunctionRef, ...] = ()  # @triton.jit / @cute.kernel functions of the op's package
    registered: bool | None = None  # in this process's registry; None: not asked (static)
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def aten_runs_when(self) -> str:
        if self.registered is False:
            return "always in this process: the override is not registered here (its DSL runtime or device is unavailable)"
        return f"when {self.condition.name}(...) returns False for the call, and on any dispatch key but {self.dispatch_key}"

    def to_json(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "dispatch_key": self.dispatch_key,
            "dsl": self.dsl,
            "condition": self.condition.to_json() | {"text": self.condition_text},
            "implementation": self.implementation.to_json(),
            "registered_at": {"path": self.registered_at.path, "line": self.registered_at.line},
            "kernels": [k.to_json() for k in self.kernels],
            "registered": self.registered,
            "aten_runs_when": self.aten_runs_when,
            "notes": list(self.notes),
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any], origin: Origin | None = None) -> NativeOverride:
        def ref(d: dict[str, Any]) -> FunctionRef:
            return FunctionRef(d["name"], Location(d["path"], d["line"], origin=origin))

        reg = doc["registered_at"]
        return cls(
            doc["op"],
            doc["dispatch_key"],
            doc["dsl"],
            ref(doc["condition"]),
            doc["condition"].get("text"),
            ref(doc["implementation"]),
            Location(reg["path"], reg["line"], origin=origin),
            tuple(ref(k) for k in doc.get("kernels", ())),
            doc.get("registered"),
            tuple(doc.get("notes", ())),
        )


WHERE_VERSION = 2


@dataclass(frozen=True)
class WhereAnswer(Answer):
    """The operator behind a name: its yaml entry and kernels, what the live
    dispatcher holds and runs, and (with a tree) where the code is."""

    query: str
    ops: tuple[Op, ...]  # every operator the name reaches, most likely first
    torch_version: str
    torch_commit: str | None
    delegate: Op | None = None  # the structured delegate of ops[0], when it has one
    live: LiveAnswer | None = None  # None for a static answer
    notes: tuple[str, ...] = ()
    source: tuple[SourceStep, ...] = ()  # with an indexed tree: entry kernel, stub kernel, leaves
    overrides: tuple[NativeOverride, ...] = ()  # DSL overrides registered over the operator (torch._native)

    DOCUMENT = "where"

    @property
    def op(self) -> Op:
        return self.ops[0]

    def locations(self) -> Iterable[Location | None]:
        """Every location the answer shows (Note [versions on locations])."""
        for op in (*self.ops, *((self.delegate,) if self.delegate else ())):
            yield op.location
            yield from (k.location for k in op.dispatch)
            if op.autograd is not None:
                yield op.autograd.location
        if self.live is not None:
            yield self.live.schema_location
            yield from (k.location for k in self.live.registrations)
            yield from (s.kernel.location for s in self.live.path.steps if s.kernel is not None)
        yield from (s.location for s in self.source)
        for o in self.overrides:
            for site in (getattr(o, "condition", None), getattr(o, "implementation", None), *getattr(o, "kernels", ())):
                yield getattr(site, "location", None)

    def to_json(self) -> dict[str, Any]:
        origins = OriginTable()
        live = None
        if self.live is not None:
            live = {
                "schema_registered_at": location_json(self.live.schema_location, origins),
                "registrations": [k.to_json(origins) for k in self.live.registrations],
                "dispatch_path": self.live.path.to_json(origins),
            }
        body = {
            "query": self.query,
            "torch": {"version": self.torch_version, "commit": self.torch_commit},
            "notes": list(self.notes),
            "operator": self.op.to_json(origins),
            "also": [op.to_json(origins) for op in self.ops[1:]],
            "structured_delegate": self.delegate.to_json(origins) if self.delegate else None,
            "live": live,
            "source": [{"role": s.role, "name": s.name, "location": location_json(s.location, origins), "detail": s.detail} for s in self.source],
            "overrides": [o.to_json() for o in self.overrides],
        }
        return document(self.DOCUMENT, WHERE_VERSION, origins=origins.to_json(), **body)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> WhereAnswer:
        d = check_document(d, cls.DOCUMENT, WHERE_VERSION)
        origins = OriginTable.from_json(d.get("origins"))
        ops = (Op.from_json(d["operator"], origins), *(Op.from_json(o, origins) for o in d.get("also") or ()))
        live = None
        if d.get("live"):
            lv = d["live"]
            live = LiveAnswer(
                tuple(Kernel.from_json(k, origins) for k in lv.get("registrations") or ()),
                location_from_json(lv.get("schema_registered_at"), origins),
                DispatchPath.from_json(lv["dispatch_path"], origins),
            )
        source = tuple(SourceStep(s["role"], s["name"], location_from_json(s.get("location"), origins), s.get("detail", "")) for s in d.get("source") or ())
        overrides = tuple(NativeOverride.from_json(o) for o in d.get("overrides") or ())
        return cls(
            d["query"],
            ops,
            d["torch"]["version"],
            d["torch"].get("commit"),
            Op.from_json(d["structured_delegate"], origins) if d.get("structured_delegate") else None,
            live,
            tuple(d.get("notes") or ()),
            source,
            overrides,
        )


# ---------------------------------------------------------------------------
# The `explain` answer
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Alternative:
    """Another way one step of a call can go, and the condition that picks it
    (Note [alternatives of a step])."""

    name: str  # what runs instead: "unrolled_elementwise_kernel"
    condition: str | None  # the code's condition for it: "case 1", "else of if (contiguous)"
    location: Location | None = None  # where it is called
    note: str = ""  # why the selected call never takes it, when known: "not for float32 alone: ..."

    def to_json(self, origins: OriginTable | None = None) -> dict[str, Any]:
        return {"name": self.name, "condition": self.condition, "location": location_json(self.location, origins), "note": self.note}

    @staticmethod
    def from_json(d: Mapping[str, Any], origins: OriginTable | None = None) -> Alternative:
        return Alternative(d["name"], d.get("condition"), location_from_json(d.get("location"), origins), d.get("note") or "")


# Note [alternatives of a step]
# A step of a call is one of several ways the code can go at that point: a
# switch's case 4 launches vectorized_elementwise_kernel, its case 1
# unrolled_elementwise_kernel; a non-contiguous input takes launch_legacy_kernel.
# The explanation follows one way (the main path: Note [the main path] in
# kernelmap.processors) as its steps; the others are the step's
# alternatives, each with the condition that picks it, never steps of their
# own. Renderers show them folded under their step.


@dataclass(frozen=True)
class Step:
    """One step of a call: what happens, where, and the code that does it."""

    title: str  # "Python argument parsing", "dtype switch", ...
    summary: str
    location: Location | None = None
    excerpt: str = ""  # source lines starting at location.line
    language: str = "cpp"
    alternatives: tuple[Alternative, ...] = ()  # what runs instead of this step, and when (Note [alternatives of a step])


EXPLAIN_VERSION = 2


@dataclass(frozen=True)
class Explanation(Answer):
    """The anatomy of one operator call on one device, step by step."""

    op: str
    device: str
    steps: tuple[Step, ...]
    notes: tuple[str, ...] = ()
    dtype: str = "float32"
    torch_version: str | None = None  # the installed torch's (Note [versions on locations])

    DOCUMENT = "explain"

    def to_json(self) -> dict[str, Any]:
        origins = OriginTable()
        steps = [
            {"title": s.title, "summary": s.summary, "location": location_json(s.location, origins), "excerpt": s.excerpt, "language": s.language,
             "alternatives": [a.to_json(origins) for a in s.alternatives]}
            for s in self.steps
        ]
        return document(self.DOCUMENT, EXPLAIN_VERSION, op=self.op, device=self.device, dtype=self.dtype, torch=self.torch_version,
                        notes=list(self.notes), origins=origins.to_json(), steps=steps)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Explanation:
        d = check_document(d, cls.DOCUMENT, EXPLAIN_VERSION)
        origins = OriginTable.from_json(d.get("origins"))
        steps = tuple(
            Step(s["title"], s["summary"], location_from_json(s.get("location"), origins), s.get("excerpt", ""), s.get("language", "cpp"),
                 tuple(Alternative.from_json(a, origins) for a in s.get("alternatives") or ()))
            for s in d.get("steps") or ()
        )
        return cls(d["op"], d["device"], steps, tuple(d.get("notes") or ()), d.get("dtype", "float32"), d.get("torch"))


# ---------------------------------------------------------------------------
# The `source list` answer
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class SourceEntry:
    """One registered source tree, as `source list` shows it."""

    name: str
    root: str
    version: str
    commit: str | None
    kind: str  # local | fetched
    indexed: bool


SOURCES_VERSION = 1


@dataclass(frozen=True)
class SourceList(Answer):
    trees: tuple[SourceEntry, ...]

    DOCUMENT = "sources"

    def to_json(self) -> dict[str, Any]:
        return document(self.DOCUMENT, SOURCES_VERSION, trees=[dict(t.__dict__) for t in self.trees])

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> SourceList:
        d = check_document(d, cls.DOCUMENT, SOURCES_VERSION)
        return cls(tuple(SourceEntry(**t) for t in d.get("trees") or ()))


# ---------------------------------------------------------------------------
# The `scaffold` answer
# ---------------------------------------------------------------------------

SCAFFOLD_VERSION = 1


@dataclass(frozen=True)
class ScaffoldAnswer(Answer):
    """What `kernelmap scaffold` wrote: the custom operator, what it starts as, the files."""

    root: str  # the project folder
    custom_op: str  # kernelmap_ext::myadd
    schema: str
    op: str  # the operator it starts as
    family: str  # the reference kernel it starts with
    files: tuple[str, ...]  # relative to root
    cuda: bool
    kept: tuple[str, ...] = ()  # of `files`, those the user edited, left as they were (--force)

    DOCUMENT = "scaffold"

    def to_json(self) -> dict[str, Any]:
        return document(self.DOCUMENT, SCAFFOLD_VERSION, root=self.root, custom_op=self.custom_op, schema=self.schema, op=self.op,
                        family=self.family, files=list(self.files), cuda=self.cuda, kept=list(self.kept))

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ScaffoldAnswer:
        d = check_document(d, cls.DOCUMENT, SCAFFOLD_VERSION)
        return cls(d["root"], d["custom_op"], d["schema"], d["op"], d["family"], tuple(d["files"]), bool(d["cuda"]),
                   tuple(d.get("kept", ())))


# ---------------------------------------------------------------------------
# The `path` answer
# ---------------------------------------------------------------------------

PATH_VERSION = 1


@dataclass(frozen=True)
class Route:
    """One way a call of the answer's source reaches its target: the steps in
    call order, each a childless CallNode (its edge `via`, `condition` and facts
    as the call graph has them), source first, target last."""

    steps: tuple[CallNode, ...]

    def __post_init__(self) -> None:
        if not self.steps:
            raise ValueError("a route has at least one step")
        if any(s.children for s in self.steps):
            raise ValueError("a route's steps carry no children: the route itself is the order")

    @property
    def conditions(self) -> tuple[str, ...]:
        """The conditions on the route's edges and the preprocessor conditions of
        its definitions, in call order, each once: what a call must meet to take it."""
        found: dict[str, None] = {}
        for s in self.steps:
            for text in (s.condition, f"#if {s.attrs['preprocessor']}" if s.attrs.get("preprocessor") else None):
                if text:
                    found.setdefault(text, None)
        return tuple(found)


@dataclass(frozen=True)
class PathAnswer(Answer):
    """The routes from one name (Python, operator, C++ symbol) to another
    symbol or vendor call on one device, shortest first. No route is an answer too."""

    source: str
    target: str
    device: str
    routes: tuple[Route, ...]
    notes: tuple[str, ...] = ()
    searched: Mapping[str, Any] = field(default_factory=dict)  # nodes, depth, cut (a limit was reached), more (routes not shown)
    torch_version: str | None = None  # the installed torch's (Note [versions on locations])

    DOCUMENT = "path"

    def to_json(self) -> dict[str, Any]:
        origins = OriginTable()
        routes = [{"conditions": list(r.conditions), "steps": [_node_json(s, origins) for s in r.steps]} for r in self.routes]
        for r in routes:
            for s in r["steps"]:
                del s["children"]
        return document(self.DOCUMENT, PATH_VERSION, source=self.source, target=self.target, device=self.device, torch=self.torch_version,
                        notes=list(self.notes),
                        searched=_plain(dict(self.searched), origins), origins=origins.to_json(), routes=routes)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> PathAnswer:
        d = check_document(d, cls.DOCUMENT, PATH_VERSION)
        origins = OriginTable.from_json(d.get("origins"))
        routes = tuple(
            Route(tuple(
                CallNode(
                    s["name"],
                    NodeKind(s["kind"]),
                    Location.from_json(s["location"], origins) if s.get("location") else None,
                    EdgeKind(s["via"]) if s.get("via") else None,
                    s.get("condition"),
                    (),
                    {k: _fact_from_json(k, v, origins) for k, v in (s.get("facts") or {}).items()},
                )
                for s in r["steps"]
            ))
            for r in d.get("routes") or ()
        )
        return cls(d["source"], d["target"], d["device"], routes, tuple(d.get("notes") or ()), dict(d.get("searched") or {}), d.get("torch"))
