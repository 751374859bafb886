"""The device loop machinery as nodes: what a CPU device loop
(`cpu_kernel_vec`, `cpu_kernel`) runs between the kernel's call and the
per-element operation, read from the selected tree's TensorIterator and loop
headers; and the loop a generated ufunc kernel calls for the selected dtype.

Note [device loop machinery]
`cpu_kernel_vec(iter, op, vop)` (native/cpu/Loops.h) calls
`iter.for_each(make_vectorized_loop2d(op, vop), grain_size)`:
`TensorIteratorBase::for_each` (TensorIterator.cpp) runs the range serially
or splits it with `at::parallel_for`; `serial_for_each` hands each tile to
`at::internal::serial_for_each` (TensorIteratorInternal.h), which calls the
loop object through a type-erased `loop2d_t` (a `c10::function_ref`). No call
site names the object's `operator()`: it is the type the device loop passed,
the return type of `make_vectorized_loop2d` (`VectorizedLoop2d`), whose
`operator()` runs `vectorized_loop` on contiguous rows (the vectorized inner
loop, calling `vop` on `Vectorized<scalar_t>`) and `basic_loop` otherwise.
A 1-d lambda (`cpu_kernel`) goes through the `loop1d_t` overload of
`for_each` in TensorIterator.h, which wraps it (`loop_2d_from_1d`); the
lambda itself is then the loop object, and its body calls `basic_loop`.
The CUDA launchers are ordinary calls in Loops.cuh / CUDALoops.cuh
(`gpu_kernel` -> `gpu_kernel_impl` -> `launch_vectorized_kernel` ->
`vectorized_elementwise_kernel<<<...>>>`) and are followed as such.
A kernel that calls `iter.for_each(...)`, `iter.serial_for_each(...)` or
`iter.parallel_reduce(...)` itself (cascade_sum, the unary kernels that
UnaryOpsKernel.cpp's IMPLEMENT_FLOAT_KERNEL writes), or `at::parallel_for(...)`
(the pooling kernels), has that call for its device loop, at its definition
(graph.kernel_loops' `_own_loop`); the loop it runs is the lambda at the call, whose
calls are the kernel's own.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kernelmap.graph.context import GraphContext
from kernelmap.graph.grow import Node
from kernelmap.model import EdgeKind, Location, NodeKind

# Where the iteration machinery lives (besides the loop headers of code.LOOP_HEADERS).
MACHINERY_FILES = (
    "aten/src/ATen/TensorIterator.cpp",
    "aten/src/ATen/TensorIterator.h",
    "aten/src/ATen/TensorIteratorInternal.h",
    "aten/src/ATen/native/cpu/Loops.h",
)
# The calls of the machinery that are steps of the loop: iteration, threads, the loops themselves.
_STEP_NAMES = re.compile(r"^(for_each|serial_for_each|parallel_for|invoke_parallel|two_pass_reduction|parallel_dim_reduction|\w*_loop|\w*_loop2d)$")
# Where the threads and the reductions' machinery live: OpenMP's invoke_parallel (the wheel's
# build uses OpenMP), TensorIteratorBase::parallel_reduce's helpers.
_THREAD_FILES = ("aten/src/ATen/Parallel-inl.h", "aten/src/ATen/ParallelOpenMP.h", "aten/src/ATen/native/TensorIteratorReduce.cpp")
# What each loop of Loops.h is, for the reader (and for explain).
_ROLES = {"vectorized_loop": "vectorized inner loop", "basic_loop": "scalar inner loop"}
_ITERATION = (".for_each", ".serial_for_each")
# The calls a definition makes, only those on the lines of a span when one is given: graph.sites'
# `_code_children(node, ctx, owner, span)`, passed in (the direction that grows the tree owns its rules).
CodeChildren = Callable[[Node, GraphContext, Any, "tuple[int, int] | None"], "list[Node]"]


@dataclass(frozen=True)
class LoopStep:
    """A definition of the machinery, and the loop object the type-erased
    `loop(...)` calls below it reach (Note [device loop machinery])."""

    definition: Any
    loop_object: Any = None  # a Definition (VectorizedLoop2d::operator()), or a Lambda
    operations: tuple = ()  # (inner loop name, vectorized?, line of its lambda) the device loop was given
    # the lambdas the kernel wrote at the device loop's call: (kernel's Definition, first line, last line, vectorized?)
    lambdas: tuple = ()


@dataclass(frozen=True)
class Lambda:
    """The lambda a device loop passes to `for_each` (cpu_kernel's)."""

    owner: Any  # the device loop's Definition
    location: Location  # the line of the `for_each(` call that holds it
    end_line: int
    text: str = "lambda"  # its introducer and parameters as written: `[&](char** data, ...)`
    # the lines whose calls are made in it, when not those after its call's line up to end_line:
    # a lambda a macro writes (`iter.for_each(IMPLEMENT_ITERATOR_LAMBDA(op), grain_size)`) has its calls at the macro's use
    span: tuple[int, int] | None = None

    @property
    def name(self) -> str:
        """Named as the line spells it, inside its device loop: `...::cpu_kernel::[&](char** data, ...)`."""
        return f"{self.owner.name}::{self.text}"


def iteration_nodes(node: Node, definition, ctx: GraphContext) -> list[Node]:
    """The TensorIterator iteration a CPU device loop's definition starts:
    `iter.for_each(...)` / `iter.serial_for_each(...)`, each carrying the loop
    object it passes and the inner loops the device loop's call gives it
    (Note [device loop machinery])."""
    if ctx.index is None or not definition.location.path.endswith("cpu/Loops.h"):
        return []
    from kernelmap.graph.code import tree_lines

    from kernelmap.graph.code import device_lambdas

    site = node.attrs.get("call_site")
    operations = _operations(site, ctx) if isinstance(site, Location) else ()
    owner = ctx.index.definition_at(site.path, site.line) if isinstance(site, Location) and not site.path.startswith("build/") else None
    lambdas = tuple((owner, first, last, vectorized) for first, last, vectorized in device_lambdas(site, ctx)) if owner is not None else ()

    lines = tree_lines(ctx, definition.location.path)
    nodes = []
    for site in ctx.index.calls_from(definition):
        if site.callee not in _ITERATION:
            continue
        text = lines[site.location.line - 1] if site.location.line <= len(lines) else ""
        method = site.callee[1:]
        made = re.search(rf"\.{method}\s*\(\s*(make_\w+)\s*\(", text)
        if made is not None:
            loop_object, overload = _made_object(made.group(1), definition, ctx), "loop2d_t"
        else:
            end = definition.location.end_line or site.location.line
            spelled = re.search(r"\[[=&]?\]\s*\([^)]*\)", text)
            loop_object, overload = Lambda(definition, site.location, end, spelled.group(0) if spelled else "lambda"), "loop1d_t"
        target = _overload(f"at::TensorIteratorBase::{method}", overload, ctx)
        if target is None:
            continue
        attrs = {"call_site": site.location, "loop": "iteration", "keep": True, "symbol_kind": target.symbol.kind}
        nodes.append(_step_node(target, loop_object, operations, site.condition, attrs, lambdas))
    return nodes


def _step_node(target, loop_object, operations: tuple, condition: str | None, attrs: dict, lambdas: tuple = ()) -> Node:
    key = _object_key(loop_object) + "".join(f"|{name}@{line}" for name, _, line in operations) + "".join(f"|lambda@{first}" for _, first, _, _ in lambdas)
    return Node(target.name, NodeKind.KERNEL, target.location, EdgeKind.DIRECT, condition, attrs, payload=LoopStep(target, loop_object, operations, lambdas),
                identity=("loop", target.name, str(target.location), key))


def _operations(site: Location, ctx: GraphContext) -> tuple:
    """The inner loops (`ufunc::add`) the lambdas of a device loop's call use:
    (name, whether the lambda takes Vectorized<scalar_t>, the lambda's line)."""
    from kernelmap.graph.code import location_lines

    lines = location_lines(site, ctx)
    found, depth, started = [], 0, False
    for number in range(site.line, min(len(lines), site.line + 30) + 1):
        text = lines[number - 1]
        for part in re.split(r"\[[=&]\]", text)[1:]:
            for name in re.findall(r"\bufunc::(\w+)\s*\(", part):
                found.append((name, "Vectorized<" in part, f"{site.path.rsplit('/', 1)[-1]}:{number}"))
        depth += text.count("(") - text.count(")")
        started = started or "(" in text
        if started and depth <= 0:
            break
    return tuple(dict.fromkeys(found))


def _inner_loops(operations: tuple, vectorized: bool, ctx: GraphContext) -> list[Node]:
    """The inner loop a loop of Loops.h applies: the Vectorized overload of
    `ufunc::add` under vectorized_loop, the scalar one under basic_loop."""
    from kernelmap.graph.code import tree_lines

    nodes = []
    for name, is_vectorized, line in operations:
        if is_vectorized != vectorized:
            continue
        for d in ctx.index.definitions(f"at::native::ufunc::{name}"):
            text = tree_lines(ctx, d.location.path)[d.location.line - 1]
            if ("Vectorized<" in text) == vectorized:
                role = "vop: the Vectorized lambda" if vectorized else "op: the scalar lambda"
                attrs = {"header": d.location.path}
                nodes.append(Node(d.name, NodeKind.INNER_LOOP, d.location, EdgeKind.DIRECT, f"{role} the device loop was given ({line})", attrs))
                break
    return nodes


def _object_key(loop_object) -> str:
    if isinstance(loop_object, Lambda):
        return f"lambda@{loop_object.location}"
    return str(loop_object.location) if loop_object is not None else ""


def _made_object(maker: str, caller, ctx: GraphContext):
    """The `operator()` of the type `make_vectorized_loop2d` returns, read from its definition."""
    from kernelmap.graph.code import tree_lines

    found = [d for d in ctx.index.definitions(maker) if d.location.path == caller.location.path] or ctx.index.definitions(maker)
    if not found:
        return None
    d = found[0]
    lines = tree_lines(ctx, d.location.path)
    head = " ".join(lines[max(0, d.location.line - 2) : d.location.line + 1])
    m = re.search(rf"\b(\w+)\s*(?:<[^;{{}}<>]*>)?\s+{re.escape(maker)}\s*\(", head)
    if m is None:
        return None
    calls = [c for c in ctx.index.definitions(f"{m.group(1)}::operator()") if c.location.path == d.location.path]
    return calls[0] if calls else None


def _overload(name: str, loop_type: str, ctx: GraphContext):
    """The overload of a TensorIteratorBase method that takes `loop_type` (loop2d_t or loop1d_t)."""
    from kernelmap.graph.code import parameters

    found = ctx.index.definitions(name)
    for d in found:
        params = parameters(d, ctx) or []
        if params and loop_type in params[0]:
            return d
    return found[0] if found else None


def step_children(node: Node, ctx: GraphContext, code_children: CodeChildren) -> list[Node]:
    """The steps below one machinery definition: its calls of other machinery
    (serial_for_each, parallel_for, the loops), and the loop object where it
    calls the type-erased `loop` (Note [device loop machinery]). The calls a
    kernel makes in its lambdas are the direction's own: `code_children`."""
    step: LoopStep = node.payload
    if isinstance(step.definition, Lambda):
        return _lambda_children(step, ctx, code_children, node)
    definition = step.definition
    nodes: list[Node] = []
    from kernelmap.graph.code import compiled

    parameters = _loop_parameters(definition, ctx)
    sites = [s for s in ctx.index.calls_from(definition) if not s.preproc or compiled(s.preproc, ctx) is not False]
    # the type-erased loop is called once per case (1-d from the start, 1-d from an offset, n-d tiles):
    # the last call, the general n-d one, stands for them; at::parallel_for calls its function itself
    # for inputs under the grain size, the case answers are for, and through invoke_parallel's threads
    # otherwise (a call made in the lambda it passes them is theirs)
    calls = [s for s in sites if s.callee in parameters]
    threads = definition.location.path == "aten/src/ATen/Parallel-inl.h"
    object_site = (calls[:1] if threads else calls[-1:]) if step.loop_object is not None else []
    for site in sites:
        condition = site.condition
        if site in object_site:
            threads = definition.location.path in _THREAD_FILES
            obj = _object_node(step.loop_object, site, None if threads else None, step.operations, threads, step.lambdas)
            wrapper = None if threads else _from_1d(step.loop_object, site, ctx)
            if wrapper is not None:  # a 1-d lambda runs inside the 2-d loop TensorIterator makes of it
                obj.attrs["call_site"] = wrapper.attrs.pop("inner_call_site", obj.attrs["call_site"])
                obj.condition = "called for each row by the 2-d loop loop_2d_from_1d makes of it"
                wrapper.condition = _joined_condition(condition, "called through loop2d_t (c10::function_ref): the 2-d loop made of the 1-d lambda")
                wrapper.children = [*wrapper.children, obj]  # the pointers copied (memcpy), then the lambda per row
                nodes.append(wrapper)
            else:
                obj.condition = _joined_condition(condition, obj.condition)
                nodes.append(obj)
            continue
        if site.callee in parameters:
            continue
        if site.callee.startswith(".") or not _STEP_NAMES.match(site.name):
            continue
        target = _resolve(site.callee, definition, ctx)
        if target is None:
            continue
        attrs: dict[str, Any] = {"call_site": site.location, "keep": True, "symbol_kind": target.symbol.kind}
        short = target.name.rsplit("::", 1)[-1]
        if short == "invoke_parallel" and isinstance(step.loop_object, Lambda) and not _is_machinery(step.loop_object.owner):
            attrs["loop"] = "threads"  # a kernel's own function, run on the threads
            nodes.append(_step_node(target, step.loop_object, step.operations, condition, attrs, step.lambdas))
        elif short == "parallel_for":
            attrs["loop"] = "threads"
            nodes.append(Node(target.name, NodeKind.KERNEL, target.location, EdgeKind.DIRECT, condition, attrs))
        elif short in _ROLES:
            attrs["loop"] = _ROLES[short]
            loop = Node(target.name, NodeKind.KERNEL, target.location, EdgeKind.DIRECT, condition, attrs)
            loop.children = _inner_loops(step.operations, short == "vectorized_loop", ctx) + _lambda_calls(node, step.lambdas, short == "vectorized_loop", ctx, code_children)
            nodes.append(loop)
        else:
            attrs["loop"] = "iteration"
            nodes.append(_step_node(target, step.loop_object, step.operations, condition, attrs, step.lambdas))
    return nodes


def _joined_condition(condition: str | None, why: str | None) -> str | None:
    return f"{condition}; {why}" if condition and why else condition or why


# A lambda's parameters: a 1-d loop takes (char** data, const int64_t* strides, int64_t n).
_ONE_D = re.compile(r"\(\s*char\s*\*\s*\*\s*\w*\s*,[^,()]*,[^,()]*\)")


def _from_1d(loop_object, site, ctx: GraphContext) -> Node | None:
    """TensorIteratorBase::loop_2d_from_1d's 2-d loop, when the loop object is
    a 1-d lambda: `for_each(loop1d_t)` wraps it (TensorIterator.h), and the
    wrapper is the frame serial_for_each calls (Note [device loop machinery])."""
    if not isinstance(loop_object, Lambda) or not _is_one_d(loop_object, ctx):
        return None
    found = [d for d in ctx.index.definitions("at::TensorIteratorBase::loop_2d_from_1d") if d.location.path.startswith(MACHINERY_FILES)]
    if not found:
        return None
    d = found[0]
    attrs: dict[str, Any] = {"call_site": site.location, "loop": "loop object", "keep": True, "symbol_kind": d.symbol.kind}
    inner = next((s for s in ctx.index.calls_from(d) if s.callee == "loop"), None)
    if inner is not None:
        attrs["inner_call_site"] = inner.location
    node = Node(d.name, NodeKind.KERNEL, d.location, EdgeKind.DIRECT, None, attrs)
    copy = _pointer_copy(d, ctx)
    if copy is not None:
        node.children.append(copy)
    return node


def _pointer_copy(definition, ctx: GraphContext) -> Node | None:
    """The copy loop_2d_from_1d's 2-d loop makes on each call: `PtrVector
    data(base, base + ntensor)` copies the operands' data pointers into a
    c10::SmallVector, whose uninitialized_copy copies them with memcpy (a
    frame the binary shows under nearly every 1-d loop). Bookkeeping, not the
    work: a step in c10's code, never an end (Note [ranking a call's ends] in
    graph.ends)."""
    from kernelmap.graph.code import tree_lines
    from kernelmap.graph.grow import cpp_node, vendor_node

    lines = tree_lines(ctx, definition.location.path)
    last = min(len(lines), definition.location.end_line or definition.location.line)
    line = next((n for n in range(definition.location.line, last + 1) if re.search(r"\bPtrVector\s+\w+\s*\(", lines[n - 1])), None)
    copies = [(d, s) for d in ctx.index.definitions("c10::SmallVectorTemplateBase::uninitialized_copy")
              for s in ctx.index.calls_from(d) if s.kind is EdgeKind.VENDOR and s.callee == "memcpy"]
    if line is None or not copies:
        return None
    copy, memcpy = copies[0]
    site = Location(definition.location.path, line, origin=definition.location.origin)
    node = cpp_node(copy, ctx, EdgeKind.DIRECT, "inside c10::SmallVector's constructor: the operands' data pointers, copied", site)
    node.attrs["keep"] = True
    node.children = [vendor_node("memcpy", memcpy.library, memcpy.location, EdgeKind.VENDOR, f"inside {copy.name.rsplit('::', 2)[-2]}: {memcpy.condition}"
                                 if memcpy.condition else f"inside {copy.name.rsplit('::', 2)[-2]}")]
    return node.leaf()


def _is_one_d(lam: Lambda, ctx: GraphContext) -> bool:
    """Whether a lambda takes a 1-d loop's parameters, read from its head, or
    from the macro that writes it (`IMPLEMENT_ITERATOR_LAMBDA(op)`)."""
    if lam.text.startswith("["):
        return _ONE_D.search(lam.text) is not None
    macro = re.match(r"([A-Z_][A-Z0-9_]*)\s*\(", lam.text)
    if macro is None:
        return False
    from kernelmap.graph.code import tree_lines

    lines = tree_lines(ctx, lam.location.path)
    at = next((i for i, t in enumerate(lines) if re.match(rf"\s*#\s*define\s+{macro.group(1)}\b", t)), None)
    return at is not None and any(_ONE_D.search(t) for t in lines[at : at + 4])


def _object_node(loop_object, site, condition: str | None, operations: tuple, threads: bool = False, lambdas: tuple = ()) -> Node:
    """The loop object, called through the type-erased `loop2d_t` at `site`
    (or, by at::parallel_for and its threads, as the function they were given)."""
    why = ("called as the function at::parallel_for was given" if threads
           else "called through loop2d_t (c10::function_ref): the loop object the device loop passed")
    condition = f"{condition}; {why}" if condition else why
    attrs: dict[str, Any] = {"call_site": site.location, "loop": "loop object", "keep": True}
    if isinstance(loop_object, Lambda):
        return Node(loop_object.name, NodeKind.KERNEL, loop_object.location, EdgeKind.DIRECT, condition, attrs,
                    payload=LoopStep(loop_object, None, operations, lambdas), identity=("loop", "lambda", str(loop_object.location)))
    attrs["symbol_kind"] = loop_object.symbol.kind
    key = "".join(f"|{name}@{line}" for name, _, line in operations) + "".join(f"|lambda@{first}" for _, first, _, _ in lambdas)
    return Node(loop_object.name, NodeKind.KERNEL, loop_object.location, EdgeKind.DIRECT, condition, attrs,
                payload=LoopStep(loop_object, None, operations, lambdas), identity=("loop", loop_object.name, str(loop_object.location), key))


def _is_machinery(definition) -> bool:
    from kernelmap.graph.code import LOOP_HEADERS

    return definition.location.path.startswith((*MACHINERY_FILES, *LOOP_HEADERS, *_THREAD_FILES))


def _lambda_children(step: LoopStep, ctx: GraphContext, code_children: CodeChildren, node: Node | None = None) -> list[Node]:
    """The loops a device loop's own lambda calls (cpu_kernel's basic_loop);
    for a kernel's own lambda, the kernel's calls in it (Note [device loop machinery]):
    the work each element or row gets."""
    lam = step.definition
    if not _is_machinery(lam.owner) and node is not None:
        return code_children(node, ctx, lam.owner, lam.span or (lam.location.line, lam.end_line))
    nodes = []
    for site in ctx.index.calls_from(lam.owner):
        if not (lam.location.line <= site.location.line <= lam.end_line) or site.callee.startswith("."):
            continue
        short = site.name
        if short not in _ROLES:
            continue
        target = _resolve(site.callee, lam.owner, ctx)
        if target is not None:
            attrs = {"call_site": site.location, "keep": True, "loop": _ROLES[short], "symbol_kind": target.symbol.kind}
            loop = Node(target.name, NodeKind.KERNEL, target.location, EdgeKind.DIRECT, site.condition, attrs)
            loop.children = _inner_loops(step.operations, short == "vectorized_loop", ctx) + _lambda_calls(node, step.lambdas, short == "vectorized_loop", ctx, code_children)
            nodes.append(loop)
    return nodes


def _lambda_calls(node: Node | None, lambdas: tuple, vectorized: bool, ctx: GraphContext, code_children: CodeChildren) -> list[Node]:
    """What the kernel's lambdas of the kind a loop of Loops.h applies call:
    the Vectorized one's under vectorized_loop (sigmoid's `a.exp()`, whose
    Vectorized<float>::exp calls SLEEF), the scalar one's under basic_loop."""
    if node is None:
        return []
    nodes = []
    for owner, first, last, takes_vectors in lambdas:
        if takes_vectors == vectorized:
            nodes.extend(code_children(node, ctx, owner, (first, last)))
    return nodes


def _loop_parameters(definition, ctx: GraphContext) -> set[str]:
    """Names of a definition's parameters that hold a loop (`loop2d_t loop`)."""
    from kernelmap.graph.code import parameters

    names = set()
    for p in parameters(definition, ctx) or ():
        m = re.search(r"\bloop[12]d_t\b.*?\b(\w+)\s*$", p) or re.search(r"^const\s+F\s*&\s*(\w+)$", p.strip())  # at::parallel_for's `const F& f`
        if m:
            names.add(m.group(1))
    return names


def _resolve(callee: str, caller, ctx: GraphContext):
    """A machinery call's definition: looked up from the caller's class and
    namespaces outwards, in the machinery files, never the caller itself."""
    callee = callee.lstrip(":")
    found = [d for d in ctx.index.definitions(callee) if d.location.path.startswith((*MACHINERY_FILES, *_THREAD_FILES))]
    found = [d for d in found if d.location != caller.location] or found
    if not found:
        return None
    scope = caller.lookup.rsplit("::", 1)[0] if "::" in caller.lookup else ""
    while True:
        qualified = f"{scope}::{callee}" if scope else callee
        exact = [d for d in found if d.lookup == qualified or d.name == qualified]
        if exact:
            found = exact
            break
        if not scope:
            break
        scope = scope.rsplit("::", 1)[0] if "::" in scope else ""
    same_file = [d for d in found if d.location.path == caller.location.path]
    return (same_file or found)[0]


_GENERATED_LOOP = re.compile(r"\b((?:gpu_kernel|cpu_kernel|opmath_gpu_kernel)\w*)\s*\(")


def generated_loops(ufunc, ctx: GraphContext) -> list[Node]:
    """The device loops a generated ufunc kernel calls: for the selected dtype
    only those of its AT_DISPATCH_CASE, each at the line that calls it (Note
    [dtype branches]); all of them, at the kernel's line, when it has no case
    for the dtype. Each loop is its definition in the loop headers, followed
    below (Note [device loop machinery])."""
    from kernelmap.graph import dtypes
    from kernelmap.graph.code import LOOP_HEADERS, loop_definition
    from kernelmap.graph.rules import launch_kind

    start = ufunc.definition.location
    lines = ufunc.definition.text.splitlines()
    case = dtypes.dispatch_case(lines, ctx.dtype)
    span = range(case[0], case[1] + 1) if case else range(len(lines))
    found: dict[str, int] = {}
    for i in span:
        for m in _GENERATED_LOOP.finditer(lines[i]):
            found[m.group(1)] = i  # the last call of the case: the tensor-tensor one of a CUDA case
    condition = f"AT_DISPATCH_CASE(at::ScalarType::{dtypes.scalar_type(ctx.dtype)})" if case else None
    nodes = []
    for name, i in found.items():
        site = Location(start.path, start.line + i, origin=start.origin) if case else start
        attrs: dict[str, Any] = {"call_site": site}
        if case:
            attrs["dtype_case"] = f"{dtypes.canonical(ctx.dtype)}: {condition} at line {start.line + case[0]}"
        defined = [d for d in ctx.index.definitions(name) if d.location.path in LOOP_HEADERS] if ctx.index is not None else []
        if defined:
            d = defined[0]
            attrs["symbol_kind"] = d.symbol.kind
            nodes.append(Node(name, launch_kind(name), d.location, EdgeKind.LAUNCH, condition, attrs, payload=d, identity=("cpp", d.name, str(d.location))))
            continue
        location = loop_definition(name, ctx)
        if location is not None:  # the loop itself, at its line; the generated call is the call site
            nodes.append(Node(name, launch_kind(name), location, EdgeKind.LAUNCH, condition, attrs))
        else:
            nodes.append(Node(name, launch_kind(name), site, EdgeKind.LAUNCH, condition))
    return nodes
