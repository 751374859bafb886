"""Render a `scaffold` answer (kernelmap.model.ScaffoldAnswer) as text: the
custom operator, what it starts as, every file of the project (those kept as
the user edited them marked), and its two ways to build: just in time by its
tests, or ahead of time with setup.py."""

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
    lines.append(f"build just in time:  cd {answer.root} && python -m pytest tests   (cpp_extension.load)")
    lines.append(f"build ahead of time: cd {answer.root} && pip install --no-build-isolation -e .   (setup.py)")
    return "".join(printable(line) + "\n" for line in lines)
