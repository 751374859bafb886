"""Top-down: the tree of what a call of a Python name, an operator or a C++
symbol runs on one device, through every layer (Note [graph versions],
Note [branches])."""

from __future__ import annotations

import contextvars
import dataclasses
import re
from pathlib import Path
from typing import Any

from kernelmap import env, pysource
from kernelmap.errors import BadInput, KernelmapError, UnknownName
from kernelmap.graph import processors_for
from kernelmap.graph.code import (
    _argument_value,
    _blank_keeping_lines,
    _bracket_items,
    _by_short_name,
    call_arguments,
    call_end,
    _CODE_ONLY,
    _COMMENT,
    compiled,
    device_lambdas,
    file_lines,
    _is_bool_parameter,
    LOOP_HEADERS,
    _parameter_name,
    parameters,
    tree_lines,
)
from kernelmap.graph.context import GraphContext
from kernelmap.graph.grow import Node, cpp_node, grow, vendor_node
from kernelmap.graph.overloads import (
    _all_distinct_conditions,
    _angle_items,
    _ANGLE_TAIL,
    by_argument_count,
    by_argument_types,
    by_arity,
    by_build,
    by_class_specialisation,
    by_dtype,
    by_enable_if,
    by_out_spelling,
    by_signature,
    declaration_head,
    _DTYPE_TYPES,
    dtype_work,
    is_template,
    _name_followed,
    _nearest,
    not_compiled,
    _one_symbol,
    _parameter_names,
    _Spelled,
    _structured_functional,
    _TEMPLATE_HEAD,
    _template_parameters,
)
from kernelmap.graph.resolve import _declarations, macro_start, receiver_declarations, receiver_type, _resolve_direct
from kernelmap.graph.rules import (
    DEFAULT_DEPTH,
    DEVICE_KEYS,
    is_inspection_op,
    is_symbol_text,
    is_utility_op,
    KERNEL_DIRS,
    launch_kind,
    other_device_reason,
    schema_arguments,
    VECTORIZED_MATH,
)
from kernelmap.graph.values import (
    _assigned,
    by_literal_types,
    _CALLER_VALUES,
    _given,
    _is_number,
    literal_flags,
    _literal_parameters,
    node_flags,
)
from kernelmap.model import CallTree, EdgeKind, Location, NodeKind, Op


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


def _python_location(path: Path, line: int, end_line: int | None, ctx: GraphContext) -> Location:
    """A line of the Python layer: in the selected tree's own .py files, or the
    installed wheel's (Note [graph versions])."""
    rel = path.relative_to(ctx.python_dir).as_posix()
    return Location(rel, line, end_line, origin=ctx.python_origin or env.torch_install().origin)


def _python_node(definition: pysource.PyDef, ctx: GraphContext, condition: str | None = None, line: int | None = None) -> Node:
    import ast

    kind = "module" if isinstance(definition.node, ast.ClassDef) else "python"
    location = _python_location(definition.path, definition.line, definition.end_line, ctx)
    return Node(definition.qualname, kind, location, EdgeKind.PYTHON, condition, payload=definition, identity=("py", definition.qualname))


def _builtin_node(name: str, ctx: GraphContext, condition: str | None = None) -> Node:
    return Node(name, "builtin", None, EdgeKind.PYTHON, condition, payload=name, identity=("builtin", name))


def op_node(op: Op, ctx: GraphContext, via: EdgeKind | None = None, condition: str | None = None, location: Location | None = None) -> Node:
    attrs: dict[str, Any] = {"op_kind": op.kind.value, "schema": op.schema, "yaml": str(op.location)}
    if location is not None:
        attrs["call_site"] = location
    return Node(str(op.name), "op", op.location, via, condition, attrs, payload=op, identity=("op", str(op.name)))


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


def _called_at(node: Node, start: Location, symbol: str, lines: int = 6) -> None:
    """`node`'s call site: the line, among the first of the function at
    `start`, that calls `symbol` (a header's `return at::_ops::add_Tensor::call(...)`)."""
    path = start.disk_path
    text = file_lines(path) if path is not None else ()
    for number in range(start.line, min(len(text), start.line + lines) + 1):
        if symbol in text[number - 1]:
            node.attrs["call_site"] = Location(start.path, number, origin=start.origin)
            return


# Note [operators written as C++ operators]
# `self * other`, `x == 0`, `out += bias` on a Tensor call the operator
# TensorOperators.h defines for it, which calls the Tensor's method
# (`operator*` -> `Tensor::mul`): an operator call like any, at the line of
# the expression, though the index records no call there. An expression is
# read so when its left operand is a variable the caller declares a Tensor
# (`const Tensor& self`, `Tensor out`); a number on the right picks the
# Scalar overload (`x * 2` is mul.Scalar); a compound assignment is the
# in-place operator (`+=` is add_). The arms around it are the recorded
# call's on the same line, if any.
_TENSOR_OPERATORS = {"+": "add", "-": "sub", "*": "mul", "/": "div", "==": "eq", "!=": "ne", "<": "lt", ">": "gt", "<=": "le", ">=": "ge",
                     "&": "bitwise_and", "|": "bitwise_or", "^": "bitwise_xor", "+=": "add_", "-=": "sub_", "*=": "mul_", "/=": "div_"}
_OPERATOR_EXPRESSION = re.compile(r"(?<![\w.>:\]])([A-Za-z_]\w*)\s*(==|!=|<=|>=|\+=|-=|\*=|/=|[-+*/<>&|^])(?![=\-+>&|<*/])\s*(\(|[A-Za-z_]\w*|\.?\d[\w.]*)")
_TENSOR_TYPE = re.compile(r"(?:at::)?Tensor")
_TENSOR_DECLARATION = re.compile(r"(?<![\w:])(?:at::)?Tensor\s*&{0,2}\s*([A-Za-z_]\w*)\s*[,)=;({]")


def _operator_sites(definition, sites, span, ctx: GraphContext) -> list:
    """Call sites for the operators a definition writes as C++ operators on
    Tensors (Note [operators written as C++ operators]), in `span` if given."""
    from kernelmap.source.index import CallSite

    location = definition.location
    lines = tree_lines(ctx, location.path)
    first, last = (span if span is not None else (location.line, location.end_line or location.line))
    body = _CODE_ONLY.sub(_blank_keeping_lines, "\n".join(lines[first - 1 : last])).split("\n")
    if not any(("Tensor" in line) for line in lines[location.line - 1 : location.end_line or location.line]):
        return []
    # the names the definition declares a Tensor (its parameters, its locals): one reading of its text
    whole = _CODE_ONLY.sub(_blank_keeping_lines, "\n".join(lines[location.line - 1 : location.end_line or location.line]))
    tensors = set(_TENSOR_DECLARATION.findall(whole))
    if not tensors:
        return []
    by_line: dict[int, Any] = {}
    for s in sites:
        by_line.setdefault(s.location.line, s)
    found = []
    for offset, text in enumerate(body):
        if not any(c in text for c in "+-*/<>=!&|^"):
            continue
        number = first + offset
        for m in _OPERATOR_EXPRESSION.finditer(text):
            left, operator, right = m.group(1), m.group(2), m.group(3)
            if left not in tensors or (operator == "<" and right[:1].isupper()):  # `Foo<Bar>`, not a comparison
                continue
            spelled = _Spelled(Location(location.path, number, origin=location.origin), left, left)
            declared = _declarations(left, spelled, definition, lines)  # the nearest declaration above: a Tensor still
            if not declared or not _TENSOR_TYPE.fullmatch(declared[-1].strip()):
                continue
            base = _TENSOR_OPERATORS[operator]
            overload = "Scalar" if _is_number(right, spelled, ctx) else "Tensor"
            op = f"{base}.{overload}" if any(o.name.name == base and o.name.overload == overload for o in ctx.catalog.overloads(base)) else base
            near = by_line.get(number)
            site = CallSite(definition.symbol, f".{base}", base, EdgeKind.DISPATCHER, spelled.location,
                                near.condition if near else None, near.preproc if near else None, None, op, near.outer if near else ())
            found.append(site)
    return found


# Note [the way into the dispatcher]
# A call of an operator from C++ is compiled as a call of the inline function
# the generated headers define for it: `at::convolution_symint(...)`
# (ops/convolution.h), `self.copy_(src)` (Tensor::copy_, TensorBody.h), which
# calls `at::_ops::<op>::call` (Operators_N.cpp), which enters the dispatcher.
# The inline function is often a real frame (at::convolution_symint converts
# its arguments: torch 2.13's native stacks show it), `::call` always is. A
# followed operator call is shown through both, as a binding's is; the call's
# condition and the arms around it stay on the operator's node. A call of a
# utility left unexpanded, or of an arm that cannot run, stays one node.


def entered(node: Node, callee: str, ctx: GraphContext) -> Node:
    """An operator node as its C++ call reaches it (Note [the way into the
    dispatcher]): under the inline function the call names and the
    `at::_ops::<op>::call` it calls, when the generated files have them."""
    op = node.payload
    # `self.copy_(src)`: Tensor::copy_; `at::empty(...)`; an unqualified call in namespace at (`rsqrt(...)`): at::rsqrt
    spelled = f"at::Tensor::{callee[1:]}" if callee.startswith(".") else callee if re.fullmatch(r"at::\w+", callee) \
        else f"at::{callee}" if re.fullmatch(r"\w+", callee) else None
    function = _header_function(op, spelled, ctx) if spelled is not None else None
    entry = _ops_call(op, function.calls if function is not None else f"at::_ops::{op.name.unqualified.replace('.', '_')}::call", ctx)
    if entry is None:
        return node
    outer = Node(entry.symbol, NodeKind.OPS_ENTRY, entry.definition.location, node.via, None, grad=node.grad)
    outer.children = [node]
    if function is not None:
        _called_at(outer, function.location, entry.symbol)
        header = Node(function.symbol, NodeKind.HEADER, function.location, node.via, None, {"calls": (function.calls,)}, grad=node.grad)
        header.children = [outer]
        outer.via = EdgeKind.DIRECT
        outer = header
    node.via = EdgeKind.DISPATCHER
    if "call_site" in node.attrs:
        outer.attrs["call_site"] = node.attrs["call_site"]
    return outer


def entered_op(node: Node) -> Node:
    """The operator node below the inline function and `::call` of its C++
    call (Note [the way into the dispatcher]); `node` itself when it is none."""
    while node.kind in (NodeKind.HEADER, NodeKind.OPS_ENTRY) and len(node.children) == 1:
        node = node.children[0]
    return node


