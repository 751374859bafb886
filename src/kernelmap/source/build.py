"""Build a source tree's index: extract every C++/CUDA file of aten/, c10/
and torch/csrc/ in parallel and store the facts in one SQLite database per
tree in the cache dir.

The build works on a copy beside the database and renames it into place at
the end, so an interrupted or failed build leaves the previous database as it
was; a file lock keeps two builds of one tree from running at once. Only
files whose size, mtime and hash changed are parsed again; a database of
another schema or extractor version, or one SQLite cannot read, is rebuilt
from scratch.
"""

from __future__ import annotations

import errno
import gc
import hashlib
import itertools
import multiprocessing
import os
import shutil
import signal
import sqlite3
import stat
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from kernelmap import vendors
from kernelmap.errors import BadInput, SourceError
from kernelmap.safefiles import NotRegularFile, check_regular
from kernelmap.source import calls, extract, includes, masking, preprocess, regions
from kernelmap.source import facts as file_facts
from kernelmap.source.facts import FileFacts, OperatorNames, read_operator_names
from kernelmap.source.records import as_indexed, clean_stale_copies, file_record, index_lock, index_path, read_record, write_record
from kernelmap.source.schema import CALL_KIND_CODE, INDEXES, SCHEMA, SCHEMA_VERSION, expected_table_definitions, one_line, table_definitions
from kernelmap.source.trees import INDEXED_PARTS, Tree

NATIVE_YAML = "aten/src/ATen/native/native_functions.yaml"
LOCK_TIMEOUT_S = 1800.0
MAX_JOBS = 256
_INLINE_BELOW = 48  # fewer changed files than this are parsed in this process
_SKIP_DIRS = frozenset((".git", "__pycache__", "third_party"))

Progress = Callable[[str, int, int], None]  # (phase, done, total)


class IndexBusy(SourceError):
    """Another process is building the same index and did not finish in time."""


@dataclass(frozen=True)
class IndexReport:
    """What one build did."""

    tree: str
    path: Path  # the database
    files: int  # files in the index
    parsed: int  # files parsed by this build
    removed: int  # files gone from the tree since the last build
    full: bool  # a full build (no usable previous database)
    rebuilt_reason: str | None  # why a previous database was not reused
    missing_parts: tuple[str, ...]  # of aten, c10, torch/csrc
    skipped: tuple[tuple[str, str], ...]  # (path, reason) of files not parsed
    with_errors: int  # files the grammar could not fully parse
    worst: tuple[tuple[str, int], ...] = field(default=())  # (path, ERROR nodes), worst first
    seconds: float = 0.0
    waited: bool = False  # another build held the lock first


