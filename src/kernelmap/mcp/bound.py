"""An answer's JSON document -> the same document cut to a size limit, for a
coding agent whose client refuses long replies (Note [bounded answers]).

Nothing is cut in half: a call tree keeps whole nodes, the main path first
(the nodes its producer marked `main`, Note [the main path] in
kernelmap.processors: the ranked static path, or the path a run observed),
then the rest breadth first while the limit allows; a node whose children
did not all fit carries the fact `more` = {"id", "children", "nodes"}, and
`expand(id)` gives them, bounded the same way. A document of lists (find's references, a trace's operators)
keeps a prefix of each list and names the rest by a fold id in its
`bounded` section; expanding one gives the next page as a `fold/1` document.
A list's main item too big for the limit on its own (path's first route) is
shown whole but for its steps' facts, and `bounded.slimmed` says so.

Note [bounded answers]
A reply is measured as its JSON text, at CHARS_PER_TOKEN characters a token:
JSON full of paths and punctuation tokenizes at about 3 to 4 characters a
token, so 3 errs on the side of a shorter reply. The limit is the caller's
(8,000 tokens unless asked otherwise). What is left out is never lost: every
fold id names a node or a list position of the full answer, which the
server keeps (`Answers`, the last KEEP answers), so an expand gives exactly
what the full answer holds there.
"""

from __future__ import annotations

import json
import re
from collections import OrderedDict, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kernelmap.errors import BadInput
from kernelmap.model import Answer, CallTree, check_document, document

CHARS_PER_TOKEN = 3
DEFAULT_LIMIT = 8000  # tokens
MIN_LIMIT = 500
MAX_LIMIT = 200_000
KEEP = 256  # answers kept for expand
FOLD_COST = 80  # characters a `more` fact adds to a node, at most

# The lists of each document that may be shown in part, most important first.
LISTS: dict[str, tuple[str, ...]] = {
    "where": ("/source", "/also", "/live/registrations", "/overrides"),
    "find": ("/definitions", "/stub_registrations", "/library_registrations", "/stub_declarations", "/references"),
    "gen": ("/bindings", "/ops", "/registrations", "/ufunc", "/backward"),
    "explain": ("/steps",),
    "path": ("/routes",),
    "diff": ("/changes",),
    "trace": ("/summary/ops", "/summary/modules", "/summary/files", "/summary/gpu_time/unresolved"),
    "kernel": ("/launches",),
    "sources": ("/trees",),
    "fold": ("/items",),
}
_FOLD_ID = re.compile(r"(a\d+)\.([nl])(\d+)\.(\d+)")


_COMPACT = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"), default=str).encode


def size(value: Any) -> int:
    """Characters of `value` as compact JSON (the measure of Note [bounded answers])."""
    try:
        return len(_COMPACT(value))
    except RecursionError:  # deeper than the C encoder goes: kernelmap's own writer has no depth limit
        from kernelmap.render.json import dumps

        return len(dumps(value, indent=None)) - 1  # dumps ends its text with a newline


