"""Renderers: a `CallTree` -> text or bytes. Every command that answers with a
call tree (`trace`, `stack`, `callers`) picks its output format from the one
table below; a renderer only reads model types.

    from kernelmap.render import render
    print(render(tree, "text", width=100, color=False))
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kernelmap.model import CallTree
from kernelmap.render import json as json_renderer
from kernelmap.render import tree as tree_renderer

Renderer = Callable[..., str]

# format name -> render(tree, **options) -> str
RENDERERS: dict[str, Renderer] = {
    "text": tree_renderer.render,
    "json": json_renderer.render,
}


def render(tree: CallTree, fmt: str = "text", **options: Any) -> str:
    """`tree` in format `fmt` (a key of RENDERERS)."""
    try:
        renderer = RENDERERS[fmt]
    except KeyError:
        from kernelmap.errors import BadInput

        raise BadInput(f"unknown output format {fmt!r}; choose one of {', '.join(RENDERERS)}") from None
    return renderer(tree, **options)
