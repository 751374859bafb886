"""Where a call ends: the places in a stack tree where the work leaves
PyTorch's plumbing (a vendor call, a kernel launch, a device loop, an inner
loop), ranked once for every answer that names them (`where`'s leaves,
`explain`'s main path).

Note [ranking a call's ends]
The default settings come first: an arm taken only with deterministic
algorithms on (`if (globalContext().deterministicAlgorithms() && ...)`, off
unless torch.use_deterministic_algorithms(True); scatter_add's index_put_
route on CUDA) ranks after every end reached without one, and so does an arm
taken only when an optional argument is given (scatter's `if
(reduce.has_value())`: answers are for the arguments' defaults) or a flag of
the schema is set otherwise than its default (linalg_matrix_rank's eigvalsh
in the `else` of `if (!hermitian)`, `bool hermitian=False`) or a float or an
enumerator of the schema is compared otherwise than its default reads
(cross_entropy_loss's `else if (label_smoothing > 0.0)` of `float
label_smoothing=0.0`; an `int` compared with a number is not read, as a
kernel tests it once wrapped: `dim=-1` as `dim == 0`), or a flag that
a call on the way passes as a literal (sort_kernel_impl's `if (stable)`
below at::native::sort's `at::sort(self, false, ...)`: Note [flags passed as
literals] in graph.values), whose `else` counts as no `else` arm below; an end
under two such arms ranks after one under one. So does a foreach kernel's
per-tensor fallback, taken only when `can_use_fast_route` says the lists
cannot go to multi_tensor_apply (tensors of several devices or dtypes).
Then the layout: answers are for strided (dense) tensors, so an end reached only through an arm that tests for another
layout (`if (self.layout() == kSparseCsr || ...)`, `self.is_mkldnn()`,
`is_quantized()`, `is_nested()`; not its `else`) ranks after every end reached
without one, and `where` names no stub kernel or leaf reached only so (a
strided transpose is a view: its only loop is a sparse tensor's index check).
Then the inputs: answers are for inputs smaller than the grain size
(at::internal::GRAIN_SIZE, 32768 elements), the case TensorIterator's for_each
tests first and the one a row of index_select or embedding falls in, so an end
reached only through an arm for larger inputs (index_select's `slice_size >=
grain_size`, for_each's parallel_for; grid_sampler_2d's fallback for offsets
past `std::numeric_limits<int32_t>::max()`, the `else` of a CUDA kernel's
`if (canUse32BitIndexMath(input))`) ranks after every end reached without
one. Likewise the general case: answers are for a tensor of some elements, so
an end reached only through an arm for an empty, zero-dimensional or
one-element input (sort's `if (self.dim() == 0 && self.numel() == 1)`, which
copies the one value), or for one value of a scalar argument (pow's `if
(exp_scalar.equal(.5))`, which takes a square root), or a channels-last
input (max_pool2d's `case at::MemoryFormat::ChannelsLast`, upsample's `if
(memory_format == at::MemoryFormat::ChannelsLast)`: answers are for
contiguous tensors), ranks after every end reached without one, and that
test's `else`, the general case, counts as no `else` arm below (median on CUDA
sorts, through that `else`, before its at::where picks the middle value). Then
the storage: an end reached through growing a tensor's storage
(`resize_bytes_cuda`, `maybe_resize_storage_cpu`: an output resized when the
call sets it up, whose old data is copied over) is setup, and ranks after
every end reached without one (batch_norm's cudaMemcpyAsync in Resize.cpp is
not its work; its statistics kernel is); so is an end reached through a call
in a check's arguments (repeat_interleave's `(repeats >= 0).all()` inside
TORCH_CHECK: Note [calls in checks] in source.extract), which names no stub
kernel. Then closed or external vendor code
is where a call really ends, then a launch of device code, then the loop
machinery, then the inner loop, with the C library's block copies
(index_select's memcpy of a row) and the C++ standard library's sorts (a CPU
sort's std::sort of a row) and MKL's vector math (exp's vmsExp, and the
vmsSqrt of the at::sqrt that batch_norm takes of its variance) as inner
loops: they are the loop that copies, sorts or maps, not a library's work;
last a kernel's own loop over its TensorIterator (`iter.for_each(...)`,
cascade_sum's `iter.parallel_reduce(...)`: Note [device loop machinery] in
graph.loops) or its threads (the pooling kernels' `at::parallel_for(...)`),
as what its lambda calls is the work where it calls any (the std::sort in
sort's _dim_apply, exp's vmsExp); where it calls none, no other end being
below the stub or operator it is reached through, it ranks as the loop
machinery does (mean on the CPU sums, then divides: cascade_sum's
parallel_reduce comes before the cpu_kernel_vec of the div_, by the tree's
order). Among ends of one kind, calls that do the work
(cudnnConvolutionForward, cudnnBackendExecute, cufftXtExec, a gemm, a
*_kernel, by its own name, not its class's: dnnl::ukernel::brgemm's
release_hw_context sets up; a launch of device code, whatever its name:
bitonicSortKVInPlace, softmax_warp_forward) come first, then a vendor C
API's other routines unless they set up (cublasSgetrfBatched, sgesdd_,
cublasSdot), then setup
(cudnnSetStream, descriptor builders, cublasSetWorkspace, a launch that only
checks or fills: masked_scatter_size_check, fill_reverse_indices_kernel), then
the call's own launches before those of the other operators it calls
(embedding_renorm_ on CUDA sorts its indices with at::sort, then launches its
own renorm_kernel on the weights: the renorm is its work; a composite
operator's launches are all another's, and this decides nothing among them; a
vendor's routine is often reached through another operator, a backend's:
cudnn_convolution), then the ones reached through fewer `else` arms (the case
a kernel tests for first), then the first in the tree's order: the order in
which a kernel's body tests its alternatives (switch cases, if/else). Not the
shallower first: the dispatcher adds levels (operator, wrapper, kernel), so a
route through it (conv2d's oneDNN forward) would lose to any direct call
beside it. Below a device loop the same holds: CUDALoops.cuh tests for the
contiguous case first, so the vectorized kernel comes before the unrolled and
legacy ones. Branches collapsed for another device never count. A device loop
is an end and is followed too: the kernel templates it launches
(CUDALoops.cuh's vectorized_elementwise_kernel) are ends below it. A stub's
kernel is named on the path to the best ends only, never the first stub met:
the first stub called on the way to the best end (a choice like
_fused_sdp_choice_stub, or a fast path called before the general loop), else
the first stub the path passes: the call's own. A stub kernel may call another
operator with a stub of its own (sort_kernel fills the indices with
at::arange, whose loop is the first end reached), which is not the call's; and
when the best end is another operator's launch, or a block copy or a
kernel's own loop reached through no stub (linalg_ldl_factor_ex's triu), the
call's own stub kernel comes first, if it reaches one with no end below it
without passing another operator (var on CUDA: std_var_kernel_cuda, whose
reduction is not followed, not the sqrt_kernel_cuda of the at::sqrt beside
it). Above all these, a stub named for the call's operator (histogramdd_stub
of aten::histogramdd), called at the arguments' defaults, names the kernel,
whichever end ranks first. An end reached through c10's containers (the
memcpy of c10::SmallVector's uninitialized_copy, which loop_2d_from_1d's copy
of the data pointers runs) is the loop's bookkeeping: a step, never an end.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import platform
import re
from dataclasses import dataclass

from kernelmap import vendors
from kernelmap.graph.rules import balanced, schema_arguments, terms
from kernelmap.model import CallNode, CallTree, NodeKind

_KIND_RANK = {NodeKind.VENDOR: 0, NodeKind.LAUNCH: 1, NodeKind.DEVICE_LOOP: 2, NodeKind.INNER_LOOP: 3}
_ITERATION_RANK = 4  # a kernel's own `iter.for_each(...)` (Note [ranking a call's ends])
# `max_gather_offset > std::numeric_limits<int32_t>::max()`: a test of whether the input's size fits 32-bit indices
_INT32_LIMIT_TEST = re.compile(r"\w\)?\s*(>=|>|<=|<)\s*(?:static_cast<\w+>\()?std::numeric_limits<(?:int|int32_t|uint32_t|unsigned int|unsigned)>::max\(\)")
# `numel < grain_size`, `slice_size >= at::internal::GRAIN_SIZE`: a test of the input's size
# The `else` of a test that the input can be indexed with 32 bits, on CUDA
_ELSE_OF_32_BIT_INDEXING = re.compile(r"else of if \(\s*(?:at::native::|at::cuda::detail::)?canUse32BitIndexMath\(")
_GRAIN_TEST = re.compile(r"\w\s*(>=|>|<=|<)\s*(?:at::)?(?:internal::)?(?:GRAIN_SIZE|grain_size)\b")
# `self.numel() == 0`, `x.dim() == 0`, `t.numel() <= 1`, `self.is_empty()`: a test for an empty, zero-dimensional or one-element input;
# `exp_scalar.equal(.5)`, `exp.equal(true)`: for a scalar argument of one value (pow's sqrt for an exponent of 0.5)
_TRIVIAL_TEST = re.compile(r"[\w.\->()\[\]]*?(?:\b(?:dim|ndimension)\(\)\s*(?:==|<=)\s*0|\bnumel\(\)\s*(?:(?:==|<=)\s*[01]|<\s*[12])|\bis_empty\(\)|\bsizes\(\)\.empty\(\)"
                           r"|\bequal\(\s*(?:-?\d*\.?\d+|true|false)\s*\))")
# An arm's test, its `else`, and what follows the test: the condition's `#if` or a bound name (`; stub = abs_stub`).
_ARM = re.compile(r"(else of )?if \((.*?)\)(?:$|\s\s#if |; )")
# Whether an optional argument is given: `reduce.has_value()` (Note [ranking a call's ends]).
_OPTIONAL_GIVEN = re.compile(r"([\w.]+)\.has_value\(\)")
# A flag, or its negation: `return_inverse`, `!consecutive`.
_FLAG = re.compile(r"(!?)\s*(\w+)")
# A number as a schema's default or a C++ literal spells it: `0.0`, `-100`, `1e-05`.
_NUMBER = re.compile(r"-?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?")
# An argument compared with a literal: `label_smoothing > 0.0`, `reduction == Reduction::Mean`.
_COMPARISON = re.compile(rf"(\w+)\s*(==|!=|>=|<=|>|<)\s*({_NUMBER.pattern}|(?:\w+::)*\w+)")
# A case of a switch on an enumerator: `case SDPBackend::math`, `case at::LinalgBackend::Cusolver`.
_ENUMERATOR_CASE = re.compile(r"case (?:\w+::)+\w+(?:$|\s\s#if )")
# Functions that grow a tensor's storage, copying its old data (Note [ranking a call's ends]).
_STORAGE_GROWTH = re.compile(r"(?:^|::)(?:resize_bytes_\w+|maybe_resize_storage_\w+)$")
# A launch that only checks (masked_scatter_size_check, an assertion) or fills memory (TensorTopK's fill).
_SETUP_LAUNCH = re.compile(r"(?i:check|assert)|(?:^|_)[Ff]ill(?:_|$|[A-Z])")
# A call of a vendor's C API that sets up rather than computes: cublasSetStream, cusolverDnCreateGesvdjInfo,
# cusparseSpMM_bufferSize, cufftXtMakePlanMany, cudnnBackendFinalize.
_VENDOR_SETUP = re.compile(r"(?:Set|Get|Create|Destroy|Make|Init|Commit|Finalize|Free|Malloc|Alloc|Synchronize|Query)(?=[A-Z_]|$)"
                           r"|[Bb]uffer_?[Ss]ize|Workspace|Occupancy|Version")
_WORK = re.compile(r"(Execute|Exec(?![a-z])|Forward|Backward|gemm|Gemm|gemv|^[sdcz]dot[cu]?_$|compute|_kernel$|kernel_vec$|kernel$)")


@dataclass(frozen=True)
class End:
    """One end of a call and the path to it from the tree's root."""

    node: CallNode
    path: tuple[CallNode, ...]
    # arms for deterministic mode, for other layouts, for trivial inputs, for larger inputs; storage growths; kind, setup
    # (0 work, 1 a vendor's other routine, 2 setup), another operator's, else arms, tree order
    rank: tuple[int, int, int, int, int, int, int, bool, int, int]
    # the first condition on the path taken only in deterministic mode or with an argument not at its default
    opted_by: str | None = None
    # when `opted_by` tests a flag a call passes as a literal: `stable=false is passed to aten::sort.stable`
    opted_against: str | None = None

    @property
    def checked_by(self) -> str | None:
        """The check the end is reached inside (`inside TORCH_CHECK`), if any."""
        return next((c for n in self.path for c in _conditions(n) if in_check(c)), None)

    @property
    def grown_by(self) -> str | None:
        """The function growing a tensor's storage the end is reached through
        (`at::native::resize_bytes_cuda`, whose cudaMemcpyAsync copies the old
        data over), if any: setup, not the work (Note [ranking a call's ends])."""
        return next((n.name for n in self.path if _STORAGE_GROWTH.search(n.name)), None)

    @property
    def route(self) -> str | None:
        """The first case of an enumerator the path takes on its way to the end
        (`case SDPBackend::math`, `case ConvBackend::Cudnn`): the alternative of
        a choice made at run time the end belongs to, if any."""
        for node in self.path[1:-1]:
            for condition in (*node.attrs.get("outer_conditions", ()), node.condition):
                if condition and _ENUMERATOR_CASE.match(condition):
                    return condition.split("  #if ", 1)[0]
        return None

    @property
    def iteration(self) -> bool:
        """Whether the end is a kernel's own loop over its TensorIterator
        (`iter.for_each(...)`) or its threads (`at::parallel_for(...)`), whose
        lambda's calls are the work where there are any."""
        return self.rank[5] == _ITERATION_RANK

    @property
    def for_other_layouts(self) -> bool:
        """Whether the end is reached only for tensors of another layout than strided."""
        return self.rank[1] > 0


