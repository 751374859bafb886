"""Renderers: an answer -> text. One table, keyed by the answer's document
name (`calltree`, `where`, `explain`, `find`, `gen`, `trace`, `sources`, ...;
see kernelmap.answers) and the format (`text`, `json`, `html`), used by the
CLI, the web app and notebooks alike. A renderer only reads the answer.

    from kernelmap.render import render
    print(render(tree, "text", width=100, color=False))

Renderers are named here as "module:function" and imported on first use, so
that JSON output never imports rich. Register another with `register()`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from kernelmap.errors import BadInput

Renderer = Callable[..., str]

FORMATS = ("text", "json", "html")

# (document name, format) -> "module:function"; JSON falls back to the generic writer
_TABLE: dict[tuple[str, str], str | Renderer] = {
    ("calltree", "text"): "kernelmap.render.tree:render",
    ("where", "text"): "kernelmap.render.where:to_text",
    ("explain", "text"): "kernelmap.render.explain:to_text",
    ("find", "text"): "kernelmap.render.find:to_text",
    ("gen", "text"): "kernelmap.render.gen:to_text",
    ("trace", "text"): "kernelmap.render.trace:to_text",
    ("sources", "text"): "kernelmap.render.sources:to_text",
    ("verify", "text"): "kernelmap.render.verify:to_text",
    ("scaffold", "text"): "kernelmap.render.scaffold:to_text",
    ("compile", "text"): "kernelmap.render.compile:to_text",
    ("diff", "text"): "kernelmap.render.diff:to_text",
    ("path", "text"): "kernelmap.render.path:to_text",
    ("kernel", "text"): "kernelmap.render.kernels:kernel_to_text",
    ("ranks", "text"): "kernelmap.render.kernels:ranks_to_text",
    ("impact", "text"): "kernelmap.render.impact:to_text",
}
_GENERIC = {"json": "kernelmap.render.json:render", "html": "kernelmap.render.html:render_answer"}


def register(document: str, fmt: str, renderer: str | Renderer) -> None:
    """Add (or replace) the renderer of `document` answers in format `fmt`."""
    _TABLE[(document, fmt)] = renderer


def renderer_for(answer: Any, fmt: str) -> Renderer:
    document = getattr(answer, "DOCUMENT", None)
    if document is None:
        raise TypeError(f"{type(answer).__name__} is not an answer (it has no DOCUMENT)")
    target = _TABLE.get((document, fmt)) or _GENERIC.get(fmt)
    if target is None:
        formats = sorted({f for d, f in _TABLE if d == document} | set(_GENERIC))
        raise BadInput(f"no {fmt!r} output for {document} answers; choose one of {', '.join(formats)}")
    if callable(target):
        return target
    module, attr = target.split(":")
    return getattr(importlib.import_module(module), attr)


def render(answer: Any, fmt: str = "text", **options: Any) -> str:
    """`answer` in format `fmt`. Options a renderer does not know are ignored
    (`width`, `color` for text; `indent` for JSON)."""
    if fmt not in FORMATS:
        raise BadInput(f"unknown output format {fmt!r}; choose one of {', '.join(FORMATS)}")
    renderer = renderer_for(answer, fmt)
    if fmt == "text":  # Note [text renderers escape what they print] in render/text.py
        from kernelmap.render.text import escaped

        answer = escaped(answer)
    return renderer(answer, **options)
