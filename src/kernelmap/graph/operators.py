"""An operator's children in the static graph: the dispatcher's layers a call
passes (Note [the autograd layer]), the kernel each dispatch key registers,
overrides of the installed torch, and an out= call's resize (Note [an out=
call's resize]).
"""

from __future__ import annotations

import re

from kernelmap.graph import dtypes
from kernelmap.graph.code import _parameter_name, parameters, tree_lines
from kernelmap.graph.context import GraphContext
from kernelmap.graph.grow import cpp_node, Node
from kernelmap.graph.nodes import _generated
from kernelmap.graph.overloads import by_build, by_signature, not_compiled, _structured_functional
from kernelmap.graph.rules import DEVICE_KEYS, schema_arguments
from kernelmap.graph.sites import _META_HELPER_LEVELS
from kernelmap.graph.stubs import GeneratedKernel, _ufunc_node, _view_copy_kernel
from kernelmap.graph.values import _given, node_flags
from kernelmap.model import EdgeKind, Location, NodeKind, Op


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
    kernel_nodes = _kernel_nodes(op, kernel, code, ctx)
    metas = [n.payload for n in kernel_nodes if (n.condition or "").startswith("meta") and n.payload is not None]
    output = dtypes.output_dtype(op, metas, ctx.index) if kernel.structured and metas else None  # Note [a comparison's output dtype]
    for kernel_node in kernel_nodes:
        if output and kernel_node.condition == "impl":
            dtypes.with_output_dtype(kernel_node, output)
        kernel_node.rank = rank
        if flags and kernel_node.kind is NodeKind.KERNEL and kernel_node.payload is not None and ctx.index is not None \
                and not isinstance(kernel_node.payload, GeneratedKernel):
            _given(kernel_node, _kernel_flags(op, kernel_node.payload, flags, ctx))  # Note [values a call passes]
        kernel_node.grad = kernel_grad
        kernel_node.composite = kernel.key.startswith("Composite")
        if wrapper is not None and kernel_node.kind is NodeKind.KERNEL and (kernel_node.condition or "").startswith("meta"):
            kernel_node.then.extend(_out_resize(wrapper, ctx, kernel_node.payload))  # after the meta function's own calls, which it does not replace
            if kernel_node.then and kernel_node.identity is not None:  # not the functional call's meta expanded above: it resizes
                kernel_node.identity = (*kernel_node.identity, "out=")
                kernel_node.attrs["identity"] = ":".join(str(part) for part in kernel_node.identity)
        target_parent.append(kernel_node)
    children.extend(_override_nodes(op, ctx))
    return children


# Note [an out= call's resize]
# A structured kernel's out= wrapper instantiates a generated class whose
# set_output_raw_strided, called by the meta function, resizes the tensor
# the call was given (`resize_out(out, sizes, strides, options)`, whose body
# calls at::native::resize_output). The binary shows resize_output right
# below the meta function (or its resize_reduction): a step of the meta
# function, read from the generated class and its resize_out. Where the
# meta function gives the outputs' strides (set_output_strided, as
# _linalg_solve_ex's batched column-major result), resize_out then restrides
# the tensor it resized with `out.as_strided_(sizes, strides)`: a utility
# step beside resize_output, under resize_out's condition.


def _out_resize(wrapper, ctx: GraphContext, meta=None) -> list[Node]:
    """at::native::resize_output as a step of an out= wrapper's meta
    function, when its structured class resizes the given output (Note [an out= call's resize]),
    and the as_strided_ that restrides it where the meta function gives strides."""
    if ctx.index is None or ctx.generated is None or wrapper.definition is None:
        return []
    resize = _resize_output(wrapper, ctx)
    if not resize or meta is None:
        return resize
    return [*resize, *_restride(wrapper, meta, ctx)]


# A meta function that gives its outputs' strides (`set_output_strided(0, shape, strides, ...)`,
# not `set_output_contiguous`): resize_out restrides a tensor it resized with them.
_GIVES_STRIDES = re.compile(r"\bset_output_strided\s*\(")


def _restride(wrapper, meta, ctx: GraphContext) -> list[Node]:
    """`out.as_strided_(sizes, strides)` of the generated resize_out, as a step
    where the meta function gives strides (Note [an out= call's resize])."""
    from kernelmap.errors import KernelmapError
    from kernelmap.graph.nodes import op_node

    location = meta.location
    body = "\n".join(tree_lines(ctx, location.path)[location.line - 1 : location.end_line or location.line])
    rows = ctx.generated.defs("resize_out", wrapper.definition.location.path)
    if not _GIVES_STRIDES.search(body) or not rows:
        return []
    helper = ctx.generated.definition(rows[0][0], rows[0][1])
    offset = next((i for i, t in enumerate(helper.text.splitlines()) if re.search(r"\.as_strided_\s*\(", t)), None)
    try:
        op = ctx.catalog.resolve("aten::as_strided_")[0] if offset is not None else None
    except KernelmapError:
        op = None
    if op is None:
        return []
    site = Location(helper.location.path, helper.location.line + offset, origin=helper.location.origin)
    node = op_node(op, ctx, EdgeKind.DISPATCHER, "resize_out: if (resized) and the meta function gives strides", site)
    node.attrs["utility"] = True
    return [node if ctx.all_calls else node.leaf()]


def _resize_output(wrapper, ctx: GraphContext) -> list[Node]:
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
