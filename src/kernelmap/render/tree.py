"""A `CallTree` -> a text tree for the terminal (rich), one line per node.

Each line shows the node's name and what the producer found out about it:
duration and input shapes for traced calls, the dispatch key and kernel
that served an operator, the library and openness of vendor code, the
file:line of Python frames and resolved kernels, the edge (`via`, condition)
of static trees. With `color=False` and a fixed `width` the output is plain
and stable, which is how tests compare it. The tree is walked with an
explicit stack; rich lays it out without recursion.
"""

from __future__ import annotations

import io
from typing import Any

from kernelmap.model import CallNode, CallTree

_KIND_STYLE = {
    "module": "bold cyan",
    "python": "cyan",
    "binding": "blue",
    "op": "bold",
    "autograd": "magenta",
    "launch": "yellow",
    "gpu_kernel": "green",
    "thread": "bold",
}


def duration_text(us: float) -> str:
    """`1.234 ms`, `56.7 us`, `2.10 s`."""
    if us >= 1e6:
        return f"{us / 1e6:.2f} s"
    if us >= 1000:
        return f"{us / 1000:.3f} ms"
    return f"{us:.1f} us"


def _shapes(shapes: Any) -> str:
    if not isinstance(shapes, (list, tuple)):
        return ""
    parts = [str(list(s)) for s in shapes if isinstance(s, (list, tuple)) and s]
    return " ".join(parts)


def label(node: CallNode, *, sources: bool = True) -> str:
    """The one-line text of a node."""
    a = node.attrs
    parts = [str(a.get("op") or node.name)]
    if node.kind not in ("op", "trace"):
        parts.append(f"[{node.kind}]")
    if "duration_us" in a and node.kind != "trace":
        parts.append(duration_text(float(a["duration_us"])))
    shapes = _shapes(a.get("input_shapes"))
    if shapes:
        parts.append(shapes)
    if a.get("dispatch_key"):
        served = str(a["dispatch_key"])
        if a.get("kernel"):
            served += f": {a['kernel']}"
        parts.append(served)
    elif a.get("kernel") and node.kind == "gpu_kernel":
        parts.append(f"= {a['kernel']}")
    if a.get("conv_backend") or a.get("conv_backend_ran"):
        parts.append(f"backend {a.get('conv_backend') or a.get('conv_backend_ran')}")
    if a.get("vendor"):
        parts.append(f"<{a['vendor']}{', closed' if a.get('closed') else ''}>")
    if a.get("forward_op"):
        parts.append(f"(for {a['forward_op']})")
    if a.get("unknown") and node.kind in ("op", "gpu_kernel"):
        parts.append("(unknown)")
    if node.via is not None:
        parts.append(f"via {node.via.value}")
    if node.condition:
        parts.append(f"if {node.condition}")
    if sources:
        if a.get("source"):
            parts.append(f"@ {a['source']}")
        elif a.get("source_file"):
            parts.append(f"@ {a['source_file']}")
        elif node.location is not None and node.kind not in ("op",):
            parts.append(f"@ {node.location}")
    return "  ".join(parts)


def render(
    tree: CallTree,
    *,
    width: int | None = None,
    color: bool | None = None,
    max_depth: int | None = None,
    min_us: float = 0.0,
    sources: bool = True,
    notes: bool = True,
    **_: Any,
) -> str:
    """The text tree. `max_depth` cuts the tree below that depth; `min_us`
    hides nodes shorter than that many microseconds (a count of hidden
    children is shown instead); `color=None` colours only a terminal."""
    from rich.console import Console
    from rich.text import Text
    from rich.tree import Tree

    def text(node: CallNode) -> Text:
        return Text(label(node, sources=sources), style=_KIND_STYLE.get(node.kind, "") if color is not False else "")

    top = Tree(text(tree.root))
    stack: list[tuple[CallNode, Any, int]] = [(tree.root, top, 0)]
    while stack:
        node, branch, depth = stack.pop()
        if max_depth is not None and depth >= max_depth:
            if node.children:
                branch.add(Text(f"… {len(node.children)} children below depth {max_depth}", style="dim"))
            continue
        shown = [c for c in node.children if not min_us or float(c.attrs.get("duration_us", min_us)) >= min_us]
        pairs = [(c, branch.add(text(c))) for c in shown]
        hidden = len(node.children) - len(shown)
        if hidden:
            branch.add(Text(f"… {hidden} shorter than {duration_text(min_us)}", style="dim"))
        stack.extend((c, b, depth + 1) for c, b in reversed(pairs))

    buf = io.StringIO()
    console = Console(
        file=buf,
        width=width or 120,
        force_terminal=bool(color),
        no_color=color is False,
        color_system="auto" if color else None,
        highlight=False,
        emoji=False,
        soft_wrap=False,
    )
    if notes:
        for note in tree.notes:
            console.print(Text(f"note: {note}", style="yellow" if color is not False else ""), overflow="fold")
    console.print(top, overflow="ellipsis", crop=True, no_wrap=True)
    return buf.getvalue()
