"""The anatomy of one operator call on one device, step by step, each step
with the real code and where it is: Python argument parsing (the generated
binding), the autograd wrapper and its backward node, ADInplaceOrView and
autocast where they apply, the backend registration wrapper, then the native
kernel's checks, output allocation, backend selection, dtype switch, how it
iterates, the device loop or GPU launch, and the vendor call.

The generated steps come from `codegen`, the native ones from a source
tree's index through the call graph (`stack`); without a tree the native
steps are left out and a note says so.
"""

from __future__ import annotations

import re

from kernelmap import env
from kernelmap.errors import KernelmapError
from kernelmap.graph import DEVICE_KEYS, GraphContext, call_ends, stack, stub_kernel
from kernelmap.graph import file_lines as _file_lines
from kernelmap.graph.code import location_lines
from kernelmap.model import Alternative, CallNode, CallTree, Explanation, Location, NodeKind, Step, located

EXCERPT_LINES = 14


def _at(location: Location | None) -> str:
    """A location written into a step's text, with its version when it is not
    the installed torch's (Note [versions on locations] in model/locations.py)."""
    installed = env.torch_install().version
    return located(location, location is not None and location.origin is not None and location.origin.version != installed)


# What a line of kernel code does, by the idioms ATen writes it with.
_CHECKS = re.compile(r"\b(TORCH_CHECK\w*|TORCH_INTERNAL_ASSERT\w*|check_\w+|checkAllSame\w*|checkDim\w*)\s*\(")
_ALLOCATION = re.compile(r"\b(set_output_raw_strided|set_output_strided|set_output|build_borrowing_\w+|build_\w+_op|resize_output|resize_|at::empty\w*|empty_like|new_empty\w*)\s*\(")
_ITERATION = re.compile(r"\b(TensorIterator\w*|TensorIteratorConfig|parallel_for|accessor<|packed_accessor\w*|for_each|cpu_serial_kernel|iter\.for_each)\b")
_BACKEND_SELECTION = re.compile(r"\b(_?select_conv_backend|use_cudnn|use_mkldnn|use_miopen|use_nnpack|use_xnnpack|cudnn_is_acceptable|ConvBackend::\w+)\b")


def _excerpt(location: Location | None, lines: int = EXCERPT_LINES, root=None) -> str:
    if location is None:
        return ""
    path = location.disk_path if root is None else root / location.path
    if path is None:
        return ""
    text = _file_lines(path)
    start = location.line - 1
    end = min(len(text), location.end_line or start + lines, start + lines)
    return "\n".join(text[start:end])


def _matching_lines(location: Location | None, pattern: re.Pattern, limit: int = 6) -> list[tuple[int, str]]:
    """(line, text) of a definition's lines that match `pattern`."""
    if location is None or location.disk_path is None:
        return []
    text = _file_lines(location.disk_path)
    end = location.end_line or location.line
    found = []
    first = location.line + 1 if pattern is _ITERATION else location.line  # `TensorIteratorBase& iter` in the signature says nothing
    for number in range(first, min(end, len(text)) + 1):
        if pattern.search(text[number - 1]):
            found.append((number, text[number - 1].strip()))
            if len(found) >= limit:
                break
    return found


def _lines_step(title: str, summary: str, node: CallNode, pattern: re.Pattern) -> Step | None:
    lines = _matching_lines(node.location, pattern)
    if not lines:
        return None
    location = Location(node.location.path, lines[0][0], lines[-1][0], node.location.origin)
    return Step(title, f"{summary} in {node.name}", location, "\n".join(f"{n}: {t}" for n, t in lines))


