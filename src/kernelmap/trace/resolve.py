"""Nodes of a trace tree -> what each one is: operator nodes get their catalog
entry, the dispatch key that served them and its kernel, the kernel's source
(when a source tree is indexed), the vendor library they end in and, for
convolutions, the backend chosen; GPU kernels get their launching operator,
their family's source, or the closed library they belong to.

Facts are computed once per distinct (operator, device, dtype, grad mode)
and shared by every node with the same key, so a model of a thousand calls
costs a few dozen lookups.

Note [inputs of a traced call]
A trace records each operator's input shapes, strides and C++ dtype names,
not their device or requires_grad. The device is taken as CUDA for an op
that launched device work (itself or below it, or inside such an op) and as
CPU otherwise; grad mode is on for an op that recorded an autograd sequence
number (it passed the Autograd key, which only happens for inputs that
require grad under grad mode). Both are marked as inferred.

Note [conv backend]
`at::_convolution` asks `select_conv_backend` which implementation to run
(oneDNN, cuDNN, NNPACK, the slow im2col path...). For a trace recorded in
this process (or on a device this torch has) the choice is asked again with
tensors of the recorded shapes, strides and dtype; the backend operator that
really ran below `_convolution` is reported beside it, so a disagreement
(say a trace taken with other `torch.backends` flags) is visible.
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from pathlib import Path
from dataclasses import dataclass, field
from typing import Any

from kernelmap import vendors
from kernelmap.errors import KernelmapError
from kernelmap.model import OriginKind
import numpy as np

from kernelmap.trace.build import _slices, Table
from kernelmap.trace.codes import climb, combine, DEVICE_KINDS, first_seen, KIND, KINDS, NONE
from kernelmap.trace.events import CONV_OPS

# C++ type names the profiler writes for tensor dtypes -> torch dtype names.
DTYPES = {
    "float": "float32",
    "double": "float64",
    "c10::Half": "float16",
    "c10::BFloat16": "bfloat16",
    "long int": "int64",
    "int64_t": "int64",
    "int": "int32",
    "short int": "int16",
    "short": "int16",
    "signed char": "int8",
    "unsigned char": "uint8",
    "bool": "bool",
    "c10::complex<float>": "complex64",
    "c10::complex<double>": "complex128",
    "c10::Float8_e4m3fn": "float8_e4m3fn",
    "c10::Float8_e5m2": "float8_e5m2",
}
_NON_TENSOR = {"Scalar", "ScalarList", "TensorList", "GenericList", "", "None", "String", "Device", "Layout", "ScalarType"}

# Children of `_convolution` / `convolution_backward` that show the backend that ran.
CONV_BACKEND_OPS = vendors.CONV_BACKEND_OPS


def op_vendor(name: str, device: str, conv_backend: str | None = None, platform: str = "cuda") -> tuple[str, bool] | None:
    """The external library an operator's own kernel calls, and whether its code is closed."""
    lib = vendors.of_op(name, device, conv_backend, platform)
    return (lib.name, lib.closed) if lib is not None else None


_AMD_DEVICE = re.compile(r"\b(AMD|Radeon|Instinct)\b|\bgfx\d", re.I)


def platform_of(header: dict[str, Any], table: Table | None = None) -> str:
    """"rocm" for a trace recorded by a ROCm build (Note [ROCm traces] in
    kernelmap.vendors), else "cuda": roctracer's own field, an AMD device in
    deviceProperties, or HIP runtime calls."""
    if "roctracer_version" in header:
        return "rocm"
    devices = header.get("deviceProperties")
    if isinstance(devices, list):
        for d in devices:
            if isinstance(d, dict) and ("gcnArchName" in d or _AMD_DEVICE.search(str(d.get("name", "")))):
                return "rocm"
    if table is not None:
        labels = table.c.labels
        used = set(table.label[table.kind == KIND["runtime"]].tolist())
        if any(labels.display[i].startswith("hip") for i in used):
            return "rocm"
    return "cuda"


def schema_arg_types(schema: str) -> list[str]:
    """The declared types of a schema's arguments, in order (`*` skipped)."""
    start = schema.find("(")
    depth, end = 0, -1
    for i in range(start, len(schema)):
        c = schema[i]
        if c in "([":
            depth += 1
        elif c in ")]":
            depth -= 1
            if depth == 0:
                end = i
                break
    inner = schema[start + 1 : end]
    types, depth, cur = [], 0, []
    for c in inner + ",":
        if c in "([":
            depth += 1
        elif c in ")]":
            depth -= 1
        if c == "," and depth == 0:
            arg = "".join(cur).strip()
            cur = []
            if arg and arg != "*":
                types.append(arg.split()[0])
            continue
        cur.append(c)
    return types