def extractor_fingerprint() -> str:
    """Changes whenever the extractor or its queries change: facts of an
    older extractor are not reused."""
    h = hashlib.sha1()
    extractor_modules = (extract, file_facts, preprocess, masking, calls, regions, extract.objc_source, vendors, includes)
    for p in sorted([*(Path(m.__file__) for m in extractor_modules), *extract.QUERY_DIR.glob("*.scm")]):
        h.update(p.name.encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


def scan(tree: Tree) -> list[tuple[str, int, int]]:
    """(repository path, size, mtime_ns) of every indexed file, sorted."""
    out = []
    for part in INDEXED_PARTS:
        top = tree.root / part
        if not top.is_dir():
            continue
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames[:] = [d for d in dirnames if d not in _SKIP_DIRS]
            rel = os.path.relpath(dirpath, tree.root).replace(os.sep, "/")
            for name in filenames:
                if not name.endswith(extract.SOURCE_SUFFIXES):
                    continue
                full = os.path.join(dirpath, name)
                # A FIFO, a socket or a dangling link is listed too: its read
                # fails, and it is named among the skipped files with the reason.
                try:
                    st = os.stat(full)
                except OSError:
                    try:
                        st = os.lstat(full)
                    except OSError:
                        continue  # gone since the walk
                out.append((f"{rel}/{name}", st.st_size, st.st_mtime_ns))
    out.sort()
    return out


# ---------------------------------------------------------------------------
# Workers
# ---------------------------------------------------------------------------

# (root, extractor, the root's real path, the real paths of directories read so far in this build)
_worker: tuple[Path, extract.Extractor, str, dict[str, str]] | None = None


def _init_worker(root: str, ops: OperatorNames) -> None:
    global _worker
    _worker = (Path(root), extract.Extractor(ops), os.path.realpath(root), {})


def _init_pool_worker(root: str, ops: OperatorNames) -> None:
    _init_worker(root, ops)
    # Ctrl-C reaches every process of the terminal's group: the main process
    # stops the build and ends the workers, which print nothing of their own.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Extraction allocates many small objects and makes no reference cycles
    # worth collecting often.
    gc.set_threshold(100_000, 50, 50)


def _skipped(path: str, why: str) -> FileFacts:
    return FileFacts(path, 0, "", 0, why, (), (), (), ())


_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def read_source(root: Path, path: str, real_root: str | None = None, real_dirs: dict[str, str] | None = None) -> bytes | str:
    """The bytes of `root/path`, or why they are not read: a file that is gone
    or unreadable since the scan, no longer a regular file (a FIFO would block
    the build while it holds the lock), a symlink out of the tree, or larger
    than the size budget. `real_root` is the root's real path, if known;
    `real_dirs` keeps directories' real paths from file to file (of one build:
    a directory may be made a link between builds)."""
    full = os.path.join(root, path)
    try:
        inside = (real_root or os.path.realpath(root)).rstrip(os.sep) + os.sep
        # Resolving every file's path took a third of the time of reading it;
        # a file that is no link (O_NOFOLLOW) is where its directory really is.
        directory = os.path.dirname(full)
        real_dir = real_dirs.get(directory) if real_dirs is not None else None
        if real_dir is None:
            real_dir = os.path.realpath(directory)
            if real_dirs is not None:
                real_dirs[directory] = real_dir
        if not (real_dir + os.sep).startswith(inside):
            return "a symlink out of the tree"
        # O_NONBLOCK: opening a FIFO with no writer returns at once; fstat then refuses it.
        flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)
        fd = None
        if _NOFOLLOW:
            try:
                fd = os.open(full, flags | _NOFOLLOW)
            except OSError as e:
                if e.errno != errno.ELOOP:
                    raise
        if fd is None:  # the file is a link (or a system without O_NOFOLLOW): where it leads decides
            if not os.path.realpath(full).startswith(inside):
                return "a symlink out of the tree"
            fd = os.open(full, flags)
    except (OSError, ValueError) as e:
        return f"unreadable ({getattr(e, 'strerror', None) or e})"
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return "not a regular file"
        if st.st_size > extract.MAX_FILE_BYTES:
            return f"larger than {extract.MAX_FILE_BYTES // 2**20} MB"
        # os.read of the size fstat gives, and then to the end: a buffered
        # read of the size limit allocated 4 MB for every file.
        parts = [os.read(fd, st.st_size + 1)]
        total = len(parts[0])
        while parts[-1] and total <= extract.MAX_FILE_BYTES:  # a short read, or a file that grew
            parts.append(os.read(fd, extract.MAX_FILE_BYTES + 1 - total))
            total += len(parts[-1])
        return parts[0] if len(parts) == 2 and not parts[1] else b"".join(parts)
    except OSError as e:
        return f"unreadable ({e.strerror or e})"
    finally:
        os.close(fd)


_FACT_LISTS = ("definitions", "calls", "registrations", "stubs", "includes", "defines")


def _columns(facts: FileFacts) -> FileFacts:
    """`facts` with each list of facts turned into columns, a tuple per field
    (none for an empty list): cheaper to send between processes than a tuple
    per fact, and what the writer maps to rows without a Python loop."""
    return facts._replace(**{f: tuple(zip(*getattr(facts, f))) for f in _FACT_LISTS})