def explain(op_name: str, context: GraphContext) -> Explanation:
    """The steps of one call of `op_name` on `context.device`."""
    op = context.catalog.resolve(op_name)[0]
    qualified = str(op.name)
    key = DEVICE_KEYS[context.device]
    steps: list[Step] = []
    notes = list(context.notes)

    code = None
    if context.generated is not None:
        from kernelmap.codegen import locate_in

        try:
            code = locate_in(context.generated, qualified, context.catalog)
        except KernelmapError as e:
            notes.append(f"generated code: {e}")
    if code is not None:
        for binding in code.bindings[:1]:
            case = binding.case or binding.definition
            steps.append(
                Step(
                    "Python argument parsing",
                    f"{binding.function} parses the arguments against {len(binding.signatures)} signature(s) "
                    f"with PythonArgParser and calls {', '.join(binding.calls) or 'the operator'}",
                    case.location,
                    "\n".join(["// signatures:"] + [f"//   {s}" for s in binding.signatures] + [case.text]),
                )
            )
        if not code.bindings:
            steps.append(Step("Python argument parsing", f"{qualified} has no Python binding (an internal operator)"))
        for ops_fn in code.ops[:1]:
            steps.append(Step("dispatcher entry", f"{ops_fn.symbol} looks up the kernel for the tensors' dispatch keys", ops_fn.definition.location, ops_fn.definition.text))
        by_key = {r.key: r for r in code.registrations}
        autograd = by_key.get("Autograd") or by_key.get(f"Autograd{key}")
        if autograd is not None and autograd.definition is not None:
            node = f" and records {autograd.backward_node} for the backward pass" if autograd.backward_node else ""
            steps.append(Step("autograd", f"{autograd.symbol} (VariableType) redispatches below autograd{node}", autograd.definition.location, _head(autograd.definition.text)))
        elif op.kind.value == "composite implicit":
            steps.append(Step("autograd", f"{qualified} is composite implicit: autograd sees the operators it decomposes into"))
        inplace_view = by_key.get("ADInplaceOrView")
        if inplace_view is not None and inplace_view.definition is not None:
            steps.append(Step("ADInplaceOrView", f"{inplace_view.symbol} bumps version counters / sets up the view, then redispatches", inplace_view.definition.location, _head(inplace_view.definition.text)))
        kernel = context.catalog.effective_kernel(op, key)
        wrapper = by_key.get(kernel.key if kernel and kernel.key.startswith("Composite") else key) if kernel else None
        if wrapper is not None and wrapper.definition is not None:
            via = f" (registered for {wrapper.key})" if wrapper.key != key else ""
            steps.append(Step("backend registration wrapper", f"{wrapper.symbol}{via} calls {', '.join(wrapper.calls) or 'the native kernel'}", wrapper.definition.location, _head(wrapper.definition.text)))
    if context.index is not None:
        autocast = [r for r in context.index.library_impls(op.name.unqualified) if r.key and r.key.startswith("Autocast")]
        for r in autocast[:2]:
            steps.append(Step("autocast", f"under autocast, {r.key} casts the inputs first ({r.kernel or 'a cast policy'})", r.location, _excerpt(r.location, 3)))

    if context.index is None:
        notes.append("native steps (kernel, checks, dtype switch, loops, vendor calls) need a source tree: kernelmap source add PATH, then kernelmap index")
        return Explanation(qualified, context.device, tuple(steps), tuple(notes), context.dtype, env.torch_install().version)

    tree = stack(qualified, context)
    steps.extend(_native_steps(tree, context))
    context.check_index_intact()
    return Explanation(qualified, context.device, tuple(steps), tuple(notes), context.dtype, env.torch_install().version)


def _head(text: str, lines: int = EXCERPT_LINES) -> str:
    return "\n".join(text.splitlines()[:lines])


def _main_path(tree: CallTree, context: GraphContext) -> list[CallNode]:
    """The path from the root to the call's best end (Note [ranking a call's
    ends]) that the selected dtype can take: not one through an AT_DISPATCH
    macro with no case for it (copy_kernel's neg_conj_kernel, complex types
    only, for float32); when nothing ends the call (a CPU reduction hands its
    work to Reduce.h's loops, not to loop machinery modelled as an end), the
    path to the kernel its stub runs."""
    ends = call_ends(tree)
    if ends:
        for end in ends[:_PATHS_TRIED]:
            path = list(end.path)
            kernels, loop = _kernels_and_loop(path)
            step = _dtype_step(kernels, loop, context)
            if step is None or _FAILS not in step.summary:
                return path
        return list(ends[0].path)
    kernel = stub_kernel(tree, ends)
    return _path_to(tree.root, kernel) if kernel is not None else [tree.root]


