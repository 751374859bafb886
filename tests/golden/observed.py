"""The runtime golden set (observed-cpu.jsonl.gz, written by
scripts/record_observed_golden.py) as data: the native stacks the installed
torch really ran for each OpInfo's sample inputs, on CPU. Shared by
tests/golden, tests/observe and benches/bench_observe_golden.py.

A stack runs outermost first: the Python binding (THPVariable_*), the
operator's entry `at::_ops::<op>::call`, then down to the function a
breakpoint named (Note [the functions that do the work] in
kernelmap.observe.symbols). `real_frames` keeps the frames a reader of the
source looks for (Note [real code] below).
"""

from __future__ import annotations

import functools
import gzip
import json
import re
from dataclasses import dataclass
from pathlib import Path

from kernelmap.observe.frames import NativeFrame, parse_frame
from kernelmap.observe.join import is_plumbing, node_kind
from kernelmap.model import NodeKind

HERE = Path(__file__).resolve().parent
OBSERVED = HERE / "observed-cpu.jsonl.gz"

# Note [real code]
# Of an observed stack, the frames the static map is graded on are ATen's own
# code and the libraries it calls: kernels, meta functions, wrappers, the
# autograd layer, operator entries, iteration (TensorIterator, parallel_for,
# the loops a function_ref callback runs) and vendor entries. The
# dispatcher's plumbing, c10's containers and allocator, std:: helpers and
# Python's frames are not graded.
_REAL = ("at::native::", "at::meta::", "at::_ops::", "at::wrapper_", "torch::autograd::VariableType::", "torch::ADInplaceOrView::",
         "at::TensorIteratorBase::", "at::TensorIterator::", "at::internal::", "at::parallel_for", "at::parallel_reduce", "at::cpu::",
         "at::compositeexplicitautograd::", "at::compositeimplicitautograd::", "at::functionalization::", "at::detail::empty")


@dataclass(frozen=True)
class Frame:
    id: int
    name: str | None
    lib: str | None
    entry: int | None  # function entry offset in its library

    @functools.cached_property
    def parsed(self) -> NativeFrame | None:
        return parse_frame(self.name) if self.name else None

    @property
    def function(self) -> str:
        """The function the frame stands for: a function_ref callback by the loop it runs."""
        p = self.parsed
        if p is None:
            return ""
        return p.runs or p.lookup

    @property
    def is_vendor(self) -> bool:
        p = self.parsed
        return p is not None and node_kind(p, self.lib) is NodeKind.VENDOR

    @property
    def is_real(self) -> bool:
        p = self.parsed
        if p is None or is_plumbing(self.name or ""):
            return False
        return self.is_vendor or self.function.startswith(_REAL)


# Of those, the frames inside work `stack` shows as one step by design are
# not graded either: below a utility operator the entry calls (empty, copy_,
# resize_, as_strided...: kernelmap.graph.rules), TensorIterator's set-up
# (build, compute_*), DispatchStub's choice of a CPU capability, the
# dispatcher's lookup of an operator's handle (`static auto op =
# create_<op>_typed_handle();` in the generated Operators_*.cpp: a static's
# initialiser, which runs on a process's first call of the operator only, as
# DispatchStub's choice does; below it c10's findSchemaOrThrow copies the
# operator's name, the memcpy the recorded first calls show; beside it the C
# library's registration of the static's destructor, __cxa_atexit, whose
# __new_exitfn clears a new block of exit handlers with memset), and the
# allocation helpers (at::detail::empty_*). The utility operator's entry
# itself is graded: it is a call that runs, and `stack` names it as one
# step with nothing below (Note [utilities as steps] in
# kernelmap.processors). When the entry is itself a
# utility (`to`), the utilities it calls are its work and are graded.
_TI_KEEP = ("for_each", "serial_for_each", "parallel_reduce", "foreach_reduced_elt", "loop_2d_from_1d", "serial_for_each")
_SETUP = ("at::native::DispatchStubImpl::", "at::detail::empty", "at::native::empty_cpu", "at::native::empty_strided_cpu")


