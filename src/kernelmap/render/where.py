"""Render a `where` answer (kernelmap.model.WhereAnswer) as text for a
terminal (rich; uncoloured text is drawn alike by kernelmap.render.plain,
which spares a cold `where` rich's import). Its JSON document, `where/2`, is the answer's own
`to_json()` (kernelmap.answers describes every document)."""

from __future__ import annotations

import io

from kernelmap.model import Location, Op, located, tags_versions


def _flags(op: Op) -> str:
    flags = [op.kind.value]
    flags += [name for name, on in (("view", op.is_view), ("in-place", op.is_inplace), ("out=", op.is_out)) if on]
    return ", ".join(flags)


def _folded(word: str, names: list[str]) -> str:
    return f"+ {len(names)} other {word}{'s' if len(names) != 1 else ''}: {', '.join(names)}"


def to_text(answer, width: int | None = None, color: bool | None = None, links: bool = True, full: bool = False, **_: object) -> str:
    """The answer as terminal text. `color=None` colours only a terminal;
    `color=False` with a fixed `width` gives stable text for tests. The
    live registrations of keys the dispatch path does not pass are folded to
    one line unless `full`; every leaf after the first (the main path's:
    graph.ends ranks them) is shown under it as where the call ends instead,
    with the condition that picks it."""
    if color is None:
        import sys

        color = sys.stdout.isatty()
    if not color:  # drawn as rich draws it, without importing rich (kernelmap.render.plain), unless rich would draw it otherwise
        from kernelmap.render import plain

        out = io.StringIO()
        try:
            _draw(answer, plain.Console(file=out, width=width or 120), plain.Table, plain.Text, links, full)
            return "".join(line.rstrip() + "\n" for line in out.getvalue().splitlines())
        except plain.NotPlain:
            pass
    return _rich_text(answer, width, color, links, full)


def _rich_text(answer, width: int | None, color: bool, links: bool, full: bool) -> str:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    out = io.StringIO()
    console = Console(
        file=out,
        width=width or (None if color else 120),
        force_terminal=color,
        no_color=not color,
        color_system="auto" if color else None,
        highlight=False,
        emoji=False,
    )
    _draw(answer, console, Table, Text, links, full)
    return "".join(line.rstrip() + "\n" for line in out.getvalue().splitlines())