def _score(types: list[str], recorded: list[str]) -> int:
    score = 4 if len(types) == len(recorded) else -abs(len(types) - len(recorded))
    for declared, got in zip(types, recorded):
        is_tensor = declared.startswith("Tensor") and not declared.startswith("Tensor[]") and not declared.startswith("Tensor?[]")
        if got in _NON_TENSOR:
            if got in ("Scalar", "ScalarList") and is_tensor and not declared.startswith("Tensor?"):
                score -= 2
            elif got == "TensorList" and declared.startswith("Tensor") and "[]" in declared:
                score += 1
        else:  # a tensor was passed
            score += 1 if is_tensor else -2
    return score


@dataclass
class Resolver:
    """Resolves the nodes of one trace; holds the caches and what is missing."""

    catalog: Any = None  # kernelmap.catalog.Catalog, loaded on first use
    live: bool = False  # recorded in this process: conv backends can be asked again
    platform: str = "cuda"  # "rocm" for a trace of a ROCm build (Note [ROCm traces] in kernelmap.vendors)
    source_index: Any = None  # an object with `locate(symbol) -> Location | None`, or None
    source_reason: str | None = None  # why kernel sources are not linked
    unknown_ops: Counter = field(default_factory=Counter)
    _ops: dict[tuple[str, tuple[str, ...]], Any] = field(default_factory=dict)
    _dispatch: dict[tuple, dict[str, Any]] = field(default_factory=dict)
    _conv: dict[tuple, str | None] = field(default_factory=dict)
    _shared: dict[tuple, dict[str, Any]] = field(default_factory=dict)
    _errors: Counter = field(default_factory=Counter)
    _kernel_resolver: Any = None
    _native_texts: list[str] | None = None
    _device_facts: dict[tuple, dict[str, Any]] = field(default_factory=dict)
    _extensions: dict[str, tuple] = field(default_factory=dict)  # custom op -> the extensions it was registered from
    _namespaces: dict[str, list[str]] = field(default_factory=dict)  # C++ namespace -> the operators registered in it
    versions: dict[str, str] = field(default_factory=dict)  # {"tree", "installed"} where they differ (Note [versions in a trace] in kernelmap.trace.summary)
    _cache: Any = None  # the dispatch facts cache, opened once per trace
    _cache_checked: bool = False

    def _dispatch_cache(self):
        """The dispatch facts cache (Note [dispatch facts cache]), or None: its
        stamp (a digest of torch's libraries' sizes and times) is taken once per
        trace, not at each operator asked (a few hundred stats and digests)."""
        if self.live:
            return None
        if not self._cache_checked:
            self._cache, self._cache_checked = _DispatchCache.opened(), True
        return self._cache

    def _kernels(self):
        """The kernel-name resolver on the same tree as the kernel sources."""
        if self._kernel_resolver is None:
            from kernelmap.kernels import KernelResolver

            ix = getattr(self.source_index, "index", None)
            tree = getattr(ix, "tree", None)
            self._kernel_resolver = KernelResolver(ix, getattr(tree, "root", None), getattr(tree, "name", None))
        return self._kernel_resolver

    def _catalog(self):
        if self.catalog is None:
            from kernelmap.catalog import load_catalog

            self.catalog = load_catalog()
        return self.catalog

    # -- operators ---------------------------------------------------------

    def catalog_op(self, name: str, recorded: list[str]):
        """The catalog entry of a profiler op name (which records no overload):
        the overload whose arguments best match the recorded input types."""
        key = (name, tuple(recorded))
        if key in self._ops:
            return self._ops[key]
        ns, _, base = name.partition("::")
        result = None
        if ns == "aten":
            candidates = self._catalog().overloads(base)
            if candidates:
                best = max(
                    enumerate(candidates),
                    key=lambda ic: (_score(schema_arg_types(ic[1].schema), recorded) - 3 * ic[1].is_out, -ic[0]),
                )
                result = best[1]
        self._ops[key] = result
        return result

    def dispatch_facts(self, op, device: str, dtype: str, requires_grad: bool) -> dict[str, Any]:
        key = (str(op.name), device, dtype, requires_grad)
        if key in self._dispatch:
            return self._dispatch[key]
        # Note [dispatch facts cache]
        cache = self._dispatch_cache()
        asked = cache.get(key) if cache is not None else None
        if asked is None:
            asked = _ask_dispatcher(str(op.name), device, dtype, requires_grad, self._catalog())
            if cache is not None:
                cache.put(key, asked)
        facts = {k: v for k, v in asked.items() if k not in ("symbol",)}
        if "symbol" in asked:
            symbol = asked["symbol"]
            structured = op.kind.value in ("structured", "structured out", "ufunc")
            generated = symbol.startswith("at::native::ufunc_")
            note = facts.pop("dispatch_note", None)
            facts.update(self.kernel_source(symbol, structured, generated))
            if note is not None:
                facts["dispatch_note"] = note
        self._dispatch[key] = facts
        return facts

    def kernel_source(self, symbol: str | None, structured: bool = False, generated: bool = False) -> dict[str, Any]:
        if not symbol:
            return {"source_reason": "no kernel symbol: the dispatcher names none for this key"}
        if self.source_index is None:
            return {"source_reason": "no indexed source tree (see the notes)"}
        try:
            location = self.source_index.locate(symbol, structured)
        except KernelmapError as e:
            return {"source_reason": f"source index: {e}"}
        if location is None:
            if generated:
                return {"source_reason": f"{symbol} is generated at build time (ufunc), in no source tree"}
            return {"source_reason": f"{symbol} is not defined in the tree {self.source_index.name}"}
        return {"source": str(location), "source_url": location.url}

    # -- convolutions --------------------------------------------------------

    def conv_backend(self, name: str, args: dict[str, Any], device: str, own: dict[str, Any]) -> str | None:
        """`select_conv_backend` asked again with the recorded arguments (Note [conv backend]);
        why it cannot be asked goes into `own`, the node's facts."""
        dims, strides, types, concrete = (args.get(k) or [] for k in ("Input Dims", "Input Strides", "Input type", "Concrete Inputs"))
        backward = name == "aten::convolution_backward"
        # _convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups, ...)
        # convolution_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed, output_padding, groups, mask)
        t = (1, 2, None) if backward else (0, 1, 2)
        first = 4 if backward else 3
        try:
            key = (name, device, tuple(map(tuple, dims)), tuple(map(tuple, strides)), tuple(types), tuple(concrete))
        except TypeError:
            return None
        if key in self._conv:
            return self._conv[key]
        result = None
        try:
            import ast

            import torch

            dtype = getattr(torch, DTYPES.get(types[t[0]], "float32"))

            def tensor(i):
                return torch.empty_strided(dims[i], strides[i], dtype=dtype, device=device)

            inp, weight = tensor(t[0]), tensor(t[1])
            bias = tensor(t[2]) if t[2] is not None and dims[t[2]] else None
            values = [ast.literal_eval(v) for v in concrete[first : first + 6]]
            stride, padding, dilation, transposed, output_padding, groups = values
            result = torch._C._select_conv_backend(inp, weight, bias, stride, padding, dilation, bool(transposed), output_padding, int(groups)).name
        except Exception as e:  # noqa: BLE001 - recorded arguments we cannot rebuild: say so on the node
            own["conv_backend_reason"] = f"cannot ask select_conv_backend again: {type(e).__name__}: {e}"[:200]
        self._conv[key] = result
        return result

    # -- the tree ------------------------------------------------------------

    def resolve(self, t: Table) -> list[str]:
        """Fill in the facts of every op and device node of `t`; returns notes for the tree."""
        notes: list[str] = []
        import importlib.util

        t.resolved = True
        t.facts = np.full(len(t), -1, dtype=np.int32)
        self._resolve_ops(t, importlib.util.find_spec("torch") is not None)
        self._resolve_device(t)
        if self.platform == "rocm":
            self._refine_rocm_blas(t)
        if not self.live and _DispatchCache._open is not None:
            _DispatchCache._open.save()
        if self.unknown_ops:
            names = ", ".join(sorted(self.unknown_ops)[:8])
            notes.append(
                f"{len(self.unknown_ops)} operators are unknown to the catalog of the installed torch "
                f"(a trace from another torch version?): {names}"
            )
        if self.source_reason:
            notes.append(f"kernel sources not linked: {self.source_reason}")
        elif self.source_index is not None:
            notes.append(_version_note(self.source_index))
            self.versions = _versions(self.source_index)
        return notes

    def _shared_index(self, t: Table, facts: dict[str, Any], index: dict[int, int]) -> int:
        i = index.get(id(facts))
        if i is None:
            i = index[id(facts)] = len(t.shared)
            t.shared.append(facts)
        return i

    def _refine_rocm_blas(self, t: Table) -> None:
        """A GEMM operator of a ROCm trace is labelled rocBLAS/hipBLASLt; when the
        kernels it launched name exactly one of the two, it is that one."""
        kernel = KIND["gpu_kernel"]
        for i in np.flatnonzero((t.kind == KIND["op"]) & (t.facts >= 0)).tolist():
            own = t.own.get(i, {})
            if own.get("library", t.shared[t.facts[i]].get("library")) != "rocBLAS/hipBLASLt":
                continue
            end = i + int(t.size[i])
            below = {t.shared[f].get("library") for k, f in zip(t.kind[i:end].tolist(), t.facts[i:end].tolist()) if k == kernel and f >= 0}
            below &= {"rocBLAS", "hipBLASLt"}
            if len(below) == 1:
                t.own.setdefault(i, {})["library"] = below.pop()

    def _devices(self, t: Table) -> np.ndarray:
        """Per node: True where an op ran on CUDA (Note [inputs of a traced call]):
        it launched device work, itself or below it, or it runs inside an op that did."""
        n = len(t)
        cs = np.zeros(n + 1, dtype=np.int32)  # launch and device nodes before each node (int32, a slice at a time: no int64 per node)
        np.cumsum(np.isin(t.kind, (KIND["runtime"], *DEVICE_KINDS.tolist())), dtype=np.int32, out=cs[1:])
        launched = np.empty(n, dtype=bool)
        for lo, hi in _slices(n):
            launched[lo:hi] = cs[np.arange(lo, hi) + t.size[lo:hi]] > cs[lo:hi]
        del cs
        return launched | _inside(n, np.flatnonzero(launched & (t.kind == KIND["op"])), t.size, 0)

    def _resolve_ops(self, t: Table, can_ask_conv: bool) -> None:
        ops = np.flatnonzero(t.kind == KIND["op"])
        if not len(ops):
            return
        c = t.c
        cuda = self._devices(t)[ops]
        autograd = np.flatnonzero(t.kind == KIND["autograd"])
        # Note [inputs of a traced call]: grad mode for a sequence number outside any backward node
        requires_grad = (c.seq[t.row[ops]] != NONE) & ~_inside(len(t), autograd, t.size, 1)[ops]
        types = c.types[t.row[ops]]
        first, counts, inverse = first_seen(combine(t.label[ops], types, cuda, requires_grad))
        display = c.labels.display
        index: dict[int, int] = {}
        ids = np.empty(len(first), dtype=np.int32)
        unknown = []
        keys = [(int(t.label[ops[j]]), int(types[j]), bool(cuda[j]), bool(requires_grad[j])) for j in first.tolist()]
        for k, (label, type_id, on_cuda, grad) in enumerate(keys):
            name = display[label]
            recorded = c.pool.get(type_id) or []
            device = "cuda" if on_cuda else "cpu"
            key = (name, tuple(recorded), device, bool(grad))
            shared = self._shared.get(key)
            if shared is None:
                shared = self._shared[key] = self._op_facts(name, list(recorded), device, bool(grad))
            ids[k] = self._shared_index(t, shared, index)
            if shared.get("unknown") and name.startswith("aten::"):
                unknown.append(k)
        t.facts[ops] = ids[inverse]
        for k in unknown:
            self.unknown_ops[display[keys[k][0]]] += int(counts[k])
        conv_labels = [i for i, name in enumerate(display) if name in CONV_OPS]
        if conv_labels:
            for j in np.flatnonzero(np.isin(t.label[ops], conv_labels)).tolist():
                self._resolve_conv(t, int(ops[j]), "cuda" if cuda[j] else "cpu", can_ask_conv)

    def _resolve_conv(self, t: Table, i: int, device: str, can_ask_conv: bool) -> None:
        shared = t.shared[t.facts[i]]
        if shared.get("unknown"):
            return
        c = t.c
        name = c.labels.display[t.label[i]]
        names = [c.labels.display[t.label[j]] for j in t.children(i)]
        own: dict[str, Any] = {}
        backend = None
        observed = next((CONV_BACKEND_OPS[n] for n in names if n in CONV_BACKEND_OPS), None)
        if observed:
            own["conv_backend_ran"] = observed
        if can_ask_conv and (self.live or device == "cpu"):
            r = int(t.row[i])
            args = {"Input Dims": c.pool.get(int(c.dims[r])), "Input type": c.pool.get(int(c.types[r])), **c.conv.get(r, {})}
            backend = self.conv_backend(name, args, device, own)
            if backend:
                own["conv_backend"] = backend
        vendor = op_vendor(name, device, backend or observed, self.platform)
        if vendor is not None:
            own["library"], own["closed"] = vendor
        if own:
            t.own[i] = own

    def _op_facts(self, name: str, types: list[str], device: str, requires_grad: bool) -> dict[str, Any]:
        """What every call of `name` with these input types, device and grad
        mode shares: catalog entry, dispatch, kernel, source, vendor."""
        dtype = next((DTYPES[t] for t in types if t in DTYPES), "float32")
        facts: dict[str, Any] = {"device": device, "dtype": dtype, "requires_grad": requires_grad, "inferred": _INFERRED}
        op = self.catalog_op(name, list(types))
        if op is None:
            facts["unknown"] = (
                "not in native_functions.yaml of the installed torch" if name.startswith("aten::") else "not an operator of native_functions.yaml"
            )
            return facts
        facts["op"] = str(op.name)
        facts["yaml"] = str(op.location)
        facts["_location"] = op.location
        facts["op_kind"] = op.kind.value
        facts.update(self.dispatch_facts(op, device, dtype, requires_grad))
        vendor = op_vendor(name, device, platform=self.platform)
        if vendor is not None and vendor[0] == "BLAS" and self.live and _has_mkl():
            vendor = ("MKL", True)  # this build's CPU BLAS, asked in the process that ran the op
        if vendor is not None:
            facts["library"], facts["closed"] = vendor
        if device != "cpu":  # torch._native registers its DSL kernels for GPU keys only
            served = self._served_by(str(op.name), facts.get("dispatch_key"))
            if served is not None:
                facts["served_by"] = served
        return facts

    def _served_by(self, op: str, key: str | None) -> str | None:
        """The torch._native override that serves `op` at `key`, in words
        (read statically once per torch install: Note [dispatch facts cache])."""
        cache = self._dispatch_cache()
        cached = cache.get(("override", op, key)) if cache is not None else None
        if cached is not None:
            return cached.get("served_by")
        served = self._override(op, key)
        text = None
        if served is not None:
            text = f"{served.dsl} override {served.implementation.name} when {served.condition.name}(...) holds (torch._native)"
        if cache is not None:
            cache.put(("override", op, key), {"served_by": text} if text else {})
        return text

    def _override(self, op: str, key: str | None):
        from kernelmap.dispatch.native import served_by_override

        base = op.split("::", 1)[-1].split(".", 1)[0]
        texts = self._override_texts()
        if texts is not None and not any(f'"{base}' in text for text in texts):
            return None  # no override file names it: what static_overrides would find too, without parsing
        try:
            return served_by_override(op, key, static=not self.live)
        except KernelmapError:
            return None

    def _override_texts(self) -> list[str] | None:
        """The texts of the wheel's torch/_native/ops files that register
        overrides, read once per trace; None when they cannot be read."""
        if self._native_texts == ["?"]:
            return None
        if self._native_texts is None:
            from kernelmap import env

            texts: list[str] = []
            try:
                ops_dir = env.torch_install().torch_dir / "_native" / "ops"
                for path in sorted(ops_dir.rglob("*.py")) if ops_dir.is_dir() else ():
                    text = path.read_text(encoding="utf-8", errors="replace")
                    if "register_op_override" in text:
                        texts.append(text)
            except (KernelmapError, OSError):
                texts = ["?"]  # unreadable: served_by_override decides for every operator
            self._native_texts = texts
        return None if self._native_texts == ["?"] else self._native_texts

    def _kernel_facts(self, name: str, ops: list[str]) -> dict[str, Any]:
        """A device event's facts from its name and the operators above it, innermost first."""
        attrs: dict[str, Any] = {}
        if ops:
            attrs["launched_by"] = ops[0]
        if not name.strip():  # a device event with no name: nothing to resolve, not an error of the whole trace
            attrs["unknown"] = "the event has no kernel name"
            return attrs
        answer = self._kernels().resolve(name)
        if answer.library is None and ops:
            answer = self._in_extension(answer, ops) or answer
        lib = answer.library
        if lib is not None and lib != "ATen":
            # The same xmma/CUTLASS kernels ship inside cuDNN and cuBLAS: the launching operators decide.
            by_ops = vendors.of_kernel(answer.demangled, tuple(ops))
            if by_ops is not None:
                lib = by_ops.name
        if lib:
            attrs["library"] = lib
            attrs["closed"] = answer.closed if lib == answer.library else vendors.library(lib).closed
        else:
            attrs["unknown"] = "kernel family not recognised"
        if answer.library == "ATen":
            if answer.kernel is not None:
                attrs["kernel"] = answer.kernel.symbol
            if answer.functor is not None:
                attrs["functor"] = answer.functor.symbol
            if answer.functor is not None and answer.functor.location is not None:
                attrs["source"] = str(answer.functor.location)
                attrs["source_file"] = answer.functor.location.path
            if answer.kernel is not None and answer.kernel.location is not None:
                attrs["launcher"] = str(answer.kernel.location)
                attrs.setdefault("source", str(answer.kernel.location))
                attrs.setdefault("source_file", answer.kernel.location.path)
        elif answer.kernel is not None and answer.kernel.location is not None:  # a vendored library, or an extension
            loc = answer.kernel.location
            attrs["kernel"] = answer.kernel.symbol
            if loc.origin is not None and loc.origin.kind is OriginKind.EXTENSION:  # the user's own file, by its path
                attrs["source"], attrs["source_file"] = f"{loc.disk_path}:{loc.line}", str(loc.disk_path)
            else:
                attrs["source"], attrs["source_file"] = str(loc), loc.path
        return attrs

    def _in_extension(self, answer, ops: list[str]):
        """`answer` (a kernel nothing else named) answered from the extension of
        a custom operator (Note [kernels of an extension] in
        kernelmap.kernels.resolve): one that launched it, or one registered in
        the kernel's own C++ namespace (an override routes `aten::convolution`
        to `kernelmap_ext::mydconv` without an operator event of its own)."""
        candidates = [op for op in ops if "::" in op and not op.startswith("aten::")]
        namespace, qualified, _ = answer.symbol.partition("::")
        if qualified and namespace not in _TORCH_NAMESPACES:
            candidates += self._ops_in_namespace(namespace)
        for op in dict.fromkeys(candidates):
            for origin in self._extension_origins(op):
                found = self._kernels().in_extension(answer, origin)
                if found is not None:
                    return found
        return None

    def _ops_in_namespace(self, namespace: str) -> list[str]:
        """The operators this process has registered in `namespace` (none without torch)."""
        if namespace not in self._namespaces:
            torch = sys.modules.get("torch")  # an extension is loaded only where torch is
            self._namespaces[namespace] = [] if torch is None else sorted(
                n for n in torch._C._dispatch_get_all_op_names() if n.startswith(namespace + "::"))
        return self._namespaces[namespace]

    def _extension_origins(self, op: str) -> tuple:
        """The extensions `op`'s kernels were registered from, as the dispatcher
        of this process reports them (none when the op is not loaded here)."""
        found = self._extensions.get(op)
        if found is None and "torch" not in sys.modules:  # no extension can be loaded in this process
            return ()
        if found is None:
            import kernelmap.dispatch as dispatch

            try:
                registrations = dispatch.registrations(op)
            except KernelmapError:  # not registered in this process, or no torch
                registrations = ()
            origins = {r.kernel.location.origin.root: r.kernel.location.origin for r in registrations
                       if r.kernel.location is not None and r.kernel.location.origin is not None
                       and r.kernel.location.origin.kind is OriginKind.EXTENSION}
            found = self._extensions[op] = tuple(origins.values())
        return found

    def _resolve_device(self, t: Table) -> None:
        """Facts of each device node, once per kernel name and chain of launching operators."""
        devices = np.flatnonzero(np.isin(t.kind, DEVICE_KINDS))
        if not len(devices):
            return
        display = t.c.labels.display
        chains, chain_of_op = _op_chains(t)
        launcher = climb(devices, t.kind, t.parent, _NOT_OP)  # the innermost operator above each
        chain = np.where(launcher >= 0, chain_of_op[np.maximum(launcher, 0)], -1)
        first, _, distinct = first_seen(combine(t.label[devices], chain))
        index: dict[int, int] = {}
        ids = np.empty(len(first), dtype=np.int32)
        for k, j in enumerate(first.tolist()):
            ops = chains[chain[j]] if chain[j] >= 0 else ()
            key = (display[t.label[devices[j]]], ops)
            facts = self._device_facts.get(key)
            if facts is None:  # once per kernel name and chain of launching operators
                facts = self._device_facts[key] = self._kernel_facts(key[0], list(ops))
            ids[k] = self._shared_index(t, facts, index)
        t.facts[devices] = ids[distinct]


