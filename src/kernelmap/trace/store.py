"""An imported trace -> columnar tables on disk (Arrow IPC files in the cache),
keyed by the trace file's content, and back: a trace read once opens again
from its tables in a fraction of a second, without reading its JSON.

    from kernelmap.trace import store
    t = store.load("rank0.json.gz")          # imports once, then re-opens
    t = store.open_stored(t.id)              # by id (what the web app uses)

Note [trace store]
One folder per trace file content (`<cache>/trace/store/<id>`, the id the
first 32 hex digits of the file's SHA-256), one sub-folder per way it was
imported (frames kept or not, resolved or not, against which installed torch
and source tree): the import's result depends on those too. A variant holds

  nodes.arrow   the call tree in pre-order, one row per node: kind, label,
                event row, parent, subtree size, start, duration, how a device
                event was joined to its launch, its shared facts' number
  events.arrow  the kept events' dense columns (thread, file index...)
  arg-*.arrow   each sparse arg column (correlation, external id, sequence
                number, shapes, dtypes, device, stream, grid, block: Note
                [sparse arg columns] in kernelmap.trace.collect) as what it
                is in memory: the rows that hold a value, and their values
                (made dense, the ten would be written at once, ten times the
                bytes: the import's peak)
  labels.arrow  each distinct (name, category): kind, display name, raw name,
                Python location (interned strings: nodes refer to them)
  own.arrow     the facts of single nodes (a convolution's backend, an
                autograd node's forward operator...): node, its facts as JSON
                text, and whether they name a library; sorted by node, mapped,
                each decoded when a view reads that node
  conv.arrow    likewise per event row: the args a convolution keeps
  flows.arrow   the flow events (`ac2g`) that join a launch to its device
                event, one row per endpoint: flow id (encoded as the events'
                ids are), thread, time, whether it is the end (1) or start (0)
  links.arrow   each device event hung under its launch: the device node,
                its launch node, how it was joined (build.LINKS: 1 by
                correlation id, 2 by flow, 3 by external id) and its
                correlation id (encoded); a query joins CPU launches to
                kernels from it without walking the tree
  facts.json    the resolved facts shared by many nodes (one per distinct
                operator call and kernel name: resolution ran once per name),
                pooled shapes, odd ids, threads, notes and meta: what grows
                with the distinct names of a trace, not with its events
  view-*.json   the default bounded view (views.hot_tree), as its calltree/2
                document, made at import: a re-opened trace shows it without
                touching its columns

Arrow IPC files are written uncompressed, so they are memory-mapped on
opening: the columns are numpy views of the file's pages, read as the
queries touch them (mapped for random access: a view that reads a thousand
scattered nodes brings in their pages, not the kernel's read-ahead around
each). Any Arrow reader (pyarrow, DuckDB through pyarrow,
Polars) reads them as tables. A variant is written in a temporary folder
and renamed into place, so a killed import leaves no half-written tables;
leftovers of killed imports are removed by the next import.

The store is bounded (Note [trace store bound]): after each import, the
variants least recently opened are removed until the store holds at most
`KERNELMAP_TRACE_STORE_MB` megabytes (default 10,240); the trace just
imported is kept even when it alone is larger. A removed trace is imported
again from its file the next time it is read.

Why these choices: Arrow's IPC format is the one columnar format that maps
without decoding (Parquet decodes every page), which is what makes re-opening
cost milliseconds; the summaries are array queries over the pre-order columns
(Note [summary from columns]) and run unchanged on mapped columns, where a
SQL engine would need the tree's order rules (first in pre-order, nearest
ancestor of a kind) restated as window functions. The full tree is exported
as Parquet or JSON Lines for other engines (`kernelmap.trace.views`).
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import shutil
import time
from collections.abc import Iterator, MutableMapping
from pathlib import Path
from typing import Any

import numpy as np

from kernelmap.errors import BadInput
from kernelmap.model import Location, OriginTable

STORE_VERSION = 7  # 2: the events' record function ids (rf); 3: each node's children and their time; 4: own and conv facts mapped, the default view; 5: meta holds the versions a trace mixes; 6: flows and links tables; 7: sparse arg columns kept sparse
_ID_LENGTH = 32


class UnknownTrace(BadInput):
    """A stored trace id that names no trace in the store."""


def store_dir() -> Path:
    from kernelmap import env

    return env.cache_dir() / "trace" / "store"


def content_id(path: Path, memo: bool = True) -> str:
    """The store id of a trace file: its content's SHA-256 (the first 32 hex
    digits). A file seen before with the same size, mtime and inode is not
    read again (the answer is remembered by those, unless `memo` is False:
    a temporary file is never seen again)."""
    if not memo:
        return _digest(path)
    st = path.stat()
    stamp = hashlib.sha256(f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}|{st.st_ino}".encode()).hexdigest()[:32]
    memo = store_dir() / "by-stat" / stamp
    try:
        known = memo.read_text().strip()
        if len(known) == _ID_LENGTH and all(c in "0123456789abcdef" for c in known):
            return known
    except OSError:
        pass
    found = _digest(path)
    _write_atomic(memo, found)
    return found


def _digest(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()[:_ID_LENGTH]


def _write_atomic(path: Path, text: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(text)
        os.replace(tmp, path)
    except OSError:
        pass  # an unwritable cache: the content is hashed again next time


def variant_key(*, keep_frames: bool, resolve: bool, source_tree: Path | str | None) -> str:
    """What an import's tables depend on besides the file (Note [trace store])."""
    from kernelmap import __version__, env

    parts: dict[str, Any] = {"store": STORE_VERSION, "kernelmap": __version__, "keep_frames": keep_frames, "resolve": resolve}
    try:
        install = env.torch_install()
        parts["torch"] = [install.version, install.commit, str(install.site_packages)]
    except Exception:  # noqa: BLE001 - no torch: frames are not placed in it, whatever the reason
        parts["torch"] = None
    if resolve:
        try:
            from kernelmap.trace.resolve import _cache_stamp

            parts["dispatch"] = _cache_stamp()[0]
        except Exception:  # noqa: BLE001 - the stamp is only a key: without one, the torch version above stands for it
            parts["dispatch"] = None
        parts["source"] = _source_key(source_tree)
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _source_key(source_tree: Path | str | None) -> Any:
    """The source tree kernel locations come from, and when its index was built."""
    try:
        from kernelmap.source import select_tree

        tree = select_tree(str(source_tree) if source_tree is not None else None)
    except Exception:  # noqa: BLE001 - no tree: the import says why in its notes
        return None
    index = getattr(tree, "index_path", None)
    try:
        built = os.stat(index).st_mtime_ns if index is not None else None
    except OSError:
        built = None
    return [getattr(tree, "name", None), getattr(tree, "commit", None), str(getattr(tree, "root", "")), built]


