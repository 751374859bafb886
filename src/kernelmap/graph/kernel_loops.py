"""The loops a kernel calls: device loops (`cpu_kernel_vec`, `gpu_kernel`), its
own TensorIterator and `parallel_for` loops, and the lambdas they run (the
machinery below them is graph.loops').
"""

from __future__ import annotations

import re
from typing import Any

from kernelmap.graph.code import _blank_keeping_lines, call_end, _CODE_ONLY, device_lambdas, LOOP_HEADERS, tree_lines
from kernelmap.graph.context import GraphContext
from kernelmap.graph.grow import Node
from kernelmap.graph.resolve import macro_start, receiver_type, _resolve_direct
from kernelmap.model import EdgeKind, Location, NodeKind


def _device_loop(site, caller, ctx: GraphContext, condition: str | None) -> Node | None:
    """A device loop (`gpu_kernel`, `cpu_kernel_vec`) as a node to follow, at
    its definition in the loop headers (Loops.cuh, CUDALoops.cuh, cpu/Loops.h),
    so the kernel templates it launches and the loop it runs appear below it."""
    found = _resolve_direct(site, caller, ctx)
    loops = [d for d in found if "Loops" in d.location.path.rsplit("/", 1)[-1]] or found
    if not loops:
        return None
    d = loops[0]
    attrs: dict[str, Any] = {"call_site": site.location, "symbol_kind": d.symbol.kind}
    if len(loops) > 1:
        attrs["candidates"] = len(loops)
    return Node(site.callee, NodeKind.DEVICE_LOOP, d.location, site.kind, condition, attrs, payload=d, identity=("cpp", d.name, str(d.location)))


# A kernel's own loop over a TensorIterator, not through cpu_kernel_vec: `iter.for_each(loop, grain_size)`
# (the unary kernels IMPLEMENT_FLOAT_KERNEL writes), `iter.parallel_reduce(loop)` (cascade_sum's).
_ITERATOR_LOOPS = (".for_each", ".serial_for_each", ".parallel_reduce")
_ITERATORS = ("TensorIterator", "TensorIteratorBase")
# A kernel's own parallel loop: `at::parallel_for(0, n, grain_size, [&](int64_t begin, int64_t end) {...})`
# (the pooling, padding and upsampling kernels', softmax's).
_PARALLEL_LOOPS = ("at::parallel_for", "parallel_for")


