"""Routes: from a Python name, an operator or a C++ symbol to another symbol
or a vendor call, on one device ("nn.Conv2d -> ??? -> cudnnConvolutionForward").

The top-down graph is grown from the source as `stack` grows it, but unpruned
(a route may pass through helpers `stack` hides as plumbing) and deeper; every
node that is the target ends one route. A definition is expanded once in a
grown tree (its other calls are marked "expanded above"), so a route that
reaches the target through such a repeat continues below the expanded twin:
both calls of `run_conv_plan` lead to `cudnnBackendExecute`.

Note [route order]
Routes are given shortest first, then in the tree's order; equal routes (the
same steps at the same places) once. At most `limit` are kept; the answer
says how many more there were and whether a limit of the search (depth, node
budget) was reached, since then a route may be missing.
"""

from __future__ import annotations

import re

from kernelmap import env
from kernelmap.errors import BadInput, KernelmapError, UnknownName
from kernelmap.graph.context import NEEDS_TREE, GraphContext
from kernelmap.graph.grow import grow
from kernelmap.graph.rules import is_symbol_text
from kernelmap.model import CallNode, NodeKind, PathAnswer, Route

PATH_DEPTH = 48
ROUTE_LIMIT = 5
# Routes remembered per node while joining repeats to their twins: enough for
# every route the answer keeps, bounded so a wide graph stays linear.
_PER_NODE = 32

# Grouping nodes: a route goes through their children, which carry the condition.
_GROUPS = frozenset({NodeKind.ALTERNATIVES, NodeKind.SYMBOL})


def path(source: str, target: str, context: GraphContext, depth: int = PATH_DEPTH, limit: int = ROUTE_LIMIT) -> PathAnswer:
    """The routes from `source` to `target` on `context.device` (Note [route order])."""
    from kernelmap.graph import down

    if depth < 1:
        raise BadInput(f"depth must be 1 or more, not {depth}")
    if limit < 1:
        raise BadInput(f"limit must be 1 or more, not {limit}")
    wanted = target.strip()
    if not wanted or not is_symbol_text(wanted, "."):
        raise BadInput(f"not a target: {target!r} (a C++ symbol, a vendor call, an operator or a Python name)")
    root = down._root_for(source, context)  # unknown sources raise here, exit 2
    _check_known(wanted, context)
    tree = grow(root, lambda node: down._expand_down(node, context), depth)
    routes, cut, nodes = _routes(tree, lambda n: _is_target(n, wanted))
    if not routes:  # then through the candidates of ambiguous calls too (a larger graph: only when needed)
        root = down._root_for(source, context)
        tree = grow(root, lambda node: _follow_candidates(down._expand_down(node, context), context), depth)
        routes, cut, nodes = _routes(tree, lambda n: _is_target(n, wanted))
    context.check_index_intact()
    unique = {tuple((n.name, str(n.location), n.condition) for n in r): r for r in reversed(routes)}  # the first of equals wins
    routes = sorted(reversed(list(unique.values())), key=len)  # Note [route order]: stable, so tree order breaks ties
    shown = tuple(Route(tuple(_step(n) for n in r if n.kind not in _GROUPS)) for r in routes[:limit])
    notes = list(context.notes)
    if cut and not routes:
        notes.append(f"the search reached a limit ({cut}); a route may lie beyond it (try a larger --depth)")
    searched = {"nodes": nodes, "depth": depth, "cut": cut, "routes": len(routes), "more": max(0, len(routes) - limit)}
    return PathAnswer(source, wanted, context.device, shown, tuple(notes), searched, env.torch_install().version)


# The C++ type of a dtype, as a template specialisation spells it: `gemm<float>`.
_CPP_TYPES = {"float32": "float", "float64": "double", "float16": "at::Half", "bfloat16": "at::BFloat16",
              "complex64": "c10::complex<float>", "complex128": "c10::complex<double>", "int32": "int32_t", "int64": "int64_t"}


def _follow_candidates(children: list, ctx: GraphContext) -> list:
    """A call several definitions could answer (`at::cuda::blas::gemm<scalar_t>`:
    one specialisation per dtype) is shown unexpanded by `stack`; a route may go
    through them, so here they are followed, under a condition that says the call
    was ambiguous. Where some candidates are the specialisation for the call's
    dtype (`gemm<float>` for float32), only those are followed."""
    from kernelmap.graph.code import tree_lines

    cpp_type = _CPP_TYPES.get(ctx.dtype)
    for child in children:
        if child.kind is not NodeKind.AMBIGUOUS:
            continue
        candidates = [c for c in child.children if c.payload is not None and c.kind is NodeKind.KERNEL and c.identity is None]
        if cpp_type and ctx.index is not None:
            def spelled(c) -> bool:
                lines = tree_lines(ctx, c.location.path)
                short = c.name.rsplit("::", 1)[-1]
                spelling = re.compile(rf"\b{re.escape(short)}\s*<\s*{re.escape(cpp_type)}\s*>")  # gemm<float>, not gemm<c10::complex<float>>
                return c.location.line <= len(lines) and spelling.search(lines[c.location.line - 1]) is not None

            typed = [c for c in candidates if spelled(c)]
            if typed:
                for c in typed:
                    c.condition = f"the specialisation for {ctx.dtype}"
                candidates, condition = typed, None
            else:
                condition = f"one of {len(child.children)} definitions the call may mean"
        else:
            condition = f"one of {len(child.children)} definitions the call may mean"
        for candidate in candidates:
            candidate.identity = ("cpp", candidate.name, str(candidate.location))
            candidate.attrs["identity"] = ":".join(candidate.identity)
            if condition:
                candidate.condition = condition
    return children