def _path_to(root: CallNode, target: CallNode) -> list[CallNode]:
    stack: list[tuple[CallNode, tuple[CallNode, ...]]] = [(root, (root,))]
    while stack:
        node, path = stack.pop()
        if node is target:
            return list(path)
        stack.extend((c, path + (c,)) for c in reversed(node.children))
    return [root]


_PATHS_TRIED = 20  # ends tried, best first, for one the selected dtype takes
_FAILS = "call fails here"


def _kernels_and_loop(path: list[CallNode]) -> tuple[list[CallNode], CallNode]:
    """The located kernels on `path` before its loop machinery, and the kernel's
    own call of that machinery: the first device loop (gpu_kernel, not the
    kernel template it launches), else the path's end."""
    first_loop = next((i for i, n in enumerate(path) if n.kind is NodeKind.DEVICE_LOOP), len(path))
    kernels = [n for n in path[:first_loop] if n.kind in ("kernel", "generated") and n.location is not None]
    return kernels, next((n for n in path if n.kind is NodeKind.DEVICE_LOOP), path[-1])


def _native_steps(tree: CallTree, context: GraphContext) -> list[Step]:
    steps: list[Step] = []
    path = _main_path(tree, context)
    kernels, end = _kernels_and_loop(path)
    ops = [n.name for n in path if n.kind == "op"]
    if len(ops) > 1:
        steps.append(Step("decomposition", " -> ".join(ops) + ": each arrow is a call through the dispatcher"))
    near = [c for n in path for c in n.children]  # the path and what hangs directly off it
    meta = [n for n in near if n.name.endswith("::meta") and n.location is not None][:1]
    for m in meta:
        steps.append(Step("output allocation (structured meta)", f"{m.name} checks shapes and dtypes and sets the output", m.location, _excerpt(m.location)))
    if kernels:
        entry = kernels[0]
        steps.append(Step("native kernel", entry.name, entry.location, _excerpt(entry.location, root=_root(entry.location, context))))
    for node in kernels:
        for title, summary, pattern in (
            ("checks", "argument checks", _CHECKS),
            ("backend selection", "chooses the backend", _BACKEND_SELECTION),
            ("output allocation", "allocates or resizes the output", _ALLOCATION),
            ("iteration", "how it iterates", _ITERATION),
        ):
            if any(s.title == title for s in steps):
                continue
            if title == "output allocation" and meta:
                continue
            step = _lines_step(title, summary, node, pattern)
            if step is not None:
                steps.append(step)
    stub_nodes = [n for n in path if n.kind == "stub"]
    for stub in stub_nodes[:1]:
        steps.append(Step("stub", f"{stub.name} dispatches on the device type (and CPU capability) to a registered kernel", stub.location, _excerpt(stub.location, 1, root=_root(stub.location, context))))
    capability = _capability_step(stub_nodes[:1], context)
    if capability is not None:
        steps.append(capability)
    dtype = _dtype_step(kernels, end, context)
    if dtype is not None:
        steps.append(dtype)
    conditions = [n.condition for n in path if n.condition and ("case " in n.condition or "#if" in n.condition or _tests_dtype(n.condition, context))]
    if conditions:
        steps.append(Step("branch taken", "; ".join(dict.fromkeys(conditions))))
    loops = [n for n in near if n.kind is NodeKind.INNER_LOOP and n.location is not None and not n.attrs.get("branch")]
    for node in path:  # a reduction's machinery on the way (Reduce.cuh's gpu_reduce_kernel, launch_reduce_kernel)
        if node is not end and node.location is not None and node.location.path in _REDUCTION:
            site = node.attrs.get("call_site")
            where = site if isinstance(site, Location) else node.location
            steps.append(Step("reduction machinery", f"{node.name} (defined at {_at(node.location)})", where, _excerpt(where, 1, root=_root(where, context))))
    if end.kind in (NodeKind.LAUNCH, NodeKind.DEVICE_LOOP):
        site = end.attrs.get("call_site")
        if isinstance(site, Location) and end.location is not None and site != end.location:
            # the operator's own call of the loop; the loop's definition (Loops.h) is named
            summary = f"{end.name} runs the per-element loop (defined at {_at(end.location)})"
            steps.append(Step("device loop / launch", summary, site, _excerpt(site, 3, root=_root(site, context))))
        else:
            steps.append(Step("device loop / launch", f"{end.name} runs the per-element loop", end.location, _excerpt(end.location, 3, root=_root(end.location, context))))
        steps.extend(_machinery_steps(end, context, path))
        avx512 = None if capability is None else "AVX512 slot:" in capability.summary
        steps.extend(_operation_steps(end, loops, context, avx512))
    elif end.kind in (NodeKind.KERNEL, NodeKind.GENERATED) and len(path) > 1:
        # no end below (a CPU reduction): what the stub's kernel calls to do the work, at each call line
        for callee in [c for c in end.children if c.kind in (NodeKind.KERNEL, NodeKind.GENERATED) and c.location is not None
                       and not c.attrs.get("collapsed") and not c.attrs.get("branch")][:3]:
            site = callee.attrs.get("call_site")
            where = site if isinstance(site, Location) else callee.location
            when = f" [{callee.condition}]" if callee.condition else ""
            steps.append(Step("kernel work", f"{end.name} calls {callee.name} (defined at {_at(callee.location)}){when}", where,
                              _excerpt(where, 2, root=_root(where, context))))
    elif end.kind is NodeKind.INNER_LOOP:
        steps.append(Step("inner loop", f"{end.name}: the scalar/vectorised operation itself", end.location, _excerpt(end.location, 6)))
    elif end.kind == "vendor":
        if loops:
            steps.append(Step("inner loop", f"{loops[0].name}: the scalar/vectorised operation the loop applies", loops[0].location, _excerpt(loops[0].location, 6)))
        closed = "closed source" if end.attrs.get("closed") else "open source"
        steps.append(Step("vendor call", f"{end.name} ({end.attrs.get('library')}, {closed}): the work leaves PyTorch here", end.location, _excerpt(end.location, 3)))
    return steps