def _header_function(op: Op, call: str, ctx: GraphContext):
    """The generated header's inline function a call names (`at::conv2d_symint`,
    `at::Tensor::add`), found once per operator and spelling; None when none is."""
    cache = ctx.__dict__.setdefault("_header_functions", {})
    key = (str(op.name), call)
    if key not in cache:
        function = None
        if ctx.headers is not None:
            from kernelmap.codegen.headers import HeadersDamaged

            try:
                function = ctx.headers.function(op, call)
            except HeadersDamaged as e:  # a cached header truncated or edited: generated again, once
                headers = ctx.regenerate_headers(e)
                try:
                    function = headers.function(op, call) if headers is not None else None
                except KernelmapError:
                    function = None
            except KernelmapError:
                function = None
        cache[key] = function
    return cache[key]


def _ops_call(op: Op, symbol: str, ctx: GraphContext):
    """The `at::_ops::<op>::call` (or `::redispatch`) of the generated files named `symbol`."""
    from kernelmap.codegen import Layer

    # the layers its expansion reads (one lookup: a call of an operator is followed into its dispatch)
    code = _generated(str(op.name), ctx, (Layer.REGISTER, Layer.AUTOGRAD, Layer.UFUNC, Layer.OPS))
    return next((f for f in (code.ops if code else ()) if f.symbol == symbol), None)


def _tree_op(op: Op, ctx: GraphContext) -> Op:
    """The same operator in the selected tree's catalog, when it has it (Note [graph versions])."""
    if ctx.catalog is ctx.entry_catalog:
        return op
    try:
        return ctx.catalog.get(str(op.name))
    except KernelmapError:
        return op


def _generated(op_name: str, ctx: GraphContext, layers):
    """The generated code of an operator of the selected catalog, in the
    generated files of the same version (Note [graph versions])."""
    from kernelmap.codegen import locate_in

    cache = ctx.__dict__.setdefault("_generated_code", {})  # a tree asks for one operator's code many times
    key = (op_name, tuple(layers))
    if key not in cache:
        try:
            cache[key] = locate_in(ctx.generated, op_name, ctx.catalog, layers)
        except KernelmapError:
            cache[key] = None
    return cache[key]


# -- operators and their dispatch -------------------------------------------


# Note [the autograd layer]
# A release build runs with grad mode on, and every tensor's dispatch key set
# holds the Autograd key of its device and ADInplaceOrView: a call from Python,
# or from a composite implicit kernel (which runs at the Autograd key itself),
# enters its operator's VariableType wrapper even when no input requires grad.
# The wrapper asks whether any does (compute_requires_grad), records its
# backward node only then, and redispatches below the autograd keys through
# `at::_ops::<op>::redispatch`; torch 2.13's native stacks show both frames.
# An in-place or view operator's ADInplaceOrView wrapper runs next (it bumps
# the version counter or sets up the view) and redispatches again; a factory
# operator's BackendSelect wrapper picks the backend from its options and
# redispatches too. Below the autograd wrapper the kernel runs under
# AutoDispatchBelowADInplaceOrView, so the operators it calls skip both
# autograd keys (BackendSelect stays). Each node carries `grad`: whether the
# calls it makes enter the dispatcher above the autograd keys: true from a
# Python entry or an operator asked for, passed on through composite implicit
# kernels, false below an autograd wrapper and from a C++ function asked for.
# An operator called above them is a node of its own (its identity says so).
# Operators whose autograd is written by hand (copy_, detach) have their
# wrapper in VariableTypeManual.cpp, found in the index.


def _op_children(node: Node, ctx: GraphContext) -> list[Node]:
    from kernelmap.codegen import Layer

    from kernelmap.graph.arms import rank_of

    op = node.payload
    flags = node_flags(node)  # Note [values a call passes]
    rank = rank_of(op) or node.rank  # Note [arms that cannot run]
    key = DEVICE_KEYS[ctx.device]
    kernel = ctx.catalog.effective_kernel(op, key)
    code = _generated(str(op.name), ctx, (Layer.REGISTER, Layer.AUTOGRAD, Layer.UFUNC, Layer.OPS)) if ctx.generated else None
    composite_implicit = op.kind.value == "composite implicit"
    children: list[Node] = []
    parent_list = children
    for layer in _dispatch_layers(op, code, bool(node.grad) and not composite_implicit, bool(node.grad) and composite_implicit, ctx):
        parent_list.append(layer)
        parent_list = layer.children[-1].children  # below its redispatch
    # below an autograd wrapper (generated or written by hand) the kernel's calls skip the autograd keys
    kernel_grad = bool(node.grad) and composite_implicit
    if kernel is None:
        parent_list.append(Node(f"no {key} kernel", "unresolved", attrs={"reason": f"{op.name} declares no kernel for {key} or a composite key"}))
        return children
    wrapper = _registration(code, kernel.key if kernel.key.startswith("Composite") else key)
    target_parent = parent_list
    if wrapper is not None:
        node = Node(
            wrapper.symbol,
            "wrapper",
            wrapper.definition.location if wrapper.definition else wrapper.impl.location,
            EdgeKind.DISPATCHER,
            f"dispatch key {key}" + (f" (via {kernel.key})" if kernel.key != key else ""),
            {"key": kernel.key, "registered_at": wrapper.block},
            grad=kernel_grad,
        )
        parent_list.append(node)
        target_parent = node.children
    else:
        note = f"dispatch key {key}" + (f" (via {kernel.key})" if kernel.key != key else "")
        target_parent.append(Node(f"{kernel.key} -> {kernel.symbol}", "note", None, EdgeKind.DISPATCHER, note))
    for kernel_node in _kernel_nodes(op, kernel, code, ctx):
        kernel_node.rank = rank
        if flags and kernel_node.kind is NodeKind.KERNEL and kernel_node.payload is not None and ctx.index is not None \
                and not isinstance(kernel_node.payload, GeneratedKernel):
            _given(kernel_node, _kernel_flags(op, kernel_node.payload, flags, ctx))  # Note [values a call passes]
        kernel_node.grad = kernel_grad
        kernel_node.composite = kernel.key.startswith("Composite")
        if wrapper is not None and kernel_node.kind is NodeKind.KERNEL and (kernel_node.condition or "").startswith("meta"):
            kernel_node.children.extend(_out_resize(wrapper, ctx))
        target_parent.append(kernel_node)
    children.extend(_override_nodes(op, ctx))
    return children


# Note [an out= call's resize]
# A structured kernel's out= wrapper instantiates a generated class whose
# set_output_raw_strided, called by the meta function, resizes the tensor
# the call was given (`resize_out(out, sizes, strides, options)`, whose body
# calls at::native::resize_output). The binary shows resize_output right
# below the meta function (or its resize_reduction): a step of the meta
# function, read from the generated class and its resize_out.


def _out_resize(wrapper, ctx: GraphContext) -> list[Node]:
    """at::native::resize_output as a step of an out= wrapper's meta
    function, when its structured class resizes the given output (Note [an out= call's resize])."""
    if ctx.index is None or ctx.generated is None or wrapper.definition is None:
        return []
    path = wrapper.definition.location.path
    for cls in wrapper.structured:
        setter = re.search(r"\bset_output_raw_strided\b[^{]*\{[^}]*?\bresize_out\s*\(", cls.definition.text)
        if setter is None:
            continue
        rows = ctx.generated.defs("resize_out", path)
        if not rows:
            return []
        helper = ctx.generated.definition(rows[0][0], rows[0][1])
        offset = next((i for i, t in enumerate(helper.text.splitlines()) if re.search(r"\bat::native::resize_output\s*\(", t)), None)
        found = ctx.index.definitions("at::native::resize_output")
        if offset is None or not found:
            return []
        site = Location(path, helper.location.line + offset, origin=helper.location.origin)
        node = cpp_node(found[0], ctx, EdgeKind.DIRECT, f"{cls.name}::set_output_raw_strided: resize_out resizes the out= tensor given", site)
        node.attrs["keep"] = True
        node.helper_levels = 1
        return [node]
    return []


def _kernel_flags(op: Op, definition, flags: dict[str, bool], ctx: GraphContext) -> dict[str, bool]:
    """The flags an operator's call passes, as its kernel's parameters: by
    place when the kernel takes the schema's arguments in order (at::native::_convolution's
    `transposed_` is _convolution's `transposed`), else by name."""
    declared = parameters(definition, ctx) or []
    arguments = [a.partition("=")[0].strip().rpartition(" ")[2] for a in schema_arguments(op.schema)]
    if len(declared) == len(arguments):
        return {name: flags[a] for a, p in zip(arguments, declared) if a in flags and (name := _parameter_name(p))}
    names = {_parameter_name(p) for p in declared}
    return {a: v for a, v in flags.items() if a in names}


def _dispatch_layers(op: Op, code, grad: bool, grad_composite: bool, ctx: GraphContext) -> list[Node]:
    """The wrappers a call of `op` passes before its backend's (Note [the
    autograd layer]), each with the `at::_ops::<op>::redispatch` it calls
    below it: VariableType and ADInplaceOrView when the call is made above the
    autograd keys (`grad`), BackendSelect for a factory operator."""
    layers = []
    if grad:
        autograd = _registration(code, "Autograd")
        manual = None if autograd is not None else _manual_autograd(op, ctx)
        if autograd is not None or manual is not None:
            backward = op.autograd.backward_node if op.autograd is not None else None
            if ctx.requires_grad:
                does = f"an input requires grad: records {backward} for the backward pass" if backward else "an input requires grad"
            else:
                does = ("grad mode is on (the default): runs though no input requires grad, records no "
                        f"{backward or 'backward node'} and redispatches")
            attrs = {"key": "Autograd", "keep": True}
            if backward:
                attrs["backward_node"] = backward
            if op.autograd is not None:
                attrs["derivatives"] = op.autograd.location
            if autograd is not None and autograd.definition is None:  # a fallback registered by name (autogradNotImplementedFallback())
                layers.append(_layer_node(autograd.symbol.removesuffix("()"), None, "Autograd", EdgeKind.AUTOGRAD, does, attrs, op, code,
                                          location=autograd.impl.location))
            elif autograd is not None:
                layers.append(_layer_node(autograd.symbol, autograd.definition, "Autograd", EdgeKind.AUTOGRAD, does, attrs, op, code))
            else:
                layers.append(_layer_node(manual.name, manual, "Autograd", EdgeKind.AUTOGRAD, f"written by hand; {does}", attrs, op, code, ctx))
            inplace_or_view = _registration(code, "ADInplaceOrView")
            if inplace_or_view is not None:
                why = "a view: records its base" if op.is_view else "in place: bumps the version counter"
                layers.append(_layer_node(inplace_or_view.symbol, inplace_or_view.definition, "ADInplaceOrView", EdgeKind.DISPATCHER, why,
                                          {"key": "ADInplaceOrView"}, op, code))
    # a composite implicit kernel runs at the Autograd key, before BackendSelect, when the call is made above it
    backend_select = None if grad_composite else _registration(code, "BackendSelect")
    if backend_select is not None and backend_select.definition is not None:
        layers.append(_layer_node(backend_select.symbol, backend_select.definition, "BackendSelect", EdgeKind.DISPATCHER,
                                  "picks the backend from the tensor options", {"key": "BackendSelect"}, op, code))
    return layers


