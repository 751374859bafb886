"""Render a `path` answer (kernelmap.model.PathAnswer) as text: a heading with
how many routes lead from the source to the target, then the first route as
numbered steps, one line each (name, the condition on its edge, file:line:
the location is never cut), and each other route folded to one line saying
where it leaves the first (Note [the main path] in kernelmap.processors).
With `full`, every route as numbered steps (name and file:line, then its
kind, how it is reached and the condition on that edge) with the conditions
it needs listed once under its heading. Plain text: stable at a fixed width."""

from __future__ import annotations

from typing import Any

from kernelmap.model import Location, located, tags_versions
from kernelmap.printable import printable
from kernelmap.render.text import terminal_width
from kernelmap.render.tree import SCREEN_LINES


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(width - 3, 1)] + "..."


def _where(step: Any, versions: bool) -> str:
    """A step's location (with its version when the answer mixes versions: Note [versions on locations])."""
    where = located(step.location, versions)
    site = step.attrs.get("call_site")
    if not where and site is not None:
        where = f"called at {located(site, versions) if isinstance(site, Location) else site}"
    return where


def _versions(answer: Any) -> bool:
    return tags_versions((s.location for r in answer.routes for s in r.steps), getattr(answer, "torch_version", None))


def _step_line(number: int, step: Any, width: int, versions: bool = False) -> list[str]:
    """One step on one line: the name and condition shortened first, the location kept."""
    from kernelmap.render.tree import fit

    where = _where(step, versions)
    text = step.name + (f"  [{step.condition}]" if step.condition else "")
    if step.attrs.get("library"):
        text += f"  <{step.attrs['library']}{', closed' if step.attrs.get('closed') else ''}>"
    return fit(f"{number:>3}. ", text, where, width, sep="  ")


def _leaves_first(route: Any, first: Any) -> str:
    """Where `route` leaves `first`: its first step that differs, with the condition on its edge."""
    for i, step in enumerate(route.steps):
        if i >= len(first.steps) or step.name != first.steps[i].name:
            condition = step.condition
            if not condition and i and route.steps[i - 1].condition != first.steps[i - 1].condition:
                condition = route.steps[i - 1].condition  # the branch is taken on the step before
            return f"from step {i + 1}: {step.name}" + (f" [{condition}]" if condition else "")
    return "the same steps under other conditions"


def to_text(answer: Any, width: int | None = None, full: bool = False, **_: Any) -> str:
    width = terminal_width(width)
    if answer.routes and not full:
        return _main_route(answer, width)
    versions = _versions(answer)
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
            where = _where(step, versions)
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


def _main_route(answer: Any, width: int) -> str:
    out: list[str] = []
    count = len(answer.routes) + int(answer.searched.get("more") or 0)
    out.append(f"{answer.source} -> {answer.target} on {answer.device}: {count} route{'s' if count != 1 else ''}")
    for note in answer.notes:
        out.append(f"  note: {note}")
    first = answer.routes[0]
    out.append("")
    out.append(f"route 1: {len(first.steps)} steps")
    versions = _versions(answer)
    for i, step in enumerate(first.steps, 1):
        out.extend(_step_line(i, step, width, versions))
    others: dict[str, list[tuple[int, Any]]] = {}  # routes leaving the first at the same step, one line
    for number, route in enumerate(answer.routes[1:], 2):
        others.setdefault(_leaves_first(route, first), []).append((number, route))
    for leaves, group in others.items():
        numbers = [n for n, _ in group]
        low, high = min(len(r.steps) for _, r in group), max(len(r.steps) for _, r in group)
        named = f"route {numbers[0]}" if len(numbers) == 1 else f"routes {numbers[0]}-{numbers[-1]}" if numbers[-1] - numbers[0] == len(numbers) - 1 else "routes " + ", ".join(map(str, numbers))
        out.append(_cut(f"+ {named}: {low if low == high else f'{low}-{high}'} steps, {leaves}", width))
    more = int(answer.searched.get("more") or 0)
    if more:
        out.append(f"+ {more} more route{'s' if more != 1 else ''} (--limit)")
    out.append("(--all shows every route with its kinds, edges and conditions)")
    if len(out) > SCREEN_LINES:  # the first screen (Note [the first screen] in render.tree): the spacing goes first
        out.remove("")
    if len(out) > SCREEN_LINES and len(answer.routes) > 1:  # then the closing line, said on the other routes' line
        out[-2:] = [out[-2] + " (--all)" if len(out[-2]) + 8 <= width else _cut(out[-2], width - 8) + " (--all)"]
    heading = f"route 1: {len(first.steps)} steps"
    if len(out) > SCREEN_LINES and len(out[0]) + len(heading) + 2 <= width:  # then the route's heading joins the first line
        out.remove(heading)
        out[0] = f"{out[0]}; {heading}"
    return "".join(printable(line) + "\n" for line in out)
