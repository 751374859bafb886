"""Static answers marked with what a run showed: `stack`, `path` and `where`
with `--observe`. The static graph is built as usual; this module only reads
it and the observed tree, and writes new trees (graph/ is not touched).

Note [marking a static step]
A static step is `observed` when a frame of the run is its function (the
same name, its last two scope parts compared, anonymous, inline and
capability namespaces left out; an operator by its `at::_ops::` entry; a
Python function by its name and file); `inlined` when it is not a frame but
a step below it is (the compiler folded it into its caller: a structured
`impl`'s stub call, a header's inline function); `not taken` otherwise, for
these inputs. Observed frames the static tree lacks are added under the
deepest static step the same stack passes, flagged `observed, not in the
static map`. Children are ordered observed first, inlined next, not taken
last, so the path the call took leads.
"""

from __future__ import annotations

from kernelmap.model import CallNode, CallTree, NodeKind, OperatorName, PathAnswer, Route, SourceStep, WhereAnswer
from kernelmap.observe.frames import split_scope

OBSERVED, INLINED, NOT_TAKEN, ADDED = "observed", "inlined", "not taken", "observed, not in the static map"
_SKIP_KINDS = (NodeKind.NOTE, NodeKind.ALTERNATIVES, NodeKind.AMBIGUOUS, NodeKind.SYMBOL, NodeKind.TRACE, NodeKind.THREAD, NodeKind.UNRESOLVED)
_DROP = {"(anonymous namespace)", "CPU_CAPABILITY", "DEFAULT", "AVX2", "AVX512", "ZVECTOR", "SVE256", "__cxx11", "__1"}
_ORDER = {OBSERVED: 0, ADDED: 0, INLINED: 1, None: 2, NOT_TAKEN: 3}


def name_key(name: str) -> str:
    """The last two scope parts of a C++ name, without parameters or template
    arguments: the key a static node and an observed frame are matched on."""
    text = name.split(" [", 1)[0]
    parts = [p for p in split_scope(text) if p not in _DROP]
    clean = []
    for p in parts:
        out, depth = [], 0
        for ch in p:
            if ch in "<(":
                depth += 1
            elif ch in ">)":
                depth -= 1
            elif depth == 0:
                out.append(ch)
        word = "".join(out).strip()
        if word:
            clean.append(word)
    if clean and clean[-1] == "lambda":
        clean = [c for c in clean if c != "lambda"]
    return "::".join(clean[-2:]) if len(clean) >= 2 else (clean[0] if clean else name)


def _short(name: str) -> str:
    return name_key(name).split("::")[-1]


def _op_struct(op: str) -> str:
    try:
        o = OperatorName.parse(op)
    except ValueError:
        return op
    return f"{o.name}_{o.overload}" if o.overload else o.name


class Observed:
    """The names an observed tree holds, for matching static steps."""

    def __init__(self, tree: CallTree):
        self.tree = tree
        self.keys: set[str] = set()
        self.shorts: set[str] = set()
        self.python: set[tuple[str, str]] = set()
        # (key of a frame, key of a frame below it in the same stack): a static step
        # counts as run below another only when a stack had them in that order
        self.below: set[tuple[str, str]] = set()
        stack: list[tuple[CallNode, tuple[str, ...]]] = [(tree.root, ())]
        while stack:
            node, above = stack.pop()
            key = name_key(node.name) if node.kind not in (NodeKind.TRACE, NodeKind.PYTHON) else None
            if key:
                self.below.update((a, key) for a in above)
                self.below.update((a.split("::")[-1], key) for a in above)
            stack.extend((c, above + ((key,) if key else ())) for c in node.children)
        for _, node in tree.walk():
            if node.kind is NodeKind.PYTHON:
                path = node.location.path if node.location else str(node.attrs.get("source", "")).rsplit(":", 1)[0]
                self.python.add((node.name, path.rsplit("/", 1)[-1]))
                continue
            if node.kind is NodeKind.TRACE or node.attrs.get("observed") != OBSERVED:
                continue
            self.keys.add(name_key(node.name))
            self.shorts.add(_short(node.name))

    def ran_below(self, node: CallNode, above: tuple[str, ...]) -> bool:
        """Whether `node` ran below one of the observed static steps `above`
        (any of them: a tail call leaves its caller's frame off the stack)."""
        if not self.ran(node):
            return False
        if not above or node.kind in (NodeKind.PYTHON, NodeKind.MODULE, NodeKind.OPERATOR):
            return True
        key = name_key(node.name)
        short = key.split("::")[-1]
        for a in above:
            for a_key in (a, a.split("::")[-1]):
                if (a_key, key) in self.below or ("::" not in key and any(b.split("::")[-1] == short for x, b in self.below if x == a_key)):
                    return True
        return False

    def ran(self, node: CallNode) -> bool:
        if node.kind in (NodeKind.PYTHON, NodeKind.MODULE):
            file = node.location.path.rsplit("/", 1)[-1] if node.location else ""
            short = node.name.rsplit(".", 1)[-1]
            return any(n == short and (not file or f == file) for n, f in self.python)
        if node.kind is NodeKind.OPERATOR:
            return f"_ops::{_op_struct(node.name)}" in {k for k in self.keys if k.startswith("_ops::")} or any(
                k == f"{_op_struct(node.name)}::call" for k in self.keys)
        if node.kind is NodeKind.BUILTIN:
            return False
        key = name_key(node.name)
        if key in self.keys:
            return True
        # a structured kernel's static name (`at::native::structured_mm_out_cpu::impl`) and a
        # generated wrapper named without its namespace match on the function's own name
        return "::" not in key and key in self.shorts


