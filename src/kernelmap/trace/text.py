"""Text from a trace file -> text safe to print on a terminal: control
characters (escape sequences that set a window title or clear the screen,
carriage returns, bells) become visible `\\x1b`-style escapes; newlines and
tabs in multi-line output are kept."""

from __future__ import annotations

import re

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")


def sanitize(text: str) -> str:
    """`text` with every control character (and lone surrogate) escaped."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group(0)):02x}" if ord(m.group(0)) < 0x100 else f"\\u{ord(m.group(0)):04x}", text)