def _layer_node(symbol: str, definition, key: str, via: EdgeKind, condition: str, attrs: dict, op: Op, code, ctx: GraphContext | None = None,
                location: Location | None = None) -> Node:
    """One wrapper of Note [the autograd layer] and, below it, the
    `at::_ops::<op>::redispatch` it calls, at the line it calls it from."""
    location = definition.location if definition is not None else location
    layer = Node(symbol, NodeKind.WRAPPER, location, via, condition, dict(attrs))
    unambiguous = str(op.name.unqualified).replace(".", "_")
    entry = next((f for f in (code.ops if code else ()) if f.symbol == f"at::_ops::{unambiguous}::redispatch"), None)
    redispatch = Node(f"at::_ops::{unambiguous}::redispatch", NodeKind.OPS_ENTRY, entry.definition.location if entry else None,
                      EdgeKind.DIRECT, f"below the {key} key")
    line = _redispatch_line(definition, ctx) if definition is not None else None
    if line is not None:
        redispatch.attrs["call_site"] = line
        layer.attrs["redispatch"] = line
    layer.children = [redispatch]
    return layer


def _manual_autograd(op: Op, ctx: GraphContext):
    """The autograd kernel of an operator written by hand in VariableTypeManual.cpp (copy_, detach)."""
    if ctx.index is None:
        return None
    found = [d for d in ctx.index.definitions(f"torch::autograd::VariableType::{op.name.name}") if d.location.path.endswith("VariableTypeManual.cpp")]
    return found[0] if found else None


def _redispatch_line(definition, ctx: GraphContext | None = None) -> Location | None:
    """The line of a wrapper that redispatches below its key
    (`at::redispatch::add(ks & c10::after_autograd_keyset, ...)`,
    `at::_ops::add__Tensor::redispatch(...)`)."""
    if definition is None:
        return None
    start = definition.location
    text = getattr(definition, "text", None)
    if text is None:  # a definition of the index: its lines in the tree
        if ctx is None or ctx.index is None:
            return None
        text = "\n".join(tree_lines(ctx, start.path)[start.line - 1 : start.end_line or start.line])
    for offset, line in enumerate(text.splitlines()):
        if "redispatch" in line and "::" in line:
            return Location(start.path, start.line + offset, origin=start.origin)
    return None


def _override_nodes(op: Op, ctx: GraphContext) -> list[Node]:
    """DSL kernels registered over the operator for this device's key
    (torch._native, read statically from the installed wheel): a dispatch
    alternative beside ATen's kernel, under its condition."""
    from kernelmap.dispatch.native import override_nodes, overrides

    key = DEVICE_KEYS[ctx.device]
    nodes = []
    # a tree with its own torch/_native answers; else they are the installed
    # torch's registrations, labelled so (stack then notes the mix once)
    tree = ctx.tree_root if ctx.tree_root is not None and (ctx.tree_root / "torch/_native").is_dir() else None
    for found in overrides(str(op.name), static=True, tree=tree):
        if found.dispatch_key != key:
            continue
        frozen = override_nodes(found)
        stack_ = [(frozen, None)]
        while stack_:  # thaw the small subtree into builder nodes (shown, not expanded)
            c, parent = stack_.pop()
            thawed = Node(c.name, c.kind, c.location, c.via, c.condition, dict(c.attrs))
            (parent.children if parent is not None else nodes).append(thawed)
            stack_.extend((g, thawed) for g in reversed(c.children))
    return nodes


def _registration(code, key: str):
    if code is None:
        return None
    for r in code.registrations:
        if r.key == key:
            return r
    return None


def _kernel_nodes(op: Op, kernel, code, ctx: GraphContext) -> list[Node]:
    """The native code a yaml kernel names: a definition in the tree, or for
    structured kernels their meta and impl functions, or generated ufunc kernels."""
    nodes: list[Node] = []
    short = kernel.symbol.rsplit("::", 1)[-1]
    if kernel.structured:
        functional = _structured_functional(op, ctx)
        if ctx.index is not None and functional:
            for d in ctx.index.structured_kernels(functional, kind="structured_meta"):
                nodes.append(cpp_node(d, ctx, EdgeKind.DIRECT, "meta: shapes and dtypes"))
                nodes[-1].attrs["keep"] = True
                nodes[-1].helper_levels = _META_HELPER_LEVELS  # Note [steps that run]
        ufunc = [u for u in (code.ufunc if code else ()) if u.key == DEVICE_KEYS[ctx.device]]
        impls = [u for u in ufunc if u.name.endswith("::impl")]
        if impls:
            nodes.extend(_ufunc_node(u, ufunc, EdgeKind.DIRECT, "impl (generated from ufunc_inner_loop)") for u in impls)
            return nodes
        if ctx.index is not None:
            impls = ctx.index.structured_kernels(short, kind="structured_impl")
            for d in impls:
                nodes.append(cpp_node(d, ctx, EdgeKind.DIRECT, "impl"))
                nodes[-1].attrs["keep"] = True
                nodes[-1].helper_levels = _META_HELPER_LEVELS  # Note [steps that run]
            if impls:
                return nodes
    if ctx.index is None:
        nodes.append(Node(kernel.symbol, "kernel", None, EdgeKind.DISPATCHER, attrs={"unresolved": "needs a source tree"}))
        return nodes
    definitions = by_signature(ctx.index.definitions(kernel.symbol), op.schema, ctx)
    generated = None if definitions else _view_copy_kernel(kernel.symbol, ctx)
    if generated is not None:
        nodes.append(generated)
        return nodes
    if not definitions:
        nodes.append(Node(kernel.symbol, "kernel", None, EdgeKind.DISPATCHER, attrs={"unresolved": f"no definition in {ctx.index.tree.name}"}))
    for d in by_build(definitions, ctx):
        nodes.append(not_compiled(cpp_node(d, ctx, EdgeKind.DISPATCHER, d.symbol.condition and f"#if {d.symbol.condition}"), d.symbol.condition, ctx))
        nodes[-1].helper_levels = 1  # an operator's kernel's own helpers run with it (Note [steps that run])
    return nodes


# Note [stub parameters]
# A helper that takes a stub as a parameter (`impl_func_cum_ops(..., Stub&
# stub)`, scatter_impl's `ReduceStub& reduce_stub, FillStub& fill_stub`) calls
# it by the parameter's name, which may shadow a global stub (fill_stub). The
# index records the stub passed at the caller's line (Note [stubs passed on] in
# the extractor). When the helper's node is made, the stubs its call site
# passes, or passes on from the caller's own parameters, are bound to its
# parameters (`bound`, beside template arguments); a call of such a parameter
# is a call of the bound stub, at the helper's line and under its tests
# (`else of if (reduce.has_value()); fill_stub = scatter_stub`), and the edge
# at the passing line is dropped. A call of a stub parameter left unbound names
# nothing. A helper that only passes the parameter on keeps the caller's edge.
def _stub_bindings(node: Node, definition, ctx: GraphContext, outer: dict[str, str] | None = None) -> dict[str, str]:
    """The parameters of `definition` bound to the stubs its call site passes
    (`scatter_impl(self, dim, index, src, out, scatter_reduce_stub, scatter_stub)`
    binds `ReduceStub& reduce_stub` and `FillStub& fill_stub`), or passes on
    from its caller's own bound parameters (`outer`: `unary_op_impl_out(result,
    self, stub)`); empty when either cannot be read."""
    site = node.attrs.get("call_site")
    if not isinstance(site, Location) or ctx.index is None:
        return {}
    short = definition.name.rsplit("::", 1)[-1]
    arguments = call_arguments(_Spelled(site, short, short), ctx)
    passed_on = {name: stub for name, stub in (outer or {}).items() if stub.endswith("_stub")}
    if not arguments or not any(a.endswith("_stub") or a in passed_on for a in arguments):
        return {}
    names = [_parameter_name(p) for p in parameters(definition, ctx) or ()]
    bound = {}
    for name, argument in zip(names, arguments):
        stub = passed_on.get(argument) or argument.rsplit("::", 1)[-1]
        if name and stub.endswith("_stub") and re.fullmatch(r"[A-Za-z_][\w:]*", argument) and ctx.index.is_stub(stub):
            bound[name] = stub
    return bound


# -- C++ ---------------------------------------------------------------------


# Note [a composite's utilities]
# A tensor utility (Note on _UTILITY_OPS in graph.rules) is a leaf where a
# kernel calls it: the kernel's own work is elsewhere. A composite operator
# has no work of its own but the operators it calls, and some do nothing but
# call utilities: Tensor.to(torch.float64) runs at::native::to, whose to_impl
# calls at::_to_copy, whose kernel makes an empty tensor and calls copy_,
# whose kernel copies with copy_kernel. So in the kernel of a composite
# operator (reached through a Composite* key), and the helpers it calls
# directly when it calls no operator itself (to's to_impl), the utility calls
# are followed when they are all the operators it calls and it calls no stub,
# loop, launch or library itself: they are its work. A composite that calls
# other operators (conv2d's convolution, beside its input.dim()) leaves its
# utilities as leaves, and so do its helpers (_convolution's subtensor, whose
# contiguous() copies only a tensor that is not).


def _composite_utilities(children: list[Node], spelled: dict[int, str], ctx: GraphContext) -> list[Node]:
    """`children` of a composite's kernel with its utility calls followed when
    they are all the work it does (Note [a composite's utilities])."""
    from kernelmap.graph.ends import other_layouts_only

    # a strided tensor's arms: not another device's, not another layout's (Note [ranking a call's ends])
    running = [c for c in children if not c.attrs.get("branch")
               and not any(other_layouts_only(x) for x in (entered_op(c).condition, *entered_op(c).attrs.get("outer_conditions", ())))]
    utilities = [c for c in running if c.kind is NodeKind.OPERATOR and c.attrs.get("utility") and isinstance(c.payload, Op)]
    inspections = [c for c in utilities if is_inspection_op(c.payload.name.name, c.payload.is_view)]  # move no element
    utilities = [c for c in utilities if c not in inspections]
    work = (NodeKind.STUB, NodeKind.LAUNCH, NodeKind.DEVICE_LOOP, NodeKind.VENDOR, NodeKind.GENERATED, NodeKind.INNER_LOOP,
            NodeKind.HEADER, NodeKind.OPS_ENTRY, NodeKind.OPERATOR)
    if not utilities or any(c.kind in work and c not in utilities and c not in inspections for c in running):
        return children
    followed = []
    for child in children:
        if child in utilities:
            del child.attrs["utility"]
            child.identity = ("op", str(child.payload.name), *child.attrs.get("given_flags", ()))
            child.attrs["identity"] = ":".join(child.identity)
            child.attrs["keep"] = True
            child = entered(child, spelled.get(id(child), ""), ctx)
        followed.append(child)
    return followed


