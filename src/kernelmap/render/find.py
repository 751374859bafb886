"""Render a `find` answer (kernelmap.source.index.Findings) as text: one line
per definition, stub declaration or registration, and reference, each with
its file:line."""

from __future__ import annotations

from typing import Any

from kernelmap.printable import printable


def to_text(found: Any, **_: Any) -> str:
    out: list[str] = []
    for d in found.definitions:
        cond = f"  [#if {d.symbol.condition}]" if d.symbol.condition else ""
        out.append(f"{d.location}-{d.location.end_line}  {d.symbol.kind} {d.name}{cond}")
    for d in found.stub_declarations:
        out.append(f"{d.location}  {d.kind}s stub {d.stub}{' (' + d.function_type + ')' if d.function_type else ''}")
    for r in found.stub_registrations:
        out.append(f"{r.location}  registers {r.stub} -> {r.kernel or '(none)'} for {r.device}{' ' + r.capability if r.capability else ''}")
    for r in found.library_registrations:
        out.append(f"{r.location}  m.{r.kind}({r.namespace or '?'}::{r.op}) {r.key or ''} -> {r.kernel or '-'}")
    for c in found.references:
        where = f"  [{c.condition}]" if c.condition else ""
        caller = c.caller.qualified_name if c.caller else "(file scope)"
        out.append(f"{c.location}  {c.kind.value} call from {caller}: {c.callee}{where}")
    if found.more_references:
        out.append(f"... {found.more_references} more references (--limit)")
    return "".join(printable(line) + "\n" for line in out)
