"""What one call graph draws on: the selected device and options, and the
producers that answer each layer (catalogs, the source index, the generated
files), opened once. Producers that are missing become notes, not errors,
unless the user asked for them by name.

Note [graph versions]
One answer, one version. A selected source tree is authoritative for every
static layer it holds: its operators (its own yaml, read by its own torchgen),
its Python (`torch/**/*.py` of the tree, not the wheel's), its generated code
(regenerated with its own torchgen and tools/, cached per tree) and its C++.
The installed torch answers only what a tree lacks (a tree without its
Python files) and what only the live process knows. When anything in an
answer comes from another version than the tree's, the answer says so in
one note; when nothing does, it says nothing.
"""

from __future__ import annotations

import atexit
import functools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kernelmap import env
from kernelmap.errors import BadInput, KernelmapError, NoSourceTree
from kernelmap.graph.rules import DEVICE_KEYS
from kernelmap.source.trees import has_python  # noqa: F401 - also imported from here

if TYPE_CHECKING:
    from kernelmap.catalog import Catalog
    from kernelmap.codegen import GeneratedFiles
    from kernelmap.codegen.build import Reporter
    from kernelmap.codegen.headers import HeaderFiles, HeadersDamaged
    from kernelmap.model import Origin
    from kernelmap.source import Index
    from kernelmap.source.config import BuildConfig

NEEDS_TREE = (
    "no source tree: showing the Python, binding, operator and generated layers only "
    "(add one with `kernelmap source add PATH` or `kernelmap source fetch`, then `kernelmap index`)"
)


@dataclass(frozen=True)
class GraphContext:
    """The producers one graph draws on. Any of index/generated may be None."""

    device: str
    requires_grad: bool
    all_branches: bool
    all_calls: bool  # also expand tensor utility calls (empty, view, contiguous, ...)
    catalog: Catalog  # the selected tree's, when a tree is selected
    wheel_catalog: Catalog  # the installed torch's (Python entry points, bindings)
    index: Index | None = None
    generated: GeneratedFiles | None = None
    site_packages: Path | None = None
    notes: tuple[str, ...] = ()
    dtype: str = "float32"
    # The Python layer (Note [graph versions]): the selected tree's own .py
    # files and catalog when it has them, else the installed wheel's.
    python_root: Path | None = None
    python_origin: Origin | None = None
    python_catalog: Catalog | None = None
    tree_root: Path | None = None  # the selected tree, if any
    progress: Reporter | None = None  # hears of generation steps done later (the headers)
    build: BuildConfig | None = None  # the release build's macros on `device` (Note [build configuration])
    no_index: str | None = None  # why the selected tree's index could not be opened (missing, damaged)
    stale: str | None = None  # which indexed files changed since (Index.stale_note), also among `notes`
    edited: tuple[tuple, ...] = ()  # those files as they are now: (path, size, mtime_ns), or (path,) when gone

    @functools.cached_property
    def headers(self) -> HeaderFiles | None:
        """The generated headers of at::<op> / Tensor::<op>: the tree's, regenerated
        with its torchgen the first time a graph shows them (about 7,000 files),
        or with no tree the wheel's torch/include. None when they cannot be had
        (`headers_error` says why)."""
        from kernelmap.codegen.headers import generated_headers, wheel_headers

        try:
            return generated_headers(self.tree_root, progress=self.progress) if self.tree_root is not None else wheel_headers()
        except KernelmapError as e:
            return self._no_headers(e)

    @functools.cached_property
    def kept(self) -> dict[str, dict]:
        """Pure results of this context's producers, kept for its life by what
        computes them: a warm process (kernelmap mcp, serve) asks many
        questions of one context, and they read much of the same code."""
        return {}

    @functools.cached_property
    def code_key(self) -> tuple | None:
        """What results read only from the selected tree's code and its index
        depend on (`shared_results`): the tree, its index as opened (stamped
        as `_opened_index` keys it: a rebuild is another), and the files edited
        since, as they are now; None without an index."""
        if self.index is None:
            return None
        return (str(self.index.tree.root), str(self.index.path), _index_stamp(self.index.path), self.edited)

    def overloads(self, base: str) -> tuple:
        """`catalog.overloads(base)`, read once per name: a graph asks of the
        same names at many calls, and each asking is a query."""
        table = kept_results(self, "_overloads")
        found = table.get(base)
        if found is None:
            found = table[base] = self.catalog.overloads(base)
        return found

    def check_index_intact(self) -> None:
        """Refuse an answer grown from an index that a read found damaged
        (kernelmap.source.index.IndexDamaged): it would be silently short."""
        if self.index is not None:
            self.index.check_intact()

    def regenerate_headers(self, damaged: HeadersDamaged) -> HeaderFiles | None:
        """The headers generated again after a read found a damaged one (one warning); None when that fails."""
        from kernelmap.codegen.headers import regenerate_headers

        try:
            self.__dict__["headers"] = regenerate_headers(self.tree_root, damaged, progress=self.progress) if self.tree_root is not None else None
        except KernelmapError as e:
            self.__dict__["headers"] = self._no_headers(e)
        return self.__dict__["headers"]

    def _no_headers(self, error: KernelmapError) -> None:
        self.__dict__["headers_error"] = f"generated headers unavailable, showing no at::/Tensor:: functions: {error}"
        return None

    @property
    def entry_catalog(self) -> Catalog:
        """The catalog whose Python entry points and bindings the graph shows."""
        return self.python_catalog if self.python_catalog is not None else self.wheel_catalog

    @property
    def python_dir(self) -> Path | None:
        return self.python_root if self.python_root is not None else self.site_packages