def tokens(value: Any) -> int:
    return -(-size(value) // CHARS_PER_TOKEN)


def check_limit(limit_tokens: int) -> int:
    if not MIN_LIMIT <= limit_tokens <= MAX_LIMIT:
        raise BadInput(f"limit_tokens is a number of tokens from {MIN_LIMIT} to {MAX_LIMIT}, not {limit_tokens}")
    return limit_tokens


# -- the main path ----------------------------------------------------------------


def main_nodes(nodes: list[dict[str, Any]], children: list[list[int]]) -> frozenset[int]:
    """The nodes (pre-order indexes of a calltree document) of its main path:
    those its producer marked with the fact `main` (Note [the main path] in
    kernelmap.processors: the ranked static path, or the observed one), or,
    in a tree with none marked, the first child at each level."""
    marked = frozenset(i for i, node in enumerate(nodes) if (node.get("facts") or {}).get("main"))
    if marked:
        return marked
    path, i = [0], 0
    while children[i]:
        i = children[i][0]
        path.append(i)
    return frozenset(path)


# -- the answers kept for expand ------------------------------------------------------


@dataclass
class Kept:
    """One full answer: its document, and for a call tree its nodes in
    pre-order (the document's node objects) with each one's parent and the
    order its children are shown in (main path first)."""

    doc: dict[str, Any]
    nodes: list[dict[str, Any]] | None = None
    parent: list[int] | None = None
    shown: list[list[int]] | None = None  # child indexes of each node, in the order shown
    counts: list[int] | None = None  # nodes in each subtree
    main: frozenset[int] = frozenset()  # the nodes of the main path


class Answers:
    """The last KEEP full answers, by id (`a1`, `a2`, ...), for expand."""

    def __init__(self, keep: int = KEEP):
        self.keep = keep
        self._kept: OrderedDict[str, Kept] = OrderedDict()
        self._next = 1

    def add(self, doc: dict[str, Any], tree: CallTree | None = None) -> str:
        aid = f"a{self._next}"
        self._next += 1
        self._kept[aid] = _kept_tree(doc) if tree is not None else Kept(doc)
        while len(self._kept) > self.keep:
            self._kept.popitem(last=False)
        return aid

    def holds(self, aid: str) -> bool:
        return aid in self._kept

    def get(self, aid: str) -> Kept:
        kept = self._kept.get(aid)
        if kept is None:
            raise BadInput(f"answer {aid} is no longer kept (the last {self.keep} answers are): ask the question again")
        self._kept.move_to_end(aid)
        return kept


def _kept_tree(doc: dict[str, Any]) -> Kept:
    nodes: list[dict[str, Any]] = []
    parent: list[int] = []
    stack: list[tuple[dict[str, Any], int]] = [(doc["root"], -1)]
    while stack:  # explicit: trees nest deep
        node, up = stack.pop()
        nodes.append(node)
        parent.append(up)
        me = len(nodes) - 1
        stack.extend((c, me) for c in reversed(node["children"]))
    children: list[list[int]] = [[] for _ in nodes]
    for i, up in enumerate(parent):
        if up >= 0:
            children[up].append(i)
    main = main_nodes(nodes, children)
    shown = [sorted(c, key=lambda i: i not in main) for c in children]  # stable: the main child first, the rest in order
    counts = [1] * len(nodes)
    for i in range(len(nodes) - 1, 0, -1):
        counts[parent[i]] += counts[i]
    return Kept(doc, nodes, parent, shown, counts, frozenset(main))


# -- bounding ---------------------------------------------------------------------------


def bound(aid: str, kept: Kept, limit_tokens: int) -> dict[str, Any]:
    """The kept answer as a document of at most about `limit_tokens` tokens."""
    if kept.nodes is not None:
        return _bound_tree(aid, kept, 0, 0, limit_tokens)
    return _bound_lists(aid, kept.doc, limit_tokens)


def expand(answers: Answers, fold_id: str, limit_tokens: int) -> dict[str, Any]:
    """What a fold id names: a call-tree node with its children from the
    fold's offset on (a calltree/2 document rooted there), or the next page of
    a list (fold/1); bounded the same way."""
    m = _FOLD_ID.fullmatch(fold_id.strip())
    if m is None:
        raise BadInput(f"not a fold id: {fold_id[:80]!r} (fold ids look like a12.n40.0 or a12.l1.20, as replies give them)")
    aid, what, number, offset = m.group(1), m.group(2), int(m.group(3)), int(m.group(4))
    kept = answers.get(aid)
    if what == "n":
        if kept.nodes is None or number >= len(kept.nodes) or offset > len(kept.shown[number]):
            raise BadInput(f"answer {aid} has no folded node {fold_id}")
        return _bound_tree(aid, kept, number, offset, limit_tokens, expanding=True)
    pointers = LISTS.get(_document_name(kept.doc), ())
    if kept.nodes is not None or number >= len(pointers):
        raise BadInput(f"answer {aid} has no folded list {fold_id}")
    items = _get(kept.doc, pointers[number])
    if not isinstance(items, list) or offset > len(items):
        raise BadInput(f"answer {aid} has no folded list {fold_id}")
    # the items' locations name their origins by key: the page carries the answer's table
    page = Fold(kept.doc["kernelmap"], pointers[number], offset, len(items), tuple(items[offset:]), None, kept.doc.get("origins") or {}).to_json()
    bounded = _bound_lists(aid, page, limit_tokens)
    # the items left out of this page continue the same list of the answer
    for fold in bounded["bounded"]["folded"]:
        fold.update(id=f"{aid}.l{number}.{offset + fold['shown']}", at=pointers[number], total=len(items), shown=offset + fold["shown"])
        bounded["next"] = fold["id"]
    return bounded


def _bound_tree(aid: str, kept: Kept, top: int, offset: int, limit_tokens: int, expanding: bool = False) -> dict[str, Any]:
    """A calltree/2 document rooted at node `top` of the kept tree, showing its
    children from `offset` on, then main path first and breadth first. An
    expansion that cannot show one child within the limit is an error that
    says the limit it needs: a page that repeated its own fold id would
    never end."""
    assert kept.nodes is not None and kept.shown is not None and kept.counts is not None
    nodes, shown, counts = kept.nodes, kept.shown, kept.counts
    limit = limit_tokens * CHARS_PER_TOKEN
    own = {}

    def cost(i: int) -> int:
        if i not in own:
            own[i] = size({k: v for k, v in nodes[i].items() if k != "children"}) + FOLD_COST + 1
        return own[i]

    head = {k: v for k, v in kept.doc.items() if k != "root"}
    if top != 0:
        ancestors = []
        up = kept.parent[top]
        while up >= 0:
            ancestors.append(nodes[up]["name"])
            up = kept.parent[up]
        head["meta"] = {**head.get("meta", {}), "expanded": {"below": ancestors[::-1], "from": offset}}
    used = size(head) + 200 + cost(top)  # 200: the `bounded` section
    first = {top: offset}  # where each included node's shown children start
    taken: dict[int, list[int]] = {top: []}
    # the main path first: from `top`, each node's first shown child (the main one)
    i = top
    while True:
        rest = shown[i][first.get(i, 0):]
        if not rest or rest[0] not in kept.main or used + cost(rest[0]) > limit:
            break
        taken[i].append(rest[0])
        taken[rest[0]] = []
        used += cost(rest[0])
        i = rest[0]
    # then breadth first, each node's children as a prefix of their shown order
    queue = deque([top])
    while queue:
        i = queue.popleft()
        for c in shown[i][first.get(i, 0) + len(taken[i]):]:
            if c in taken:
                continue
            if used + cost(c) > limit:
                break
            taken[i].append(c)
            taken[c] = []
            used += cost(c)
        queue.extend(taken[i])
    if expanding and not taken[top] and shown[top][offset:]:
        need = -(-(used + cost(shown[top][offset])) // CHARS_PER_TOKEN) + 1
        raise BadInput(f"limit_tokens {limit_tokens} leaves no room for a node below {nodes[top]['name'][:200]!r} beside the answer's "
                       f"header; expand it with limit_tokens of at least {need}")
    folds = 0

    def out(i: int) -> dict[str, Any]:
        nonlocal folds
        node = {k: v for k, v in nodes[i].items() if k != "children"}
        node["children"] = []
        start = first.get(i, 0)
        hidden = shown[i][start + len(taken[i]):]
        if hidden:
            folds += 1
            node["facts"] = {**node["facts"], "more": {"id": f"{aid}.n{i}.{start + len(taken[i])}", "children": len(hidden),
                                                         "nodes": sum(counts[c] for c in hidden)}}
        return node

    root = out(top)
    stack = [(top, root)]
    while stack:
        i, node = stack.pop()
        for c in taken[i]:
            child = out(c)
            node["children"].append(child)
            stack.append((c, child))
    result = {**head, "root": root}
    total = counts[top] - sum(counts[c] for c in shown[top][:offset])
    result["bounded"] = {"limit_tokens": limit_tokens, "answer": aid, "nodes": total, "shown": len(taken), "folded": folds,
                         "expand": "nodes with facts.more hold more: call expand with its id" if folds else None}
    result["bounded"]["tokens"] = tokens(result)
    return result


def _bound_lists(aid: str, doc: dict[str, Any], limit_tokens: int) -> dict[str, Any]:
    """`doc` with each of its declared lists cut to the prefix that fits,
    the most important list first; the rest named by fold ids."""
    name = _document_name(doc)
    pointers = [p for p in LISTS.get(name, ()) if isinstance(_get(doc, p), list)]
    limit = limit_tokens * CHARS_PER_TOKEN
    if size(doc) + 200 <= limit or not pointers:
        out = dict(doc)
        out["bounded"] = {"limit_tokens": limit_tokens, "answer": aid, "folded": []}
        out["bounded"]["tokens"] = tokens(out)
        return out
    out = _copy_along(doc, pointers)
    full = {p: _get(doc, p) for p in pointers}
    for p in pointers:
        _get(out, p).clear()
    used = size(out) + 200 + 150 * len(pointers)  # the `bounded` section and its folds
    folded = []
    slimmed = None
    for k, p in enumerate(pointers):
        items, target = full[p], _get(out, p)
        for item in items:
            c = size(item) + 1
            if used + c > limit and k == 0 and not target and (slim := _slim(item)) is not None and used + size(slim) + 1 <= limit:
                item, c = slim, size(slim) + 1  # the main item (path's first route) whole, its steps without their facts
                slimmed = {"at": f"{p}/0", "left_out": "each step's facts", "expand": f"{aid}.l{LISTS[name].index(p)}.0 with a larger limit_tokens"}
            elif used + c > limit:
                break
            target.append(item)
            used += c
        if len(target) < len(items):
            folded.append({"id": f"{aid}.l{LISTS[name].index(p)}.{len(target)}", "at": p, "shown": len(target), "total": len(items)})
    out["bounded"] = {"limit_tokens": limit_tokens, "answer": aid, "folded": folded,
                      "expand": "each folded list continues: call expand with its id" if folded else None}
    if slimmed is not None:
        out["bounded"]["slimmed"] = slimmed
    out["bounded"]["tokens"] = tokens(out)
    return out


def _slim(item: Any) -> dict[str, Any] | None:
    """A list's main item too big for the limit on its own, shown whole but
    for what a reader needs least: a route's steps without their facts (the
    kinds, names, locations, edges and conditions stay). None where the item
    has no steps."""
    if not isinstance(item, dict) or not isinstance(item.get("steps"), list):
        return None
    return {**item, "steps": [{k: v for k, v in step.items() if k != "facts"} if isinstance(step, dict) else step for step in item["steps"]]}


def _document_name(doc: Mapping[str, Any]) -> str:
    return str(doc.get("kernelmap", "")).split("/", 1)[0]


def _get(doc: Any, pointer: str) -> Any:
    """The value at a JSON pointer of plain keys (`/summary/ops`), or None."""
    value = doc
    for part in pointer.strip("/").split("/"):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def _copy_along(doc: dict[str, Any], pointers: Sequence[str]) -> dict[str, Any]:
    """A copy of `doc` in which the dicts on the way to each pointer and the
    lists at them are new objects (the rest shared), so they can be changed."""
    out = dict(doc)
    for p in pointers:
        parts = p.strip("/").split("/")
        node = out
        for part in parts[:-1]:
            node[part] = dict(node[part])
            node = node[part]
        node[parts[-1]] = list(node[parts[-1]])
    return out


# -- fold/1 ------------------------------------------------------------------------------

FOLD_VERSION = 1


@dataclass(frozen=True)
class Fold(Answer):
    """A page of a list that a bounded answer left out: the items of the list
    at `at` (a JSON pointer) of the answer document `answer` (`find/2`), from
    `start` on, of `total`; `next` is the fold id of the items after them."""

    answer: str
    at: str
    start: int
    total: int
    items: tuple[Any, ...]
    next: str | None = None
    origins: Mapping[str, Any] = field(default_factory=dict)  # the answer's origin table, which the items' locations name

    DOCUMENT = "fold"

    def to_json(self) -> dict[str, Any]:
        return document(self.DOCUMENT, FOLD_VERSION, answer=self.answer, at=self.at, start=self.start, total=self.total,
                        items=list(self.items), next=self.next, origins=dict(self.origins))

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Fold:
        d = check_document(d, cls.DOCUMENT, FOLD_VERSION)
        return cls(d["answer"], d["at"], int(d["start"]), int(d["total"]), tuple(d.get("items") or ()), d.get("next"), dict(d.get("origins") or {}))
