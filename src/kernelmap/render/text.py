"""What every text renderer shares: making external strings safe for a
terminal, and the width to write at."""

from __future__ import annotations

import re
import shutil

# C0 and C1 control characters other than tab, and DEL: an escape sequence in a
# trace name or a file must not reach the terminal (window titles, clearing).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def clean(text: str) -> str:
    """`text` with control characters shown as `\\xNN` escapes."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def terminal_width(width: int | None, default: int = 120) -> int:
    """`width` when given, else the terminal's (COLUMNS), else `default`."""
    if width is not None:
        return width
    return shutil.get_terminal_size((default, 24)).columns
