"""The files kernelmap reads and writes by name (its cache: the tree
registry, indexes, catalogs, manifests, records; a project's kernelmap.json;
the outputs a user names: --html, --export-chrome), opened so that what is
no regular file is refused at once, in one line.

A FIFO opened for reading blocks until a writer comes, for ever; a device
reads without end; a link loop or a folder fails with an error that names
neither. So a file is opened with O_NONBLOCK (a FIFO opens at once) and
fstat decides (`open_regular`), a database is stat'ed before SQLite opens
it (`connect`), and an output is checked before any work is done and
written aside, then renamed into place (`check_output`, `write_output`): a
rename replaces a link, a FIFO or a socket at the name instead of writing
through it, and a folder, a device or an unwritable folder is said before
anything is computed.

Imports nothing of kernelmap but its errors: every layer uses it.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from pathlib import Path
from typing import IO, Any

from kernelmap.errors import BadInput, KernelmapError

_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)

# Every path `check_regular` is asked about in this process, in order, when
# recording (tests/test_cache_files.py plants FIFOs and link loops at each):
# the list of the files kernelmap reads comes from the code that reads them.
RECORDED: list[str] | None = None


class NotRegularFile(KernelmapError):
    """A file kernelmap reads or writes by name is a FIFO, a device, a socket, a folder or a link loop."""

    def __init__(self, path: str | os.PathLike, what: str, is_: str):
        self.path = str(path)
        super().__init__(f"{what} {self.path} is {is_}, not a regular file; remove it" if what else f"{self.path} is {is_}, not a regular file")


def kind_of(mode: int) -> str:
    """What a file of `mode` is, in words: `a FIFO`, `a folder`, ..."""
    for test, words in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                        (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return words
    return "no regular file"


def _record(path: str | os.PathLike) -> None:
    if RECORDED is not None:
        RECORDED.append(os.fspath(path))


def check_regular(path: str | os.PathLike, what: str = "") -> os.stat_result | None:
    """The stat of `path` when it is a regular file (a link to one is
    followed); None when nothing is there; NotRegularFile when it is
    anything else, a link loop included. Other errors (permissions) are
    the OSError they are."""
    _record(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise NotRegularFile(path, what, "a symbolic link loop") from None
        if e.errno == errno.ENOTDIR:  # a part of the path is a file: nothing is there
            return None
        raise
    if not stat.S_ISREG(st.st_mode):
        raise NotRegularFile(path, what, kind_of(st.st_mode))
    return st


def open_regular(path: str | os.PathLike, mode: str = "rb", what: str = "", encoding: str | None = None,
                 errors: str | None = None) -> IO[Any]:
    """`open(path, mode)` for reading, refusing at once what is no regular
    file: FileNotFoundError when absent, NotRegularFile for a FIFO, a
    device, a socket, a folder or a link loop."""
    if any(c in mode for c in "wax+"):
        raise ValueError(f"open_regular reads; mode {mode!r} writes")
    _record(path)
    try:
        fd = os.open(path, os.O_RDONLY | _NONBLOCK | _CLOEXEC)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise NotRegularFile(path, what, "a symbolic link loop") from None
        if e.errno == errno.ENXIO:  # a socket, or a FIFO in some systems
            raise NotRegularFile(path, what, "a socket or a FIFO") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFile(path, what, kind_of(st.st_mode))
        if _NONBLOCK:
            os.set_blocking(fd, True)
        return os.fdopen(fd, mode, encoding=encoding, errors=errors) if "b" not in mode else os.fdopen(fd, mode)
    except BaseException:
        os.close(fd)
        raise


def read_bytes(path: str | os.PathLike, what: str = "", limit: int | None = None) -> bytes:
    """The bytes of the regular file `path` (at most `limit`, when given)."""
    with open_regular(path, "rb", what) as f:
        return f.read() if limit is None else f.read(limit)


def read_text(path: str | os.PathLike, what: str = "", encoding: str = "utf-8", errors: str = "strict") -> str:
    """The text of the regular file `path`."""
    with open_regular(path, "r", what, encoding=encoding, errors=errors) as f:
        return f.read()


def connect(path: str | os.PathLike, what: str = "", *, readonly: bool = True, **options: Any):
    """A SQLite connection to the database file `path` (read-only unless
    told), refused at once when it is no regular file: SQLite would block
    on a FIFO. A missing file is FileNotFoundError when read-only."""
    import sqlite3

    if check_regular(path, what) is None and readonly:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), os.fspath(path))
    if readonly:
        return sqlite3.connect(f"{Path(path).absolute().as_uri()}?mode=ro", uri=True, **options)
    return sqlite3.connect(os.fspath(path), **options)


# ---------------------------------------------------------------------------
# Outputs the user names
# ---------------------------------------------------------------------------


def check_output(path: str | os.PathLike, option: str) -> Path:
    """`path` as a file kernelmap may write, checked before any work is
    done: a regular file or a link (either is replaced by the rename that
    writes it, a link never followed), or nothing yet; in a folder that
    exists and can be written. Anything else is one BadInput line: a
    folder, a FIFO, a device or a socket at the name, a name with a NUL,
    a folder that is missing, a file or a link loop, or unwritable."""
    text = os.fspath(path)
    if not text.strip():
        raise BadInput(f"{option} names no file: an empty path")
    if "\0" in text:
        raise BadInput(f"cannot write {option} {text[:200]!r}: a file name holds no NUL character")
    _record(text)
    try:
        mode = os.lstat(text).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as e:  # a name too long, a part of the path that is a file or a loop
        raise BadInput(f"cannot write {option} {text}: {_why(e)}") from None
    if mode is not None and not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
        raise BadInput(f"cannot write {option} {text}: it is {kind_of(mode)}, not a regular file")
    folder = os.path.dirname(os.path.abspath(text))
    try:
        st = os.stat(folder)
    except OSError as e:  # missing, a link loop, a part that is a file
        raise BadInput(f"cannot write {option} {text}: its folder {folder}: {_why(e)}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise BadInput(f"cannot write {option} {text}: {folder} is {kind_of(st.st_mode)}, not a folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise BadInput(f"cannot write {option} {text}: the folder {folder} is not writable")
    return Path(text)


def _why(e: OSError) -> str:
    return "a part of the path is a symbolic link loop" if e.errno == errno.ELOOP else (e.strerror or str(e)).lower()


def write_output(path: str | os.PathLike, data: str | bytes, option: str) -> Path:
    """Write `data` to `path` atomically: to a new file beside it, renamed
    over the name once complete (never half-written, never through a link).
    Checked first as `check_output` checks; an error is one BadInput line,
    and leaves nothing behind."""
    target = check_output(path, option)
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name[:100]}.", suffix=".part", dir=os.path.dirname(os.path.abspath(target)))
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, target)
        tmp = None
    except OSError as e:
        raise BadInput(f"cannot write {option} {os.fspath(path)}: {e.strerror or e}") from None
    finally:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
    return target


def write_pickle(path: Path, value: Any) -> None:
    """Pickle `value` to a cache file `path`: written aside (a name of this
    process), then renamed into place, so a reader never sees half of it."""
    import pickle

    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            pickle.dump(value, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
