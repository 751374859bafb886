"""Render a `path` answer (kernelmap.model.PathAnswer) as text: a heading with
how many routes lead from the source to the target, then each route as
numbered steps (name and file:line, then its kind, how it is reached and the
condition on that edge) with the conditions it needs listed once under its
heading. Plain text: stable at a fixed width."""

from __future__ import annotations

from typing import Any

from kernelmap.printable import printable
from kernelmap.render.text import terminal_width


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(width - 3, 1)] + "..."


def to_text(answer: Any, width: int | None = None, **_: Any) -> str:
    width = terminal_width(width)
    out: list[str] = []
    count = len(answer.routes) + int(answer.searched.get("more") or 0)
    heading = f"{answer.source} -> {answer.target} on {answer.device}: "
    if not answer.routes:
        heading += "no route"
        searched = answer.searched
        detail = f"searched {searched.get('nodes', '?')} calls to depth {searched.get('depth', '?')}"
        out.append(heading)
        out.append(f"  {answer.target} is not reached from {answer.source} on {answer.device} ({detail})")
    else:
        shown = f" (the {len(answer.routes)} shortest shown)" if count > len(answer.routes) else ""
        out.append(heading + f"{count} route{'s' if count != 1 else ''}{shown}")
    for note in answer.notes:
        out.append(f"  note: {note}")
    for number, route in enumerate(answer.routes, 1):
        out.append("")
        out.append(f"route {number}: {len(route.steps)} steps")
        for condition in route.conditions:
            out.append(_cut(f"  when {condition}", width))
        for i, step in enumerate(route.steps, 1):
            where = str(step.location) if step.location is not None else ""
            site = step.attrs.get("call_site")
            if not where and site is not None:
                where = f"called at {site}"
            head = f"{i:>3}. {step.name}"
            if where and len(head) + 2 + len(where) > width:  # a location is never cut: it goes on a line of its own
                out.extend((head, f"       {where}"))
            else:
                out.append(head + (f"  {where}" if where else ""))
            kind = step.kind.value
            if step.attrs.get("library"):
                kind += f" <{step.attrs['library']}{', closed' if step.attrs.get('closed') else ''}>"
            how = f"via {step.via.value}" if step.via is not None else "start"
            seen = f" ({step.attrs['observed']})" if step.attrs.get("observed") else ""  # --observe
            out.append(_cut(f"       {kind}, {how}" + (f" [{step.condition}]" if step.condition else "") + seen, width))
    return "".join(printable(line) + "\n" for line in out)
