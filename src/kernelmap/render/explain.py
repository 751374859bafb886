"""Render an `Explanation` (kernelmap explain) for a terminal: numbered steps,
each its title and file:line on one line (the location never cut) and what
it does on the next; with `full`, each with its code too, syntax-highlighted
in colour. Its JSON document, `explain/2`, is the answer's own `to_json()`."""

from __future__ import annotations

import io
import sys

from kernelmap.model import located, tags_versions


def to_text(result, width: int | None = None, color: bool | None = None, full: bool = False, **_: object) -> str:
    if not full:
        return _steps(result, width)
    from rich.console import Console
    from rich.syntax import Syntax
    from rich.text import Text

    if color is None:
        color = sys.stdout.isatty()
    versions = tags_versions((s.location for s in result.steps), getattr(result, "torch_version", None))
    out = io.StringIO()
    console = Console(file=out, width=width or (None if color else 120), force_terminal=color, no_color=not color,
                      color_system="auto" if color else None, highlight=False, emoji=False)
    for note in result.notes:
        console.print(Text(f"note: {note}", style="yellow"))
    console.print(Text(f"{result.op} on {result.device}, {result.dtype}", style="bold green"))
    for n, step in enumerate(result.steps, 1):
        console.print()
        head = Text.assemble((f"{n}. {step.title}", "bold"), "  ", step.summary)
        console.print(head)
        if step.location is not None:
            console.print(Text(f"   {located(step.location, versions)}", style="cyan"))
        if step.excerpt:
            if color:
                console.print(Syntax(step.excerpt, step.language, line_numbers=False, word_wrap=False, padding=(0, 3)))
            else:
                for line in step.excerpt.splitlines():
                    console.print(Text("   " + line), overflow="ignore", crop=False, no_wrap=True)
        for text, where in alternative_lines(step, versions):
            console.print(Text.assemble(("   " + text, "dim"), ("  " + where if where else "", "cyan")))
    return "".join(line.rstrip() + "\n" for line in out.getvalue().splitlines())


def _steps(result, width: int | None) -> str:
    """The steps without their code: one screen for a whole call."""
    from kernelmap.printable import printable
    from kernelmap.render.tree import _crop, fit

    out = [printable(f"note: {note}") for note in result.notes]
    out.append(printable(f"{result.op} on {result.device}, {result.dtype}"))
    digits = len(str(len(result.steps)))
    versions = tags_versions((s.location for s in result.steps), getattr(result, "torch_version", None))  # Note [versions on locations]
    for n, step in enumerate(result.steps, 1):
        where = printable(located(step.location, versions))
        out.extend(fit(f"{n:>{digits}}. ", printable(step.title), where, width, sep="  "))
        out.append(_crop(" " * (digits + 2) + printable(step.summary), width))
        for text, alternative in alternative_lines(step, versions):
            out.extend(fit(" " * (digits + 2), text, alternative, width, sep="  "))
    out.append("(--all shows each step's code)")
    return "\n".join(out) + "\n"


def alternative_lines(step, versions: bool = False) -> list[tuple[str, str]]:
    """(text, location) of each alternative of a step (Note [alternatives of a
    step]): `+ or unrolled_elementwise_kernel [case 1]`, what runs instead and
    the condition that picks it, with why the call never takes it when known."""
    lines = []
    for a in step.alternatives:
        name = a.name.rsplit("::", 1)[-1] if "(" not in a.name else a.name  # at::native::launch_legacy_kernel reads as launch_legacy_kernel
        # the note first: a line too wide is cut at its end, and the condition may be long
        text = f"+ or {name}" + (f": {a.note}" if a.note else "") + (f" [{a.condition}]" if a.condition else "")
        lines.append((text, located(a.location, versions)))
    return lines
