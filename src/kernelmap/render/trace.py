"""Render a `trace` answer (kernelmap.trace.summary.TraceReport) as text: a
first screen that answers "what runs in my model" (`first_screen`), then the
per operator, module and file summaries (a tree can run to thousands of
lines), then the call tree (kernelmap.render.tree)."""

from __future__ import annotations

import re
from typing import Any

from kernelmap.printable import printable
from kernelmap.render import tree as tree_text
from kernelmap.render.text import terminal_width

SCREEN_OPS = 7  # operators on the first screen, each with KERNELS_PER_OP kernels
KERNELS_PER_OP = 2


def to_text(report: Any, *, width: int | None = None, color: bool | None = None, max_depth: int | None = None,
            min_us: float = 0.0, top: int = 25, **_: Any) -> str:
    parts = []
    if report.summary is not None:
        columns = max(120, terminal_width(width)) if width is None else width
        first = first_screen(report.summary, width)
        if first:
            parts.append(first)
        parts.append(printable(report.summary.to_text(top=top, width=columns)))
    if report.tree is not None:
        parts.append(tree_text.render(report.tree, width=width, color=color, max_depth=max_depth, min_us=min_us))
    return "\n".join(parts)


def first_screen(summary: Any, width: int | None = None) -> str:
    """The answer on the first screen: the operators that took the most time
    (GPU time where the trace has it, else their own host time), each with
    how long, the kernel that served it at its source (file:line), and the
    GPU kernels it launched with theirs, or the library they are in and
    whether its code is closed; the rest folded to one line. The tables
    below it hold every row."""
    from kernelmap import vendors
    from kernelmap.render.tree import fit, fit_whole

    gpu = summary.gpu.total_us > 0
    versions = bool(summary.versions)  # Note [versions in a trace] in kernelmap.trace.summary
    rows = [r for r in summary.ops if r.kernels] if gpu else [r for r in summary.ops if r.kernel or r.source]
    if not rows:
        return ""
    rows.sort(key=lambda r: -(r.device_us if gpu else r.self_us))
    out = []
    if gpu:
        g = summary.gpu
        pct = lambda us: f"{100 * g.fraction(us):.1f}%"  # noqa: E731
        out.append(_crop(f"GPU time {_ms(g.total_us)} ms, kernels of {len(rows)} operators: {pct(g.source_us)} at a source location, "
                         f"{pct(g.library_us)} in a library, {pct(g.unresolved_us)} unresolved", width))
    else:
        out.append(_crop(f"The {min(len(rows), SCREEN_OPS)} operators of {len(summary.ops)} with the most time of their own", width))

    def library(name: str | None, closed: bool | None = None) -> str:
        lib = vendors.library(name) if name else None
        if closed is None:
            closed = bool(lib and lib.closed)
        return f"{name} ({'closed' if closed else 'open'})" if name else ""

    for r in rows[:SCREEN_OPS]:
        calls = f"{r.calls} call{'s' if r.calls != 1 else ''}"
        when = f"{calls}, {_ms(r.device_us)} ms GPU" if gpu else f"{calls}, {_ms(r.self_us)} ms self"
        ends = f", ends in {library(r.library, r.closed)}" if r.library else ", ATen (open)"
        out.append(_crop(printable(f"{r.name}  {when}{ends}"), width))
        served = f"{r.kernel} ({r.dispatch_key})" if r.dispatch_key and r.kernel else (r.kernel or "kernel")
        out.extend(fit_whole("  ", printable(served), r.at(versions) or "", width))
        kernels = r.kernels.most_common()
        for name, launches in kernels[:KERNELS_PER_OP]:
            where = r.kernel_sources.get(name) or ""
            located = bool(re.search(r":\d+$", where))
            text = f"{launches}x " + ("" if located else f"[{library(where) or 'unresolved'}] ") + _kernel(name)
            out.extend(fit("    ", printable(text), r.kernel_at(name, versions) if located else "", width))
        if len(kernels) > KERNELS_PER_OP:
            rest = kernels[KERNELS_PER_OP:]
            places = sorted({r.kernel_sources.get(k) or "unresolved" for k, _ in rest if not re.search(r":\d+$", r.kernel_sources.get(k) or "")})
            located = sum(1 for k, _ in rest if re.search(r":\d+$", r.kernel_sources.get(k) or ""))
            said = ", ".join([f"{located} at a source location"] * bool(located) + places)
            out.append(_crop(f"    + {len(rest)} other kernels, {sum(n for _, n in rest)} launches ({said})", width))
    if len(rows) > SCREEN_OPS:
        more = rows[SCREEN_OPS:]
        spent = sum(r.device_us if gpu else r.self_us for r in more)
        out.append(_crop(f"+ {len(more)} other operators ({_ms(spent)} ms): " + ", ".join(r.name for r in more), width))
    out.append("(every operator, module and file in the tables below; --top N rows each)")
    return "\n".join(out) + "\n"


def _kernel(name: str) -> str:
    """A GPU kernel's name as a line shows it: no `void `, no anonymous namespaces."""
    return re.sub(r"^void ", "", name).replace("(anonymous namespace)::", "")


def _crop(text: str, width: int | None) -> str:
    return text if width is None or len(text) <= width else text[: width - 1] + "…"


def _ms(us: float) -> str:
    return f"{us / 1000:.3f}"
