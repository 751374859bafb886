"""Chrome/Kineto trace events -> one nested call tree, held as columns.

The profiler writes complete events (`ph: "X"`) per thread; nesting is not
stored, it is implied by time: an event that starts inside another on the
same thread ran inside it. Python frames (`python_function`), operators
(`cpu_op`), annotations and runtime calls (`cuda_runtime`, `cuda_driver`)
live on host threads and are nested by time with one explicit stack per
thread. Device activity (`kernel`, `gpu_memcpy`, `gpu_memset`) runs on
streams, not threads: each is hung under the runtime call that launched it,
found by its correlation id (`args.correlation`), by the `ac2g` flow events
that join launch and kernel, or failing both by its `External id` (the
operator that was running).

Note [trace tree shape]
root (trace) -> thread -> user Python frames and nn.Module frames ->
torch.nn.functional frames -> builtin -> aten ops, nested as the
dispatcher called them -> runtime call (cudaLaunchKernel) -> GPU kernel. Autograd nodes
(`autograd::engine::evaluate_function: XBackward0`) become one `autograd`
node whose children are the aten ops of the backward formula. Python frames
that ran no operator are dropped, and the wrappers every module call passes
through (`Module._call_impl`, ...) are spliced out, unless all frames are kept.

Note [columnar trace]
A trace of a million events would be a million Python objects twice over
(builder nodes, then frozen CallNodes) and gigabytes for a large file. The
events are kept instead as NumPy columns, one row per complete event of a
kept category (`Collected`), and the tree as columns over its nodes in
pre-order (`Table`: kind, label, row, parent, subtree size, start,
duration), so a subtree is a contiguous range and the summary's sums are
array operations. Facts shared by many nodes (a label's kind, display name
and Python location; an operator's resolved facts) are stored once and
referred to by index. CallNodes are made only when the tree itself is asked
for (`to_tree`), one pass in reverse pre-order.

The events become columns in `collect`, with the codes of `codes` and the
kinds and names of `events`; this module nests them into the tree.

Note [import memory]
What an import holds grows with the trace in two ways: the columns themselves
(the collected events, then the tree's, about 80 bytes an event together at
the build's end) and the temporaries made over them. The temporaries are kept
to a slice (`_slices`) or to int32 wherever a pass allows it: the nesting
reads start and duration of a slice of the sorted rows at a time, the
pre-order's rows and parents are gathered a slice at a time, and np.lexsort
being stable, file order needs no key of its own. What is left whole is the
sort of the host events (its keys, about 30 bytes a host event) and the
columns: a build bounded whatever the size needs those spilled to the cache
(sort runs merged, the columns written as they are made), which this module
does not do yet.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import math

import numpy as np

from kernelmap.model import CallNode, CallTree, FACT_NAMES, NodeKind
from kernelmap.trace.codes import (
    _CAT_RANK,
    combine,
    DEVICE_KINDS,
    _FIRST_DEVICE_CAT,
    _FRAMES,
    KIND,
    KINDS,
    LINKS,
    NONE,
    usable,
)
from kernelmap.trace.collect import Collected, _POOLED
from kernelmap.trace.events import Attrs, _EPS, _SPLICED_FRAMES


# ---------------------------------------------------------------------------
# The tree, as columns in pre-order
# ---------------------------------------------------------------------------


@dataclass
class Table:
    """The call tree as columns, one entry per node in pre-order (Note
    [columnar trace]): node i's subtree is nodes i .. i + size[i] - 1."""

    c: Collected
    kind: np.ndarray  # int8, KINDS
    label: np.ndarray  # int32, c.labels
    row: np.ndarray  # int64: the node's row in c's columns, -1 for the root and thread nodes
    parent: np.ndarray  # int32, -1 for the root
    size: np.ndarray  # int32
    ts: np.ndarray
    dur: np.ndarray
    linked: np.ndarray  # int8 per node: LINKS, how a device event was joined to its launch
    notes: list[str] = field(default_factory=list)
    threads: dict[int, tuple[Any, Any]] = field(default_factory=dict)  # thread node -> (pid, tid)
    own: dict[int, dict[str, Any]] = field(default_factory=dict)  # node -> facts of its own, set while resolving
    facts: np.ndarray | None = None  # int32 per node: shared[facts[i]] are node i's shared facts (-1: none)
    shared: list[dict[str, Any]] = field(default_factory=list)
    resolved: bool = False
    n_children: np.ndarray | None = None  # int32 per node: its children (kept by the trace store; None: counted when asked)
    children_us: np.ndarray | None = None  # float64 per node: its children's durations summed (kept likewise)

    def __len__(self) -> int:
        return len(self.kind)

    def column(self, name: str, fill: Any, nodes: np.ndarray | None = None) -> np.ndarray:
        """A row column of the collected events, per node (of `nodes`, else of
        all), `fill` for nodes of no event."""
        rows = self.row if nodes is None else self.row[nodes]
        out = np.full(len(rows), fill, dtype=self.c.columns[name].dtype)
        has = rows >= 0
        out[has] = self.c.columns[name][rows[has]]
        return out

    def children(self, i: int) -> Iterator[int]:
        j, end, size = i + 1, i + int(self.size[i]), self.size
        while j < end:
            yield j
            j += int(size[j])