# Files whose definitions are the reductions' machinery: shown on the way to the kernel they launch.
_REDUCTION = ("aten/src/ATen/native/cuda/Reduce.cuh", "aten/src/ATen/native/cpu/Reduce.h")
# Files whose definitions are the device loop machinery (Note [device loop machinery]).
_MACHINERY = ("aten/src/ATen/native/cpu/Loops.h", "aten/src/ATen/native/cuda/Loops.cuh", "aten/src/ATen/native/cuda/CUDALoops.cuh",
              "aten/src/ATen/TensorIterator.cpp", "aten/src/ATen/TensorIterator.h", "aten/src/ATen/TensorIteratorInternal.h", "aten/src/ATen/Parallel-inl.h")
_ROLE_TITLES = {"iteration": "TensorIterator iteration", "threads": "threads", "loop object": "loop object", "vectorized inner loop": "vectorized inner loop",
                "scalar inner loop": "scalar inner loop"}


def _tests_dtype(condition: str, context: GraphContext) -> bool:
    from kernelmap.graph import dtypes

    return dtypes.checks_dtype(condition)


def _machinery_steps(end: CallNode, context: GraphContext, path: list[CallNode] = ()) -> list[Step]:
    """The device loop's machinery below it, one way down, each step at the
    line that calls it (Note [device loop machinery]): TensorIterator's
    for_each, the loop object, vectorized_loop / basic_loop on the CPU; the
    launchers and the kernel templates they launch (CUDALoops.cuh) on CUDA.
    The way followed is the main path where it goes on below the loop, else
    the first branch as the code writes it (the `if` before its `else`);
    what the code does instead at each step is that step's alternatives,
    with the condition that picks each (Note [alternatives of a step])."""
    steps: list[Step] = []
    on_path = {id(n) for n in path}
    seen: set[str] = {end.name}  # a recursive call of the loop itself (gpu_kernel splitting for 32-bit indexing) is no new step
    node = end
    while True:
        ways = _next_machinery(node)
        main = next((c for c in ways if id(c) in on_path), None) or next((c for c in ways if c.name not in seen), None)
        if main is None:
            break
        seen.add(main.name)
        role = main.attrs.get("loop")
        title = _ROLE_TITLES.get(role) or ("kernel launch" if main.kind is NodeKind.LAUNCH else "device loop")
        site = main.attrs.get("call_site")
        where = site if isinstance(site, Location) else main.location
        when = f" [{main.condition}]" if main.condition else ""
        summary = f"{main.name} (defined at {_at(main.location)}){when}"
        others = _alternatives(node, main, [c for c in ways if c is not main], context)
        steps.append(Step(title, summary, where, _excerpt(where, 1, root=_root(where, context)), alternatives=others))
        node = main
    return steps


