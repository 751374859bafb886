"""Observed stacks -> one CallTree, each frame joined to the source map: a
native frame to its definition in the selected tree or the generated files
(file:line, origin), with the CPU capability and dtype case it ran; a Python
frame to its file and line; the steps the compiler inlined between two
frames that remain (a structured kernel's `impl` calling its stub, the stub's
dispatch) put back from the source index and marked `inlined`.

Note [observed frames]
A stack is read outermost first. Frames of the dispatcher's plumbing
(`c10::impl::wrap_kernel_functor_unboxed_`, `c10::KernelFunction::call`,
boxing adapters, `std::function` invokers) carry no code a reader looks
for; they are folded into the next frame (its `hidden` fact counts them).
Everything else is a node, merged with the same frame of other stacks
(same function, lambda and capability below the same parent), so the tree
is the union of what ran, each node counting the stacks through it (`hits`).
"""

from __future__ import annotations

import os
import re
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelmap.model import CallNode, CallTree, EdgeKind, Location, NodeKind, Origin
from kernelmap.observe.capture import Capture, RawFrame
from kernelmap.observe.frames import NativeFrame, parse_frame, split_scope, stack_capability
from kernelmap.observe.symbols import _VENDOR_C

_PLUMBING = (
    "c10::impl::wrap_kernel_functor_unboxed_",
    "c10::impl::make_boxed_from_unboxed_functor",
    "c10::impl::BoxedKernelWrapper",
    "c10::impl::call_functor_with_args_from_stack",
    "c10::KernelFunction::",
    "c10::BoxedKernel::",
    "c10::Dispatcher::call",
    "c10::Dispatcher::redispatch",
    "c10::callUnboxedKernelFunction",
    "c10::impl::detail::WrapFunctionIntoFunctor",
    "std::_Function_handler",
    "std::function",
    "c10::impl::boxed_kernel_wrapper",
    "c10::impl::wrap_kernel_functor",
    "c10::impl::OperatorEntry",
)
_LOOPS = ("c10::function_ref::callback_fn", "at::TensorIteratorBase::for_each", "at::TensorIteratorBase::serial_for_each",
          "at::internal::serial_for_each", "at::parallel_for", "at::internal::invoke_parallel", "at::parallel_reduce",
          "at::TensorIteratorBase::loop_2d_from_1d")


def is_plumbing(name: str) -> bool:
    return any(p in name for p in _PLUMBING)


# NVIDIA's libraries, by file: a frame in one is the vendor's (cudnn::backend::execute) or the CUDA runtime's
_CUDA_VENDOR_LIBS = ("libcudnn", "libcublas", "libcufft", "libcurand", "libcusparse", "libcusolver", "libnccl", "libnvrtc", "libnvJitLink")
_CUDA_RUNTIME_LIBS = ("libcudart", "libcuda.so")


def outside_library(lib: str | None) -> bool:
    """A frame in NVIDIA's libraries: its code is not in any PyTorch tree."""
    return bool(lib) and lib.startswith(_CUDA_VENDOR_LIBS + _CUDA_RUNTIME_LIBS)


def node_kind(frame: NativeFrame, lib: str | None) -> NodeKind:
    f = frame.lookup
    if lib and lib.startswith(_CUDA_RUNTIME_LIBS):
        return NodeKind.RUNTIME
    if lib and lib.startswith(_CUDA_VENDOR_LIBS):
        return NodeKind.VENDOR
    if "THPVariable_" in f or f.startswith("torch::autograd::THP"):
        return NodeKind.BINDING
    if f.startswith("at::_ops::"):
        return NodeKind.OPS_ENTRY
    if f.startswith(("torch::autograd::VariableType", "torch::ADInplaceOrView", "at::wrapper_", "at::functionalization")) or "::wrapper_" in f:
        return NodeKind.WRAPPER
    if f.startswith("at::native::DispatchStub"):
        return NodeKind.STUB
    if f.startswith(_LOOPS) or "VectorizedLoop2d" in f or f.endswith(("vectorized_loop", "basic_loop")):
        return NodeKind.DEVICE_LOOP
    if "::" not in f and (_VENDOR_C.fullmatch(f) or f in ("memcpy", "memmove", "memset") or f.startswith("__mem")):
        return NodeKind.VENDOR
    if f.startswith(("dnnl::", "ideep::", "mkl", "Sleef", "std::__introsort_loop", "std::__insertion_sort", "std::__stable_sort")):
        return NodeKind.VENDOR
    return NodeKind.KERNEL


