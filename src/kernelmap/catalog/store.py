"""Build and open the catalog database: the operators torchgen reads from one
set of yaml files, stored in SQLite in the user cache, keyed by the files'
hashes so a warm lookup neither re-parses yaml nor imports torch.

Note [one torchgen per interpreter]
The yaml of a source tree must be read by that tree's own torchgen: a newer
torchgen rejects older yaml (2.13's fails on 2.6.0's with `unrecognized type
Dimname`). Two torchgens cannot share `sys.modules`, so every extraction runs
`_extract.py` in a fresh interpreter, with the tree's root first on PYTHONPATH
when reading a tree, and its JSON comes back on stdout.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sqlite3
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

from kernelmap.catalog.functional import functional_builtins
from kernelmap.env import torchgen_environment
from kernelmap.errors import KernelmapError, TorchgenError
from kernelmap.safefiles import check_regular, connect, read_bytes

SCHEMA_VERSION = 2  # 2: each dispatch entry's own yaml line

_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE ops (
    id INTEGER PRIMARY KEY,
    qualified TEXT NOT NULL UNIQUE,   -- add.Tensor
    base TEXT NOT NULL,               -- add
    record TEXT NOT NULL              -- the extractor's JSON record
);
CREATE INDEX ops_base ON ops(base);
-- Python names that reach an operator: generated builtins (torch.add,
-- torch.Tensor.add, torch._C._nn.gelu) and torch.nn.functional functions that call them.
CREATE TABLE entries (name TEXT NOT NULL, op_id INTEGER NOT NULL REFERENCES ops(id), line INTEGER);
CREATE INDEX entries_name ON entries(name);
CREATE INDEX entries_op ON entries(op_id);
"""

FUNCTIONAL = "torch.nn.functional"


def python_builtins(record: dict) -> list[str]:
    """The generated Python names of one operator, public spelling first.

    Mirrors where gen_python_functions puts bindings: `python_module` picks the
    binding module (torch._C._nn, torch._C._linalg, ...); `torch.linalg.norm`
    is the public spelling of `torch._C._linalg.linalg_norm`.
    """
    if not record["python_binding"]:
        return []
    name, module = record["name"], record["python_module"]
    names = []
    if "function" in record["variants"]:
        if module is None:
            names.append(f"torch.{name}")
        elif module in ("linalg", "special", "fft"):
            names.append(f"torch.{module}.{name.removeprefix(module + '_')}")
            names.append(f"torch._C._{module}.{name}")
        else:  # nn, sparse, nested
            names.append(f"torch._C._{module}.{name}")
    if "method" in record["variants"]:
        names.append(f"torch.Tensor.{name}")
    return names


class CatalogWarning(UserWarning):
    """Something about the cache was off; kernelmap carried on."""


@dataclass(frozen=True)
class CatalogFiles:
    """The files one catalog is read from, and the torchgen that reads them."""

    native_yaml: Path
    tags_yaml: Path
    derivatives_yaml: Path
    functional_py: Path | None
    torchgen_root: Path | None  # put first on PYTHONPATH; None: the installed torchgen

    def key(self) -> str:
        """A hash of every input and of the code that reads them, so any edit
        to either makes a new catalog."""
        h = hashlib.sha256(f"kernelmap-catalog-{SCHEMA_VERSION}".encode())
        for reader in _READERS:
            h.update(reader.read_bytes())
        for path in (self.native_yaml, self.tags_yaml, self.derivatives_yaml, self.functional_py):
            if path is None:
                continue
            try:
                h.update(read_bytes(path, "a catalog's input"))
            except FileNotFoundError:  # torch/nn/functional.py of a tree that has no Python layer: its absence is the key
                if path != self.functional_py:
                    raise
                h.update(b"\0absent")
        h.update(str(self.torchgen_root).encode())
        return h.hexdigest()[:24]


_READERS = (Path(__file__).with_name("_extract.py"), Path(__file__).with_name("functional.py"))


def _run_extractor(files: CatalogFiles) -> dict:
    from kernelmap import progress

    script = Path(__file__).with_name("_extract.py")
    environ, cwd = torchgen_environment(files.torchgen_root)
    with progress.step(f"reading {files.native_yaml.name} with torchgen (once per torch version or tree)"):
        proc = _extract(script, files, environ, cwd)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        who = f"the torchgen of {files.torchgen_root}" if files.torchgen_root else "the installed torchgen"
        raise TorchgenError(f"{who} could not read {files.native_yaml.name}: {last}")
    return json.loads(proc.stdout)


def _extract(script: Path, files: CatalogFiles, environ, cwd) -> subprocess.CompletedProcess:
    import subprocess  # building only: an open catalog is read without it

    return subprocess.run(
        [sys.executable, str(script), str(files.native_yaml), str(files.tags_yaml), str(files.derivatives_yaml)],
        capture_output=True,
        text=True,
        env=environ,
        cwd=cwd,
    )


