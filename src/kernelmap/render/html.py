"""An answer's JSON document -> one self-contained HTML page (inline CSS and
JavaScript, no network), or the fragment a notebook or the web app embeds.

The page is the document itself, embedded as data, plus a static viewer
(`templates/report.js`) that draws it: call trees (collapsible, searchable,
filtered by kind, device and open/closed vendor; conditions and dispatch keys
as badges; "expanded above" links to the twin), trace summaries (sortable
tables, an icicle of time module -> op -> kernel, a click from a kernel to its
op, dispatch path and source), where / explain / gen answers, and a plain
JSON view for any other kind. The renderer reads no producer: file contents
come from the caller's `excerpt(location) -> str | None`, which it
highlights with pygments and embeds.

    from kernelmap.render import html
    page = html.render(json.loads(text), excerpt=lambda loc: read_lines(loc))
"""

from __future__ import annotations

import base64
import functools
import gzip
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from kernelmap.errors import BadInput
from kernelmap.render.json import dumps

Excerpt = Callable[[dict[str, Any]], "str | None"]

TEMPLATES = Path(__file__).with_name("templates")

# Kinds the viewer draws with a view of their own; any other gets the JSON view.
KNOWN_KINDS = ("calltree", "trace", "where", "explain", "gen", "impact")

# A report embeds at most this many distinct excerpts: a trace names the same
# few hundred kernels thousands of times, but a pathological document must not
# turn into a page of hundreds of megabytes.
MAX_EXCERPTS = 4000
# Above this size the embedded data is gzip-compressed and base64-encoded (the
# browser's own DecompressionStream unpacks it): a ResNet-50 trace repeats the
# same locations and links thousands of times and shrinks about twentyfold.
COMPRESS_ABOVE = 256 * 1024
EXCERPT_LINES = 40


@functools.cache
def environment() -> jinja2.Environment:
    """The Jinja2 environment of the report and of the web app's pages."""
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=jinja2.StrictUndefined,
    )


@functools.cache
def asset(name: str) -> str:
    """The text of a static asset (CSS or JS) beside the templates."""
    return (TEMPLATES / name).read_text()


@functools.cache
def pygments_css() -> str:
    from pygments.formatters import HtmlFormatter

    return HtmlFormatter(style="default").get_style_defs(".hl")


def kind_of(document: dict[str, Any]) -> tuple[str, str]:
    """("calltree", "1") from a document's `"kernelmap"` key."""
    if not isinstance(document, dict) or not isinstance(document.get("kernelmap"), str):
        raise BadInput('not a kernelmap answer document: it has no "kernelmap": "<name>/<version>" key')
    name, _, version = document["kernelmap"].partition("/")
    return name, version


def location_key(location: dict[str, Any]) -> str:
    """The key under which a location's excerpt is embedded (the viewer builds
    the same key)."""
    return f"{location.get('origin') or ''}|{location.get('path')}|{location.get('line')}"


def source_location(text: Any) -> dict[str, Any] | None:
    """A `path:line` string (a trace node's `source` attr) as a location."""
    if not isinstance(text, str):
        return None
    path, _, line = text.rpartition(":")
    if not path or not line.isdigit() or path.startswith("/") or int(line) < 1:
        return None
    return {"path": path, "line": int(line), "end_line": None, "origin": None, "url": None}


def locations(document: Any) -> Iterator[dict[str, Any]]:
    """Every LOCATION object in a document, and every `source: "path:line"`
    attr, walked with an explicit stack."""
    stack = [document]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if isinstance(item.get("path"), str) and isinstance(item.get("line"), int):
                yield item
            loc = source_location(item.get("source"))
            if loc is not None:
                yield loc
            stack.extend(v for v in item.values() if isinstance(v, (dict, list)))
        elif isinstance(item, list):
            stack.extend(v for v in item if isinstance(v, (dict, list)))


def highlight(text: str, path: str, first_line: int) -> str:
    """`text` (lines of `path` from `first_line`) as highlighted HTML with
    line numbers. Pygments escapes the text."""
    from pygments import highlight as pyg_highlight
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import get_lexer_for_filename
    from pygments.lexers.special import TextLexer
    from pygments.util import ClassNotFound

    name = path[:-3] if path.endswith(".j2") else path
    try:
        lexer = get_lexer_for_filename(name, stripnl=False)
    except ClassNotFound:
        lexer = TextLexer(stripnl=False)
    if name.endswith((".cu", ".cuh")):
        from pygments.lexers import CudaLexer

        lexer = CudaLexer(stripnl=False)
    formatter = HtmlFormatter(cssclass="hl", linenos="inline", linenostart=first_line, wrapcode=True)
    return pyg_highlight(text, lexer, formatter)


