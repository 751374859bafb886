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

from kernelmap.errors import KernelmapError
from kernelmap.graph import DEVICE_KEYS, GraphContext, call_ends, stack
from kernelmap.graph import file_lines as _file_lines
from kernelmap.model import CallNode, CallTree, Explanation, Location, NodeKind, Step

EXCERPT_LINES = 14

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
    for number in range(location.line, min(end, len(text)) + 1):
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
        return Explanation(qualified, context.device, tuple(steps), tuple(notes), context.dtype)

    tree = stack(qualified, context)
    steps.extend(_native_steps(tree, context))
    return Explanation(qualified, context.device, tuple(steps), tuple(notes), context.dtype)


def _head(text: str, lines: int = EXCERPT_LINES) -> str:
    return "\n".join(text.splitlines()[:lines])


def _main_path(tree: CallTree) -> list[CallNode]:
    """The path from the root to the call's best end (Note [ranking a call's ends])."""
    ends = call_ends(tree)
    return list(ends[0].path) if ends else [tree.root]


def _native_steps(tree: CallTree, context: GraphContext) -> list[Step]:
    steps: list[Step] = []
    path = _main_path(tree)
    kernels = [n for n in path if n.kind in ("kernel", "generated") and n.location is not None]
    ops = [n.name for n in path if n.kind == "op"]
    if len(ops) > 1:
        steps.append(Step("decomposition", " -> ".join(ops) + ": each arrow is a call through the dispatcher"))
    near = [c for n in path for c in n.children]  # the path and what hangs directly off it
    meta = [n for n in near if n.name.endswith("::meta") and n.location is not None][:1]
    for m in meta:
        steps.append(Step("output allocation (structured meta)", f"{m.name} checks shapes and dtypes and sets the output", m.location, _excerpt(m.location)))
    if kernels:
        entry = kernels[0]
        steps.append(Step("native kernel", entry.name, entry.location, _excerpt(entry.location, root=_root_for(entry, context))))
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
        steps.append(Step("stub", f"{stub.name} dispatches on the device type (and CPU capability) to a registered kernel", stub.location, _excerpt(stub.location, 1, root=_root_for(stub, context))))
    dtype = _dtype_step(kernels, context)
    if dtype is not None:
        steps.append(dtype)
    conditions = [n.condition for n in path if n.condition and ("case " in n.condition or "#if" in n.condition)]
    if conditions:
        steps.append(Step("branch taken", "; ".join(dict.fromkeys(conditions))))
    end = path[-1]
    loops = [n for n in near if n.kind is NodeKind.INNER_LOOP and n.location is not None]
    if end.kind is not NodeKind.INNER_LOOP and loops:
        steps.append(Step("inner loop", f"{loops[0].name}: the scalar/vectorised operation the loop applies", loops[0].location, _excerpt(loops[0].location, 6)))
    if end.kind in (NodeKind.LAUNCH, NodeKind.DEVICE_LOOP):
        site = end.attrs.get("call_site")
        if isinstance(site, Location) and end.location is not None and site != end.location:
            # the operator's own call of the loop; the loop's definition (Loops.h) is named
            root = context.generated.root if site.path.startswith("build/") and context.generated is not None else None
            summary = f"{end.name} runs the per-element loop (defined at {end.location})"
            steps.append(Step("device loop / launch", summary, site, _excerpt(site, 3, root=root)))
        else:
            steps.append(Step("device loop / launch", f"{end.name} runs the per-element loop", end.location, _excerpt(end.location, 3, root=_root_for(end, context))))
    elif end.kind is NodeKind.INNER_LOOP:
        steps.append(Step("inner loop", f"{end.name}: the scalar/vectorised operation itself", end.location, _excerpt(end.location, 6)))
    elif end.kind == "vendor":
        closed = "closed source" if end.attrs.get("closed") else "open source"
        steps.append(Step("vendor call", f"{end.name} ({end.attrs.get('library')}, {closed}): the work leaves PyTorch here", end.location, _excerpt(end.location, 3)))
    return steps


def _walk(root: CallNode):
    stack_ = [(root, 0)]
    while stack_:
        node, depth = stack_.pop()
        yield node, depth
        stack_.extend((c, depth + 1) for c in reversed(node.children))


def _root_for(node: CallNode, context: GraphContext):
    """Generated files live in the codegen cache, not in the tree."""
    if node.location is not None and node.location.path.startswith("build/") and context.generated is not None:
        return context.generated.root
    return None


def _dtype_step(kernels: list[CallNode], context: GraphContext) -> Step | None:
    from kernelmap.source import Definition

    for node in kernels:
        if node.kind == "generated":
            text = _excerpt(node.location, 400, root=_root_for(node, context))
            cases = re.findall(r"AT_DISPATCH_CASE\(at::ScalarType::(\w+)", text)
            if cases:
                return Step("dtype switch", f"AT_DISPATCH_SWITCH in {node.name} over {', '.join(cases)}", node.location, _head(text, 6), "cpp")
            continue
        for definition in context.index.definitions(node.name):
            if definition.location.path != node.location.path or not isinstance(definition, Definition):
                continue
            sites = context.index.dtype_dispatches(definition)
            if sites:
                site = sites[0]
                groups = f" plus {site.dtypes}" if site.dtypes else ""
                return Step("dtype switch", f"{site.macro} (\"{site.name}\"){groups} in {node.name}", site.location, _excerpt(site.location, 2))
    return None
