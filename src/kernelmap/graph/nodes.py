"""The nodes every layer of the static graph makes: an operator's node, the
way a C++ call enters the dispatcher (Note [the way into the dispatcher]) and
the generated code of an operator, Python and builtin nodes, the tensor
utilities a question asks for (Note [a utility asked for]), and siblings made
once.
"""

from __future__ import annotations

import contextvars
import re
from pathlib import Path
from typing import Any

from kernelmap import env, pysource
from kernelmap.errors import KernelmapError
from kernelmap.graph.code import file_lines, tree_lines
from kernelmap.graph.context import GraphContext, kept_results
from kernelmap.graph.grow import Node
from kernelmap.graph.rules import is_utility_op, moves_no_element
from kernelmap.model import EdgeKind, Location, NodeKind, Op


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


def _called_at(node: Node, start: Location, symbol: str, lines: int = 6) -> None:
    """`node`'s call site: the line, among the first of the function at
    `start`, that calls `symbol` (a header's `return at::_ops::add_Tensor::call(...)`)."""
    path = start.disk_path
    text = file_lines(path) if path is not None else ()
    for number in range(start.line, min(len(text), start.line + lines) + 1):
        if symbol in text[number - 1]:
            node.attrs["call_site"] = Location(start.path, number, origin=start.origin)
            return


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
    cache = kept_results(ctx, "_header_functions")
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

    cache = kept_results(ctx, "_generated_code")  # a tree asks for one operator's code many times
    key = (op_name, tuple(layers))
    if key not in cache:
        try:
            cache[key] = locate_in(ctx.generated, op_name, ctx.catalog, layers)
        except KernelmapError:
            cache[key] = None
    return cache[key]


def is_view_alias(op: Op) -> bool:
    """A view operator other than the utilities by name: another spelling of a
    view with a composite implicit kernel (mT, mH, adjoint, swapaxes), or a
    view with a kernel of its own (unfold, whose kernel computes the window's
    sizes and strides) (Note [a utility asked for]). The binary runs its
    kernel, then the view it calls: followed to that view, which stays a
    utility."""
    return op.is_view and not is_utility_op(op.name.name, False)


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
# the clone reshape makes of a tensor no view can describe is not). A view
# asked for is no exception: it moves no element, but the binary runs its
# kernel's views down to the one that sets the metadata (transpose's and
# unsqueeze's as_strided, whose as_strided_tensorimpl checks the storage's
# bounds and sets the strides: the recorded stacks of torch 2.13.0 show each
# frame), and moveaxis's movedim sorts its dims. Only its calls of other views
# are followed: what it calls that may copy (ravel's contiguous, reshape_as's
# reshape, which clones a tensor no view can describe: graph.rules'
# moves_no_element) stays one step, the copy being that utility's. A view moves
# no element, so below a utility asked for every view is followed to the one
# that sets the metadata, however deep (t -> transpose -> as_strided, chunk ->
# split -> narrow -> slice -> as_strided, transpose_copy's transpose).
# A view spelled otherwise than the views by name (mT, mH, adjoint, unfold:
# `is_view_alias`) is not a leaf where it is called: the binary runs its
# kernel and helpers (mT's _adjoint, unfold's window) down to the view they
# call (transpose, as_strided), which is.
_ASKED_UTILITY: contextvars.ContextVar[tuple[str, bool] | None] = contextvars.ContextVar("asked_utility", default=None)


def _utility_asked(root: Node) -> tuple[str, bool] | None:
    """The base name of the utility operator a tree is grown for, and whether it is a view; None if it is no utility."""
    op = root.payload if root.kind is NodeKind.OPERATOR else None
    return (op.name.name, op.is_view) if isinstance(op, Op) and is_utility_op(op.name.name, op.is_view) else None


def _utility_kernel(caller, ctx: GraphContext, callee: Op | None = None) -> bool:
    """Whether `caller` is a kernel of the utility asked for, so that its call
    of the utility `callee` is followed (Note [a utility asked for])."""
    asked = _ASKED_UTILITY.get()
    if asked is None:
        return False
    view = callee is not None and moves_no_element(callee.name.name, callee.is_view)
    if not _own_overload(asked[0], caller):
        return view  # a view's views, wherever the asked utility reaches them (t -> transpose -> as_strided)
    return not asked[1] or callee is None or view


def _is_utility_kernel(name: str, candidates: list, ctx: GraphContext) -> bool:
    """Whether a direct call is of the native kernel of a utility operator (copy_, fill_, zero_)."""
    if not is_utility_op(name, False) or not all(d.lookup.startswith("at::native::") for d in candidates):
        return False
    return bool(ctx.overloads(name))  # an operator of that name (`copy_` is aten::copy_)


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