def excerpts(document: dict[str, Any], excerpt: Excerpt | None) -> dict[str, str]:
    """Location key -> highlighted excerpt, for each distinct location the
    caller's `excerpt` can read."""
    out: dict[str, str] = {}
    seen: set[str] = set()
    for loc in locations(document):
        key = location_key(loc)
        if key in seen:
            continue
        seen.add(key)
        if len(out) >= MAX_EXCERPTS:
            break
        # Generated-code answers carry the regenerated file's text themselves.
        text = excerpt(loc) if excerpt is not None else None
        if not text and isinstance(loc.get("text"), str):
            text = loc["text"]
        if text:
            lines = text.splitlines()[:EXCERPT_LINES]
            out[key] = highlight("\n".join(lines) + "\n", str(loc["path"]), int(loc["line"]))
    return out


def script_json(value: Any) -> str:
    """JSON that is safe inside a `<script type="application/json">` element:
    `<`, `>` and `&` are written as escapes, so no text in the data can close
    the element or open another."""
    text = dumps(value, indent=None).rstrip("\n")  # iterative: a trace's tree nests deeper than json.dumps recurses
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def embedded(data: dict[str, Any], *, compress: bool | None = None) -> tuple[str, str]:
    """(encoding, text) of the viewer's data inside the page: "json" (escaped
    for a script element) or "gzip-base64" for large documents."""
    text = script_json(data)
    if compress is None:
        compress = len(text) > COMPRESS_ABOVE
    if not compress:
        return "json", text
    packed = gzip.compress(text.encode(), compresslevel=6, mtime=0)
    return "gzip-base64", base64.b64encode(packed).decode("ascii")


def embedded_data(encoding: str, text: str) -> dict[str, Any]:
    """The viewer's data back from a page's embedded text (what tests and
    tools read)."""
    if encoding == "gzip-base64":
        text = gzip.decompress(base64.b64decode(text)).decode()
    return json.loads(text)


def title_of(document: dict[str, Any]) -> str:
    kind, _ = kind_of(document)
    if kind == "calltree":
        root = document.get("root") or {}
        return f"kernelmap {document.get('kind', 'tree')}: {root.get('name', '')}"
    if kind == "trace":
        meta = ((document.get("tree") or {}).get("meta")) or {}
        return f"kernelmap trace: {meta.get('recorded') or meta.get('file') or ''}"
    if kind == "where":
        return f"kernelmap where: {document.get('query', '')}"
    if kind == "explain":
        return f"kernelmap explain: {document.get('op', '')}"
    if kind == "gen":
        return f"kernelmap gen: {document.get('op', '')}"
    if kind == "impact":
        return f"kernelmap impact: {document.get('query', '')} ({document.get('device', '')})"
    return f"kernelmap {kind}"


def view_data(document: dict[str, Any], *, excerpt: Excerpt | None = None) -> dict[str, Any]:
    """What the viewer script reads: the kind, the document and its excerpts."""
    kind, version = kind_of(document)
    return {
        "view": kind if kind in KNOWN_KINDS else "json",
        "kind": kind,
        "version": version,
        "document": document,
        "excerpts": excerpts(document, excerpt),
    }


