"""The public Python API. The CLI is a thin layer over these functions; each
returns plain model data that any renderer can show.

    from kernelmap import where
    answer = where("torch.nn.functional.conv2d", device="cuda")
"""

from __future__ import annotations

import re

from kernelmap import env
from kernelmap.errors import UnknownName
from kernelmap.model import Kernel, LiveAnswer, NodeKind, SourceStep, WhereAnswer


def where(
    name: str,
    device: str = "cpu",
    dtype: str = "float32",
    requires_grad: bool = False,
    autocast: bool = False,
    inference_mode: bool = False,
    static: bool = False,
    source: str | None = None,
    with_source: bool = False,
    context=None,
) -> WhereAnswer:
    """Where the operator behind `name` is declared, which kernels it has per
    dispatch key, and (unless `static`) what the live dispatcher runs for a call
    on `device`; `with_source` adds, when a source tree is indexed, the entry
    kernel, stub kernel and leaves on `device`. `source` selects a tree (a
    registered name or a directory): its yaml and derivatives answer the
    operator, its index the source steps; the Python names are resolved with
    the installed wheel's (Note [graph versions]). Static answers never import torch.
    `context`, a graph context already open for `device` (kernelmap.graph.open_context),
    spares opening one for the source steps (a server keeps its contexts open)."""
    from kernelmap.catalog import load_catalog
    from kernelmap.names import resolve_ops

    install = env.torch_install()
    notes: list[str] = []
    selected = _selected_tree(source, notes)
    tree = selected.root if selected is not None else None
    if selected is None:
        catalog = python_catalog = load_catalog()
        python_root = install.site_packages
    else:
        from kernelmap.source.trees import has_python  # not the graph's context: a static answer imports no graph

        catalog = load_catalog(tree=selected.root, origin=selected.origin)
        if has_python(selected.root):  # Note [graph versions]: the tree's own Python names
            python_catalog, python_root = catalog, selected.root
        else:  # the installed wheel's names, opened only where they are read
            python_catalog, python_root = load_catalog(), install.site_packages
    try:
        ops = resolve_ops(name, catalog, python_catalog, python_root)
    except UnknownName:
        if selected is None or source is not None:
            raise
        # A tree chosen by default lacks the name (an operator newer than it):
        # the installed torch answers, and says so once.
        wheel = load_catalog()
        ops = resolve_ops(name, wheel, wheel, install.site_packages)
        notes.append(f"{name} is not in {catalog.origin.label}, the default tree; answered from the installed torch {install.version}")
        catalog, selected, tree = wheel, None, None
    notes.extend(_hidden_bindings(ops[0], python_root, python_catalog.origin.label))
    delegate = catalog.delegate(ops[0])
    live = None
    if not static:
        from kernelmap import dispatch

        if selected is not None and selected.commit != install.commit:
            # the live dispatcher is the installed torch's; everything static is the tree's
            notes.append(
                f"version mismatch: the live dispatcher (registrations, dispatch path) is torch {install.version}'s; "
                f"the operator, its yaml and derivatives come from {catalog.origin.label}"
            )
        live_catalog = catalog if tree is None else load_catalog()
        qualified = str(ops[0].name)
        path = dispatch.dispatch_path(
            qualified,
            device=device,
            dtype=dtype,
            requires_grad=requires_grad,
            autocast=autocast,
            inference_mode=inference_mode,
            catalog=live_catalog,
        )
        live = LiveAnswer(_with_python_sources(qualified, dispatch.live_registrations(qualified)), dispatch.schema_location(qualified), path)
        if path.note:
            notes.append(path.note)
    steps = _source_steps(str(ops[0].name), device, notes, source, dtype, context) if with_source else ()
    found: tuple = ()
    if not (static and tree is not None and not (tree / "torch/_native/ops").is_dir()):  # a tree before 2.12 registers none
        from kernelmap.dispatch.native import overrides as native_overrides

        found = native_overrides(str(ops[0].name), static=static, tree=tree)
    return WhereAnswer(name, ops, install.version, install.commit, delegate, live, tuple(notes), steps, found)


