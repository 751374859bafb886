"""Render an `impact` answer (kernelmap.impact.model.ImpactAnswer) as text:
what was edited, how many units rebuild (by kind and CPU capability), the
libraries, the estimated time with its model and error, the advice, the
operators, the costliest units, then the notes. Plain text: stable at a
fixed width. Its JSON document, `impact/1`, is the answer's own `to_json()`."""

from __future__ import annotations

from typing import Any

from kernelmap.printable import printable
from kernelmap.render.text import terminal_width

SHOWN_UNITS = 15
SHOWN_OPERATORS = 12


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(width - 3, 1)] + "..."


def to_text(answer: Any, width: int | None = None, **_: Any) -> str:
    width = terminal_width(width)
    out: list[str] = []
    out.append(f"impact of {answer.query} on {answer.device} ({answer.tree.label}, {answer.tree.version})")
    for e in answer.edited[:8]:
        where = str(e.location) if e.location is not None else e.path
        out.append(f"  edits {where}  ({e.reason})")
    if len(answer.edited) > 8:
        out.append(f"  ... and {len(answer.edited) - 8} more files (--json lists them)")
    counts = answer.counts()
    units = answer.units
    kinds = [f"{counts[k]} {label}" for k, label in (("cpp", ".cpp"), ("cu", ".cu"), ("capability", "CPU-capability copies")) if counts.get(k)]
    capabilities = [f"{k.split(' ', 1)[1]} {v}" for k, v in sorted(counts.items()) if k.startswith("capability ")]
    line = f"rebuilds {_plural(len(units), 'unit')}"
    if kinds:
        line += ": " + ", ".join(kinds)
    if capabilities:
        line += f" ({', '.join(capabilities)})"
    if answer.maybe:
        line += f"; {answer.maybe} maybe"
    out.append("")
    out.append(line)
    if units:
        out.append(_cut("libraries: " + ", ".join(f"{lib} {n}" for lib, n in answer.libraries().items()), width))
        est = answer.estimate
        out.append(f"estimated: {est.cpu_seconds:,.0f} CPU-seconds, about {_duration(est.wall_seconds)} on {_plural(est.jobs, 'parallel job')}")
        out.append(f"  model: {est.model}")
        out.append(f"  error: {est.error}")
    if answer.advice:
        out.append("")
        out.append("cheaper:")
        for a in answer.advice:
            out.append(f"  {a.summary}")
            where = str(a.location) if a.location is not None else a.path
            out.append(f"    {where}: {_plural(a.units, 'unit')}, {a.cpu_seconds:,.0f} CPU-seconds")
    if answer.operators:
        out.append("")
        shown = ", ".join(answer.operators[:SHOWN_OPERATORS])
        more = f", ... ({len(answer.operators) - SHOWN_OPERATORS} more)" if len(answer.operators) > SHOWN_OPERATORS else ""
        out.append(f"operators whose code they hold: {len(answer.operators)}")
        out.append(_cut(f"  {shown}{more}", width))
    if units:
        out.append("")
        costly = sorted(units, key=lambda u: (-u.seconds, u.name))[:SHOWN_UNITS]
        out.append("costliest units:" if len(units) > SHOWN_UNITS else "units:")
        for u in costly:
            kind = {"cpp": ".cpp", "cu": ".cu"}.get(u.kind, u.capability or u.kind)
            tail = f"  [{kind}, {u.library}{', maybe' if u.maybe else ''}]"
            head = f"  {u.seconds:6.1f} s  {u.path}"
            if len(head) + len(tail) > width:  # a path is never cut: the rest goes on its own line
                out.extend((head, f"           {tail.strip()}"))
            else:
                out.append(head + tail)
        if len(units) > SHOWN_UNITS:
            out.append(f"  ... and {len(units) - SHOWN_UNITS} more (--json lists them all)")
    if answer.third_party:
        out.append("")
        out.append(_cut("third-party headers it includes (named, not followed): " + ", ".join(answer.third_party), width))
    for note in answer.notes:
        out.append(f"note: {note}")
    return "".join(printable(line) + "\n" for line in out)