def _write(db: sqlite3.Connection, files: CatalogFiles, extracted: dict) -> None:
    db.executescript(_SCHEMA)
    with db:
        db.executemany(
            "INSERT INTO meta VALUES (?, ?)",
            [
                ("schema_version", str(SCHEMA_VERSION)),
                ("torchgen", extracted["torchgen"]),
                ("native_yaml", str(files.native_yaml)),
                ("complete", "1"),
            ],
        )
        db.executemany(
            "INSERT INTO ops (id, qualified, base, record) VALUES (?, ?, ?, ?)",
            (
                (i, f"{r['name']}.{r['overload']}" if r["overload"] else r["name"], r["name"], json.dumps(r))
                for i, r in enumerate(extracted["ops"], 1)
            ),
        )
        by_builtin: dict[str, list[int]] = {}
        entries = []
        for i, r in enumerate(extracted["ops"], 1):
            for builtin in python_builtins(r):
                by_builtin.setdefault(builtin, []).append(i)
                entries.append((builtin, i, None))
        if files.functional_py is not None and files.functional_py.exists():
            for name, calls in functional_builtins(files.functional_py).items():
                for builtin, line in calls:
                    entries.extend((f"{FUNCTIONAL}.{name}", i, line) for i in by_builtin.get(builtin, ()))
        db.executemany("INSERT INTO entries VALUES (?, ?, ?)", entries)


_TABLES = frozenset(("meta", "ops", "entries"))


def _is_complete(db: sqlite3.Connection, path: Path | None = None) -> bool:
    """A finished build of this schema with every table and its operators;
    damaged pages anywhere raise sqlite3.DatabaseError (integrity_check reads
    them all, ~6 ms for the ~3,500 operators, and finds an index entry that
    no longer matches its row, which quick_check passes). The check runs once
    per file at `path` (kernelmap.verified), not on every open."""
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if _TABLES - tables:
        return False
    row = db.execute("SELECT value FROM meta WHERE key = 'complete'").fetchone()
    version = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    if not (bool(row) and version is not None and version[0] == str(SCHEMA_VERSION)):
        return False
    from kernelmap.verified import is_verified, mark_verified

    if path is not None and is_verified(path, "integrity_check"):
        return db.execute("SELECT count(*) FROM ops").fetchone()[0] > 0
    before = os.stat(path) if path is not None else None
    if db.execute("PRAGMA integrity_check(1)").fetchone()[0] != "ok":
        raise sqlite3.DatabaseError("the file is damaged")
    if before is not None:
        mark_verified(path, "integrity_check", before)
    return db.execute("SELECT count(*) FROM ops").fetchone()[0] > 0


def _remove_with_journal(tmp: str) -> None:
    for leftover in (tmp, f"{tmp}-journal"):
        Path(leftover).unlink(missing_ok=True)


# `.<key>-<pid>-<mkstemp's 8>.tmp`: a catalog being written by process <pid> (and its -journal)
_BUILDING = re.compile(r"\.[0-9a-f]+-(?P<pid>\d+)-\w+\.tmp(-journal)?")


def clean_stale_builds(directory: Path) -> list[Path]:
    """Delete the temporary files of catalog builds whose process is gone (a
    build killed with SIGKILL runs no cleanup); returns what was deleted."""
    from kernelmap.env import process_alive

    gone = []
    try:
        names = os.listdir(directory)
    except OSError:
        return gone
    for name in names:
        m = _BUILDING.fullmatch(name)
        if m is None or process_alive(int(m.group("pid"))):
            continue
        (directory / name).unlink(missing_ok=True)
        gone.append(directory / name)
    return gone


def open_catalog_db(files: CatalogFiles, cache: Path) -> sqlite3.Connection:
    """Open the cached catalog for `files`, building it first if need be.

    A corrupted or truncated cache file is rebuilt with a warning; a cache
    directory that cannot be written gives an in-memory catalog, with a warning.
    """
    path = cache / "catalog" / f"{files.key()}.sqlite"
    if check_regular(path, "the catalog cache") is not None:  # a FIFO there is refused, not waited on
        try:
            db = connect(path, "the catalog cache")
            try:
                if _is_complete(db, path):
                    return db
            except (sqlite3.DatabaseError, ValueError):
                db.close()
                raise
            db.close()
            warnings.warn(f"catalog cache {path.name} is incomplete; rebuilding it", CatalogWarning, stacklevel=2)
        except (sqlite3.DatabaseError, ValueError) as e:  # ValueError: a damaged text (UnicodeDecodeError)
            warnings.warn(f"catalog cache {path.name} is unreadable ({' '.join(str(e).split())[:120]}); rebuilding it", CatalogWarning, stacklevel=2)

    extracted = _run_extractor(files)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        import tempfile

        clean_stale_builds(path.parent)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}-{os.getpid()}-", suffix=".tmp")
        os.close(fd)
    except OSError as e:
        warnings.warn(f"cache directory {path.parent} is not writable ({e.strerror}); working uncached", CatalogWarning, stacklevel=2)
        db = sqlite3.connect(":memory:")
        _write(db, files, extracted)
        return db
    db = None
    try:
        db = sqlite3.connect(tmp)
        _write(db, files, extracted)
        db.close()
        os.replace(tmp, path)  # atomic: readers see the old file or the whole new one
    except (sqlite3.OperationalError, OSError) as e:  # a full disk: the answer does not need the cache
        if db is not None:
            db.close()
        _remove_with_journal(tmp)
        warnings.warn(f"cache directory {path.parent} cannot hold the catalog ({' '.join(str(e).split())[:120]}); working uncached",
                      CatalogWarning, stacklevel=2)
        db = sqlite3.connect(":memory:")
        _write(db, files, extracted)
        return db
    except BaseException:
        _remove_with_journal(tmp)
        raise
    try:
        return sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    except sqlite3.DatabaseError as e:  # pragma: no cover - just written
        raise KernelmapError(f"cannot open the catalog just built at {path}: {e}") from None