def _draw(answer, console, Table, Text, links: bool, full: bool) -> None:
    """Print the answer on `console`, with rich's `Table` and `Text` or kernelmap.render.plain's."""
    versions = tags_versions(answer.locations(), answer.torch_version)  # Note [versions on locations]

    def where_text(location: Location | None):
        if location is None:
            return Text("-", style="dim")
        text = Text(located(location, versions), style="cyan")
        if links and location.url:
            text.stylize(f"link {location.url}")
        return text

    def section(title: str) -> None:
        console.print()
        console.print(Text(title, style="bold"))

    for note in answer.notes:
        console.print(Text(f"note: {note}", style="yellow"))
    op = answer.op
    console.print(Text.assemble((str(op.name), "bold green"), "  ", (_flags(op), "magenta")))
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="dim", no_wrap=True)
    grid.add_column(overflow="fold")
    grid.add_row("schema", op.schema)
    grid.add_row("yaml", where_text(op.location))
    if op.structured_delegate:
        grid.add_row("delegate", f"aten::{op.structured_delegate} (its structured kernel runs this operator)")
    if op.ufunc_inner_loop:
        grid.add_row("ufunc", "; ".join(f"{k}: {v}" for k, v in op.ufunc_inner_loop))
    grid.add_row("python", ", ".join(op.python_entry_points) or "(no Python binding)")
    if op.tags:
        grid.add_row("tags", ", ".join(op.tags))
    if op.autograd is not None:
        grid.add_row("autograd", Text.assemble(f"{op.autograd.backward_node or 'not differentiable'}  ", where_text(op.autograd.location)))
    elif op.kind.value == "composite implicit":
        grid.add_row("autograd", "through its decomposition (composite implicit: no backward node of its own)")
    else:
        grid.add_row("autograd", "no derivatives.yaml entry")
    console.print(grid)

    section("kernels (native_functions.yaml)")
    kernels = Table.grid(padding=(0, 2))
    kernels.add_column(no_wrap=True)
    kernels.add_column(overflow="fold")
    rows = list(op.dispatch)
    if answer.delegate is not None:
        rows += [k for k in answer.delegate.dispatch if op.kernel_for(k.key) is None]
    for k in rows:
        via = "" if k in op.dispatch else f"  (via {answer.delegate.name.unqualified})"
        kind = " structured" if k.structured else ""
        kernels.add_row(k.key, Text.assemble((k.symbol, "green"), kind, via))
    if not rows:
        kernels.add_row("-", "no kernel in the yaml")
    console.print(kernels)
    if answer.delegate is not None and answer.delegate.ufunc_inner_loop:
        console.print(Text(f"  {answer.delegate.name}'s CPU/CUDA kernels are generated from ufunc_inner_loop: "
                           + "; ".join(f"{k}: {v}" for k, v in answer.delegate.ufunc_inner_loop)))

    if answer.live is not None:
        path = answer.live.path
        section(f"live registrations (torch {answer.torch_version})")
        regs = Table.grid(padding=(0, 2))
        regs.add_column(no_wrap=True)
        regs.add_column(no_wrap=True, style="dim")
        regs.add_column(overflow="fold")
        passed = {step.key for step in path.steps} | {step.kernel.key for step in path.steps if step.kernel is not None}
        served = {str(step.kernel.location) for step in path.steps if step.kernel is not None and step.kernel.location is not None}
        off_path = [k for k in answer.live.registrations
                    if k.key not in passed and (k.location is None or str(k.location) not in served)] if not full else []
        for k in answer.live.registrations:
            if k not in off_path:
                regs.add_row(k.key, k.kind, Text.assemble((f"{k.symbol}  ", "green") if k.symbol else "", where_text(k.location)))
        console.print(regs)
        if off_path:
            console.print(Text(_folded("key", [k.key for k in off_path]) + " (--all)", style="dim"), overflow="ellipsis", no_wrap=True)

        grad = ", requires_grad" if path.requires_grad else ""
        extra = "".join([", autocast" if path.autocast else "", ", inference_mode" if path.inference_mode else ""])
        section(f"dispatch path ({path.device}, {path.dtype}{grad}{extra})")
        steps = Table.grid(padding=(0, 2))
        steps.add_column(no_wrap=True)
        steps.add_column(no_wrap=True, style="magenta")
        steps.add_column(overflow="fold")
        for n, step in enumerate(path.steps, 1):
            k = step.kernel
            what = Text()
            if k is not None:
                if k.symbol:
                    what.append(k.symbol, style="green")
                    what.append("  ")
                what.append_text(where_text(k.location))
            steps.add_row(f"{n}. {step.key}", step.action, what)
        console.print(steps)

    if answer.source:
        section(f"source ({answer.source[0].location.origin.label if answer.source[0].location and answer.source[0].location.origin else 'tree'})")
        src = Table.grid(padding=(0, 2))
        src.add_column(no_wrap=True)
        src.add_column(overflow="fold")
        leaves = [step for step in answer.source if step.role == "leaf"]
        # the leaves after the first are where the call ends instead (Note [alternatives of a step]):
        # each under the first, with the condition that picks it, unless `full` lists them all alike
        folded = leaves[1:] if not full else []
        for step in answer.source:
            if step not in folded:
                src.add_row(step.role, Text.assemble((step.name, "green"), "  ", where_text(step.location), f"  {step.detail}" if step.detail else ""))
            if leaves and step is leaves[0]:
                for other in folded:
                    src.add_row("  + or", Text.assemble((other.name, "green"), "  ", where_text(other.location),
                                                        f"  {other.detail}" if other.detail else "  (no condition recorded)"))
        console.print(src)

    if answer.overrides:
        section("torch._native overrides (run instead of ATen's kernel when their condition holds)")
        for o in answer.overrides:
            state = "" if o.registered is None else ("  registered" if o.registered else "  not registered in this process")
            console.print(Text(f"{o.dispatch_key}  {o.dsl} override{state}", style="magenta"))
            ov = Table.grid(padding=(0, 2))
            ov.add_column(no_wrap=True, style="dim")
            ov.add_column(overflow="fold")
            ov.add_row("  condition", Text.assemble((o.condition.name, "green"), "  ", where_text(o.condition.location)))
            if o.condition_text:
                ov.add_row("", o.condition_text)
            ov.add_row("  implementation", Text.assemble((o.implementation.name, "green"), "  ", where_text(o.implementation.location)))
            for k in o.kernels:
                ov.add_row("  kernel", Text.assemble((k.name, "green"), "  ", where_text(k.location)))
            ov.add_row("  ATen runs", o.aten_runs_when)
            console.print(ov)

    if len(answer.ops) > 1:
        console.print()
        console.print(Text("also: " + ", ".join(str(o.name) for o in answer.ops[1:]), style="dim"))