# Note [steps that run]
# A direct call whose callee reaches no operator, stub, loop or library is
# plumbing, pruned from `stack` unless all calls are asked for. Some are
# steps a native stack shows, kept: the helpers of a structured kernel's meta
# and impl functions, three levels down (resize_reduction,
# make_reduction_from_out_ty's make_reduction and its review_reduce_result:
# every call runs them), those an operator's kernel
# calls itself (wrapped_scalar_tensor, batchCount), and a call of a function
# another translation unit defines (a .cpp of its own: at::native::resize_output
# from a kernel of another file), which the compiler cannot inline without
# link-time optimisation, which release builds do not use: a real frame, and
# its own helpers (_resize_output_check). A stub's kernel is an operator's
# kernel too (lu_factor_kernel's batchCount and matrixStride). A forwarder,
# a function whose body is one call (resize_output's `return
# _resize_output(output, shape);`, native_resize_'s `native::resize_(...)`,
# lu_factor_kernel's one call in its AT_DISPATCH lambda), uses up no level: the compiler folds it into the function next to it, and
# what it forwards to is the step the binary shows.
_META_HELPER_LEVELS = 3


_FORWARDING_CALL = re.compile(r"\s*(?:return\s+)?[\w:]+\s*(?:<[^;{}]*>)?\s*\([^;{}]*\)\s*;\s*")
# a dtype switch whose one case is a lambda (`AT_DISPATCH_FLOATING_TYPES(t, "name", [&] { ... });`)
_DTYPE_SWITCH = re.compile(r"\s*AT_DISPATCH_\w+\s*\([^{};]*\[&\]\s*(?:\(\s*\))?\s*\{(?P<body>[^{}]*)\}\s*\)\s*;\s*", re.S)


def forwarder(definition, ctx: GraphContext) -> bool:
    """Whether a definition's body is one call, passed on or returned (`bool
    resize_output(...) { return _resize_output(output, shape); }`): a forwarder,
    which the compiler folds into its caller or its callee, so that a helper
    level passes through it (Note [steps that run])."""
    location = definition.location
    if not location.end_line or location.end_line - location.line > 8:
        return False
    text = "\n".join(tree_lines(ctx, location.path)[location.line - 1 : location.end_line])
    opened, closed = text.find("{"), text.rfind("}")
    if opened < 0 or closed < opened:
        return False
    body = text[opened + 1 : closed]
    switch = _DTYPE_SWITCH.fullmatch(body)
    return _FORWARDING_CALL.fullmatch(switch.group("body") if switch else body) is not None


def _another_unit(caller, callee) -> bool:
    """Whether `callee` is defined in another translation unit (.cpp) of kernel code than `caller` (Note [steps that run])."""
    path = callee.location.path
    return path.endswith(".cpp") and path != caller.location.path and path.startswith(KERNEL_DIRS)


def _vectorized_math(node: Node) -> bool:
    """Whether a direct call's node is (every candidate of it is) in ATen's vectorized math."""
    nodes = node.children if node.kind in (NodeKind.AMBIGUOUS, NodeKind.ALTERNATIVES) and node.children else [node]
    return all(n.location is not None and n.location.path == VECTORIZED_MATH for n in nodes)


# Note [conditions around a call]
# A call is shown under its innermost case/if (`if (stable)`), but the ones
# around it in its caller decide as much: sort_kernel_impl's std::stable_sort
# is under `if (stable)` in `if (descending)`, mean_out's mean_stub under
# `else of if (iter.numel() == 0)` in `else of if (self.device().is_cpu())`.
# The index keeps them (calls.outer_id, outermost first); a call in another
# device's or dtype's arm of any of them is that arm's, and the ranking of
# ends reads all of them (Note [ranking a call's ends]; not for counting
# `else` arms, which stay the innermost's). They are carried as the node's
# `outer_conditions`.


def _code_children(node: Node, ctx: GraphContext, owner=None, span: tuple[int, int] | None = None) -> list[Node]:
    """The calls a definition makes (`owner`, else the node's own); with
    `span`, only those made in the lambda on those lines, and without it, none
    made in the lambda a kernel hands its own loop (they are below the loop)."""
    if node.kind == "generated":
        return _generated_children(node.payload, ctx)
    if node.kind == "stub":  # called: the kernels of the stub the call names; at its declaration (asked for itself): all
        at_declaration = node.location is not None and node.location == node.attrs.get("declared_at")
        kernels = _stub_children(node.payload, ctx, None if at_declaration else node.location)
        if node.passed:  # the stub call's known values, at their places of each kernel's parameters
            for kernel in kernels:
                declared = parameters(kernel.payload, ctx) if kernel.kind is NodeKind.KERNEL and kernel.payload is not None and ctx.index else None
                flags = {name: node.passed[i] for i, p in enumerate(declared or ()) if i in node.passed and (name := _parameter_name(p))
                         and _is_bool_parameter(p, name)}
                _given(kernel, flags)
        return kernels
    if isinstance(node.payload, GeneratedKernel) and owner is None:
        return _generated_kernel_children(node, ctx)
    if ctx.index is None or (node.payload is None and owner is None):
        return []
    definition = owner if owner is not None else node.payload
    sites = ctx.index.calls_from(definition)
    if span is not None:  # a lambda's calls, not the loop's own call it is written in
        sites = [s for s in sites if span[0] <= s.location.line <= span[1] and not (s.location.line == span[0] and _loop_call(s))]
    lambdas = [] if span is not None else _loop_lambdas(sites, definition, ctx)
    sites = [*sites, *_operator_sites(definition, sites, span, ctx)]  # Note [operators written as C++ operators]
    if lambdas:  # made in the lambdas its loops are given: below the loops (Note [device loop machinery])
        sites = [s for s in sites if _loop_call(s) or not any(first <= s.location.line <= last for first, last in lambdas)]
    bound = node.bound if node.bound is not None else {**_template_bindings(node, definition, ctx), **_stub_bindings(node, definition, ctx)}
    node.bound = bound  # the lambda of its own loop binds the same (Note [device loop machinery])
    passed: list[tuple[int, set[str]]] = []  # (call line, stubs) of calls that pass stubs the callee's parameters take
    spelled: dict[int, str] = {}  # utility operator calls left unexpanded: the name each call spells
    if node.known is None or span is None:  # a lambda knows what the kernel it is written in knows
        given = {**(node.known or {}), **node_flags(node)}
        node.known = {**given, **_assigned(definition, given, ctx)}  # Note [values a call passes]
    known = node.known
    token = _CALLER_VALUES.set(known)
    try:
        children = _site_children(node, ctx, definition, sites, span, lambdas, bound, passed, spelled, known)
    finally:
        _CALLER_VALUES.reset(token)
    return children


def _site_children(node: Node, ctx: GraphContext, definition, sites, span, lambdas, bound, passed, spelled, known) -> list[Node]:
    from kernelmap.graph import arms, dtypes, loops

    children = []
    for site in sites:
        condition = site.condition
        if site.preproc:
            condition = f"{condition}  #if {site.preproc}" if condition else f"#if {site.preproc}"
        branch = other_device_reason(site.condition, ctx.device) or other_device_reason(site.preproc, ctx.device)
        branch = branch or dtypes.other_dtype_reason(site.condition, ctx.dtype)
        if site.kind is EdgeKind.VENDOR:
            branch = branch or dtypes.other_precision_reason(site.callee, site.library, ctx.dtype)
        for around in site.outer:  # Note [conditions around a call]
            branch = branch or other_device_reason(around, ctx.device) or dtypes.other_dtype_reason(around, ctx.dtype)
        branch = branch or arms.cannot_run((site.condition, *site.outer), known, definition, ctx, node.rank)  # Note [arms that cannot run]
        if not branch and site.condition is None and site.preproc:  # a `#if` in a case hides the case from the index
            branch = arms.case_cannot_run(site.location.line, definition, known, ctx, node.rank)
        child = _site_node(site, definition, ctx, condition, bound)
        if child is None:
            continue
        if site.outer:
            child.attrs["outer_conditions"] = tuple(site.outer)
        if child.identity is not None and child.kind is NodeKind.KERNEL and child.payload is not None:
            stubs = _stub_bindings(child, child.payload, ctx, bound)
            if stubs:  # only the parameters the callee calls: the others' stubs stay where they are passed
                called = {c.name for c in ctx.index.calls_from(child.payload) if "::" not in c.callee and c.kind in (EdgeKind.STUB, EdgeKind.DIRECT)}
                stubs = {name: stub for name, stub in stubs.items() if name in called}
            child.bound = {**_template_bindings(child, child.payload, ctx), **stubs}
            if stubs:
                passed.append((site.location.line, set(stubs.values())))
            if child.bound:  # each instantiation is its own: sortCommon with SmallBitonicSort, then with MediumRadixSort
                child.identity = (*child.identity, *sorted(child.bound.items()))
                child.attrs["identity"] = ":".join(str(part) for part in child.identity)
        if site.kind is EdgeKind.DIRECT and _vectorized_math(child):
            for n in (child, *child.children):
                n.attrs["keep"] = True
        if site.preproc and compiled(site.preproc, ctx) is False:
            not_compiled(child, site.preproc, ctx)
            children.append(child)
            continue
        if branch:
            child.attrs["branch"] = branch
            if not ctx.all_branches:
                child.leaf().payload = None
        elif site.kind is EdgeKind.DIRECT and child.kind in (NodeKind.KERNEL, NodeKind.ALTERNATIVES, NodeKind.AMBIGUOUS):
            work = dtype_work(site.location.line, site.callee, definition, node, child.payload if child.kind is NodeKind.KERNEL else None, ctx)
            if work is not None:
                child.attrs["dtype_work"] = work
                child.attrs["keep"] = True
        elif child.kind is NodeKind.OPERATOR and child.identity is not None:
            child = entered(child, site.callee, ctx)  # Note [the way into the dispatcher]
        elif child.kind is NodeKind.OPERATOR and child.attrs.get("utility"):
            spelled[id(child)] = site.callee
        if site.kind is EdgeKind.DIRECT and child.kind is NodeKind.KERNEL and not child.attrs.get("branch") and child.payload is not None:
            if span is not None or (node.loop_work and is_template(child.payload, ctx)):
                child.loop_work = True  # the lambda's work (layer_norm's RowwiseMoments), and the templates it runs (RowwiseMomentsImpl)
                child.attrs["keep"] = True
            if node.helper_levels > 0 or _another_unit(definition, child.payload):  # Note [steps that run]
                child.attrs["keep"] = True
                # a forwarder, calling or called, uses up no level: the compiler folds it into its neighbour
                spent = 0 if forwarder(definition, ctx) or forwarder(child.payload, ctx) else 1
                child.helper_levels = max(node.helper_levels - spent, 1 if _another_unit(definition, child.payload) else 0)
        children.append(child)
    for target, site in _callbacks(definition, ctx):
        if (span is not None and not span[0] <= site.line <= span[1]) or any(first <= site.line <= last for first, last in lambdas):
            continue
        child = cpp_node(target, ctx, EdgeKind.DIRECT, "passed as a function argument", site)
        work = dtype_work(site.line, target.name, definition, node, target, ctx)
        if work is not None:
            child.attrs["dtype_work"] = work
            child.attrs["keep"] = True
        children.append(child)
    if span is None:
        children.extend(loops.iteration_nodes(node, definition, ctx))  # a CPU device loop's, called or asked for
    if node.composite and not ctx.all_calls:
        children = _composite_utilities(children, spelled, ctx)
        if not any(entered_op(c).kind is NodeKind.OPERATOR and not c.attrs.get("branch") for c in children):
            for child in children:  # a composite that calls no operator itself does its work in its helpers (to's to_impl)
                if child.kind is NodeKind.KERNEL and child.via is EdgeKind.DIRECT:
                    child.composite = True
    if passed:  # a stub passed to a callee that calls it is shown there, under the callee's test of it
        children = [c for c in children if not (c.kind is NodeKind.STUB and c.via is EdgeKind.STUB and c.location is not None and any(
            c.payload in taken and line <= c.location.line < line + 12 for line, taken in passed))]
    return dedupe(children)


