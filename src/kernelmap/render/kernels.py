"""Render the kernel/1 answer (one GPU kernel name: kernelmap.kernels.KernelAnswer)
and the ranks/1 answer (several ranks of a run: kernelmap.trace.ranks.RanksSummary)
as text, with control characters in trace and kernel names escaped."""

from __future__ import annotations

from typing import Any

from kernelmap.printable import printable


def kernel_to_text(answer: Any, **_: Any) -> str:
    return printable(answer.to_text())


def ranks_to_text(answer: Any, *, width: int | None = None, top: int = 25, **_: Any) -> str:
    columns = width if width is not None else 120
    return printable(answer.to_text(top=top, width=columns))