def _machinery(node: CallNode) -> bool:
    return node.location is not None and node.location.path.startswith(_MACHINERY)


def _next_machinery(node: CallNode) -> list[CallNode]:
    """The machinery reached first below `node`, through helpers that are none,
    in the tree's order; never a branch for another device or dtype."""
    found: list[CallNode] = []
    stack = list(reversed(node.children))
    while stack:
        child = stack.pop()
        if child.attrs.get("branch") or child.attrs.get("collapsed"):
            continue
        if _machinery(child):
            found.append(child)
        else:
            stack.extend(reversed(child.children))
    return found


def branch_condition(main: CallNode, other: CallNode, context: GraphContext) -> str | None:
    """The condition under which a caller calls `other` instead of `main`
    (two children of one node): `other`'s own, and, when `main` is called in
    an `if (X) return ...` above `other`'s call, "else of if (X)" before it,
    though the code writes no `else`; `#if` of its definition when the two
    are one function's definitions for different builds."""
    condition = other.condition
    if not condition and other.attrs.get("preprocessor") and other.attrs.get("preprocessor") != main.attrs.get("preprocessor"):
        condition = f"#if {other.attrs['preprocessor']}"
    main_site, site = main.attrs.get("call_site"), other.attrs.get("call_site")
    if not (isinstance(main_site, Location) and isinstance(site, Location) and (main.condition or "").startswith("if (")):
        return condition
    if site.path != main_site.path or site.line <= main_site.line or main.condition in (condition or ""):
        return condition
    lines = location_lines(main_site, context)
    if 0 < main_site.line <= len(lines) and re.search(r"\breturn\b", lines[main_site.line - 1]):
        return f"else of {main.condition}" + (f"; {condition}" if condition else "")
    return condition


def _alternatives(parent: CallNode, main: CallNode, others: list[CallNode], context: GraphContext) -> tuple[Alternative, ...]:
    """What `parent` runs instead of `main`, each with the condition that picks
    it. A call after an `if (X) return ...` of `main` runs when X is false,
    though the code writes no `else` (gpu_kernel_impl_nocast's
    launch_legacy_kernel, after `if (contiguous) return launch_vectorized_kernel(...)`)."""
    out: dict[tuple[str, str | None], Alternative] = {}
    for other in others:
        site = other.attrs.get("call_site")
        where = site if isinstance(site, Location) else other.location
        condition = branch_condition(main, other, context)
        note = ""
        if other.name == parent.name:
            note = f"{parent.name} again, on each part of the iteration"
        elif re.search(r"else of if \(!needs_dynamic_casting", condition or ""):
            # every tensor of the call is of the selected dtype (Note [dtype branches]): nothing is cast
            note = f"never for {context.dtype} alone (every tensor of one dtype: nothing to cast)"
        out.setdefault((other.name, condition), Alternative(other.name, condition, where, note))
    return tuple(out.values())


_VECTOR_OPERATORS = {"*": "operator*", "+": "operator+", "-": "operator-", "/": "operator/"}


def _capability_step(stubs: list[CallNode], context: GraphContext) -> Step | None:
    """Which CPU capability's kernel a stub runs: choose_cpu_impl, at the line
    that falls back to AVX2 when the kernel left the AVX512 slot empty."""
    for stub in stubs:
        choose = next((c for n in stub.children for c in n.children if c.name.endswith("::choose_cpu_impl")), None)
        if choose is None or choose.location is None or not choose.condition or "AVX512" not in choose.condition:
            continue
        location = choose.location
        lines = _file_lines(location.disk_path) if location.disk_path is not None else ()
        end = location.end_line or location.line + 60
        fallback = next((n for n in range(location.line, min(end, len(lines)) + 1) if "!AVX512" in lines[n - 1]), None)
        if fallback is not None and "nullptr" in choose.condition:
            location = Location(location.path, fallback, fallback + 3, location.origin)
        return Step("CPU capability", f"{choose.name}: {choose.condition}", location, _excerpt(location, 4))
    return None