# Note [the definition a library holds]
# One name can have several definitions in a tree: at::native::cudnn_convolution
# in cudnn/ConvShared.cpp (under AT_CUDNN_ENABLED) and in ConvPlaceholders.cpp
# (under !AT_CUDNN_ENABLED, the build without cuDNN); at::native::add_kernel in
# the generated UfuncCPUKernel_add.cpp and UfuncCUDA_add.cu. A frame names the
# library it ran in: libtorch_cuda is the CUDA build's and compiles CUDA
# sources; libtorch_cpu compiles none. The definition shown is one that build
# compiles (its #if holds for the release build's macros), in a file of the
# library's kind.
_CUDA_DIRS = ("/cuda/", "/cudnn/", "/miopen/", "/sparse/cuda/", "/quantized/cuda/", "/nested/cuda/", "/transformers/cuda/")


def _is_cuda_source(path: str) -> bool:
    base = os.path.basename(path)
    return path.endswith((".cu", ".cuh")) or any(d in "/" + path for d in _CUDA_DIRS) or base.startswith(("UfuncCUDA", "RegisterCUDA", "CUDA"))


def _build_of(lib: str | None) -> str:
    return "cuda" if lib and lib.startswith(("libtorch_cuda", "libc10_cuda")) else "cpu"


@dataclass
class SourceMap:
    """Find a frame's definition: the selected tree's index, then the generated files."""

    index: Any = None  # kernelmap.source.Index
    generated: Any = None  # kernelmap.codegen.GeneratedFiles
    _cache: dict = field(default_factory=dict)
    _gen_db: Any = None
    _configs: dict = field(default_factory=dict)

    def definition(self, frame: NativeFrame, lib: str | None = None) -> tuple[Location | None, str | None]:
        """(location, why none); `lib`, the library the frame ran in, picks
        among definitions of one name (Note [the definition a library holds])."""
        build = _build_of(lib)
        key = (frame.lookup, frame.clone, build)
        if key in self._cache:
            return self._cache[key]
        found = self._find(frame, build)
        self._cache[key] = found
        return found

    def _find(self, frame: NativeFrame, build: str) -> tuple[Location | None, str | None]:
        name = frame.lookup
        parts = split_scope(name)
        if self.index is not None:
            try:
                defs = self.index.definitions(name)
                if not defs and len(parts) >= 2 and parts[-2].startswith("structured_") and parts[-1] in ("impl", "meta"):
                    kind = "structured_impl" if parts[-1] == "impl" else "structured_meta"
                    defs = self.index.structured_kernels(parts[-2][len("structured_") :], kind=kind)
                if defs:
                    return self._built(defs, build).location, None
            except Exception:  # a damaged index reads as no definition; the answer says why
                return None, "the source index could not be read"
        located = self._generated(name, parts, build)
        if located is not None:
            return located, None
        if "::" not in name or name.startswith(("dnnl::", "mkl", "Sleef", "std::")):
            return None, "a library outside the tree"
        return None, "not in the selected tree (a function of another version, or of a file the tree lacks)"

    def _built(self, defs: list, build: str):
        """Of a name's definitions, one that `build` compiles, in a file of its
        library's kind (Note [the definition a library holds])."""
        if len(defs) < 2:
            return defs[0]
        config = self._configs.get(build)
        if config is None and build not in self._configs:
            try:
                from kernelmap.source.config import build_config

                config = build_config(Path(self.index.tree.root), "cuda" if build == "cuda" else "cpu")
            except Exception:  # no build facts: file kinds alone decide
                config = None
            self._configs[build] = config

        def rank(d):
            compiled = config is None or config.evaluate(d.symbol.condition) is not False
            return (not compiled, _is_cuda_source(d.location.path) != (build == "cuda"))

        return min(defs, key=rank)

    def _generated(self, name: str, parts: list[str], build: str = "cpu") -> Location | None:
        if self.generated is None:
            return None
        if self._gen_db is None:
            path = Path(self.generated.root) / "index.sqlite"
            if not path.exists():
                return None
            self._gen_db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        if name.startswith("at::_ops::") and len(parts) >= 4:
            wanted, prefix = f"{parts[2]}::{parts[3]}", "Operators_"
        elif "THPVariable_" in name:
            wanted, prefix = parts[-1], "python_"
        elif name.startswith("torch::autograd::VariableType"):
            wanted, prefix = parts[-1], "VariableType"
        elif name.startswith("torch::ADInplaceOrView"):
            wanted, prefix = parts[-1], "ADInplaceOrView"
        elif "wrapper_" in parts[-1]:
            wanted, prefix = parts[-1], "Register"
        elif len(parts) >= 2 and parts[-2].startswith("structured_") and parts[-1] in ("impl", "meta"):
            wanted, prefix = f"{parts[-2]}::{parts[-1]}", None
        else:
            wanted, prefix = parts[-1], ""
        rows = self._gen_db.execute("SELECT f.path, d.line FROM defs d JOIN files f ON f.id = d.file WHERE d.name = ?", (wanted,)).fetchall()
        if prefix:
            rows = [r for r in rows if os.path.basename(r[0]).startswith(prefix)]
        elif prefix == "":
            rows = [r for r in rows if "Ufunc" in r[0]]
        if not rows:
            return None
        path, line = min(rows, key=lambda r: (_is_cuda_source(r[0]) != (build == "cuda"), r))
        return Location(path, line, origin=self.generated.origin)

    def inlined_between(self, caller: NativeFrame, callee: NativeFrame) -> list[tuple[str, Location | None, EdgeKind | None]]:
        """Steps of the source map between two observed frames that the
        compiler folded into `caller`: a route of at most two calls, from
        `caller`'s definition to `callee`'s name; [] when it calls it directly
        or no short route exists."""
        if self.index is None or caller.lookup == callee.lookup:
            return []
        key = ("inl", caller.lookup, callee.lookup)
        if key in self._cache:
            return self._cache[key]
        route: list = []
        try:
            route = self._route(caller.lookup, callee)
        except Exception:
            route = []
        self._cache[key] = route
        return route

    def _route(self, start: str, callee: NativeFrame):
        target = split_scope(callee.lookup)[-1] if callee.lookup else ""
        if not target:
            return []
        defs = self.index.definitions(start)
        if not defs:
            return []
        first = self.index.calls_from(defs[0])
        if any(_names(c.callee, target) for c in first):
            return []
        for c in first[:80]:
            if not c.callee or c.kind == "vendor":
                continue
            inner = self.index.definitions(c.callee)
            if not inner:
                continue
            if any(_names(cc.callee, target) for cc in self.index.calls_from(inner[0])):
                return [(inner[0].symbol.qualified_name, inner[0].location, c.edge.via if hasattr(c, "edge") else None)]
        return []