def call_ends(tree: CallTree) -> tuple[End, ...]:
    """Every end of the call in `tree`, best first (Note [ranking a call's ends]),
    reached at the defaults when any path reaches it so (Note [ends below a repeat])."""
    arguments = _Arguments(tree)
    ends: dict[int, End] = {}
    for node, path, _, walked in _end_paths(tree, {}, arguments):
        ends[id(node)] = _end(node, path, len(ends), arguments, walked)
    twins = _expanded_twins(tree)
    if twins:
        for node, path, through_repeat, walked in _end_paths(tree, twins, arguments):
            known = ends.get(id(node))
            if through_repeat and known is not None:
                other = _end(node, path, known.rank[-1], arguments, walked)
                if other.rank[0] < known.rank[0]:  # fewer arms away from the defaults: nothing else is weighed again
                    ends[id(node)] = other
    return tuple(sorted(_lone_loops_as_machinery(ends.values()), key=lambda e: e.rank))


def _lone_loops_as_machinery(ends) -> list[End]:
    """`ends`, with a kernel's own loop ranked as the loop machinery is when
    no other end lies below the stub or operator it belongs to: it ranks last
    because its lambda's calls are the work, and there are none (cascade_sum's
    `iter.parallel_reduce(...)` under mean's at::sum_out, beside the div_ that
    follows it: Note [ranking a call's ends])."""
    ends = list(ends)
    working = {_owner(e.path) for e in ends if e.rank[5] != _ITERATION_RANK}
    return [dataclasses.replace(e, rank=e.rank[:5] + (_KIND_RANK[NodeKind.DEVICE_LOOP],) + e.rank[6:])
            if e.rank[5] == _ITERATION_RANK and _owner(e.path) not in working else e for e in ends]