# A function named as an argument: `split_batch_dim_to_32bit_out(..., raw_cudnn_convolution_forward_out_32bit)`.
_ARGUMENT_NAME = r"(?:^|[(,])\s*&?\s*(?P<qualifier>(?:[\w:]*::)?)(?P<name>{name})\s*(?=[,)])"


_ANY_ARGUMENT_NAME = re.compile(_ARGUMENT_NAME.format(name=r"\w+"))


def _callbacks(definition, ctx: GraphContext) -> list[tuple[Any, Location]]:
    """Functions of the same file that `definition` passes as arguments: calls
    made through a function pointer, which no call site shows."""
    location = definition.location
    lines = tree_lines(ctx, location.path)
    by_short = _by_short_name(ctx.index, location.path)
    if not any(d.name != definition.name for ds in by_short.values() for d in ds):
        return []
    # comments and strings blanked, lines kept: `// inv, inverse, cholesky_inverse, etc.` passes nothing
    body = _CODE_ONLY.sub(_blank_keeping_lines, "\n".join(lines[location.line - 1 : location.end_line or location.line])).split("\n")
    head = "\n".join(body[: next((i for i, text in enumerate(body) if "{" in text), 0) + 1])
    text = "\n".join(body)
    found = []
    for number in range(location.line + 1, (location.end_line or location.line) + 1):  # not the signature
        line = body[number - location.line] if number - location.line < len(body) else ""
        if "," not in line and ")" not in line:  # an argument is followed by one of them
            continue
        for m in _ANY_ARGUMENT_NAME.finditer(line):
            qualifier, name = m.group("qualifier"), m.group("name")
            if name not in by_short:
                continue
            # `RUN_K(INDEX_T, DIM, sbtopk::launch)`: the qualifier tells sbtopk::launch from mbtopk::launch
            named = [d for d in by_short.get(name, ()) if d.name != definition.name and f"::{d.lookup}".endswith(f"::{qualifier}{name}")]
            target = named[0] if named else None
            # a parameter or local variable that shares a function's name (`min`) is no callback
            # (a plain substring test first: every pattern below names `name`, and compiling one per name is dear)
            if target is None or (name in head and re.search(rf"\b{name}\b", head)) or re.search(rf"\b{name}\s*=[^=]|[\w>&*]\s+{name}\s*[;=({{]", text):
                continue
            found.append((target, Location(location.path, number, origin=location.origin)))
    return found


def _site_node(site, caller, ctx: GraphContext, condition: str | None, bound: dict[str, str] | None = None) -> Node | None:
    if bound and site.callee.startswith(".") and ctx.index is not None:
        # Note [template arguments]: `sorter.template sort<A>(...)` on a `Sorter sorter` calls the method of the
        # class the call site binds Sorter to (a method named like an operator included: it is no Tensor's)
        receiver = receiver_type(site, caller, ctx)
        argument = bound.get(receiver) if receiver is not None else None
        if argument is not None:
            callee = f"{argument}::{site.callee[1:]}"
            site = dataclasses.replace(site, callee=callee, kind=EdgeKind.DIRECT, op=None)
            condition = f"{condition}; {receiver} = {argument}" if condition else f"{receiver} = {argument}"
    kind = site.kind
    if (kind is EdgeKind.STUB or (kind is EdgeKind.DIRECT and bound and site.name in bound)) and "::" not in site.callee \
            and site.name in _parameter_names(caller, ctx):
        # Note [stub parameters]: a call through a parameter (scatter_impl's `FillStub& fill_stub`, not the
        # global fill_stub; a helper's `Stub& stub`) calls the stub its caller passes
        passed = (bound or {}).get(site.name)
        if passed is not None and passed.endswith("_stub"):
            condition = f"{condition}; {site.name} = {passed}" if condition else f"{site.name} = {passed}"
            return Node(passed, "stub", site.location, EdgeKind.STUB, condition, {"call_site": str(site.location)}, payload=passed, identity=("stub", passed))
        if kind is EdgeKind.STUB:
            return None
    if kind is EdgeKind.DISPATCHER:
        if not site.op or (site.callee.startswith(".") and ctx.index is not None and not _tensor_receiver(site, caller, ctx)):
            return _vectorized_method(site, caller, ctx, condition) if site.callee.startswith(".") and ctx.index is not None else None
        try:
            op = ctx.catalog.resolve(site.op)[0]
        except KernelmapError:
            return Node(site.callee, "op", site.location, kind, condition, {"unresolved": f"{site.op} is not in the catalog"})
        op = by_literal_types(by_argument_count(by_out_spelling(op, site, ctx), site, ctx), site, ctx)
        node = op_node(op, ctx, kind, condition, site.location)
        _given(node, literal_flags(op, site, ctx))
        # a utility's own kernel calling its other overload is the utility's work, not plumbing
        # (at::native::arange calls arange.start_out, whose loop fills the range)
        if (is_utility_op(op.name.name, op.is_view) and not _own_overload(op.name.name, caller) and not _utility_kernel(caller, ctx)
                and not is_view_alias(op)):
            node.attrs["utility"] = True
            if not ctx.all_calls:
                node.leaf()
        return node
    if kind is EdgeKind.STUB:
        node = Node(site.name, "stub", site.location, kind, condition, {"call_site": str(site.location)}, payload=site.name, identity=("stub", site.name))
        known = _CALLER_VALUES.get()
        arguments = call_arguments(site, ctx) if known or ctx.index is not None else None
        passed = {i: v for i, a in enumerate((arguments or [])[1:]) if (v := _argument_value(a, known)) is not None}
        if passed:  # a stub called with known flags: its kernels' arms are decided by them (Note [values a call passes])
            node.passed = passed
            node.identity = (*node.identity, *(f"#{i}={'true' if v else 'false'}" for i, v in sorted(passed.items())))
            node.attrs["identity"] = ":".join(node.identity)
        return node
    if kind is EdgeKind.LAUNCH:
        if launch_kind(site.callee) is NodeKind.LAUNCH and ctx.index is not None:
            # a host function named like a launcher (launch_clamp_scalar) is a call to follow, not a leaf
            hosts = [d for d in _resolve_direct(site, caller, ctx) if d.symbol.kind != "global_kernel"]
            if hosts:
                return cpp_node(hosts[0], ctx, EdgeKind.DIRECT, condition, site.location)
        if launch_kind(site.callee) is NodeKind.DEVICE_LOOP and ctx.index is not None:
            loop = _device_loop(site, caller, ctx, condition)
            if loop is not None:
                return loop
        attrs = {"call_site": site.location}
        kernels = _nearest(ctx.index.global_kernels(site.name), site.callee, caller) if ctx.index else []
        location = kernels[0].location if len(kernels) == 1 else site.location
        return Node(site.callee, launch_kind(site.callee), location, kind, condition, attrs)
    if kind is EdgeKind.VENDOR:
        # a name the vendor table matches that the tree defines is PyTorch's own function: its
        # body calls the library (mkl/LinearAlgebra.cpp's mkl_gemm_batched calls cblas_sgemm_batch)
        own = _resolve_direct(site, caller, ctx) if ctx.index is not None else []
        if own:
            site = dataclasses.replace(site, kind=EdgeKind.DIRECT)
            return _site_node(site, caller, ctx, condition, bound)
        return vendor_node(site.callee, site.library, site.location, kind, condition)
    # direct: resolve to definitions in the tree, namespace-aware
    spelled = site  # as the call is written, for reading its arguments
    if _names_template_parameter(site.callee, caller, ctx):
        # Note [template arguments]: `bernoulli_scalar_kernel<RNG>()(self, p, gen)` in `template<template<typename>
        # class bernoulli_scalar_kernel, ...> bernoulli_impl_` calls what the instantiation passes, not the name
        parameter, _, rest = site.callee.partition("::")
        argument = (bound or {}).get(parameter)
        if argument is None:
            return Node(site.callee, "kernel", None, kind, condition,
                        {"call_site": site.location, "unresolved": "a template parameter of its caller: each instantiation passes its own"}).leaf()
        callee = f"{argument}::{rest}" if rest else argument
        site = dataclasses.replace(site, callee=callee, name=callee.rsplit("::", 1)[-1])
        condition = f"{condition}; {parameter} = {argument}" if condition else f"{parameter} = {argument}"
    if (site.callee in _ITERATOR_LOOPS or site.callee in _PARALLEL_LOOPS) and ctx.index is not None:
        loop = _own_loop(site, caller, ctx, condition)
        if loop is not None:
            return loop
    candidates = _resolve_direct(site, caller, ctx)
    if not candidates:
        op = _unqualified_operator(spelled, caller, ctx)
        if op is None:
            return _vectorized_method(site, caller, ctx, condition) if site.callee.startswith(".") else None
        return _site_node(dataclasses.replace(spelled, kind=EdgeKind.DISPATCHER, op=op), caller, ctx, condition, bound)
    if _is_utility_kernel(site.name, candidates, ctx) and not _own_overload(site.name, caller) and not _utility_kernel(caller, ctx):
        # `copy_(nt, t)` in Shape.cu calls at::native::copy_ itself: the same tensor
        # plumbing as `nt.copy_(t)` through the dispatcher, shown and not expanded
        node = cpp_node(candidates[0], ctx, kind, condition, site.location)
        node.attrs["utility"] = True
        return node if ctx.all_calls else node.leaf()
    if len(candidates) > 1:
        candidates = by_argument_types(by_arity(by_enable_if(candidates, ctx), spelled, ctx), spelled, ctx)
    if len(candidates) > 1:
        typed = by_dtype(candidates, ctx)
        if len(typed) > 1:  # the one the build compiles (mkl_gemm_batched for float, beside its placeholder without MKL)
            typed = [d for d in typed if compiled(d.symbol.condition, ctx) is not False] or typed
        if len(typed) == 1:
            node = cpp_node(typed[0], ctx, kind, condition, site.location)
            node.attrs["dtype_case"] = f"{ctx.dtype}: the {_DTYPE_TYPES[ctx.dtype][0]} overload of {len(candidates)}"
            return _given(node, _literal_parameters(typed[0], spelled, ctx))
        candidates, chosen = by_class_specialisation(candidates, ctx)
        if len(candidates) == 1 and chosen:
            node = cpp_node(candidates[0], ctx, kind, condition, site.location)
            node.attrs["dtype_case"] = chosen
            return _given(node, _literal_parameters(candidates[0], spelled, ctx))
    if len(candidates) == 1:
        return _given(cpp_node(candidates[0], ctx, kind, condition, site.location), _literal_parameters(candidates[0], spelled, ctx))
    built = [d for d in candidates if compiled(d.symbol.condition, ctx) is not False]
    if _all_distinct_conditions(candidates) or (built and len(built) < len(candidates) and _one_symbol(built)):
        group = Node(site.callee, "alternatives", site.location, kind, condition, {"reason": "defined once per preprocessor condition; a build compiles one"})
        group.children = [
            not_compiled(_given(cpp_node(d, ctx, kind, f"#if {d.symbol.condition}" if d.symbol.condition else None, site.location),
                                _literal_parameters(d, spelled, ctx)), d.symbol.condition, ctx)
            for d in by_build(candidates, ctx)
        ]
        return group
    group = Node(site.callee, "ambiguous", site.location, kind, condition, {"candidates": len(candidates), "reason": "several definitions match; ranked by namespace and file"})
    group.children = [cpp_node(d, ctx, kind) for d in candidates[:10]]
    for child in group.children:
        child.leaf()  # shown, not expanded: the call is ambiguous
    return group


