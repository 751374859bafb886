"""Render a `GeneratedCode` for the terminal. By default, the first screen:
the generated layers a call passes, in the order it passes them (binding,
dispatcher entry, autograd wrapper, Register<Key> wrappers of the main
devices, ufunc kernels), one line each at its file:line, the rest of each
layer folded to a line with a count. In full (`--all`, or one `--layer`):
one section per layer, each piece headed by what it is and where, its lines
syntax-highlighted with the line numbers of the generated file. Reads only
the GeneratedCode."""

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


# The Register<Key> wrappers a first screen shows: the devices' and the composite
# kernels that serve every device; the rest (Meta, Sparse*, NestedTensor*, ...) are folded.
FIRST_KEYS = ("CPU", "CUDA", "CompositeImplicitAutograd", "CompositeExplicitAutograd", "CompositeExplicitAutogradNonFunctional")


def first_screen(code: GeneratedCode) -> list[tuple[str, str, str]]:
    """(prefix, text, location) rows of the first screen: each layer of
    `code.layers` a call passes, numbered in call order, its first pieces at
    their file:line, the rest folded to one row with a count (no location)."""
    from kernelmap.printable import printable

    steps: list[list[tuple[str, str]]] = []  # per layer: (text, location) rows; a fold has no location

    def fold(what: str, names: list[str]) -> tuple[str, str]:
        counts: dict[str, int] = {}
        for name in names:
            counts[name] = counts.get(name, 0) + 1
        listed = ", ".join(n + (f" x{c}" if c > 1 else "") for n, c in counts.items())
        return f"+ {len(names)} other {what if len(names) > 1 else what.removesuffix('s')}: {listed}", ""

    def registration(reg: Registration) -> tuple[str, str]:
        at = reg.definition.location if reg.definition is not None else reg.impl.location
        calls = f" -> {', '.join(reg.calls[:2])}{', ...' if len(reg.calls) > 2 else ''}" if reg.calls and reg.layer is Layer.REGISTER else ""
        node = f" (creates {reg.backward_node})" if reg.backward_node else ""
        return f"{reg.key}: {reg.symbol}{node}{calls}", str(at)

    for layer in (Layer.BINDING, Layer.OPS, Layer.AUTOGRAD, Layer.REGISTER, Layer.UFUNC):
        if layer not in code.layers:
            continue
        rows: list[tuple[str, str]] = []
        if layer is Layer.BINDING and code.bindings:
            first, *others = code.bindings
            rows.append((f"Python binding {first.function} ({', '.join(first.python_names) or 'no method-table entry'})",
                         str(first.definition.location)))
            if first.case is not None:
                rows.append((f"  case for {code.op}" + (f": calls {', '.join(first.calls)}" if first.calls else ""), str(first.case.location)))
            if others:
                rows.append(fold("bindings", [f"{b.function} ({', '.join(b.python_names)})" if b.python_names else b.function for b in others]))
        elif layer is Layer.OPS and code.ops:
            call = next((o for o in code.ops if o.symbol.endswith("::call")), code.ops[0])
            rows.append((f"dispatcher entry {call.symbol}", str(call.definition.location)))
            others = [o for o in code.ops if o is not call]
            if others:
                rows.append(fold("entry points", [o.symbol.rsplit("::", 1)[-1] for o in others]))
        elif layer is Layer.AUTOGRAD:
            regs = [r for r in code.registrations if r.layer is layer]
            shown = [r for r in regs if r.key == "Autograd" or r.key.startswith("Autograd")][:1] or regs[:1]
            rows.extend(registration(r) for r in shown)
            if code.backward is not None:
                rows.append(("  backward node", str(code.backward.location)))
            others = [r for r in regs if r not in shown]
            if others:
                rows.append(fold("wrappers", [f"{r.key}" for r in others]))
        elif layer is Layer.REGISTER:
            regs = [r for r in code.registrations if r.layer is layer]
            shown = sorted((r for r in regs if r.key in FIRST_KEYS), key=lambda r: FIRST_KEYS.index(r.key)) or regs[:1]
            rows.extend(registration(r) for r in shown)
            others = [r for r in regs if r not in shown]
            if others:
                rows.append(fold("keys", [r.key for r in others]))
        elif layer is Layer.UFUNC and code.ufunc:
            shown = []
            for key in dict.fromkeys(u.key for u in code.ufunc):  # each device's loop kernel (add_kernel), else its first piece
                pieces = [u for u in code.ufunc if u.key == key]
                shown.append(next((u for u in pieces if u.name.endswith("_kernel")), pieces[0]))
            rows.extend((f"ufunc {u.key}: {u.name}", str(u.definition.location)) for u in shown)
            others = [u for u in code.ufunc if u not in shown]
            if others:
                rows.append(fold("ufunc definitions", [f"{u.key}: {u.name}" for u in others]))
        if rows:
            steps.append(rows)
    digits = len(str(len(steps)))
    out: list[tuple[str, str, str]] = []
    for number, rows in enumerate(steps, 1):
        for k, (text, where) in enumerate(rows):
            out.append((f"{number:>{digits}}. " if k == 0 else " " * (digits + 2), printable(text), where))
    return out


def summary_text(code: GeneratedCode, width: int | None = None) -> str:
    """The first screen (`first_screen`) as plain text in `width` columns: a
    row and its location on one line where they fit, else the location on a
    line of its own below (kernelmap.render.tree.fit_whole)."""
    from kernelmap.printable import printable
    from kernelmap.render.tree import fit_whole

    def rows(prefix: str, text: str, where: str) -> list[str]:
        return fit_whole(prefix, text, where, width)

    out = [printable(f"{code.op}  (generated from {code.origin.label.removeprefix('generated from ')})")]
    if code.schema is not None:
        out.extend(rows("", "schema " + printable(_schema_text(code.schema)), str(code.schema.location)))
    for prefix, text, where in first_screen(code):
        out.extend(rows(prefix, text, where))
    out.extend(printable(f"note: {note}") for note in code.notes)
    out.append("(the layers a call passes; --all shows every piece with its code)")
    return "\n".join(out) + "\n"


def _schema_text(schema: Excerpt) -> str:
    """`add.Tensor(Tensor self, ...) -> Tensor` from its `m.def("...", tags)` line."""
    import re

    m = re.search(r'm\.def\(\s*"((?:[^"\\]|\\.)*)"', schema.text)
    return m.group(1) if m else schema.text.strip().splitlines()[0]


def to_text(code: GeneratedCode, width: int | None = None, color: bool | None = None, full: bool = False, **_: object) -> str:
    """The generated code as terminal text: the first screen (`summary_text`),
    or with `full` every piece with its code: colour only on a terminal;
    piped, whole lines of code (at least 200 columns) rather than 80."""
    import io
    import sys

    if not full:
        return summary_text(code, width)
    if color is None:
        color = sys.stdout.isatty()
    out = io.StringIO()
    console = Console(file=out, width=width or (None if color else 200), force_terminal=color, no_color=not color,
                      color_system="auto" if color else None, highlight=False, emoji=False)
    if not color and width is None:
        console = Console(file=out, width=200, no_color=True, color_system=None, highlight=False, emoji=False)
    render(code, code.layers, console)
    return "".join(line.rstrip() + "\n" for line in out.getvalue().splitlines())