def build(c: Collected, keep_frames: bool = False) -> Table:
    """The whole tree: one child of the root per host thread, plus device
    events no launch could be found for (Note [trace tree shape])."""
    labels = c.labels
    kind_of = np.array(labels.kind, dtype=np.int8) if labels.kind else np.zeros(0, dtype=np.int8)
    n_rows = len(c.ts)
    kind_rows = kind_of[c.label] if n_rows else np.zeros(0, dtype=np.int8)
    host = np.flatnonzero(c.cat < _FIRST_DEVICE_CAT)
    device = np.flatnonzero(c.cat >= _FIRST_DEVICE_CAT)
    c.device_count = len(device)

    # Host events: nested by time per thread, threads by their first event.
    n_threads = len(c.threads)
    tmin = np.full(n_threads, np.inf)
    np.minimum.at(tmin, c.thread[host], c.ts[host])
    first = np.full(n_threads, np.iinfo(np.int64).max)
    np.minimum.at(first, c.thread[host], host)
    thread_rank = np.empty(n_threads, dtype=np.int32)
    thread_rank[np.lexsort((first, tmin))] = np.arange(n_threads)
    # (Rows are in file order, so a row's index orders as its event's: `host` itself is the last key,
    # not a copy of the event column; likewise below.)
    longest_first = c.dur[host]
    np.negative(longest_first, out=longest_first)  # (in place: no second copy of the column)
    order = host[np.lexsort((host, _CAT_RANK[c.cat[host]], longest_first, c.ts[host], thread_rank[c.thread[host]]))]
    del longest_first
    parent0 = _nest(c.ts, c.dur, thread_rank[c.thread[order]], order)
    H = len(order)
    pos_of_row = np.full(n_rows, -1, dtype=np.int64)
    pos_of_row[order] = np.arange(H)
    kind_pos = kind_rows[order]

    launch, how = _attach_device(c, host, device, kind_rows, pos_of_row)
    del pos_of_row, host

    # Simplify: drop Python frames that ran no operator, splice out wrapper frames
    # and the autograd engine's duplicate record of a node.
    children_count = np.bincount(parent0[parent0 >= 0], minlength=H) + np.bincount(launch[launch >= 0], minlength=H)
    work = ~np.isin(kind_pos, _FRAMES)
    work[launch[launch >= 0]] = True
    work = _propagate_up(work, parent0)
    label_pos = c.label[order]
    keep = work | keep_frames
    if not keep_frames:
        noise = np.array([bool(_SPLICED_FRAMES.match(raw)) for raw in labels.raw], dtype=bool) if labels.raw else np.zeros(0, bool)
        keep &= ~(np.isin(kind_pos, (KIND["python"], KIND["builtin"])) & noise[label_pos])
    has_parent = parent0 >= 0
    p = np.where(has_parent, parent0, 0)
    display_ids = codes_of(labels.display)[0]
    same_name = display_ids[label_pos] == display_ids[label_pos[p]] if H else np.zeros(0, bool)
    autograd_parent = has_parent & (kind_pos[p] == KIND["autograd"]) & same_name
    duplicate = autograd_parent & (((kind_pos == KIND["autograd"]) & (children_count[p] == 1)) | (kind_pos == KIND["annotation"]))
    keep &= ~duplicate
    del has_parent, p, same_name, autograd_parent, duplicate, children_count, work, label_pos, kind_pos
    up = _effective_parents(parent0, keep)
    del parent0  # (what the simplification used, freed before the pre-order's arrays are made)

    # Pre-order: each kept host node, then the device events hung under it (file
    # order). Positions are host positions: a device event's is its launch's.
    # (Arrays are freed as soon as they are used: a million events make each 8 MB.)
    attached = np.flatnonzero(launch >= 0)
    kept = np.flatnonzero(keep).astype(np.int32)
    del keep
    n_kept = len(kept)
    body_pos = np.concatenate([kept, launch[attached].astype(np.int32)])
    # (np.lexsort is stable: device events under one launch stay in the order
    # given, which is file order; no key of their rows is made)
    body_order = np.lexsort((np.concatenate([np.zeros(n_kept, np.int8), np.ones(len(attached), np.int8)]), body_pos))
    B = len(body_order)
    body_row = np.empty(B, dtype=np.int64)
    for lo, hi in _slices(B):  # (a slice at a time: no joined copy of the rows to index)
        at = body_order[lo:hi]
        is_kept = at < n_kept
        part = np.empty(hi - lo, dtype=np.int64)
        part[is_kept] = order[kept[at[is_kept]]]
        part[~is_kept] = device[attached[at[~is_kept] - n_kept]]
        body_row[lo:hi] = part
    body_link = np.concatenate([np.zeros(n_kept, np.int8), how[attached]])[body_order]
    del kept, attached, how
    body_pos = body_pos[body_order]
    is_host = body_order < n_kept
    del body_order
    body_tid = c.thread[order[body_pos]] if B else np.zeros(0, np.int32)  # a device event: its launch's thread
    del order
    starts = np.flatnonzero(np.diff(body_tid, prepend=-1)) if B else np.zeros(0, np.int64)
    n_thr = len(starts)
    thread_keys = [c.threads[int(body_tid[j])] for j in starts.tolist()]
    del body_tid
    # final index of body element j: j + 1 (root) + the thread nodes at or before it
    thread_of_body = np.zeros(B, dtype=np.int32)
    thread_of_body[starts] = 1
    thread_of_body = np.cumsum(thread_of_body, dtype=np.int32) - 1
    final_body = np.arange(2, B + 2, dtype=np.int32) + thread_of_body
    thread_final = starts + 1 + np.arange(n_thr)
    orphans = device[launch < 0]
    del launch, device
    N = 1 + n_thr + B + (1 + len(orphans) if len(orphans) else 0)

    final_of_pos = np.full(H, -1, dtype=np.int32)
    final_of_pos[body_pos[is_host]] = final_body[is_host]
    parent = np.full(N, -1, dtype=np.int32)
    parent[thread_final] = 0
    # a host node's parent: its nearest kept ancestor, else its thread; a device event's: its launch
    # (a slice at a time: no temporary as long as the tree)
    thread_final32 = thread_final.astype(np.int32)
    for lo, hi in _slices(B):
        pos = body_pos[lo:hi]
        up_or_launch = np.where(is_host[lo:hi], up[pos], pos)
        parent[final_body[lo:hi]] = np.where(up_or_launch >= 0, final_of_pos[np.maximum(up_or_launch, 0)],
                                             thread_final32[thread_of_body[lo:hi]])
    del up, body_pos, final_of_pos
    kind = np.empty(N, dtype=np.int8)
    label = np.empty(N, dtype=np.int32)
    row = np.full(N, -1, dtype=np.int64)
    linked = np.zeros(N, dtype=np.int8)
    kind[0] = KIND["trace"]
    label[0] = labels.add("trace", "trace", "trace")
    kind[thread_final] = KIND["thread"]
    row[final_body] = body_row
    linked[final_body] = body_link
    del body_link, is_host
    table = Table(c, kind, label, row, parent, np.ones(N, dtype=np.int32), np.zeros(N), np.zeros(N), linked)
    orphan_label, orphan_ts, orphan_dur = c.label[orphans], c.ts[orphans], c.dur[orphans]
    # The table holds the event columns per node now: each copied a slice at a
    # time (no temporary as long as the column) and freed at once.
    del c.columns["cat"]
    for out, column in ((kind, None), (label, "label"), (table.ts, "ts"), (table.dur, "dur")):
        values = kind_rows if column is None else c.columns[column]
        for lo, hi in _slices(B):
            out[final_body[lo:hi]] = values[body_row[lo:hi]]
        if column is not None:
            del c.columns[column], values
    del body_row

    # Thread nodes: named, spanning their top-level nodes.
    top = final_body[parent[final_body] == thread_final[thread_of_body]]
    del final_body, thread_of_body
    top_thread = np.searchsorted(thread_final, top, side="right") - 1
    t_start = np.full(n_thr, np.inf)
    t_end = np.full(n_thr, -np.inf)
    np.minimum.at(t_start, top_thread, table.ts[top])
    np.maximum.at(t_end, top_thread, table.ts[top] + table.dur[top])
    for t, f in enumerate(thread_final.tolist()):
        key = thread_keys[t]
        name = c.thread_names.get(key) or f"thread {key[1]}"
        label[f] = labels.add(name, "thread", name)
        table.threads[f] = key
        table.ts[f] = t_start[t]
        table.dur[f] = t_end[t] - t_start[t]
    if len(orphans):
        g = 1 + n_thr + B
        table.notes.append(f"{len(orphans)} device events could not be joined to a launch (no correlation id or flow)")
        kind[g], parent[g] = KIND["thread"], 0
        label[g] = labels.add("device events without a launch", "thread", "device events without a launch")
        rest = np.arange(g + 1, N)
        parent[rest], kind[rest], label[rest], row[rest] = g, kind_rows[orphans], orphan_label, orphans
        table.ts[rest], table.dur[rest] = orphan_ts, orphan_dur
    if n_thr:  # the group of device events without a launch starts and ends at 0
        table.ts[0] = min(t_start.min(), 0.0) if len(orphans) else t_start.min()
        ends = table.ts[thread_final] + table.dur[thread_final]
        table.dur[0] = max(ends.max(), 0.0) - table.ts[0] if len(orphans) else ends.max() - table.ts[0]
    table.size = subtree_sizes(parent)
    _link_backward(table)
    return table


