"""Render a `diff` answer (kernelmap.diff.OpDiff) as text: one block per
section (yaml, kernels, stubs, wrappers, nodes), one line per change, each
side's location after it. Parts that are the same on both sides are counted,
not listed. Its JSON document, `diff/1`, is the answer's own `to_json()`."""

from __future__ import annotations

from typing import Any

from kernelmap.printable import printable

_TITLES = {"yaml": "yaml entry", "kernel": "kernels", "stub": "stubs and registrations", "wrapper": "generated wrappers", "node": "call tree nodes"}
_MARK = {"added": "+", "removed": "-", "changed": "~", "moved": ">", "renamed": "~", "same": "="}


def _where(location) -> str:
    return str(location) if location is not None else "-"


def to_text(answer: Any, width: int | None = None, **_: Any) -> str:
    lines = [f"{answer.op}: {answer.before.label} ({answer.before.version}) -> {answer.after.label} ({answer.after.version}), device {answer.device}"]
    lines += [f"note: {n}" for n in answer.notes]
    for section, title in _TITLES.items():
        changes = answer.section(section)
        if not changes:
            continue
        same = sum(1 for c in changes if c.change == "same")
        lines.append("")
        lines.append(f"{title}" + (f"  ({same} unchanged)" if same else ""))
        for c in changes:
            if c.change == "same":
                continue
            if section in ("kernel", "node"):
                value = ""  # the name says it; the locations follow
            elif c.before is not None and c.after is not None:
                value = f"{c.before}  =>  {c.after}"
            else:
                value = c.before if c.after is None else c.after
            head = f"{_MARK[c.change]} {c.change:<8} {c.name}" + (f": {value}" if value else "")
            lines.append(head)
            sides = f"    {_where(c.old)}  =>  {_where(c.new)}"
            if c.detail:
                sides += f"  ({c.detail})"
            lines.append(sides)
    text = "\n".join(printable(line) for line in lines)
    if width:
        text = "\n".join(_fold(line, width) for line in text.split("\n"))
    return text + "\n"


def _fold(line: str, width: int) -> str:
    """A long line cut at `width` columns, continued indented."""
    if len(line) <= width:
        return line
    out, rest = [line[:width]], line[width:]
    while rest:
        out.append("      " + rest[: width - 6])
        rest = rest[width - 6 :]
    return "\n".join(out)