def _extract_one_columns(path: str) -> FileFacts:
    return _columns(_extract_one(path))


def _extract_one(path: str) -> FileFacts:
    assert _worker is not None
    root, ex, real_root, real_dirs = _worker
    data = read_source(root, path, real_root, real_dirs)
    if isinstance(data, str):  # recorded, not fatal
        return _skipped(path, data)
    facts = ex.extract(path, data)
    if len(data) <= extract.MAX_FILE_BYTES and b"\0" not in data:  # a file too degenerate to parse has directives all the same
        facts = facts._replace(**dict(zip(("includes", "defines"), includes.read(data))))
    return facts


def _extract_all(tree: Tree, ops: OperatorNames, paths: list[str], jobs: int, sizes: dict[str, int]) -> Iterable[FileFacts]:
    if jobs <= 1 or len(paths) < _INLINE_BELOW:
        _init_worker(str(tree.root), ops)
        for p in paths:
            yield _columns(_extract_one(p))
        return
    ctx = multiprocessing.get_context("fork" if os.name == "posix" else "spawn")
    # Large files first so one slow file does not finish last on its own; in
    # chunks of 64 files, as each message to and from a worker costs the main
    # process (the last chunks, of the smallest files, take milliseconds).
    ordered = sorted(paths, key=lambda p: -sizes.get(p, 0))
    with ctx.Pool(jobs, initializer=_init_pool_worker, initargs=(str(tree.root), ops)) as pool:
        yield from pool.imap_unordered(_extract_one_columns, ordered, chunksize=64)


# ---------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------


class _StringIds(dict):
    """Text -> its id in `strings`, given on first lookup: the id the database
    has for it, else a new one (kept in `new` until `flush`). None is 0, which
    the statements turn back into NULL (NULLIF): None is not among the types
    the sqlite3 module binds directly, and each goes through its adapter
    lookup, which costs more than the rest of a row."""

    def __init__(self, db: sqlite3.Connection, fresh: bool):
        super().__init__({None: 0})
        self.db = db
        self.fresh = fresh  # an empty database: nothing to look up
        self.next = (db.execute("SELECT max(id) FROM strings").fetchone()[0] or 0) + 1
        self.new: list[tuple[int, str]] = []

    def __missing__(self, text: str) -> int:
        row = None if self.fresh else self.db.execute("SELECT id FROM strings WHERE text = ?", (text,)).fetchone()
        if row is None:
            row = (self.next,)
            self.new.append((self.next, text))
            self.next += 1
        self[text] = row[0]
        return row[0]

    def flush(self) -> None:
        self.db.executemany("INSERT INTO strings(id, text) VALUES (?, ?)", self.new)
        self.new.clear()