_NOT_OP = [k for k in range(len(KINDS)) if k != KIND["op"]]
# C++ namespaces of torch's own kernels: a kernel in one of them is no extension's
_TORCH_NAMESPACES = frozenset({"at", "c10", "torch", "caffe2", "aten", "prim", "prims", "cub", "thrust", "std", "cutlass"})


def _op_chains(t: Table) -> tuple[list[tuple[str, ...]], np.ndarray]:
    """Per op node, the number of its chain: the operators at and above it,
    innermost first (chains[number]); -1 for other nodes. Worked out a level
    of operator nesting at a time."""
    ops = np.flatnonzero(t.kind == KIND["op"])
    chain_of = np.full(len(t), -1, dtype=np.int32)  # (a number per node: int32, half the bytes)
    chains: list[tuple[str, ...]] = []
    numbers: dict[tuple[int, int], int] = {}
    display = t.c.labels.display
    above = climb(ops, t.kind, t.parent, _NOT_OP)
    todo = np.ones(len(ops), dtype=bool)
    while todo.any():
        ready = np.flatnonzero(todo & ((above < 0) | (chain_of[np.maximum(above, 0)] >= 0)))
        if not len(ready):  # cannot happen: an operator's operator comes before it
            break
        outer = np.where(above[ready] >= 0, chain_of[np.maximum(above[ready], 0)], -1)
        labels = t.label[ops[ready]]
        first, _, distinct = first_seen(combine(labels, outer))
        numbers_here = np.empty(len(first), dtype=np.int64)
        for k, j in enumerate(first.tolist()):
            key = (int(labels[j]), int(outer[j]))
            number = numbers.get(key)
            if number is None:
                number = numbers[key] = len(chains)
                chains.append((display[key[0]], *(chains[key[1]] if key[1] >= 0 else ())))
            numbers_here[k] = number
        chain_of[ops[ready]] = numbers_here[distinct]
        todo[ready] = False
    return chains, chain_of