def _names(callee: str | None, target: str) -> bool:
    return bool(callee) and (callee == target or callee.endswith("::" + target))


# ---------------------------------------------------------------------------


@dataclass
class _Node:
    name: str
    kind: NodeKind
    location: Location | None
    attrs: dict
    children: dict = field(default_factory=dict)
    hits: int = 0


def python_location(file: str | None, line: int | None, wheel: Origin | None) -> tuple[Location | None, str | None]:
    """A Python frame's place: a Location in the installed wheel for torch's
    own files, else `path:line` as a string (the user's file)."""
    if not file or not line:
        return None, None
    if wheel is not None and wheel.root:
        root = os.path.realpath(wheel.root).rstrip("/") + "/"
        real = os.path.realpath(file)
        if real.startswith(root):
            return Location(real[len(root) :], int(line), origin=wheel), None
    return None, f"{file}:{line}"


def observed_tree(capture: Capture, sources: SourceMap, target: str, *, wheel: Origin | None = None, notes: tuple[str, ...] = (),
                  all_frames: bool = False, meta: dict | None = None, below: list[list[CallNode]] | None = None) -> CallTree:
    """The union of the captured stacks as one tree (Note [observed frames]).
    `below`, one list per stack, holds nodes to hang under that stack's
    innermost frame (the GPU kernel a launch ran)."""
    root = _Node(target, NodeKind.TRACE, None, {})
    for s_index, stack in enumerate(capture.stacks):
        frames = list(stack.frames)  # innermost first
        natives = [parse_frame(f.name) if f.name and not f.is_python else None for f in frames]
        caps = stack_capability([n or parse_frame("?") for n in natives])
        cur = root
        hidden = 0
        previous: NativeFrame | None = None
        for i in range(_first_shown(frames), -1, -1):
            f, nf = frames[i], natives[i]
            if f.is_python:
                if _is_ours(f):
                    continue
                location, source = python_location(f.file, f.line, wheel)
                key = ("py", f.py, f.file, f.line)
                attrs = {"observed": "observed"}
                if source:
                    attrs["source"] = source
                cur = _child(cur, key, f.py or "?", NodeKind.PYTHON, location, attrs)
                previous = None
                continue
            if nf is None or not f.name:
                hidden += 1
                continue
            if not all_frames and (is_plumbing(nf.lookup) or is_plumbing(f.name)) and i != 0:
                hidden += 1
                continue
            if f.lib and not f.lib.startswith(("libtorch", "libc10")) and i != 0 and not all_frames and node_kind(nf, f.lib) is not NodeKind.VENDOR:
                if f.lib.startswith("libpython") or f.lib.startswith("libc."):
                    hidden += 1
                    continue
            if previous is not None:
                for name, location, via in sources.inlined_between(previous, nf):
                    cur = _child(cur, ("inl", name), name, NodeKind.KERNEL, location, {"observed": "inlined"}, via=via)
            if nf.runs:  # a function_ref callback is named, and placed, for the loop it runs (its operator(), inlined into it)
                is_class = split_scope(nf.runs)[-1][:1].isupper()
                label_name = nf.runs + ("::operator()" if is_class else "")
                location, why = sources.definition(parse_frame(label_name + ("" if is_class else "()")), f.lib)
            else:
                location, why = (None, "outside") if outside_library(f.lib) else sources.definition(nf, f.lib)
            attrs: dict[str, Any] = {"observed": "observed"}
            attrs["native_frame"] = nf.raw if len(nf.raw) <= 2000 else nf.raw[:2000] + "…"
            if f.lib:
                attrs["library_file"] = f.lib
            if caps[i]:
                attrs["capability"] = caps[i]
            if nf.dtype:
                attrs["dtype"] = nf.dtype
                if nf.dtype_case:
                    attrs["dtype_case"] = nf.dtype_case
            ran = ", ".join(x for x in (caps[i], f"case {nf.dtype_case}" if nf.dtype_case else None) if x)
            if ran:
                attrs["ran"] = ran
            if why and location is None:
                attrs["source_reason"] = f"in {f.lib}, a library outside the tree" if outside_library(f.lib) else why
            if hidden:
                attrs["hidden"] = hidden
                hidden = 0
            label = nf.lookup + ("::" + "::".join("lambda" for _ in nf.lambda_path) if nf.lambda_path else "")
            if nf.runs:
                label = nf.runs + ("::operator()" if split_scope(nf.runs)[-1][:1].isupper() else "::lambda")
            key = ("native", nf.lookup, len(nf.lambda_path), nf.dtype)
            cur = _child(cur, key, label, node_kind(nf, f.lib), location, attrs)
            previous = nf
        for leaf in (below[s_index] if below and s_index < len(below) else ()):
            node = _child(cur, ("below", leaf.name), leaf.name, leaf.kind, leaf.location, leaf.attrs)
            for k in ("duration_us",):
                if k in leaf.attrs and node.hits > 1:
                    node.attrs[k] = round(node.attrs.get(k, 0) + leaf.attrs[k], 3)
    return CallTree(_freeze(root), notes, dict(meta or {}, kind="observe", target=target))