class _Writer:
    """Inserts facts. Ids of strings and symbols are assigned here and rows
    go in by `executemany`, one batch per file, each row zipped from the
    file's columns (`_columns`) with its strings mapped to ids as the rows
    are read (`_StringIds`): per-row statements, or a Python loop per row,
    would cost more than parsing."""

    def __init__(self, db: sqlite3.Connection, fresh: bool):
        self.db = db
        self.ids = _StringIds(db, fresh)
        self.next_symbol = (db.execute("SELECT max(id) FROM symbols").fetchone()[0] or 0) + 1

    def add(self, facts: FileFacts, mtime_ns: int, size: int | None = None) -> int:
        """Insert one file's facts (as `_columns`); returns its file id. A
        skipped file is recorded at the `size` the scan found, as a read one
        is: it is then as indexed until it changes, not "changed" for ever."""
        db = self.db
        # facts.Definition, Call, Registration, StubDecl, a column each
        names, lookups, shorts, kinds, lines, end_lines, conditions, ops = facts.definitions or ((),) * 8
        c_defs, callees, c_shorts, c_kinds, libraries, c_ops, c_lines, c_conds, c_pps, c_outers = facts.calls or ((),) * 10
        r_defs, r_kinds, r_names, targets, keys, details, r_lines, r_pps = facts.registrations or ((),) * 8
        s_kinds, s_names, s_details, s_lines, s_pps = facts.stubs or ((),) * 5
        i_lines, i_names, i_angled, i_conds = facts.includes or ((),) * 4  # includes.Include, includes.Define
        d_lines, d_names, d_values, d_conds = facts.defines or ((),) * 4
        string = self.ids.__getitem__  # None as 0: see _StringIds

        file_id = db.execute(
            "INSERT INTO files(path, sha1, size, mtime_ns, errors, skipped) VALUES (?, ?, ?, ?, ?, ?)",
            (facts.path, facts.sha1, size if facts.skipped and size is not None else facts.size, mtime_ns, facts.errors, facts.skipped),
        ).lastrowid
        first = self.next_symbol
        self.next_symbol += len(names)
        symbol_ids = range(first, self.next_symbol)
        symbol_of = [*symbol_ids, 0].__getitem__  # a definition's index; -1 (file scope) is 0, so NULL
        file_ids = itertools.repeat(file_id)
        db.executemany(
            "INSERT INTO symbols(id, file_id, name_id, lookup_id, short_id, kind, line, end_line, cond_id, op_id)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, NULLIF(?, 0), NULLIF(?, 0))",
            zip(symbol_ids, file_ids, map(string, names), map(string, lookups), map(string, shorts), kinds, lines, end_lines,
                map(string, conditions), map(string, ops)),
        )
        db.executemany(
            "INSERT INTO calls(symbol_id, file_id, callee_id, short_id, kind, lib_id, op_id, line, cond_id, pp_id, outer_id)"
            " VALUES (NULLIF(?, 0), ?, ?, ?, ?, NULLIF(?, 0), NULLIF(?, 0), ?, NULLIF(?, 0), NULLIF(?, 0), NULLIF(?, 0))",
            zip(map(symbol_of, c_defs), file_ids, map(string, callees), map(string, c_shorts), map(CALL_KIND_CODE.__getitem__, c_kinds),
                map(string, libraries), map(string, c_ops), c_lines, map(string, c_conds), map(string, c_pps), map(string, c_outers)),
        )
        db.executemany(
            "INSERT INTO registrations(file_id, symbol_id, kind, name_id, target_id, key_id, detail_id, line, pp_id)"
            " VALUES (?, NULLIF(?, 0), ?, ?, NULLIF(?, 0), NULLIF(?, 0), NULLIF(?, 0), ?, NULLIF(?, 0))",
            zip(file_ids, map(symbol_of, r_defs), r_kinds, map(string, r_names), map(string, targets), map(string, keys),
                map(string, details), r_lines, map(string, r_pps)),
        )
        db.executemany(
            "INSERT INTO stubs(file_id, kind, name_id, detail_id, line, pp_id) VALUES (?, ?, ?, NULLIF(?, 0), ?, NULLIF(?, 0))",
            zip(file_ids, s_kinds, map(string, s_names), map(string, s_details), s_lines, map(string, s_pps)),
        )
        db.executemany(
            "INSERT INTO includes(file_id, line, name_id, angled, cond_id) VALUES (?, ?, ?, ?, NULLIF(?, 0))",
            zip(file_ids, i_lines, map(string, i_names), i_angled, map(string, i_conds)),
        )
        db.executemany(
            "INSERT INTO defines(file_id, line, name_id, value_id, cond_id) VALUES (?, ?, ?, NULLIF(?, 0), NULLIF(?, 0))",
            zip(file_ids, d_lines, map(string, d_names), map(string, d_values), map(string, d_conds)),
        )
        self.ids.flush()
        return file_id


