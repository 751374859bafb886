"""A GPU kernel name -> `KernelAnswer`: what the kernel is and where its code
is. An ATen kernel is answered twice, as the launcher template it was
instantiated from (`vectorized_elementwise_kernel` in CUDALoops.cuh) and as
the functor or lambda holding the op's arithmetic (`MulFunctor::operator()`
in BinaryInternal.h, or the `gpu_kernel(...)` call in `launch_clamp_scalar`);
a library kernel is answered with its row of the vendor table
(`kernelmap.vendors`) and the ATen call sites that launch it.

Locations come from the source index of the selected tree. A few launcher
templates are declared behind macros the C++ grammar cannot read
(`C10_LAUNCH_BOUNDS_2(...)` between `__global__ void` and the name); for those
the tree's CUDA sources are read directly for the definition, so every
location printed is a line of the file holding the name.
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from kernelmap.errors import BadInput
from kernelmap import vendors
from kernelmap.kernels.names import LAMBDA, Arg, lambda_owner, parse, unqualified_symbol
from kernelmap.model import Location, Origin, OriginKind, extension_origin
from kernelmap.safefiles import NotRegularFile, open_regular, read_text

VERSION = 1
MAX_NAME = 1 << 16  # characters of a kernel name the resolver reads

# Template arguments that are launcher plumbing, not the op: skipped (their
# own arguments are still searched).
_PLUMBING = re.compile(
    r"(^|::)(Array|OffsetCalculator|TrivialOffsetCalculator|LoadWithCast|StoreWithCast|LoadWithoutCast|StoreWithoutCast|"
    r"TensorInfo|GenericPackedTensorAccessor|PackedTensorAccessor\d*|RestrictPtrTraits|DefaultPtrTraits|PhiloxCudaState|"
    r"TensorListMetadata|TensorListScalarListMetadata|FusedOptimizerTensorListMetadata|OpaqueType|Half|BFloat16|complex|"
    r"CUDAGeneratorImpl|integral_constant|ReduceConfig|IntDivider|CatArrInputTensorMetadata|TensorSizeStride|"
    r"DeviceRadixSortPolicy|Policy\d+|ScanTileState|ReduceByKeyScanTileState|NullType|ConstantInputIterator|Equality|Sum)$"
)
# Functor templates that only wrap the op's functor: look inside them.
_WRAPPERS = re.compile(
    r"(^|::)(BinaryFunctor|AUnaryFunctor|BUnaryFunctor|func_wrapper_t|ReduceOp|gpu_kernel_impl|gpu_kernel_impl_nocast|"
    r"gpu_kernel_multiple_outputs_impl|gpu_index_kernel|launch_legacy_kernel|launch_kernel|cuda_kernel_with_index|"
    r"distribution_nullary_kernel|uniform_and_transform|normal_and_transform|DeviceRadixSortPolicy)$"
)
_PRIMITIVE = re.compile(r"^(-?\d+\w*|true|false|(unsigned |signed |long |short )*(int|long|char|short|float|double|bool|void|__half|half)\b.*|\(.*\)\d+|decltype\(nullptr\).*|std::.*)$")
_DEFINITION_PATTERNS = (
    ("class", re.compile(r"\b(?:struct|class)\s+(\w+)\b\s*(?::[^;{]*)?\{")),
    ("kernel", re.compile(r"__global__\s+(?:\w+\s+)*?(?:C10_LAUNCH_BOUNDS_\w*\([^)]*\)\s*)?(\w+)\s*\(")),
)
# Note [kernels defined by a macro]
# Flash attention defines its kernels through macros whose first parameter is
# the kernel's name (`DEFINE_FLASH_FORWARD_KERNEL(flash_fwd_kernel, ...)`,
# whose body is `template <...> __global__ void kernelName(...)`). A macro
# whose expansion declares `__global__ void` of its first parameter is found
# by its #define; each of its uses at the start of a line defines the kernel
# it names, at that line.
_FUNCTION_MACRO = re.compile(r"^[ \t]*#[ \t]*define[ \t]+(\w+)\([ \t]*(\w+)\b", re.MULTILINE)


def _kernel_macros(text: str) -> set[str]:
    """The macros of `text` whose expansion declares `__global__ void` of their first parameter."""
    found = set()
    for m in _FUNCTION_MACRO.finditer(text):
        end = m.end()
        while True:  # the definition runs on while its lines end in a backslash
            nl = text.find("\n", end)
            if nl < 0 or text[nl - 1] != "\\":
                break
            end = nl + 1
        body = text[m.end() : nl if nl >= 0 else len(text)]
        if re.search(rf"__global__\s+void\s+{m.group(2)}\b", body):
            found.add(m.group(1))
    return found
_FUNCTOR_NAME = re.compile(r"(Functor\w*|Functor_\w+|Ops|_functor|Op)$")
# Note [ufunc functors]
# Operators with a `ufunc_inner_loop` in native_functions.yaml (add, ...) get
# their CUDA functors from torchgen at build time: `CUDAFunctor_add`,
# `CUDAFunctorOnSelf_add`, `CUDAFunctorOnOther_add` in the generated
# UfuncCUDA_add.cu, in no source tree. Each calls `ufunc::add` of
# aten/src/ATen/native/ufunc/add.h, the op's arithmetic: that is the source
# location given for them.
_UFUNC_FUNCTOR = re.compile(r"(?:^|::)CUDAFunctor(?:OnSelf|OnOther)?_(\w+)$")
# Launch helpers whose call sites in the owner function are where the lambda is handed to the GPU.
_LAUNCH_CALLS = ("gpu_kernel", "gpu_kernel_with_scalars", "opmath_gpu_kernel_with_scalars", "opmath_symmetric_gpu_kernel_with_scalars",
                 "gpu_kernel_multiple_outputs", "gpu_reduce_kernel", "launch_kernel", "gpu_kernel_nocast", "_launch_scatter_gather_kernel",
                 "launch_legacy_kernel", "multi_tensor_apply", "multi_tensor_apply_for_fused_optimizer", "cuda_kernel_with_index",
                 "gpu_index_kernel", "distribution_nullary_kernel", "jitted_gpu_kernel")


@dataclass(frozen=True)
class Site:
    """A definition or call site in the tree."""

    role: str  # "launcher" | "kernel" | "functor" | "lambda" | "launch" | "library call"
    symbol: str
    location: Location | None
    caller: str | None = None  # call sites: the function the call is in

    def to_json(self) -> dict[str, Any]:
        return {"role": self.role, "symbol": self.symbol, "location": str(self.location) if self.location else None, "caller": self.caller}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Site:
        loc = d.get("location")
        if not loc:
            return cls(d["role"], d["symbol"], None, d.get("caller"))
        path, _, line = loc.rpartition(":")
        return cls(d["role"], d["symbol"], Location(path, int(line)), d.get("caller"))


@dataclass(frozen=True)
class KernelAnswer:
    """What one GPU kernel name is, and where its code is (the kernel/1 answer)."""

    DOCUMENT: ClassVar[str] = "kernel"  # the renderer table's key

    name: str  # as given
    demangled: str
    symbol: str  # the kernel's qualified name, template arguments removed
    truncated: bool  # the name was cut short (a profiler limit): answers are from what is left
    library: str | None  # "ATen", "cuDNN", "NCCL", ... None when unrecognised
    closed: bool
    repository: str | None
    kernel: Site | None  # the __global__ definition: a launcher template or an op-specific kernel
    functor: Site | None  # the functor or lambda instantiating a launcher: the op's arithmetic
    launches: tuple[Site, ...] = ()  # gpu_kernel(...) call sites in a lambda's function; ATen call sites of a library
    tree: str | None = None  # the source tree the locations are in
    family: str | None = None  # a library kernel's family (Note [kernel families] in vendors): "batch norm forward, inference"
    entries: tuple[str, ...] = ()  # the library entry points that launch the family
    unknown: str | None = None  # why no call site is named for a library kernel: "unknown, because ..."
    notes: tuple[str, ...] = ()  # said once: how the source tree was chosen among several

    @property
    def has_source(self) -> bool:
        """A location in the tree: the functor's, else the kernel's (an op-specific kernel, or the launcher)."""
        return any(s is not None and s.location is not None for s in (self.functor, self.kernel))

    def to_json(self) -> dict[str, Any]:
        return {
            "kernelmap": f"kernel/{VERSION}",
            "name": self.name,
            "demangled": self.demangled,
            "symbol": self.symbol,
            "truncated": self.truncated,
            "library": self.library,
            "closed": self.closed,
            "repository": self.repository,
            "kernel": self.kernel.to_json() if self.kernel else None,
            "functor": self.functor.to_json() if self.functor else None,
            "launches": [s.to_json() for s in self.launches],
            "tree": self.tree,
            "extension": self.extension,
            "family": self.family,
            "entries": list(self.entries),
            "unknown": self.unknown,
            "notes": list(self.notes),
        }

    @property
    def extension(self) -> str | None:
        """The folder of the extension project the kernel's location is in
        (Note [kernels of an extension]), if it is in one."""
        loc = self.kernel.location if self.kernel else None
        if loc is not None and loc.origin is not None and loc.origin.kind is OriginKind.EXTENSION:
            return loc.origin.root
        return None

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> KernelAnswer:
        if d.get("kernelmap") != f"kernel/{VERSION}":
            raise BadInput(f"not a kernel/{VERSION} document: {d.get('kernelmap')!r}")
        site = lambda x: Site.from_json(x) if x else None  # noqa: E731
        kernel = site(d["kernel"])
        root = d.get("extension")
        if root and kernel is not None and kernel.location is not None:
            origin = extension_origin(root)
            kernel = dataclasses.replace(kernel, location=dataclasses.replace(kernel.location, origin=origin))
        return cls(d["name"], d["demangled"], d["symbol"], d["truncated"], d["library"], d["closed"], d["repository"],
                   kernel, site(d["functor"]), tuple(Site.from_json(s) for s in d["launches"]), d.get("tree"),
                   d.get("family"), tuple(d.get("entries") or ()), d.get("unknown"), tuple(d.get("notes") or ()))

    def to_text(self) -> str:
        lines = [f"note: {note}" for note in self.notes]
        lines.append(self.symbol + ("  (name cut short)" if self.truncated else ""))
        lib = self.library or "unrecognised"
        if self.library:
            lib += " (closed)" if self.closed else " (open)"
        if self.repository:
            lib += f"  {self.repository}"
        lines.append(f"  library   {lib}")
        project = self.extension
        for s in (self.functor, self.kernel):
            if s is None:
                continue
            where = s.location or "(not found in the tree)"
            if project and s is self.kernel:  # the user's own file, by its path on this machine
                where = f"{s.location.disk_path}:{s.location.line}"
            lines.append(f"  {s.role:<9} {where}  {s.symbol}")
        if self.family:
            lines.append(f"  family    {self.family}, launched by {' or '.join(self.entries)}")
        for s in self.launches:
            lines.append(f"  {s.role:<9} {s.location}  {s.symbol}" + (f"  in {s.caller}" if s.caller else ""))
        if self.unknown:
            lines.append(f"  launched  {self.unknown}")
        if self.tree:
            lines.append(f"  (locations in the tree {self.tree})")
        if project:
            lines.append(f"  (in the sources of the extension project {project})")
        return "\n".join(lines) + "\n"


class KernelResolver:
    """Resolves kernel names against one source index (or none); caches per name."""

    def __init__(self, index: Any = None, root: Path | None = None, tree_name: str | None = None):
        self.index = index  # kernelmap.source.Index, or None: then libraries and symbols only
        self.root = root
        self.tree_name = tree_name
        self._answers: dict[str, KernelAnswer] = {}
        self._defs: dict[tuple[str, bool], Location | None] = {}
        self._text: dict[str, dict[str, Location]] | None = None
        self._extensions: dict[str, dict[str, tuple[str, int]]] = {}
        self.extension_cuts: dict[str, str | None] = {}
        self.notes: tuple[str, ...] = ()  # said in each answer: how the tree was chosen among several  # extension folder -> the bound that cut its search, if one did

    def resolve(self, name: str) -> KernelAnswer:
        answer = self._answers.get(name)
        if answer is None:
            answer = self._answers[name] = self._resolve(name)
            if self.notes:
                answer = self._answers[name] = dataclasses.replace(answer, notes=self.notes)
        return answer

    def _resolve(self, name: str) -> KernelAnswer:
        if not name.strip():
            raise BadInput("empty kernel name")
        # The longest real kernel names (deeply nested templates) run to a few KB; a longer one is read
        # from its first MAX_NAME characters, as a name cut short, so that a hostile trace (one 400 MB
        # name) costs a bounded parse, not minutes of pattern matching.
        k = parse(name[:MAX_NAME])
        if len(name) > MAX_NAME:
            k = dataclasses.replace(k, truncated=True)
        # An ATen launcher instantiated with another library's lambda is still ATen's launcher.
        lib = None if k.symbol.startswith("at::") else vendors.of_kernel(k.text)
        symbol = unqualified_symbol(k.symbol) or k.text
        if lib is not None:
            kernel = None
            if lib.in_tree:  # a library vendored into the tree (flash attention): its kernel's own definition
                loc = self._locate(symbol, kernel=True)
                kernel = Site("kernel", k.symbol, loc) if loc is not None and loc.path.startswith(lib.in_tree) else None
            family = vendors.kernel_family(lib.name, k.text)
            launches, unknown = self._library_launches(lib, family)
            return KernelAnswer(name, k.text, k.symbol, k.truncated, lib.name, lib.closed, lib.repository, kernel, None,
                                launches, self.tree_name, family.name if family else None, family.entries if family else (), unknown)
        kernel_loc = self._locate(symbol, kernel=True)
        is_aten = k.symbol.startswith(("at::", "c10::", "(anonymous namespace)::")) or (
            kernel_loc is not None and kernel_loc.path.startswith(("aten/", "c10/", "torch/csrc/"))
        )
        if not is_aten:
            return KernelAnswer(name, k.text, k.symbol, k.truncated, None, False, None, None, None, (), self.tree_name)
        functor, launches = self._functor(k.args)
        role = "launcher" if functor is not None else "kernel"
        kernel = Site(role, k.symbol, kernel_loc)
        return KernelAnswer(name, k.text, k.symbol, k.truncated, "ATen", False, "https://github.com/pytorch/pytorch",
                            kernel, functor, launches, self.tree_name)

    def _functor(self, args: tuple[Arg, ...]) -> tuple[Site | None, tuple[Site, ...]]:
        """The first functor or lambda among the template arguments, outermost
        first, looking through wrappers (`BinaryFunctor<..., MulFunctor<float>>`)."""
        stack = list(reversed(args))
        while stack:
            a = stack.pop()
            text = a.text
            if LAMBDA.search(text):
                owner = lambda_owner(text)
                if owner and not _WRAPPERS.search(owner.replace("(anonymous namespace)::", "")):
                    where = self._locate(owner.replace("(anonymous namespace)::", ""))
                    return Site("lambda", f"{owner}::{{lambda}}", where), self._launch_sites(owner)
            else:
                head = unqualified_symbol(a.head)
                if head and not _PRIMITIVE.match(head) and not _PLUMBING.search(head) and not _WRAPPERS.search(head):
                    where = self._locate(f"{head}::operator()")
                    if where is not None:
                        return Site("functor", f"{head}::operator()", where), ()
                    where = self._locate_class(head)
                    if where is not None:
                        return Site("functor", head, where), ()
                    ufunc = _UFUNC_FUNCTOR.search(head)
                    if ufunc is not None:
                        # Note [ufunc functors]
                        symbol = f"at::native::ufunc::{ufunc.group(1)}"
                        where = self._locate(symbol)
                        if where is not None:
                            return Site("functor", symbol, where), ()
                    if _FUNCTOR_NAME.search(head):
                        # Named like a functor but not in this tree (a trace from another version).
                        return Site("functor", head, None), ()
            stack.extend(reversed(a.args))
        return None, ()

    # -- locations ------------------------------------------------------------

    def _locate(self, symbol: str, kernel: bool = False) -> Location | None:
        key = (symbol, kernel)
        if key in self._defs:
            return self._defs[key]
        loc = None
        if self.index is not None:
            found = self.index.definitions(symbol)
            if kernel:
                found = [d for d in found if d.symbol.kind == "global_kernel"] or found
            best = min(found, key=lambda d: (not d.location.path.startswith("aten/src/ATen/native/cuda/"), d.location.path, d.location.line), default=None)
            loc = self._on_name_line(best.location, symbol) if best is not None else None
            if loc is None and kernel:
                loc = self._grep(symbol.rsplit("::", 1)[-1], "kernel")
        self._defs[key] = loc
        return loc

    def _on_name_line(self, loc: Location, symbol: str) -> Location:
        """The definition's line that holds its name: a definition may start on
        a `template <...>` or `__global__ void` line above its name."""
        if self.root is None:
            return loc
        short = symbol.rsplit("::", 1)[-1]
        try:
            lines = read_text(self.root / loc.path, errors="replace").splitlines()
        except (OSError, NotRegularFile):
            return loc
        last = min(len(lines), (loc.end_line or loc.line) , loc.line + 8)
        for n in range(loc.line, last + 1):
            if short in lines[n - 1]:
                return Location(loc.path, n)
        return loc

    def _locate_class(self, symbol: str) -> Location | None:
        key = (symbol, False)
        loc = self._grep(symbol.rsplit("::", 1)[-1], "class")
        self._defs[key] = loc
        return loc

    def _grep(self, name: str, what: str) -> Location | None:
        """A definition the grammar could not read (a class, or a `__global__`
        function behind a launch-bounds macro), found in the tree's CUDA
        sources: one pass over them builds a table of every such name."""
        if self.root is None:
            return None
        if self._text is None:
            base = self.root / "aten/src/ATen/native"
            paths = [path for path in sorted(base.rglob("*"))
                     if path.suffix in (".cu", ".cuh", ".h") and ("cuda" in path.parts or path.parent == base)]
            self._text = {kind: {name: Location(*at) for name, at in table.items()} for kind, table in _tree_definitions(self.root, paths).items()}
        return self._text[what].get(name)

    def in_extension(self, answer: KernelAnswer, origin: Origin) -> KernelAnswer | None:
        """`answer` (a kernel nothing else named) as a kernel of a C++ extension
        (Note [kernels of an extension]): its `__global__` definition among the
        sources under `origin.root`, or None."""
        table = self._extensions.get(origin.root)
        if table is None:
            table, self.extension_cuts[origin.root] = extension_search(Path(origin.root))
            self._extensions[origin.root] = table
        found = table.get(answer.symbol.rsplit("::", 1)[-1])
        if found is None:
            return None
        return dataclasses.replace(answer, library=f"extension {Path(origin.root).name}", closed=False, repository=None,
                                   kernel=Site("kernel", answer.symbol, Location(*found, origin=origin)), tree=None)

    def _launch_sites(self, owner: str) -> tuple[Site, ...]:
        if self.index is None:
            return ()
        out = []
        for d in self.index.definitions(owner.replace("(anonymous namespace)::", "")):
            for c in self.index.calls_from(d):
                if c.name in _LAUNCH_CALLS:
                    out.append(Site("launch", c.name, c.location, owner))
        return tuple(out[:8])

    def _library_launches(self, lib: vendors.Library, family: vendors.KernelFamily | None) -> tuple[tuple[Site, ...], str | None]:
        """The call sites in the tree of the entry points that launch
        `family` (Note [kernel families] in vendors), and, when none is
        named, why: "unknown, because ...". Never another family's sites."""
        if lib.in_tree:
            return (), None  # its kernels' own source is in the tree
        if family is None:
            why = (f"no rule of kernelmap's {lib.name} kernel families matches this name" if vendors.has_families(lib.name)
                   else f"kernelmap has no rule for which {lib.name} entry point launches its kernels")
            return (), f"unknown, because {why}"
        if self.index is None:
            return (), "unknown, because no source tree is indexed to find the calls of " + " or ".join(family.entries)
        out: list[Site] = []
        for callee in family.entries:
            scope = callee.rpartition("::")[0]
            # ATen calls a wrapper by its qualified name (`at::cuda::blas::gemm<float>(...)`); a bare `gemm` is
            # another namespace's (cpublas), or the wrapper's own inside its namespace (gemm_tunable's local
            # `gemm` object, bgemm's fallback loop): not where ATen calls the library
            sites = [c for c in self.index.callers_of(callee) if _library_call(c, scope, family.where)
                     and (family.caller is None or (c.caller is not None and family.caller.search(c.caller.qualified_name)))]
            for c in sites[:3]:  # a member call (`graph->execute(`) is named by its member
                out.append(Site("library call", c.callee.lstrip("."), c.location, c.caller.qualified_name if c.caller else None))
            if len(out) >= 4:
                break
        if not out:
            return (), f"unknown, because the tree {self.tree_name} calls none of {', '.join(family.entries)}"
        return tuple(out[:4]), None


