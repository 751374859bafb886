"""A trace's columns -> the views of its call tree a person or a program can
take in, without making the whole CallNode tree:

- `hot_tree`: the hottest nodes (by host time or the device time below
  them), every ancestor of a shown node shown too, to a depth; what is left
  out under a node is one `note` node saying how many calls and how much
  time. Memory grows with the nodes shown, not with the trace.
- `write_full_json`: the `trace/2` document of the whole tree, streamed
  node by node in pre-order (the same data as `TraceReport.to_json()` of the
  full tree), a slice of nodes at a time.
- `export_tree`: the whole tree as JSON Lines (one node a line, with its id
  and its parent's) or Parquet (one row a node, written a row group at a
  time), for other tools (DuckDB, pandas, Polars) in bounded memory.

Note [hot subtrees]
A node's weight is the larger of its duration and the device time of the
device events below it: a host call that launched a long kernel is hot even
when the launch itself was short. Weights shrink going down the tree (a
child's interval lies in its parent's, its device events are among its
parent's), so the `top` heaviest nodes are nearly closed under "parent of";
their ancestors are added so that every shown node hangs where it ran. Ties
go to the earlier node, so the view is the same on every run.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import msgspec
import numpy as np

from kernelmap.model import CallNode, CallTree, NodeKind, OriginTable, _plain
from kernelmap.trace.build import attrs_of, _call_node, _slices
from kernelmap.trace.codes import DEVICE_KINDS, KIND, KINDS
from kernelmap.trace.events import Attrs

_OP = KIND["op"]
_ENCODE = json.JSONEncoder(ensure_ascii=False, allow_nan=False).encode

DEFAULT_NODES = 1000  # what a bounded view shows at most: a screen's worth of lines, many times over


def weights(t) -> np.ndarray:
    """Per node: max(duration, device time below it) (Note [hot subtrees])."""
    n = len(t)
    device = np.isin(t.kind, DEVICE_KINDS)
    cs = np.concatenate([[0.0], np.cumsum(np.where(device, t.dur, 0.0))])
    starts = np.arange(n)
    below = cs[starts + t.size] - cs[starts]
    return np.maximum(t.dur, below)


def hot_nodes(t, top: int = DEFAULT_NODES, depth: int | None = None, root: int = 0) -> np.ndarray:
    """The nodes a bounded view of `root`'s subtree shows, in pre-order (Note
    [hot subtrees]). The weights are worked out a slice of nodes at a time,
    keeping the `top` heaviest so far: what this holds beyond the shown nodes
    is one float per node of the subtree (its device time prefix), not the
    dozen temporaries of `weights`."""
    end = root + int(t.size[root])
    n = end - root
    if n <= top and depth is None:
        return np.arange(root, end)
    k = min(top, n)
    # device time before each node of the subtree, in pre-order: one running sum (np.cumsum adds in order,
    # so each slice's sums, carried on from the last, are those of one sum over the whole)
    cs = np.empty(n + 1)
    cs[0] = 0.0
    for lo, hi in _slices(n, size=_HOT_SLICE):
        device = np.isin(t.kind[root + lo : root + hi], DEVICE_KINDS)
        cs[lo : hi + 1] = np.cumsum(np.concatenate([cs[lo : lo + 1], np.where(device, t.dur[root + lo : root + hi], 0.0)]))
    best_w = np.zeros(0)
    best_at = np.zeros(0, dtype=np.int64)
    for lo, hi in _slices(n, size=_HOT_SLICE):
        at = np.arange(lo, hi)
        w = np.maximum(t.dur[root + lo : root + hi], cs[at + t.size[root + lo : root + hi]] - cs[at])
        best_w, best_at = np.concatenate([best_w, w]), np.concatenate([best_at, at])
        if len(best_at) > k:  # the k heaviest so far, ties to the earlier node
            order = np.lexsort((best_at, -best_w))[:k]
            best_w, best_at = best_w[order], best_at[order]
    del cs
    chosen = np.unique(np.concatenate([[0], best_at])) + root
    # every ancestor of a chosen node (the subtree's root is one of them)
    shown = chosen
    frontier = t.parent[chosen].astype(np.int64)
    while True:
        frontier = np.setdiff1d(frontier[frontier >= root], shown)
        if not len(frontier):
            break
        shown = np.union1d(shown, frontier)
        frontier = t.parent[frontier].astype(np.int64)
    nodes = shown.astype(np.int64)
    if depth is not None:
        d = _depths(t, nodes)
        nodes = nodes[d <= depth]
    return nodes


_HOT_SLICE = 1 << 18  # nodes weighed at a time


def node_tree(trace, node: int, top: int = DEFAULT_NODES, depth: int | None = None) -> CallTree:
    """The bounded view of one node's subtree (`node`: its number, as a note
    of left-out calls names it in its `node` fact, and as --export-tree numbers
    nodes): what the web app opens when such a note is clicked."""
    t = trace._table
    if t is None or not isinstance(node, int) or not 0 <= node < len(t):
        from kernelmap.errors import BadInput

        raise BadInput(f"no node {node} in this trace (it has {len(t) if t is not None else 0})")
    nodes = hot_nodes(t, top, depth, root=node)
    notes = [f"the subtree of node {node}: {len(nodes):,} of its {int(t.size[node]):,} nodes"]
    return CallTree(subset_root(t, nodes), tuple(notes), {**trace.meta, "node": node})


def _stored_hot(trace, top: int, depth: int | None) -> np.ndarray:
    """`hot_nodes`, kept beside a stored trace's tables once chosen: a re-opened
    trace then reads the few nodes it shows, not every node's weight."""
    t = trace._table
    folder = getattr(trace, "stored", None)
    if folder is None or len(t) <= top:
        return hot_nodes(t, top, depth)
    path = Path(folder) / f"hot-{top}-{depth}.npy"
    try:
        nodes = np.load(path, allow_pickle=False)
        if nodes.ndim == 1 and nodes.dtype == np.int64 and (not len(nodes) or (nodes[0] == 0 and int(nodes.max()) < len(t))):
            return nodes
    except (OSError, ValueError):
        pass
    nodes = hot_nodes(t, top, depth).astype(np.int64)
    try:
        tmp = path.with_name(f"{path.name}.{__import__('os').getpid()}.tmp.npy")
        np.save(tmp, nodes, allow_pickle=False)
        tmp.replace(path)
    except OSError:
        pass
    return nodes


