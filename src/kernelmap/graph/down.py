"""Top-down: the tree of what a call of a Python name, an operator or a C++
symbol runs on one device, through every layer (Note [graph versions],
Note [branches]).

This module is the entry (`stack`) and hands each node to its layer:
graph.python (Python functions, builtins, bindings), graph.operators (an
operator's dispatch layers and kernels), graph.sites (a C++ definition's call
sites, with graph.kernel_loops and graph.stubs), all making nodes with
graph.nodes; which overload a call reaches is graph.overloads', the values it
passes graph.values'."""

from __future__ import annotations

from kernelmap import env, pysource
from kernelmap.errors import BadInput, KernelmapError, UnknownName
from kernelmap.graph import processors_for
from kernelmap.graph.context import GraphContext
from kernelmap.graph.grow import cpp_node, grow, Node
from kernelmap.graph.nodes import _ASKED_UTILITY, _builtin_node, op_node, _python_node, _utility_asked
from kernelmap.graph.operators import _op_children
from kernelmap.graph.python import _builtin_children, _entry_node, _python_children
from kernelmap.graph.rules import DEFAULT_DEPTH, is_symbol_text
from kernelmap.graph.sites import _code_children
from kernelmap.graph.stubs import stub_declaration
from kernelmap.model import CallTree, NodeKind


def stack(target: str, context: GraphContext, depth: int = DEFAULT_DEPTH) -> CallTree:
    """The tree of what a call of `target` runs on `context.device`.

    `target` is a Python name (`torch.nn.Conv2d`, `torch.nn.functional.conv2d`,
    `torch.add`, `torch.Tensor.relu_`), an operator (`aten::conv2d`), or a C++
    symbol (`at::native::_convolution`).
    """
    if depth < 0:
        raise BadInput(f"depth must be 0 or more, not {depth}")
    root = _root_for(target, context)
    asked = _ASKED_UTILITY.set(_utility_asked(root))
    try:
        grown = grow(root, lambda node: _expand_down(node, context), depth)
    finally:
        _ASKED_UTILITY.reset(asked)
    context.check_index_intact()
    meta = {"kind": "stack", "target": target, "device": context.device, "dtype": context.dtype, "depth": depth,
            "requires_grad": context.requires_grad, "all_branches": context.all_branches, "all_calls": context.all_calls,
            "torch": env.torch_install().version}  # Note [versions on locations]
    late = (context.__dict__["headers_error"],) if "headers_error" in context.__dict__ else ()
    return processors_for(context)(CallTree(grown, context.notes + late + mismatch_note(grown, context), meta))


def mismatch_note(tree, context: GraphContext) -> tuple[str, ...]:
    """One note when a tree is selected and some node comes from the installed
    torch instead (its torch._native overrides, what the tree lacks); none
    otherwise, and none when the context already said so (Note [graph versions])."""
    if context.tree_root is None or context.index is None or any("version mismatch" in n for n in context.notes):
        return ()
    version = context.index.tree.origin.version
    stack_, kinds = [tree], {}
    while stack_:
        node = stack_.pop()
        stack_.extend(node.children)
        origin = node.location.origin if node.location is not None else None
        if origin is not None and origin.version != version:
            kinds.setdefault(str(node.kind.value), origin.label)
    if not kinds:
        return ()
    labels = sorted(set(kinds.values()))
    return (
        f"version mismatch: {', '.join(sorted(kinds))} nodes come from {', '.join(labels)} (what the installed torch registers), "
        f"the rest from {context.index.tree.origin.label} ({version}); each location names its origin",
    )


def _root_for(target: str, ctx: GraphContext) -> Node:
    """The node a tree is grown from; a Python name or an operator is called
    above the autograd keys, a C++ function below them (Note [the autograd layer])."""
    root = _root_node(target, ctx)
    root.grad = root.kind in (NodeKind.PYTHON, NodeKind.MODULE, NodeKind.BUILTIN, NodeKind.OPERATOR)
    if root.kind is NodeKind.OPERATOR:
        _above_autograd(root)
    return root