def _ask_dispatcher(op: str, device: str, dtype: str, requires_grad: bool, catalog) -> dict[str, Any]:
    """What the live dispatcher answers for one call: its keys, the key that
    answered, its kernel and registration (JSON-able: it is cached on disk)."""
    from kernelmap.dispatch import dispatch_path

    facts: dict[str, Any] = {}
    try:
        path = dispatch_path(op, device=device, dtype=dtype, requires_grad=requires_grad, catalog=catalog)
    except KernelmapError as e:
        return {"dispatch_error": str(e)}
    steps = list(path.steps)
    facts["dispatch_keys"] = [s.key for s in steps]
    answer = steps[-1] if steps else None
    if answer is not None:
        # The runtime key that answered the call (CPU, CUDA, AutogradCUDA) for
        # every operator; the alias key a kernel is registered under, where it
        # is one, apart: one column must not mix the two.
        facts["dispatch_key"] = answer.key
        if answer.tag == "math kernel":
            facts["kernel_key"] = "CompositeImplicitAutograd"
        elif answer.tag == "default backend kernel":
            facts["kernel_key"] = "CompositeExplicitAutograd"
        kernel = answer.kernel
        if kernel is not None:
            facts["kernel"] = kernel.symbol or None
            if kernel.location is not None:
                facts["registered_at"] = str(kernel.location)
            facts["symbol"] = kernel.symbol
    if path.note:
        facts["dispatch_note"] = path.note
    return facts