def _delete_files(db: sqlite3.Connection, file_ids: list[int]) -> None:
    for chunk in range(0, len(file_ids), 500):
        ids = file_ids[chunk : chunk + 500]
        marks = ",".join("?" * len(ids))
        db.execute(f"DELETE FROM calls WHERE file_id IN ({marks})", ids)
        for table in ("symbols", "registrations", "stubs", "includes", "defines"):
            db.execute(f"DELETE FROM {table} WHERE file_id IN ({marks})", ids)
        db.execute(f"DELETE FROM files WHERE id IN ({marks})", ids)


def _classify_stub_calls(db: sqlite3.Connection, file_ids: list[int] | None = None) -> None:
    """Note [stub calls] in extract: promote calls of declared stubs (and
    stubs passed as arguments: Note [stubs passed on]), unless the
    calling file defines a function of that name itself. Only the calls of
    `file_ids` when given (the tree's stubs did not change)."""
    direct, stub = CALL_KIND_CODE["direct"], CALL_KIND_CODE["stub"]
    local = "EXISTS (SELECT 1 FROM symbols s WHERE s.file_id = calls.file_id AND s.short_id = calls.short_id)"
    declared = "calls.short_id IN (SELECT name_id FROM stubs)"
    scope = ""
    if file_ids is not None:
        scope = f" AND calls.file_id IN ({','.join(str(int(i)) for i in file_ids)})" if file_ids else " AND 0"
    for plain, promoted in ((direct, stub), (CALL_KIND_CODE["argument"], CALL_KIND_CODE["stub_argument"])):  # Note [stubs passed on]
        db.execute(f"UPDATE calls SET kind = {promoted} WHERE kind = {plain} AND {declared} AND NOT {local}{scope}")
        db.execute(f"UPDATE calls SET kind = {plain} WHERE kind = {promoted} AND (NOT {declared} OR {local}){scope}")


def _open_previous(path: Path, meta_expected: dict[str, str]) -> str | None:
    """None when the database at `path` can be updated in place of a full
    build, else the reason it cannot."""
    try:
        if check_regular(path) is None:
            return "no index yet"
    except NotRegularFile as e:  # a FIFO or a link loop at its name: built anew and renamed over it
        return str(e)
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
            tables = table_definitions(db)
            db.execute("SELECT count(*) FROM files").fetchone()
            # Damaged pages (flipped bits, a truncated file) must force a
            # rebuild rather than "nothing to do" over an index `find` trips on.
            problems = [r[0] for r in db.execute("PRAGMA quick_check(3)").fetchall()]
        finally:
            db.close()
    except (sqlite3.DatabaseError, ValueError) as e:  # ValueError: a damaged text (UnicodeDecodeError)
        return f"the database is unreadable ({one_line(e)})"
    if tables != expected_table_definitions():
        return "the database's tables are not those of the schema"
    if problems != ["ok"]:
        return f"the database is damaged ({problems[0]})"
    for key, value in meta_expected.items():
        if meta.get(key) != value:
            return f"{key} changed" if key in meta else f"no {key} recorded"
    if meta.get("complete") != "1":
        return "the previous build did not finish"
    record = read_record(path)
    try:
        same = record is not None and file_record(path) == record
    except OSError as e:
        return f"the database is unreadable ({e.strerror or e})"
    if not same:  # changed since it was built: bits flipped, truncated, replaced
        return "the database is damaged or was replaced since it was built"
    return None


