"""Text from a trace file -> text safe to print on a terminal: control
characters (escape sequences that set a window title or clear the screen,
carriage returns, bells) become visible `\\x1b`-style escapes; newlines and
tabs in multi-line output are kept (`sanitize`), escaped in one-line fields
such as paths (`sanitize_line`)."""

from __future__ import annotations

import re

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")
_LINE_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")


def _escape(m: re.Match) -> str:
    c = ord(m.group(0))
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def sanitize(text: str) -> str:
    """`text` with every control character (and lone surrogate) escaped."""
    return _CONTROL.sub(_escape, text)


def sanitize_line(text: str) -> str:
    """`sanitize` for one line of output (a path, a tree's root): newlines and tabs are escaped too."""
    return _LINE_CONTROL.sub(_escape, text)