def _depths(t, nodes: np.ndarray) -> np.ndarray:
    """Depth of each of `nodes` (pre-order, closed under parent: parents first)."""
    index = {int(i): j for j, i in enumerate(nodes.tolist())}
    out = np.zeros(len(nodes), dtype=np.int64)
    parents = t.parent[nodes].tolist()
    for j, p in enumerate(parents):
        if p in index:  # the first node's parent (a subtree's root's) is not among them
            out[j] = out[index[p]] + 1
    return out


def hot_tree(trace, top: int = DEFAULT_NODES, depth: int | None = None) -> CallTree:
    """The bounded tree of a trace: its hottest `top` nodes (and their
    ancestors) to `depth`, each node's left-out children as one note node."""
    t = trace._table
    if t is None:
        return trace.tree
    n = len(t)
    nodes = _stored_hot(trace, top, depth)
    if len(nodes) == n:
        return trace.tree
    notes = list(trace.notes)
    if len(nodes) < n:
        notes.append(f"the {len(nodes):,} hottest of {n:,} nodes (host time, or the device time below them)"
                     + (f" to depth {depth}" if depth is not None else "")
                     + "; --full-tree shows them all, --export-tree FILE writes them (JSON Lines or Parquet)")
    root = None
    if getattr(trace, "kept", None) is not None:  # kept beside the tables at import (Note [trace store] in kernelmap.trace.store)
        root = trace.kept.view(trace, top, depth)
    return CallTree(root if root is not None else subset_root(t, nodes), tuple(notes), trace.meta)