def _nest(ts: np.ndarray, dur: np.ndarray, thread: np.ndarray, order: np.ndarray | None = None) -> np.ndarray:
    """Parents (positions, -1 at the top) of host events sorted by thread, start,
    longest first: each starts inside the innermost open event of its thread
    (an event with a duration closes _EPS early; one of none starting with its
    parent stays inside it). With `order`, `ts` and `dur` are the event columns
    and position k is row order[k] (read a slice at a time: no sorted copy of
    either column)."""
    n = len(thread)
    parent = np.full(n, -1, dtype=np.int32)
    new_thread = np.flatnonzero(np.diff(thread)) + 1  # where each thread after the first begins
    begins = {0, *new_thread.tolist()}
    # The innermost open event is kept in locals (position, closes at, starts
    # at), the ones it is inside on a stack under a bottom that never closes:
    # one tuple per event, no index or length taken per event.
    bottom = (-1, math.inf, math.nan)
    top_pos, top_close, top_start = bottom
    stack: list[tuple[int, float, float]] = []
    for lo, hi in _slices(n):
        rows = slice(lo, hi) if order is None else order[lo:hi]
        ts_s, dur_s = ts[rows], dur[rows]
        ts_l, closes, instant = ts_s.tolist(), (ts_s + dur_s - np.where(dur_s > 0, _EPS, 0.0)).tolist(), (dur_s == 0).tolist()
        out = [-1] * (hi - lo)
        cuts = new_thread[(new_thread > lo) & (new_thread < hi)].tolist()
        for a, b in zip([lo, *cuts], [*cuts, hi]):
            if a in begins:  # a thread's first event: nothing is open
                top_pos, top_close, top_start = bottom
                stack = []
            for k, t in enumerate(ts_l[a - lo : b - lo], a - lo):
                while t >= top_close and (t != top_start or not instant[k]):
                    top_pos, top_close, top_start = stack.pop()
                out[k] = top_pos
                stack.append((top_pos, top_close, top_start))
                top_pos, top_close, top_start = k + lo, closes[k], t
        parent[lo:hi] = out
    return parent


