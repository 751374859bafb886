"""Processors: small `CallTree -> CallTree` functions that reshape a tree for
showing, applied by commands from their options (and by `kernelmap render`
to a saved tree). Builders grow the whole tree their budget allows and record
what they learn as facts (`utility`, `keep`, `branch`, `identity`); these
functions decide what is shown. Each walks with an explicit stack.

    tree = prune_plumbing(collapse_branches(tree))
    tree = cut_at_depth(tree, 3)
"""

from __future__ import annotations

import functools

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
    """Drop direct-call subtrees that reach no operator, stub, loop, launch or
    vendor call and hold no helper of the tree's own code (Note [helpers as
    steps]): c10's containers, and the Python helpers that reach no torch. A tensor
    utility (empty, view, contiguous...: fact `utility`) called by a step that
    stays is kept as one step, the call with its definition and nothing below
    it (Note [utilities as steps]). A node marked "expanded above"
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
                or _runs(n)
                or bool(n.attrs.get("keep"))
                or bool(n.attrs.get("truncated"))
                or (bool(n.attrs.get("repeat")) and ident in worth)
                or any(interesting[id(c)] for c in n.children)
            )
            if interesting[id(n)] and ident:
                worth.add(ident)

    keep = {id(c) for n in order for c in n.children
            if c.attrs.get("utility") or n.kind is NodeKind.ALTERNATIVES or interesting[id(c)] or c.via is not EdgeKind.DIRECT}

    def visit(n: CallNode, children: tuple[CallNode, ...]) -> CallNode | None:
        if n is not tree.root and id(n) not in keep:
            return None
        if n.attrs.get("utility"):  # one step: what the utility runs is below --all-calls
            return n if not n.children else replace(n, children=(), attrs={k: v for k, v in n.attrs.items() if k != "repeat"})
        return _with(n, children)

    return _unmark_empty_repeats(_rebuild(tree, visit))


def _runs(n: CallNode) -> bool:
    """A helper that runs (Note [helpers as steps]): a definition of the tree's
    own code that a kept step calls, not c10's containers, not a utility."""
    if n.kind is not NodeKind.KERNEL or n.attrs.get("utility") or n.location is None:
        return False
    site = n.attrs.get("call_site")
    called_from = getattr(site, "path", None) or (str(site).rsplit(":", 1)[0] if site else None)
    machinery = _loop_machinery()
    return not n.location.path.startswith(_PLUMBING_DIRS) and n.location.path not in machinery and called_from not in machinery


@functools.cache
def _loop_machinery() -> frozenset[str]:
    """The files of the device loops' machinery, whose steps the loop rules
    choose (Note [device loop machinery] in graph.loops): a helper defined
    there or called from there (make_vectorized_loop2d, needs_dynamic_casting,
    invoke, can_vectorize_up_to) is no step by itself (Note [helpers as steps])."""
    from kernelmap.graph.code import LOOP_HEADERS
    from kernelmap.graph.loops import MACHINERY_FILES

    return frozenset((*LOOP_HEADERS, *MACHINERY_FILES, "aten/src/ATen/native/TensorIteratorDynamicCasting.h",
                      "aten/src/ATen/native/cuda/MemoryAccess.cuh", "aten/src/ATen/native/cuda/thread_constants.h"))


# Note [helpers as steps]
# ~~~~~~~~~~~~~~~~~~~~~~~
# A helper a kernel calls directly really runs: the recorded stacks of torch
# 2.13.0 show review_reduce_result under make_reduction, promote_tensor_fft
# (and the to() it makes) under fft_c2c, wrapped_scalar_tensor under le's
# meta function, norm_from_string under every fft. So the default answer keeps
# every definition of the tree's code it reached (graph.rules' KERNEL_DIRS:
# direct calls are followed into kernel code only), with the utilities it
# calls (Note [utilities as steps]); what it drops as plumbing is what lies
# below a utility and c10's containers. The answer stays readable in text:
# off the main path a step's other calls are one `+ N other calls:` line
# (fold_notes), and --all folds each run of sibling utilities to one line.
_PLUMBING_DIRS = ("c10/",)


