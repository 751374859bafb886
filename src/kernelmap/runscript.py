"""The user's code run inside a kernelmap command (`trace`, `compile`), kept
apart from kernelmap's own output: what the code writes to standard output
goes to standard error, so kernelmap's standard output holds only its answer
(`kernelmap trace script.py --json > t.json` is JSON even when the script
prints); and whatever folder the code changes to, kernelmap's paths stay
where the user named them.

Note [user code and kernelmap's output]
The redirection is of file descriptor 1 itself (dup2 of stderr onto it), so
a C or C++ extension's printf, a subprocess the code starts and Python's
print all land on standard error; the real standard output is saved before
the code runs and put back after, with Python's and C's buffers flushed on
both sides of the switch so that nothing written before or during the run
crosses over. sys.stdout and sys.stderr are put back too, should the code
have replaced them. Paths a command writes (--html, --export-chrome,
--output-dir) are made absolute before the code runs (`absolute`), and the
working directory the code may change (os.chdir) is restored after it, so
relative paths kernelmap reads afterwards (--source) mean what they meant.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
from collections.abc import Iterator

__all__ = ["user_code", "absolute"]


def absolute(path: str | os.PathLike | None) -> str | None:
    """`path` made absolute against the current folder, now (None stays None;
    an empty path stays empty, for the option's own check to refuse)."""
    if path is None or not str(path):
        return None if path is None else str(path)
    return os.path.abspath(os.fspath(path))


def _flush_c_stdio() -> None:
    """Flush every C stdio stream of the process (fflush(NULL))."""
    try:
        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError):  # no C library to ask (an unusual embedding): Python's own flush is all there is
        pass


def _flush_python() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a stream the code closed or replaced by something without flush
            stream.flush()


@contextlib.contextmanager
def user_code() -> Iterator[None]:
    """Run the block as the user's code (Note [user code and kernelmap's output])."""
    cwd = os.getcwd()
    streams = sys.stdout, sys.stderr
    _flush_python()
    _flush_c_stdio()
    try:
        saved = os.dup(1)
    except OSError:  # no standard output to protect (closed): only the folder is kept
        saved = None
    if saved is not None:
        try:
            os.dup2(2, 1)
        except OSError:  # no standard error to send it to: the code's output stays where it was
            os.close(saved)
            saved = None
    try:
        yield
    finally:
        _flush_python()
        _flush_c_stdio()
        if saved is not None:
            os.dup2(saved, 1)
            os.close(saved)
        sys.stdout, sys.stderr = streams
        with contextlib.suppress(OSError):  # the folder itself was removed by the code: stay where it left us
            os.chdir(cwd)

