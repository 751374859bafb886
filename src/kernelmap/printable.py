"""External text (trace names, file contents and paths, tree names, what the
user typed) made safe to print on a terminal: control characters (escape
sequences that set a window title or clear the screen, carriage returns,
bells), line and paragraph separators and lone surrogates become visible
`\\x1b`-style escapes. Newlines and tabs of multi-line output are kept
(`printable`); one-line fields escape them too (`printable_line`).

Imports nothing of kernelmap: every command, static ones included, uses it."""

from __future__ import annotations

import re

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")
_LINE_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")


def _escape(m: re.Match) -> str:
    c = ord(m.group(0))
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def printable(text: str) -> str:
    """`text` with every control character (and lone surrogate) escaped; newlines and tabs kept."""
    return _CONTROL.sub(_escape, text)


def printable_line(text: str) -> str:
    """`printable` for one line of output (a path, a tree's root): newlines and tabs are escaped too."""
    return _LINE_CONTROL.sub(_escape, text)
