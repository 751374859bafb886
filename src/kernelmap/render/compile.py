"""A `CompileAnswer` -> text: per graph, each generated kernel with the aten
ops it fused (grouped by the user line and decomposition behind them), its
place in Inductor's output code and its time; ATen kernels Inductor called
instead; then graph breaks and the time per fused op group. Reads only the
answer."""

from __future__ import annotations

import io

from rich.console import Console
from rich.text import Text

from kernelmap.compile.model import CompileAnswer, FileLine, GeneratedKernel


def _ms(us: float | None) -> str:
    return "" if us is None else f"  {us / 1000:.3f} ms"


def _output_code(answer: CompileAnswer, where: FileLine) -> str:
    """A line of Inductor's output code: its path, or, from a temporary folder
    since removed, only the file's name (no path to a file that is gone)."""
    if answer.kept or not where.path.startswith(answer.workdir.rstrip("/") + "/"):
        return str(where)
    return f"{where.path.rsplit('/', 1)[-1]}:{where.line}"


def _kernel_lines(answer: CompileAnswer, k: GeneratedKernel) -> list[tuple[int, str, str]]:
    """(indent, text, style) lines for one kernel."""
    where = (f"  {_output_code(answer, k.definition)}" if k.definition
             else (f"  called at {_output_code(answer, k.call)}" if k.call else ""))
    label = "generated" if k.generated else "ATen (extern kernel / fallback)"
    out = [(1, f"{k.name}  [{label}]{_ms(k.time_us)}{where}", "bold" if k.generated else "yellow")]
    out.append((2, "fuses: " + ", ".join(k.aten_ops) if k.generated else "runs: " + ", ".join(k.aten_ops), ""))
    groups: dict[tuple, list[str]] = {}
    for op in k.ops:
        d = op.decomposition
        key = (str(op.user) if op.user else "(no user line: made by an Inductor rewrite)", op.code or "", op.original if d else None, f"{d.function} at {d.location}" if d else None)
        groups.setdefault(key, []).append(op.node)
    for (user, code, original, decomp), nodes in groups.items():
        out.append((2, f"{user}  {code}", "cyan"))
        if decomp:
            out.append((3, f"{original} decomposed by {decomp}", "dim"))
    return out


def to_text(answer: CompileAnswer, width: int | None = None, color: bool | None = None, **_: object) -> str:
    buf = io.StringIO()
    console = Console(file=buf, width=width or 120, force_terminal=color if color is not None else False, no_color=color is False, highlight=False, soft_wrap=False)
    generated = [k for k in answer.kernels if k.generated]
    extern = [k for k in answer.kernels if not k.generated]
    console.print(Text(f"torch.compile (torch {answer.torch_version}): {len(answer.graphs)} graph(s), {len(generated)} generated kernel(s), {len(extern)} ATen call(s)"))
    for note in answer.notes:
        console.print(Text(note, style="yellow"), overflow="fold")
    if answer.kept:
        console.print(Text(f"Inductor output: {answer.workdir}", style="dim"))
    else:
        console.print(Text("Inductor output: a temporary folder, removed (--output-dir DIR keeps it)", style="dim"))
    for g in answer.graphs:
        output = g.output_code if answer.kept else "output_code.py"
        console.print(Text(f"graph {g.name}  {output}"))
        for k in g.kernels:
            for indent, text, style in _kernel_lines(answer, k):
                console.print(Text("  " * indent + text, style=style), overflow="fold")
    if answer.graph_breaks:
        console.print(Text(f"graph breaks: {len(answer.graph_breaks)}"))
        for b in answer.graph_breaks:
            console.print(Text(f"  {b.user}  {b.reason}", style="red"), overflow="fold")
    groups = answer.group_times()
    if groups:
        console.print(Text("time per fused op group:"))
        for ops, us in sorted(groups.items(), key=lambda kv: -kv[1]):
            console.print(Text(f"  {us / 1000:9.3f} ms  {' + '.join(ops)}"), overflow="fold")
    if answer.error:
        console.print(Text(f"the code raised: {answer.error}", style="red"))
    return buf.getvalue()
