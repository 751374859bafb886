"""Any answer -> its JSON document as text (Note [answer documents]; the
documents are described in kernelmap.answers). The web front end, the HTML
report and tests read this form.

The text is written with an explicit stack: a trace's call tree nests deeper
than the standard encoder may recurse. With an indent, containers open one
item per line and each scalar sits beside its key; indentation stops growing
past MAX_INDENT_LEVEL, so a tree thousands of calls deep is not written as
gigabytes of spaces. A value of no JSON type is written as its text.
"""

from __future__ import annotations

import json
from typing import Any

_DUMPS = json.JSONEncoder(ensure_ascii=False, allow_nan=False).encode
_SCALARS = (str, int, float, bool, type(None))
MAX_INDENT_LEVEL = 40


def dumps(doc: Any, indent: int | None = 2) -> str:
    """`doc` (JSON data) as text, iteratively."""
    out: list[str] = []
    colon = ": " if indent is not None else ":"

    def nl(level: int) -> str:
        return "" if indent is None else "\n" + " " * (indent * min(level, MAX_INDENT_LEVEL))

    # items: ("v", value, level) to write a value, ("s", text) to emit text
    stack: list[tuple] = [("v", doc, 0)]
    while stack:
        item = stack.pop()
        if item[0] == "s":
            out.append(item[1])
            continue
        _, value, level = item
        if isinstance(value, dict) and value:
            out.append("{")
            stack.append(("s", nl(level) + "}"))
            entries = list(value.items())
            for i in range(len(entries) - 1, -1, -1):
                k, v = entries[i]
                stack.append(("v", v, level + 1))
                stack.append(("s", ("," if i else "") + nl(level + 1) + _DUMPS(str(k)) + colon))
        elif isinstance(value, (list, tuple)) and value:
            out.append("[")
            stack.append(("s", nl(level) + "]"))
            for i in range(len(value) - 1, -1, -1):
                stack.append(("v", value[i], level + 1))
                stack.append(("s", ("," if i else "") + nl(level + 1)))
        elif isinstance(value, dict):
            out.append("{}")
        elif isinstance(value, (list, tuple)):
            out.append("[]")
        else:
            out.append(_DUMPS(value if isinstance(value, _SCALARS) else str(value)))
    return "".join(out) + "\n"


def render(answer: Any, indent: int | None = 2, **_: Any) -> str:
    """The JSON text of any answer (its `to_json()` document)."""
    return dumps(answer.to_json(), indent)


def to_json(answer: Any) -> dict[str, Any]:
    """The answer's document as Python data (its `to_json()`)."""
    return answer.to_json()
