"""A tree's include graph for one device: every `#include` the index holds
(and those of the generated files kernelmap regenerates), resolved against
the include roots a release build sets, each edge's `#if` condition
evaluated in every compile context of the device's build (Note [include
roots], Note [compile contexts]). Built once per index and device, kept in
the cache; a question then reads it back and walks it.

    graph = build_graph(sources, "cuda")                 # kernelmap.impact.open_impact caches it
    graph.closure(graph.node("aten/src/ATen/native/BinaryOps.cpp"), "cpp")   # the files one unit reads
    graph.unit_closures({"cu": [node, ...]})              # the same as bitsets, for many units

Note [include roots]
A release build compiles with `-I build/aten/src -I aten/src -I build -I .
-I torch/csrc/api -I torch/csrc/api/include -I torch/csrc` (the root
CMakeLists' `include_directories(BEFORE ...)`, then caffe2/CMakeLists'
target directories), and `"..."` looks beside the including file first.
`build/aten/src/ATen/...` holds the headers torchgen writes (kernelmap
regenerates them: kernelmap.codegen.headers), `torch/csrc/autograd/generated/`
the autograd ones. A configured header (`ATen/Config.h`,
`c10/macros/cmake_macros.h`, `caffe2/core/macros.h`, `torch/version.h`) is
its `.h.in` template in the tree, at the root where the build writes it (a
build folder, or beside the template): editing the template rebuilds what
includes the header. A name found nowhere in the tree is a third-party
header (named, never followed: the Debian tree has none, and a release
build's are outside the tree) or a system header (no edge at all).

Note [compile contexts]
One header's includes can differ between the units of one build: a .cu
file is compiled by nvcc (`__CUDACC__`), a native/cpu file once per CPU
capability (`CPU_CAPABILITY_AVX2`, `-mavx2 ...`). Each edge carries the set
of contexts its condition holds in; a condition that names a macro the model
cannot decide (a value set by a header in a way that depends on what was
included before) is followed, and the units reached only through such
edges are counted apart as "maybe". The macros: the device's build
configuration (kernelmap.source.config), the compiler's own (GCC 12 on
x86-64, C++17), a release build's `-D` flags, and the argument-less macros
the tree's headers `#define` (each taken when all its definitions that
apply agree on it). Any other name is undefined, as the preprocessor has it.
"""

from __future__ import annotations

import hashlib
import json
import pickle
import re
import time
from array import array
from dataclasses import dataclass, field
from pathlib import Path

from kernelmap.safefiles import write_pickle
from kernelmap.source.config import _evaluate, build_config
from kernelmap.source.includes import ANGLED, COMPUTED, read

GRAPH_FORMAT = 1  # bump when the cached graph changes shape or meaning

# Note [include roots]: in the order the compiler searches them.
ROOTS = ("build/aten/src", "aten/src", "build", "", "torch/csrc/api", "torch/csrc/api/include", "torch/csrc")
_OWN_PREFIXES = ("ATen/", "c10/", "torch/csrc/", "caffe2/")

# Node origins.
TREE, GENERATED, TEMPLATE = 0, 1, 2
ORIGINS = ("tree", "generated", "configured")

# What an unresolved name is.
THIRD_PARTY, NOT_REGENERATED, COMPUTED_NAME = 0, 1, 2
LEAF_KINDS = ("third-party", "generated, not regenerated", "computed")

# Note [compile contexts], per device.
CONTEXTS = {
    "cpu": ("cpp", "DEFAULT", "AVX512", "AVX2"),
    "cuda": ("cpp", "cu", "DEFAULT", "AVX512", "AVX2"),
    "rocm": ("cpp", "cu", "DEFAULT", "AVX512", "AVX2"),
}