# ---------------------------------------------------------------------------
# Facts as JSON: Locations and tuples kept as what they are
# ---------------------------------------------------------------------------


def _encode(value: Any, origins: OriginTable) -> Any:
    if isinstance(value, Location):
        return {"$loc": value.to_json(origins)}
    if isinstance(value, tuple):
        return {"$tuple": [_encode(v, origins) for v in value]}
    if isinstance(value, list):
        return [_encode(v, origins) for v in value]
    if isinstance(value, dict):
        return {"$dict": [[_encode(k, origins), _encode(v, origins)] for k, v in value.items()]}
    return value


def _decode(value: Any, origins: OriginTable) -> Any:
    if isinstance(value, list):
        return [_decode(v, origins) for v in value]
    if isinstance(value, dict):
        if "$loc" in value:
            return Location.from_json(value["$loc"], origins)
        if "$tuple" in value:
            return tuple(_decode(v, origins) for v in value["$tuple"])
        return {_decode(k, origins): _decode(v, origins) for k, v in value["$dict"]}
    return value


# ---------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------


def _write_arrow(path: Path, columns: dict[str, Any]) -> None:
    import pyarrow as pa
    import pyarrow.ipc as ipc

    table = pa.table(columns)
    with pa.OSFile(str(path), "wb") as sink, ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table, max_chunksize=max(table.num_rows, 1))  # one record batch: each column one mapped array