# Note [vectorized math]
# A CPU kernel's Vectorized lambda (`[=](Vectorized<scalar_t> a) { return
# a.exp(); }`, softmax's `(x - Vec(max_input)).exp()`) calls a method of
# at::vec::Vectorized, a class specialised per element type and per CPU
# capability in ATen/cpu/vec: vec512/vec512_float.h for a kernel compiled for
# AVX512, vec256/vec256_float.h for AVX2. Where the method's body calls a
# library (SLEEF: `Sleef_expf16_u10(values)`), it is where the element's math
# is done, and is shown at its definition for the selected dtype, one per
# capability; a method that calls none (operator+, neg) is the loop's own
# arithmetic and is not shown.
_VECTORIZED_TYPE = re.compile(r"(?:^|::)(?:Vectorized\b|Vec$|[a-z]+Vec$|vec_t$|Vectorized16\b)")
_VECTOR_HEADERS = {"float32": "float", "float64": "double"}


def _vectorized_method(site, caller, ctx: GraphContext, condition: str | None) -> Node | None:
    """The Vectorized method a member call on a vector runs, per CPU capability
    (Note [vectorized math]); None when the receiver is no vector, or the
    method calls no library."""
    suffix = _VECTOR_HEADERS.get(ctx.dtype)
    if suffix is None or ctx.device != "cpu":
        return None
    method = site.callee[1:]
    headers = {f"aten/src/ATen/cpu/vec/vec512/vec512_{suffix}.h": "AVX512", f"aten/src/ATen/cpu/vec/vec256/vec256_{suffix}.h": "AVX2"}
    cache = ctx.__dict__.setdefault("_vectorized_methods", {})  # asked of many member calls: once per method
    if method not in cache:
        cache[method] = [d for d in ctx.index.definitions(f"at::vec::CPU_CAPABILITY::Vectorized::{method}")
                         if d.location.path in headers and _calls_library(d, ctx)]
    found = list(cache[method])
    if not found:
        return None
    declared = receiver_declarations(site, caller, ctx) or receiver_declarations(site, caller, ctx, through_call=True)
    if not declared or not _VECTORIZED_TYPE.search(re.sub(r"<.*", "", declared[-1]).strip()):
        return None
    found.sort(key=lambda d: list(headers).index(d.location.path))
    if len(found) == 1:
        node = cpp_node(found[0], ctx, EdgeKind.DIRECT, condition, site.location)
        node.attrs["keep"] = True
        return node
    group = Node(f"at::vec::Vectorized::{method}", NodeKind.ALTERNATIVES, site.location, EdgeKind.DIRECT, condition,
                 {"reason": "Vectorized is defined once per CPU capability: a kernel runs the one it was compiled for"})
    for d in found:
        child = cpp_node(d, ctx, EdgeKind.DIRECT, f"the kernel compiled for {headers[d.location.path]}", site.location)
        child.attrs["keep"] = True
        group.children.append(child)
    return group


def _calls_library(definition, ctx: GraphContext) -> bool:
    cache = ctx.__dict__.setdefault("_calls_library", {})
    key = (definition.name, str(definition.location))
    if key not in cache:
        cache[key] = any(s.kind is EdgeKind.VENDOR for s in ctx.index.calls_from(definition))
    return cache[key]


# Receivers whose methods named like an operator may be Tensor methods, which call
# it through the dispatcher: a Tensor, an alias (`using SparseTensor = Tensor;`),
# or what gives one through `->` (TensorArg, OptionalTensorRef, MaybeOwned<Tensor>).
_TENSOR_RECEIVERS = frozenset(("Variable", "MaybeOwned", "ExclusivelyOwned", "IValue", "auto", "T", "scalar_t"))


def _tensor_receiver(site, caller, ctx: GraphContext) -> bool:
    """Whether a member call named like an operator (`.equal`, `.add_`) may be
    made on a Tensor: not when the receiver's declaration nearest above the
    call has another type (`exp_scalar.equal(.5)` on a `const Scalar&
    exp_scalar` is c10::Scalar::equal; `a.exp()` in sigmoid_kernel's
    Vectorized lambda, on its `Vectorized<scalar_t> a`, is Vectorized::exp,
    though the scalar lambda above declares a `scalar_t a`: no operator).
    A receiver that is an expression (another call's result, or one in
    parentheses) is taken to be a Tensor unless the first variable in it is
    of another type (`x_vec.neg().exp()` on a `Vectorized<scalar_t> x_vec`,
    `(x - Vec(max_input)).exp()` on a `Vec x`: Vectorized's methods and
    operators give Vectorized).
    True when no declaration can be read. Never in ATen's vectorized math,
    which works on raw arrays and Vectorized (`x.log1p()` on a `vec_t x` in
    vlog1p)."""
    if caller.location.path == VECTORIZED_MATH:
        return False
    declared = receiver_declarations(site, caller, ctx) or receiver_declarations(site, caller, ctx, through_call=True)
    return not declared or _tensor_like(declared[-1])


# Note [unqualified operator calls]
# rms_norm_symint, in namespace at::native, calls `rsqrt(at::pow(...)...)`:
# no rsqrt is defined in at::native (structured kernels define
# structured_rsqrt_out), so C++ finds at::rsqrt, the operator's function, in
# the enclosing namespace and by the Tensor argument's. An unqualified call
# that resolves to no definition, made in namespace at, of the name of an
# operator with a function variant (or its `_out`, `_symint` spelling), that
# passes a Tensor, is that operator's call through the dispatcher. A Tensor:
# a variable declared one nearest above the call, or a call of at::
# (`at::pow(x, 2).mean(...)`); not the scalars of `fmax(a, b)` in a CUDA
# kernel's lambda, CUDA's own function. Likewise a method call spelled with
# `_symint` on a Tensor (tile's `self.repeat_symint(reps)`, chunk's
# `self.split_symint(...)`) is the method TensorBody.h declares for the
# operator of the base name, which calls it through the dispatcher.
_TENSOR_DECLARED = re.compile(r"(?:const\s+)?(?:at::)?Tensor\s*&{0,2}")
_AT_CALL = re.compile(r"at::\w+\s*\(")


def _unqualified_operator(site, caller, ctx: GraphContext) -> str | None:
    """The operator an unqualified call of no definition reaches (Note
    [unqualified operator calls]), by its base name; None when it is none."""
    if "::" in site.callee or caller is None or not caller.name.startswith("at::") or ctx.index is None:
        return None
    if site.callee.startswith("."):  # `self.repeat_symint(reps)`: Tensor's method of that spelling (TensorBody.h)
        base = site.name.removesuffix("_symint")
        if base == site.name or not any("method" in op.variants for op in ctx.catalog.overloads(base)):
            return None
        return base if _tensor_receiver(site, caller, ctx) else None
    from kernelmap.source.facts import FUNCTION_SUFFIXES

    spelled_as = (site.name, *(site.name.removesuffix(s) for s in FUNCTION_SUFFIXES if site.name.endswith(s)))
    base = next((b for b in spelled_as if b and any("function" in op.variants for op in ctx.catalog.overloads(b))), None)
    if base is None:
        return None
    lines = tree_lines(ctx, site.location.path)
    for argument in call_arguments(site, ctx) or ():
        if _AT_CALL.match(argument):
            return base
        if re.fullmatch(r"[A-Za-z_]\w*", argument):
            declared = _declarations(argument, site, caller, lines)
            if declared and _TENSOR_DECLARED.fullmatch(declared[-1].strip()):
                return base
    return None


def _tensor_like(declared: str) -> bool:
    last = declared.rsplit("::", 1)[-1]
    # a lowercase name unqualified may be a template's parameter (`scalar_t`, `T`) or `auto`; `ideep::tensor` is a class
    return ("Tensor" in last and "Iterator" not in last) or last in _TENSOR_RECEIVERS or (not last[:1].isupper() and "::" not in declared)


