"""A `CallTree` -> a text tree for the terminal (rich), one line per node.

Each line shows the node's name and what the producer found out about it:
duration and input shapes for traced calls, the dispatch key and kernel
that served an operator, the library and openness of vendor code, the
file:line of Python frames and resolved kernels, the edge (`via`, condition)
of static trees. With `color=False` and a fixed `width` the output is plain
and stable, which is how tests compare it. The tree is walked with an
explicit stack, so a tree of any depth renders; rich only adds colour.
"""

from __future__ import annotations

import io
from typing import Any

from kernelmap.model import CallNode, CallTree, NodeKind
from kernelmap.printable import printable

_KIND_STYLE = {
    "module": "bold cyan",
    "python": "cyan",
    "binding": "blue",
    "builtin": "blue",
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
    if node.kind not in (NodeKind.OPERATOR, NodeKind.TRACE):
        parts.append(f"[{node.kind.value}]")
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
    if a.get("library"):
        parts.append(f"<{a['library']}{', closed' if a.get('closed') else ''}>")
    if a.get("served_by"):
        parts.append("(torch._native override may serve it)")
    if a.get("forward_op"):
        parts.append(f"(for {a['forward_op']})")
    if a.get("unknown") and node.kind in ("op", "gpu_kernel"):
        parts.append("(unknown)")
    if node.via is not None:
        parts.append(f"via {node.via.value}")
    if node.condition:
        parts.append(f"[{node.condition}]")
    for key, text in _MARKERS:
        if a.get(key):
            detail = a[key] if isinstance(a[key], str) else ""
            # "recursion cut: already on the path above" says its marker itself
            parts.append(f"({detail})" if detail.startswith(text) else f"({text}{': ' + detail if detail else ''})")
    if sources:
        if a.get("source"):
            parts.append(f"@ {a['source']}")
        elif a.get("source_file"):
            parts.append(f"@ {a['source_file']}")
        elif node.location is not None and node.kind is not NodeKind.OPERATOR:
            parts.append(f"@ {node.location}")
    return printable("  ".join(parts))


# Static-graph facts worth a word on the line (attr -> what it says).
_MARKERS = (
    ("collapsed", "collapsed"),
    ("cycle", "recursion cut"),
    ("repeat", "expanded above"),
    ("truncated", "cut"),
    ("unresolved", "unresolved"),
    ("observed", ""),  # kernelmap.observe: observed, inlined, not taken
    ("ran", ""),
)

GUIDES = ("├── ", "└── ", "│   ", "    ")


def lines(tree: CallTree, *, max_depth: int | None = None, min_us: float = 0.0, sources: bool = True):
    """(prefix, node or None, text) per output line, pre-order, explicit stack.
    `node` is None for the "… hidden" lines."""
    stack: list[tuple[CallNode, str, str, int]] = [(tree.root, "", "", 0)]
    while stack:
        node, prefix, child_prefix, depth = stack.pop()
        if depth < 0:  # a "… hidden" line: its text is its name
            yield prefix, None, node.name
            continue
        yield prefix, node, label(node, sources=sources)
        if not node.children:
            continue
        if max_depth is not None and depth >= max_depth:
            yield child_prefix + GUIDES[1], None, f"… {len(node.children)} children below depth {max_depth}"
            continue
        shown = [c for c in node.children if not min_us or float(c.attrs.get("duration_us", min_us)) >= min_us]
        hidden = len(node.children) - len(shown)
        entries: list[tuple[CallNode | None, str]] = [(c, "") for c in shown]
        if hidden:
            entries.append((None, f"… {hidden} shorter than {duration_text(min_us)}"))
        pushed = []
        for i, (child, text) in enumerate(entries):
            last = i == len(entries) - 1
            guide = child_prefix + (GUIDES[1] if last else GUIDES[0])
            below = child_prefix + (GUIDES[3] if last else GUIDES[2])
            pushed.append((child, guide, below, text))
        # Push in reverse so the first child is rendered first; "hidden" lines are
        # leaves, emitted when popped.
        for child, guide, below, text in reversed(pushed):
            if child is None:
                stack.append((CallNode(text, NodeKind.NOTE), guide, below, -1))
            else:
                stack.append((child, guide, below, depth + 1))


def _crop(text: str, width: int | None) -> str:
    if width is None or len(text) <= width:
        return text
    return text[: max(width - 1, 0)] + "…"


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
    """The text tree, one line per node, each cut to `width` with "…".

    `max_depth` cuts the tree below that depth; `min_us` hides nodes shorter
    than that many microseconds (a count of hidden children is shown instead);
    `color=True` styles node kinds with ANSI colours (rich), `False` is plain
    text, `None` colours only when standard output is a terminal.
    """
    if color is None:
        import sys

        color = sys.stdout.isatty()
    out: list[str] = []
    if notes:
        out.extend(printable(f"note: {note}") for note in tree.notes)
    styled = []
    for prefix, node, text in lines(tree, max_depth=max_depth, min_us=min_us, sources=sources):
        full = _crop(prefix + text, width)
        out.append(full)
        styled.append((full, len(prefix), _KIND_STYLE.get(node.kind, "") if node is not None else "dim"))
    if not color:
        return "\n".join(out) + "\n"
    from rich.console import Console
    from rich.text import Text

    buf = io.StringIO()
    console = Console(file=buf, width=10**6, force_terminal=True, color_system="standard", highlight=False, emoji=False)
    for note in tree.notes if notes else ():
        console.print(Text(f"note: {note}", style="yellow"))
    for full, start, style in styled:
        t = Text(full)
        if style:
            t.stylize(style, start)
        console.print(t, overflow="ignore", crop=False, no_wrap=True)
    return buf.getvalue()