def _library_call(call, scope: str, where: tuple[str, ...] = ("aten/",)) -> bool:
    """Whether `call` is PyTorch's call of a library's entry point whose
    namespace is `scope` (none for a C API): made in one of `where` (aten/,
    by default), and for a wrapper, written qualified and made outside the
    wrapper's namespace."""
    inside = call.caller is not None and call.caller.qualified_name.startswith(f"{scope}::")
    return call.location.path.startswith(where) and (not scope or ("::" in call.callee and not inside))


# Note [kernels of an extension]
# A custom operator's own GPU kernel (a scaffolded `kernelmap_ext::dconv_conv2d_kernel`)
# is in no PyTorch tree. When the operator that launched it was registered
# from an extension's file (Note [registrations from outside torch] in
# kernelmap.dispatch), the extension's sources are searched for the kernel's
# `__global__` definition: the files under the project's folder, build
# folders and hidden ones left out, at most EXTENSION_FILES of them, read from
# at most EXTENSION_FOLDERS folders (a project is a few; `--extension /` would
# walk the whole file system), each file at most EXTENSION_FILE_BYTES.
EXTENSION_FILES = 2000
EXTENSION_FOLDERS = 2000
EXTENSION_FILE_BYTES = 4 << 20
_EXTENSION_SUFFIXES = (".cu", ".cuh", ".cpp", ".cc", ".h", ".hpp")
_SKIPPED_FOLDERS = frozenset({"build", "dist", "__pycache__", "node_modules"})