def _root_node(target: str, ctx: GraphContext) -> Node:
    text = target.strip()
    if not text or not is_symbol_text(text, ".<>"):
        raise BadInput(f"not a target: {target!r} (a Python name, an operator like aten::conv2d, or a C++ symbol)")
    if text.startswith("aten::") or (("::" not in text) and "." not in text and _is_op(text, ctx)):
        return op_node(ctx.catalog.resolve(text)[0], ctx)
    if text.startswith(("torch.", "F.", "nn.", "Tensor.")) and "::" not in text:
        from kernelmap.catalog import expand_python_name

        return _python_root(expand_python_name(text), ctx)
    if ctx.index is None:
        raise UnknownName(target, ())
    definitions = ctx.index.definitions(text)
    short = text.rsplit("::", 1)[-1]
    # A DispatchStub (`mul_stub`, `at::native::mul_stub`) is no function: its
    # kernels are those registered for it, also where a function in an
    # anonymous namespace has its name (PaddingKernel.cpp's `add_stub` helper).
    if ctx.index.is_stub(short) and not any(d.name == text for d in definitions):
        declared = stub_declaration(short, ctx)
        return Node(short, "stub", declared, None, None, {"declared_at": declared} if declared else {}, payload=short, identity=("stub", short))
    if not definitions:
        suggestions = tuple(ctx.index.search(text.rsplit("::", 1)[-1], limit=5)) if len(text.rsplit("::", 1)[-1]) >= 3 else ()
        raise UnknownName(target, suggestions)
    if len(definitions) == 1:
        return cpp_node(definitions[0], ctx)
    node = Node(text, "symbol", attrs={"candidates": len(definitions)})
    node.children = [cpp_node(d, ctx, condition=d.symbol.condition) for d in definitions]
    return node


def _is_op(name: str, ctx: GraphContext) -> bool:
    try:
        ctx.catalog.resolve(name)
        return True
    except KernelmapError:
        return False


def _python_root(name: str, ctx: GraphContext) -> Node:
    from kernelmap.names import hand_written

    entry_points = ctx.entry_catalog.entry_points()
    if name in entry_points and not name.startswith("torch.nn.functional.") and not pysource.shadowed_binding(name, ctx.python_dir):
        return _builtin_node(name, ctx)
    definition = pysource.find_def(name, ctx.python_dir)
    if definition is not None:
        return _python_node(definition, ctx)
    # a binding written by hand (Tensor.to, torch.nonzero): HandWrittenBinding when it calls no operator
    if hand_written(name, ctx.entry_catalog, ctx.python_dir) is not None:
        return _builtin_node(name, ctx)
    raise UnknownName(name, ctx.entry_catalog.suggest(name))


def _expand_down(node: Node, ctx: GraphContext) -> list[Node]:
    children = _children_down(node, ctx)
    _pass_grad(node, children)
    return children


def _pass_grad(node: Node, children: list[Node]) -> None:
    """Each child (and what is made below it already) calls above the autograd
    keys when its parent does, unless it says otherwise (Note [the autograd
    layer]); an operator so called is a node of its own. The steps of a
    kernel's own loop down to its lambda are the kernel's: they keep its
    template arguments and whether it is a composite's (Note [device loop machinery])."""
    from kernelmap.graph.loops import LoopStep

    pending = [(c, node) for c in children]
    while pending:
        child, parent = pending.pop()
        if child.grad is None:
            child.grad = bool(parent.grad)
        if child.grad and child.kind is NodeKind.OPERATOR:
            _above_autograd(child)
        if child.rank is None:
            child.rank = parent.rank
        if isinstance(child.payload, LoopStep) and (isinstance(parent.payload, LoopStep) or NodeKind.DEVICE_LOOP in (child.kind, parent.kind)):
            if child.bound is None:
                child.bound = parent.bound
            if child.known is None:
                child.known = parent.known
            child.composite = child.composite or parent.composite
        pending.extend((c, child) for c in child.children)


def _above_autograd(node: Node) -> None:
    if node.identity is not None and node.identity[-1] != "above autograd":
        node.identity = (*node.identity, "above autograd")
        node.attrs["identity"] = ":".join(str(part) for part in node.identity)


def _children_down(node: Node, ctx: GraphContext) -> list[Node]:
    from kernelmap.graph import loops  # here, not at the top: `callers` never needs it

    if isinstance(node.payload, loops.LoopStep):  # Note [device loop machinery]
        return loops.step_children(node, ctx, _code_children)
    if node.kind in ("module", "python"):
        return _python_children(node.payload, ctx)
    if node.kind == "builtin":
        return _builtin_children(node.payload, ctx)
    if node.kind == "binding":
        return [_entry_node(op, cond, calls, ctx) for op, cond, calls in node.payload]
    if node.kind == "op":
        return _op_children(node, ctx)
    if node.kind in ("wrapper", "kernel", "stub", "generated", "device_loop"):
        return _code_children(node, ctx)
    return []
