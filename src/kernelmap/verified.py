"""A cache file checked in full once (its hash, SQLite's integrity check) is
not checked again while it is the same file: a record beside it
(`NAME.verified`) holds the file's size, mtime and inode as checked, and
what was checked. Any write changes the mtime, a replacement the inode.

Note [racy checks]
A file's mtime has the granularity of the kernel's clock tick, so a write
in the same tick as the check would leave it unchanged. As git does for its
index, a check is recorded only when the file was last written well before
it (MARGIN_NS): a later write then cannot carry the mtime that was recorded.
A file checked just after it was written is checked again next time.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from kernelmap.safefiles import NotRegularFile, read_text

MARGIN_NS = 2_000_000_000


def _record_path(path: Path) -> Path:
    return path.with_name(path.name + ".verified")


def _as_record(st: os.stat_result, what: str) -> dict:
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "ino": st.st_ino, "what": what}


def is_verified(path: Path, what: str) -> bool:
    """Whether `path` is the file a check `what` passed, unchanged since."""
    try:
        st = os.stat(path)
        record = json.loads(read_text(_record_path(path), "a check's record"))  # a FIFO there is refused, not waited on
    except (OSError, ValueError, RecursionError, NotRegularFile):
        return False
    return record == _as_record(st, what)


def mark_verified(path: Path, what: str, before: os.stat_result) -> None:
    """Record that the check `what` passed on `path`, whose stat taken before
    the check was `before` (Note [racy checks]). A cache that cannot be written
    is checked in full each time."""
    try:
        st = os.stat(path)
        if _as_record(st, what) != _as_record(before, what) or time.time_ns() - st.st_mtime_ns < MARGIN_NS:
            return
        out = _record_path(path)
        tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(_as_record(st, what)))
        os.replace(tmp, out)
    except OSError:
        pass
