"""Render a `scaffold` answer (kernelmap.model.ScaffoldAnswer) as text: the
custom operator, what it starts as, every file written, what to do next."""

from __future__ import annotations

import os
from typing import Any

from kernelmap.printable import printable


def to_text(answer: Any, **_: Any) -> str:
    lines = [f"{answer.custom_op}: {answer.schema}", f"  starts as {answer.op} ({answer.family} reference kernel)"]
    lines += [f"  {os.path.join(answer.root, f)}" for f in answer.files]
    lines.append(f"next: cd {answer.root} && python -m pytest tests")
    return "".join(printable(line) + "\n" for line in lines)