# Note [utilities as steps]
# ~~~~~~~~~~~~~~~~~~~~~~~~~
# A tensor utility a kernel calls (matmul's reshape, transpose and expand,
# to's copy_) really runs: the binary enters its `at::_ops::<op>::call`. So
# the default answer keeps the call as a step, where it is made, with the
# utility's definition, but not what the utility runs (an allocation, a
# view's metadata): that is below --all-calls. A utility is no end of the
# call (graph.ends ranks vendor calls, launches and loops), so `where`'s
# leaves and the main path never stop at one. The helper that calls it is a
# step for itself (Note [helpers as steps]), so a utility a helper calls
# stays with it (promote_tensor_fft's to, _linalg_check_errors' item). The text view folds
# the utilities a step calls into one line (`+ 3 utilities: reshape x2,
# expand`, fold_notes); JSON and HTML keep each as a node marked `utility`.


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


# Note [the main path]
# Every answer puts the path a default call takes first: the path of the
# call's best end as graph.ends ranks it for the device and dtype (a path
# observed on the installed torch, where one was observed, takes its place).
# The producer's caller marks it on the tree as data (`mark_main_path`, fact
# `main`), so that text, JSON, HTML and the app read the same path and no
# renderer ranks anything. The text view then folds everything off that path
# (`fold_to_main_path`): each node of the path keeps the next one, and its
# other children become one note each, `+ 11 other backends: Miopen, ...`,
# with their conditions; `--all` shows the whole tree instead.


def mark_main_path(tree: CallTree, path) -> CallTree:
    """`tree` with the nodes of `path` (root first: an `End.path` of
    graph.ends, or an observed path) marked `main`. A path that continues
    below a repeat ("expanded above") through its expanded twin gets the
    twin's children there, so the marked path is whole in the tree. A path
    that does not start at the root leaves the tree as it is."""
    path = tuple(path)
    if not path or path[0] is not tree.root:
        return tree
    twins = {n.attrs["identity"]: n for n in _nodes(tree) if n.attrs.get("identity") and n.children and not n.attrs.get("repeat")}
    below: CallNode = replace(path[-1], attrs={**path[-1].attrs, "main": True})
    for k in range(len(path) - 2, -1, -1):
        node, nxt = path[k], path[k + 1]
        children, attrs = node.children, {**node.attrs, "main": True}
        if not any(c is nxt for c in children):
            twin = twins.get(node.attrs.get("identity"))
            if twin is None or not any(c is nxt for c in twin.children):
                return tree  # not a path of this tree
            children = twin.children
            attrs.pop("repeat", None)
        below = replace(node, children=tuple(below if c is nxt else c for c in children), attrs=attrs)
    return replace(tree, root=below)


def has_main_path(tree: CallTree) -> bool:
    return bool(tree.root.attrs.get("main"))


def fold_to_main_path(tree: CallTree) -> CallTree:
    """The main path alone (Note [the main path]): each node on it keeps its
    child on the path, and its other children are folded into one note
    (`+ 2 other calls: _select_conv_backend, ...`) that lists them, with
    their conditions and locations, in the fact `folded`. The path's last
    node folds its children the same way. A tree with no main path is
    returned as it is."""
    if not has_main_path(tree):
        return tree
    chain = [tree.root]
    while True:
        nxt = next((c for c in chain[-1].children if c.attrs.get("main")), None)
        if nxt is None:
            break
        chain.append(nxt)
    below: CallNode | None = None
    for i in range(len(chain) - 1, -1, -1):
        node, nxt = chain[i], chain[i + 1] if i + 1 < len(chain) else None
        others = tuple(c for c in node.children if c is not nxt)
        kept = (below,) if below is not None else ()
        below = replace(node, children=kept + fold_notes(others, nxt))
    return replace(tree, root=below)


def fold_notes(nodes, main: CallNode | None = None) -> tuple[CallNode, ...]:
    """`nodes` (the children of a step off the main path) folded into one note
    per group, in the order the groups first appear: the cases of one switch
    (`+ 11 other backends: Miopen, Mkldnn, ...`), the other branches (an `if`,
    another `#if`), and the calls made whatever the branch (no condition, or
    the `#if` the main path's own step is under)."""
    groups: dict[object, list[CallNode]] = {}
    shared = main.condition if main is not None and (main.condition or "").startswith("#if") else None
    for n in nodes:
        case = _case(n.condition)
        if n.attrs.get("utility") and not n.children:
            key: object = "utility"  # Note [utilities as steps]
        elif case is not None:
            key = ("case", case[0])
        elif (n.condition and n.condition != shared) or n.attrs.get("branch"):
            key = "branch"
        else:
            key = "call"
        groups.setdefault(key, []).append(n)
    return tuple(fold_note(group) for group in groups.values())