_SLICE = 1 << 16  # rows turned into Python lists at a time (a list of a million ints is 36 MB)


def _slices(n: int, backwards: bool = False, size: int | None = None):
    starts = range(0, n, size or _SLICE)  # (_SLICE read when called: the tests make it tiny)
    size = size or _SLICE
    for lo in reversed(starts) if backwards else starts:
        yield lo, min(lo + size, n)


def _propagate_up(flag: np.ndarray, parent: np.ndarray) -> np.ndarray:
    """`flag` or'ed into every ancestor (parents come before children)."""
    out = flag.tolist()  # True and False: no objects of their own
    for lo, hi in _slices(len(out), backwards=True):
        par = parent[lo:hi].tolist()
        for k in range(hi - 1, lo - 1, -1):
            if out[k]:
                p = par[k - lo]
                if p >= 0:
                    out[p] = True
    return np.array(out, dtype=bool)


def _effective_parents(parent: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """The nearest kept ancestor of each node (-1: none), in pre-order."""
    up = np.full(len(parent), -1, dtype=np.int32)
    kept = keep.tolist()
    spliced = np.flatnonzero(~keep)
    if not len(spliced):
        up[:] = parent
        return up
    for lo, hi in _slices(len(parent)):
        par = parent[lo:hi].tolist()
        out = [-1] * (hi - lo)
        for k, p in enumerate(par):
            if p >= 0:
                out[k] = p if kept[p] else (out[p - lo] if p >= lo else int(up[p]))
        up[lo:hi] = out
    return up


def subtree_sizes(parent: np.ndarray) -> np.ndarray:
    """Subtree sizes from parents in pre-order."""
    size = [1] * len(parent)  # mostly small ints: no objects of their own
    for lo, hi in _slices(len(parent), backwards=True):
        par = parent[lo:hi].tolist()
        for i in range(hi - 1, max(lo, 1) - 1, -1):
            size[par[i - lo]] += size[i]
    return np.array(size, dtype=np.int32)


def codes_of(values: list[Any]) -> tuple[np.ndarray, list[Any]]:
    """Codes of `values` (equal values, equal codes) and the distinct values by code."""
    codes: dict[Any, int] = {}
    out = np.array([codes.setdefault(v, len(codes)) for v in values], dtype=np.int64)
    return out, list(codes)


def _attach_device(c: Collected, host: np.ndarray, device: np.ndarray, kind_rows: np.ndarray, pos_of_row: np.ndarray):
    """The launch (host position) of each device row, -1 when none is found,
    and how it was found (LINKS)."""
    launch = np.full(len(device), -1, dtype=np.int64)
    how = np.zeros(len(device), dtype=np.int8)
    if not len(device):
        return launch, how
    # Hosts in thread order, then file order: a later duplicate wins, as in a dict.
    hosts = host[np.lexsort((host, c.thread[host]))]  # (rows in file order: see build)
    runtime = hosts[kind_rows[hosts] == KIND["runtime"]]
    has_corr = runtime[c.corr[runtime] != NONE]
    launch[:] = _lookup(c.corr[has_corr], pos_of_row[has_corr], c.corr[device], last=True)
    how[launch >= 0] = 1
    missing = np.flatnonzero(launch < 0)
    if len(missing) and len(c.flows.get("id", ())):
        found = _flow_launches(c, runtime, pos_of_row[runtime], device[missing])
        launch[missing[found >= 0]], how[missing[found >= 0]] = found[found >= 0], 2
        missing = np.flatnonzero(launch < 0)
    if len(missing):
        ops = hosts[(kind_rows[hosts] == KIND["op"]) & (c.ext[hosts] != NONE)]
        found = _lookup(c.ext[ops], pos_of_row[ops], c.ext[device[missing]], last=False)
        launch[missing[found >= 0]], how[missing[found >= 0]] = found[found >= 0], 3
    return launch, how


def _flow_launches(c: Collected, runtime: np.ndarray, positions: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Per device row of `rows`, the position of the runtime call (of
    `runtime`, at `positions`) a flow joins it to (-1: none): a flow's start
    lies where the call starts (thread and time), its end where the device
    event starts; of flows with one id, the last start and the last end
    count, and of flows ending at one place, the one whose id ends last in
    the file's order of ids (as dicts built in file order keep them)."""
    f = c.flows
    starts, ends = np.flatnonzero(~f["end"]), np.flatnonzero(f["end"])
    # Each (thread, start time) one code, the same in all four groups (-0.0 and 0.0 alike, as == has them).
    parts = [(c.thread[runtime], c.ts[runtime]), (f["thread"][starts], f["ts"][starts]), (f["thread"][ends], f["ts"][ends]),
             (c.thread[rows], c.ts[rows])]
    bits = (np.concatenate([ts for _, ts in parts]).astype(np.float64) + 0.0).view(np.int64)
    place = combine(np.concatenate([t for t, _ in parts]).astype(np.int64), np.unique(bits, return_inverse=True)[1].reshape(-1))
    at = np.cumsum([0, *(len(t) for t, _ in parts)])
    runtime_at, start_at, end_at, row_at = (place[at[k] : at[k + 1]] for k in range(4))
    start_ids, end_ids = f["id"][starts], f["id"][ends]
    fids, first = np.unique(end_ids, return_index=True)
    last = len(end_ids) - 1 - np.unique(end_ids[::-1], return_index=True)[1]
    start = _lookup(start_ids, start_at, fids, last=True, absent=None)
    launch = _lookup(runtime_at, positions, start, last=True)
    joined = np.flatnonzero(launch >= 0)
    joined = joined[np.argsort(first[joined], kind="stable")]  # in the order the ids first end
    return _lookup(end_at[last[joined]], launch[joined], row_at, last=True)


def _lookup(keys: np.ndarray, values: np.ndarray, wanted: np.ndarray, last: bool, absent: int | None = NONE) -> np.ndarray:
    """Per code of `wanted`, the value of the equal key (-1: none, or
    `absent` wanted): of equal keys the last (`last`) or the first, as a
    dict built in their order (or with setdefault) keeps. A sorted join: no
    Python object per event."""
    out = np.full(len(wanted), -1, dtype=np.int64)
    if not len(keys) or not len(wanted):
        return out
    order = np.argsort(keys, kind="stable")
    keys, values = keys[order], values[order]
    del order
    edge = np.ones(len(keys), dtype=bool)  # the kept one of each run of equal keys
    if last:
        edge[:-1] = keys[1:] != keys[:-1]
    else:
        edge[1:] = keys[1:] != keys[:-1]
    keys, values = keys[edge], values[edge]
    at = np.minimum(np.searchsorted(keys, wanted), len(keys) - 1)
    hit = keys[at] == wanted
    if absent is not None:
        hit &= wanted != absent
    out[hit] = values[at[hit]]
    return out


def _link_backward(t: Table) -> None:
    """Name on each autograd node the forward operator that recorded it: the
    forward op carries a sequence number, the node repeats it with the id of
    the forward thread."""
    both = np.flatnonzero(np.isin(t.kind, (KIND["op"], KIND["autograd"])))  # (the sequence numbers of these only: no column per node)
    seq = t.column("seq", NONE, both)
    good = usable(seq)
    is_op = t.kind[both] == KIND["op"]
    ops, op_seq = both[good & is_op], seq[good & is_op]
    nodes, node_seq = both[good & ~is_op], seq[good & ~is_op]
    del both, seq, good, is_op
    display = t.c.labels.display
    forward = _lookup(op_seq, t.label[ops].astype(np.int64), node_seq, last=True)  # pre-order: the innermost op wins
    for i, s, fwd in zip(nodes.tolist(), node_seq.tolist(), forward.tolist()):
        own = t.own.setdefault(i, {})
        own["sequence_nr"] = t.c.values.decode(int(s))
        if fwd >= 0 and display[fwd]:
            own["forward_op"] = display[fwd]


# ---------------------------------------------------------------------------
# The frozen tree, on demand
# ---------------------------------------------------------------------------


_THREAD, _TRACE, _OP = KIND["thread"], KIND["trace"], KIND["op"]
_FRAME_KINDS = frozenset(_FRAMES.tolist())
_DEVICE_KIND_SET = frozenset(DEVICE_KINDS.tolist())
_DEVICE_COLUMNS = (("gpu", "gpu"), ("stream", "stream"), ("grid", "grid"), ("block", "block"), ("corr", "correlation"))


def attrs_of(t: Table, nodes: np.ndarray) -> list[Mapping[str, Any]]:
    """The facts of each of `nodes`, as their CallNodes carry them: the
    columns are read for all of them at once, then one dict a node."""
    c = t.c
    kinds, labels, links = t.kind[nodes].tolist(), t.label[nodes].tolist(), t.linked[nodes].tolist()
    durs, starts = t.dur[nodes].tolist(), t.ts[nodes].tolist()
    events = t.column("event", -1, nodes).tolist()
    threads = t.column("thread", -1, nodes).tolist()
    facts = t.facts[nodes].tolist() if t.facts is not None else [-1] * len(nodes)
    dims = t.column("dims", -1, nodes).tolist() if t.resolved else None
    device = None
    if t.resolved:  # resolution adds a device event's own facts too
        device = [t.column(column, -1 if column in _POOLED else NONE, nodes).tolist() for column, _ in _DEVICE_COLUMNS]
    raw, pool, shared, own_of, decode = c.labels.raw, c.pool.items, t.shared, t.own, c.values.decode
    out: list[Mapping[str, Any]] = []
    for j, i in enumerate(nodes.tolist()):
        kind = kinds[j]
        a: dict[str, Any] = {}
        if kind in _DEVICE_KIND_SET:
            a["pid"], a["tid"] = c.threads[threads[j]]
            if links[j]:
                a["linked_by"] = LINKS[links[j]]
        elif kind in _FRAME_KINDS:
            a["frame"] = raw[labels[j]]
        elif kind == _THREAD and i in t.threads:
            a["pid"], a["tid"] = t.threads[i]
        elif kind == _OP and dims is not None and dims[j] >= 0 and pool[dims[j]]:
            a["input_shapes"] = pool[dims[j]]
        own = own_of.get(i)
        if own:
            a.update(own)
        if kind in _DEVICE_KIND_SET:
            if device is not None:
                if facts[j] >= 0:
                    a.update(shared[facts[j]])
                for k, (column, key) in enumerate(_DEVICE_COLUMNS):
                    code = device[k][j]
                    if column in _POOLED:
                        if code >= 0:
                            a[key] = pool[code]
                    elif code != NONE:
                        a[key] = decode(code)
            a["duration_us"] = round(durs[j], 3)
            a["start_us"] = starts[j]
        elif kind != _TRACE or durs[j]:
            a["duration_us"] = round(durs[j], 3)
        if events[j] >= 0:
            a["event"] = events[j]
        out.append(Attrs(a, shared[facts[j]]) if kind == _OP and facts[j] >= 0 else a)
    return out


def kernels_of(t: Table, libraries: tuple[str, ...]) -> list[tuple[float, str, float]]:
    """(start µs, name, duration µs) of each GPU kernel node whose library is one of `libraries`."""
    if t.facts is None:
        return []
    wanted = np.array([f.get("library") in libraries for f in t.shared] + [False], dtype=bool)
    nodes = np.flatnonzero((t.kind == KIND["gpu_kernel"]) & wanted[t.facts])  # facts -1: the last, False
    display = t.c.labels.display
    return [(float(t.ts[i]), display[t.label[i]], round(float(t.dur[i]), 3)) for i in nodes.tolist()]


def to_tree(t: Table, notes: list[str], meta: dict[str, Any]) -> CallTree:
    """The frozen CallNode tree (reverse pre-order with an explicit stack),
    its facts read a slice of nodes at a time."""
    checked: set = set()
    display = t.c.labels.display
    locations = t.c.labels.location
    kinds = t.kind.tolist()
    label = t.label.tolist()
    counts = np.bincount(t.parent[1:], minlength=len(t)).tolist() if len(t) > 1 else [0]
    op = KIND["op"]
    done: list[CallNode] = []
    for lo, hi in _slices(len(t), backwards=True):
        attrs_slice = attrs_of(t, np.arange(lo, hi))
        for i in range(hi - 1, lo - 1, -1):
            n = counts[i]
            if n:
                children = tuple(done[-1 : -n - 1 : -1])
                del done[-n:]
            else:
                children = ()
            attrs = attrs_slice[i - lo]
            location = locations[label[i]]
            if kinds[i] == op and isinstance(attrs, Attrs):
                location = attrs.shared.get("_location")
            done.append(_call_node(display[label[i]], KINDS[kinds[i]], location, children, attrs, checked))
    return CallTree(done[0], tuple(notes), meta)


_KINDS = {k.value: k for k in NodeKind}
_new = object.__new__
_set = object.__setattr__


def _call_node(name: str, kind: str, location, children: tuple, attrs: Mapping[str, Any], checked: set) -> CallNode:
    """CallNode(name, kind, location, None, None, children, attrs), its facts
    checked against model.FACTS once per distinct set of keys (and once per
    shared dict) instead of once per node: a trace has millions of nodes
    and a few dozen shapes of facts."""
    own = attrs.own if isinstance(attrs, Attrs) else attrs
    key = tuple(own)
    if key not in checked:
        undeclared = own.keys() - FACT_NAMES
        if undeclared:
            raise ValueError(f"{name}: undeclared node facts {sorted(undeclared)}; every fact is declared in model.FACTS")
        checked.add(key)
    if isinstance(attrs, Attrs) and id(attrs.shared) not in checked:
        undeclared = {k for k in attrs.shared if k[:1] != "_"} - FACT_NAMES
        if undeclared:
            raise ValueError(f"{name}: undeclared node facts {sorted(undeclared)}; every fact is declared in model.FACTS")
        checked.add(id(attrs.shared))  # shared dicts live as long as the tree: their ids are not reused
    node = _new(CallNode)
    _set(node, "name", name)
    _set(node, "kind", _KINDS[kind])
    _set(node, "location", location)
    _set(node, "via", None)
    _set(node, "condition", None)
    _set(node, "children", children)
    _set(node, "attrs", attrs)
    return node


def release_freed() -> None:
    """Hand the heap's free pages back to the system (glibc keeps them for
    reuse): an import's temporaries, freed, no longer count in the process's
    memory while the trace is read from its tables."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):  # no glibc: nothing to trim
        return
    trim(0)