# GCC 12 on x86-64 Linux, -std=c++17 -O2 (`g++ -dM -E`), and a release build's -D flags.
_COMPILER = {"__cplusplus": 201703, "__GNUC__": 12, "__GNUC_MINOR__": 2, "__x86_64__": 1, "__amd64__": 1, "__linux__": 1,
             "__linux": 1, "__unix__": 1, "__unix": 1, "__ELF__": 1, "__GXX_RTTI": 1, "__SSE__": 1, "__SSE2__": 1, "__OPTIMIZE__": 1,
             "__STDC_HOSTED__": 1, "__has_include": 1, "__has_attribute": 1, "__has_cpp_attribute": 1, "__has_builtin": 1,
             "__cpp_lib_bit_cast": 201806, "NDEBUG": 1, "HAVE_AVX2_CPU_DEFINITION": 1, "HAVE_AVX512_CPU_DEFINITION": 1}
# ATen/Config.h's values a release build configures that kernelmap.source.config does not model (as the wheels' Config.h has them).
_CONFIGURED = {"AT_PARALLEL_OPENMP": 1, "AT_PARALLEL_NATIVE": 0, "AT_POCKETFFT_ENABLED": 0, "AT_MKL_SEQUENTIAL": 0, "AT_BLAS_F2C": 0,
               "AT_BLAS_USE_CBLAS_DOT": 0, "AT_BUILD_WITH_BLAS": 1, "AT_BUILD_WITH_LAPACK": 1, "CAFFE2_STATIC_LINK_CUDA": 0}
_ISA = {
    "AVX2": {"__AVX__": 1, "__AVX2__": 1, "__FMA__": 1, "__F16C__": 1, "__SSE4_2__": 1},
    "AVX512": {"__AVX__": 1, "__AVX2__": 1, "__FMA__": 1, "__SSE4_2__": 1, "__AVX512F__": 1, "__AVX512BW__": 1, "__AVX512VL__": 1, "__AVX512DQ__": 1},
}
_NVCC = {"__CUDACC__": 1, "__NVCC__": 1}
_HIPCC = {"__HIPCC__": 1, "__HIP__": 1, "__HIP_PLATFORM_AMD__": 1, "__HIP_PLATFORM_HCC__": 1}
# Set by a CUDA toolkit's headers: known to a CUDA build, not to this model.
_TOOLKIT = ("CUDA_VERSION", "CUDART_VERSION", "CUSPARSE_VERSION", "CUDNN_VERSION", "NCCL_VERSION_CODE", "ROCM_VERSION", "HIP_VERSION", "TORCH_HIP_VERSION")

UNDECIDED = "__kernelmap_undecided__"

# System headers: no edge (Note [include roots]).
_SYSTEM_PREFIXES = ("sys/", "bits/", "linux/", "asm/", "asm-generic/", "netinet/", "arpa/", "net/", "ext/", "tr1/", "mach/", "sys\\", "x86_64-linux-gnu/")
_SYSTEM_C = frozenset("""assert.h complex.h ctype.h errno.h fenv.h float.h inttypes.h iso646.h limits.h locale.h math.h setjmp.h signal.h
stdalign.h stdarg.h stdatomic.h stdbool.h stddef.h stdint.h stdio.h stdlib.h stdnoreturn.h string.h tgmath.h threads.h time.h uchar.h
wchar.h wctype.h unistd.h fcntl.h dlfcn.h pthread.h sched.h semaphore.h poll.h dirent.h execinfo.h cxxabi.h libgen.h malloc.h
alloca.h memory.h strings.h syslog.h termios.h pwd.h grp.h glob.h fnmatch.h ftw.h link.h elf.h endian.h byteswap.h err.h getopt.h
ifaddrs.h netdb.h spawn.h utime.h utmp.h wordexp.h cpuid.h omp.h unwind.h execinfo.h features.h values.h regex.h ucontext.h
sysexits.h mntent.h numa.h numaif.h langinfo.h nl_types.h iconv.h""".split())
_INTRINSICS = re.compile(r"^\w*intrin\.h$|^arm_(?:neon|sve|acle|bf16|fp16)\.h$|^(?:altivec|vecintrin|riscv_vector)\.h$")


def is_system_header(name: str) -> bool:
    """A header of the C/C++ standard library, POSIX or the compiler."""
    if "/" not in name and "." not in name:
        return True  # <vector>, <cstdint>
    return name in _SYSTEM_C or name.startswith(_SYSTEM_PREFIXES) or bool(_INTRINSICS.match(name))


