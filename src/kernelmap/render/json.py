"""Any answer -> its JSON document as text (Note [answer documents]; the
documents are described in kernelmap.answers). The web front end, the HTML
report and tests read this form.

The text is written with an explicit stack: a trace's call tree nests deeper
than the standard encoder may recurse. With an indent, containers open one
item per line and each scalar sits beside its key; indentation stops growing
past MAX_INDENT_LEVEL, so a tree thousands of calls deep is not written as
gigabytes of spaces. A value of no JSON type is written as its text.
`loads` reads such text back at any depth, as `dumps` writes it.
"""

from __future__ import annotations

import json
import re
from json.decoder import JSONDecodeError, scanstring
from json.scanner import make_scanner
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


def loads(text: str) -> Any:
    """JSON text -> data, as `json.loads` reads it, nested to any depth.

    The standard decoder recurses once per level and gives up near 1,000
    (RecursionError), where a trace's call tree of 500 calls nests twice as
    deep. Text it refuses for its depth is read again with an explicit stack;
    garbage raises `ValueError` (a JSONDecodeError naming line and column) either way.
    """
    try:
        return json.loads(text)
    except RecursionError:
        return _loads_deep(text)


_SCALAR = make_scanner(json.JSONDecoder())  # reads one value at an index; a scalar's read does not recurse
_SPACE = re.compile(r"[ \t\n\r]*")


def _loads_deep(s: str) -> Any:
    """`loads` with an explicit stack: the standard decoder's grammar and
    messages, containers opened and closed here, scalars read by its scanner."""
    space = _SPACE.match
    open_: list[dict | list] = []  # the containers being filled, innermost last
    keys: list[str | None] = []  # per open container: the key of the value being read (None: a list)

    def key_at(i: int) -> tuple[str, int]:
        if s[i : i + 1] != '"':
            raise JSONDecodeError("Expecting property name enclosed in double quotes", s, i)
        key, i = scanstring(s, i + 1)
        i = space(s, i).end()
        if s[i : i + 1] != ":":
            raise JSONDecodeError("Expecting ':' delimiter", s, i)
        return key, space(s, i + 1).end()

    i = space(s, 0).end()
    while True:
        c = s[i : i + 1]  # a value starts at i
        if c == "{" or c == "[":
            i = space(s, i + 1).end()
            if s[i : i + 1] != ("}" if c == "{" else "]"):
                if c == "{":
                    key, i = key_at(i)
                    open_.append({})
                    keys.append(key)
                else:
                    open_.append([])
                    keys.append(None)
                continue
            value: Any = {} if c == "{" else []
            i += 1
        else:
            try:
                value, i = _SCALAR(s, i)
            except StopIteration as e:
                raise JSONDecodeError("Expecting value", s, e.value) from None
        while True:  # a value is complete: store it, then close every container that ends after it
            if not open_:
                i = space(s, i).end()
                if i != len(s):
                    raise JSONDecodeError("Extra data", s, i)
                return value
            top, key = open_[-1], keys[-1]
            if key is None:
                top.append(value)  # type: ignore[union-attr]
            else:
                top[key] = value  # type: ignore[call-overload]
            i = space(s, i).end()
            c = s[i : i + 1]
            if c == ",":
                i = space(s, i + 1).end()
                if key is not None:
                    keys[-1], i = key_at(i)
                break
            if c != ("]" if key is None else "}"):
                raise JSONDecodeError("Expecting ',' delimiter", s, i)
            i += 1
            value = open_.pop()
            keys.pop()


def render(answer: Any, indent: int | None = 2, **_: Any) -> str:
    """The JSON text of any answer (its `to_json()` document)."""
    return dumps(answer.to_json(), indent)


def to_json(answer: Any) -> dict[str, Any]:
    """The answer's document as Python data (its `to_json()`)."""
    return answer.to_json()
