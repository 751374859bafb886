"""What every text renderer shares: the width to write at (external strings
are made safe for a terminal by kernelmap.printable)."""

from __future__ import annotations

import shutil


def terminal_width(width: int | None, default: int = 120) -> int:
    """`width` when given, else the terminal's (COLUMNS), else `default`."""
    if width is not None:
        return width
    return shutil.get_terminal_size((default, 24)).columns
