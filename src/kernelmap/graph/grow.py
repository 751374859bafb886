"""Growing a call tree: mutable builder nodes expanded breadth first from a
root, with the limits that make expansion terminate (recursion on the path,
one expansion per definition, a depth, a node budget), then frozen into the
model's `CallNode`s. What to show of the grown tree (pruning, collapsing) is
the processors' job (kernelmap.processors). Also the nodes every direction
makes alike: a C++ definition's, a vendor call's."""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kernelmap import vendors
from kernelmap.errors import KernelmapError
from kernelmap.graph.rules import LEAF_KINDS, MAX_NODES
from kernelmap.model import CallNode, EdgeKind, Location, NodeKind

if TYPE_CHECKING:
    from kernelmap.graph.context import GraphContext


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
    # whether the calls it makes enter the dispatcher above the autograd keys (Note [the autograd layer]);
    # None until its parent passes its own on
    grad: bool | None = None
    # a composite operator's kernel or a helper it calls directly (Note [a composite's utilities])
    composite: bool = False
    # called in the lambda a kernel hands its own loop, or a template such a call instantiates: the
    # per-element work, never plumbing (Note [device loop machinery] in graph.loops)
    loop_work: bool = False
    # a stub call's known arguments, by place after the device type (Note [values a call passes] in graph.values)
    passed: dict[int, bool] | None = None
    # the values its definition's parameters and fields are known to hold for the call (Note [values a call passes])
    known: dict[str, bool] | None = None
    # the number of dimensions the call's input has, when its operator's name fixes it (Note [arms that cannot run])
    rank: int | None = None
    # how many levels of its direct helpers are steps that run (a meta function's resize_reduction), not plumbing
    helper_levels: int = 0
    # steps that run after the calls its definition makes, added to them when it is expanded (a structured
    # kernel's meta function's out= resize: Note [an out= call's resize] in graph.operators)
    then: list[Node] = field(default_factory=list)

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

# The dispatch keys whose wrappers run on the way to the backend's (Note [the autograd layer] in graph.operators).
_LAYER_KEYS = frozenset({"Autograd", "ADInplaceOrView", "BackendSelect"})


def _passes_through(node: Node) -> bool:
    """Whether a node is the one call's way into the dispatcher (the inline
    at::<op>, at::_ops::<op>::call, the autograd layer's wrappers): not a
    call below it, so no level of the depth."""
    return node.kind in (NodeKind.HEADER, NodeKind.OPS_ENTRY) or node.attrs.get("key") in _LAYER_KEYS


def grow(root: Node, expand: Expand, depth: int) -> CallNode:
    """Expand from `root` with an explicit queue: recursion on the current path
    is cut and marked, a node expanded once elsewhere is not expanded again,
    the depth is bounded and the whole tree capped at MAX_NODES."""
    expanded: set[tuple] = set()
    count = 1
    # breadth first: the shallowest occurrence of a repeated node is the one expanded (the nodes a call
    # passes through on its way into the dispatcher add no level: _passes_through)
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
                    node.children = [*expand(node), *node.then]
                except KernelmapError as e:
                    node.attrs["unresolved"] = str(e)
                    node.children = list(node.then)
            count += len(node.children)
            path = path | {node.identity}
        elif level >= depth and not _passes_through(node):  # a grouping node at the limit: keep it, cut below
            if node.children:
                node.attrs["truncated"] = f"depth {depth} reached"
                node.children = []
            continue
        # the inline at::<op>, at::_ops::<op>::call and the autograd layer's wrappers are the one
        # call's way into the dispatcher, not calls below it: they do not count toward the depth
        if _passes_through(node):  # no level of its own: its children are read before the next level (a 0-1 breadth-first walk)
            queue.extendleft((child, level, path) for child in reversed(node.children))
        else:
            queue.extend((child, level + 1, path) for child in node.children)
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


# Functions that choose a backend (_select_conv_backend, select_batch_norm_backend...).
_BACKEND_SELECTOR = re.compile(r"(^|::)_?select_\w*backend$")
# The predicates a selector asks (ConvParams::use_cudnn, use_mkldnn, use_nnpack): where the decision is made.
_BACKEND_PREDICATE = re.compile(r"Params::use_\w+$")


def cpp_node(definition, ctx: GraphContext, via: EdgeKind | None = None, condition: str | None = None, call_site: Location | None = None) -> Node:
    attrs: dict[str, Any] = {"symbol_kind": definition.symbol.kind}
    if definition.symbol.condition:
        attrs["preprocessor"] = definition.symbol.condition
    if call_site is not None:
        attrs["call_site"] = call_site
    if _BACKEND_SELECTOR.search(definition.name) or _BACKEND_PREDICATE.search(definition.name):
        attrs["keep"] = True  # where the backend is chosen: what users ask about, never plumbing
    return Node(definition.name, "kernel", definition.location, via, condition, attrs, payload=definition, identity=("cpp", definition.name, str(definition.location)))


def vendor_node(callee: str, library_id: str | None, location: Location | None, via: EdgeKind | None, condition: str | None) -> Node:
    """A call into a library outside ATen, named and marked open or closed by the vendor table."""
    library = vendors.library(library_id)
    attrs: dict[str, Any] = {"library": library.name if library else (library_id or "unknown"), "closed": bool(library and library.closed)}
    if library is not None and library.repository:
        attrs["repository"] = library.repository
    node = Node(callee, NodeKind.VENDOR, location, via, condition, attrs)
    parent = node
    for name in vendors.entries(callee, library_id):  # Note [library entries] in kernelmap.vendors
        inner = Node(name, NodeKind.VENDOR, None, EdgeKind.VENDOR, f"inside {attrs['library']}", {k: v for k, v in attrs.items() if k != "call_site"})
        parent.children = [inner]
        parent = inner
    return node
