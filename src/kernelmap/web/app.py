"""The local web app: HTTP requests -> pages over the library's answers.

A search box over every kind of name (Python entry points and operators from
the catalog, C++ symbols and stubs from the index, GPU kernel names of the
traces imported in this session); one page per answer (`pages.PAGES`: where,
stack, callers, explain, gen), drawn by the HTML report's viewer from the
same JSON document; a source viewer over the registered trees, the
generated-code cache and the installed wheel (line anchors, highlighting,
calls linked to their definitions through the index); trace import by upload
or path, shown with the report's trace views.

Safety: files are served only from those roots (`files.SourceFiles`); every
text is escaped by Jinja2's autoescape or set as text by the viewer; each
response carries a Content-Security-Policy that allows scripts and styles
from the app alone; uploads beyond `max_upload` bytes are refused with 413.
"""

from __future__ import annotations

import html as html_escape
import secrets
import tempfile
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from markupsafe import Markup
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from kernelmap.errors import BadInput, KernelmapError
from kernelmap.render import html as report
from kernelmap.web import pages
from kernelmap.web.files import FileRefused, SourceFiles

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
}
DEFAULT_MAX_UPLOAD = 256 * 1024 * 1024
STATIC = {"report.js": "text/javascript", "app.js": "text/javascript", "report.css": "text/css"}
LINKS = {"source": "/source", "stack": "/stack"}