# Note [template arguments]
# `bernoulli_impl_<BernoulliStub, Generator>(self, p, gen)` instantiates
# `template<template<typename> class bernoulli_scalar_kernel, typename RNG>
# Tensor& bernoulli_impl_(...)`, whose body calls
# `bernoulli_scalar_kernel<RNG>()(self, p, gen)`: the call runs
# BernoulliStub's operator(), which calls bernoulli_scalar_stub. The template
# arguments a call spells are bound, in order, to the parameters of the
# callee's template head; a call in its body of one of them is a call of the
# argument. A call that spells no template arguments binds by deduction where
# it passes a temporary of a named class for a parameter declared with a
# template parameter's type alone: `sortCommon(SmallBitonicSort{}, ...)` of
# `template <typename Sorter> void sortCommon(Sorter sorter, ...)` binds
# Sorter, and `sorter.template sort<A>(...)` in its body (a member call on a
# receiver of that type) runs SmallBitonicSort::sort. A parameter no call binds
# is unresolved (never resolved by its name: at::native::bernoulli_scalar_kernel
# of cuda/ was drawn for CPU).


def _template_bindings(node: Node, definition, ctx: GraphContext) -> dict[str, str]:
    """The template parameters of `definition` (read from its head) bound
    to the arguments its call site spells (`bernoulli_impl_<BernoulliStub,
    Generator>(...)`); empty when either cannot be read."""
    site = node.attrs.get("call_site")
    if not isinstance(site, Location) or ctx.index is None:
        return {}
    short = definition.name.rsplit("::", 1)[-1]
    lines = tree_lines(ctx, site.path)
    text = "\n".join(lines[site.line - 1 : site.line + 3])
    starts = _name_followed(text, short, _ANGLE_TAIL)  # `\bNAME\s*<`, without a pattern per name
    m = _ANGLE_TAIL.match(text, starts[0] + len(short)) if starts else None
    head = declaration_head(definition, ctx)
    h = re.search(r"\btemplate\s*<", head)
    if h is None:
        return {}
    parameters = _template_parameters(head, h.end())
    if m is None:
        return _deduced_bindings(site, short, definition, parameters, ctx)
    arguments = _angle_items(text, m.end())
    bound = {p: a for p, a in zip(parameters, arguments) if p and re.fullmatch(r"[A-Za-z_][\w:]*", a)}
    if len(arguments) < len(parameters):  # `run_launcher<scalar_t, index_t>(..., KthValueLauncher(k))`: the rest deduced
        rest = parameters[len(arguments):]
        bound.update(_deduced_bindings(site, short, definition, rest, ctx))
    return bound


# A temporary of a named class passed as an argument: `SmallBitonicSort{}`, `ReduceAdd()`, `KthValueLauncher(k)`.
_CLASS_TEMPORARY = re.compile(r"((?:[A-Za-z_]\w*::)*[A-Z]\w*(?:<[^<>(){}]*>)?)\s*(?:\{[^{}]*\}|\((?:[^()]|\([^()]*\))*\))")


def _deduced_bindings(site: Location, short: str, definition, parameters: list[str], ctx: GraphContext) -> dict[str, str]:
    """Template parameters a call binds by deduction (Note [template
    arguments]): a function parameter declared with a template parameter's
    type alone (`template <typename Sorter> void sortCommon(Sorter sorter,
    ...)`, also `const Sorter&`, `Sorter&&`), given a temporary of a named
    class (`sortCommon(SmallBitonicSort{}, ...)`, `run_launcher<scalar_t,
    index_t>(..., KthValueLauncher(k))`), binds it to that class."""
    wanted = {p for p in parameters if p}
    lines = tree_lines(ctx, definition.location.path)
    text = "\n".join(lines[definition.location.line - 1 : definition.location.line + 12])
    opened = re.search(rf"\b{re.escape(short)}\s*(?:<[^(){{}};]*>)?\s*\(", text)
    declared = _bracket_items(text, opened.end(), "([{<", ")]}>") if opened else None
    if not declared or not any(p in " ".join(declared) for p in wanted):
        return {}
    arguments = call_arguments(_Spelled(site, short, short), ctx)
    bound = {}
    for declaration, argument in zip(declared, arguments or ()):
        words = re.findall(r"[\w:]+", _COMMENT.sub("", declaration.split("=", 1)[0]))
        words = [w for w in words if w not in ("const", "volatile")]
        temporary = _CLASS_TEMPORARY.fullmatch(argument)
        if len(words) == 2 and words[0] in wanted and temporary is not None:
            bound.setdefault(words[0], temporary.group(1))
    return bound


def _names_template_parameter(callee: str, caller, ctx: GraphContext) -> bool:
    """Whether a call's callee (its first name: `kernel_t::operator()` ->
    `kernel_t`) is a type parameter of the caller's template head."""
    if caller is None or ctx.index is None or callee.startswith(("::", ".")):
        return False
    name = callee.split("::", 1)[0]
    head = declaration_head(caller, ctx)
    if "template" not in head or name not in head:
        return False
    return any(name in _template_parameters(head, m.end()) for m in _TEMPLATE_HEAD.finditer(head))


def is_view_alias(op: Op) -> bool:
    """A view operator other than the utilities by name, whose kernel is
    composite implicit (mT, mH, adjoint, swapaxes): another spelling of a view
    (Note [a utility asked for]). The binary runs its kernel, then the view it
    calls: followed to that view, which stays a utility."""
    return op.is_view and op.kind.value == "composite implicit" and not is_utility_op(op.name.name, False)


def _own_overload(name: str, caller) -> bool:
    """Whether a call of utility `name` is made by that utility's own kernel
    (at::native::arange calling another overload of arange, or arange_out)."""
    return caller is not None and caller.name.rsplit("::", 1)[-1] in (name, f"{name}_out", f"{name}_symint", f"{name}_out_symint")


# Note [a utility asked for]
# A tensor utility (Note on _UTILITY_OPS in graph.rules) is a leaf where a
# kernel calls it. Asked for itself, its kernel's calls of other utilities are
# its work: at::native::stack concatenates with at::cat, zero_ fills with
# fill_. They are followed from the asked operator's own kernels only, not
# from the utilities they reach in turn (flatten's reshape is followed, and
# the clone reshape makes of a tensor no view can describe is not), and not
# for a view, which moves no element (moveaxis's movedim sorts its dims).
# A view spelled otherwise than the views by name, with a composite implicit
# kernel (mT, mH, adjoint: `is_view_alias`), is not a leaf where it is called:
# the binary runs its kernel and helpers (mT's _adjoint) down to the view
# they call (transpose), which is.
_ASKED_UTILITY: contextvars.ContextVar[str | None] = contextvars.ContextVar("asked_utility", default=None)


def _utility_asked(root: Node) -> str | None:
    """The base name of the utility operator a tree is grown for, if it is one."""
    op = root.payload if root.kind is NodeKind.OPERATOR else None
    return op.name.name if isinstance(op, Op) and not op.is_view and is_utility_op(op.name.name, False) else None


def _utility_kernel(caller, ctx: GraphContext) -> bool:
    """Whether `caller` is a kernel of the utility asked for (Note [a utility asked for])."""
    asked = _ASKED_UTILITY.get()
    return asked is not None and _own_overload(asked, caller)


def _is_utility_kernel(name: str, candidates: list, ctx: GraphContext) -> bool:
    """Whether a direct call is of the native kernel of a utility operator (copy_, fill_, zero_)."""
    if not is_utility_op(name, False) or not all(d.lookup.startswith("at::native::") for d in candidates):
        return False
    return bool(ctx.catalog.overloads(name))  # an operator of that name (`copy_` is aten::copy_)


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


def _stub_children(stub: str, ctx: GraphContext, call_site: Location | None = None) -> list[Node]:
    key = DEVICE_KEYS[ctx.device]
    nodes = []
    registrations = ctx.index.stub_registrations(stub) if ctx.index else []
    for reg in registrations:
        if reg.device != key or not reg.kernel:
            continue
        if call_site is not None and not _same_stub(stub, call_site, reg, ctx):
            continue
        definitions = ctx.index.definitions(reg.kernel)
        local = [d for d in definitions if d.location.path == reg.location.path] or definitions
        condition = f"REGISTER_DISPATCH for {reg.device}" + (f" ({reg.capability})" if reg.capability else "")
        if not local:
            nodes.append(Node(reg.kernel, "kernel", reg.location, EdgeKind.STUB, condition, {"unresolved": "kernel definition not found"}))
        for d in local[:3]:
            node = cpp_node(d, ctx, EdgeKind.STUB, condition)
            node.helper_levels = 1  # a stub kernel's own helpers run with it, as an operator kernel's do (Note [steps that run])
            nodes.append(not_compiled(node, reg.condition or d.symbol.condition, ctx))
    if not nodes and ctx.generated is not None:
        nodes.extend(_generated_stub_kernels(stub, ctx))
    if key == "CPU" and nodes:
        nodes[:0] = _stub_machinery(ctx, _avx512_slot(registrations, nodes, ctx))
    if not nodes:
        reason = f"no {key} registration of {stub} in the tree"
        nodes.append(Node(f"{stub} [{key}]", "unresolved", None, EdgeKind.STUB, None, {"reason": reason}))
    return nodes


def _stub_qualifier(path: str, line: int, stub: str, ctx: GraphContext) -> str | None:
    """The namespace written before `stub` on a line (`cpublas::copy_stub` -> "cpublas"); None when unqualified."""
    lines = tree_lines(ctx, path)
    text = lines[line - 1] if 0 < line <= len(lines) else ""
    m = re.search(rf"((?:\w+::)+){re.escape(stub)}\b", text)
    return m.group(1).rstrip(":").removeprefix("at::native").strip(":") or None if m else None


def _same_stub(stub: str, call_site: Location, reg, ctx: GraphContext) -> bool:
    """Whether a registration is of the stub a call names: stubs of one name
    live in several namespaces (Copy.cpp's `copy_stub` is at::native's;
    BlasKernel.cpp registers `cpublas::copy_stub`). A registration written
    with a namespace matches a call in that namespace or written with it."""
    written = _stub_qualifier(reg.location.path, reg.location.line, stub, ctx)
    if written is None:
        return True
    if _stub_qualifier(call_site.path, call_site.line, stub, ctx) == written:
        return True
    caller = ctx.index.definition_at(call_site.path, call_site.line)
    return caller is not None and f"::{written}::" in f"::{caller.lookup}"


def _avx512_slot(registrations, nodes: list[Node], ctx: GraphContext) -> bool | None:
    """Whether a CPU stub's kernel fills the AVX512 slot: `REGISTER_DISPATCH` in
    a native/cpu file compiled for AVX512 registers nullptr there (DispatchStub.h),
    `ALSO_REGISTER_AVX512_DISPATCH` registers the kernel. None when unread."""
    texts = [tree_lines(ctx, r.location.path)[r.location.line - 1] for r in registrations
             if r.device == "CPU" and ctx.index is not None and r.location.line <= len(tree_lines(ctx, r.location.path))]
    texts += [u.definition.text for n in nodes if n.kind is NodeKind.GENERATED and n.payload for u in n.payload[1]]
    if any("ALSO_REGISTER_AVX512_DISPATCH" in t for t in texts):
        return True
    if any(re.search(r"\bREGISTER_DISPATCH\s*\(", t) for t in texts):
        return False
    return None


