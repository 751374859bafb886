"""Processors: small `CallTree -> CallTree` functions that reshape a tree for
showing, applied by commands from their options (and by `kernelmap render`
to a saved tree). Builders grow the whole tree their budget allows and record
what they learn as facts (`utility`, `keep`, `branch`, `identity`); these
functions decide what is shown. Each walks with an explicit stack.

    tree = prune_plumbing(collapse_branches(tree))
    tree = cut_at_depth(tree, 3)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from kernelmap.model import CallNode, CallTree, EdgeKind, NodeKind

# Kinds whose nodes are where a call's work is: never pruned as plumbing.
_WORK_KINDS = frozenset(
    {NodeKind.OPERATOR, NodeKind.STUB, NodeKind.LAUNCH, NodeKind.DEVICE_LOOP, NodeKind.VENDOR, NodeKind.GENERATED, NodeKind.INNER_LOOP}
)


def _nodes(tree: CallTree) -> list[CallNode]:
    """Every node, each after its parent (walked in reverse, children come first)."""
    order: list[CallNode] = []
    stack = [tree.root]
    while stack:
        n = stack.pop()
        order.append(n)
        stack.extend(n.children)
    return order


def _rebuild(tree: CallTree, visit: Callable[[CallNode, tuple[CallNode, ...]], CallNode | None]) -> CallTree:
    """Post-order rebuild: `visit(node, new_children)` returns the node to keep
    (or None to drop it). The root is never dropped."""
    done: dict[int, CallNode | None] = {}
    for n in reversed(_nodes(tree)):
        children = tuple(c for c in (done[id(ch)] for ch in n.children) if c is not None)
        done[id(n)] = visit(n, children)
    root = done[id(tree.root)] or replace(tree.root, children=())
    return replace(tree, root=root)


def _with(node: CallNode, children: tuple[CallNode, ...], **facts) -> CallNode:
    if children == node.children and not facts:
        return node
    return replace(node, children=children, attrs={**node.attrs, **facts} if facts else node.attrs)


def prune_plumbing(tree: CallTree) -> CallTree:
    """Drop tensor utility operators (empty, view, contiguous...) and direct-call
    subtrees that reach no operator, stub, loop, launch or vendor call: helpers
    that only compute shapes or check arguments. A node marked "expanded above"
    is kept when its expanded twin is; every variant of an `alternatives`
    group stays visible. A node whose children a limit cut (`truncated`) is
    kept with its mark: what lies below it is unknown, not plumbing, and a
    chain must never vanish silently."""
    # which identities have a subtree worth keeping (first pass)
    worth: set[str] = set()
    order = _nodes(tree)
    interesting: dict[int, bool] = {}
    for _ in range(2):  # twice: a repeat is worth keeping when its twin is
        for n in reversed(order):
            ident = n.attrs.get("identity")
            interesting[id(n)] = (
                (n.kind in _WORK_KINDS and not n.attrs.get("utility"))
                or bool(n.attrs.get("keep"))
                or bool(n.attrs.get("truncated"))
                or (bool(n.attrs.get("repeat")) and ident in worth)
                or any(interesting[id(c)] for c in n.children)
            )
            if interesting[id(n)] and ident:
                worth.add(ident)

    keep = {id(c) for n in order for c in n.children
            if not c.attrs.get("utility") and (n.kind is NodeKind.ALTERNATIVES or interesting[id(c)] or c.via is not EdgeKind.DIRECT)}
    pruned = _rebuild(tree, lambda n, children: _with(n, children) if n is tree.root or id(n) in keep else None)
    return _unmark_empty_repeats(pruned)


def _unmark_empty_repeats(tree: CallTree) -> CallTree:
    """A node kept for itself (a backend check, per-dtype work) whose children
    were all plumbing has nothing below it any more: its repeats are then no
    longer "expanded above" (there is nothing to jump to), only the same call."""
    expanded = {n.attrs.get("identity") for n in _nodes(tree) if n.children and not n.attrs.get("repeat")}

    def visit(n: CallNode, children: tuple[CallNode, ...]) -> CallNode:
        if n.attrs.get("repeat") and n.attrs.get("identity") not in expanded:
            return replace(n, children=children, attrs={k: v for k, v in n.attrs.items() if k != "repeat"})
        return _with(n, children)

    return _rebuild(tree, visit)


def drop_inner_autograd(tree: CallTree) -> CallTree:
    """Splice out autograd wrappers that never run: below an operator whose
    autograd wrapper ran, its kernel calls other operators with autograd already
    handled (the wrapper excludes the Autograd keys below it), so their
    VariableType wrappers are skipped. Their children are hoisted to the
    operator. Only composite-implicit operators, which have no wrapper of their
    own, pass autograd on to the operators they call."""
    order: list[tuple[CallNode, bool]] = []  # node, whether an autograd wrapper is above it
    stack: list[tuple[CallNode, bool]] = [(tree.root, False)]
    while stack:
        n, above = stack.pop()
        order.append((n, above))
        here = above or _is_autograd_wrapper(n)
        stack.extend((c, here) for c in n.children)
    done: dict[int, tuple[CallNode, ...]] = {}  # node -> what it contributes to its parent
    for n, above in reversed(order):
        children = tuple(x for c in n.children for x in done[id(c)])
        done[id(n)] = children if (above and _is_autograd_wrapper(n)) else (_with(n, children),)
    (root,) = done[id(tree.root)]
    return replace(tree, root=root)


def _is_autograd_wrapper(n: CallNode) -> bool:
    return n.kind is NodeKind.WRAPPER and n.via is EdgeKind.AUTOGRAD


def collapse_branches(tree: CallTree) -> CallTree:
    """Show branches for another device or backend (fact `branch`) collapsed:
    no children, marked `collapsed` with the reason."""

    def visit(n: CallNode, children: tuple[CallNode, ...]) -> CallNode:
        if n.attrs.get("branch"):
            return replace(n, children=(), attrs={**n.attrs, "collapsed": n.attrs["branch"]})
        return _with(n, children)

    return _rebuild(tree, visit)


def cut_at_depth(tree: CallTree, depth: int) -> CallTree:
    """Nodes deeper than `depth` removed; their parents marked `truncated`."""
    if depth < 0:
        raise ValueError(f"depth must be 0 or more, not {depth}")
    levels: dict[int, int] = {id(tree.root): 0}
    stack = [tree.root]
    while stack:
        n = stack.pop()
        for c in n.children:
            levels[id(c)] = levels[id(n)] + 1
            stack.append(c)

    def visit(n: CallNode, children: tuple[CallNode, ...]) -> CallNode:
        if levels[id(n)] >= depth and n.children:
            return replace(n, children=(), attrs={**n.attrs, "truncated": f"depth {depth} reached"})
        return _with(n, children)

    return _rebuild(tree, visit)


def hide_below(tree: CallTree, name: str) -> CallTree:
    """The children of every node named `name` (or whose name ends with
    `::name`) hidden, with how many were hidden."""

    def matches(n: CallNode) -> bool:
        return n.name == name or n.name.endswith(f"::{name}")

    def visit(n: CallNode, children: tuple[CallNode, ...]) -> CallNode:
        if matches(n) and n.children:
            return replace(n, children=(), attrs={**n.attrs, "hidden": len(n.children)})
        return _with(n, children)

    return _rebuild(tree, visit)


def mark_repeats(tree: CallTree) -> CallTree:
    """A definition expanded more than once (same `identity`) keeps its
    children at its first occurrence in pre-order; the others lose them and
    are marked "expanded above"."""
    seen: set[str] = set()
    first: set[int] = set()
    stack = [tree.root]
    while stack:
        n = stack.pop()
        ident = n.attrs.get("identity")
        if ident and n.children and ident not in seen:
            seen.add(ident)
            first.add(id(n))
        stack.extend(reversed(n.children))

    def visit(n: CallNode, children: tuple[CallNode, ...]) -> CallNode:
        ident = n.attrs.get("identity")
        if ident and n.children and id(n) not in first:
            return replace(n, children=(), attrs={**n.attrs, "repeat": "expanded above"})
        return _with(n, children)

    return _rebuild(tree, visit)


def cut_recursion(tree: CallTree) -> CallTree:
    """A node whose `identity` is already on the path above it loses its children, marked as recursion."""
    cut: set[int] = set()
    stack: list[tuple[CallNode, frozenset]] = [(tree.root, frozenset())]
    while stack:
        n, path = stack.pop()
        ident = n.attrs.get("identity")
        if ident and ident in path:
            cut.add(id(n))
            continue
        below = path | {ident} if ident else path
        stack.extend((c, below) for c in n.children)

    def visit(n: CallNode, children: tuple[CallNode, ...]) -> CallNode:
        if id(n) in cut:
            return replace(n, children=(), attrs={**n.attrs, "cycle": "recursion cut: already on the path above"})
        return _with(n, children)

    return _rebuild(tree, visit)



def compact_layers(tree: CallTree) -> CallTree:
    """One line per layer of a call: a node whose layer (Note [layers]) is its
    parent's is spliced out, its children hoisted to the parent, so that each
    path reads Python -> binding -> operator -> dispatch -> native -> device ->
    vendor with the first node of each layer. Leaves stay."""
    order: list[tuple[CallNode, str | None]] = []
    stack: list[tuple[CallNode, str | None]] = [(tree.root, None)]
    while stack:
        n, parent_layer = stack.pop()
        order.append((n, parent_layer))
        stack.extend((c, n.kind.layer) for c in n.children)
    done: dict[int, tuple[CallNode, ...]] = {}  # node -> what it contributes to its parent
    for n, parent_layer in reversed(order):
        children = tuple(x for c in n.children for x in done[id(c)])
        kept = _with(n, children)
        spliced = parent_layer is not None and n.kind.layer == parent_layer and n.children
        done[id(n)] = children if spliced else (kept,)
    (root,) = done[id(tree.root)]
    return replace(tree, root=root)
