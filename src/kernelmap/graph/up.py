"""Bottom-up: from a C++ function or a vendor API up through direct calls,
callbacks, stubs and the dispatcher to operators and their Python entry points."""

from __future__ import annotations

import re

from kernelmap.errors import BadInput, KernelmapError, UnknownName
from kernelmap.graph.down import cpp_node, dedupe, op_node, referrers, vendor_node
from kernelmap.graph.context import NEEDS_TREE, GraphContext
from kernelmap.graph.grow import Node, grow
from kernelmap.graph.rules import DEFAULT_DEPTH, KERNEL_DIRS
from kernelmap.model import CallTree, EdgeKind, NodeKind, Op

def callers(symbol: str, context: GraphContext, depth: int = DEFAULT_DEPTH) -> CallTree:
    """The reverse tree from a C++ symbol or vendor API up through direct calls,
    stubs and the dispatcher to operators and their Python entry points."""
    if depth < 0:
        raise BadInput(f"depth must be 0 or more, not {depth}")
    text = symbol.strip()
    if not text or not re.fullmatch(r"[A-Za-z_~][\w:~]*", text):
        raise BadInput(f"not a C++ symbol: {symbol!r}")
    if context.index is None:
        raise KernelmapError(f"`callers` reads C++ source: {NEEDS_TREE}")
    definitions = context.index.definitions(text)
    sites = context.index.callers_of(text)
    if definitions:
        root = Node(text, "symbol", None, attrs={"definitions": len(definitions)}, identity=("callers-root", text))
        root.payload = ("definitions", definitions)
    elif sites:
        if sites[0].library:
            root = vendor_node(text, sites[0].library, None, None, None)
            root.identity = ("callers-root", text)
        else:
            root = Node(text, "symbol", None, identity=("callers-root", text))
        root.payload = ("sites", sites)
    else:
        short = text.rsplit("::", 1)[-1]
        raise UnknownName(symbol, tuple(context.index.search(short, limit=5)) if len(short) >= 3 else ())
    grown = grow(root, lambda node: _expand_up(node, context), depth)
    return CallTree(grown, context.notes, {"kind": "callers", "target": symbol, "depth": depth})


def _expand_up(node: Node, ctx: GraphContext) -> list[Node]:
    index = ctx.index
    if node.kind in ("symbol", "vendor") and isinstance(node.payload, tuple):
        what, items = node.payload
        if what == "sites":
            return _caller_nodes(items, ctx)
        nodes = []
        for d in items:
            nodes.extend(_parents_of_definition(d, ctx))
        return nodes
    if node.kind == "kernel" and node.payload is not None:
        return _parents_of_definition(node.payload, ctx)
    if node.kind == "stub":
        return _caller_nodes(index.callers_of(node.payload), ctx)
    if node.kind == "op":
        return _parents_of_op(node.payload, ctx)
    return []


def _caller_nodes(sites, ctx: GraphContext) -> list[Node]:
    nodes = []
    seen = set()
    for site in sites:
        # kernel code only: JIT, inductor shims and tests call operators too, but no model reaches them
        if site.caller is None or not site.location.path.startswith(KERNEL_DIRS) or "/tests/" in site.location.path:
            continue
        definition = ctx.index.definition_at(site.location.path, site.location.line)
        if definition is None or definition.name in seen:
            continue
        seen.add(definition.name)
        condition = " ".join(c for c in (site.condition, f"#if {site.preproc}" if site.preproc else None) if c) or None
        nodes.append(cpp_node(definition, ctx, site.kind, condition, site.location))
    return nodes


def _parents_of_definition(definition, ctx: GraphContext) -> list[Node]:
    index = ctx.index
    nodes: list[Node] = []
    short = definition.lookup.rsplit("::", 1)[-1]
    # 1. the operators whose yaml names this kernel, or whose structured kernel it is
    symbol = definition.lookup if definition.lookup.startswith("at::") else f"at::native::{short}"
    ops = list(ctx.catalog.ops_with_kernel(symbol))
    if definition.op and definition.symbol.kind == "structured_impl":
        ops += [op for op in ctx.catalog.ops_with_kernel(f"at::native::{definition.op}") if op not in ops]
    nodes.extend(op_node(op, ctx, EdgeKind.DISPATCHER, f"kernel of {k.key}") for op in ops for k in op.dispatch if k.symbol in (symbol, f"at::native::{definition.op}"))
    # 2. stubs it is registered to
    for reg in index.stubs_of_kernel(short):
        nodes.append(Node(reg.stub, "stub", reg.location, EdgeKind.STUB, f"REGISTER_DISPATCH for {reg.device}", payload=reg.stub, identity=("stub", reg.stub)))
    # 3. direct callers, and functions that pass it on as a callback
    nodes.extend(_caller_nodes([s for s in index.callers_of(definition.lookup) if s.kind is EdgeKind.DIRECT], ctx))
    nodes.extend(referrers(definition, ctx))
    return dedupe(nodes)


def _parents_of_op(op: Op, ctx: GraphContext) -> list[Node]:
    nodes: list[Node] = []
    # operators that delegate to it (add.Tensor -> add.out)
    for other in ctx.catalog.overloads(op.name.name.rstrip("_")):
        if other.structured_delegate == op.name.unqualified:
            nodes.append(op_node(other, ctx, EdgeKind.DISPATCHER, "structured delegate"))
    # dispatcher calls in C++
    nodes.extend(_caller_nodes(_dispatcher_sites(op, ctx), ctx))
    # Python entry points: leaves
    wheel_op = op
    try:
        wheel_op = ctx.entry_catalog.get(str(op.name))
    except KernelmapError:
        pass
    for name in wheel_op.python_entry_points:
        nodes.append(Node(name, NodeKind.BUILTIN, None, EdgeKind.BINDING, None))
    return dedupe(nodes)


def _dispatcher_sites(op: Op, ctx: GraphContext) -> list:
    """Calls in C++ that reach `op` through the dispatcher: `at::conv2d`,
    `at::convolution_symint`, `at::add_out`, `tensor.add_`. The index records the
    operator's base name; out= calls are told apart by their `_out`/`_outf` spelling."""
    base = op.name.name
    spellings = [base, f"{base}_symint"] + ([f"{base}_out", f"{base}_outf", f"{base}_symint_out", f"{base}_symint_outf"] if op.is_out else [])
    sites = []
    for spelling in spellings:
        for site in ctx.index.callers_of(spelling):
            if site.kind is not EdgeKind.DISPATCHER or site.op not in (base, op.name.unqualified):
                continue
            if site.name.endswith(("_out", "_outf")) != op.is_out:
                continue
            sites.append(site)
    return sites