def subset_root(t, nodes: np.ndarray) -> CallNode:
    """CallNodes for `nodes` (pre-order, closed under parent), each parent's
    left-out children folded into a note node."""
    display, locations = t.c.labels.display, t.c.labels.location
    kinds, labels = t.kind[nodes].tolist(), t.label[nodes].tolist()
    attrs = attrs_of(t, nodes)
    position = {int(i): j for j, i in enumerate(nodes.tolist())}
    # children shown per shown node, and what is left out (count, time)
    shown_children = np.bincount([position[p] for p in t.parent[nodes[1:]].tolist()], minlength=len(nodes)) if len(nodes) > 1 else np.zeros(1, np.int64)
    if t.n_children is not None and t.children_us is not None:  # kept by the store: read for the shown nodes only
        all_children, child_time = t.n_children[nodes].astype(np.int64), t.children_us[nodes]
    else:
        all_children = np.bincount(t.parent[1:], minlength=len(t))[nodes] if len(t) > 1 else np.zeros(1, np.int64)
        child_time = np.bincount(t.parent[1:], weights=t.dur[1:], minlength=len(t))[nodes] if len(t) > 1 else np.zeros(1)
    shown_time = np.bincount([position[p] for p in t.parent[nodes[1:]].tolist()], weights=t.dur[nodes[1:]], minlength=len(nodes)) if len(nodes) > 1 else np.zeros(1)
    checked: set = set()
    done: list[CallNode] = []
    counts = shown_children.tolist()
    for j in range(len(nodes) - 1, -1, -1):
        c = counts[j]
        children: tuple = tuple(done[-1 : -c - 1 : -1]) if c else ()
        if c:
            del done[-c:]
        hidden = int(all_children[j]) - c
        if hidden > 0:
            us = max(float(child_time[j] - shown_time[j]), 0.0)
            children += (CallNode(f"… {hidden:,} more call{'s' if hidden != 1 else ''} not shown", NodeKind.NOTE,
                                  attrs={"duration_us": round(us, 3), "node": int(nodes[j])}),)
        a = attrs[j]
        location = locations[labels[j]]
        if kinds[j] == _OP and isinstance(a, Attrs):  # an operator: its catalog entry
            location = a.shared.get("_location")
        done.append(_call_node(display[labels[j]], KINDS[kinds[j]], location, children, a, checked))
    return done[0]


# ---------------------------------------------------------------------------
# The whole tree, streamed
# ---------------------------------------------------------------------------


def _node_parts(t, origins: OriginTable) -> Iterator[tuple[int, int, str, str, str, str]]:
    """(node, parent, name JSON, kind, location JSON, facts JSON) of every node
    in pre-order, a slice at a time: the JSON of each node's calltree/2 fields.
    What many nodes share (a label's name and location, an operator's shared
    facts) is encoded once; each node's own facts are encoded per node."""
    from kernelmap.model import FACT_NAMES

    display, locations = t.c.labels.display, t.c.labels.location
    label_parts: dict[int, tuple[str, str]] = {}  # label -> (name JSON, location JSON)
    shared_parts: dict[int, tuple[frozenset, str, str]] = {}  # facts number -> (keys, items JSON, operator location JSON)
    checked: set = set()
    facts_of = t.facts
    for lo, hi in _slices(len(t)):
        nodes = np.arange(lo, hi)
        attrs = attrs_of(t, nodes)
        kinds, labels, parents = t.kind[lo:hi].tolist(), t.label[lo:hi].tolist(), t.parent[lo:hi].tolist()
        fids = facts_of[lo:hi].tolist() if facts_of is not None else [-1] * (hi - lo)
        for j in range(hi - lo):
            a, label = attrs[j], labels[j]
            parts = label_parts.get(label)
            if parts is None:
                loc = locations[label]
                parts = label_parts[label] = (_ENCODE(display[label]), _ENCODE(loc.to_json(origins)) if loc is not None else "null")
            name, location = parts
            own = a.own if isinstance(a, Attrs) else a
            key = tuple(own)
            if key not in checked:
                undeclared = set(key) - FACT_NAMES
                if undeclared:
                    raise ValueError(f"{display[label]}: undeclared node facts {sorted(undeclared)}; every fact is declared in model.FACTS")
                checked.add(key)
            try:  # a node's own facts are plain data (numbers, names, shapes): msgspec writes tuples as arrays
                own_text = _encode_plain(own).decode()
            except (TypeError, ValueError, OverflowError):
                own_text = _ENCODE({k: _plain(v, origins) for k, v in own.items()})
            if isinstance(a, Attrs):
                fid = fids[j]
                sp = shared_parts.get(fid)
                if sp is None:
                    shared = {k: v for k, v in a.shared.items() if k[:1] != "_"}
                    undeclared = shared.keys() - FACT_NAMES
                    if undeclared:
                        raise ValueError(f"{display[label]}: undeclared node facts {sorted(undeclared)}; every fact is declared in model.FACTS")
                    op_location = a.shared.get("_location")
                    sp = shared_parts[fid] = (frozenset(shared), _ENCODE({k: _plain(v, origins) for k, v in shared.items()})[1:-1],
                                              _ENCODE(op_location.to_json(origins)) if op_location is not None else "null")
                keys, shared_text, location = sp
                if keys & own.keys():  # an own fact over a shared one: the mapping decides
                    facts = _ENCODE({k: _plain(v, origins) for k, v in a.items()})
                elif not shared_text:
                    facts = own_text
                elif own_text == "{}":
                    facts = "{" + shared_text + "}"
                else:
                    facts = own_text[:-1] + ", " + shared_text + "}"
            else:
                facts = own_text
            yield lo + j, parents[j], name, KINDS[kinds[j]], location, facts