@dataclass
class IncludeGraph:
    """A tree's include graph for one device (Note [include roots], Note [compile contexts]).

    Nodes are files by repository path; edges go from an including file to
    the file it includes, each with the contexts its condition holds in
    (`sure`) and those where it is undecided (`maybe`, a superset)."""

    device: str
    contexts: tuple[str, ...]
    paths: list[str]
    origin: bytearray  # per node: TREE | GENERATED | TEMPLATE
    sizes: array  # per node: bytes
    # forward edges, CSR: for node n, edges out_start[n]:out_start[n+1] into out_dst, out_line, out_cond
    out_start: array
    out_dst: array
    out_line: array
    out_cond: array  # index into conditions
    conditions: list[str | None]  # 0 is None (unconditional)
    sure: array  # per condition: the contexts (bit i = contexts[i]) where it holds
    maybe: array  # per condition: the contexts where it holds or is undecided
    leaves: dict[int, list[tuple[str, int, int, int]]]  # node -> (name, LEAF_KINDS index, line, condition)
    built: dict[str, object] = field(default_factory=dict)  # how it was built: counts, seconds
    _index: dict[str, int] | None = None

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_index"] = None
        return state

    @property
    def index(self) -> dict[str, int]:
        if self._index is None:
            self._index = {p: i for i, p in enumerate(self.paths)}
        return self._index

    def node(self, path: str) -> int | None:
        return self.index.get(path)

    def context_bit(self, context: str) -> int:
        return 1 << self.contexts.index(context)

    @property
    def all_contexts(self) -> int:
        return (1 << len(self.contexts)) - 1

    def closure(self, node: int, context: str, *, undecided: bool = True) -> set[int]:
        """The files a unit compiled in `context` from `node` reads (itself
        included), following undecided edges unless told not to."""
        bit = self.context_bit(context)
        masks = self.maybe if undecided else self.sure
        seen = {node}
        stack = [node]
        while stack:
            n = stack.pop()
            for e in range(self.out_start[n], self.out_start[n + 1]):
                if masks[self.out_cond[e]] & bit:
                    d = self.out_dst[e]
                    if d not in seen:
                        seen.add(d)
                        stack.append(d)
        return seen

    def unit_closures(self, wanted: dict[str, list[int]]) -> dict[str, dict[int, tuple[int, int]]]:
        """For each context, each of `wanted[context]`'s nodes -> (sure,
        maybe): its closure as bitsets (bit i = node i), through decided
        edges only and through every edge it may take. A question then asks
        whether a unit reads a file by one bit test."""
        out: dict[str, dict[int, tuple[int, int]]] = {}
        for context, nodes in wanted.items():
            bit = self.context_bit(context)
            maybe = _closures(self, bit, self.maybe)
            undecided = any((s ^ m) & bit for s, m in zip(self.sure, self.maybe))
            sure = _closures(self, bit, self.sure) if undecided else maybe
            out[context] = {n: (sure[n], maybe[n]) if sure[n] != maybe[n] else (maybe[n], maybe[n]) for n in nodes}
        return out

    def bytes_of(self, bits: int) -> tuple[int, int]:
        """(files, bytes) of a closure bitset."""
        sizes = self.sizes
        total = files = 0
        while bits:
            low = bits & -bits
            total += sizes[low.bit_length() - 1]
            files += 1
            bits ^= low
        return files, total