def _stub_machinery(ctx: GraphContext, avx512: bool | None = None) -> list[Node]:
    """How a CPU stub call picks its kernel: `DispatchStub::operator()` asks
    `DispatchStubImpl::choose_cpu_impl` once for the CPU capability (AVX512,
    AVX2, DEFAULT); the REGISTER_DISPATCH slot of that capability runs, and
    an empty AVX512 slot falls back to AVX2's (`avx512`: whether the kernel
    fills it). Needs an indexed tree (DispatchStub.cpp is not in the wheel)."""
    if ctx.index is None:
        return []
    found = {name: ctx.index.definitions(name) for name in ("at::native::DispatchStub::operator()", "at::native::DispatchStubImpl::choose_cpu_impl")}
    call, choose = found["at::native::DispatchStub::operator()"], found["at::native::DispatchStubImpl::choose_cpu_impl"]
    if not call:
        return []
    node = cpp_node(call[0], ctx, EdgeKind.DIRECT, "the stub's call operator").leaf()
    node.attrs["keep"] = True
    if choose:
        why = "CPU capability chosen on the first call"
        if avx512 is False:
            why += "; REGISTER_DISPATCH leaves the AVX512 slot nullptr, so an AVX512 CPU runs the AVX2 kernel"
        elif avx512:
            why += "; ALSO_REGISTER_AVX512_DISPATCH fills the AVX512 slot: an AVX512 CPU runs the AVX512 kernel"
        child = cpp_node(choose[0], ctx, EdgeKind.DIRECT, why).leaf()
        child.attrs["keep"] = True
        node.children = [child]
    return [node]


def _ufunc_node(kernel, siblings, via: EdgeKind, condition: str | None) -> Node:
    location = kernel.definition.location
    return Node(kernel.name, "generated", location, via, condition, payload=(kernel, tuple(siblings)), identity=("ufunc", kernel.name, str(location)))


def _generated_stub_kernels(stub: str, ctx: GraphContext) -> list[Node]:
    """Stubs whose CPU kernel the ufunc codegen registers (add_stub): find it in UfuncCPUKernel_<op>.cpp."""
    from kernelmap.codegen import Layer

    base = stub.removesuffix("_stub")
    nodes = []
    for op in ctx.catalog.overloads(base):
        if not op.ufunc_inner_loop:
            continue
        code = _generated(str(op.name), ctx, (Layer.UFUNC,))
        ufunc = [u for u in (code.ufunc if code else ()) if u.key == DEVICE_KEYS[ctx.device]]
        registered = {m.group(1) for u in ufunc for m in [re.search(rf"REGISTER_DISPATCH\(\s*{stub}\s*,\s*&?(\w+)", u.definition.text)] if m}
        condition = f"REGISTER_DISPATCH({stub}) for {DEVICE_KEYS[ctx.device]} in generated code"
        nodes.extend(_ufunc_node(u, ufunc, EdgeKind.STUB, condition) for u in ufunc if u.name in registered)
    return nodes


# Note [generated view copies]
# The `*_copy` variant of every view (t_copy, transpose_copy, view_copy,
# unbind_copy...) has a kernel the tree does not hold: torchgen writes it into
# CompositeViewCopyKernels.cpp (`auto output = at::_ops::t::call(self); return
# output.clone(...)`). It is read from the generated files: a kernel whose
# children are the operators its body calls, through `at::_ops::<op>::call`
# or a Tensor method; the view it copies is the work of the copy asked for
# (Note [a utility asked for]).
_VIEW_COPY_KERNELS = "build/aten/src/ATen/CompositeViewCopyKernels.cpp"


@dataclasses.dataclass(frozen=True)
class GeneratedKernel:
    """A native kernel torchgen writes (Note [generated view copies]): its text and where it is."""

    text: str
    location: Location


def _view_copy_kernel(symbol: str, ctx: GraphContext) -> Node | None:
    """The generated kernel a view's `*_copy` operator names, when the tree has no definition of it."""
    if ctx.generated is None or not symbol.startswith("at::native::"):
        return None
    rows = ctx.generated.defs(symbol.rsplit("::", 1)[-1], _VIEW_COPY_KERNELS)
    if not rows:
        return None
    excerpt = ctx.generated.definition(rows[0][0], rows[0][1])
    return Node(symbol, "kernel", excerpt.location, EdgeKind.DISPATCHER, "generated: the view, then a copy of what it shows",
                {"keep": True}, payload=GeneratedKernel(excerpt.text, excerpt.location), identity=("generated kernel", symbol))


def _generated_kernel_children(node: Node, ctx: GraphContext) -> list[Node]:
    """The operators a generated kernel's body calls (Note [generated view copies])."""
    kernel: GeneratedKernel = node.payload
    structs = ctx.__dict__.setdefault("_op_structs", {})
    if not structs:
        structs.update((op.name.unqualified.replace(".", "_"), op) for op in ctx.catalog)
    children = []
    for offset, text in enumerate(kernel.text.splitlines()):
        for m in re.finditer(r"\bat::_ops::(\w+)::call\s*\(|\.(\w+)\s*\(", text):
            op = structs.get(m.group(1)) if m.group(1) else next(iter(ctx.catalog.overloads(m.group(2))), None)
            if op is None:
                continue
            site = Location(kernel.location.path, kernel.location.line + offset, origin=kernel.location.origin)
            child = op_node(op, ctx, EdgeKind.DISPATCHER, None, site)
            if is_utility_op(op.name.name, op.is_view) and not _utility_kernel(node, ctx):
                child.attrs["utility"] = True
                if not ctx.all_calls:
                    child.leaf()
                children.append(child)
            else:
                children.append(entered(child, m.group(0).rstrip("( ") if m.group(1) is None else "", ctx))
    return children


def _generated_children(payload, ctx: GraphContext) -> list[Node]:
    """A generated ufunc kernel calls a stub (UfuncCPU_add.cpp's impl), another
    generated kernel (UfuncCUDA_add.cu's impl calls add_kernel), a device loop
    (cpu_kernel_vec, gpu_kernel), and the inner loop of ATen/native/ufunc/<name>.h."""
    ufunc, siblings = payload
    text = ufunc.definition.text
    nodes = []
    for stub in dict.fromkeys(re.findall(r"\b(\w+_stub)\s*\(", text)):
        declared = stub_declaration(stub, ctx)
        attrs = {"declared_at": declared} if declared is not None else {}
        start = ufunc.definition.location  # the stub's call, at its line of the generated impl
        offset = next((i for i, t in enumerate(text.splitlines()) if re.search(rf"\b{stub}\s*\(", t)), 0)
        location = Location(start.path, start.line + offset, origin=start.origin)
        nodes.append(Node(stub, "stub", location, EdgeKind.STUB, None, attrs, payload=stub, identity=("stub", stub)))
    for other in siblings:
        name = other.name.rsplit("::", 1)[-1]
        if other is not ufunc and re.fullmatch(r"\w+", name) and re.search(rf"\b{name}\b", text):
            nodes.append(_ufunc_node(other, siblings, EdgeKind.DIRECT, None))
    from kernelmap.graph import loops

    nodes.extend(loops.generated_loops(ufunc, ctx))
    for loop in dict.fromkeys(re.findall(r"\bufunc::(\w+)\s*\(", text)):
        nodes.append(_inner_loop(loop, ctx))
    return nodes


def stub_declaration(stub: str, ctx: GraphContext) -> Location | None:
    """Where `stub` is declared (DECLARE_DISPATCH): in the tree's index, or
    with no tree in the wheel's torch/include/ATen/native headers."""
    if ctx.index is not None:
        found = [d for d in ctx.index.stub_declarations(stub) if d.kind == "declare"]
        return found[0].location if found else None
    if ctx.tree_root is not None:
        return None
    from kernelmap.codegen.headers import include_origin

    origin = include_origin()
    native = origin.disk_path("aten/src/ATen/native")
    pattern = re.compile(rf"^\s*DECLARE_DISPATCH\([^;]*\b{re.escape(stub)}\s*\)")
    for path in sorted(native.glob("*.h")) if native is not None and native.is_dir() else ():
        for number, text in enumerate(file_lines(path), 1):
            if pattern.match(text):
                return Location(f"aten/src/ATen/native/{path.name}", number, origin=origin)
    return None


def _inner_loop(name: str, ctx: GraphContext) -> Node:
    """`ufunc::add` of aten/src/ATen/native/ufunc/add.h: from the index, or found
    in the header itself (its macros, C10_HOST_DEVICE and friends, can hide it from the parser)."""
    header = f"aten/src/ATen/native/ufunc/{name}.h"
    attrs = {"header": header}
    if ctx.index is None:
        return Node(f"at::native::ufunc::{name}", "inner_loop", None, EdgeKind.DIRECT, "inner loop", {**attrs, "unresolved": "needs a source tree"})
    definitions = ctx.index.definitions(f"at::native::ufunc::{name}")
    if definitions:
        return Node(definitions[0].name, "inner_loop", definitions[0].location, EdgeKind.DIRECT, "inner loop", attrs)
    lines = tree_lines(ctx, header)
    line = next((i for i, text in enumerate(lines, 1) if re.search(rf"\b{re.escape(name)}\s*\(", text)), 1 if lines else None)
    location = Location(header, line, origin=ctx.index.tree.origin) if line else None
    return Node(f"at::native::ufunc::{name}", "inner_loop", location, EdgeKind.DIRECT, "inner loop", attrs if location else {**attrs, "unresolved": f"{header} is not in the tree"})


def dedupe(nodes: list[Node]) -> list[Node]:
    """One node per (kind, name, conditions): a kernel calling at::empty twice
    shows it once. Direct calls of a definition from different lines stay
    apart even under the same condition text: they sit in different branches
    (Normalization.cpp calls batch_norm_cpu_transform_input_template under
    `if (!train)` in both its mixed-type and its plain branch); so do calls
    under the same innermost condition in different arms around it
    (softmax_out's two `_softmax_out` under `if (!output_.is_contiguous())`,
    one in an arm for CUDA: Note [conditions around a call])."""
    seen, out = set(), []
    for n in nodes:
        site = n.attrs.get("call_site") if n.kind is NodeKind.KERNEL and n.via is EdgeKind.DIRECT else None
        op = entered_op(n)  # an operator's call is told by the operator's conditions (Note [the way into the dispatcher])
        key = (n.kind, n.name, op.condition, str(n.location) if n.kind not in ("op", "stub") else "", str(site) if site else "",
               tuple(op.attrs.get("outer_conditions", ())))
        if key not in seen:
            seen.add(key)
            out.append(n)
    return out