def own_loop(node: CallNode) -> bool:
    """Whether an end is a kernel's own loop over its TensorIterator
    (`iter.for_each(...)`) or its threads (`at::parallel_for(...)`)."""
    return node.kind is NodeKind.DEVICE_LOOP and node.attrs.get("loop") in ("iteration", "threads")


def _owner(path: tuple[CallNode, ...]) -> tuple[str, str] | None:
    """The stub or operator an end is reached through last: whose work it is."""
    return next(((n.kind.value, n.name) for n in reversed(path[:-1]) if n.kind in (NodeKind.STUB, NodeKind.OPERATOR)), None)


def _end_paths(tree: CallTree, twins: dict[str, CallNode], arguments: _Arguments):
    """(end, path from the root, whether the path passes a repeat, what the
    path weighs: `_Walked`) for each path to an end, in tree order; through
    the expanded twin of a repeat found in `twins` (Note [ends below a
    repeat]). A path's weights are its parent path's and its last step's:
    read once per step, not once per end below it (a stack has thousands of
    paths to ends, each dozens of steps long)."""
    budget, sizes = _REPEAT_BUDGET, {}
    stack: list[tuple[CallNode, tuple[CallNode, ...], bool, _Walked | None]] = [(tree.root, (tree.root,), False, None)]
    while stack:
        node, path, through, above = stack.pop()
        if node.attrs.get("collapsed") or node.attrs.get("branch"):
            continue
        children = node.children
        identity = node.attrs.get("identity")
        if not children and identity in twins and node.attrs.get("repeat") and budget > 0 \
                and not any(n.attrs.get("identity") == identity for n in path[:-1]):
            children, through = twins[identity].children, True
            budget -= sizes[identity] if identity in sizes else sizes.setdefault(identity, _size(twins[identity]))
        routine = library_routine(node)
        if not children and node.kind not in _KIND_RANK and routine is None:
            continue  # no end, and none below
        walked = _walk(above, node, arguments)
        if node.kind in _KIND_RANK or routine is not None:
            if above is None or not above.bookkeeping:  # no step above it is bookkeeping
                yield node, path, through, walked
            if node.kind is not NodeKind.DEVICE_LOOP:
                continue  # a device loop is followed into the kernels it launches
        children = _capability_children(node, children, walked.capability)
        stack.extend((c, path + (c,), through, walked) for c in reversed(children))


@dataclass(frozen=True, slots=True)
class _Walked:
    """What a path from the root weighs for `_end`'s rank, summed over its steps."""

    flags: dict  # the flags in effect below its last step (_Arguments.below)
    elses: int  # `else` arms taken at the defaults (_Arguments.step)
    opting: tuple  # conditions away from the defaults, in path order (_Arguments.step)
    trivial: int  # steps under an arm for a special case (_Arguments.marks)
    larger: int  # ... for larger inputs
    layouts: int  # ... for another layout
    growths: int  # ... that grow storage or check
    bookkeeping: bool  # whether a step is in c10's containers (_bookkeeping)
    capability: str | None = None  # the CPU capability whose build runs below its last stub (_stub_capability)


def _walk(above: _Walked | None, node: CallNode, arguments: _Arguments) -> _Walked:
    """The weights of a path `above` (None: the empty path) one step on, to `node`."""
    flags = arguments.flags if above is None else above.flags
    taken_else, opts = arguments.step(node, flags)
    special, larger, layouts, growth = arguments.marks(node)
    c10 = _bookkeeping(node)
    capability = _stub_capability(node) if node.kind is NodeKind.STUB else (above.capability if above is not None else None)
    if above is None:
        return _Walked(arguments.below(node, flags), taken_else, opts, int(special), int(larger), int(layouts), int(growth), c10, capability)
    return _Walked(arguments.below(node, flags), above.elses + taken_else, above.opting + opts if opts else above.opting,
                   above.trivial + special, above.larger + larger, above.layouts + layouts, above.growths + growth,
                   above.bookkeeping or c10, capability)


# Note [the CPU capability that runs]
# A kernel of native/cpu is compiled once per CPU capability, and a
# Vectorized method it calls is defined once per capability (Note [vectorized
# math] in graph.sites): vec512_float.h's exp calls Sleef_expf16_u10,
# vec256_float.h's Sleef_expf8_u10. Which build runs is the stub's choice
# (DispatchStubImpl::choose_cpu_impl, from compute_cpu_capability): the
# capability ATEN_CPU_CAPABILITY names, else the best the CPU has (AVX512
# where it has avx512vl, avx512bw, avx512dq and fma; AVX2 where avx2 and fma).
# Answers are for the CPU kernelmap runs on, read the same way
# (host_cpu_capability). On an AVX512 CPU the AVX512 build runs where the
# stub's registration fills the AVX512 slot (ALSO_REGISTER_AVX512_DISPATCH),
# and the AVX2 build where it leaves the slot nullptr (REGISTER_DISPATCH,
# compiled for AVX512, registers nullptr: such a kernel's AVX512 build never
# runs on any CPU); on an AVX2 CPU the AVX2 build runs. Below a stub, only
# that capability's Vectorized method is followed to an end; the other stays
# a step of the tree. Where no stub above says (a kernel called directly), or
# the CPU is not an x86 one read here, both are ends.
_PER_CAPABILITY = "Vectorized is defined once per CPU capability"