def _closures(graph: IncludeGraph, bit: int, masks: array) -> list[int]:
    """Each node's closure as a bitset (bit i = node i), in one context, over
    the edges whose condition mask (`masks`) holds there, via Tarjan's
    strongly connected components (iteratively: include chains are deep) and
    one pass over them in reverse topological order."""
    n = len(graph.paths)
    succ = [[graph.out_dst[e] for e in range(graph.out_start[v], graph.out_start[v + 1]) if masks[graph.out_cond[e]] & bit] for v in range(n)]
    index = [-1] * n
    low = [0] * n
    on_stack = [False] * n
    stack: list[int] = []
    comp = [-1] * n
    comps: list[list[int]] = []
    counter = 0
    for root in range(n):
        if index[root] != -1:
            continue
        work = [(root, 0)]
        while work:
            v, i = work.pop()
            if i == 0:
                index[v] = low[v] = counter
                counter += 1
                stack.append(v)
                on_stack[v] = True
            recurse = False
            children = succ[v]
            while i < len(children):
                w = children[i]
                i += 1
                if index[w] == -1:
                    work.append((v, i))
                    work.append((w, 0))
                    recurse = True
                    break
                if on_stack[w]:
                    low[v] = min(low[v], index[w])
            if recurse:
                continue
            if low[v] == index[v]:
                members = []
                while True:
                    w = stack.pop()
                    on_stack[w] = False
                    comp[w] = len(comps)
                    members.append(w)
                    if w == v:
                        break
                comps.append(members)
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[v])
    # Tarjan emits components in reverse topological order: successors first.
    comp_bits = [0] * len(comps)
    for c, members in enumerate(comps):
        b = 0
        for v in members:
            b |= 1 << v
        for v in members:
            for w in succ[v]:
                if comp[w] != c:
                    b |= comp_bits[comp[w]]
        comp_bits[c] = b
    return [comp_bits[comp[v]] for v in range(n)]


# ---------------------------------------------------------------------------
# Building
# ---------------------------------------------------------------------------


@dataclass
class Sources:
    """What the graph is built from: the tree's indexed directives and files,
    and the generated files (repository path -> file on disk)."""

    tree_root: Path
    tree_files: dict[str, int]  # indexed path -> size
    includes: list[tuple[str, int, str, int, str | None]]  # index.include_directives()
    defines: list[tuple[str, int, str, str | None, str | None]]  # index.macro_definitions()
    generated: dict[str, Path]  # build/aten/src/ATen/ops/add.h -> its file