def _hidden_bindings(op, python_root, label: str) -> list[str]:
    """One note naming the operator's Python names that run Python before
    its binding (`torch.norm` is torch/functional.py's norm: Note [bindings
    Python hides]), each at its definition, in the version that answers."""
    from kernelmap import pysource

    found = []
    for name in op.python_entry_points:
        if pysource.shadowed_binding(name, python_root):
            definition = pysource.find_def(name, python_root)
            if definition is not None:
                found.append(f"{name} is {definition.qualname} ({definition.path.relative_to(python_root).as_posix()}:{definition.line})")
    if not found:
        return []
    return [f"{'; '.join(found)} in {label}: a call runs Python first, which decides whether to reach this operator's binding"]


def _selected_tree(source: str | None, notes: list[str] | None = None):
    """The tree `where` answers from: `--source`, else the default selection
    (Note [the default tree]; a choice among several trees is said in
    `notes`); None when no tree is registered (an explicit --source must open)."""
    from kernelmap.errors import NoSourceTree
    from kernelmap.source import choose_tree, select_tree

    if source is not None:
        return select_tree(source)
    try:
        choice = choose_tree(None)
    except NoSourceTree:
        return None
    if choice.note and notes is not None:
        notes.append(choice.note)
    return choice.tree


def _with_python_sources(op: str, kernels: tuple[Kernel, ...]) -> tuple[Kernel, ...]:
    """Python-registered kernels as the function that runs (`torch._refs.add` at
    its own line), not the line of the `Library` that registered them."""
    from kernelmap import dispatch

    resolved = []
    for k in kernels:
        found = dispatch.python_kernel_source(op, k.key) if k.kind == "python" else None
        resolved.append(Kernel(k.key, found[0], found[1], "python") if found else k)
    return tuple(resolved)


def _source_steps(op: str, device: str, notes: list[str], source: str | None = None, dtype: str = "float32", context=None) -> tuple[SourceStep, ...]:
    """The entry kernel's definition, the first stub kernel and the leaves of
    `op` on `device` for inputs of `dtype`, read off the call graph when a
    source tree is indexed."""
    from kernelmap import graph
    from kernelmap.errors import KernelmapError

    if device not in graph.DEVICE_KEYS:
        return ()
    try:
        context = context if context is not None else graph.open_context(device, source=source, dtype=dtype)
    except KernelmapError as e:
        if source is not None:
            raise
        notes.append(str(e))
        return ()
    if context.stale:  # the source steps' lines come from the index as built
        notes.append(context.stale)
    if context.index is None:
        if context.no_index:  # the selected tree's index is missing or damaged: say why there are no source steps
            from kernelmap.graph.context import NEEDS_TREE

            notes.append(f"{NEEDS_TREE} [{context.no_index}]")
        return ()
    tree = graph.stack(op, context)
    roles: dict[str, SourceStep] = {}
    pending = [tree.root]
    while pending:
        node = pending.pop()
        if node.attrs.get("collapsed") or node.attrs.get("symbol_kind") == "structured_meta":
            continue  # a structured kernel's meta function checks shapes, and so do its helpers (index's make_info)
        if node.location is not None and node.kind in (NodeKind.KERNEL, NodeKind.GENERATED):
            roles["entry kernel"] = SourceStep("entry kernel", node.name, node.location, node.condition or "")
            break
        pending.extend(reversed(node.children))
    # the ends a strided tensor reaches (Note [ranking a call's ends]): none named when all are another layout's
    every_end = graph.call_ends(tree)
    ends = tuple(e for e in every_end if not e.for_other_layouts)
    stub = graph.stub_kernel(tree, ends) if ends or not every_end else None  # on the path to the call's ends, not the first stub met
    if stub is not None:
        call = next((n for _, n in tree.walk() if n.kind is NodeKind.STUB and any(c is stub for c in n.children)), None)
        # when the kernel calls the stub: cat_serial_stub only for small inputs
        called = f"the stub is called {call.condition}" if call is not None and call.condition else None
        roles["stub kernel"] = SourceStep("stub kernel", stub.name, stub.location, _joined(stub.condition, called))
    leaves: dict[str, SourceStep] = {}
    first = None  # the first leaf's end: the others are where the call ends instead (Note [alternatives of a step])
    for end in ends:  # Note [ranking a call's ends]
        if end.iteration and end is not ends[0]:
            continue  # the loop an end above runs in (sort's std::sort, in _dim_apply's for_each): named when nothing else is
        if end.node.name not in leaves and len(leaves) < 3:
            why = None
            if end.opted_by is not None:  # no end is reached at the defaults before this one: say so
                if end.opted_against is not None:  # Note [flags passed as literals]
                    why = f"not as called: under {end.opted_by}, and {end.opted_against}"
                else:
                    why = "not at the defaults" if end.opted_by == end.node.condition else f"not at the defaults: under {end.opted_by}"
            shown = str(end.node.attrs.get("library") or end.node.condition or "")  # the library, else the leaf's own condition
            detail = _joined(
                shown,
                why,
                # Note [definitions written by macros] in source.extract: `vm##mkltype##mklop`
                None if _written_at(end.node) else "its name is pasted together by the macro used on this line",
                # one alternative of a choice made at run time
                f"under {end.route}" if end.route is not None and end.route != shown else None,
                end.checked_by,  # Note [calls in checks]: a check's loop, not the work
                f"as {end.grown_by} grows a tensor's storage" if end.grown_by else None,
            )
            if first is None:
                first = end
            else:  # what picks this end over the first: the condition where its path leaves the first's
                picked = _picked_by(first, end, context)
                if picked and picked not in detail:
                    detail = _joined(detail, f"instead when {picked}")
            leaves[end.node.name] = SourceStep("leaf", end.node.name, end.node.location, detail)
    return tuple(roles.values()) + tuple(leaves.values())