@functools.cache
def host_cpu_capability() -> str | None:
    """The CPU capability torch's DispatchStub picks on this machine, read as
    compute_cpu_capability does: ATEN_CPU_CAPABILITY where it names one, else
    the CPU's flags; None off x86 Linux (Note [the CPU capability that runs])."""
    named = {"avx512": "AVX512", "avx2": "AVX2", "default": "DEFAULT"}.get(os.environ.get("ATEN_CPU_CAPABILITY", ""))
    if named is not None:
        return named
    if platform.machine() not in ("x86_64", "AMD64"):
        return None
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as cpuinfo:
            flags = next((set(line.split(":", 1)[1].split()) for line in cpuinfo if line.startswith("flags")), None)
    except OSError:
        return None
    if flags is None:
        return None
    if {"avx512vl", "avx512bw", "avx512dq", "fma"} <= flags:
        return "AVX512"
    return "AVX2" if {"avx2", "fma"} <= flags else "DEFAULT"


def _stub_capability(stub: CallNode) -> str | None:
    """The capability whose build of its kernel a CPU stub runs on this
    machine's CPU (host_cpu_capability): on an AVX512 CPU, read off the
    stub's choice of the capability (graph.stubs' machinery: choose_cpu_impl,
    called under what the registration does with the AVX512 slot); None when
    neither is known (Note [the CPU capability that runs])."""
    host = host_cpu_capability()
    if host != "AVX512":
        return host
    for machinery in stub.children:
        for choose in machinery.children:
            if choose.name.endswith("::choose_cpu_impl") and choose.condition:
                if "AVX512 slot nullptr" in choose.condition:
                    return "AVX2"
                if "fills the AVX512 slot" in choose.condition:
                    return "AVX512"
    return None


def _capability_children(node: CallNode, children, capability: str | None):
    """Of a node's `children`, those an end is looked for below: of the
    per-capability definitions of a Vectorized method, the one of
    `capability` when it is known (Note [the CPU capability that runs])."""
    if capability is None or node.kind is not NodeKind.ALTERNATIVES or not str(node.attrs.get("reason", "")).startswith(_PER_CAPABILITY):
        return children
    kept = tuple(c for c in children if (c.condition or "").endswith(f"compiled for {capability}"))
    return kept or children


# Note [a library routine wrapped out of the build]
# BlasKernel.cpp defines `static inline ffloat sdot_(...)`, a wrapper that
# calls cblas_sdot, under `#if AT_BLAS_USE_CBLAS_DOT()`; the release CPU
# build leaves it out (its cblas_sdot is collapsed as not compiled) and
# calls BLAS's own `sdot_`, declared `extern "C"` beside it, as the recorded
# runs of dot show. A call that reaches such a definition (a free function
# named as a library's routine, whose every call is collapsed or a branch)
# ends in the library as a vendor call does.
def library_routine(node: CallNode):
    """The library whose routine a kernel node stands for (Note [a library
    routine wrapped out of the build]); None for any other node."""
    if node.kind is not NodeKind.KERNEL or "::" in node.name or not node.children:
        return None
    library = vendors.of_call(node.name)
    if library is None or library.inner_loop:
        return None
    return library if all(c.attrs.get("collapsed") or c.attrs.get("branch") for c in node.children) else None


def _bookkeeping(node: CallNode) -> bool:
    """Whether a step is in c10's containers: an end reached through one (the
    memcpy of c10::SmallVector's uninitialized_copy, which loop_2d_from_1d's
    copy of the data pointers runs) is the loop's bookkeeping, shown as a step,
    never an end."""
    return node.location is not None and node.location.path.startswith("c10/")


def _end(node: CallNode, path: tuple[CallNode, ...], order: int, arguments: _Arguments, walked: _Walked) -> End:
    """The end `node` reached along `path`, ranked (Note [ranking a call's
    ends]); `walked`: what `path` weighs (`_end_paths`)."""
    routine = library_routine(node)
    library = vendors.library(node.attrs.get("library")) if node.kind is NodeKind.VENDOR else routine
    setup = _setup(node, library)
    elses = walked.elses
    # (special case, larger inputs, other layouts, growth or check) of each step, counted
    trivial, larger, layouts, growths = walked.trivial, walked.larger, walked.layouts, walked.growths
    # the conditions on the path taken only in deterministic mode or with an argument not at its default
    opting = walked.opting
    if library is not None and library.inner_loop:
        kind = _KIND_RANK[NodeKind.INNER_LOOP]
    elif own_loop(node):
        kind = _ITERATION_RANK  # a kernel's own loop over its iterator: its lambda's calls are the work
    else:
        kind = _KIND_RANK[node.kind if routine is None else NodeKind.VENDOR]
    return End(node, path, (len(opting), layouts, trivial, larger, growths, kind, setup,
                            node.kind is NodeKind.LAUNCH and _borrowed(path), elses, order),
               opting[0][0] if opting else None, arguments.passed(*opting[0]) if opting else None)


# Note [ends below a repeat]
# A definition is expanded once in a tree; where it is called again, the node
# is marked `repeat` and has no children (graph.grow). Its ends
# are still reached from there, under that call's own conditions: unary_op_impl_
# with_complex_to_float_out calls unary_op_impl_float_out under `if
# (promotes_integer_to_float)` and then unary_op_impl_out, which reach the same
# abs_stub; abs_out passes `false` (Note [flags passed as literals] in
# graph.values), so abs's loop is reached at the defaults only through the second
# call, the repeat. An end reached at the defaults through some path is at
# the defaults: the ranking also walks a repeat's expanded twin as if it were
# below the repeat (not when the twin is on the path already: recursion),
# within a budget of nodes walked so for the whole tree, and ranks an end by
# such a path when it passes fewer arms away from the defaults. The ends are
# the same, and so is their tree order; the other criteria (fewer `else` arms)
# are not weighed again, as the expanded path is the one the tree shows.
_REPEAT_BUDGET = 20000


def _expanded_twins(tree: CallTree) -> dict[str, CallNode]:
    """Identity -> the node of that identity the tree expands, for the
    identities of its repeats."""
    twins: dict[str, CallNode] = {}
    repeated = set()
    for _, node in tree.walk():
        identity = node.attrs.get("identity")
        if identity and node.attrs.get("repeat"):
            repeated.add(identity)
        elif identity and node.children:
            twins.setdefault(identity, node)
    return {k: v for k, v in twins.items() if k in repeated}