def build_graph(sources: Sources, device: str) -> IncludeGraph:
    """The include graph of `sources` for `device` (Note [include roots], Note [compile contexts])."""
    t0 = time.perf_counter()
    contexts = CONTEXTS.get(device, CONTEXTS["cpu"])
    paths: list[str] = []
    index: dict[str, int] = {}
    origin = bytearray()
    sizes = array("q")

    def add(path: str, kind: int, size: int) -> int:
        i = index.get(path)
        if i is None:
            i = index[path] = len(paths)
            paths.append(path)
            origin.append(kind)
            sizes.append(size)
        return i

    for path, size in sources.tree_files.items():
        add(path, TREE, size)
    directives: dict[str, list[tuple[int, str, int, str | None]]] = {}
    for path, line, name, angled, cond in sources.includes:
        directives.setdefault(path, []).append((line, name, angled, cond))
    defines = [(path, name, value, cond) for path, _, name, value, cond in sources.defines if _is_header(path)]
    for path, disk in sources.generated.items():
        try:
            data = disk.read_bytes()
        except OSError:
            continue
        add(path, GENERATED, len(data))
        found, defined = read(data)
        directives[path] = [(i.line, i.name, i.angled, i.condition) for i in found]
        defines.extend((path, d.name, d.value, d.condition) for d in defined if _is_header(path))

    extra: dict[str, list[tuple[int, str, int, str | None]]] = {}
    resolved: dict[tuple[str, str, int], tuple[int, int] | None] = {}  # (dir for quotes, name, angled) -> (node, kind) or leaf

    def on_disk(rel: str) -> int | None:
        """A tree file outside the indexed parts (torch/library.h, a .h.in template), read on first sight."""
        if rel in index:
            return index[rel]
        if not rel or rel.startswith(("third_party/", "build/")) or ".." in rel.split("/"):
            return None
        full = sources.tree_root / rel
        try:
            if not full.is_file():
                return None
            data = full.read_bytes()
        except (OSError, ValueError):
            return None
        kind = TEMPLATE if rel.endswith(".in") else TREE
        node = add(rel, kind, len(data))
        found, defined = read(data)
        extra[rel] = [(i.line, i.name, i.angled, i.condition) for i in found]
        defines.extend((rel, d.name, d.value, d.condition) for d in defined if _is_header(rel))
        return node

    def resolve(including: str, name: str, angled: int) -> tuple[int, int]:
        """(node, -1) or (-1, leaf kind)."""
        if angled == COMPUTED:
            return -1, COMPUTED_NAME
        here = including.rsplit("/", 1)[0] if "/" in including else ""
        key = (here if angled != ANGLED else "", name, angled)
        found = resolved.get(key)
        if found is not None:
            return found
        result = None
        candidates = ([(None, f"{here}/{name}" if here else name)] if angled != ANGLED else []) + [(r, f"{r}/{name}" if r else name) for r in ROOTS]
        for root, rel in candidates:
            rel = _normal(rel)
            if rel is None:
                continue
            if rel in index:
                result = (index[rel], -1)
                break
            if root is not None and (root == "build" or root.startswith("build/")):
                # a build folder holds the configured headers too: the template's place in the tree (Note [include roots])
                source_root = root[len("build/"):] if root.startswith("build/") else ""
                node = on_disk(_normal(f"{source_root}/{name}.in" if source_root else f"{name}.in") or "")
            else:  # or a header cmake configures into the tree itself (torch/version.h from its .h.in)
                node = on_disk(rel)
                if node is None and root is not None:
                    node = on_disk(f"{rel}.in")
            if node is not None:
                result = (node, -1)
                break
        if result is None:
            if is_system_header(name):
                result = (-1, -1)
            elif name.startswith(_OWN_PREFIXES):  # the tree's own namespace: a file a build generates that kernelmap does not
                result = (-1, NOT_REGENERATED)
            else:
                result = (-1, THIRD_PARTY)
        resolved[key] = result
        return result

    conditions: list[str | None] = [None]
    cond_ids: dict[str | None, int] = {None: 0}
    edges: list[list[tuple[int, int, int]]] = []
    leaves: dict[int, list[tuple[str, int, int, int]]] = {}
    pending = list(directives.items())
    done: set[str] = set()
    while pending:
        path, items = pending.pop()
        if path in done:
            continue
        done.add(path)
        src = index[path]
        while len(edges) <= src:
            edges.append([])
        for line, name, angled, cond in items:
            c = cond_ids.get(cond)
            if c is None:
                c = cond_ids[cond] = len(conditions)
                conditions.append(cond)
            node, leaf = resolve(path, name, angled)
            if node >= 0:
                edges[src].append((node, line, c))
            elif leaf >= 0:
                leaves.setdefault(src, []).append((name, leaf, line, c))
        if extra:
            pending.extend((p, v) for p, v in extra.items() if p not in done)
            extra.clear()
    while len(edges) < len(paths):
        edges.append([])
    out_start = array("i", [0])
    out_dst, out_line, out_cond = array("i"), array("i"), array("i")
    for src in range(len(paths)):
        for dst, line, c in edges[src]:
            out_dst.append(dst)
            out_line.append(line)
            out_cond.append(c)
        out_start.append(len(out_dst))

    env = MacroEnvironment(sources.tree_root, device, defines, lambda name: _has_include(name, index))
    sure, maybe = array("i"), array("i")
    undecided_conditions = 0
    for cond in conditions:
        s = m = 0
        for i, context in enumerate(contexts):
            value = env.evaluate(cond, context)
            if value is True:
                s |= 1 << i
                m |= 1 << i
            elif value is None:
                m |= 1 << i
        undecided_conditions += s != m
        sure.append(s)
        maybe.append(m)
    graph = IncludeGraph(device, contexts, paths, origin, sizes, out_start, out_dst, out_line, out_cond, conditions, sure, maybe, leaves)
    graph.built = {"nodes": len(paths), "edges": len(out_dst), "conditions": len(conditions) - 1, "undecided_conditions": undecided_conditions,
                   "leaves": sum(len(v) for v in leaves.values()), "seconds": round(time.perf_counter() - t0, 2)}
    return graph