def extension_search(root: Path) -> tuple[dict[str, tuple[str, int]], str | None]:
    """Kernel name -> (path relative to `root`, line) of every `__global__`
    definition under `root`, and what bound cut the search short, if one did
    (Note [kernels of an extension])."""
    texts: list[tuple[str, str]] = []
    folders = 0
    cut = None
    for folder, dirs, files in os.walk(root):  # links to folders are not followed
        folders += 1
        if folders > EXTENSION_FOLDERS:
            cut = f"the search stopped after {EXTENSION_FOLDERS} folders under {root}"
            break
        dirs[:] = sorted(d for d in dirs if d not in _SKIPPED_FOLDERS and not d.startswith("."))
        for f in sorted(files):
            if not f.endswith(_EXTENSION_SUFFIXES):
                continue
            if len(texts) == EXTENSION_FILES:
                return _definitions(texts)["kernel"], f"the search stopped after {EXTENSION_FILES} source files under {root}"
            path = Path(folder) / f
            try:
                with open_regular(path, "rb") as stream:  # a FIFO is skipped, not waited on
                    data = stream.read(EXTENSION_FILE_BYTES + 1)
            except (OSError, NotRegularFile):
                continue
            if len(data) <= EXTENSION_FILE_BYTES:
                texts.append((path.relative_to(root).as_posix(), data.decode("utf-8", errors="replace")))
    return _definitions(texts)["kernel"], cut