# Note [a utility's kernel called directly]
# A kernel may call a utility operator's native kernel itself, not through
# the dispatcher: Resize.cpp's native_resize_ calls `native::resize_(output,
# shape)`, the CPU kernel of aten::resize_. It is the same tensor plumbing as
# `output.resize_(shape)` (kernelmap.graph.nodes' _is_utility_kernel: the map
# shows it as one step, not expanded), so it is graded as a utility
# operator's entry is: the kernel's frame is graded, what runs below it
# (_resize_impl_, maybe_resize_storage_cpu) is not.
_NAMES: dict[int, frozenset[str]] = {}
_HANDLE = re.compile(r"at::_ops::create_\w+_typed_handle|__cxa_atexit|__internal_atexit|__new_exitfn")


def _is_setup(function: str) -> bool:
    if function.startswith(("at::TensorIteratorBase::", "at::TensorIterator::", "at::TensorIteratorConfig::")):
        return function.rsplit("::", 1)[-1] not in _TI_KEEP
    return function.startswith(_SETUP) or _HANDLE.fullmatch(function) is not None


# Note [inside a vendor library]
# Below a kernel, the static map names a library's entry, the first function
# of the library that the tree's code calls (`sgetrf_` in LAPACK's MKL, oneDNN's
# `dnnl::impl::primitive_execute`, `memcpy` in the C library): the functions
# the library runs below its entry (`mkl_lapack_ps_avx512_sgetrf_small`,
# `mkl_lapack_slamch`, `dnnl::impl::cpu::*`, a memcpy MKL calls) have no source
# in the tree, so nothing there can be named from it. A vendor frame whose
# nearest real-code frame above is a vendor frame lies inside a library below
# its entry: it is counted apart, like a version difference, and not graded;
# the entry itself is graded. A frame of the tree's code that a library calls
# back (the comparator std::sort runs) is graded, and a vendor frame below it
# is an entry again.


# Note [whose block copy]
# memcpy, memmove and memset are the C library's, and the map names them
# where the tree's code calls them (index_select's rows: Note [library
# entries] in kernelmap.vendors). Most of the ones a stack shows are not the
# tree's copies but c10's and the standard library's containers' (Note [real
# code]: not graded): called by std::vector's or SmallVector's own frames, by
# TensorImpl::set_sizes_and_strides, or inlined into real code that never
# writes a copy (loop_2d_from_1d's `PtrVector data(base, base + ntensor)`, a
# c10::SmallVector, resize_reduction's DimVector of the shape). A block copy is
# the tree's when the frame that calls it is real code whose definition in
# the tree writes one (memcpy, memmove, memset, std::copy, std::fill and
# their _n forms: std::copy of a trivially copyable range is a memmove, which
# glibc runs as memcpy's code, so a stack names it memcpy); otherwise it is a
# container's and not graded. A copy the tree writes in a helper the compiler
# inlined (zero_'s memset, in zero_cpu_) reads as a container's. Without the
# tree, only the stack can say: a copy called by a frame that is not real
# code is a container's.
_BLOCK_COPY = re.compile(r"memcpy|memmove|memset|__mem\w+")
_WRITES_COPY = re.compile(r"\b(?:(?:std::)?(?:memcpy|memmove|memset)|std::(?:copy|copy_n|fill|fill_n|uninitialized_copy|uninitialized_fill))\s*\(")
_COPIES: dict[tuple[int, str], bool] = {}


def writes_copy(frame: Frame, tree) -> bool:
    """Whether the definition of `frame`'s function in `tree` (a SourceMap)
    writes a block copy (Note [whose block copy])."""
    key = (id(tree), frame.function)
    if key not in _COPIES:
        target = frame.parsed
        if target is not None and target.runs:  # a function_ref callback: the loop it runs
            target = parse_frame(frame.function + "()")
        location, _ = tree.definition(target, frame.lib) if target is not None else (None, None)
        text = ""
        if location is not None and location.disk_path is not None:
            lines = location.disk_path.read_text(errors="replace").splitlines()
            text = "\n".join(lines[location.line - 1 : location.end_line or location.line])
        _COPIES[key] = _WRITES_COPY.search(text) is not None
    return _COPIES[key]


@dataclass(frozen=True)
class Call:
    opinfo: str
    variant: str
    dtype: str
    samples: int
    error: str | None
    stacks: tuple[tuple[int, ...], ...]


