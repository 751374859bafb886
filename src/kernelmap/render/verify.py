"""Render a `VerifyReport` (kernelmap verify) as text: what was compared and
under which rule, a table per overridden operator (calls routed, its verdict
and time on the calls it got, backward re-runs of the original, the operators
that ran instead of one that got no calls) with a line naming the tensor its
numbers come from, then the whole model's tensors, one per line, forward and
backward times, and the verdict. Every line that shows a difference names the
one tensor it belongs to. The JSON form is the report's own `to_json()`
(`"kernelmap": "verify/2"`).
"""

from __future__ import annotations

import io
import sys

from kernelmap.printable import printable_line

__all__ = ["to_text"]

SHOWN = 5  # tensors of a set shown one per line when all are within; every one outside is shown, up to OUTSIDE_SHOWN
OUTSIDE_SHOWN = 20


def _tol(report) -> str:
    if report.rtol is None and report.atol is None:
        return "torch.testing.assert_close's rtol and atol for each tensor's dtype"
    rtol = "per dtype" if report.rtol is None else f"{report.rtol:g}"
    atol = "per dtype" if report.atol is None else f"{report.atol:g}"
    return f"rtol {rtol}, atol {atol}"


def _rules(report) -> list[str]:
    """The two rules, stated with the tolerances they used (Note [verify tolerances])."""
    used = sorted({(t.dtype, t.rtol, t.atol) for d in _sets(report) for t in d.tensors if not t.mismatch})
    lines = [f"tolerance  {_tol(report)}" + (": " + "; ".join(f"{dt} rtol {r:g}, atol {a:g}" for dt, r, a in used) if used else "")]
    lines.append("rule       each override's calls, element by element (assert_close): |mine - original| <= atol + rtol * |original|")
    lines.append("           the model's outputs and gradients, per tensor of n elements, in norm:")
    lines.append("           ||mine - original|| <= atol * sqrt(n) + rtol * ||original|| (a correct kernel that sums in another")
    lines.append("           order moves single elements near zero beyond their own tolerance, not the norm)")
    return lines


def _sets(report):
    out = [o.error for o in report.ops if o.error is not None] + [report.outputs]
    return out + ([report.gradients] if report.gradients is not None else [])


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.3f}"


def _ratio(mine: float | None, theirs: float | None) -> str:
    return f"{mine / theirs:.2f}x" if mine is not None and theirs else "-"


def _verdict(t) -> str:
    if t.mismatch:
        return f"OUTSIDE tolerance: {t.mismatch}"
    if t.identical:
        return "identical"
    return "within tolerance" if t.within else "OUTSIDE tolerance"


def tensor_line(t) -> str:
    """One tensor's numbers and verdict, on one line."""
    shape = "x".join(str(n) for n in t.shape) or "scalar"
    if t.mismatch:
        return f"{t.name} {t.dtype}[{shape}]: {_verdict(t)}"
    if t.identical:
        return f"{t.name} {t.dtype}[{shape}]: identical"
    measure = "worst element" if t.rule == "elementwise" else "norm"
    return (f"{t.name} {t.dtype}[{shape}]: max abs {t.max_abs:.2e}, max rel {t.max_rel:.2e}, rel norm {t.norm_rel:.2e}; "
            f"{measure} {t.share:.2g}x its tolerance: {_verdict(t)}")


def _set_lines(label: str, d) -> list[str]:
    """A set of tensors (outputs, gradients), one tensor per line: every one
    outside tolerance (up to OUTSIDE_SHOWN), else the farthest ones, the rest counted."""
    if not d.tensors:
        return [f"{label:10s} no tensors to compare"]
    outside = d.outside
    shown = list(outside[:OUTSIDE_SHOWN]) if outside else sorted(d.tensors, key=lambda t: -t.share)[:SHOWN]
    if len(d.tensors) <= SHOWN:
        shown = list(d.tensors)
    lines = [f"{label if i == 0 else '':10s} {tensor_line(t)}" for i, t in enumerate(shown)]
    rest = len(d.tensors) - len(shown)
    if rest:
        more_outside = len(outside) - sum(1 for t in shown if not t.within)
        what = f"{more_outside} more outside tolerance" if more_outside else "all within tolerance"
        lines.append(f"{'':10s} ... and {rest} more tensor(s), {what}")
    return lines


def to_text(report, width: int | None = None, color: bool | None = None, **_: object) -> str:
    from rich.console import Console
    from rich.table import Table

    if color is None:
        color = sys.stdout.isatty()
    out = io.StringIO()
    console = Console(file=out, width=width or 120, color_system="standard" if color else None, no_color=not color,
                      highlight=False, soft_wrap=False)

    def line(text: str) -> None:  # one line as it is, never folded: a tensor's numbers stay on its line
        out.write(printable_line(text) + "\n")

    line(f"model      {report.model}")
    for text in _rules(report):
        line(text)

    table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold" if color else "")
    for name, justify in (("override", "left"), ("calls/run", "right"), ("verdict", "left"), ("original ms", "right"),
                          ("override ms", "right"), ("ratio", "right")):
        table.add_column(name, justify=justify, no_wrap=True)
    notes = []
    for o in report.ops:
        extra = "".join(f" {k}={v!r}" for k, v in o.extra_args.items())
        label = f"{o.op} -> {o.target} ({o.key}{extra})"
        if o.error is None:
            table.add_row(label, "0", "NO CALLS", "-", "-", "-")
        else:
            e = o.error
            verdict = "identical" if e.identical else ("within" if e.within else "OUTSIDE")
            table.add_row(label, str(o.calls_per_run), verdict, _ms(o.original_s), _ms(o.override_s), _ratio(o.override_s, o.original_s))
            worst = e.worst
            if worst is not None and e.identical:
                notes.append(f"{o.op}: {o.sampled} call(s) replayed on each side alone: identical in every tensor")
            elif worst is not None:
                notes.append(f"{o.op}: {o.sampled} call(s) replayed on each side alone; of their {e.count} tensor(s), the farthest:")
                notes.append(f"  {tensor_line(worst)}")
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
        line(note)
    for text in _set_lines("outputs", report.outputs):
        line(text)
    if report.gradients is not None:
        for text in _set_lines("gradients", report.gradients):
            line(text)
    runs = f"median of {report.runs} run(s)"
    line(f"forward    original {_ms(report.original.forward_s)} ms, override {_ms(report.override.forward_s)} ms "
         f"({_ratio(report.override.forward_s, report.original.forward_s)}; {runs})")
    if report.backward:
        line(f"backward   original {_ms(report.original.backward_s)} ms, override {_ms(report.override.backward_s)} ms "
             f"({_ratio(report.override.backward_s, report.original.backward_s)}; {runs})")
    if report.passed:
        verdict = "PASS: every result within tolerance"
    elif any(o.error is None for o in report.ops):
        verdict = "FAIL: an override received no calls, so nothing of it was verified"
    else:
        verdict = "FAIL: results outside tolerance"
    line(f"verdict    {verdict}")
    return "".join(line.rstrip() + "\n" for line in out.getvalue().splitlines())