def _operation_steps(end: CallNode, loops: list[CallNode], context: GraphContext, avx512: bool | None = None) -> list[Step]:
    """The per-element operation the device loop is given at its call (the
    scalar and the Vectorized lambdas), with scalar_t for the dtype, and the
    specialisation of Vectorized<scalar_t> that the vectorized lambda runs
    (Note [dtype branches])."""
    from kernelmap.graph import dtypes

    site = end.attrs.get("call_site")
    if not isinstance(site, Location) or end.kind is not NodeKind.DEVICE_LOOP:
        return []
    lines = location_lines(site, context)
    call = _call_text(lines, site.line)
    if not call:
        return []
    name = dtypes.canonical(context.dtype)
    cpp = dtypes.SCALAR_TYPES[name][1] if name else None
    typed = f" (scalar_t = {cpp} for {name})" if cpp else ""
    steps = [Step("per-element operation", f"the lambdas {end.name} applies{typed}", Location(site.path, site.line, site.line + call.count("\n"), site.origin), call)]
    for loop in loops[:1]:
        steps.append(Step("inner loop", f"{loop.name}: the scalar/vectorised operation the lambdas call", loop.location, _excerpt(loop.location, 6)))
    vectorized = next((part for part in re.split(r"\[[=&]\]", call) if "Vectorized<" in part), None)
    if vectorized is None or cpp is None or context.index is None:
        return steps
    via = ""
    if "Vectorized<opmath_t>" in vectorized and name in dtypes.OPMATH:
        # binary_op_scalar & co. convert Vectorized<scalar_t> to Vectorized<opmath_t> and back
        cpp, via = dtypes.OPMATH[name], f"the lambda computes in Vectorized<opmath_t> (opmath_t = {dtypes.OPMATH[name]} for {name}); "
    special = _vectorized_specialisation(vectorized, cpp, context, via, avx512)
    if special is not None:
        steps.append(special)
    return steps


def _call_text(lines, line: int) -> str:
    """The text of the call that starts at `line`, up to its closing parenthesis."""
    out, depth, started = [], 0, False
    for text in lines[line - 1 : line + 30]:
        out.append(text)
        for ch in text:
            if ch == "(":
                depth, started = depth + 1, True
            elif ch == ")":
                depth -= 1
        if started and depth <= 0:
            break
    return "\n".join(out)


def _vectorized_specialisation(lambda_text: str, cpp: str, context: GraphContext, via: str = "", avx512: bool | None = None) -> Step | None:
    """Where `Vectorized<cpp>` spells the operation the vectorized lambda runs:
    `ufunc::add` -> its Vectorized overload's `vec::fmadd` -> `Vectorized<float>
    inline fmadd(` in vec256/vec256_float.h (the AVX2 build; AVX512's in vec512)."""
    root = context.index.tree.root
    operation = None
    m = re.search(r"\bufunc::(\w+)\s*\(", lambda_text)
    if m is not None:
        header = f"aten/src/ATen/native/ufunc/{m.group(1)}.h"
        text = _file_lines(root / header)
        start = next((i for i, t in enumerate(text) if re.search(rf"Vectorized<T>\s+{m.group(1)}\s*\(", t)), None)
        if start is not None:
            body = "\n".join(text[start : start + 6])
            inner = re.search(r"\bvec::(\w+)\s*\(", body)
            operation = inner.group(1) if inner else None
            at = _at(Location(header, start + 1, origin=context.index.tree.origin))
            via += f"ufunc::{m.group(1)} (Vectorized overload, {at}) calls vec::{operation}; " if operation else ""
    if operation is None:
        body = lambda_text[lambda_text.find("{") :]
        inner = re.search(r"\bvec::(\w+)\s*\(", body)
        op = re.search(r"\w\s*([*+/-])\s*\w", body)
        operation = inner.group(1) if inner else (_VECTOR_OPERATORS[op.group(1)] if op else None)
    if operation is None:
        return None
    pattern = re.compile(rf"Vectorized<{re.escape(cpp)}>\s+inline\s+{re.escape(operation)}\s*\(")
    found = {}
    for width in ("vec256", "vec512"):
        for path in sorted((root / "aten/src/ATen/cpu/vec" / width).glob("*.h")):
            for number, text in enumerate(_file_lines(path), 1):
                if pattern.search(text):
                    found.setdefault(width, Location(path.relative_to(root).as_posix(), number, origin=context.index.tree.origin))
                    break
            if width in found:
                break
    if not found:
        return None
    location = found.get("vec256") or found["vec512"]
    if avx512 is False:
        others = ", which an AVX512 CPU runs too (its AVX512 slot is empty)"
    elif "vec512" in found:
        others = f"; an AVX512 CPU runs the AVX512 build's: {found['vec512']}" if avx512 else f"; the AVX512 build's: {found['vec512']}"
    else:
        others = ""
    summary = f"{via}Vectorized<{cpp}>'s {operation} in the AVX2 build (CPU_CAPABILITY=AVX2){others}"
    return Step("template specialisation", summary, location, _excerpt(location, 6))