def build_index(
    tree: Tree,
    *,
    jobs: int | None = None,
    progress: Progress | None = None,
    lock_timeout: float = LOCK_TIMEOUT_S,
    on_wait: Callable[[], None] | None = None,
) -> IndexReport:
    """Build or update the index of `tree`; returns what was done.

    `jobs` worker processes parse files (default: the machine's cores).
    `progress(phase, done, total)` reports parsing. When another process is
    building the same index, `on_wait()` is called and this one waits for it
    (up to `lock_timeout` seconds, then IndexBusy), then updates what is left.
    """
    from filelock import FileLock, Timeout

    if jobs is not None and not 1 <= jobs <= MAX_JOBS:
        raise BadInput(f"--jobs is a number of worker processes from 1 to {MAX_JOBS}, not {jobs}")
    t0 = time.monotonic()
    if not tree.root.is_dir():
        raise SourceError(f"the tree {tree.name!r} is gone from {tree.root}; remove it with `kernelmap source remove {tree.name}`")
    missing = tree.missing_parts
    if len(missing) == len(INDEXED_PARTS):
        raise SourceError(f"{tree.root} holds none of {', '.join(INDEXED_PARTS)}: nothing to index")
    path = index_path(tree)
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(path) + ".lock")
    waited = False
    try:
        lock.acquire(timeout=0)
    except Timeout:
        waited = True
        if on_wait:
            on_wait()
        try:
            lock.acquire(timeout=lock_timeout)
        except Timeout:
            raise IndexBusy(f"another process is still building {path.name} after {lock_timeout:.0f}s") from None
    try:
        report = _build_locked(tree, path, jobs or min(os.cpu_count() or 1, MAX_JOBS), progress, missing)
    finally:
        lock.release()
    return IndexReport(**{**report.__dict__, "seconds": time.monotonic() - t0, "waited": waited})


