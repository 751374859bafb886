"""Where a tree's index lives and what is kept beside it (the record of its
size, mtime and hash as built, the builds' lock, the copies killed builds
left): what reading or removing an index needs, without the builder and the
extractor (tree-sitter, multiprocessing) that writing one imports."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from kernelmap import env
from kernelmap.safefiles import NotRegularFile, read_bytes, read_text

if TYPE_CHECKING:
    from kernelmap.source.trees import Tree


def index_path(tree: Tree) -> Path:
    return index_path_of(tree.name)


def index_path_of(name: str) -> Path:
    """The database of the tree named `name`. Names too long for a file name
    (registries written before names were limited) get a hashed one."""
    if len(name.encode()) > 100:
        name = f"{name[:60]}-{hashlib.sha1(name.encode()).hexdigest()[:16]}"
    return env.cache_dir() / "index" / f"{name}.sqlite"


def index_lock(path: Path):
    from filelock import FileLock

    return FileLock(str(path) + ".lock")


def clean_stale_copies(directory: Path) -> list[Path]:
    """Delete the `.NAME.sqlite.PID.tmp` copies of builds whose process is gone
    (killed builds of any tree); returns what was deleted."""
    gone = []
    for tmp in directory.glob(".*.sqlite.*.tmp"):
        pid = tmp.name.rsplit(".", 2)[-2]
        if not pid.isdigit() or env.process_alive(int(pid)):
            continue
        tmp.unlink(missing_ok=True)
        gone.append(tmp)
    return gone


def record_path(path: Path) -> Path:
    """The record beside a database: its size, mtime and sha256 as built."""
    return path.with_name(path.name + ".record")


def file_record(path: Path, *, digest: bool = True) -> dict:
    st = path.stat()
    record = {"size": st.st_size, "mtime_ns": st.st_mtime_ns}
    if digest:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        record["sha256"] = h.hexdigest()
    return record


def read_record(path: Path) -> dict | None:
    try:
        record = json.loads(read_text(record_path(path), "an index's record"))
    except (OSError, ValueError, RecursionError):
        return None
    return record if isinstance(record, dict) else None


def write_record(path: Path, record: dict) -> None:
    out = record_path(path)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(record))
    os.replace(tmp, out)


def as_indexed(path: Path, size: int, mtime_ns: int, indexed: tuple[str, int, int]) -> bool:
    """Whether a source file, now `size` bytes modified at `mtime_ns`, is as
    the index recorded it (`indexed`: its sha1, size and mtime): the same size
    and mtime, or only touched (the same size and content)."""
    sha1, old_size, old_mtime = indexed
    if size != old_size:
        return False
    if mtime_ns == old_mtime:
        return True
    try:
        return hashlib.sha1(read_bytes(path)).hexdigest() == sha1
    except (OSError, NotRegularFile):  # gone, unreadable, or now a FIFO: changed
        return False