def mark_tree(static: CallTree, observed: CallTree) -> CallTree:
    """`static` with every step marked (Note [marking a static step]), the
    observed frames it lacks added, and the observed path first."""
    seen = Observed(observed)
    status: dict[int, str | None] = {}
    order: list[CallNode] = []
    ran: set[int] = set()
    # (node, keys of the observed static steps above it, whether a step above that cannot be
    # inlined, an operator's entry, did not run)
    stack: list[tuple[CallNode, tuple[str, ...], bool]] = [(static.root, (), False)]
    while stack:
        n, above, blocked = stack.pop()
        order.append(n)
        if n.kind not in _SKIP_KINDS and not blocked and seen.ran_below(n, above):
            ran.add(id(n))
            if n.kind not in (NodeKind.OPERATOR, NodeKind.BUILTIN, NodeKind.PYTHON, NodeKind.MODULE):
                above = above + (name_key(n.name),)
        elif n.kind in (NodeKind.OPS_ENTRY, NodeKind.OPERATOR):
            blocked = True  # an operator's entry is always a frame of its own (a wrapper may be folded into the functor)
        stack.extend((c, above, blocked) for c in n.children)
    # post-order: a step is inlined when something below it ran
    below: dict[int, bool] = {}
    for n in reversed(order):
        ran_below = any(below[id(c)] or status.get(id(c)) in (OBSERVED, INLINED) for c in n.children)
        below[id(n)] = ran_below
        if n.kind in _SKIP_KINDS or n is static.root and n.kind is NodeKind.TRACE:
            status[id(n)] = INLINED if ran_below and n.kind not in _SKIP_KINDS else None
            if n.kind in _SKIP_KINDS:
                status[id(n)] = None
            continue
        if id(n) in ran or (n.kind is NodeKind.BUILTIN and ran_below):
            status[id(n)] = OBSERVED
        elif ran_below:
            status[id(n)] = INLINED
        else:
            status[id(n)] = NOT_TAKEN
    added = _additions(static, observed, seen)
    done: dict[int, CallNode] = {}
    attached: set[str] = set()
    for n in reversed(order):
        children = [done.pop(id(c)) for c in n.children]
        short = name_key(n.name).split("::")[-1]
        if status.get(id(n)) == OBSERVED and short in added and short not in attached:
            attached.add(short)  # under one observed step of that name (post-order: the deepest)
            children += added[short]
        children.sort(key=lambda c: _ORDER.get(c.attrs.get("observed"), 2))
        attrs = dict(n.attrs)
        if status.get(id(n)):
            attrs["observed"] = status[id(n)]
        done[id(n)] = CallNode(n.name, n.kind, n.location, n.via, n.condition, tuple(children), attrs)
    counts = {s: sum(1 for v in status.values() if v == s) for s in (OBSERVED, INLINED, NOT_TAKEN)}
    n_added = sum(len(v) for v in added.values())
    note = (f"observed: {counts[OBSERVED]} steps ran, {counts[INLINED]} inlined, {counts[NOT_TAKEN]} not taken for these inputs; "
            f"{n_added} observed frames the static map lacks are added")
    meta = dict(static.meta, observed={"torch": observed.meta.get("torch"), "capability": observed.meta.get("capability"), "stacks": observed.meta.get("stacks")})
    return CallTree(done[id(static.root)], static.notes + tuple(n for n in observed.notes if n.startswith("observed on")) + (note,), meta)


def _additions(static: CallTree, observed: CallTree, seen: Observed) -> dict[str, list[CallNode]]:
    """Observed subtrees the static tree lacks, keyed by the static step they hang under."""
    static_keys = {name_key(n.name) for _, n in static.walk()}
    static_shorts = {k.split("::")[-1] for k in static_keys}
    out: dict[str, list[CallNode]] = {}
    # (node, key of the deepest static step above it)
    stack: list[tuple[CallNode, str | None]] = [(observed.root, None)]
    while stack:
        node, anchor = stack.pop()
        key = name_key(node.name)
        short = key.split("::")[-1]
        # Python frames above the binding: the static tree starts lower or names them otherwise
        known = key in static_keys or short in static_shorts or node.kind in (NodeKind.TRACE, NodeKind.PYTHON)
        if known:
            here = short if node.kind not in (NodeKind.TRACE, NodeKind.PYTHON) else anchor
            stack.extend((c, here) for c in node.children)
        elif anchor is None:
            stack.extend((c, None) for c in node.children)
        else:
            is_known = lambda n: name_key(n.name) in static_keys or name_key(n.name).split("::")[-1] in static_shorts  # noqa: E731
            out.setdefault(anchor, []).append(_flag(node, is_known))
            # below the added frames, steps the static map has (at::convolution_symint -> at::_ops::convolution::call): walk on there
            inner = [node]
            while inner:
                n = inner.pop()
                for c in n.children:
                    (stack.append((c, None)) if is_known(c) else inner.append(c))
    return out


