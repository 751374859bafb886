"""Render a `scaffold` answer (kernelmap.model.ScaffoldAnswer) as text: the
custom operator, what it starts as, every file of the project (those kept as
the user edited them marked), what to do next."""

from __future__ import annotations

import os
from typing import Any

from kernelmap.printable import printable


def to_text(answer: Any, **_: Any) -> str:
    lines = [f"{answer.custom_op}: {answer.schema}", f"  starts as {answer.op} ({answer.family} reference kernel)"]
    kept = set(answer.kept)
    lines += [f"  {os.path.join(answer.root, f)}" + ("  (kept: edited since scaffold wrote it)" if f in kept else "") for f in answer.files]
    if kept:
        lines.append(f"kept {len(kept)} file(s) you edited as they are; move them away and run again for the new version")
    lines.append(f"next: cd {answer.root} && python -m pytest tests")
    return "".join(printable(line) + "\n" for line in lines)
