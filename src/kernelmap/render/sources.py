"""Render a `source list` answer (kernelmap.model.SourceList) as text: one
tab-separated line per tree."""

from __future__ import annotations

from typing import Any

from kernelmap.printable import printable
from kernelmap.printable import printable_line


def to_text(answer: Any, **_: Any) -> str:
    if not answer.trees:
        return "no source trees; add one with `kernelmap source add PATH` or `kernelmap source fetch`\n"
    lines = []
    for t in answer.trees:
        commit = t.commit[:12] if t.commit else "-"
        lines.append(f"{t.name}\t{t.version}\t{commit}\t{t.kind}\t{'indexed' if t.indexed else 'not indexed'}\t{printable_line(t.root)}")
    return "".join(printable(line) + "\n" for line in lines)