def _size(node: CallNode) -> int:
    count, stack = 0, [node]
    while stack:
        count += 1
        stack.extend(stack.pop().children)
    return count


def in_check(condition: str | None) -> bool:
    """Whether a call is made in the arguments of a check (Note [calls in
    checks] in source.extract: `inside TORCH_CHECK`): setup, not the work."""
    return bool(condition) and condition.startswith("inside ")


def _conditions(node: CallNode) -> tuple[str | None, ...]:
    """The condition a node is called under, and those around it in its
    caller (Note [conditions around a call] in graph.sites): sort's
    std::stable_sort is under `if (stable)`, in `if (descending)`."""
    outer = node.attrs.get("outer_conditions")
    return (node.condition, *outer) if outer else (node.condition,)


def _setup(node: CallNode, library) -> int:
    """0 for an end that does the work, 2 for one that sets it up, 1 between
    (Note [ranking a call's ends]). A launch works unless it checks or fills; a
    call named for its work (a gemm, an Execute, a *_kernel) works, and so
    does a device loop, whatever its name (TensorIteratorBase::for_each); another
    routine of a vendor's C API (cublasSgetrfBatched, sgesdd_, cublasSdot) is
    between, unless it sets up (a handle, stream, descriptor, plan or workspace)
    or is a checking macro (MKL_DFTI_CHECK); the rest set up (a C++ API's setup
    has no such names: ideep::attr_t::fuse_sum)."""
    short = node.name.rsplit("::", 1)[-1]
    if node.kind is NodeKind.LAUNCH:
        return 2 if _SETUP_LAUNCH.search(short) else 0
    if node.kind is NodeKind.DEVICE_LOOP:
        return 0  # a loop works, whatever its name (TensorIteratorBase::for_each)
    if _WORK.search(short):  # its own name: dnnl::ukernel::brgemm::release_hw_context is no gemm
        return 0
    if (node.kind is NodeKind.VENDOR or library is not None) and library is not None and not library.inner_loop and "::" not in node.name:
        return 2 if _VENDOR_SETUP.search(short) or short.isupper() else 1
    return 2


class _Arguments:
    """What a call's arguments are when they are left at their defaults (Note
    [ranking a call's ends]): the optional arguments its schema does not
    require and the defaults of its flags; and, below a call of another
    operator, the flags that call passes as literals (Note [flags passed as
    literals] in graph.values)."""

    def __init__(self, tree: CallTree):
        schema = tree.root.attrs.get("schema") if tree.root.kind is NodeKind.OPERATOR else None
        self.required = _required_arguments(schema)
        # a flag's value, and the node whose call passes it (None: the schema's default)
        self.flags: dict[str, tuple[bool, CallNode | None]] = {name: (value, None) for name, value in _flag_defaults(schema).items()}
        self.values = _value_defaults(schema)
        # non_default's answers by (condition, the flags' values): asked of every node on every path to an end
        self._decided: dict[tuple, bool] = {}
        self._signatures: dict[int, tuple[dict, tuple]] = {}  # id(flags) -> (flags, their values), the dict kept so its id is not reused
        self._marks: dict[int, tuple[CallNode, tuple[bool, bool, bool, bool]]] = {}  # id(node) -> (node, its marks)
        self._steps: dict[tuple[int, int], tuple] = {}  # (id(node), id(flags)) -> (node, flags, its `step`)

    def marks(self, n: CallNode) -> tuple[bool, bool, bool, bool]:
        """Whether a step is under an arm for a special case, for larger inputs,
        for another layout, or grows storage or checks (`_end`'s counts): read
        once per node, though every path through it to an end asks."""
        kept = self._marks.get(id(n))
        if kept is None or kept[0] is not n:
            conditions = _conditions(n)
            kept = self._marks[id(n)] = (n, (any(map(special_case, conditions)), any(map(for_larger_inputs, conditions)),
                                             any(map(other_layouts_only, conditions)),
                                             bool(_STORAGE_GROWTH.search(n.name)) or any(map(in_check, conditions))))
        return kept[1]

    def step(self, n: CallNode, flags: dict[str, tuple[bool, CallNode | None]]) -> tuple[int, tuple[tuple[str | None, dict], ...]]:
        """Of a step with `flags` in effect at it (`_end`'s counts): 1 when it
        is an `else` arm taken at the defaults (0 otherwise), and its conditions
        that are arms away from the defaults (`opts`), innermost last: read once
        per node and flags, though every path through it to an end asks."""
        kept = self._steps.get((id(n), id(flags)))
        if kept is None or kept[0] is not n or kept[1] is not flags:
            condition = n.condition or ""
            taken_else = int(condition.startswith("else of ") and not special_case(condition[8:]) and not self.non_default(condition[8:], flags))
            kept = self._steps[(id(n), id(flags))] = (n, flags, taken_else, tuple((c, flags) for c in reversed(_conditions(n)) if self.opts(c, flags)))
        return kept[2], kept[3]

    @staticmethod
    def below(node: CallNode, flags: dict[str, tuple[bool, CallNode | None]]) -> dict[str, tuple[bool, CallNode | None]]:
        """The flags in effect below `node`, `flags` in effect at it."""
        given = node.attrs.get("given_flags")
        if not given:
            return flags
        return {**flags, **{name: (value == "true", node) for name, _, value in (f.partition("=") for f in given)}}

    def along(self, path: tuple[CallNode, ...]) -> list[dict[str, tuple[bool, CallNode | None]]]:
        """The flags in effect at each node of `path` (for its own condition)."""
        flags, out = self.flags, []
        for node in path:
            out.append(flags)
            flags = self.below(node, flags)
        return out

    def non_default(self, condition: str | None, flags: dict[str, tuple[bool, CallNode | None]] | None = None) -> bool:
        """Whether `condition` is an arm taken only when an argument is not at
        its default: an optional argument given (`if (reduce.has_value())`;
        not one the call's schema requires: random_.to's `to`, tested as
        `to_opt.has_value()`), a flag set otherwise than its default or the
        value a call passes (`if (return_inverse)` or `else of if
        (!return_inverse)` of `bool return_inverse=False`), or a float or an
        enumerator compared otherwise (`if (label_smoothing > 0.0)` of `float
        label_smoothing=0.0`, `reduction == Reduction::None` of `int
        reduction=Mean`): an `if` whose test is false at the defaults, or the
        `else` of one that is true. A test joined by `&&` and `||` is
        decided when its known terms decide it. `flags`: those in effect
        where the condition is (default: the call's own)."""
        flags = self.flags if flags is None else flags
        kept = self._signatures.get(id(flags))
        if kept is None or kept[0] is not flags:
            kept = self._signatures[id(flags)] = (flags, tuple((name, value) for name, (value, _) in flags.items()))
        key = (condition, kept[1])
        found = self._decided.get(key)
        if found is None:
            m = _ARM.match(condition or "")
            holds = self._at_defaults(m.group(2), flags) if m is not None and balanced(m.group(2)) else None
            found = self._decided[key] = holds is not None and holds == bool(m.group(1))
        return found

    def _at_defaults(self, test: str, flags: dict[str, tuple[bool, CallNode | None]]) -> bool | None:
        """Whether `test` holds with the arguments at their defaults; None when
        that is not known (a term that is no argument's test)."""
        alternatives = terms(test, "||")
        if len(alternatives) > 1:
            found = [self._at_defaults(a, flags) for a in alternatives]
            return True if True in found else (False if all(f is False for f in found) else None)
        conjuncts = terms(test, "&&")
        if len(conjuncts) > 1:
            found = [self._at_defaults(c, flags) for c in conjuncts]
            return False if False in found else (True if all(f is True for f in found) else None)
        term = conjuncts[0]
        if term.startswith("!") and term[1:].lstrip().startswith("("):
            inner = self._at_defaults(term[1:], flags)
            return None if inner is None else not inner
        if (m := _OPTIONAL_GIVEN.fullmatch(term.lstrip("!").strip())) is not None:
            if m.group(1).rsplit(".", 1)[-1].removesuffix("_opt") in self.required:
                return None
            return term.startswith("!")  # not given at the defaults
        if (m := _FLAG.fullmatch(term)) is not None and m.group(2) in flags:
            return flags[m.group(2)][0] != bool(m.group(1))
        if (m := _COMPARISON.fullmatch(term)) is not None and m.group(1) in self.values:
            return _compare(self.values[m.group(1)], m.group(2), m.group(3))
        return None

    def opts(self, condition: str | None, flags: dict[str, tuple[bool, CallNode | None]]) -> bool:
        """Whether `condition` is an arm away from the defaults: taken only in
        deterministic mode, or only when a fast route cannot be, or with an
        argument not at its default (`non_default`)."""
        return deterministic_only(condition) or fallback_only(condition) or self.non_default(condition, flags)

    @staticmethod
    def passed(condition: str, flags: dict[str, tuple[bool, CallNode | None]]) -> str | None:
        """`name=value is passed to CALLEE` when `condition` tests a flag a call passes as a literal."""
        m = _ARM.match(condition)
        name = next((w for w in re.findall(r"\w+", m.group(2)) if flags.get(w, (False, None))[1] is not None), None) if m else None
        if name is None:
            return None
        value, node = flags[name]
        return f"{name}={'true' if value else 'false'} is passed to {node.name}"


