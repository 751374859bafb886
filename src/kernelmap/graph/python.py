"""The Python layer of the static graph: what a Python function calls (module
-> forward -> functional -> builtin), the operators a builtin is, and the
hand-written bindings' C++.
"""

from __future__ import annotations

import re
from pathlib import Path

from kernelmap import env, pysource
from kernelmap.graph.context import GraphContext
from kernelmap.graph.grow import Node
from kernelmap.graph.nodes import (
    _builtin_node,
    _called_at,
    _generated,
    _header_function,
    op_node,
    _ops_call,
    _python_location,
    _python_node,
    _tree_op,
)
from kernelmap.graph.rules import is_utility_op
from kernelmap.model import EdgeKind, Location, NodeKind, Op


# -- Python ------------------------------------------------------------------


def _python_children(definition: pysource.PyDef, ctx: GraphContext) -> list[Node]:
    """What a Python definition calls that reaches an operator: its `self.`
    methods, generated bindings (`torch.conv2d`, `Tensor.softmax` on a Tensor
    parameter; tensor utilities like `Tensor.dim` marked as such), hand-written
    ones that call an operator, and the Python functions it calls (functionals,
    the branches of a `boolean_dispatch`) that reach one. Each keeps the line
    that calls it (`call_site`)."""
    import ast

    root = ctx.python_dir
    if isinstance(definition.node, ast.ClassDef):
        forward = pysource.find_def(f"{definition.qualname}.forward", root)
        return [_python_node(forward, ctx)] if forward else []
    entry_points = ctx.entry_catalog.entry_points()
    children = []
    owner = definition.qualname.rsplit(".", 1)[0]
    for call in pysource.calls(definition, root):
        before = len(children)
        _python_call(definition, call, children, owner, entry_points, ctx)
        if len(children) > before:  # the line that makes the call, beside the callee's definition
            children[-1].attrs["call_site"] = _python_location(definition.path, call.line, None, ctx)
    return children


def _python_call(definition: pysource.PyDef, call, children: list[Node], owner: str, entry_points, ctx: GraphContext) -> None:
    """The node one call of a Python definition adds to `children`, if any (see _python_children)."""
    import ast

    from kernelmap.errors import HandWrittenBinding
    from kernelmap.names import hand_written

    root = ctx.python_dir
    if call.target.startswith("self."):
        method = pysource.find_def(f"{owner}.{call.target[5:]}", root)
        if method is not None and _reaches_torch(method, root, entry_points):
            children.append(_python_node(method, ctx, call.condition))
        return
    builtin = pysource.entry_name(call.target)
    if builtin and builtin in entry_points and not pysource.shadowed_binding(call.target, root):
        children.append(_mark_tensor_utility(_builtin_node(builtin, ctx, call.condition), builtin, ctx))
        return
    if call.target.startswith("torch.nn.functional.") and call.target in entry_points:
        found = pysource.find_def(call.target, root)
        if found is not None:
            children.append(_python_node(found, ctx, call.condition))
        return
    if not call.target.startswith("torch."):
        return
    found = pysource.find_def(call.target, root)
    if found is not None:
        if not isinstance(found.node, ast.ClassDef) and _reaches_torch(found, root, entry_points):
            children.append(_python_node(found, ctx, call.condition))
    elif builtin:
        try:
            reached = hand_written(builtin, ctx.entry_catalog, root)
        except HandWrittenBinding:  # calls no operator: a helper, like one that reaches nothing
            reached = None
        if reached is not None:
            children.append(_mark_tensor_utility(_builtin_node(builtin, ctx, call.condition), builtin, ctx))


def _is_tensor_utility(name: str) -> bool:
    return name.startswith("torch.Tensor.") and is_utility_op(name.rsplit(".", 1)[-1], False)


def _mark_tensor_utility(node: Node, name: str, ctx: GraphContext) -> Node:
    """A call of a tensor utility (`Tensor.size`, `Tensor.contiguous`) is plumbing:
    marked, and not expanded unless all calls are shown (as for operators)."""
    if _is_tensor_utility(name):
        node.attrs["utility"] = True
        if not ctx.all_calls:
            node.leaf()
    return node


