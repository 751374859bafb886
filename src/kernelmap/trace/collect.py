"""One pass over the events: each complete event of a kept category becomes a
row of NumPy columns (`Collected`), its flows and its thread's name beside
it (Note [columns from records]).
"""

from __future__ import annotations

import math
import mmap
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kernelmap.printable import printable
from kernelmap.trace.codes import CAT, combine, Labels, NONE, plain, Pool, Values
from kernelmap.trace.events import classify, CONV_OPS, display_name, PythonFrames, _UNPLACED


@dataclass
class Collected:
    """The complete events of the kept categories as columns, in file order
    (one row each), flow endpoints, thread names (Note [columnar trace])."""

    labels: Labels = field(default_factory=Labels)
    values: Values = field(default_factory=Values)
    pool: Pool = field(default_factory=Pool)
    threads: list[tuple[Any, Any]] = field(default_factory=list)  # thread id -> (pid, tid)
    thread_ids: dict[tuple[Any, Any], int] = field(default_factory=dict)
    thread_names: dict[tuple[Any, Any], str] = field(default_factory=dict)
    process_names: dict[Any, str] = field(default_factory=dict)
    conv: dict[int, dict[str, Any]] = field(default_factory=dict)  # row -> the args a convolution keeps besides the columns
    columns: dict[str, np.ndarray] = field(default_factory=dict)
    flows: dict[str, np.ndarray] = field(default_factory=dict)
    events: int = 0
    skipped: int = 0
    device_count: int = 0

    def __getattr__(self, name: str) -> np.ndarray:
        try:
            return self.__dict__["columns"][name]
        except KeyError:
            raise AttributeError(name) from None

    def thread_id(self, key: tuple[Any, Any]) -> int:
        i = self.thread_ids.get(key)
        if i is None:
            i = self.thread_ids[key] = len(self.threads)
            self.threads.append(key)
        return i


_ROW_COLUMNS = {  # name -> dtype
    "label": np.int32, "cat": np.int8, "thread": np.int32, "ts": np.float64, "dur": np.float64, "event": np.int64,
    "corr": np.int64, "ext": np.int64, "seq": np.int64, "dims": np.int32, "types": np.int32,
    "gpu": np.int64, "stream": np.int64, "grid": np.int32, "block": np.int32, "rf": np.int64,
}
_EMPTY = {"corr": NONE, "ext": NONE, "seq": NONE, "gpu": NONE, "stream": NONE, "dims": -1, "types": -1, "grid": -1, "block": -1, "rf": NONE}
# Which args each category keeps, as (column, Args attribute): the rest (Ev
# Idx, Python ids...) is never stored.
_RUNTIME_ARGS = (("corr", "correlation"), ("ext", "external_id"))
_COPY_ARGS = (*_RUNTIME_ARGS, ("gpu", "device"), ("stream", "stream"))
_KEPT_ARGS = {
    "cpu_op": (("ext", "external_id"), ("seq", "sequence_number"), ("dims", "input_dims"), ("types", "input_type"), ("rf", "record_function_id")),
    "cuda_runtime": _RUNTIME_ARGS,
    "cuda_driver": _RUNTIME_ARGS,
    "kernel": (*_COPY_ARGS, ("grid", "grid"), ("block", "block")),
    "gpu_memcpy": _COPY_ARGS,
    "gpu_memset": _COPY_ARGS,
}
# Convolutions keep what select_conv_backend needs besides (Note [conv backend] in resolve).
_CONV_ARGS = (("Input Strides", "input_strides"), ("Concrete Inputs", "concrete_inputs"))
_POOLED = frozenset({"dims", "types", "grid", "block"})


def _is_list(v: Any) -> bool:
    return type(v) is list


def _is_names(v: Any) -> bool:
    return type(v) is list and all(type(x) is str for x in v)


# What a pooled column's values must be; any other value is read as not recorded
# (`"Input type": 5`, `"Input Dims": true`).
_POOL_CHECKS = {"dims": _is_list, "types": _is_names, "grid": _is_list, "block": _is_list}


