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
import re
from typing import Any

from kernelmap.model import CallNode, CallTree, NodeKind, located, tags_versions
from kernelmap.printable import printable_line

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


def label(node: CallNode, *, sources: bool = True, versions: bool = False) -> str:
    """The one-line text of a node."""
    head, where = label_parts(node, sources=sources, versions=versions)
    return head + (f"  @ {where}" if where else "")


def label_parts(node: CallNode, *, sources: bool = True, versions: bool = False) -> tuple[str, str]:
    """A node's line as (what it is, its location): the location is the part
    never cut when the line is too wide (`fit`); with `versions`, the
    location says its version (Note [versions on locations] in model/locations.py)."""
    a = node.attrs
    if node.kind is NodeKind.NOTE and a.get("folded"):
        return printable_line(node.name), ""
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
    if a.get("library"):  # a vendor call's library right after its name: the part of its line a screen keeps
        parts.insert(1 if node.kind is NodeKind.VENDOR else len(parts), f"<{a['library']}{', closed' if a.get('closed') else ''}>")
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
    where = ""
    if sources:
        if a.get("source"):
            where = str(a["source"])
        elif a.get("source_file"):
            where = str(a["source_file"])
        elif node.location is not None and node.kind is not NodeKind.OPERATOR:
            where = located(node.location, versions)
    # Note [text renderers escape what they print]: a name's newline never breaks the line
    return printable_line("  ".join(str(p) for p in parts)), printable_line(where)


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
# Guides are drawn for this many levels; deeper, a line's prefix stops
# growing and says the level in words (`[level 5000]`): a line per node then
# stays a line, and the text of a tree nested 100,000 calls deep is as long
# as its document, not the square of its depth.
MAX_GUIDES = 64


def lines(tree: CallTree, *, max_depth: int | None = None, min_us: float = 0.0, sources: bool = True,
          root: CallNode | None = None, base: str = "", versions: bool = False):
    """(prefix, node or None, text, location) per output line, pre-order,
    explicit stack, from `root` (default the tree's), each prefix starting
    with `base`. `node` is None for the "… hidden" lines."""
    stack: list[tuple[CallNode, str, str, int]] = [(root or tree.root, base, base, 0)]
    while stack:
        node, prefix, child_prefix, depth = stack.pop()
        if depth < 0:  # a "… hidden" line: its text is its name
            yield prefix, None, node.name, ""
            continue
        if depth > MAX_GUIDES:
            head, where = label_parts(node, sources=sources, versions=versions)
            yield prefix, node, f"[level {depth}] {head}", where
        else:
            yield (prefix, node, *label_parts(node, sources=sources, versions=versions))
        if not node.children:
            continue
        if max_depth is not None and depth >= max_depth:
            yield child_prefix + GUIDES[1], None, f"… {len(node.children)} children below depth {max_depth}", ""
            continue
        shown = [c for c in node.children if not min_us or float(c.attrs.get("duration_us", min_us)) >= min_us]
        hidden = len(node.children) - len(shown)
        shown = _utilities_folded(shown)
        entries: list[tuple[CallNode | None, str]] = [(c, "") for c in shown]
        if hidden:
            entries.append((None, f"… {hidden} shorter than {duration_text(min_us)}"))
        pushed = []
        deep = depth >= MAX_GUIDES  # the prefix stops growing: the children's guides are drawn at this level
        for i, (child, text) in enumerate(entries):
            last = i == len(entries) - 1
            guide = child_prefix + (GUIDES[1] if last else GUIDES[0])
            below = child_prefix if deep else child_prefix + (GUIDES[3] if last else GUIDES[2])
            pushed.append((child, guide, below, text))
        # Push in reverse so the first child is rendered first; "hidden" lines are
        # leaves, emitted when popped.
        for child, guide, below, text in reversed(pushed):
            if child is None:
                stack.append((CallNode(text, NodeKind.NOTE), guide, below, -1))
            else:
                stack.append((child, guide, below, depth + 1))


def _utilities_folded(children: list[CallNode]) -> list[CallNode]:
    """`children` with each run of two or more tensor utilities left
    unexpanded folded into one line (`+ 3 utilities: reshape x2, expand`:
    Note [utilities as steps] in kernelmap.processors); JSON and HTML keep
    each node."""
    from kernelmap.processors import fold_note

    out: list[CallNode] = []
    run: list[CallNode] = []
    for c in [*children, None]:
        if c is not None and c.attrs.get("utility") and not c.children:
            run.append(c)
            continue
        out.extend([fold_note(run)] if len(run) > 1 else run)
        run = []
        if c is not None:
            out.append(c)
    return out