_LAYERS = {k.value: _ENCODE(k.layer) for k in NodeKind}


def _no_hook(value: Any) -> Any:
    raise TypeError(type(value).__name__)


_encode_plain = msgspec.json.Encoder(enc_hook=_no_hook).encode


def _body(name: str, kind: str, location: str, facts: str) -> str:
    """A node's calltree/2 fields but its children, as JSON object members."""
    return (f'"name": {name}, "kind": "{kind}", "layer": {_LAYERS[kind]}, "location": {location}, '
            f'"via": null, "condition": null, "facts": {facts}')


def write_full_json(trace, out: IO[str], summary: bool = True) -> None:
    """The trace/2 document of the whole tree (and the summary), written to
    `out` node by node: memory holds a slice of nodes, not the tree."""
    t = trace._table
    origins = OriginTable()
    out.write('{"kernelmap": "trace/2", "tree": {"kernelmap": "calltree/2", "kind": "trace", "notes": ')
    out.write(_ENCODE(list(trace.notes)))
    out.write(', "meta": ' + _ENCODE(_plain(dict(trace.meta), origins)) + ', "root": ')
    ends: list[int] = []  # the subtree ends of the open nodes, innermost last
    size = t.size
    for i, _, name, kind, location, facts in _node_parts(t, origins):
        while ends and ends[-1] <= i:
            ends.pop()
            out.write("]}")
        if ends and i > 0 and t.parent[i] != i - 1:  # not its parent's first child
            out.write(",\n")
        elif ends:
            out.write("\n")
        out.write("{" + _body(name, kind, location, facts) + ', "children": [')
        ends.append(i + int(size[i]))
    while ends:
        ends.pop()
        out.write("]}")
    out.write(', "origins": ' + _ENCODE(origins.to_json()) + "}")
    out.write(', "summary": ' + (_ENCODE(trace.summary().to_json()) if summary else "null") + "}\n")


def export_tree(trace, path: Path, fmt: str | None = None) -> int:
    """Write the whole tree to `path`: Parquet (`fmt`, else a `.parquet`
    name), else JSON Lines (one node a line: id, parent, and the node's
    calltree/2 fields but its children). Returns the number of nodes."""
    t = trace._table
    if t is None:
        raise ValueError("a trace without columns")
    origins = OriginTable()
    if (fmt or ("parquet" if path.name.endswith(".parquet") else "jsonl")) == "parquet":
        return _export_parquet(t, path, origins)
    n = 0
    with open(path, "w", encoding="utf-8") as f:
        for i, parent, name, kind, location, facts in _node_parts(t, origins):
            f.write(f'{{"id": {i}, "parent": {parent if parent >= 0 else "null"}, ' + _body(name, kind, location, facts) + "}\n")
            n += 1
        f.write(_ENCODE({"origins": origins.to_json(), "notes": list(trace.notes)}) + "\n")
    return n


def _export_parquet(t, path: Path, origins: OriginTable) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema([("id", pa.int64()), ("parent", pa.int64()), ("size", pa.int64()), ("kind", pa.string()), ("name", pa.large_string()),
                        ("start_us", pa.float64()), ("duration_us", pa.float64()), ("location", pa.string()), ("facts", pa.large_string())])
    n = 0
    with pq.ParquetWriter(str(path), schema, compression="zstd") as writer:
        batch: dict[str, list] = {k: [] for k in schema.names}

        def flush() -> None:
            if batch["id"]:
                writer.write_table(pa.table(batch, schema=schema))
                for v in batch.values():
                    v.clear()

        display = t.c.labels.display
        for i, parent, _, kind, location, facts in _node_parts(t, origins):
            batch["id"].append(i)
            batch["parent"].append(parent)
            batch["size"].append(int(t.size[i]))
            batch["kind"].append(kind)
            batch["name"].append(display[int(t.label[i])])
            batch["start_us"].append(float(t.ts[i]))
            batch["duration_us"].append(round(float(t.dur[i]), 3))
            batch["location"].append(None if location == "null" else location)
            batch["facts"].append(facts)
            n += 1
            if len(batch["id"]) >= 1 << 13:
                flush()
        flush()
    return n