def _is_header(path: str) -> bool:
    return path.endswith((".h", ".hpp", ".cuh", ".h.in", ".inc"))


def _normal(rel: str) -> str | None:
    """`a/b/../c.h` -> `a/c.h`; None for a path out of the tree."""
    if "./" not in rel and not rel.startswith("/"):
        return rel
    parts: list[str] = []
    for part in rel.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if not parts:
                return None
            parts.pop()
        else:
            parts.append(part)
    return "/".join(parts)


def _has_include(name: str, index: dict[str, int]) -> bool | None:
    """`__has_include(<name>)` in a release build: a system header or one of
    the tree is there; a third-party one is too (a release build has them),
    but not on every machine: undecided."""
    if is_system_header(name):
        return True
    for r in ROOTS:
        rel = f"{r}/{name}" if r else name
        if rel in index:
            return True
    return None


# ---------------------------------------------------------------------------
# Macros
# ---------------------------------------------------------------------------

_HAS_INCLUDE = re.compile(r"__has_include\s*\(\s*(?:<([^>]+)>|\"([^\"]+)\")\s*\)")
_HAS_OTHER = re.compile(r"__has_(?:cpp_attribute|attribute|builtin|feature|extension)\s*\(\s*[^()]*\)")
_DEFINED = re.compile(r"\bdefined\s*(?:\(\s*(\w+)\s*\)|\s(\w+))")
_CALL0 = re.compile(r"\b([A-Za-z_]\w*)\s*\(\s*\)")
_NUMBER = re.compile(r"\b(0[xX][0-9a-fA-F]+|\d+)[uUlL]*\b")
_IDENT = re.compile(r"\b[A-Za-z_]\w*\b")


class MacroEnvironment:
    """The macros of one device's release build, per compile context (Note [compile contexts])."""

    def __init__(self, tree_root: Path, device: str, defines: list[tuple[str, str, str | None, str | None]], has_include=None):
        config = build_config(tree_root, device if device in ("cpu", "cuda", "rocm") else "cpu")
        self.device = device
        self.base: dict[str, int | None] = {**_CONFIGURED, **config.macros, **_COMPILER}
        self.base.update(dict.fromkeys(_TOOLKIT, None if device != "cpu" else 0))
        if device == "rocm":
            self.base["USE_ROCM"] = 1
        self.has_include = has_include or (lambda name: None)
        self.header_defines: dict[str, list[tuple[str | None, str | None]]] = {}
        for _, name, value, cond in defines:
            self.header_defines.setdefault(name, []).append((value, cond))
        self._context_macros: dict[str, dict[str, int | None]] = {}
        self._cache: dict[tuple[str | None, str], bool | None] = {}
        self._resolving: set[tuple[str, str]] = set()
        self._macros: dict[tuple[str, str], tuple[bool | None, int | None]] = {}

    def context_macros(self, context: str) -> dict[str, int | None]:
        found = self._context_macros.get(context)
        if found is None:
            found = dict(self.base)
            if context == "cu":
                found.update(_HIPCC if self.device == "rocm" else _NVCC)
            elif context in ("DEFAULT", "AVX2", "AVX512"):
                found[f"CPU_CAPABILITY_{context}"] = 1
                found.update(_ISA.get(context, {}))
            self._context_macros[context] = found
        return found

    def macro(self, name: str, context: str) -> tuple[bool | None, int | None]:
        """(defined?, value) of `name` in `context`; None where the model cannot tell."""
        macros = self.context_macros(context)
        if name in macros:
            value = macros[name]
            return (None, None) if value is None else (bool(value) or name in _COMPILER, value)
        defs = self.header_defines.get(name)
        if not defs:
            return False, 0
        key = (name, context)
        found = self._macros.get(key)
        if found is not None:
            return found
        if key in self._resolving:
            # `#ifndef X` around X's own definition: not defined before it; and a
            # macro whose value names itself (`#define X X`, or through others)
            # is, as the preprocessor reads it in an #if, an unknown name: 0
            return False, 0
        self._resolving.add(key)
        try:
            found = self._resolve(defs, context)
        finally:
            self._resolving.discard(key)
        self._macros[key] = found
        return found

    def _resolve(self, defs: list[tuple[str | None, str | None]], context: str) -> tuple[bool | None, int | None]:
        live = []
        for value, cond in defs:
            holds = self.evaluate(cond, context)
            if holds is False:
                continue
            if holds is None or value is None:  # an undecided definition, or an #undef
                return None, None
            live.append(value)
        if not live:
            return False, 0
        values = {_value(v, self, context) for v in live}
        if len(values) != 1:
            return True, None
        return True, values.pop()

    def evaluate(self, condition: str | None, context: str) -> bool | None:
        """Whether code under `condition` is compiled in `context` (None: undecided)."""
        if not condition:
            return True
        key = (condition, context)
        if key in self._cache:
            return self._cache[key]
        self._cache[key] = None  # a condition met again while it is evaluated is undecided
        text = _HAS_INCLUDE.sub(lambda m: _truth(self.has_include(m.group(1) or m.group(2))), condition)
        text = _HAS_OTHER.sub(UNDECIDED, text)

        def defined(m: re.Match) -> str:
            d, _ = self.macro(m.group(1) or m.group(2), context)
            return _truth(d)

        text = _DEFINED.sub(defined, text)

        def value(m: re.Match) -> str:
            name = m.group(1) if m.re is _CALL0 else m.group(0)
            if name == UNDECIDED:
                return name
            if name in ("true", "false"):
                return "1" if name == "true" else "0"
            _, v = self.macro(name, context)
            return UNDECIDED if v is None else str(int(v))

        text = _CALL0.sub(value, text)
        text = _NUMBER.sub(lambda m: str(int(m.group(1), 0)), text)
        text = _IDENT.sub(value, text)
        result = _evaluate(text, {})
        self._cache[key] = result
        return result