class ObservedGolden:
    def __init__(self, path: Path = OBSERVED):
        with gzip.open(path, "rt") as f:
            lines = [json.loads(line) for line in f]
        self.header = lines[0]
        assert self.header.get("kernelmap") == "observed-golden/1", "not an observed golden set"
        self.frames = tuple(Frame(i, n, lib, fn) for i, (n, lib, fn) in enumerate(lines[1]["frames"]))
        self.calls = tuple(
            Call(c["opinfo"], c.get("variant", ""), c.get("dtype", ""), c.get("samples", 0), c.get("error"), tuple(tuple(s) for s in c["stacks"]))
            for c in lines[2:]
        )
        self.structs: dict[str, str] = self.header.get("ops_structs") or {}

    def entry(self, stack: tuple[int, ...]) -> str | None:
        """The operator a stack enters first (its outermost `at::_ops::<op>::call`)."""
        for i in stack:
            name = self.frames[i].name or ""
            if name.startswith("at::_ops::"):
                struct = name.split("::")[2]
                return self.structs.get(struct)
        return None

    def below_entry(self, stack: tuple[int, ...]) -> list[Frame]:
        """The frames under the stack's first operator entry, outermost first."""
        frames = [self.frames[i] for i in stack]
        first = next((k for k, f in enumerate(frames) if (f.name or "").startswith("at::_ops::")), None)
        return frames[first + 1 :] if first is not None else []

    def inside_vendor(self, stack: tuple[int, ...]) -> list[Frame]:
        """The frames of a stack inside a vendor library below its entry
        (Note [inside a vendor library]), outermost first."""
        out: list[Frame] = []
        above_is_vendor = False  # whether the nearest real-code frame above is a vendor's
        for i in stack:
            f = self.frames[i]
            if "THPVariable_" in (f.name or ""):
                above_is_vendor = False
            elif f.is_real:
                if f.is_vendor and above_is_vendor:
                    out.append(f)
                above_is_vendor = f.is_vendor
        return out

    def container_copy(self, stack: tuple[int, ...], k: int, tree=None) -> bool:
        """Whether the C library's memory copy at position `k` of a stack is a
        container's, not the tree's code (Note [whose block copy])."""
        f = self.frames[stack[k]]
        if not (f.is_vendor and _BLOCK_COPY.fullmatch(f.function)) or k == 0:
            return False
        caller = self.frames[stack[k - 1]]
        if caller.is_vendor:
            return False  # inside a library (Note [inside a vendor library])
        if not caller.is_real:
            return True
        return tree is not None and not writes_copy(caller, tree)

    def utility_kernel(self, function: str, entry: str | None, tree=None) -> bool:
        """Whether `function` is the native kernel of a utility operator other
        than `entry`, called directly (Note [a utility's kernel called directly])."""
        from kernelmap.graph.rules import is_utility_op

        if not function.startswith("at::native::") or function.count("::") != 2:
            return False
        name = function.rsplit("::", 1)[-1]
        if entry and entry.split("::", 1)[-1].split(".", 1)[0] == name:
            return False
        return is_utility_op(name, False) and name in self._operator_names(tree)

    def _operator_names(self, tree) -> frozenset[str]:
        """The operators' base names: the tree's native_functions.yaml, else the set's own entries."""
        key = id(tree)
        if key not in _NAMES:
            names = {op.split("::", 1)[-1].split(".", 1)[0] for op in self.structs.values()}
            root = getattr(getattr(getattr(tree, "index", None), "tree", None), "root", None)
            yaml = root / "aten/src/ATen/native/native_functions.yaml" if root is not None else None
            if yaml is not None and yaml.exists():
                names = set(re.findall(r"^- func: (\w+)[.(]", yaml.read_text(), re.M))
            _NAMES[key] = frozenset(names)
        return _NAMES[key]

    def graded(self, stack: tuple[int, ...], tree=None) -> tuple[list[Frame], int]:
        """(the graded frames of a stack, outermost first, from the binding
        down; how many of them lie above the entry's first frame below it):
        real code (Note [real code]) outside the set-up subtrees, less the
        frames inside a vendor library below its entry (Note [inside a
        vendor library]) and the block copies of c10's and the standard
        library's containers (Note [whose block copy]: `tree`, the selected
        tree's SourceMap, tells the tree's own copies)."""
        from kernelmap.graph.rules import is_utility_op

        entry = self.entry(stack)
        # asked about a utility (`to`), the utilities it calls are its work: `to -> _to_copy -> copy_`
        entry_is_utility = bool(entry) and is_utility_op(entry.split("::", 1)[-1].split(".", 1)[0], False)
        inside = {f.id for f in self.inside_vendor(stack)}
        out: list[Frame] = []
        above = 0
        seen_entry = False
        for k, i in enumerate(stack):
            if i in inside or self.container_copy(stack, k, tree):
                continue
            f = self.frames[i]
            name = f.name or ""
            if name.startswith("at::_ops::") and seen_entry:
                op = self.structs.get(name.split("::")[2], "")
                if op and op != entry and not entry_is_utility and is_utility_op(op.split("::", 1)[-1].split(".", 1)[0], False):
                    out.append(f)
                    break
            if seen_entry and not entry_is_utility and self.utility_kernel(f.function, entry, tree):
                out.append(f)  # Note [a utility's kernel called directly]
                break
            if f.parsed is not None and _is_setup(f.function):
                break
            if f.is_real or "THPVariable_" in name:
                out.append(f)
            if name.startswith("at::_ops::") and not seen_entry:
                seen_entry = True
                above = len(out)
        return out, above

    def by_operator(self) -> dict[str, list[tuple[int, ...]]]:
        """Each entry operator and the stacks that enter it."""
        out: dict[str, list[tuple[int, ...]]] = {}
        for c in self.calls:
            for s in c.stacks:
                op = self.entry(s)
                if op:
                    out.setdefault(op, []).append(s)
        return out