# Note [dispatch facts cache]
# A trace read from a file is resolved against the installed torch's live
# dispatcher, which costs importing torch (seconds, and most of the memory
# of a small trace). What the dispatcher answers for (op, device, dtype,
# grad mode) depends only on the installed torch and kernelmap: it is
# cached on disk per torch install (version, commit, and the size and mtime
# of its version file and libraries), so later traces import torch only for
# calls never asked before. A trace recorded in this process asks the live
# dispatcher itself (extensions loaded there may have registered kernels).
# A cache that cannot be read or has the wrong shape is ignored and rewritten.

_CACHE_VERSION = 2  # 2: dispatch_key is the runtime key, kernel_key the alias key apart


class _DispatchCache:
    _open: _DispatchCache | None = None
    _failed = False

    def __init__(self, path, stamp: str, entries: dict[str, Any]):
        self.path = path
        self.stamp = stamp
        self.entries = entries
        self.dirty = False

    @classmethod
    def opened(cls) -> _DispatchCache | None:
        if cls._failed:
            return None
        try:
            stamp, path = _cache_stamp()
        except (KernelmapError, OSError):
            cls._failed = True
            return None
        if cls._open is not None and cls._open.stamp == stamp:
            return cls._open
        import json

        entries: dict[str, Any] = {}
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if isinstance(data, dict) and data.get("version") == _CACHE_VERSION and data.get("stamp") == stamp and isinstance(data.get("entries"), dict):
                entries = {k: v for k, v in data["entries"].items() if isinstance(v, dict)}
        except (OSError, ValueError, RecursionError):
            pass
        cls._open = cls(path, stamp, entries)
        return cls._open

    @staticmethod
    def _key(key: tuple) -> str:
        return "|".join(map(str, key))

    def get(self, key: tuple) -> dict[str, Any] | None:
        found = self.entries.get(self._key(key))
        if found is None or not all(isinstance(k, str) for k in found):
            return None
        return dict(found)

    def put(self, key: tuple, facts: dict[str, Any]) -> None:
        self.entries[self._key(key)] = facts
        self.dirty = True

    def save(self) -> None:
        if not self.dirty:
            return
        import json
        import os

        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"version": _CACHE_VERSION, "stamp": self.stamp, "entries": self.entries}), encoding="utf-8")
            os.replace(tmp, self.path)
            self.dirty = False
        except OSError:
            pass  # an unwritable cache: the next trace asks the dispatcher again