def _reaches_torch(definition: pysource.PyDef, root: Path, entry_points: set[str], depth: int = 3) -> bool:
    """Whether a method or function calls a builtin, a functional, another
    method, or (through at most `depth` Python functions it calls: the
    branches of a `boolean_dispatch`) one that does."""
    level, seen = [definition], {definition.qualname}
    for _ in range(depth + 1):
        following = []
        for current in level:
            for call in pysource.calls(current, root):
                builtin = pysource.entry_name(call.target)
                if builtin and _is_tensor_utility(builtin):  # `input.view(...)` is plumbing, no reason to show a helper
                    continue
                if call.target.startswith("self.") or call.target in entry_points or (builtin and builtin in entry_points):
                    return True  # (a Tensor method torch/_tensor.py defines reaches a builtin too)
                if call.target.startswith("torch."):
                    found = pysource.find_def(call.target, root)
                    if found is not None and found.qualname not in seen:
                        seen.add(found.qualname)
                        following.append(found)
        level = following
    return False


def _builtin_children(name: str, ctx: GraphContext) -> list[Node]:
    if name not in ctx.entry_catalog.entry_points():
        return _hand_written_children(name, ctx)
    ops = ctx.entry_catalog.resolve(name)
    pairs = [(_tree_op(op, ctx), None) for op in ops]
    if ctx.generated is None:
        return [op_node(op, ctx, EdgeKind.BINDING, cond) for op, cond in pairs]
    from kernelmap.codegen import Layer

    bindings = {}
    for op in ops:
        code = _generated(str(op.name), ctx, (Layer.BINDING,))
        for b in code.bindings if code else ():
            if name in b.python_names:
                bindings.setdefault(b.function, (b, []))[1].append((_tree_op(op, ctx), b.signature, b.calls))
    if not bindings:
        return [op_node(op, ctx, EdgeKind.BINDING, cond) for op, cond in pairs]
    nodes = []
    for function, (binding, reached) in bindings.items():
        attrs = {"signatures": tuple(binding.signatures), "calls": tuple(binding.calls)}
        nodes.append(Node(function, "binding", binding.definition.location, EdgeKind.BINDING, None, attrs, payload=reached, identity=("binding", function)))
    return nodes


def _hand_written_children(name: str, ctx: GraphContext) -> list[Node]:
    """The hand-written binding of `name` (Note [hand-written bindings]), at
    its line in the table's file, and the operators its code calls."""
    from kernelmap.names import hand_written

    found = hand_written(name, ctx.entry_catalog, ctx.python_dir)
    if found is None:
        return []
    binding, ops = found
    location = Location(binding.repo_path, binding.line, origin=ctx.python_origin or env.torch_install().origin)
    if not binding.defined:  # the table points at a generated binding: `__add__` is THPVariable_add, Tensor.add's
        generated = f"{name.rpartition('.')[0]}.{binding.function.removeprefix('THPVariable_')}"
        return [_builtin_node(generated, ctx)]
    reached = [(_tree_op(op, ctx), None, ()) for op in ops]
    attrs = {"calls": tuple(dict.fromkeys(c.name for c in binding.calls))}
    return [Node(binding.function, "binding", location, EdgeKind.BINDING, None, attrs, payload=reached, identity=("binding", binding.function))]


def _entry_node(op: Op, condition: str | None, calls: tuple[str, ...], ctx: GraphContext) -> Node:
    """What a binding's case calls on the way to the dispatcher, as a build
    compiles it: the inline `at::<op>` (ops/<op>.h) or `Tensor::<op>`
    (TensorBody.h), then `at::_ops::<op>::call` (Operators_N.cpp), which
    enters the dispatcher for the operator."""
    call = next((c for c in calls if re.fullmatch(r"at::(Tensor::)?\w+", c)), None)
    function = _header_function(op, call, ctx) if call is not None else None
    if function is None:
        return op_node(op, ctx, EdgeKind.BINDING, condition)
    header = Node(function.symbol, NodeKind.HEADER, function.location, EdgeKind.BINDING, condition, {"calls": (function.calls,)})
    entry = _ops_call(op, function.calls, ctx)
    if entry is None:
        header.children = [op_node(op, ctx, EdgeKind.DISPATCHER)]
        return header
    ops_entry = Node(entry.symbol, NodeKind.OPS_ENTRY, entry.definition.location, EdgeKind.DIRECT)
    _called_at(ops_entry, function.location, entry.symbol)
    ops_entry.children = [op_node(op, ctx, EdgeKind.DISPATCHER, "the dispatcher picks the kernel for the tensors' dispatch keys")]
    header.children = [ops_entry]
    return header