class SecurityHeaders:
    """ASGI middleware adding the security headers to every response."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def send_with_headers(message):
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", []) if k.decode().lower() not in {h.lower() for h in SECURITY_HEADERS}]
                headers += [(k.lower().encode(), v.encode()) for k, v in SECURITY_HEADERS.items()]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)


class PageCache:
    """The last rendered pages by URL: a warm page is served without calling
    the producers or pygments again."""

    def __init__(self, size: int = 256):
        self.size = size
        self._pages: OrderedDict[str, str] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> str | None:
        with self._lock:
            page = self._pages.get(key)
            if page is not None:
                self._pages.move_to_end(key)
            return page

    def put(self, key: str, page: str) -> None:
        with self._lock:
            self._pages[key] = page
            self._pages.move_to_end(key)
            while len(self._pages) > self.size:
                self._pages.popitem(last=False)


class Traces:
    """Traces imported in this session: id -> JSON document, and the GPU
    kernel names they hold (for the search box)."""

    def __init__(self) -> None:
        self.documents: dict[str, dict[str, Any]] = {}
        self.kernels: dict[str, str] = {}  # kernel name -> trace id
        self.names: dict[str, str] = {}  # trace id -> what was imported

    def add(self, document: dict[str, Any], name: str) -> str:
        tid = secrets.token_hex(8)
        self.documents[tid] = document
        self.names[tid] = name
        stack = [(document.get("tree") or {}).get("root") or {}]
        while stack:
            node = stack.pop()
            if node.get("kind") in ("gpu_kernel", "kernel"):
                self.kernels.setdefault(str(node.get("name")), tid)
            stack.extend(node.get("children") or ())
        return tid


def create_app(files: SourceFiles | None = None, *, max_upload: int = DEFAULT_MAX_UPLOAD, source: str | None = None) -> Starlette:
    """The app. `files` defaults to every registered tree, the generated-code
    cache and the installed wheel; `source` names the tree for traces and
    the answer pages' default tree."""
    files = files or SourceFiles.discover()
    env = report.environment()
    cache = PageCache()
    traces = Traces()

    def page(template: str, status: int = 200, **context: Any) -> HTMLResponse:
        context.setdefault("pages", pages.PAGES)
        context.setdefault("query", "")
        return HTMLResponse(env.get_template(template).render(**context), status_code=status)

    def error(message: str, status: int = 400) -> HTMLResponse:
        return page("app_error.html.j2", status, title="kernelmap: error", message=message)

    def excerpt(location: dict[str, Any]) -> str | None:
        return files.excerpt(location)

    async def home(request: Request) -> Response:
        return page("app_home.html.j2", title="kernelmap", traces=traces.names)

    async def static(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in STATIC:
            return error("no such file", 404)
        text = report.asset(name)
        if name == "report.css":
            text += "\n" + report.pygments_css()
        return Response(text, media_type=STATIC[name], headers={"Cache-Control": "max-age=300"})

    def answer_page(name: str):
        spec = pages.PAGES[name]

        def endpoint(request: Request) -> Response:
            key = str(request.url.path) + "?" + str(request.url.query)
            cached = cache.get(key) if spec.cache else None
            if cached is not None:
                return HTMLResponse(cached)
            query = {p.name: request.query_params.get(p.name, "") for p in spec.params}
            if source and "source" in query and not query["source"]:  # the tree `serve --source` names, unless the page names one
                query["source"] = source
            if not any(query[p.name] for p in spec.params if p.required):
                return page("app_answer.html.j2", title=f"kernelmap {spec.title}", spec=spec, values=query, view=None)
            try:
                document = pages.produce(spec, query)
            except (KernelmapError, OSError) as e:  # OSError: the machine's (a name too long for a path), a page not a 500
                message = str(e) if isinstance(e, KernelmapError) else f"{e.strerror or e}"
                return page("app_answer.html.j2", 400, title=f"kernelmap {spec.title}", spec=spec, values=query, view=None, message=message)
            view = Markup(report.fragment(document, excerpt=excerpt, links=LINKS))
            text = env.get_template("app_answer.html.j2").render(
                title=report.title_of(document), spec=spec, values=query, view=view, pages=pages.PAGES, query=""
            )
            if spec.cache:
                cache.put(key, text)
            return HTMLResponse(text)

        return endpoint

    # -- search ------------------------------------------------------------

    def suggestions(text: str, limit: int = 40) -> list[dict[str, str]]:
        text = text.strip()
        if not text:
            return []
        if len(text) > 200:
            raise BadInput("search text is too long")
        out: list[dict[str, str]] = []
        low = text.lower()
        with pages.PRODUCER_LOCK:
            from kernelmap.catalog import load_catalog

            catalog = load_catalog()
            python = sorted((n for n in catalog.entry_points() if low in n.lower()), key=lambda n: (len(n), n))
            ops = sorted((n for n in catalog.qualified_names() if low in n.lower()), key=lambda n: (len(n), n))
            cpp: list[str] = []
            if len(text) >= 3:
                cpp = _index_search(files, text)
        def add(name: str, kind: str, primary: str, **links: str) -> None:
            out.append({"name": name, "kind": kind, "url": links[primary], "links": links})

        if ("." in text or "::" in text) and text not in python and text not in ops:
            # A full name the catalog lists under another spelling (torch.nn.Conv2d).
            add(text, "as typed", "stack", stack="/stack?" + urlencode({"target": text}), where="/where?" + urlencode({"name": text}))
        for n in python[:10]:
            add(n, "python", "stack", stack="/stack?" + urlencode({"target": n}), where="/where?" + urlencode({"name": n}))
        for n in ops[:12]:
            add(n, "operator", "where", where="/where?" + urlencode({"name": n}), stack="/stack?" + urlencode({"target": n}),
                explain="/explain?" + urlencode({"op": n}), gen="/gen?" + urlencode({"op": n}))
        for n in cpp[:12]:
            add(n, "stub" if n.endswith("_stub") else "C++", "source", source="/goto?" + urlencode({"name": n}),
                stack="/stack?" + urlencode({"target": n}), callers="/callers?" + urlencode({"symbol": n}))
        for n, tid in traces.kernels.items():
            if low in n.lower() and len(out) < limit:
                add(n, "GPU kernel", "trace", trace=f"/trace/{tid}")
        return out[:limit]

    async def suggest(request: Request) -> Response:
        try:
            return JSONResponse(suggestions(request.query_params.get("q", "")))
        except KernelmapError as e:
            return JSONResponse({"error": str(e)}, status_code=400)

    def search(request: Request) -> Response:
        q = request.query_params.get("q", "")
        try:
            results = suggestions(q, limit=80)
        except KernelmapError as e:
            return error(str(e))
        return page("app_search.html.j2", title=f"kernelmap: {q}", query=q, results=results)

    # -- source ------------------------------------------------------------

    def source_view(request: Request) -> Response:
        q = request.query_params
        path = q.get("path", "")
        try:
            root_name = q.get("root") or _root_of(files, path, q.get("origin"))
            opened = files.open(root_name, path)
        except FileRefused as e:
            return error(str(e), 404)
        calls = _calls_in(files, root_name, path)
        rows = _source_rows(opened.text, path, calls, root_name)
        return page("app_source.html.j2", title=f"{path}", path=path, root=root_name, rows=rows, line=q.get("line", ""))

    def goto(request: Request) -> Response:
        """A name (a call in the source view, a C++ search result) -> its
        definition in the source view, or its operator's page."""
        name = request.query_params.get("name", "").strip()
        root_name = request.query_params.get("root") or files.default_tree
        op = request.query_params.get("op")
        if not name:
            return error("goto needs a name")
        found = _definition(files, root_name, name)
        if found is not None:
            r, path, line = found
            return RedirectResponse(f"/source?{urlencode({'root': r, 'path': path, 'line': line})}#L{line}", status_code=303)
        if op:
            return RedirectResponse("/where?" + urlencode({"name": op}), status_code=303)
        return error(f"no definition of {name!r} in the index", 404)

    # -- traces ------------------------------------------------------------

    def trace_form(request: Request) -> Response:
        return page("app_trace.html.j2", title="kernelmap: import a trace", max_mb=max_upload // (1024 * 1024), traces=traces.names)

    async def trace_import(request: Request) -> Response:
        length = request.headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > max_upload):
            return error(f"the upload is larger than the limit of {max_upload // (1024 * 1024)} MB", 413)
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > max_upload:
                return error(f"the upload is larger than the limit of {max_upload // (1024 * 1024)} MB", 413)
        replay = Request(request.scope, _replay(bytes(body)))
        form = await replay.form(max_files=1, max_fields=4, max_part_size=max_upload)
        upload = form.get("file")
        path_text = str(form.get("path") or "").strip()
        try:
            if upload is not None and getattr(upload, "filename", None):
                data = await upload.read()
                suffix = ".json.gz" if data[:2] == b"\x1f\x8b" else ".json"
                with tempfile.TemporaryDirectory(prefix="kernelmap-upload-") as d:
                    target = Path(d) / f"upload{suffix}"
                    target.write_bytes(data)
                    document = _trace_document(target, source)
                name = str(upload.filename)
            elif path_text:
                target = Path(path_text).expanduser()
                try:
                    is_file = target.is_file()
                except (OSError, ValueError):  # a name too long for the OS, a NUL
                    is_file = False
                if not is_file:
                    raise BadInput(f"no such trace file: {path_text[:300]}")
                document = _trace_document(target, source)
                name = target.name
            else:
                raise BadInput("choose a trace file to upload, or give its path")
        except KernelmapError as e:
            return error(f"cannot import the trace: {e}")
        tid = traces.add(document, name)
        return RedirectResponse(f"/trace/{tid}", status_code=303)

    def trace_view(request: Request) -> Response:
        tid = request.path_params["tid"]
        document = traces.documents.get(tid)
        if document is None:
            return error("no such trace in this session", 404)
        key = f"/trace/{tid}"
        cached = cache.get(key)
        if cached is None:
            view = Markup(report.fragment(document, excerpt=excerpt, links=LINKS))
            cached = env.get_template("app_view.html.j2").render(title=report.title_of(document), view=view, pages=pages.PAGES, query="")
            cache.put(key, cached)
        return HTMLResponse(cached)

    routes = [
        Route("/", home),
        Route("/static/{name}", static),
        Route("/api/suggest", suggest),
        Route("/search", search),
        Route("/source", source_view),
        Route("/goto", goto),
        Route("/trace", trace_form, methods=["GET"]),
        Route("/trace", trace_import, methods=["POST"]),
        Route("/trace/{tid}", trace_view),
    ]
    routes += [Route(f"/{name}", answer_page(name)) for name in pages.PAGES]
    app = Starlette(routes=routes, middleware=[Middleware(SecurityHeaders)])
    app.state.files = files
    app.state.traces = traces
    return app


def _replay(body: bytes):
    sent = False

    async def receive():
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return receive


def _trace_document(path: Path, source: str | None) -> dict[str, Any]:
    from kernelmap import trace as tracing
    from kernelmap.render.json import to_json

    t = tracing.load(path, source_tree=source)
    return {"kernelmap": "trace/2", "tree": to_json(t.tree), "summary": t.summary().to_json()}


def _root_of(files: SourceFiles, path: str, origin: str | None) -> str:
    root = files.root_for({"path": path, "origin": origin or None})
    if root is None:
        raise FileRefused(f"no served root holds files of {origin or 'this origin'}")
    return root.name


def _open_index(files: SourceFiles, root_name: str | None):
    if not root_name or not root_name.startswith("tree:"):
        return None
    from kernelmap.source import get_tree
    from kernelmap.source.index import open_index

    try:
        return open_index(get_tree(root_name[len("tree:") :]))
    except KernelmapError:
        return None


def _index_search(files: SourceFiles, text: str) -> list[str]:
    index = _open_index(files, files.default_tree)
    if index is None:
        return []
    with index:
        try:
            return index.search(text, limit=20)
        except KernelmapError:
            return []


def _definition(files: SourceFiles, root_name: str | None, name: str) -> tuple[str, str, int] | None:
    index = _open_index(files, root_name)
    if index is None:
        return None
    with index:
        for candidate in (name, name.rsplit("::", 1)[-1]):
            try:
                found = index.definitions(candidate)
            except KernelmapError:
                found = []
            if found:
                loc = _as_built(files, root_name, found).location
                return root_name, loc.path, loc.line
    return None


def _as_built(files: SourceFiles, root_name: str | None, found: list):
    """Of a name's definitions, the one a release build compiles: the CUDA
    build's first (it compiles the most: Conv_v8.cpp's
    raw_cudnn_convolution_forward_out under `#if AT_CUDNN_ENABLED()`, not
    ConvPlaceholders.cpp's under `#if !AT_CUDNN_ENABLED()`), then the CPU
    build's, then the first found."""
    root = files.roots.get(root_name or "")
    if len(found) < 2 or root is None:
        return found[0]
    from kernelmap.source.config import build_config

    try:
        builds = [build_config(root.directory, device) for device in ("cuda", "cpu")]
    except (OSError, ValueError, KernelmapError):
        return found[0]
    return min(found, key=lambda d: tuple(b.evaluate(d.symbol.condition) is not True for b in builds))


def _calls_in(files: SourceFiles, root_name: str, path: str) -> dict[int, list[tuple[str, str, str | None]]]:
    """Line -> (name as written, callee, operator) of the calls the index
    knows in `path`, for linking them in the source view."""
    index = _open_index(files, root_name)
    if index is None:
        return {}
    out: dict[int, list[tuple[str, str, str | None]]] = {}
    with index:
        for definition in index.definitions_in(path):
            for call in index.calls_from(definition):
                if call.location.path == path:
                    out.setdefault(call.location.line, []).append((call.name, call.callee, call.op))
    return out


def _source_rows(text: str, path: str, calls: dict[int, list[tuple[str, str, str | None]]], root_name: str) -> list[Markup]:
    """Each line of `text` as highlighted HTML (pygments tokens, escaped),
    with the names of known calls linked to /goto."""
    from pygments import lex
    from pygments.lexers import get_lexer_for_filename
    from pygments.lexers.special import TextLexer
    from pygments.token import STANDARD_TYPES, Name
    from pygments.util import ClassNotFound

    if path.endswith((".cu", ".cuh")):
        from pygments.lexers import CudaLexer

        lexer = CudaLexer(stripnl=False, ensurenl=False)
    else:
        try:
            lexer = get_lexer_for_filename(path, stripnl=False, ensurenl=False)
        except ClassNotFound:
            lexer = TextLexer(stripnl=False, ensurenl=False)
    if len(text) > 2_000_000:  # very large generated files: plain text is fast
        lexer = TextLexer(stripnl=False, ensurenl=False)
    rows: list[str] = []
    current: list[str] = []
    line = 1
    for ttype, value in lex(text, lexer):
        parts = value.split("\n")
        for i, part in enumerate(parts):
            if i:
                rows.append("".join(current))
                current = []
                line += 1
            if not part:
                continue
            escaped = html_escape.escape(part, quote=True)
            linked = next((c for c in calls.get(line, ()) if c[0] == part), None) if ttype in Name else None
            t = ttype
            while t not in STANDARD_TYPES:
                t = t.parent
            cls = STANDARD_TYPES.get(t, "")
            span = f'<span class="{cls}">{escaped}</span>' if cls else escaped
            if linked is not None:
                query = urlencode({"name": linked[1].lstrip("."), "root": root_name, **({"op": linked[2]} if linked[2] else {})})
                span = f'<a class="call" href="/goto?{html_escape.escape(query, quote=True)}" data-km-call="{escaped}">{span}</a>'
            current.append(span)
    rows.append("".join(current))
    return [Markup(r) for r in rows]