def _cache_stamp():
    import hashlib

    from kernelmap import __version__, env

    install = env.torch_install()
    parts = [__version__, install.version, str(install.commit), str(install.site_packages)]
    lib = install.torch_dir / "lib"
    import kernelmap.dispatch as dispatch  # its readings of the dumps and of torch._native are part of the answer

    here = Path(dispatch.__file__).parent
    for p in [here / "__init__.py", here / "native.py", install.torch_dir / "version.py", *sorted(lib.glob("libtorch*")), *sorted(install.torch_dir.glob("_C*"))]:
        st = p.stat()
        parts.append(f"{p.name}:{st.st_size}:{st.st_mtime_ns}")
    stamp = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:24]
    return stamp, env.cache_dir() / "trace" / f"dispatch-{install.version}-{stamp}.json"


def _has_mkl() -> bool:
    import torch

    return bool(torch.backends.mkl.is_available())


def _version_note(index) -> str:
    """Kernel sources come from the indexed tree; operators and dispatch from the installed torch."""
    from kernelmap import env

    tree = index.index.tree
    installed = env.torch_install()
    same = installed.commit is not None and tree.commit == installed.commit
    if same:
        return f"kernel sources from the tree {tree.name}, the installed torch's own commit"
    return (
        f"kernel sources from the tree {tree.name} (version {tree.version}); operators and dispatch from the "
        f"installed torch {installed.version}: lines may differ where the two versions do"
    )


def _versions(index) -> dict[str, str]:
    """The tree's and the installed torch's versions, where the tree is not the installed torch's own commit."""
    from kernelmap import env

    tree = index.index.tree
    installed = env.torch_install()
    if installed.commit is not None and tree.commit == installed.commit:
        return {}
    return {"tree": str(tree.version or tree.name), "installed": str(installed.version)}


_INFERRED = ("device", "requires_grad")  # shared by every op node: Note [inputs of a traced call]


def _inside(n: int, nodes: np.ndarray, size: np.ndarray, skip: int) -> np.ndarray:
    """Per node of a pre-order table: whether it lies in the subtree of one of
    `nodes` (from `skip` past each: 1 leaves the node itself out)."""
    marks = np.zeros(n + 1, dtype=np.int32)  # (counts of nodes: int32 is enough, half the bytes per node)
    np.add.at(marks, nodes + skip, 1)
    np.add.at(marks, nodes + size[nodes], -1)
    np.cumsum(marks, dtype=np.int32, out=marks)
    return marks[:n] > 0