def _required_arguments(schema: str | None) -> frozenset[str]:
    """The names of a schema's arguments that have no default (`int to` of
    `random_.to(Tensor(a!) self, int to, *, Generator? generator=None)`)."""
    return frozenset(a.split()[-1] for a in schema_arguments(schema or "") if "=" not in a)


def _flag_defaults(schema: str | None) -> dict[str, bool]:
    """The `bool` arguments of a schema that have a default, and it
    (`bool return_inverse=False` of aten::_unique2)."""
    flags = {}
    for argument in schema_arguments(schema or ""):
        declared, _, default = argument.partition("=")
        kind, _, name = declared.strip().rpartition(" ")
        if kind.strip() == "bool" and default.strip() in ("True", "False"):
            flags[name] = default.strip() == "True"
    return flags


def _value_defaults(schema: str | None) -> dict[str, str]:
    """The `float` and `Scalar` arguments of a schema with a number for a
    default, and the `int` ones with an enumerator (`float label_smoothing=0.0`,
    `int reduction=Mean`), and it: an `int` with a number is left out, as a
    kernel tests it once wrapped or resolved (`dim=-1` as `dim == 0`)."""
    values = {}
    for argument in schema_arguments(schema or ""):
        declared, _, default = argument.partition("=")
        kind, _, name = declared.strip().rpartition(" ")
        default = default.strip()
        if kind.strip() in ("float", "Scalar") and _NUMBER.fullmatch(default):
            values[name] = default
        elif kind.strip() == "int" and re.fullmatch(r"[A-Z]\w*", default):
            values[name] = default
    return values



def _compare(default: str, operator: str, literal: str) -> bool | None:
    """Whether `default OPERATOR literal` holds: numbers by value, an
    enumerator by its last name (`Reduction::Mean` is `Mean`), for == and !=
    only; None when the two are not alike."""
    if _NUMBER.fullmatch(default) and _NUMBER.fullmatch(literal):
        a, b = float(default), float(literal)
        return {"==": a == b, "!=": a != b, ">": a > b, ">=": a >= b, "<": a < b, "<=": a <= b}[operator]
    if not _NUMBER.fullmatch(default) and not _NUMBER.fullmatch(literal) and operator in ("==", "!="):
        return (literal.rsplit("::", 1)[-1] == default) == (operator == "==")
    return None


def _borrowed(path: tuple[CallNode, ...]) -> bool:
    """Whether a path reaches its end through an operator other than the
    call's own, the first on the path (another overload of its name, as
    sort's redispatch to sort.stable, is its own)."""
    operators = [n.name.split(".", 1)[0] for n in path if n.kind is NodeKind.OPERATOR]
    return any(name != operators[0] for name in operators[1:])


@functools.lru_cache(maxsize=65536)  # a pure reading of the text, asked of every condition on every path
def deterministic_only(condition: str | None) -> bool:
    """Whether an arm runs only with deterministic algorithms on (Note
    [ranking a call's ends]): `if (globalContext().deterministicAlgorithms()
    && ...)`, the setting tested, not negated, and not one of alternatives."""
    if not condition or not condition.startswith("if ") or "deterministicAlgorithms()" not in condition:
        return False
    if re.search(r"!\s*(?:at::)?(?:globalContext\(\)\s*\.\s*)?deterministicAlgorithms\(\)", condition):
        return False
    return len(terms(condition[3:], "||")) == 1  # `a || b` at the top: one of alternatives


# An arm taken only when a fast route cannot be used: the foreach kernels' per-tensor fallback,
# `if (!can_use_fast_route({tensors1, tensors2}, alpha))`, for lists of several devices, dtypes or layouts.
_FALLBACK = re.compile(r"if \(\s*!\s*\(*\s*(?:at::native::)?can_use_fast_route\(")


@functools.lru_cache(maxsize=65536)  # a pure reading of the text, asked of every condition on every path
def fallback_only(condition: str | None) -> bool:
    """Whether an arm runs only when a fast route cannot (Note [ranking a
    call's ends]): ranked like one for an argument not at its default."""
    return bool(condition) and _FALLBACK.match(condition) is not None


# A test for a layout other than strided: `x.layout() == kSparseCsr`, `self.is_sparse()`, `t.is_mkldnn()`.
_OTHER_LAYOUT = re.compile(r"[\w.\->()\[\]]*?(?:layout\(\)\s*==\s*(?:at::|c10::)?(?:Layout::)?(?:kSparse\w*|kMkldnn|kJagged)"
                           r"|\bis_(?:sparse\w*|mkldnn|quantized|nested)\(\))")