def _truth(value: bool | None) -> str:
    return UNDECIDED if value is None else ("1" if value else "0")


def _value(text: str, env: MacroEnvironment, context: str) -> int | None:
    """A macro's replacement text as a number, where it is one (or a name of one)."""
    t = text.strip()
    while t.startswith("(") and t.endswith(")"):
        t = t[1:-1].strip()
    if not t:
        return 1  # defined, empty: only `defined(X)` reads it
    if t in ("true", "false"):
        return int(t == "true")
    m = _NUMBER.fullmatch(t)
    if m:
        return int(m.group(1), 0)
    m = re.fullmatch(r"@(\w+)@", t)  # a template's value, configured by cmake
    if m:
        _, v = env.macro(m.group(1), context)
        return v
    if re.fullmatch(r"[A-Za-z_]\w*(?:\s*\(\s*\))?", t):
        _, v = env.macro(re.match(r"\w+", t).group(0), context)
        return v
    return None


# ---------------------------------------------------------------------------
# The cache
# ---------------------------------------------------------------------------


def _fingerprint(parts: dict[str, object]) -> str:
    return hashlib.sha1(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:20]


def cache_path(cache_dir: Path, tree_name: str, device: str, key: dict[str, object]) -> Path:
    return cache_dir / "impact" / f"{tree_name}.{device}.{_fingerprint(key)}.pickle"


def code_version() -> str:
    """Changes whenever this package or the include reader changes: a graph
    built by other code is not reused."""
    from kernelmap.source import includes

    h = hashlib.sha1(str(GRAPH_FORMAT).encode())
    for p in sorted([*Path(__file__).parent.glob("*.py"), Path(includes.__file__)]):
        h.update(p.name.encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


def load(path: Path):
    try:
        with open(path, "rb") as f:
            return pickle.load(f)
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ValueError, TypeError, ImportError):
        return None


def save(path: Path, value) -> None:
    """Written aside and renamed into place; older graphs of the same tree and device are removed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    prefix = path.name.rsplit(".", 2)[0]
    write_pickle(path, value)
    for old in path.parent.glob(f"{prefix}.*.pickle"):
        if old != path:
            old.unlink(missing_ok=True)