def _flag(node: CallNode, known) -> CallNode:
    """An observed subtree, each node flagged as absent from the static map;
    a step the static map has (elsewhere) ends the subtree there."""
    order, stack = [], [node]
    while stack:
        n = stack.pop()
        order.append(n)
        stack.extend(c for c in n.children if not known(c))
    done: dict[int, CallNode] = {}
    for n in reversed(order):
        kids = tuple(done.pop(id(c)) for c in n.children if id(c) in done)
        done[id(n)] = CallNode(n.name, n.kind, n.location, n.via, n.condition, kids, dict(n.attrs, observed=ADDED))
    return done[id(node)]


def observed_path(tree: CallTree) -> tuple[CallNode, ...]:
    """The path the call took, root first, in a marked tree: down steps that
    ran (or were inlined) to the deepest vendor call, loop or kernel that ran;
    the main path `stack --observe` shows (processors.mark_main_path)."""
    # rank: the static steps that ran along the path; then a vendor call or loop at its end, the
    # one with the most below it (oneDNN's compute_dispatch, not the string formatting deep inside it)
    size: dict[int, int] = {}
    order = [n for _, n in tree.walk()]
    for n in reversed(order):
        size[id(n)] = 1 + sum(size[id(c)] for c in n.children)
    best: tuple[tuple[int, int, int, int], tuple[CallNode, ...]] = ((-1, -1, -1, 0), (tree.root,))
    stack: list[tuple[CallNode, tuple[CallNode, ...], int]] = [(tree.root, (tree.root,), 0)]
    while stack:
        node, path, ran = stack.pop()
        state = node.attrs.get("observed")
        ran += state == OBSERVED
        if state in (OBSERVED, ADDED):
            vendor = node.kind in (NodeKind.VENDOR, NodeKind.DEVICE_LOOP, NodeKind.INNER_LOOP)
            rank = (ran, int(vendor), size[id(node)] if vendor else 0, -len(path) if vendor else len(path))
            if rank > best[0]:
                best = (rank, path)
        for c in reversed(node.children):
            if c.attrs.get("observed") in (OBSERVED, INLINED, ADDED) or c.kind in _SKIP_KINDS:
                stack.append((c, path + (c,), ran))
    return best[1]


def mark_path(answer: PathAnswer, observed: CallTree) -> PathAnswer:
    """Each route's steps marked; routes whose every step ran come first."""
    seen = Observed(observed)
    routes = []
    for r in answer.routes:
        steps = []
        for s in r.steps:
            state = None if s.kind in _SKIP_KINDS else (OBSERVED if seen.ran(s) else NOT_TAKEN)
            steps.append(CallNode(s.name, s.kind, s.location, s.via, s.condition, (), dict(s.attrs, observed=state) if state else dict(s.attrs)))
        # a step not seen with a seen step below it was inlined
        last_seen = max((i for i, s in enumerate(steps) if s.attrs.get("observed") == OBSERVED), default=-1)
        steps = [CallNode(s.name, s.kind, s.location, s.via, s.condition, (), dict(s.attrs, observed=INLINED))
                 if i < last_seen and s.attrs.get("observed") == NOT_TAKEN else s for i, s in enumerate(steps)]
        routes.append(Route(tuple(steps)))
    routes.sort(key=lambda r: sum(1 for s in r.steps if s.attrs.get("observed") == NOT_TAKEN))
    ran = sum(1 for r in routes if not any(s.attrs.get("observed") == NOT_TAKEN for s in r.steps))
    note = f"observed: {ran} of {len(routes)} routes ran every step for these inputs"
    return PathAnswer(answer.source, answer.target, answer.device, tuple(routes), answer.notes + (note,), answer.searched)


def mark_where(answer: WhereAnswer, observed: CallTree) -> WhereAnswer:
    """Each source landmark (entry kernel, stub kernel, leaves) marked; the ones that ran first."""
    seen = Observed(observed)
    steps = []
    for s in answer.source:
        probe = CallNode(s.name, NodeKind.KERNEL)
        state = OBSERVED if seen.ran(probe) else NOT_TAKEN
        steps.append((state, SourceStep(s.role, s.name, s.location, "; ".join(x for x in (s.detail, state) if x))))
    steps.sort(key=lambda p: (p[1].role != "entry kernel", p[1].role != "stub kernel", _ORDER[p[0]]))
    ran = sum(1 for st, s in steps if st == OBSERVED and s.role == "leaf")
    leaves = sum(1 for _, s in steps if s.role == "leaf")
    note = f"observed: {ran} of {leaves} leaves ran for the example inputs"
    from dataclasses import replace

    return replace(answer, source=tuple(s for _, s in steps), notes=answer.notes + (note,))