def collect(batches: Iterable[list[Any]], python_frames: PythonFrames | None = None) -> Collected:
    """One streaming pass: keep the events the tree needs, as columns.
    `batches` are the reader's windows (`read_batches`): lists of `Event`
    records, or of `Event` and `Loose` records (or dicts) in any other sequence."""
    from kernelmap.trace.reader import Args, Event

    c = Collected()
    chunks = _Blocks(_ROW_COLUMNS, _EMPTY)
    flow_chunks: dict[str, list[np.ndarray]] = {k: [] for k in ("id", "thread", "ts", "end")}
    empty_args = Args()
    conv_labels: set[int] = set()
    for batch in batches:
        base = c.events
        c.events += len(batch)
        raw = type(batch) is list
        if not raw:  # the reader's slow path: records that did not fit `Event` among them
            batch = [e if type(e) is Event else _loose(e if type(e) is dict else e.raw, base + i) or _SKIP for i, e in enumerate(batch)]
        # Note [columns from records]: list comprehensions with plain attribute
        # access (specialised by the interpreter) are the fastest way through a
        # window, three times faster than map(attrgetter(...)).
        xi = [i for i, e in enumerate(batch) if e.ph == "X" and e.cat in CAT]
        if len(xi) < len(batch):  # flows, thread names, and what is skipped
            fi = [i for i, e in enumerate(batch) if e.cat == "ac2g" and (e.ph == "s" or e.ph == "f")]
            names = [e for e in batch if e.ph == "M"]
            for e in names:
                _name_thread(c, e)
            c.skipped += len(batch) - len(xi) - len(fi) - len(names)
            if fi:
                _collect_flows(c, [batch[i] for i in fi], [base + i for i in fi], flow_chunks)
        if not xi:
            continue
        xs = [batch[i] for i in xi]
        rows = _collect_rows(c, xs, xi, base, python_frames, conv_labels)
        args = [e.args for e in xs]
        cats = rows["cat"]
        n_before = chunks.rows
        for cat, fields in _KEPT_ARGS.items():
            where = np.flatnonzero(cats == CAT[cat])
            if not len(where):
                continue
            selected = list(map(args.__getitem__, where.tolist()))
            if None in selected:
                selected = [a or empty_args for a in selected]
            for column, attr in fields:
                values = _ARG_COLUMNS[attr](selected)
                encoded = c.pool.encode(values, raw, _POOL_CHECKS[column]) if column in _POOLED else c.values.encode(values)
                rows[column][where] = encoded
        if conv_labels:
            for i in np.flatnonzero(np.isin(rows["label"], list(conv_labels))).tolist():
                a = args[i]
                values = ((key, plain(getattr(a, attr, None))) for key, attr in _CONV_ARGS)
                kept = {k: v for k, v in values if v is not None}
                if kept:
                    c.conv[n_before + i] = kept
        chunks.add(rows)
        del rows
    c.columns = chunks.columns()
    c.flows = {k: np.concatenate(v) if v else np.zeros(0) for k, v in flow_chunks.items()}
    return c


_BLOCK = 1 << 18  # values per block of a collected column (a map each: few maps even for 100M events)


class _Growing:
    """One column filled a window at a time into blocks of _BLOCK values. A
    window's few thousand values kept as arrays of their own would lie among
    the window's freed temporaries on the heap, which then cannot shrink (a
    million events: 75 MB held for nothing); a block is one allocation of its
    own, and its pages are taken only as values are written."""

    def __init__(self, dtype: Any):
        self.dtype = dtype
        self.blocks: list[np.ndarray] = []
        self.fill = _BLOCK  # values written in the last block
        self.size = 0

    def add(self, values: np.ndarray) -> None:
        m, at = len(values), 0
        while at < m:
            if self.fill == _BLOCK:
                self.blocks.append(_block(self.dtype))
                self.fill = 0
            take = min(m - at, _BLOCK - self.fill)
            self.blocks[-1][self.fill : self.fill + take] = values[at : at + take]
            self.fill += take
            at += take
        self.size += m

    def joined(self) -> np.ndarray:
        """The values as one array (the blocks freed as they are joined)."""
        parts, self.blocks = self.blocks, []
        if not parts:
            return np.zeros(0, dtype=self.dtype)
        parts[-1] = parts[-1][: self.fill]
        out = pages(self.size, self.dtype)
        at = 0
        while parts:
            part = parts.pop(0)
            out[at : at + len(part)] = part
            at += len(part)
        return out