# Note [leaves that are never frames]
# A loop template (cpu_kernel_vec, at::parallel_for) and a function declared
# C10_ALWAYS_INLINE (ufunc/add.h's `add`) are compiled into their caller, so the
# recording never stops in them: at::parallel_for over fewer elements than the
# grain size runs its lambda in place, inside avg_pool2d_kernel_impl. Such a
# leaf ran when a function it is inlined into ran: on the map's path to it,
# the definitions between it and the stub, operator or wrapper above (the
# stub kernel it is written in, and that kernel's helpers), of which one the
# recording can see (Note [the functions that do the work]) ran. A kernel
# that never ran (conj_kernel below conj_physical for a real input) leaves
# its loop a leaf that never ran. The arm inside that function is not
# checked: an always-inlined leaf in an arm not taken is counted as run.
_BOUNDARIES = ("stub", "op", "wrapper", "ops_entry", "header", "binding")


def inlined_into_ran(name: str, ends, ran: set[str]) -> bool:
    """Whether an always-inlined leaf `name` ran: a function it is inlined into,
    on the map's path to it (`ends`: graph.call_ends of the call's tree), is
    among the functions that ran (`ran`: name keys, and their last part)."""
    from kernelmap.observe.mark import name_key

    for end in ends:
        if end.node.name != name:
            continue
        for node in reversed(end.path[:-1]):
            if str(getattr(node.kind, "value", node.kind)) in _BOUNDARIES:
                break
            k = name_key(node.name)
            if k in ran or k.split("::")[-1] in ran:
                return True
    return False


def always_inline(location) -> bool:
    """Whether the definition at `location` is declared C10_ALWAYS_INLINE (read from the tree)."""
    if location is None:
        return False
    try:
        lines = location.disk_path.read_text(errors="replace").splitlines()
    except (OSError, AttributeError):
        return False
    head = " ".join(lines[max(0, location.line - 2) : location.line])
    return "C10_ALWAYS_INLINE" in head or "__attribute__((always_inline))" in head


@functools.cache
def load() -> ObservedGolden:
    return ObservedGolden()


def kernel_operator_calls(golden):
    """(entry operator, ATen kernel, overload) of each recorded direct call of
    an `at::native::` kernel to an operator's entry (`at::_ops::<op>::call`)."""
    for op, stacks in golden.by_operator().items():
        for stack in stacks:
            real = [golden.frames[i] for i in stack if golden.frames[i].is_real]
            for caller, callee in zip(real, real[1:]):
                if callee.function.startswith("at::_ops::") and callee.function.endswith("::call") and caller.function.startswith("at::native::"):
                    ran = golden.structs.get(callee.function.split("::")[2])
                    if ran:
                        yield op, caller.function, ran