def open_context(
    device: str = "cpu",
    requires_grad: bool = False,
    all_branches: bool = False,
    source: str | None = None,
    require_tree: bool = False,
    all_calls: bool = False,
    dtype: str = "float32",
    progress: Reporter | None = None,
) -> GraphContext:
    """Open every producer a graph can use; missing ones become notes.

    `source` names a registered tree or a directory: then it must open, or
    the error is raised (as with `require_tree`). `progress` hears of each
    step while build files are generated for the first time (the CLI draws a bar)."""
    from kernelmap.catalog import load_catalog

    if device not in DEVICE_KEYS:
        raise BadInput(f"unknown device {device!r}; choose one of {', '.join(DEVICE_KEYS)}")
    install = env.torch_install()
    wheel_catalog = load_catalog()
    notes: list[str] = []
    catalog, index, tree = wheel_catalog, None, None
    no_index: str | None = None
    stale: str | None = None
    edited: tuple[tuple, ...] = ()
    try:
        from kernelmap.source import choose_tree, open_index

        choice = choose_tree(source)  # Note [the default tree]: a choice among several is said
        tree = choice.tree
        if choice.note:
            notes.append(choice.note)
        index = _opened_index(tree, open_index)
        catalog = load_catalog(tree=tree.root, origin=tree.origin)
        changed = index.changed_files()
        edited = _stamped(tree.root, changed)
        stale = index.stale_note(changed)
        if stale:
            notes.append(stale)
    except KernelmapError as e:
        if source is not None or require_tree:
            raise
        if tree is not None and index is None:  # a tree is selected; its index is what failed
            no_index = str(e)
        tree = None
        notes.append(NEEDS_TREE if isinstance(e, NoSourceTree) else f"{NEEDS_TREE} [{e}]")  # not the same hint twice
    python_root, python_origin, python_catalog = install.site_packages, install.origin, wheel_catalog
    from_wheel: list[str] = []  # static layers the tree lacks, answered by the installed torch
    if tree is not None:
        if has_python(tree.root):
            python_root, python_origin, python_catalog = tree.root, tree.origin, catalog
        else:
            from_wheel.append("the Python layer")
    generated = None
    try:
        from kernelmap.codegen import generated_files

        # the first graph of a version (or tree) regenerates its build files
        # with its own torchgen (cached)
        generated = generated_files(tree=tree.root if tree is not None else None, progress=progress)
    except KernelmapError as e:
        what = f"of {tree.origin.label} " if tree is not None else ""
        notes.append(f"generated code {what}unavailable, showing no bindings or wrappers: {e}")
    if tree is not None and from_wheel and tree.commit != install.commit:
        notes.append(
            f"version mismatch: {' and '.join(from_wheel)} from torch {install.version}, the rest from "
            f"{tree.origin.label} ({tree.version}); each location names its origin"
        )
    build = None
    if index is not None:
        from kernelmap.source.config import build_config

        build = build_config(index.tree.root, device, install.site_packages)
    return GraphContext(
        device,
        requires_grad,
        all_branches,
        all_calls,
        catalog,
        wheel_catalog,
        index,
        generated,
        install.site_packages,
        tuple(notes),
        dtype,
        python_root,
        python_origin,
        python_catalog,
        tree.root if tree is not None else None,
        progress,
        build,
        no_index,
        stale,
        edited,
    )