_VIEW_DEPTH = 200  # a deeper view is not kept (its JSON would nest past what the json module reads): it is made again when shown


def _dumps(value: Any) -> bytes:
    """JSON as the standard library writes it (ASCII: a lone surrogate stays an escape)."""
    return json.dumps(value).encode("ascii")


def _write_facts(path: Path, facts: dict[int, Any], origins: OriginTable) -> None:
    """key -> facts (a dict) as a table sorted by key: the facts as JSON text,
    and whether they name a library (what the summary looks for)."""
    import pyarrow as pa

    keys = np.array(sorted(facts), dtype=np.int64)
    texts = [json.dumps(_encode(facts[k], origins)) for k in keys.tolist()]
    library = [isinstance(facts[k], dict) and ("library" in facts[k] or "closed" in facts[k]) for k in keys.tolist()]
    _write_arrow(path, {"key": keys, "facts": pa.array(texts, type=pa.large_string()), "library": pa.array(library, type=pa.bool_())})


_FLOW_TYPES = {"id": np.int64, "thread": np.int32, "ts": np.float64, "end": np.bool_}


def flow_columns(flows: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The flow endpoints a trace was read with (build.Collected.flows), typed as stored."""
    return {k: np.asarray(flows.get(k, ()), dtype=dtype) for k, dtype in _FLOW_TYPES.items()}


def link_columns(table) -> dict[str, np.ndarray]:
    """Per device event joined to its launch: (node, launch node, how, correlation)."""
    from kernelmap.trace.codes import NONE

    nodes = np.flatnonzero(table.linked > 0)
    rows = table.row[nodes]
    corr = table.c.columns.get("corr")
    return {
        "node": nodes.astype(np.int64),
        "launch": table.parent[nodes].astype(np.int64),
        "how": table.linked[nodes].astype(np.int8),
        "correlation": corr[rows] if corr is not None and len(rows) else np.full(len(nodes), NONE, dtype=np.int64),
    }


def save(t, folder: Path, views: bool = True) -> None:
    """Write the trace `t` (a Trace with its columns) as a variant folder,
    atomically; `views`: with its default bounded view chosen and kept."""
    import pyarrow as pa

    table = t._table
    c = table.c
    folder.parent.mkdir(parents=True, exist_ok=True)
    _clean_leftovers(folder.parent)
    tmp = folder.with_name(f"{folder.name}.tmp-{os.getpid()}-{time.monotonic_ns()}")
    tmp.mkdir()
    try:
        facts = table.facts if table.facts is not None else np.full(len(table), -1, dtype=np.int32)
        n = len(table)
        # (np.add.at in the parents' order, as bincount sums: no int64 copy of the parents, no int64 counts)
        children = np.zeros(n, np.int32)
        child_us = np.zeros(n)
        np.add.at(children, table.parent[1:], np.int32(1))
        np.add.at(child_us, table.parent[1:], table.dur[1:])
        _write_arrow(tmp / "nodes.arrow", {
            "kind": table.kind, "label": table.label, "row": table.row, "parent": table.parent, "size": table.size,
            "ts": table.ts, "dur": table.dur, "linked": table.linked, "facts": facts, "children": children, "child_us": child_us,
        })
        del children, child_us
        from kernelmap.trace.views import DEFAULT_NODES, hot_nodes

        if views and n > DEFAULT_NODES:  # the default view's nodes, chosen now, while the columns are in memory (views._stored_hot)
            hot = hot_nodes(table, DEFAULT_NODES).astype(np.int64)
            np.save(tmp / f"hot-{DEFAULT_NODES}-None.npy", hot, allow_pickle=False)
        from kernelmap.trace.codes import Sparse

        sparse = {k: v for k, v in c.columns.items() if isinstance(v, Sparse)}
        _write_arrow(tmp / "events.arrow", {k: np.asarray(v) for k, v in c.columns.items() if k not in sparse})
        for k, v in sparse.items():  # each mapped on opening, as it was in memory
            _write_arrow(tmp / f"arg-{k}.arrow", {"rows": v.rows, "values": v.values})
        flows = flow_columns(c.flows)
        _write_arrow(tmp / "flows.arrow", {**flows, "end": flows["end"].view(np.int8)})  # Arrow packs booleans into bits: no mapped view
        _write_arrow(tmp / "links.arrow", link_columns(table))
        labels = c.labels
        _write_arrow(tmp / "labels.arrow", {
            "raw": pa.array(labels.raw, type=pa.large_string()),
            "display": pa.array(labels.display, type=pa.large_string()),
            "kind": pa.array(labels.kind, type=pa.int8()),
        })
        origins = OriginTable()
        doc = {
            "version": STORE_VERSION,
            "file": t.file.name,
            "notes": list(t.notes),
            "meta": _encode(dict(t.meta), origins),
            "resolved": table.resolved,
            "has_facts": table.facts is not None,
            "label_locations": [_encode(loc, origins) for loc in labels.location],
            "shared": [_encode(f, origins) for f in table.shared],
            "threads": [[i, _encode(k, origins)] for i, k in table.threads.items()],
            "table_notes": list(table.notes),
            "pool": [_encode(x, origins) for x in c.pool.items],
            "odd": [str(v) if isinstance(v, int) else v for v in c.values.odd],
            "odd_int": [i for i, v in enumerate(c.values.odd) if isinstance(v, int)],
            "event_threads": [_encode(k, origins) for k in c.threads],
            "counts": {"events": c.events, "skipped": c.skipped, "device_count": c.device_count},
            "columns": list(c.columns),
            "sparse": {k: [int(v.fill), int(v.size)] for k, v in sparse.items()},
        }
        _write_facts(tmp / "own.arrow", table.own, origins)
        _write_facts(tmp / "conv.arrow", c.conv, origins)
        from kernelmap.trace.views import _depths

        if views and n > DEFAULT_NODES and int(_depths(table, hot).max()) <= _VIEW_DEPTH:  # the default view itself, for a re-open
            from kernelmap.model import CallTree
            from kernelmap.trace.views import subset_root

            view = CallTree(subset_root(table, hot), (), {}).to_json()
            (tmp / f"view-{DEFAULT_NODES}-None.json").write_bytes(_dumps(view))
            del view
        doc["origins"] = origins.to_json()
        (tmp / "facts.json").write_text(json.dumps(doc), encoding="utf-8")  # ASCII: a lone surrogate stays an escape
        try:
            os.rename(tmp, folder)
        except OSError:  # another import of the same trace finished first: its tables stand
            shutil.rmtree(tmp, ignore_errors=True)
        _touch(folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)  # a full disk, an interrupt: no half-written variant
        raise


def _clean_leftovers(parent: Path, older_than_s: float = 3600.0) -> None:
    """Remove temporary folders that killed imports left (an hour old: a live import is younger)."""
    now = time.time()
    try:
        entries = list(parent.iterdir())
    except OSError:
        return
    for p in entries:
        if ".tmp-" in p.name:
            try:
                if now - p.stat().st_mtime > older_than_s:
                    shutil.rmtree(p, ignore_errors=True)
            except OSError:
                pass


# ---------------------------------------------------------------------------
# Opening
# ---------------------------------------------------------------------------


def _mapped_table(path: Path):
    """An Arrow IPC file as a table over the file's pages, mapped for random
    access (no read-ahead around each page a view touches)."""
    import pyarrow as pa
    import pyarrow.ipc as ipc

    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            raise ValueError(f"an empty table: {path.name}")
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    if hasattr(mapped, "madvise") and hasattr(mmap, "MADV_RANDOM"):
        mapped.madvise(mmap.MADV_RANDOM)
    return ipc.open_file(pa.BufferReader(pa.py_buffer(mapped))).read_all()


def _read_arrow(path: Path) -> dict[str, np.ndarray]:
    """The columns of an Arrow IPC file as numpy views of the mapped file (no copy)."""
    table = _mapped_table(path)
    out = {}
    for name in table.column_names:
        col = table.column(name)
        if col.num_chunks == 1:
            out[name] = col.chunk(0).to_numpy(zero_copy_only=True)
        else:  # several record batches: one copy, joined
            out[name] = (np.concatenate([ch.to_numpy(zero_copy_only=True) for ch in col.chunks]) if col.num_chunks
                         else np.zeros(0, dtype=col.type.to_pandas_dtype()))  # no rows: typed as written
    return out


def _pool_item(v: Any) -> Any:
    if type(v) is list:  # as build.Pool keeps them: arrays one level down are tuples too
        return tuple(tuple(x) if isinstance(x, list) else x for x in v)
    return v


class MappedFacts(MutableMapping):
    """key (a node, an event row) -> its facts, read from a mapped table
    (`_write_facts`) and decoded when asked; facts set after opening (an
    execution trace linked to a re-opened trace) are held in memory over them."""

    def __init__(self, path: Path, origins: OriginTable):
        table = _mapped_table(path)
        self._keys = table.column("key").chunk(0).to_numpy(zero_copy_only=True) if table.num_rows else np.zeros(0, np.int64)
        self._texts = table.column("facts").chunk(0) if table.num_rows else None
        self._library = table.column("library").chunk(0) if table.num_rows else None
        self._origins = origins
        self._set: dict[int, Any] = {}
        self._gone: set[int] = set()

    @property
    def changed(self) -> bool:
        """Whether facts were set or removed since the table was written."""
        return bool(self._set or self._gone)

    def _row(self, key: Any) -> int:
        if not isinstance(key, (int, np.integer)) or key in self._gone:
            return -1
        at = int(np.searchsorted(self._keys, key))
        return at if at < len(self._keys) and self._keys[at] == key else -1

    def __getitem__(self, key: Any) -> Any:
        if key in self._set:
            return self._set[key]
        at = self._row(key)
        if at < 0:
            raise KeyError(key)
        return _decode(json.loads(self._texts[at].as_py()), self._origins)

    def setdefault(self, key: int, default: Any = None) -> Any:
        """The facts of `key`, held in memory from now on: the caller may change them in place."""
        value = self[key] if key in self else default
        self[key] = value
        return value

    def __setitem__(self, key: int, value: Any) -> None:
        self._gone.discard(key)
        self._set[key] = value

    def __delitem__(self, key: int) -> None:
        if key not in self:
            raise KeyError(key)
        self._set.pop(key, None)
        self._gone.add(key)

    def __contains__(self, key: object) -> bool:
        return key in self._set or self._row(key) >= 0

    def __iter__(self) -> Iterator[int]:
        seen = set(self._set)
        yield from self._set
        for k in self._keys.tolist():
            if k not in seen and k not in self._gone:
                yield k

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def library_nodes(self) -> list[int]:
        """The keys whose facts name a library (or say it is closed), without decoding the others."""
        flagged = self._keys[self._library.to_numpy(zero_copy_only=False)] if self._library is not None else self._keys
        out = {k for k in flagged.tolist() if k not in self._set and k not in self._gone}
        out |= {k for k, v in self._set.items() if "library" in v or "closed" in v}
        return sorted(out)


def _touch(folder: Path) -> None:
    """Mark a variant as used now (Note [trace store bound])."""
    try:
        (folder / "used").touch()
    except OSError:
        pass


def open_variant(folder: Path, file: Path | None = None):
    """The Trace whose tables are in `folder`."""
    import pyarrow as pa
    import pyarrow.ipc as ipc

    from kernelmap.trace.build import Table
    from kernelmap.trace.codes import Labels
    from kernelmap.trace.collect import Collected
    from kernelmap.trace.kineto import Trace

    doc = json.loads((folder / "facts.json").read_text(encoding="utf-8"))
    if doc.get("version") != STORE_VERSION:
        raise OSError("a store of another version")
    origins = OriginTable.from_json(doc["origins"])
    nodes = _read_arrow(folder / "nodes.arrow")
    events = _read_arrow(folder / "events.arrow")
    with pa.memory_map(str(folder / "labels.arrow"), "r") as source:
        lt = ipc.open_file(source).read_all()
        raw, display, kinds = lt.column("raw").to_pylist(), lt.column("display").to_pylist(), lt.column("kind").to_pylist()
    c = Collected()
    c.labels = Labels(raw=raw, kind=kinds, display=display, location=[_decode(x, origins) for x in doc["label_locations"]])
    c.pool.items = [_pool_item(_decode(x, origins)) for x in doc["pool"]]
    odd_int = set(doc["odd_int"])
    c.values.odd = [int(v) if i in odd_int else v for i, v in enumerate(doc["odd"])]
    c.threads = [tuple(_decode(k, origins)) for k in doc["event_threads"]]
    c.conv = MappedFacts(folder / "conv.arrow", origins)
    from kernelmap.trace.codes import Sparse

    sparse = {}
    for k, (fill, size) in doc["sparse"].items():
        arg = _read_arrow(folder / f"arg-{k}.arrow")
        sparse[k] = Sparse(arg["rows"], arg["values"], fill, size)
    c.columns = {k: sparse[k] if k in sparse else events[k] for k in doc["columns"]}
    flows = _read_arrow(folder / "flows.arrow")
    c.flows = flow_columns({**flows, "end": flows["end"].view(np.bool_)})
    c.events, c.skipped, c.device_count = doc["counts"]["events"], doc["counts"]["skipped"], doc["counts"]["device_count"]
    table = Table(c, nodes["kind"], nodes["label"], nodes["row"], nodes["parent"], nodes["size"], nodes["ts"], nodes["dur"], nodes["linked"])
    table.notes = list(doc["table_notes"])
    table.threads = {int(i): tuple(_decode(k, origins)) for i, k in doc["threads"]}
    table.own = MappedFacts(folder / "own.arrow", origins)
    table.facts = nodes["facts"] if doc["has_facts"] else None
    table.shared = [_decode(f, origins) for f in doc["shared"]]
    table.resolved = doc["resolved"]
    table.n_children, table.children_us = nodes.get("children"), nodes.get("child_us")
    meta = _decode(doc["meta"], origins)
    t = Trace(None, file if file is not None else Path(doc["file"]), table=table, notes=tuple(doc["notes"]), meta=meta)
    t.id = folder.parent.name
    t.stored, t.kept = folder, KEPT
    _touch(folder)
    return t


class Kept:
    """What the store keeps beside a trace's tables, read back for it: its
    summary and its hot subtrees. Set on a stored trace (`Trace.kept`), so that
    the trace and its views reach the store without importing it."""

    def summary(self, t):
        return stored_summary(t)

    def view(self, t, top: int, depth: int | None):
        return stored_view(t, top, depth)


KEPT = Kept()


def stored_view(t, top: int, depth: int | None):
    """The root CallNode of the bounded view kept beside a re-opened trace's
    tables (None when none is kept, or when its facts changed since)."""
    from kernelmap.model import CallTree

    folder, table = t.stored, t._table
    if folder is None or table is None or not isinstance(table.own, MappedFacts) or table.own.changed:
        return None
    try:
        return CallTree.from_json(json.loads((folder / f"view-{top}-{depth}.json").read_bytes())).root
    except (OSError, ValueError, KeyError, TypeError):
        return None


def load(path: Path | str, *, keep_frames: bool = False, resolve: bool = True, source_tree: Path | None = None,
         meta: dict[str, Any] | None = None, memo: bool = True):
    """The trace at `path`, from its tables in the store when it was imported
    before (with the same options), else imported and stored (Note [trace
    store]). `memo`: remember the file's id by its size, mtime and inode
    (`content_id`)."""
    from kernelmap.trace.kineto import read_file
    from kernelmap.trace.reader import TraceFormatError

    path = Path(path)
    try:
        tid = content_id(path, memo)
    except OSError as e:
        raise TraceFormatError(path.name, None, f"cannot open ({e.strerror})") from None
    folder = store_dir() / tid / variant_key(keep_frames=keep_frames, resolve=resolve, source_tree=source_tree)
    if (folder / "facts.json").is_file():
        try:
            t = open_variant(folder, path)
            t.meta.update(meta or {})
            return t
        except (OSError, ValueError, KeyError, TypeError):
            shutil.rmtree(folder, ignore_errors=True)  # damaged or of another version: imported again
    limit = limit_bytes()  # a bad bound is refused before the import, not after it
    t = read_file(path, keep_frames, resolve, source_tree, False, meta)
    try:
        save(t, folder)
    except OSError:
        return t  # an unwritable cache: the trace is still answered, from memory
    evict(limit, keep=folder)
    try:  # Note [import, then re-open]
        reopened = open_variant(folder, path)
    except (OSError, ValueError, KeyError, TypeError):
        reopened = None
    if reopened is not None:
        reopened.meta = t.meta  # the meta asked for (`meta`) included, as the import kept it
        del t
        from kernelmap.trace.build import release_freed

        release_freed()
        return reopened
    t.id = tid
    t.stored, t.kept = folder, KEPT
    return t


SPILL_NODES = 1 << 19  # below this, a trace read without the store stays in memory: its columns weigh less than the table writer's import


def spilled(path: Path | str, *, keep_frames: bool = False, resolve: bool = True, source_tree: Path | None = None,
            meta: dict[str, Any] | None = None):
    """The trace at `path` imported as `load` does, into a temporary folder of
    the cache that is removed at once (its files stay readable while mapped):
    a trace read without the store (`--no-store`) answers from mapped tables
    too (Note [import, then re-open]), and nothing of it is kept. A trace of
    fewer than SPILL_NODES nodes, or an unwritable cache: the trace as
    imported, in memory."""
    from kernelmap.trace.kineto import read_file

    path = Path(path)
    t = read_file(path, keep_frames, resolve, source_tree, False, meta)
    if t._table is None or len(t._table) < SPILL_NODES:
        return t
    parent = store_dir() / "spill"
    folder = parent / f"trace.tmp-{os.getpid()}-{time.monotonic_ns()}"  # a killed process's: removed by a later one (_clean_leftovers)
    try:
        save(t, folder, views=False)
        reopened = open_variant(folder, path)
    except (OSError, ValueError, KeyError, TypeError):
        return t
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    reopened.meta = t.meta
    reopened.id = reopened.stored = reopened.kept = None  # nothing kept: no summary or view is written beside it
    del t
    from kernelmap.trace.build import release_freed

    release_freed()
    return reopened


# Note [import, then re-open]
# A trace just imported is answered from the tables it was written to, as a
# trace imported before is, not from the columns it was built in: those (the
# collected events, every column of the tree, its facts) are freed at once,
# and each view reads from the mapped tables only the pages it touches. The
# summary and the views of a large trace thus run beside no copy of the
# import, and a fresh import and a re-open answer from the same bytes.


# Note [trace store bound]
# Each variant folder holds a `used` file touched whenever it is opened (or
# written): its mtime says when the variant was last used. After an import,
# `evict` removes whole variants, least recently used first, until the store
# holds at most the limit; the variant just written is never removed (a trace
# larger than the limit is still answered and kept until the next import).
# A process that has a removed variant open keeps reading it (its mapped
# files stay until they are closed).

DEFAULT_LIMIT_MB = 10_240


def limit_bytes() -> int:
    """The store's bound: KERNELMAP_TRACE_STORE_MB megabytes (default 10,240)."""
    text = os.environ.get("KERNELMAP_TRACE_STORE_MB", "").strip()
    try:
        mb = float(text) if text else DEFAULT_LIMIT_MB
    except ValueError:
        raise BadInput(f"KERNELMAP_TRACE_STORE_MB must be a number of megabytes, not {text[:40]!r}") from None
    if not mb >= 0 or mb == float("inf"):
        raise BadInput(f"KERNELMAP_TRACE_STORE_MB must be a finite number of megabytes of 0 or more, not {text[:40]!r}")
    return int(mb * 1024 * 1024)


def _variants() -> list[tuple[float, int, Path]]:
    """(last used, bytes, folder) of every variant in the store."""
    out = []
    root = store_dir()
    for d in root.iterdir() if root.is_dir() else ():
        if len(d.name) != _ID_LENGTH or not d.is_dir():
            continue
        for v in d.iterdir():
            if ".tmp-" in v.name or not v.is_dir():
                continue
            try:
                files = list(v.iterdir())
                size = sum(p.stat().st_size for p in files)
                used = max((v / name).stat().st_mtime for name in ("used", "facts.json") if (v / name).exists())
            except (OSError, ValueError):
                continue
            out.append((used, size, v))
    return out


def evict(limit: int | None = None, keep: Path | None = None) -> list[Path]:
    """Remove the least recently used variants until the store holds at most
    `limit` bytes (default `limit_bytes()`), never `keep`; the folders removed."""
    limit = limit_bytes() if limit is None else limit
    variants = sorted(_variants(), key=lambda v: v[0])
    total = sum(size for _, size, _ in variants)
    removed = []
    for _, size, folder in variants:
        if total <= limit:
            break
        if keep is not None and folder == keep:
            continue
        shutil.rmtree(folder, ignore_errors=True)
        total -= size
        removed.append(folder)
        try:
            folder.parent.rmdir()  # the trace's last variant: its folder too
        except OSError:
            pass
    return removed


def stored_summary(t):
    """The summary of a stored trace, read from its folder (computed and
    written there the first time); None when it cannot be kept (the trace's
    notes changed since it was stored: linked to an execution trace, say)."""
    from kernelmap.trace.summary import dump, summarize_table, undump

    folder = t.stored
    versions = t.meta.get("versions")  # Note [versions in a trace]
    path = folder / f"summary-{hashlib.sha256(json.dumps([list(t.notes), versions]).encode()).hexdigest()[:12]}.json"
    try:
        return undump(path.read_bytes())
    except (OSError, ValueError, KeyError, TypeError):
        pass
    if t._table is None:
        return None
    summary = summarize_table(t._table, t.notes, versions)
    try:
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_bytes(dump(summary))
        os.replace(tmp, path)
    except OSError:
        pass
    return summary


def open_stored(trace_id: str, *, keep_frames: bool = False, resolve: bool = True, source_tree: Path | None = None):
    """A trace imported before, by its store id (the web app opens traces so);
    raises UnknownTrace when the store holds no such import."""
    if not isinstance(trace_id, str) or len(trace_id) != _ID_LENGTH or any(ch not in "0123456789abcdef" for ch in trace_id):
        raise UnknownTrace(f"not a stored trace id: {str(trace_id)[:80]!r} (32 hex digits)")
    folder = store_dir() / trace_id / variant_key(keep_frames=keep_frames, resolve=resolve, source_tree=source_tree)
    if not (folder / "facts.json").is_file():
        raise UnknownTrace(f"no stored trace {trace_id} imported with these options; import it first (kernelmap trace --from FILE)")
    try:
        t = open_variant(folder)
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise UnknownTrace(f"the stored trace {trace_id} cannot be opened ({type(e).__name__}); import it again") from None
    return t


def stored() -> list[dict[str, Any]]:
    """The traces in the store: id, file name, events, size on disk."""
    out = []
    root = store_dir()
    for d in sorted(root.iterdir()) if root.is_dir() else ():
        if len(d.name) != _ID_LENGTH:
            continue
        for v in d.iterdir():
            if ".tmp-" in v.name or not (v / "facts.json").is_file():
                continue
            try:
                doc = json.loads((v / "facts.json").read_text(encoding="utf-8"))
                size = sum(p.stat().st_size for p in v.iterdir())
            except (OSError, ValueError):
                continue
            out.append({"id": d.name, "variant": v.name, "file": doc.get("file"), "events": doc.get("counts", {}).get("events"), "bytes": size})
    return out