_OURS = ("runner.py", "examples.py", "runpy.py", "<frozen runpy>")


def _is_ours(f: RawFrame) -> bool:
    """A frame of kernelmap's runner around the user's code."""
    return bool(f.file) and (os.path.basename(f.file) in _OURS and "kernelmap" in f.file or f.file in ("<frozen runpy>",))


def _first_shown(frames: list[RawFrame]) -> int:
    """Index (innermost first) of the outermost frame shown: the user's
    outermost Python frame, else the binding, else the operator's entry;
    the interpreter and the runner above it are left out."""
    users = [i for i, f in enumerate(frames) if f.is_python and not _is_ours(f)]
    if users:
        return max(users)
    for prefix in ("torch::autograd::THPVariable_", "at::_ops::"):
        found = [i for i, f in enumerate(frames) if f.name and f.name.startswith(prefix)]
        if found:
            return max(found)
    return len(frames) - 1


def _child(parent: _Node, key, name, kind, location, attrs, via=None) -> _Node:
    node = parent.children.get(key)
    if node is None:
        node = _Node(name, kind, location, dict(attrs))
        if via is not None:
            node.attrs["_via"] = via
        parent.children[key] = node
    else:
        for k in ("hidden",):
            if k in attrs:
                node.attrs[k] = max(node.attrs.get(k, 0), attrs[k])
        for k in ("capability", "ran"):  # a later stack that reads the capability tells it for this node too
            if k in attrs and k not in node.attrs:
                node.attrs[k] = attrs[k]
    node.hits += 1
    return node


def _freeze(root: _Node) -> CallNode:
    """Post-order without recursion."""
    order: list[_Node] = []
    stack = [root]
    while stack:
        n = stack.pop()
        order.append(n)
        stack.extend(n.children.values())
    done: dict[int, CallNode] = {}
    for n in reversed(order):
        attrs = {k: v for k, v in n.attrs.items() if not k.startswith("_")}
        if n.hits:
            attrs["hits"] = n.hits
        done[id(n)] = CallNode(n.name, n.kind, n.location, n.attrs.get("_via"), None, tuple(done.pop(id(c)) for c in n.children.values()), attrs)
    return done[id(root)]


_PARAMS = re.compile(r"\(.*\)$")
