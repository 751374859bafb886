"""Render a `trace` answer (kernelmap.trace.summary.TraceReport) as text: the
per operator, module and file summaries first (a tree can run to thousands of
lines), then the call tree (kernelmap.render.tree)."""

from __future__ import annotations

from typing import Any

from kernelmap.render import tree as tree_text
from kernelmap.printable import printable
from kernelmap.render.text import terminal_width


def to_text(report: Any, *, width: int | None = None, color: bool | None = None, max_depth: int | None = None,
            min_us: float = 0.0, top: int = 25, **_: Any) -> str:
    parts = []
    if report.summary is not None:
        columns = max(120, terminal_width(width)) if width is None else width
        parts.append(printable(report.summary.to_text(top=top, width=columns)))
    if report.tree is not None:
        parts.append(tree_text.render(report.tree, width=width, color=color, max_depth=max_depth, min_us=min_us))
    return "\n".join(parts)