@functools.lru_cache(maxsize=65536)  # a pure reading of the text, asked of every condition on every path
def other_layouts_only(condition: str | None) -> bool:
    """Whether an arm runs only for tensors of a layout other than strided
    (Note [ranking a call's ends]): `if (a && (x.is_sparse() || x.is_mkldnn()))`,
    a conjunct made of positive layout tests only; never an `else` arm."""
    if not condition or not condition.startswith("if (") or not _OTHER_LAYOUT.search(condition):
        return False
    for conjunct in terms(condition[3:], "&&"):
        alternatives = terms(conjunct, "||")
        if len(alternatives) > 1 and alternatives[-1].endswith("..."):  # the end of a long condition, cut when recorded
            alternatives.pop()
        if all(_OTHER_LAYOUT.fullmatch(alternative) for alternative in alternatives):
            return True
    return False


def for_trivial_inputs(condition: str | None) -> bool:
    """Whether an arm runs only for an empty, zero-dimensional or one-element
    input, or one value of a scalar argument (Note [ranking a call's ends]):
    `if (self.dim() == 0 && ...)`, `if (exp_scalar.equal(.5))`, a conjunct
    made of such tests only; never an `else` arm."""
    if not condition or not condition.startswith("if (") or not _TRIVIAL_TEST.search(condition):
        return False
    return _a_conjunct_of(condition, _TRIVIAL_TEST)


def _a_conjunct_of(condition: str, test: re.Pattern[str]) -> bool:
    """Whether the test of the arm `if (...)` has a conjunct whose alternatives
    all are `test`s: `if (a && (x.numel() == 0 || x.is_empty()))`."""
    return any(all(test.fullmatch(alternative) for alternative in terms(conjunct, "||")) for conjunct in terms(condition[3:], "&&"))


# A test for a channels-last input: `x.is_contiguous(at::MemoryFormat::ChannelsLast)`, `memory_format ==
# MemoryFormat::ChannelsLast3d`, `input.suggest_memory_format() == ...`, `isChannelsLast(x)`.
_CHANNELS_LAST_TEST = re.compile(r"[\w.\->()\[\]]*?(?:is_contiguous\(\s*(?:at::|c10::)?MemoryFormat::ChannelsLast(?:3d)?\s*\)"
                                 r"|(?:\b\w+|suggest_memory_format\(\))\s*==\s*(?:at::|c10::)?MemoryFormat::ChannelsLast(?:3d)?|\b[iI]sChannelsLast(?:3d)?\([^()]*\))")
# A switch's case for it: `case at::MemoryFormat::ChannelsLast`, batch_norm's `case Impl::ChannelsLast`.
_CHANNELS_LAST_CASE = re.compile(r"case (?:\w+::)*(?:MemoryFormat|Impl)::ChannelsLast(?:3d)?(?:$|\s\s#if )")


def for_channels_last(condition: str | None) -> bool:
    """Whether an arm runs only for a channels-last input (Note [ranking a
    call's ends]: answers are for contiguous tensors): `if
    (input.is_contiguous(at::MemoryFormat::ChannelsLast) || ...)`, `case
    at::MemoryFormat::ChannelsLast`; a conjunct made of such tests only;
    never an `else` arm."""
    if not condition or "ChannelsLast" not in condition:
        return False
    if condition.startswith("case "):
        return _CHANNELS_LAST_CASE.match(condition) is not None
    return condition.startswith("if (") and _a_conjunct_of(condition, _CHANNELS_LAST_TEST)


@functools.lru_cache(maxsize=65536)  # a pure reading of the text, asked of every condition on every path
def special_case(condition: str | None) -> bool:
    """Whether an arm runs only for an input of a special kind (Note [ranking a
    call's ends]): empty, zero-dimensional or of one element, one value of a
    scalar argument, or channels-last."""
    return for_trivial_inputs(condition) or for_channels_last(condition)


@functools.lru_cache(maxsize=65536)  # a pure reading of the text, asked of every condition on every path
def for_larger_inputs(condition: str | None) -> bool:
    """Whether an arm runs only for inputs of at least the grain size, or too
    large to index with 32 bits (Note [ranking a call's ends]): `if (x >=
    grain_size && ...)`, or the `else` of `if (x < grain_size || ...)`; `if
    (max_gather_offset > std::numeric_limits<int32_t>::max())`, the `else`
    of `if (N <= std::numeric_limits<int>::max())` or of `if
    (canUse32BitIndexMath(input))`."""
    if not condition or ("grain" not in condition.lower() and "numeric_limits" not in condition and "canUse32BitIndexMath" not in condition):
        return False
    otherwise = condition.startswith("else of ")
    tests = [m.group(1) for m in _GRAIN_TEST.finditer(condition)] + [m.group(1) for m in _INT32_LIMIT_TEST.finditer(condition)]
    if not tests:
        return otherwise and "||" not in condition and _ELSE_OF_32_BIT_INDEXING.match(condition) is not None
    if otherwise:
        return "&&" not in condition and all(t in ("<", "<=") for t in tests)
    return "||" not in condition and any(t in (">", ">=") for t in tests)


def stub_kernel(tree: CallTree, ends: tuple[End, ...] | None = None) -> CallNode | None:
    """The kernel a DispatchStub runs on the way to the call's ends: the
    first stub-reached kernel on the path to the best end that passes one
    (Note [ranking a call's ends]). Not the first stub met breadth first: a
    convolution's bias add reaches `add_stub` before the convolution's own
    work, and is not where the inputs go. The call's own stub kernel when the
    best end is another operator's launch or a block copy (`_own_stub_kernel`);
    None when neither is found. Before all these, the kernel of the stub named
    for the call's operator, where the call reaches it at the arguments'
    defaults (`_stub_named_for_the_call`)."""
    from kernelmap.model import EdgeKind

    def reached(n: CallNode) -> bool:  # a kernel registered for a stub (not the `nullptr` one stands for a device's absence)
        return n.via is EdgeKind.STUB and n.kind in (NodeKind.KERNEL, NodeKind.GENERATED) and n.location is not None and n.name != "nullptr"

    ends = tuple(e for e in (ends if ends is not None else call_ends(tree)) if e.checked_by is None)
    if not ends:  # nothing but checks ends the call (a reduction's loop is not modelled): the first stub met outside a check
        stack = [tree.root]
        while stack:
            n = stack.pop()
            if n.attrs.get("collapsed") or any(map(in_check, _conditions(n))):
                continue
            if reached(n):
                return n
            stack.extend(reversed(n.children))
        return None
    chosen = _stub_kernel_of_best(tree, reached, ends)
    named = _stub_named_for_the_call(tree, reached, ends[0].path)
    if named is not None and chosen not in named.children:
        return next(c for c in named.children if reached(c) and not c.attrs.get("collapsed"))
    return chosen