def _own_loop(site, caller, ctx: GraphContext, condition: str | None) -> Node | None:
    """A kernel's own `iter.for_each(...)`, `serial_for_each` or
    `parallel_reduce` on a TensorIterator (declared so, or an `auto` set to
    one it builds), or its own `at::parallel_for(...)`: a device loop as
    cpu_kernel_vec is, at the method's definition in TensorIteratorBase (at
    Parallel-inl.h's parallel_for); the loop it runs is the lambda at the
    call, whose calls are the kernel's. Not the machinery's own calls of it
    (Note [device loop machinery])."""
    from kernelmap.graph import loops

    if caller.location.path.startswith((*loops.MACHINERY_FILES, *LOOP_HEADERS, *_REDUCTION_MACHINERY)):
        return None
    if site.callee in _PARALLEL_LOOPS:
        found, role = [d for d in ctx.index.definitions("at::parallel_for") if d.location.path == "aten/src/ATen/Parallel-inl.h"], "threads"
    else:
        if not _on_iterator(site, caller, ctx):
            return None
        found, role = ctx.index.definitions(f"at::TensorIteratorBase::{site.callee[1:]}"), "iteration"
        found = [d for d in found if d.location.path.endswith(".cpp")] or found  # the loop2d_t overload the others wrap
    if not found:
        return None
    d = found[0]
    attrs: dict[str, Any] = {"call_site": site.location, "symbol_kind": d.symbol.kind, "loop": role}
    lines = tree_lines(ctx, site.location.path)
    span = _lambda_span(site, caller, ctx)
    end = span[1] if span is not None and span[0] == site.location.line else site.location.line
    where, text = site.location, "lambda"
    if span is not None and span[0] != site.location.line and span[0] != caller.location.line:
        first = span[0]  # a lambda held in a variable (`auto loop = [&](...)`): at its own line
    else:
        first = site.location.line  # written in the call, at the line its `[...](` is written on
    for number in range(first, min(len(lines), max(end, first)) + 1):
        spelled = _LAMBDA_HEAD.search(lines[number - 1])
        if spelled is not None:
            where, text = Location(site.location.path, number, origin=site.location.origin), spelled.group(0).strip()
            break
    else:  # written by a macro (`iter.for_each(IMPLEMENT_ITERATOR_LAMBDA(op), grain_size)`): named by the macro's use,
        # at the line it is written on (1.13 wrote it on the line after `iter.serial_for_each(`)
        call = "\n".join(lines[site.location.line - 1 : site.location.line + 2])
        written = re.search(rf"\b{re.escape(site.name)}\s*\([\s\\]*([A-Z_][A-Z0-9_]*\s*\([^()]*\))", call)  # a macro's line ends in '\\'
        if written is not None:
            text = written.group(1)
            where = Location(site.location.path, site.location.line + call.count("\n", 0, written.start(1)), origin=site.location.origin)
    text = re.sub(r"^\[[^\]]{12,}\]", "[...]", text)  # a long capture list: `[&index_contig, &slice_size_bytes, ...]`
    # a lambda none of these ways gives is not read: its calls stay the kernel's
    lam = None if span is None else loops.Lambda(caller, where, end, text, span if span[0] != site.location.line else None)
    return Node(d.name, NodeKind.DEVICE_LOOP, d.location, EdgeKind.DIRECT, condition, attrs, payload=loops.LoopStep(d, lam, ()),
                identity=("loop", d.name, str(d.location), f"lambda@{site.location}"))


# The CPU device loops whose lambdas a kernel writes at their call (`cpu_kernel_vec(iter, [=](scalar_t a) {...}, ...)`).
_CPU_DEVICE_LOOPS = re.compile(r"^(cpu_kernel\w*|cpu_serial_kernel\w*|binary_kernel_reduce\w*)$")


def _loop_call(site) -> bool:
    """Whether a call site is of a loop a kernel hands a lambda: its own, or a CPU device loop."""
    return site.callee in _PARALLEL_LOOPS or site.callee in _ITERATOR_LOOPS or bool(_CPU_DEVICE_LOOPS.match(site.name))


def _loop_lambdas(sites, definition, ctx: GraphContext) -> list[tuple[int, int]]:
    """The lines (first, last) of the lambdas a kernel hands its loops:
    its own (`iter.for_each([&](...) {...})`, `at::parallel_for(0, n, 1,
    [&](int64_t begin, int64_t end) {...})`) and the CPU device loops'
    (`cpu_kernel_vec(iter, [=](scalar_t a) {...}, [=](Vectorized<scalar_t> a) {...})`)."""
    from kernelmap.graph import loops

    if definition.location.path.startswith((*loops.MACHINERY_FILES, *LOOP_HEADERS, *_REDUCTION_MACHINERY)):
        return []
    spans = []
    for site in sites:
        if site.callee in _PARALLEL_LOOPS or (site.callee in _ITERATOR_LOOPS and _on_iterator(site, definition, ctx)):
            span = _lambda_span(site, definition, ctx)
            if span is not None:
                spans.append(span)
        elif site.kind is EdgeKind.LAUNCH and _CPU_DEVICE_LOOPS.match(site.name) and not site.location.path.startswith("build/"):
            spans.extend((first, last) for first, last, _ in device_lambdas(site.location, ctx))
    return spans