def _build_locked(tree: Tree, path: Path, jobs: int, progress: Progress | None, missing: tuple[str, ...]) -> IndexReport:
    yaml = tree.root / NATIVE_YAML
    yaml_sha = hashlib.sha1(yaml.read_bytes()).hexdigest() if yaml.is_file() else "none"
    expected = {
        "schema_version": str(SCHEMA_VERSION),
        "extractor": extractor_fingerprint(),
        "native_functions_sha1": yaml_sha,
        "root": str(tree.root),
        "missing_parts": ",".join(missing),
    }
    reason = _open_previous(path, expected)
    full = reason is not None
    # Copies left by builds that were killed; none of this tree's is in use, as we hold the lock.
    for stale in path.parent.glob(f".{path.name}.*.tmp"):
        stale.unlink(missing_ok=True)
    clean_stale_copies(path.parent)
    on_disk = scan(tree)
    if not full:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            plan = _plan(db, tree, on_disk)
            if plan.is_empty:  # nothing changed: the database stays as it is
                return _report(db, tree, path, plan, False, None, missing)
        finally:
            db.close()
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        if not full:
            shutil.copyfile(path, tmp)
        db = sqlite3.connect(tmp, isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode = OFF")  # the file is private until renamed
            db.execute("PRAGMA synchronous = OFF")
            db.execute("PRAGMA cache_size = -65536")
            if full:
                db.executescript(SCHEMA)
            db.execute("BEGIN")
            plan = _plan(db, tree, on_disk) if not full else _Plan([p for p, _, _ in on_disk], [], [], [], {p: m for p, _, m in on_disk})
            plan.sizes = {p: size for p, size, _ in on_disk}
            _apply(db, tree, plan, full, expected, jobs, progress)
            report = _report(db, tree, path, plan, full, reason, missing)
            db.execute("COMMIT")
        finally:
            db.close()
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        record = file_record(tmp)  # a rename keeps size and mtime
        os.replace(tmp, path)
        write_record(path, record)
    except sqlite3.OperationalError as e:  # a full disk: the previous index stays as it was
        raise SourceError(f"cannot write the index of {tree.name!r} in {path.parent} ({one_line(e)})") from None
    finally:
        tmp.unlink(missing_ok=True)
    return report


@dataclass
class _Plan:
    to_parse: list[str]  # new and changed files
    stale: list[int]  # file ids of changed files
    removed: list[int]  # file ids of files gone from the tree
    touched: list[tuple[int, int]]  # (new mtime, file id) of files touched but unchanged
    mtimes: dict[str, int]
    sizes: dict[str, int] = field(default_factory=dict)  # as scanned: large files go first

    @property
    def is_empty(self) -> bool:
        return not (self.to_parse or self.stale or self.removed or self.touched)


def _plan(db: sqlite3.Connection, tree: Tree, on_disk: list[tuple[str, int, int]]) -> _Plan:
    """What an update must do: compare the tree with the files table (size and
    mtime first; the hash when only the mtime moved)."""
    known = {p: (i, sha, size, mt) for i, p, sha, size, mt in db.execute("SELECT id, path, sha1, size, mtime_ns FROM files")}
    plan = _Plan([], [], [], [], {})
    for rel, size, mtime in on_disk:
        plan.mtimes[rel] = mtime
        old = known.pop(rel, None)
        if old is None:
            plan.to_parse.append(rel)
            continue
        file_id, sha, old_size, old_mtime = old
        if size == old_size and mtime == old_mtime:
            continue
        if as_indexed(tree.root / rel, size, mtime, (sha, old_size, old_mtime)):  # only touched
            plan.touched.append((mtime, file_id))
            continue
        plan.stale.append(file_id)
        plan.to_parse.append(rel)
    plan.removed = [v[0] for v in known.values()]
    return plan


def _apply(db, tree: Tree, plan: _Plan, full: bool, expected: dict[str, str], jobs: int, progress: Progress | None) -> None:
    db.executemany("UPDATE files SET mtime_ns = ? WHERE id = ?", plan.touched)
    stubs_before = None if full else set(db.execute("SELECT DISTINCT name_id FROM stubs"))
    _delete_files(db, plan.stale + plan.removed)
    ops = read_operator_names(tree.root / NATIVE_YAML)
    writer = _Writer(db, fresh=full)
    total = len(plan.to_parse)
    if progress:
        progress("parse", 0, total)
    new_ids = []
    # A full build makes the indexes after the bulk insert (cheaper than row by
    # row), once 95% of the bytes are in: the workers are still parsing the
    # last files meanwhile, and the few rows left keep them up to date. (Large
    # files go first: once nine files in ten were in, 99.8% of the bytes were,
    # and the workers sat idle while the indexes were made. Made at 90% to
    # 99.8% of the bytes, writing and indexing take the same time.)
    indexed = not full
    index_at = sum(plan.sizes.get(p, 0) for p in plan.to_parse) * 0.95
    done_bytes = 0
    for done, facts in enumerate(_extract_all(tree, ops, plan.to_parse, jobs, plan.sizes), 1):
        new_ids.append(writer.add(facts, plan.mtimes[facts.path], plan.sizes.get(facts.path)))
        if progress:
            progress("parse", done, total)
        done_bytes += plan.sizes.get(facts.path, 0)
        if not indexed and done_bytes >= index_at:
            _make_indexes(db)
            indexed = True
    if not indexed:
        _make_indexes(db)
    if plan.to_parse or plan.removed:
        same_stubs = stubs_before is not None and stubs_before == set(db.execute("SELECT DISTINCT name_id FROM stubs"))
        _classify_stub_calls(db, new_ids if same_stubs else None)
    meta = {**expected, "complete": "1", "tree": tree.name, "version": tree.version, "commit": tree.commit or ""}
    db.executemany("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", list(meta.items()))


def _make_indexes(db) -> None:
    for statement in INDEXES.split(";"):
        if statement.strip():
            db.execute(statement)


def _report(db, tree: Tree, path: Path, plan: _Plan, full: bool, reason: str | None, missing: tuple[str, ...]) -> IndexReport:
    skipped = tuple(db.execute("SELECT path, skipped FROM files WHERE skipped IS NOT NULL ORDER BY path").fetchall())
    with_errors = db.execute("SELECT count(*) FROM files WHERE errors > 0").fetchone()[0]
    worst = tuple(db.execute("SELECT path, errors FROM files WHERE errors > 0 ORDER BY errors DESC, path LIMIT 10").fetchall())
    files = db.execute("SELECT count(*) FROM files").fetchone()[0]
    return IndexReport(tree.name, path, files, len(plan.to_parse), len(plan.removed), full, reason, missing, skipped, with_errors, worst)