def fold_note(nodes) -> CallNode:
    """One note standing for `nodes`: what they are, how many, their short
    names (the enumerators of switch cases: `Miopen`, `Mkldnn`), and each
    with its condition and location in the fact `folded`."""
    nodes = tuple(nodes)
    cases = [_case(n.condition) for n in nodes]
    if all(n.attrs.get("utility") for n in nodes):  # Note [utilities as steps]: where each call is made
        names = [_bare(n) for n in nodes]
        text = f"+ {len(nodes)} {'utility' if len(nodes) == 1 else 'utilities'}: {_counted(names)}"
        folded = tuple((n.name, n.condition, str(_call_site(n)) if _call_site(n) is not None else None) for n in nodes)
        return CallNode(text, NodeKind.NOTE, attrs={"folded": folded})
    if all(cases) and len({c[0] for c in cases}) == 1:
        enum = cases[0][0]
        word = "backends" if enum.endswith("Backend") else f"{enum} cases"
        names = [c[1] for c in cases]
    else:
        word = "branches" if all(n.condition or n.attrs.get("branch") for n in nodes) else "calls"
        names = [_short(n) + (f" [{n.condition}]" if n.condition and len(nodes) <= 2 else "") for n in nodes]
    if len(nodes) == 1:
        word = word.removesuffix("es") if word.endswith("ches") else word.removesuffix("s")
    text = f"+ {len(nodes)} other {word}: {_counted(names)}"
    folded = tuple((n.name, n.condition, str(n.location) if n.location is not None else None) for n in nodes)
    return CallNode(text, NodeKind.NOTE, attrs={"folded": folded})


def _counted(names) -> str:
    """`gemm x9, gemv`: one name per definition, not nine gemms."""
    counts: dict[str, int] = {}
    for name in names:
        counts[name] = counts.get(name, 0) + 1
    return ", ".join(n + (f" x{c}" if c > 1 else "") for n, c in counts.items())


def _bare(node: CallNode) -> str:
    """A utility's name as a line of utilities reads it: `reshape`, `fill_.Scalar`."""
    return node.name.split("::", 1)[-1] if node.kind is NodeKind.OPERATOR else _short(node)


def _call_site(node: CallNode):
    """Where a call is made: its `call_site` fact (an operator's location is its schema's), else its location."""
    return node.attrs.get("call_site") or node.location


def _case(condition: str | None) -> tuple[str, str] | None:
    """`case ConvBackend::Miopen` -> (ConvBackend, Miopen)."""
    import re

    m = re.match(r"case (?:[\w:]*::)?(\w+)::(\w+)\b", condition or "")
    return (m.group(1), m.group(2)) if m else None


def _short(node: CallNode) -> str:
    """A folded node's name as a line of names reads it: an operator as
    `aten::name`, a C++ name by its last part."""
    name = node.name
    if node.kind is NodeKind.OPERATOR or "::" not in name or "(" in name:
        return name
    return name.rsplit("::", 1)[-1] or name


_ENTRY_KINDS = (NodeKind.MODULE, NodeKind.PYTHON, NodeKind.BUILTIN, NodeKind.BINDING, NodeKind.OPERATOR)


def callers_main_path(tree: CallTree) -> tuple[CallNode, ...]:
    """The main path of a callers tree: up to the entry nearest the user (an
    nn.Module, else a Python function, a builtin, a binding, an operator),
    the shortest such route, first in the tree's order among equals; the
    deepest route when none reaches one."""
    best: tuple[tuple[int, int, int], tuple[CallNode, ...]] | None = None
    order = 0
    stack: list[tuple[CallNode, tuple[CallNode, ...]]] = [(tree.root, (tree.root,))]
    while stack:
        node, path = stack.pop()
        if not node.children:
            order += 1
            rank = _ENTRY_KINDS.index(node.kind) if node.kind in _ENTRY_KINDS else len(_ENTRY_KINDS)
            key = (rank, len(path) if rank < len(_ENTRY_KINDS) else -len(path), order)
            if best is None or key < best[0]:
                best = (key, path)
            continue
        stack.extend((c, path + (c,)) for c in reversed(node.children))
    return best[1] if best is not None and len(best[1]) > 1 else ()