def _step(node: CallNode) -> CallNode:
    attrs = {k: v for k, v in node.attrs.items() if k not in ("identity", "repeat", "truncated", "cycle")}
    return CallNode(node.name, node.kind, node.location, node.via, node.condition, (), attrs)


def _is_target(node: CallNode, target: str) -> bool:
    name = node.name
    if node.kind is NodeKind.OPERATOR:  # aten::mm, mm, aten::add (any overload), aten::add.Tensor
        op = target if target.startswith("aten::") else f"aten::{target}"
        return name == op or ("." not in op and name.split(".")[0] == op)
    if node.kind is NodeKind.STUB:  # named by its short name; `at::native::mul_stub` asks for it too
        return name == target.rsplit("::", 1)[-1]
    # a definition's name keeps its anonymous and inline namespaces (at::native::CPU_CAPABILITY::copy_kernel); a target may leave them out
    plain = re.sub(r"\(anonymous namespace\)::|\bCPU_CAPABILITY::", "", name)
    return name == target or name.endswith(f"::{target}") or plain == target or plain.endswith(f"::{target}")


def _check_known(target: str, ctx: GraphContext) -> None:
    """A target no producer knows is a mistake (exit 2), not a missing route (exit 1)."""
    if target.startswith(("torch.", "F.", "nn.", "Tensor.")) and "::" not in target:
        from kernelmap.errors import HandWrittenBinding
        from kernelmap.graph import down

        try:  # resolved as a route's source is: an unknown one raises UnknownName here
            down._root_for(target, ctx)
        except HandWrittenBinding:  # a name that exists, served by a hand-written binding
            pass
        return
    if ctx.index is not None and not target.startswith("aten::") and (ctx.index.definitions(target) or ctx.index.callers_of(target)
                                                                       or ctx.index.is_stub(target.rsplit("::", 1)[-1])):
        return  # a C++ symbol, a vendor call or a stub (asked first: the catalog's refusal looks for close names)
    try:
        ctx.catalog.resolve(target)
        return
    except KernelmapError:
        pass
    if ctx.index is None:  # no index to look a C++ name up in: say why, not that the name is unknown
        raise KernelmapError(f"{target!r} is no Python name or operator, and C++ names need an indexed tree: {ctx.no_index or NEEDS_TREE}")
    short = target.rsplit("::", 1)[-1]
    raise UnknownName(target, tuple(ctx.index.search(short, limit=5)) if len(short) >= 3 else ())


def _routes(tree: CallNode, is_target) -> tuple[list[tuple[CallNode, ...]], str, int]:
    """Every root-to-target path of the grown tree, a repeat continuing below
    its expanded twin; and whether (and which) limit cut the growth."""
    order: list[CallNode] = []
    stack = [tree]
    while stack:
        node = stack.pop()
        order.append(node)
        stack.extend(node.children)
    cut = next((str(n.attrs["truncated"]) for n in order if n.attrs.get("truncated")), "")
    twins = {n.attrs["identity"]: n for n in order if n.attrs.get("identity") and n.children}
    # below[id(n)]: routes from n (inclusive) down to a target; repeats borrow their twin's
    below: dict[int, list[tuple[CallNode, ...]]] = {}
    for _ in range(3):  # a repeat's twin may come later in post-order: settle in a few passes
        changed = False
        for node in reversed(order):
            found: list[tuple[CallNode, ...]] = [(node,)] if is_target(node) else []
            for child in node.children:
                found.extend((node, *r) for r in below.get(id(child), ()))
            twin = twins.get(node.attrs.get("identity")) if node.attrs.get("repeat") else None
            if twin is not None:
                found.extend((node, *r[1:]) for r in below.get(id(twin), ()))
            found = [r for r in found if _acyclic(r)][:_PER_NODE]
            if len(found) != len(below.get(id(node), ())):
                below[id(node)] = found
                changed = True
        if not changed:
            break
    return below.get(id(tree), []), cut, len(order)


def _acyclic(route: tuple[CallNode, ...]) -> bool:
    seen = set()
    for n in route:
        ident = n.attrs.get("identity")
        if ident:
            if ident in seen:
                return False
            seen.add(ident)
    return True