def pages(n: int, dtype: Any) -> np.ndarray:
    """An array of `n` values (zeros) in pages of its own: an anonymous map,
    not the heap. A column that lives as long as the trace, made among a
    window's short-lived temporaries on the heap, would keep the heap from
    shrinking past it; its own map is returned whole when it is freed."""
    dtype = np.dtype(dtype)
    if n * dtype.itemsize < mmap.PAGESIZE:
        return np.zeros(n, dtype=dtype)
    return np.frombuffer(mmap.mmap(-1, n * dtype.itemsize), dtype=dtype)


def _block(dtype: Any) -> np.ndarray:
    return pages(_BLOCK, dtype)


# Note [sparse arg columns]
# Each kept arg (correlation, external id, shapes, device, stream, grid...)
# belongs to one or two categories of events, so most rows of its column hold
# "none" (NONE, or -1 for pooled values). Those columns are kept as the rows
# that hold something and their values (codes.Sparse), a third of the bytes
# of the ten dense columns on a Kineto trace; the columns every row has
# (label, category, thread, start, duration, event) stay dense.


class _Blocks:
    """The collected row columns, filled a window at a time (_Growing): the
    dense ones whole, the sparse ones (Note [sparse arg columns]) as the rows
    that hold something and their values."""

    def __init__(self, dtypes: dict[str, Any], sparse: dict[str, Any]):
        self.dense = {k: _Growing(dtype) for k, dtype in dtypes.items() if k not in sparse}
        self.sparse = {k: (_Growing(np.int64), _Growing(dtypes[k])) for k in sparse}
        self.fills = sparse
        self.rows = 0

    def add(self, rows: dict[str, np.ndarray]) -> None:
        m = len(next(iter(rows.values())))
        for k, column in self.dense.items():
            column.add(rows[k])
        for k, (at, values) in self.sparse.items():
            v = rows[k]
            some = np.flatnonzero(v != self.fills[k])
            if len(some):
                at.add(some + self.rows)
                values.add(v[some])
        self.rows += m

    def columns(self) -> dict[str, Any]:
        """Each column joined, a column at a time (its blocks freed as it is)."""
        from kernelmap.trace.codes import Sparse

        out: dict[str, Any] = {k: column.joined() for k, column in self.dense.items()}
        for k, (at, values) in self.sparse.items():
            rows = at.joined()
            out[k] = Sparse(rows.astype(np.int32) if self.rows < 1 << 31 else rows, values.joined(), self.fills[k], self.rows)
        return {k: out[k] for k in _ROW_COLUMNS}