def _stamped(root: Path, paths: list[str]) -> tuple[tuple, ...]:
    """(path, size, mtime_ns) of each file under `root`; (path,) for one that is gone."""
    found = []
    for path in paths:
        try:
            st = os.stat(root / path)
            found.append((path, st.st_size, st.st_mtime_ns))
        except OSError:
            found.append((path,))
    return tuple(found)


def _index_stamp(path: Path) -> tuple | None:
    """What tells an index file from another at `path` (a rebuild; one written
    in place with its mtime put back: the ctime)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


# The indexes opened, by tree and by the index file as it is on disk: an
# Index keeps its answers to repeated look-ups for its life (its database
# never changes under it), so the contexts of a warm process opened on one
# tree (a device each, their options) share one, and what one looked up
# serves the others. An index rebuilt is another file, opened anew.
_INDEXES: dict[tuple, Index] = {}
_INDEX_KEYS = 4


def _opened_index(tree, open_index) -> Index:
    from kernelmap.source.index import IndexDamaged
    from kernelmap.source.records import index_path

    path = index_path(tree)
    stamp = _index_stamp(path)
    if stamp is None:
        return open_index(tree)  # says why, as it does
    key = (tree, str(path), stamp)
    found = _INDEXES.get(key)
    if found is not None:
        try:
            found.check_intact()
        except IndexDamaged:
            found = None  # opened again, as a context opened anew would
    if found is None:
        found = open_index(tree)
        _INDEXES.pop(key, None)
        while len(_INDEXES) >= _INDEX_KEYS:
            del _INDEXES[next(iter(_INDEXES))]
        _INDEXES[key] = found
    return found


# What a warm process keeps per context (`GraphContext.kept`; a context is
# one version's producers, opened once): each table of a layer's pure results
# (a definition's callbacks, an operator's generated code, a condition's arms)
# forgets its oldest entries past KEPT, so that a server asked thousands of
# questions stays bounded. An entry forgotten is computed again, the same.
KEPT = 20_000


class _Kept(dict):
    """A dict that forgets its oldest entry when an entry past `limit` is added
    (`added` counts the entries set since it was made)."""

    __slots__ = ("limit", "added")

    def __init__(self, limit: int):
        super().__init__()
        self.limit = limit
        self.added = 0

    def __setitem__(self, key, value) -> None:
        super().__setitem__(key, value)
        self.added += 1
        if len(self) > self.limit:
            del self[next(iter(self))]


def kept_results(ctx: GraphContext, name: str, limit: int = KEPT) -> dict:
    """The context's table `name` of results kept between questions (in
    `GraphContext.kept`; at most `limit` entries)."""
    table = ctx.kept.get(name)
    if table is None:
        table = ctx.kept[name] = _Kept(limit)
    return table


# Tables of results that read only the selected tree's code and its index
# (what a call resolves to, the type a receiver is declared with, the
# callbacks a definition passes): the same under every device and option, so
# kept once per tree and index (GraphContext.code_key) for every context open
# on them: a warm process asked of CUDA, then of the CPU, reads the code once.
# The tables of the last few keys are kept, each bounded as `kept_results`'s,
# and also on disk (Note [shared results on disk]).
_SHARED: dict[tuple, dict[str, _Kept]] = {}
_SHARED_KEYS = 4


def shared_results(ctx: GraphContext, name: str, limit: int = KEPT) -> dict:
    """The table `name` of results that depend on the tree's code and index
    only, shared by the contexts open on them (`kept_results` without an index)."""
    key = ctx.code_key
    if key is None:
        return kept_results(ctx, name, limit)
    tables = _SHARED.get(key)
    if tables is None:
        while len(_SHARED) >= _SHARED_KEYS:
            _write_results(next(iter(_SHARED)))
            del _SHARED[next(iter(_SHARED))]
        tables = _SHARED[key] = {}
        _ON_DISK[key] = (_read_results(key), ctx.index)
    table = tables.get(name)
    if table is None:
        table = tables[name] = _Kept(limit)
        stored = _ON_DISK[key][0].get(name)
        if stored:
            table.update(list(stored.items())[-limit:])  # not counted as added
    return table


# Note [shared results on disk]
# A cold CLI question grows its graph from nothing, and most of that time is
# spent on the code-only results of `shared_results` (which definition a call
# reaches, a receiver's type, a definition's callbacks): the same answers a
# warm process keeps. So the tables of one code key are kept on disk too, in
# `results/` of the cache, one pickle per key: read the first time a table of
# the key is asked for, and written back (temp file, then rename) when the
# process ends or the key is dropped, if it added entries and no read found
# the index damaged (an answer it held could be short). The file is named by
# a hash of the key and holds the key itself: the tree, its index as opened
# (`_index_stamp`: a rebuild is another), the tree's files edited since it was
# indexed as they are now, and kernelmap's own code (each module's size and
# mtime, `_code_stamp`): a changed tree or changed kernelmap never reads
# another's results. A result that reads the catalog too (the operators a
# definition writes as C++ operators, and their overloads) names the
# catalog's stamp in its entry's key: its yaml files are no indexed files.
# Each table holds at most its limit (KEPT) of entries;
# the newest _DISK_FILES files are kept, the older ones removed.
_DISK_VERSION = 1
_DISK_FILES = 8
_RESULTS = "results"
_ON_DISK: dict[tuple, tuple[dict, Index | None]] = {}  # per key: the tables as read from disk, and the index they read


@functools.lru_cache(maxsize=1)
def _code_stamp() -> str:
    """Changes whenever a module of kernelmap changes (its size or mtime)."""
    return code_stamp(Path(__file__).resolve().parents[1])


def code_stamp(here: Path) -> str:
    """A digest of the name, size and mtime of every module of the package at `here`."""
    import hashlib

    h = hashlib.sha256(str(here).encode())
    for path in sorted(here.rglob("*.py")):
        try:
            st = path.stat()
        except OSError:
            h.update(os.urandom(16))  # unknown code: never match a record
            continue
        h.update(f"{path.relative_to(here)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def _results_path(key: tuple) -> tuple[Path, str]:
    import hashlib

    described = repr((_DISK_VERSION, _code_stamp(), key))
    return env.cache_dir() / _RESULTS / f"{hashlib.sha256(described.encode()).hexdigest()[:32]}.pickle", described


def _read_results(key: tuple) -> dict:
    import pickle

    from kernelmap.safefiles import NotRegularFile, open_regular

    try:
        path, described = _results_path(key)
        with open_regular(path, "rb", "a cache file") as f:  # a FIFO there is refused, not waited on
            kept = pickle.load(f)
        if isinstance(kept, dict) and kept.get("key") == described and isinstance(kept.get("tables"), dict):
            return kept["tables"]
    except (OSError, NotRegularFile, pickle.UnpicklingError, EOFError, AttributeError, ValueError, TypeError,
            ImportError, IndexError, KeyError, RecursionError, MemoryError):
        pass
    return {}


def _write_results(key: tuple) -> None:
    """The tables of `key` written back to disk if they added entries (Note [shared results on disk])."""
    import pickle

    from kernelmap.safefiles import write_pickle

    tables = _SHARED.get(key) or {}
    stored, index = _ON_DISK.get(key, ({}, None))
    if not any(t.added for t in tables.values()) or getattr(getattr(index, "_db", None), "damaged", None) is not None:
        return
    try:
        path, described = _results_path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        value = {"key": described, "tables": {**stored, **{name: dict(t) for name, t in tables.items()}}}
        write_pickle(path, value)
        for t in tables.values():
            t.added = 0
        kept = sorted(path.parent.glob("*.pickle"), key=lambda p: p.stat().st_mtime_ns, reverse=True)
        for old in kept[_DISK_FILES:]:
            old.unlink(missing_ok=True)
    except (OSError, pickle.PicklingError, TypeError, AttributeError, RecursionError):
        pass  # a cache that cannot be written: computed again next time


def write_shared_results() -> None:
    """Every key's tables written back (at exit; Note [shared results on disk])."""
    for key in list(_SHARED):
        _write_results(key)


atexit.register(write_shared_results)