def _picked_by(main, other, context) -> str | None:
    """The condition where `other`'s path (an End of graph.ends) leaves
    `main`'s: the branch condition of its first node off `main`'s path (Note
    [alternatives of a step]), else the first condition below it."""
    from kernelmap.graph.explain import branch_condition

    k = 0
    while k < min(len(main.path), len(other.path)) and main.path[k] is other.path[k]:
        k += 1
    if k == 0 or k >= len(other.path):
        return None
    if k < len(main.path):
        found = branch_condition(main.path[k], other.path[k], context)
        if found:
            return found
    return next((n.condition for n in other.path[k + 1 :] if n.condition), None)


def _joined(*parts: str | None) -> str:
    """A step's detail: the parts given, in order, joined by `; `."""
    return "; ".join(p for p in parts if p)


def _written_at(node) -> bool:
    """Whether a node's name is written on the line of its location: not a
    name a macro pastes together (cpu/vml.h's `vm##mkltype##mklop`, placed at
    the line of the use that gives `Exp`). True when the line cannot be read."""
    from kernelmap.graph.code import file_lines

    location = node.location
    if location is None or location.origin is None or location.origin.root is None:
        return True
    lines = file_lines(location.disk_path)
    if not 0 < location.line <= len(lines):
        return True
    short = re.sub(r"<.*", "", node.name).rsplit("::", 1)[-1]
    return re.search(rf"(?<!\w){re.escape(short)}(?!\w)", lines[location.line - 1]) is not None


def observed(answer, target: str, *, device: str = "cpu", dtype: str = "float32", source: str | None = None):
    """`answer` (a stack or callers tree, a path or a where answer) with each
    step marked observed, inlined or not taken by a run of `target` on the
    installed torch with example inputs (kernelmap.observe.mark); the
    observed path first. Observation runs this machine's CPU build."""
    from kernelmap.errors import BadInput
    from kernelmap.model import CallTree, PathAnswer
    from kernelmap.observe import observe
    from kernelmap.observe import mark

    if device != "cpu":
        raise BadInput(f"--observe runs the call on this machine's torch, on the CPU; --device {device} needs its own build and device (use --device cpu)")
    run = observe(target, source=source, dtype=dtype)
    if isinstance(answer, CallTree):
        from kernelmap.processors import mark_main_path

        marked = mark.mark_tree(answer, run)
        return mark_main_path(marked, mark.observed_path(marked))  # the observed path is the main path
    if isinstance(answer, PathAnswer):
        return mark.mark_path(answer, run)
    return mark.mark_where(answer, run)
def with_main_path(tree):
    """`tree` (a stack) with its main path marked: the path to the call's
    best end as graph.ends ranks it (Note [the main path] in
    kernelmap.processors); as it is when the call has no end."""
    from kernelmap import graph, processors

    ends = graph.call_ends(tree)
    return processors.mark_main_path(tree, ends[0].path) if ends else tree
