"""Growing a call tree: mutable builder nodes expanded breadth first from a
root, with the limits that make expansion terminate (recursion on the path,
one expansion per definition, a depth, a node budget), then frozen into the
model's `CallNode`s. What to show of the grown tree (pruning, collapsing) is
the processors' job (kernelmap.processors)."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kernelmap.errors import KernelmapError
from kernelmap.graph.rules import LEAF_KINDS, MAX_NODES
from kernelmap.model import CallNode, EdgeKind, Location, NodeKind


@dataclass
class Node:
    """A node while the tree is built (mutable); frozen into a CallNode at the end."""

    name: str
    kind: NodeKind
    location: Location | None = None
    via: EdgeKind | None = None
    condition: str | None = None
    attrs: dict[str, Any] = field(default_factory=dict)
    payload: Any = None  # what expanding the node needs: a PyDef, an Op, a Definition...
    identity: tuple | None = None  # cycle and repeat detection; None: a leaf
    children: list[Node] = field(default_factory=list)
    bound: dict[str, str] | None = None  # template parameters its call site binds, once read (Note [template arguments])

    def __post_init__(self) -> None:
        self.kind = NodeKind(self.kind)
        if self.identity is not None:
            self.attrs["identity"] = ":".join(str(part) for part in self.identity)

    def leaf(self) -> Node:
        """Shown, never expanded."""
        self.identity = None
        self.attrs.pop("identity", None)
        return self


Expand = Callable[[Node], list[Node]]


def grow(root: Node, expand: Expand, depth: int) -> CallNode:
    """Expand from `root` with an explicit queue: recursion on the current path
    is cut and marked, a node expanded once elsewhere is not expanded again,
    the depth is bounded and the whole tree capped at MAX_NODES."""
    expanded: set[tuple] = set()
    count = 1
    # breadth first: the shallowest occurrence of a repeated node is the one expanded
    queue: deque[tuple[Node, int, frozenset]] = deque([(root, 0, frozenset())])
    while queue:
        node, level, path = queue.popleft()
        if node.identity is not None:
            if node.identity in path:
                node.attrs["cycle"] = "recursion cut: already on the path above"
                continue
            if node.identity in expanded:
                node.attrs["repeat"] = "expanded above"
                continue
            if level >= depth:
                if node.kind not in LEAF_KINDS:
                    node.attrs["truncated"] = f"depth {depth} reached"
                continue
            if count >= MAX_NODES:
                node.attrs["truncated"] = f"tree cut at {MAX_NODES} nodes"
                continue
            expanded.add(node.identity)
            if not node.children:
                try:
                    node.children = expand(node)
                except KernelmapError as e:
                    node.attrs["unresolved"] = str(e)
            count += len(node.children)
            path = path | {node.identity}
        elif level >= depth:  # a grouping node at the limit: keep it, cut below
            if node.children:
                node.attrs["truncated"] = f"depth {depth} reached"
                node.children = []
            continue
        # the inline at::<op> and at::_ops::<op>::call are the one call's way into
        # the dispatcher, not calls below it: they do not count toward the depth
        below = level if node.kind in (NodeKind.HEADER, NodeKind.OPS_ENTRY) else level + 1
        for child in node.children:
            queue.append((child, below, path))
    return freeze(root)


def freeze(root: Node) -> CallNode:
    """Build frozen CallNodes bottom-up (post-order, explicit stack)."""
    done: dict[int, CallNode] = {}
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, visited = stack.pop()
        if not visited:
            stack.append((node, True))
            stack.extend((c, False) for c in node.children)
            continue
        done[id(node)] = CallNode(
            node.name, node.kind, node.location, node.via, node.condition, tuple(done[id(c)] for c in node.children), dict(node.attrs)
        )
    return done[id(root)]