def _root(location: Location | None, context: GraphContext):
    """Generated files live in the codegen cache, not in the tree."""
    if location is not None and location.path.startswith("build/") and context.generated is not None:
        return context.generated.root
    return None


def _walk(root: CallNode):
    stack_ = [(root, 0)]
    while stack_:
        node, depth = stack_.pop()
        yield node, depth
        stack_.extend((c, depth + 1) for c in reversed(node.children))


# a dtype dispatch macro and its name: the first string literal among its arguments
# (`AT_DISPATCH_ALL_TYPES_AND2(kBFloat16, kHalf, iter.common_dtype(), "clamp_min_scalar_cpu", ...)`)
_DISPATCH = re.compile(r"\b(_?AT_DISPATCH_\w+)\s*\((?:[^\"();]|\([^();]*\))*?\"(\w+)\"")


def _dtype_step(kernels: list[CallNode], end: CallNode, context: GraphContext) -> Step | None:
    """The AT_DISPATCH case that runs for the selected dtype: the generated
    kernel's AT_DISPATCH_CASE the device loop is called from, or the dispatch
    macro of the kernel that encloses the device loop's call (the last one
    above the call: mul_kernel's `_AT_DISPATCH_MUL_TYPES` for float32, not
    its reduced-float or Bool branches) (Note [dtype branches])."""
    name, scalar, cpp = _selected_dtype(context)
    site = end.attrs.get("call_site")
    case = end.attrs.get("dtype_case")
    if isinstance(site, Location) and case:
        lines = location_lines(site, context)
        first = next((n for n in range(site.line, 0, -1) if "AT_DISPATCH_CASE(" in lines[n - 1]), site.line)
        location = Location(site.path, first, site.line, site.origin)
        summary = f"AT_DISPATCH_SWITCH in {_caller_name(kernels, site)}: the {scalar} case runs for {name} (scalar_t = {cpp})"
        return Step("dtype switch", summary, location, "\n".join(lines[first - 1 : site.line]))
    # the macro whose lambda holds the call on the way to the loop: for each kernel on the path,
    # from the loop upwards, its lines above its call of the next step (mul_kernel_cuda's
    # AT_DISPATCH around opmath_symmetric_gpu_kernel_with_scalars<scalar_t>, which calls gpu_kernel)
    chain = [*kernels, end]
    for caller, callee in reversed(list(zip(chain, chain[1:]))):
        call = callee.attrs.get("call_site")
        if not isinstance(call, Location) or caller.location is None or call.path != caller.location.path or not call.path.startswith("aten/"):
            continue
        lines = location_lines(call, context)
        for number in range(min(call.line, len(lines)), caller.location.line - 1, -1):
            text = " ".join(lines[number - 1 : number + 2])  # a macro's arguments may go on over the next lines
            m = _DISPATCH.search(text) if "AT_DISPATCH" in lines[number - 1] else None
            if m is None:
                continue
            covered = _covers(m.group(1), text[: m.end()], scalar) if scalar else None
            if covered is True:
                runs = f": the {scalar} case runs for {name} (scalar_t = {cpp})"
            elif covered is False:
                runs = f": it has no {scalar} case (a {name} {_FAILS})"
            else:
                runs = f": scalar_t = {cpp} for {name}" if scalar else ""
            return Step("dtype switch", f"{m.group(1)} (\"{m.group(2)}\") in {caller.name}{runs}",
                        Location(call.path, number, origin=call.origin), "\n".join(lines[number - 1 : number + 1]))
    return _first_dispatch_step(kernels, context)