def _collect_rows(c: Collected, xs: list, xi: list[int], base: int, python_frames: PythonFrames | None,
                  conv_labels: set[int]) -> dict[str, np.ndarray]:
    """The row columns of one window's complete events, checked."""
    n = len(xs)
    names = [e.name for e in xs]
    cats = [e.cat for e in xs]
    ts_a = np.array([e.ts for e in xs], dtype=np.float64)  # None reads as NaN, and is refused as one
    durs = [e.dur for e in xs]
    dur_a = np.array(durs, dtype=np.float64)
    for i in np.flatnonzero(np.isnan(dur_a)).tolist():
        if durs[i] is None:  # no duration: an instant (a NaN stays, and is refused)
            dur_a[i] = 0.0
    bad_time = np.flatnonzero(~(np.abs(ts_a) < _FINITE) | ~((dur_a >= 0) & (dur_a < _FINITE)))
    labels = c.labels
    get = labels.ids.get
    try:
        label = list(map(get, zip(names, cats)))
    except TypeError:  # an unhashable name
        label = [get(k) if isinstance(k[0], str) else -2 for k in zip(names, cats)]
    first_bad = int(bad_time[0]) if len(bad_time) else n
    for i, lab in enumerate(label) if None in label or -2 in label else ():
        if lab is not None and lab >= 0:
            continue
        name = names[i]
        if type(name) is not str:
            first_bad = min(first_bad, i)
            break
        if i > first_bad:
            break
        lab = get((name, cats[i]))
        if lab is None:  # once per distinct name and category: kind, display name, location
            text = _encodable(name)
            kind = classify(text, cats[i])
            location = (python_frames or _UNPLACED).location(text) if kind == "python" else None
            lab = labels.ids[(name, cats[i])] = labels.add(text, kind, display_name(text, kind), location)
            if text in CONV_OPS and cats[i] == "cpu_op":
                conv_labels.add(lab)
        label[i] = lab
    if first_bad < n:
        e = xs[first_bad]
        name, t, d = e.name, e.ts, e.dur if e.dur is not None else 0.0
        what = ("name is not a string" if type(name) is not str else "ts is missing" if t is None
                else f"ts {t} is not a finite number" if not (-_FINITE < t < _FINITE)
                else f"negative duration {d}" if d < 0 else f"duration {d} is not a finite number")
        raise ValueError(f"event #{base + xi[first_bad]} ({printable(str(name if name is not None else '?')[:80])!r}) lacks a usable name/ts/dur: {what}")
    rows = {
        "label": np.array(label, dtype=np.int32),
        "cat": np.array(list(map(CAT.__getitem__, cats)), dtype=np.int8),
        "thread": _thread_ids(c, xs),
        "ts": ts_a,
        "dur": dur_a,
        "event": np.array(xi, dtype=np.int64) + base,
    }
    for k, fill in _EMPTY.items():
        rows[k] = np.full(n, fill, dtype=_ROW_COLUMNS[k])
    return rows


_ID_TYPES = {int, str, type(None)}


def _collect_flows(c: Collected, flows: list, where: list[int], chunks: dict[str, list[np.ndarray]]) -> None:
    ids = [e.id for e in flows]
    if not set(map(type, ids)) <= _ID_TYPES:  # checked one by one only when some id is of another type
        for i, fid in enumerate(ids):
            if fid is not None and not isinstance(fid, (int, str)):
                raise ValueError(f"flow event #{where[i]} is unusable: an id is a {type(fid).__name__}, not an int or a string")
    chunks["id"].append(c.values.encode(ids))
    chunks["thread"].append(_thread_ids(c, flows))
    ts = np.array([0.0 if e.ts is None else e.ts for e in flows], dtype=np.float64)
    chunks["ts"].append(ts)
    chunks["end"].append(np.array([e.ph == "f" for e in flows], dtype=bool))


_ARG_COLUMNS = {  # Note [columns from records]
    "correlation": lambda args: [a.correlation for a in args],
    "external_id": lambda args: [a.external_id for a in args],
    "sequence_number": lambda args: [a.sequence_number for a in args],
    "device": lambda args: [a.device for a in args],
    "stream": lambda args: [a.stream for a in args],
    "grid": lambda args: [a.grid for a in args],
    "block": lambda args: [a.block for a in args],
    "input_dims": lambda args: [a.input_dims for a in args],
    "input_type": lambda args: [a.input_type for a in args],
    "record_function_id": lambda args: [a.record_function_id for a in args],
}


def _thread_ids(c: Collected, events: list) -> np.ndarray:
    """The thread id of each event's (pid, tid): looked up once per distinct
    pair where both are ints (the usual case), else once per event."""
    pids, tids = [e.pid for e in events], [e.tid for e in events]
    try:
        p, t = np.array(pids, dtype=np.int64), np.array(tids, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):  # a string, or an absent id
        p = None
    if p is not None and len(p):
        distinct, first, inverse = np.unique(combine(p, t), return_index=True, return_inverse=True)
        ids = np.array([c.thread_id((pids[i], tids[i])) for i in first.tolist()], dtype=np.int32)
        return ids[inverse.reshape(-1)]
    get = c.thread_ids.get
    ids = [get((e.pid, e.tid)) for e in events]
    if None in ids:
        for i, t in enumerate(ids):
            if t is None:
                ids[i] = c.thread_id((events[i].pid, events[i].tid))
    return np.array(ids, dtype=np.int32)


