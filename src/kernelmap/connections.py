"""One SQLite connection per thread over one read-only database.

A `sqlite3.Connection` belongs to the thread that opened it: another thread
that uses it gets `ProgrammingError`, or with `check_same_thread=False`
interleaves its statements with the owner's. The catalogs, a tree's index and
the generated files are opened once and kept (in a graph context, in the web
app's caches) and then read from whichever thread answers, so each of them
holds a `PerThread`: the connection it opened serves the thread that opened
it, and every other thread opens the same file for itself, read-only, the
first time it reads. An in-memory database (a catalog that could not be
cached) is copied into each thread's own.

A thread's connection is opened on the file as it was first opened: if the
file was replaced since (a rebuilt index renamed over it), reading on would
mix two builds, so `DatabaseReplaced` is raised instead.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from pathlib import Path

from kernelmap.errors import KernelmapError


class DatabaseReplaced(KernelmapError):
    """A database was rebuilt while an answer read it from several threads; ask again."""


def _identity(path: str) -> tuple[int, int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


class PerThread:
    """`execute` on this thread's own connection to the database `db` reads."""

    def __init__(self, db: sqlite3.Connection):
        self._local = threading.local()
        self._local.db = db
        self._lock = threading.Lock()
        self._opened = [db]
        file = next((f for _, name, f in db.execute("PRAGMA database_list").fetchall() if name == "main"), "")
        self._file = file or None
        self._identity = _identity(file) if file else None
        self._image: sqlite3.Connection | None = None  # an in-memory database's copy, which any thread may copy again
        if not file:
            if db.in_transaction:  # a backup would wait for it for ever
                raise ValueError("an in-memory database is shared between threads once its writes are committed")
            self._image = sqlite3.connect(":memory:", check_same_thread=False)
            db.backup(self._image)

    def connection(self) -> sqlite3.Connection:
        """This thread's connection, opened the first time it asks."""
        db = getattr(self._local, "db", None)
        if db is not None:
            return db
        if self._image is not None:
            db = sqlite3.connect(":memory:", check_same_thread=False)
            with self._lock:
                self._image.backup(db)
        else:
            db = sqlite3.connect(f"{Path(self._file).as_uri()}?mode=ro", uri=True, check_same_thread=False)
            db.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()  # the file is opened (and locked for reading) now
            if _identity(self._file) != self._identity:
                db.close()
                raise DatabaseReplaced(f"{self._file} was rebuilt while it was being read; ask again")
        with self._lock:
            self._opened.append(db)
        self._local.db = db
        return db

    def execute(self, sql: str, args: tuple | dict = ()) -> sqlite3.Cursor:
        return self.connection().execute(sql, args)

    def close(self) -> None:
        """Close every thread's connection (those another thread opened
        without sharing are closed when they are freed)."""
        with self._lock:
            opened, self._opened = self._opened, []
        for db in opened:
            try:
                db.close()
            except sqlite3.ProgrammingError:  # the first connection, owned by another thread
                pass