def _covers(macro: str, line: str, scalar: str) -> bool | None:
    """Whether an AT_DISPATCH_* macro has a case for `scalar`, from its name and
    the extra types it lists (`AT_DISPATCH_FLOATING_TYPES_AND2(kHalf, kBFloat16, ...)`);
    None for macros it cannot read (AT_DISPATCH_V2, a kernel's own wrappers)."""
    if macro.startswith("_") or "V2" in macro or not macro.startswith("AT_DISPATCH_"):
        return None
    if re.search(rf"\b(?:k|ScalarType::){scalar}\b", line):
        return True
    groups = macro.removeprefix("AT_DISPATCH_")
    floating = {"Float", "Double"}
    integral = {"Byte", "Char", "Short", "Int", "Long"}
    if groups.startswith("REDUCED_FLOATING_TYPES"):
        return scalar in {"Half", "BFloat16"}
    included = set()
    if groups.startswith("ALL_TYPES"):
        included |= floating | integral
    if groups.startswith(("FLOATING_TYPES", "FLOATING_AND_COMPLEX_TYPES")):
        included |= floating
    if groups.startswith("INTEGRAL_TYPES"):
        included |= integral
    if "COMPLEX" in groups:
        included |= {"ComplexFloat", "ComplexDouble"}
    if not included:
        return None
    return scalar in included


def _caller_name(kernels: list[CallNode], site: Location) -> str:
    return next((k.name for k in reversed(kernels) if k.location.path == site.path), site.path)


def _selected_dtype(context: GraphContext) -> tuple[str | None, str | None, str | None]:
    """(dtype name, its ScalarType, its C++ type): `float32`, `Float`, `float`; Nones for a dtype the tables lack."""
    from kernelmap.graph import dtypes

    name = dtypes.canonical(context.dtype)
    scalar, cpp = dtypes.SCALAR_TYPES[name] if name else (None, None)
    return name, scalar, cpp


def _first_dispatch_step(kernels: list[CallNode], context: GraphContext) -> Step | None:
    from kernelmap.source import Definition

    name, scalar, cpp = _selected_dtype(context)

    for node in kernels:
        if node.kind == "generated":
            text = _excerpt(node.location, 400, root=_root(node.location, context))
            cases = re.findall(r"AT_DISPATCH_CASE\(at::ScalarType::(\w+)", text)
            if cases:
                return Step("dtype switch", f"AT_DISPATCH_SWITCH in {node.name} over {', '.join(cases)}", node.location, _head(text, 6), "cpp")
            continue
        for definition in context.index.definitions(node.name):
            if definition.location.path != node.location.path or not isinstance(definition, Definition):
                continue
            sites = context.index.dtype_dispatches(definition)
            if not sites:
                continue
            # the macro with a case for the selected dtype (sum_kernel_impl's floating one for
            # float32, not the integral one it tests first), else the first
            covers = [_covers(site.macro, " ".join(location_lines(site.location, context)[site.location.line - 1 : site.location.line + 2]), scalar)
                      if scalar else None for site in sites]
            site, covered = next(((s, c) for s, c in zip(sites, covers) if c is True), (sites[0], covers[0]))
            groups = f" plus {site.dtypes}" if site.dtypes else ""
            runs = f": the {scalar} case runs for {name} (scalar_t = {cpp})" if covered is True else ""
            return Step("dtype switch", f"{site.macro} (\"{site.name}\"){groups} in {node.name}{runs}", site.location, _excerpt(site.location, 2))
    return None