def _name_thread(c: Collected, e) -> None:
    if e.name == "thread_name":
        c.thread_names[(e.pid, e.tid)] = _encodable(e.args.name) if e.args is not None and isinstance(e.args.name, str) else ""
    elif e.name == "process_name":
        c.process_names[e.pid] = _encodable(e.args.name) if e.args is not None and isinstance(e.args.name, str) else ""


_FINITE = 1e300  # µs: far beyond any real trace, and no NaN or infinity compares below it


def _finite(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what} is not a number")
    f = float(value)  # OverflowError for integers beyond float range
    if not math.isfinite(f):
        raise ValueError(f"{what} is not finite")
    return f


def _id(value: Any) -> Any:
    """pid / tid / flow ids / correlations: an int or a string (or absent)."""
    if value is None or isinstance(value, (int, str)):
        return value
    raise TypeError(f"an id is a {type(value).__name__}, not an int or a string")


def _checked(e: dict) -> tuple[str, float, float]:
    """(name, ts, dur) of a complete event, its ids and args checked: a
    malformed event is refused here, not deep in the tree builder."""
    name = e["name"]
    if not isinstance(name, str):
        raise TypeError("name is not a string")
    ts = _finite(e["ts"], "ts")
    dur = _finite(e.get("dur", 0.0), "dur")
    if dur < 0:
        raise ValueError(f"negative duration {dur}")
    _id(e.get("pid"))
    _id(e.get("tid"))
    args = e.get("args")
    if args is not None and not isinstance(args, dict):
        raise TypeError("args is not an object")
    if isinstance(args, dict):
        for k in ("correlation", "External id", "stream", "device", "Record function id"):
            _id(args.get(k))
    return name, ts, dur


def _loose(raw: dict, index: int):
    """An event whose fields did not fit the reader's `Event` record, checked
    here as a dict: a malformed event the tree needs is refused with what is
    wrong; one it does not need is skipped (None)."""
    from kernelmap.trace.reader import ARG_FIELDS, Args, Event

    ph = raw.get("ph")
    if ph == "X":
        cat = raw.get("cat", "")
        if not isinstance(cat, str) or cat not in CAT:
            return None
        try:
            name, ts, dur = _checked(raw)
        except (KeyError, TypeError, ValueError, OverflowError) as err:
            raise ValueError(f"event #{index} ({printable(str(raw.get('name', '?'))[:80])!r}) lacks a usable name/ts/dur: {err}") from None
        a = raw.get("args") or {}
        kept = [(ARG_FIELDS[attr], attr) for _, attr in _KEPT_ARGS.get(cat, ())] + (list(_CONV_ARGS) if name in CONV_OPS else [])
        args = Args(**{attr: a[key] for key, attr in kept if key in a})
        return Event("X", cat, name, raw.get("pid"), raw.get("tid"), ts, dur, None, args)
    if ph in ("s", "f") and raw.get("cat") == "ac2g":
        try:
            fid, pid, tid = _id(raw.get("id")), _id(raw.get("pid")), _id(raw.get("tid"))
            fts = _finite(raw.get("ts", 0.0), "ts")
        except (TypeError, ValueError, OverflowError) as err:
            raise ValueError(f"flow event #{index} is unusable: {err}") from None
        return Event(ph, "ac2g", None, pid, tid, fts, None, fid, None)
    if ph == "M" and raw.get("name") in ("thread_name", "process_name"):
        try:
            pid, tid = _id(raw.get("pid")), _id(raw.get("tid"))
        except TypeError:
            return None  # a name for a thread no event can name
        a = raw.get("args")
        return Event("M", None, raw["name"], pid, tid, args=Args(name=a.get("name", "") if isinstance(a, dict) else ""))
    return None


class _Skipped:
    ph = cat = name = None


_SKIP = _Skipped()


def _encodable(text: str) -> str:
    """`text` as UTF-8 can write it: a lone surrogate (`\\ud800` in the JSON)
    becomes its escape, not an error when the name is printed or saved."""
    if text.isascii():  # no copy: a name may be hundreds of megabytes
        return text
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