def first_screen(document: dict[str, Any]) -> str:
    """The first screen of a report as static HTML, drawn before any script
    runs (and without one): a call tree's main path (Note [the main path] in
    kernelmap.processors), one numbered step a line with its file:line and a
    count of what else each step may call; a `where` answer's operator, its
    yaml line and its kernels. The viewer replaces it when it starts. Paths
    are the documents' own (relative to their tree), never a file of this machine."""
    from markupsafe import escape

    def where(loc: Any) -> str:
        if not isinstance(loc, dict) or not isinstance(loc.get("path"), str):
            return ""
        return f' <span class="loc">{escape(loc["path"])}:{escape(loc.get("line"))}</span>'

    kind, _ = kind_of(document)
    if kind == "calltree":
        node, steps = document.get("root"), []
        while isinstance(node, dict):
            others = [c for c in node.get("children") or () if not (c.get("facts") or {}).get("main")]
            steps.append(f"<li><b>{escape(node.get('name'))}</b> <i>{escape(node.get('kind'))}</i>{where(node.get('location'))}"
                         + (f' <span class="fold">+ {len(others)} other</span>' if others and len(steps) else "") + "</li>")
            node = next((c for c in node.get("children") or () if (c.get("facts") or {}).get("main")), None)
        if len(steps) < 2:
            return ""
        return f'<p class="hint">main path, {len(steps)} steps</p><ol class="first-screen" data-testid="first-screen">{"".join(steps)}</ol>'
    if kind == "where":
        op = document.get("operator") or {}
        rows = "".join(f"<li>{escape(k.get('key'))}: <b>{escape(k.get('symbol'))}</b></li>" for k in op.get("dispatch") or ())
        source = "".join(f"<li>{escape(s.get('role'))}: <b>{escape(s.get('name'))}</b>{where(s.get('location'))}</li>" for s in document.get("source") or ())
        return (f'<div data-testid="first-screen"><h2>{escape(op.get("name"))}</h2><pre>{escape(op.get("schema"))}</pre>'
                f"<p>yaml{where(op.get('location'))}</p><ul>{rows}</ul><ul>{source}</ul></div>")
    return ""


def fragment(document: dict[str, Any], *, excerpt: Excerpt | None = None, links: dict[str, str] | None = None) -> str:
    """The viewer's mount point and data, without page chrome: what the web app
    puts in its pages. `links` maps link kinds ("source", "stack") to URL
    prefixes the viewer may add beside locations and names."""
    data = view_data(document, excerpt=excerpt)
    if links:
        data["links"] = links
    encoding, text = embedded(data)
    return environment().get_template("fragment.html.j2").render(encoding=encoding, data_json=Markup(text), first=Markup(first_screen(document)))


def render(document: dict[str, Any], *, excerpt: Excerpt | None = None, title: str | None = None, **_: Any) -> str:
    """One self-contained HTML page showing `document` (an answer's JSON
    document, dispatched on its `"kernelmap"` kind)."""
    data = view_data(document, excerpt=excerpt)
    encoding, text = embedded(data)
    return environment().get_template("report.html.j2").render(
        title=title or title_of(document),
        css=Markup(asset("report.css") + "\n" + pygments_css()),
        js=Markup(asset("report.js").replace("</", "<\\/")),
        encoding=encoding,
        data_json=Markup(text),
        first=Markup(first_screen(document)),
    )


def document_of(answer: Any) -> dict[str, Any]:
    """An answer's JSON document: a document as is, else the answer's own
    `to_json()`, a `CallTree`'s `calltree/2`, a trace's `trace/2` (its tree
    and summary), a `where` answer's `where/2`. Duck-typed, so the renderer
    imports no producer."""
    if isinstance(answer, dict):
        return answer
    from kernelmap.model import CallTree
    from kernelmap.render import json as tree_json

    if isinstance(answer, CallTree):
        return tree_json.to_json(answer)
    if isinstance(getattr(answer, "tree", None), CallTree) and callable(getattr(answer, "summary", None)):
        return {"kernelmap": "trace/2", "tree": tree_json.to_json(answer.tree), "summary": answer.summary().to_json()}
    to_json = getattr(answer, "to_json", None)
    if callable(to_json):
        document = to_json()
        kind_of(document)
        return document
    raise BadInput(f"cannot show a {type(answer).__name__} as HTML: it has no JSON document")


def repr_html(answer: Any, *, excerpt: Excerpt | None = None) -> str:
    """The HTML a notebook shows for an answer (what `_repr_html_` returns):
    the page in a sandboxed iframe, so the viewer's script runs isolated
    from the notebook's."""
    import html as html_escape

    page = render(document_of(answer), excerpt=excerpt)
    return (
        '<iframe sandbox="allow-scripts" style="width:100%;height:640px;border:1px solid #ccc" '
        f'srcdoc="{html_escape.escape(page, quote=True)}"></iframe>'
    )


def render_answer(answer: Any, *, excerpt: Excerpt | None = None, title: str | None = None, **_: Any) -> str:
    """The renderer table's HTML entry: any answer, through its document."""
    return render(document_of(answer), excerpt=excerpt, title=title)
