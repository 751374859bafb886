"""Render an `Explanation` (kernelmap explain) for a terminal: numbered steps
with their code, syntax-highlighted in colour. Its JSON document, `explain/2`,
is the answer's own `to_json()`."""

from __future__ import annotations

import io
import sys


def to_text(result, width: int | None = None, color: bool | None = None, **_: object) -> str:
    from rich.console import Console
    from rich.syntax import Syntax
    from rich.text import Text

    if color is None:
        color = sys.stdout.isatty()
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
            console.print(Text(f"   {step.location}", style="cyan"))
        if step.excerpt:
            if color:
                console.print(Syntax(step.excerpt, step.language, line_numbers=False, word_wrap=False, padding=(0, 3)))
            else:
                for line in step.excerpt.splitlines():
                    console.print(Text("   " + line), overflow="ignore", crop=False, no_wrap=True)
    return "".join(line.rstrip() + "\n" for line in out.getvalue().splitlines())
