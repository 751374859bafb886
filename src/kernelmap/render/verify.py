"""Render a `VerifyReport` (kernelmap verify) as text: what was compared, a
table per overridden operator (calls routed, its own error and time on the
calls it got, backward re-runs of the original, the operators that ran instead
of one that got no calls), the whole model's differences and times, forward
and backward apart, and the verdict. The JSON form is the report's own
`to_json()` (`"kernelmap": "verify/1"`).
"""

from __future__ import annotations

import io
import sys

__all__ = ["to_text"]


def _tol(report) -> str:
    if report.rtol is None and report.atol is None:
        return "rtol, atol: torch.testing.assert_close's defaults per dtype"
    rtol = "per dtype" if report.rtol is None else f"{report.rtol:g}"
    atol = "per dtype" if report.atol is None else f"{report.atol:g}"
    return f"rtol {rtol}, atol {atol}"


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.3f}"


def _ratio(mine: float | None, theirs: float | None) -> str:
    return f"{mine / theirs:.2f}x" if mine is not None and theirs else "-"


def _diff_line(label: str, d) -> str:
    verdict = "identical" if d.identical else ("within tolerance" if d.within else f"OUTSIDE tolerance ({d.outside})")
    worst = f", worst {d.worst}" if d.worst else ""
    return f"{label:10s} max abs {d.max_abs:.3e}  max rel {d.max_rel:.3e}  over {d.count} tensor(s){worst}: {verdict}"


def to_text(report, width: int | None = None, color: bool | None = None, **_: object) -> str:
    from rich.console import Console
    from rich.table import Table

    if color is None:
        color = sys.stdout.isatty()
    out = io.StringIO()
    console = Console(file=out, width=width or 120, color_system="standard" if color else None, no_color=not color,
                      highlight=False, soft_wrap=False)
    console.print(f"model      {report.model}", markup=False)
    console.print(f"tolerance  {_tol(report)}", markup=False)

    table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold" if color else "")
    for name, justify in (("override", "left"), ("calls/run", "right"), ("max abs", "right"), ("max rel", "right"),
                          ("verdict", "left"), ("original ms", "right"), ("override ms", "right"), ("ratio", "right")):
        table.add_column(name, justify=justify, no_wrap=True)
    notes = []
    for o in report.ops:
        extra = "".join(f" {k}={v!r}" for k, v in o.extra_args.items())
        label = f"{o.op} -> {o.target} ({o.key}{extra})"
        if o.error is None:
            table.add_row(label, "0", "-", "-", "NO CALLS", "-", "-", "-")
        else:
            e = o.error
            verdict = "identical" if e.identical else ("within" if e.within else "OUTSIDE")
            table.add_row(label, str(o.calls_per_run), f"{e.max_abs:.2e}", f"{e.max_rel:.2e}", verdict,
                          _ms(o.original_s), _ms(o.override_s), _ratio(o.override_s, o.original_s))
            notes.append(f"{o.op}: error and times over the first {o.sampled} call(s), replayed on each side alone")
        if o.calls_per_run == 0:
            if o.runs_instead:
                ran = ", ".join(f"{op} ({n} call(s))" for op, n in o.runs_instead)
                notes.append(f"warning: {o.op} received no calls for {o.key}; this model runs {ran}: override that instead")
            else:
                notes.append(f"warning: {o.op} received no calls for {o.key}, and no operator of its kind ran")
        if o.backward_reruns:
            notes.append(f"{o.op}: the backward runs it again {o.backward_reruns} time(s) per run (a backward that "
                         f"differentiates {o.op} itself, as the scaffolded autograd does, or recomputation); "
                         f"that cost is in the backward time")
    console.print(table)
    for note in notes:
        console.print(note, markup=False)

    console.print(_diff_line("outputs", report.outputs), markup=False)
    if report.gradients is not None:
        console.print(_diff_line("gradients", report.gradients), markup=False)
    runs = f"median of {report.runs} run(s)"
    console.print(f"forward    original {_ms(report.original.forward_s)} ms, override {_ms(report.override.forward_s)} ms "
                  f"({_ratio(report.override.forward_s, report.original.forward_s)}; {runs})", markup=False)
    if report.backward:
        console.print(f"backward   original {_ms(report.original.backward_s)} ms, override {_ms(report.override.backward_s)} ms "
                      f"({_ratio(report.override.backward_s, report.original.backward_s)}; {runs})", markup=False)
    if report.passed:
        verdict = "PASS: every result within tolerance"
    elif any(o.error is None for o in report.ops):
        verdict = "FAIL: an override received no calls, so nothing of it was verified"
    else:
        verdict = "FAIL: results outside tolerance"
    console.print(f"verdict    {verdict}", markup=False)
    return "".join(line.rstrip() + "\n" for line in out.getvalue().splitlines())