def main_lines(tree: CallTree, *, sources: bool = True, versions: bool = False):
    """The lines of a tree with a main path (Note [the main path] in
    kernelmap.processors): its steps numbered at the left margin, each step's
    other children (folded notes, or subtrees) indented under it."""
    for _, _, rows in main_groups(tree, sources=sources, versions=versions):
        yield from rows


def main_groups(tree: CallTree, *, sources: bool = True, versions: bool = False):
    """The rows of `main_lines` in groups: (the step a group is under, the
    other child it shows or None for the step's own row, its rows)."""
    chain = [tree.root]
    while True:
        nxt = next((c for c in chain[-1].children if c.attrs.get("main")), None)
        if nxt is None:
            break
        chain.append(nxt)
    from kernelmap.processors import fold_notes

    digits = len(str(len(chain)))
    indent = " " * (digits + 2)
    for number, node in enumerate(chain, 1):
        yield node, None, [(f"{number:>{digits}}. ", node, *label_parts(node, sources=sources, versions=versions))]
        nxt = chain[number] if number < len(chain) else None
        others = [c for c in node.children if c is not nxt]
        if others and not all(c.kind is NodeKind.NOTE and c.attrs.get("folded") for c in others):
            others = list(fold_notes(others, nxt))  # a tree marked but not folded (a saved document): folded as it is read
        for child in others:
            yield node, child, list(lines(tree, sources=sources, root=child, base=indent, versions=versions))


# Note [the first screen]
# ~~~~~~~~~~~~~~~~~~~~~~~
# Shown on a screen (a width given), the main path's steps all stay and the
# `+` lines under them fill what the screen has left (SCREEN_LINES with the
# notes and the closing line). Where they do not all fit, the least telling go
# first, each from the top: the tensor utilities a step calls, what the
# generated layers hold (a binding's other
# overload, a wrapper's other #if), then the calls a step makes whatever the
# branch, then other branches; a switch's other cases (conv's backends) and
# subtrees go last. The closing line counts what was left out; piped output
# and --all keep every line.
SCREEN_LINES = 40
_UTILITIES = re.compile(r"\+ \d+ utilit(?:y|ies): ")
_GLUE = {NodeKind.BINDING, NodeKind.HEADER, NodeKind.OPS_ENTRY, NodeKind.OPERATOR, NodeKind.WRAPPER, NodeKind.ALTERNATIVES}


def _telling(step: CallNode, other: CallNode) -> int:
    """How much a `+` line under `step` tells (Note [the first screen]): the lower, the sooner left out."""
    if step.kind in _GLUE:
        return 0
    if other.kind is NodeKind.NOTE and other.attrs.get("folded"):
        if _UTILITIES.match(other.name):  # tensor plumbing (Note [utilities as steps] in kernelmap.processors)
            return 0
        if " other call" in other.name:
            return 1
        if " other branch" in other.name:
            return 2
    return 3


def _with_trace_version(row: tuple, versions: dict) -> tuple:
    """A trace tree's row whose location is a kernel's source, with the tree's
    version said (Note [versions in a trace] in kernelmap.trace.summary): the
    sources are the tree's lines; a kernel of the user's own extension (an
    absolute path) is of no torch version."""
    prefix, node, text, where = row
    source = node.attrs.get("source") if node is not None else None
    if not source or not where or str(node.attrs.get("source_file") or source).startswith("/") or not versions.get("tree"):
        return row
    return prefix, node, text, f"{where} ({versions['tree']})"


def _footer(steps: int, left_out: int, width: int | None = None) -> str:
    shown = f"; {left_out} + lines left out" if left_out else ""
    line = f"(the main path, {steps} steps; + lines fold the rest, --all shows the whole tree{shown})"
    if width is not None and len(line) > width:  # a narrow screen: the same in fewer words
        line = f"(main path: {steps} steps{shown}; --all shows all)"
    return line


def fit_screen(groups: list, room: int, width: int | None) -> tuple[list, int]:
    """`groups` of main_groups without the `+` groups that do not fit in `room`
    lines (Note [the first screen]), and how many were left out."""
    size = [sum(len(fit(prefix, text, where, width)) for prefix, _, text, where in rows) for _, _, rows in groups]
    over = sum(size) - room
    dropped: set[int] = set()
    order = sorted((i for i, (_, other, _) in enumerate(groups) if other is not None), key=lambda i: (_telling(groups[i][0], groups[i][1]), i))
    for i in order:
        if over <= 0:
            break
        dropped.add(i)
        over -= size[i]
    return [g for i, g in enumerate(groups) if i not in dropped], len(dropped)


