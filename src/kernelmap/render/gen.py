"""Render a `GeneratedCode` for the terminal: one section per layer, each
piece headed by what it is and where, its lines syntax-highlighted with the
line numbers of the generated file. Reads only the GeneratedCode."""

from __future__ import annotations

from collections.abc import Iterable

from rich.console import Console, Group, RenderableType
from rich.syntax import Syntax
from rich.text import Text

from kernelmap.codegen.sites import Excerpt, GeneratedCode, Layer, Registration

LAYER_TITLES = {
    Layer.BINDING: "Python binding",
    Layer.OPS: "at::_ops entry points",
    Layer.AUTOGRAD: "autograd, tracing and ADInplaceOrView wrappers",
    Layer.REGISTER: "Register<Key> wrappers",
    Layer.UFUNC: "ufunc kernels",
}


def _code(excerpt: Excerpt, theme: str) -> Syntax:
    lexer = "cuda" if excerpt.location.path.endswith(".cu") else "cpp"
    return Syntax(excerpt.text, lexer, theme=theme, line_numbers=True, start_line=excerpt.location.line, word_wrap=False)


def _head(text: str, where: object) -> Text:
    line = Text(text, style="bold")
    line.append(f"  {where}", style="dim")
    return line


def _registration(reg: Registration, theme: str) -> Iterable[RenderableType]:
    what = f"{reg.key}: {reg.symbol}"
    if reg.backward_node:
        what += f" (creates {reg.backward_node})"
    yield _head(what, f"registered in the block at {reg.block}")
    if reg.calls:
        yield Text(f"  calls {', '.join(reg.calls)}")
    yield _code(reg.impl, theme)
    if reg.definition is not None:
        yield _code(reg.definition, theme)
    for cls in reg.structured:
        yield _head(f"  structured class {cls.name}" + (f" : {cls.base}" if cls.base else ""), cls.definition.location)
        yield _code(cls.definition, theme)


def renderables(code: GeneratedCode, layers: Iterable[Layer], theme: str = "ansi_dark") -> Iterable[RenderableType]:
    layers = tuple(layers)
    yield Text(f"{code.op}  (generated from {code.origin.label.removeprefix('generated from ')})", style="bold underline")
    if code.origin.root:
        yield Text(f"files in {code.origin.root}", style="dim")
    if code.schema is not None:
        yield _head("schema", code.schema.location)
        yield _code(code.schema, theme)
    for layer in layers:
        yield Text("")
        yield Text(f"── {LAYER_TITLES[layer]} ──", style="bold cyan")
        if layer is Layer.BINDING:
            for b in code.bindings:
                yield _head(f"{b.function} ({', '.join(b.python_names) or 'no method-table entry'})", b.definition.location)
                for sig in b.signatures:
                    marker = "→ " if sig == b.signature else "  "
                    yield Text(f"  {marker}{sig}")
                for entry in b.method_defs:
                    yield _code(entry, theme)
                if b.case is not None:
                    yield _head(f"  case for {code.op}" + (f", calls {', '.join(b.calls)}" if b.calls else ""), b.case.location)
                    yield _code(b.case, theme)
        elif layer is Layer.OPS:
            for o in code.ops:
                yield _head(o.symbol, o.definition.location)
                yield _code(o.definition, theme)
        elif layer is Layer.UFUNC:
            for u in code.ufunc:
                yield _head(f"{u.key}: {u.name}", u.definition.location)
                yield _code(u.definition, theme)
        else:
            for reg in code.registrations:
                if reg.layer is layer:
                    yield from _registration(reg, theme)
            if layer is Layer.AUTOGRAD and code.backward is not None:
                yield _head("backward node", code.backward.location)
                yield _code(code.backward, theme)
    if code.notes:
        yield Text("")
        for note in code.notes:
            yield Text(f"note: {note}", style="yellow")


def render(code: GeneratedCode, layers: Iterable[Layer], console: Console) -> None:
    console.print(Group(*renderables(code, layers)))


def to_text(code: GeneratedCode, width: int | None = None, color: bool | None = None, **_: object) -> str:
    """The generated code as terminal text: colour only on a terminal; piped,
    whole lines of code (at least 200 columns) rather than 80."""
    import io
    import sys

    if color is None:
        color = sys.stdout.isatty()
    out = io.StringIO()
    console = Console(file=out, width=width or (None if color else 200), force_terminal=color, no_color=not color,
                      color_system="auto" if color else None, highlight=False, emoji=False)
    if not color and width is None:
        console = Console(file=out, width=200, no_color=True, color_system=None, highlight=False, emoji=False)
    render(code, code.layers, console)
    return "".join(line.rstrip() + "\n" for line in out.getvalue().splitlines())