def _definitions(texts: list[tuple[str, str]]) -> dict[str, dict[str, tuple[str, int]]]:
    """"class" and "kernel" -> name -> (path, line) of its first definition in
    `texts` ((path, text) pairs), kernels defined by macros included (Note
    [kernels defined by a macro])."""
    tables: dict[str, dict[str, tuple[str, int]]] = {"class": {}, "kernel": {}}
    macros = sorted({name for _, text in texts if "__global__" in text for name in _kernel_macros(text)})
    uses = re.compile(rf"^[ \t]*(?:{'|'.join(macros)})\(\s*(\w+)", re.MULTILINE) if macros else None
    for rel, text in texts:
        patterns = _DEFINITION_PATTERNS
        if uses is not None and any(m in text for m in macros):
            patterns = (*patterns, ("kernel", uses))
        for kind, rx in patterns:
            table = tables[kind]
            for m in rx.finditer(text):
                if m.group(1) not in table:
                    table[m.group(1)] = (rel, text.count("\n", 0, m.start(1)) + 1)
    return tables


def _tree_definitions(root: Path, paths: list[Path]) -> dict[str, dict[str, tuple[str, int]]]:
    """`_definitions` of a tree's CUDA sources (`paths`), kept in the cache
    under a digest of each file's path, size and modification time and of
    this module (Note [definitions cache])."""
    import hashlib
    import json

    from kernelmap import env

    def compute() -> dict[str, dict[str, tuple[str, int]]]:
        texts = []
        for path in paths:
            try:
                texts.append((str(path.relative_to(root)), read_text(path, errors="replace")))
            except (OSError, NotRegularFile):
                continue
        return _definitions(texts)

    try:
        here = os.stat(__file__)
        parts = [f"{__file__}:{here.st_size}:{here.st_mtime_ns}", str(root)]
        for path in paths:
            st = os.stat(path)
            parts.append(f"{path.relative_to(root)}:{st.st_size}:{st.st_mtime_ns}")
        stamp = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:24]
        cached = env.cache_dir() / "kernels" / f"definitions-{stamp}.json"
    except (OSError, ValueError):
        return compute()
    try:
        data = json.loads(cached.read_text(encoding="utf-8"))
        if isinstance(data, dict) and set(data) == {"class", "kernel"}:
            return {kind: {name: (at[0], at[1]) for name, at in table.items()} for kind, table in data.items()}
    except (OSError, ValueError, RecursionError, TypeError, AttributeError, IndexError, KeyError):
        pass
    tables = compute()
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        tmp = cached.with_name(f"{cached.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(tables), encoding="utf-8")
        os.replace(tmp, cached)
    except OSError:
        pass  # an unwritable cache: the next process reads the sources again
    return tables


# Note [definitions cache]
# The classes and kernels the grammar could not read are found by a pass of
# regular expressions over the tree's CUDA sources (a few hundred files, a
# fifth to half a second), in every process that resolves a kernel's functor:
# each `trace` of a GPU trace paid it again. The table depends only on those
# files' texts and on this module, so it is kept in the cache under a digest
# of each file's path, size and modification time and of this module's own:
# an edited file or a changed kernelmap makes another digest, read afresh.


def open_resolver(source: str | None = None) -> tuple[KernelResolver, str | None]:
    """A resolver on the selected tree's index, or one without locations and the reason."""
    from kernelmap.errors import KernelmapError

    try:
        from kernelmap.source import choose_tree, open_index

        choice = choose_tree(source)  # Note [the default tree]
        tree = choice.tree
        index = open_index(tree)
    except KernelmapError as e:
        return KernelResolver(), str(e)
    resolver = KernelResolver(index, Path(tree.root) if getattr(tree, "root", None) else None, tree.name)
    resolver.notes = (choice.note,) if choice.note else ()
    return resolver, None


__all__ = ["KernelAnswer", "KernelResolver", "Site", "open_resolver"]
