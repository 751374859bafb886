"""A `CallTree` -> its canonical JSON document. The web front end, HTML pages
and tests read this form; its version changes whenever a field changes
meaning or goes away (new fields may be added within a version).

Document, version 1 (`"kernelmap": "calltree/1"`):

    {
      "kernelmap": "calltree/1",
      "kind": "trace",                 # what the tree answers: trace | stack | callers
      "notes": ["..."],                # stated once: version mismatches, missing layers
      "meta": {...},                   # producer facts: file, torch version, device, ...
      "root": NODE
    }
    NODE = {
      "name": "aten::conv2d",
      "kind": "op",                    # trace | thread | module | python | binding | op | autograd
                                       # | annotation | launch | runtime | gpu_kernel | gpu_memcpy | ...
      "location": LOCATION | null,     # ops: their native_functions.yaml entry; frames: file:line
      "via": "dispatcher" | null,      # how the parent reaches this node (static trees)
      "condition": "..." | null,       # condition on that edge (static trees)
      "attrs": {...},                  # durations (duration_us), input_shapes, dtype, device,
                                       # dispatch_key, dispatch_keys, kernel, registered_at, source,
                                       # source_reason, vendor, closed, conv_backend, launched_by, ...
      "children": [NODE, ...]
    }
    LOCATION = {"path": "aten/src/...", "line": 1701, "end_line": null,
                "origin": "torch 2.13.0+cpu", "url": "https://github.com/pytorch/pytorch/blob/<sha>/...#L1701" | null}

Attribute values are JSON scalars, lists and objects; anything else is
written with `str()`.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from kernelmap.model import CallNode, CallTree, Location

SCHEMA_VERSION = 1
SCHEMA = f"calltree/{SCHEMA_VERSION}"


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, Location):
        return value.to_json()
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_plain(v) for v in value]
    if hasattr(value, "to_json"):
        return value.to_json()
    return str(value)


def _node_fields(node: CallNode) -> dict[str, Any]:
    return {
        "name": node.name,
        "kind": node.kind,
        "location": node.location.to_json() if node.location else None,
        "via": node.via.value if node.via is not None else None,
        "condition": node.condition,
        "attrs": {str(k): _plain(v) for k, v in node.attrs.items()},
        "children": [],
    }


def to_json(tree: CallTree) -> dict[str, Any]:
    """The document as Python data (explicit stack, no recursion)."""
    root = _node_fields(tree.root)
    stack: list[tuple[CallNode, dict[str, Any]]] = [(tree.root, root)]
    while stack:
        node, out = stack.pop()
        for child in node.children:
            c = _node_fields(child)
            out["children"].append(c)
            stack.append((child, c))
    return {
        "kernelmap": SCHEMA,
        "kind": str(tree.meta.get("kind", tree.root.kind)),
        "notes": list(tree.notes),
        "meta": _plain(dict(tree.meta)),
        "root": root,
    }


def render(tree: CallTree, indent: int | None = 2, **_: Any) -> str:
    """The JSON text of `tree`. Written with an explicit stack (the standard
    encoder recurses once per level, and traces can nest deeply); with an
    indent, each node field sits on its own line and values are compact."""
    doc = to_json(tree)
    dumps = functools.partial(json.dumps, ensure_ascii=False, separators=(",", ":") if indent is None else (", ", ": "))

    def nl(level: int) -> str:
        return "" if indent is None else "\n" + " " * (indent * level)

    colon = ":" if indent is None else ": "
    out: list[str] = ["{"]
    head = [f"{nl(1)}{dumps(k)}{colon}{dumps(v)}" for k, v in doc.items() if k != "root"]
    out.append(",".join(head) + f",{nl(1)}\"root\"{colon}")
    # Tokens: a node dict to open at a level, or a literal string to emit.
    stack: list[tuple[Any, int]] = [(doc["root"], 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, str):
            out.append(item)
            continue
        fields = [f"{nl(level + 1)}{dumps(k)}{colon}{dumps(v)}" for k, v in item.items() if k != "children"]
        children = item["children"]
        if not children:
            out.append("{" + ",".join(fields) + f",{nl(level + 1)}\"children\"{colon}[]{nl(level)}}}")
            continue
        out.append("{" + ",".join(fields) + f",{nl(level + 1)}\"children\"{colon}[")
        stack.append((f"{nl(level + 1)}]{nl(level)}}}", level))
        for i in range(len(children) - 1, -1, -1):
            stack.append((children[i], level + 2))
            stack.append((("," if i else "") + nl(level + 2), level))
    out.append(nl(0) + "}\n")
    return "".join(out)