def fit(prefix: str, text: str, where: str, width: int | None, sep: str = "  @ ") -> list[str]:
    """A line of `text` and its location `where` in `width` columns: the name
    and conditions are shortened first ("…"); the location is never cut. A
    prefix of tree guides wider than half the line keeps its last two levels;
    where even then the location leaves too little room, it takes a line of
    its own below."""
    tail = f"{sep}{where}" if where else ""
    full = prefix + text + tail
    if width is None or len(full) <= width:
        return [full]
    if not where:
        return [_crop(prefix + text, width)]
    if len(prefix) > width // 2:
        prefix = "…" + prefix[-(len(GUIDES[0]) * 2 - 1):]
    room = width - len(prefix) - len(tail)
    if room >= 12:
        return [prefix + _crop(text, room) + tail]
    below = prefix[: -len(GUIDES[0])] + (GUIDES[2] if prefix.endswith(GUIDES[0]) else GUIDES[3]) if prefix.endswith(GUIDES[:2]) else " " * len(prefix)
    return [_crop(prefix + text, width), below + tail.lstrip()]


def fit_whole(prefix: str, text: str, where: str, width: int | None) -> list[str]:
    """`text` and its location `where` on one line where they fit in
    `width`, else the location on a line of its own below (indented under
    the text): a name is shortened only where it alone is wider than the
    line, a location never (a list of steps, where `fit` serves a tree)."""
    if width is None or not where or len(f"{prefix}{text}  @ {where}") <= width:
        return fit(prefix, text, where, width)
    below = f"{' ' * (len(prefix) + 2)}@ {where}"
    return [_crop(prefix + text, width), below if len(below) <= width else f"@ {where}"]


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
    full: bool = False,
    **_: Any,
) -> str:
    """The text tree, one line per node, each fitted to `width` (`fit`: the
    name is shortened, the location never cut).

    A tree with a main path (kernelmap.processors.mark_main_path) shows it as
    numbered steps, each step's other children under it, unless `full` asks
    for the whole tree as a tree. `max_depth` cuts the tree below that depth;
    `min_us` hides nodes shorter than that many microseconds (a count of
    hidden children is shown instead); `color=True` styles node kinds with
    ANSI colours (rich), `False` is plain text, `None` colours only when
    standard output is a terminal.
    """
    if color is None:
        import sys

        color = sys.stdout.isatty()
    out: list[str] = []
    if notes:
        out.extend(printable_line(f"note: {note}") for note in tree.notes)
    styled = []
    main = tree.root.attrs.get("main") and not full
    versions = tags_versions((n.location for _, n in tree.walk()), tree.meta.get("torch"))  # Note [versions on locations]
    left_out = 0
    if main:
        groups = list(main_groups(tree, sources=sources, versions=versions))
        if width is not None:
            footer = len(_footer(999, 999, width))  # the closing line's longest, folded to the width as the CLI folds it
            groups, left_out = fit_screen(groups, SCREEN_LINES - len(out) - -(-footer // max(width, 1)), width)
        rows = [row for _, _, part in groups for row in part]
    else:
        rows = lines(tree, max_depth=max_depth, min_us=min_us, sources=sources, versions=versions)
    mixed = (tree.meta or {}).get("versions") if sources else None
    if mixed:  # a trace resolved against a tree that is not the installed torch (Note [versions in a trace])
        rows = (_with_trace_version(row, mixed) for row in rows)
    for prefix, node, text, where in rows:
        style = _KIND_STYLE.get(node.kind, "") if node is not None and node.kind is not NodeKind.NOTE else "dim"
        for n, line in enumerate(fit(prefix, text, where, width)):
            out.append(line)
            styled.append((line, len(prefix) if n == 0 else len(line), style))
    if main:
        steps = sum(1 for prefix, node, *_ in main_lines(tree, sources=False) if node is not None and node.attrs.get("main"))
        out.append(_footer(steps, left_out, width))
        styled.append((out[-1], 0, "dim"))
    if not color:
        return "\n".join(out) + "\n"
    from rich.console import Console
    from rich.text import Text

    buf = io.StringIO()
    console = Console(file=buf, width=10**6, force_terminal=True, color_system="standard", highlight=False, emoji=False)
    for note in tree.notes if notes else ():
        console.print(Text(printable_line(f"note: {note}"), style="yellow"))
    for full, start, style in styled:
        t = Text(full)
        if style:
            t.stylize(style, start)
        console.print(t, overflow="ignore", crop=False, no_wrap=True)
    return buf.getvalue()