def _lambda_span(site, definition, ctx: GraphContext) -> tuple[int, int] | None:
    """(after which line, up to which line) a kernel's calls are made in the
    lambda its own loop's call at `site` is given: the lines of the call, or
    the line of the macro use that defines the kernel when a macro writes the
    lambda (`iter.for_each(IMPLEMENT_ITERATOR_LAMBDA(op), grain_size)` in the
    body of IMPLEMENT_FLOAT_KERNEL, Note [definitions written by macros] in
    source.extract); None when neither can be read."""
    lines = tree_lines(ctx, site.location.path)
    end = call_end(lines, site.location.line, site.name)
    text = lines[site.location.line - 1] if site.location.line <= len(lines) else ""
    use = definition.location.line
    if use != site.location.line and re.search(rf"\b{re.escape(site.name)}\s*\(\s*[A-Z_][A-Z0-9_]*\s*\(", text):
        return use, use
    if end > site.location.line or re.search(r"\[[^\[\]]*\]\s*\(", text):
        return site.location.line, end
    held = _held_lambda(site, definition, lines)
    return held


def _held_lambda(site, definition, lines) -> tuple[int, int] | None:
    """The lines of the lambda a loop's call is given by the name of a
    variable the caller sets to it above the call (`auto loop = [&](char**
    data, ...) {...}; iter.for_each(loop, grain_size);`, cumsum's and
    binary_kernel_reduce_lastdim's); None when it is no such name."""
    m = re.search(rf"\b{re.escape(site.name)}\s*\(\s*(?:[^,()]*,\s*){{0,3}}?([A-Za-z_]\w*)\s*[,)]", lines[site.location.line - 1])
    if m is None:
        return None
    name = m.group(1)
    start = definition.location.line - 1
    if start >= site.location.line:
        start = macro_start(list(lines), site.location.line)
    declared = re.compile(rf"\b(?:const\s+)?auto\s*&?\s*{re.escape(name)}\s*=\s*\[")
    for i in range(site.location.line - 1, start - 1, -1):
        if declared.search(lines[i]):
            text = _CODE_ONLY.sub(_blank_keeping_lines, "\n".join(lines[i : site.location.line]))
            opened = text.find("{", text.find("]"))
            if opened < 0:
                return None
            depth, j = 0, opened
            while j < len(text):
                depth += {"{": 1, "}": -1}.get(text[j], 0)
                j += 1
                if depth == 0:
                    return i + 1, i + 1 + text.count("\n", 0, j)
            return None
    return None


def _on_iterator(site, caller, ctx: GraphContext) -> bool:
    """Whether a member call is made on a TensorIterator (declared so, or an `auto` set to one the caller builds)."""
    receiver = receiver_type(site, caller, ctx)
    return (receiver is not None and receiver.rsplit("::", 1)[-1] in _ITERATORS) or _made_iterator(site, caller, ctx)


# A lambda's introducer and parameters as written on one line: `[&](int64_t begin, int64_t end)`.
_LAMBDA_HEAD = re.compile(r"\[[^\[\]]*\]\s*\([^()]*\)")


def _made_iterator(site, caller, ctx: GraphContext) -> bool:
    """Whether the receiver of a member call is an `auto` the caller sets to a
    TensorIterator it builds above the call (`auto iter =
    TensorIteratorConfig()...build();`, compare_base_kernel's)."""
    lines = tree_lines(ctx, site.location.path)
    if site.location.line > len(lines):
        return False
    m = re.search(rf"\b([A-Za-z_]\w*)\s*(?:\.|->)\s*{re.escape(site.callee[1:])}\s*\(", lines[site.location.line - 1])
    if m is None:
        return False
    start = caller.location.line - 1
    if start >= site.location.line:  # the call is written in the body of the macro whose use defines the caller
        start = macro_start(lines, site.location.line)
    made = re.compile(rf"\bauto\s+{re.escape(m.group(1))}\s*=\s*(?:at::)?TensorIterator(?:Config|Base)?\b")
    return any(made.search(lines[i]) for i in range(start, site.location.line))


# The CPU reductions' own machinery (binary_kernel_reduce's loops, parallel_reduce itself) and the threads'.
# (cpu/Reduce.h's own `sub_iter.for_each(loop, grain_size)`, binary_kernel_reduce_lastdim's, is a loop
# with a lambda of its own, as a kernel's is: Note [device loop machinery] in graph.loops)
_REDUCTION_MACHINERY = ("aten/src/ATen/native/TensorIteratorReduce.cpp", "aten/src/ATen/Parallel")