def _stub_kernel_of_best(tree: CallTree, reached, ends: tuple[End, ...]) -> CallNode | None:
    if ends[0].rank[7]:  # the best end is another operator's: the call's own stub kernel, if it has one
        own = _own_stub_kernel(tree, reached, ends[0].path)
        if own is not None:
            return own
    if ends[0].rank[0] or ends[0].rank[2] or ends[0].rank[4]:
        # every end is under an arm for an argument not at its default or for a trivial input (var on CPU:
        # std_var_all_cpu's `if (result.numel() == 1 && ...)`), or is setup (a check's all() in repeat_interleave):
        # the general case's own stub kernel, if any
        own = _own_stub_kernel(tree, reached, (), general=True)
        if own is not None:
            return own
    earlier = _earlier_stub_call(ends[0].path, reached, _expanded_twins(tree))
    if earlier is not None:
        return earlier
    # the best end only: conv2d's oneDNN forward reaches ideep through the dispatcher, and
    # the transposed convolution's stub, as good an end, is not on the way the call goes
    on_path = [n for n in ends[0].path if reached(n)]
    if on_path:
        return on_path[0]
    if ends[0].rank[5] >= _KIND_RANK[NodeKind.INNER_LOOP] or own_loop(ends[0].node):
        # the best end is a block copy or a kernel's own loop reached through no stub (CPU scatter's memcpy,
        # in an arm for deterministic mode the kernel tests through a local flag; linalg_ldl_factor_ex's
        # triu): the call's own stub kernel, whose loop is not modelled, tells more (a BLAS fallback's stub
        # beside a vendor's gemm does not)
        return _own_stub_kernel(tree, reached, ends[0].path)
    return None


def _stub_named_for_the_call(tree: CallTree, reached, best: tuple[CallNode, ...]) -> CallNode | None:
    """The stub named for the call's operator (histogramdd_stub of
    aten::histogramdd, add_stub of aten::add_), called on this device with
    every optional argument and flag at its default and with a kernel
    registered; None when there is none. Its kernel is the operator's own
    work where the best end lies in another operator's (the linspace loop
    that makes histogramdd's bin edges; the histogram's loop is not modelled)."""
    operator = next((n.name for n in best if n.kind is NodeKind.OPERATOR), None)
    if operator is None:
        return None
    stub = f"{operator.removeprefix('aten::').split('.', 1)[0].strip('_')}_stub"
    arguments = _Arguments(tree)
    stack: list[tuple[CallNode, bool, dict[str, tuple[bool, CallNode | None]]]] = [(tree.root, False, arguments.flags)]
    while stack:
        node, opted, flags = stack.pop()
        opted = opted or any(arguments.non_default(c, flags) for c in _conditions(node))
        if opted or node.attrs.get("collapsed") or node.attrs.get("branch"):
            continue
        if node.kind is NodeKind.STUB and node.name.rsplit("::", 1)[-1] == stub \
                and any(reached(c) and not c.attrs.get("collapsed") for c in node.children):
            return node
        below = arguments.below(node, flags)
        stack.extend((c, opted, below) for c in reversed(node.children))
    return None


def _own_stub_kernel(tree: CallTree, reached, best: tuple[CallNode, ...], general: bool = False) -> CallNode | None:
    """A stub-reached kernel with no end below it that the call reaches
    without passing another operator (var's std_var_kernel_cuda, whose
    reduction is not followed), nor an arm that excludes the path to the best
    end `best`; of several, the one an optional argument left at its default
    reaches (not under scatter's `if (reduce.has_value())`, but its `else`),
    then the first in tree order. A stub kernel with ends of its own is one of
    the alternatives the ranking chose among (_convolution's oneDNN transpose
    beside the forward). `general`: only one reached with every argument at
    its default and not for a trivial input."""
    taken = [n.condition for n in best if n.condition]
    arguments = _Arguments(tree)
    found = []
    stack: list[tuple[CallNode, tuple[CallNode, ...]]] = [(tree.root, (tree.root,))]
    while stack:
        node, path = stack.pop()
        if node.attrs.get("collapsed") or node.attrs.get("branch") or _borrowed(path):
            continue
        if node.condition and any(_exclusive(node.condition, other) for other in taken):
            continue
        flags = arguments.along(path)
        if general and any(arguments.opts(c, flags[-1]) or special_case(c) or in_check(c) for c in _conditions(node)):
            continue
        if reached(node) and not _has_ends(node):
            found.append((sum(1 for n, f in zip(path, flags) if any(arguments.non_default(c, f) for c in _conditions(n))), len(found), node))
            continue
        stack.extend((c, path + (c,)) for c in reversed(node.children))
    return min(found, key=lambda f: f[:2])[2] if found else None


def _has_ends(node: CallNode) -> bool:
    """Whether any end lies below `node` (collapsed branches aside)."""
    stack = list(node.children)
    while stack:
        n = stack.pop()
        if n.attrs.get("collapsed") or n.attrs.get("branch"):
            continue
        if n.kind in _KIND_RANK or library_routine(n) is not None:
            return True
        stack.extend(n.children)
    return False


def _earlier_stub_call(path: tuple[CallNode, ...], reached, twins: dict[str, CallNode]) -> CallNode | None:
    """The kernel of a stub called, on the way to the best end, before the path
    goes on (Note [ranking a call's ends]): scaled_dot_product_attention calls
    _fused_sdp_choice_stub before the attention it chose; a kernel's fast path
    (cat_serial_stub for small inputs, batch_norm_cpu_stub for contiguous ones)
    is called, and returns, before its general loop. In call order, skipping
    branches collapsed for another device. A repeat on the path calls what
    its expanded twin (in `twins`) calls (Note [ends below a repeat])."""
    for parent, child in zip(path, path[1:]):
        called = parent.children or (twins[parent.attrs["identity"]].children if parent.attrs.get("identity") in twins else ())
        for sibling in called:
            if sibling is child:
                break
            if sibling.kind is not NodeKind.STUB or sibling.attrs.get("collapsed") or sibling.attrs.get("branch"):
                continue
            if for_larger_inputs(sibling.condition) and not for_larger_inputs(child.condition):
                continue  # an arm for larger inputs than the path's
            if special_case(sibling.condition) and not special_case(child.condition):
                continue  # an arm for an empty or one-element input
            if _exclusive(sibling.condition, child.condition):
                continue  # another case of the same switch, or the other arm of the same if: never both
            kernel = next((c for c in sibling.children if reached(c) and not c.attrs.get("collapsed") and not c.attrs.get("branch")), None)
            if kernel is not None:
                return kernel
    return None


def _exclusive(first: str | None, second: str | None) -> bool:
    """Whether two call conditions can never hold on one call: two `case` labels
    (of one switch, in a kernel's body), or an `if` and its `else`."""
    if not first or not second:
        return False
    if first.startswith(("case ", "default")) and second.startswith(("case ", "default")):
        return True
    return first.removeprefix("else of ") == second.removeprefix("else of ") and first != second
