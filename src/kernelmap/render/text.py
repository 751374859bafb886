"""What every text renderer shares: the width to write at (external strings
are made safe for a terminal by kernelmap.printable)."""

from __future__ import annotations

import dataclasses
import enum
import shutil
from collections.abc import Mapping
from typing import Any

from kernelmap.printable import printable, printable_line


def terminal_width(width: int | None, default: int = 120) -> int:
    """`width` when given, else the terminal's (COLUMNS), else `default`."""
    if width is not None:
        return width
    return shutil.get_terminal_size((default, 24)).columns


# Note [text renderers escape what they print]
# Every string an answer holds came from outside (a file's name, a kernel's
# name in a trace, a yaml line, what the user typed): before any text
# renderer reads the answer, `escaped` gives it back with each string's
# control and format characters shown escaped (kernelmap.printable), a
# newline in a name included, so that a name never breaks a line or reaches
# the terminal as a control sequence. The strings that are many lines by
# nature (code excerpts, Dynamo's detail) keep their newlines and tabs. A
# call tree is escaped as each line is drawn (render/tree.py's label_parts),
# not walked here: a trace's tree is large, and only part of it is shown.
MULTILINE_FIELDS = frozenset({"text", "excerpt", "code", "detail", "output_code", "error", "condition_text"})


def escaped(answer: Any) -> Any:
    """`answer` with every string escaped for a terminal (Note [text renderers
    escape what they print]); the same object where nothing needed it."""
    from kernelmap.model import CallNode, CallTree

    memo: dict[int, Any] = {}
    keep: list[Any] = []  # what memo's ids refer to stays alive while they are in use

    def walk(value: Any, multiline: bool = False) -> Any:
        if value is None or isinstance(value, (bool, int, float, enum.Enum, CallTree, BaseException)):
            return value  # an enum of str (OpKind) is a name of kernelmap's, and stays its type
        if isinstance(value, str):
            out = printable(value) if multiline else printable_line(value)
            return value if out == value else out
        if isinstance(value, CallNode) and value.children:
            return value  # a tree's nodes are escaped as their lines are drawn
        key = id(value)
        if key in memo:
            return memo[key]
        keep.append(value)
        out = value
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            changed = {}
            for f in dataclasses.fields(value):
                if not f.init:
                    continue
                old = getattr(value, f.name)
                new = walk(old, f.name in MULTILINE_FIELDS)
                if new is not old:
                    changed[f.name] = new
            if changed:
                out = dataclasses.replace(value, **changed)
        elif isinstance(value, Mapping):
            items = [(walk(k), walk(v, isinstance(k, str) and k in MULTILINE_FIELDS)) for k, v in value.items()]
            if any(k is not k0 or v is not v0 for (k, v), (k0, v0) in zip(items, value.items())):
                try:
                    out = type(value)(dict(items))  # a Counter from a dict keeps its counts
                except TypeError:  # a mapping type that is built otherwise
                    out = dict(items)
        elif isinstance(value, (list, tuple)):
            items = [walk(v, multiline) for v in value]
            if any(a is not b for a, b in zip(items, value)):
                out = type(value)(items) if not hasattr(value, "_fields") else type(value)(*items)
        memo[key] = out
        return out

    return walk(answer)
