"""The local web app: HTTP requests -> pages over the library's answers.

A search box over every kind of name (Python entry points and operators from
the catalog, C++ symbols and stubs from the index, GPU kernel names of the
traces imported in this session); one page per answer (`pages.PAGES`: where,
stack, callers, explain, gen), drawn by the HTML report's viewer from the
same JSON document; a source viewer over the registered trees, the
generated-code cache and the installed wheel (line anchors, highlighting,
calls linked to their definitions through the index); trace import by
upload into the trace store, each trace's page opened from its tables by id
(its summary and hottest nodes; a folded part of its tree opens on its own
page, `/trace/ID/node/N`).

Safety:
- who may ask: `guard.Guard` refuses foreign hosts (DNS rebinding), other
  sites' pages (Origin, Sec-Fetch-Site) and requests without this launch's
  token, before any route runs;
- what they may name: files only under the served roots (`files.SourceFiles`),
  source trees only by registered name (`pages.produce`), traces only by
  upload (a path on this machine is the CLI's to give), and opened only by
  their store id (32 hex digits; anything else is a 404);
- what it costs: long work runs in a bounded pool with a timeout
  (`work.Work`), never on the event loop; pages and the session's traces are
  kept in stores bounded by count and bytes (`store`), imported traces in
  the trace store, bounded by bytes (`kernelmap.trace.store`); an upload beyond
  `max_upload` bytes, packed or unpacked, is refused with 413; the body must
  arrive within `BODY_TIMEOUT` seconds;
- what it shows: every text is escaped by Jinja2's autoescape or set as text
  by the viewer; each response carries a Content-Security-Policy that allows
  scripts and styles from the app alone;
- what it answers from: the cache directory as it is now: pages, graph
  contexts and the served roots are keyed on its generation
  (`pages.generation`), so a rebuilt index is read, not an old one.
"""

from __future__ import annotations

import asyncio
import html as html_escape
import re
import secrets
import tempfile
import threading
from collections.abc import Callable, Iterable
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
from kernelmap.web.guard import Guard
from kernelmap.web.store import Pages, TooLarge, Traces, unpack_to
from kernelmap.web.work import Busy, TooSlow, Work

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",  # no-referrer would make a form's POST send `Origin: null`, which the guard refuses
    "X-Frame-Options": "DENY",
    "Cross-Origin-Resource-Policy": "same-origin",
}
DEFAULT_MAX_UPLOAD = 256 * 1024 * 1024
BODY_TIMEOUT = 120.0  # seconds an upload may take to arrive
STATIC = {"report.js": "text/javascript", "app.js": "text/javascript", "report.css": "text/css"}
LINKS = {"source": "/source", "stack": "/stack"}
_LENGTH = re.compile(r"[0-9]{1,20}")
_TRACE_ID = re.compile(r"[0-9a-f]{32}")  # a trace store id (kernelmap.trace.store.content_id)
_NODE = re.compile(r"[0-9]{1,12}")


class SecurityHeaders:
    """ASGI middleware adding the security headers to every response."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        ours = {h.lower() for h in SECURITY_HEADERS}

        async def send_with_headers(message):
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", []) if k.decode().lower() not in ours]
                headers += [(k.lower().encode(), v.encode()) for k, v in SECURITY_HEADERS.items()]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)


class _Roots:
    """The served roots: given once, or discovered again whenever the cache
    directory's generation changes (a tree added, an index rebuilt)."""

    def __init__(self, files: SourceFiles | None):
        self._fixed = files
        self._lock = threading.Lock()
        self._seen: tuple | None = None
        self._files = files

    def current(self, generation: tuple) -> SourceFiles:
        if self._fixed is not None:
            return self._fixed
        with self._lock:
            if self._files is None or generation != self._seen:
                self._files, self._seen = SourceFiles.discover(), generation
            return self._files


def create_app(
    files: SourceFiles | None = None,
    *,
    max_upload: int = DEFAULT_MAX_UPLOAD,
    source: str | None = None,
    token: str | None = None,
    hosts: Iterable[str] = (),
    work: Work | None = None,
    traces: Traces | None = None,
) -> Starlette:
    """The app. `files` defaults to every registered tree, the generated-code
    cache and the installed wheel (found again when the cache changes);
    `source` names the tree for traces and the answer pages' default tree.
    `token` is the one every request must carry (a new random one by
    default: `app.state.token`); `hosts` are names the app answers to beyond
    the loopback ones (`guard`). `work` and `traces` bound the work in hand
    and the traces kept (`work.Work`, `store.Traces`)."""
    token = token or secrets.token_urlsafe(32)
    roots = _Roots(files)
    env = report.environment()
    cache = Pages(count=256, size=128 * 1024 * 1024)
    traces = traces if traces is not None else Traces()
    work = work or Work()
    assets = {name: _asset(name) for name in STATIC}

    def render(template: str, **context: Any) -> str:
        context.setdefault("pages", pages.PAGES)
        context.setdefault("query", "")
        return env.get_template(template).render(**context)

    def page(template: str, status: int = 200, **context: Any) -> HTMLResponse:
        return HTMLResponse(render(template, **context), status_code=status)

    def error(message: str, status: int = 400) -> HTMLResponse:
        from kernelmap.printable import shortened_line

        headers = {"Retry-After": "5"} if status == 503 else None
        return HTMLResponse(render("app_error.html.j2", title="kernelmap: error", message=shortened_line(message)), status_code=status, headers=headers)

    async def offload(fn: Callable[[], Response], key: str | None = None) -> Response:
        """`fn()` in the pool: its response, or the error page of a domain error."""
        try:
            return await work.run(fn, key)
        except (Busy, TooSlow) as e:
            return error(str(e), 503)

    def generation_key(request: Request) -> tuple[tuple, str]:
        generation = pages.generation()
        return generation, f"{hash(generation):x}|{request.url.path}?{request.url.query}"

    async def home(request: Request) -> Response:
        return page("app_home.html.j2", title="kernelmap", traces=traces.names())

    async def static(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in STATIC:
            return error("no such file", 404)
        return Response(assets[name], media_type=STATIC[name], headers={"Cache-Control": "max-age=300"})

    def answer_page(name: str):
        spec = pages.PAGES[name]

        async def endpoint(request: Request) -> Response:
            generation, key = generation_key(request)
            cached = cache.get(key) if spec.cache else None
            if cached is not None:
                return HTMLResponse(cached)
            query = {p.name: request.query_params.get(p.name, "") for p in spec.params}
            if not any(query[p.name] for p in spec.params if p.required):
                return page("app_answer.html.j2", title=f"kernelmap {spec.title}", spec=spec, values=query, view=None)
            try:
                pages.check(spec, query)  # a bad parameter takes no place in the pool
            except KernelmapError as e:
                return page("app_answer.html.j2", 400, title=f"kernelmap {spec.title}", spec=spec, values=query, view=None, message=str(e))

            def answer() -> Response:
                files = roots.current(generation)
                try:
                    document = pages.produce(spec, query, default_source=source)
                except (KernelmapError, OSError) as e:  # OSError: the machine's (a name too long for a path), a page not a 500
                    message = str(e) if isinstance(e, KernelmapError) else f"{e.strerror or e}"
                    return page("app_answer.html.j2", 400, title=f"kernelmap {spec.title}", spec=spec, values=query, view=None, message=message)
                view = Markup(report.fragment(document, excerpt=files.excerpt, links=LINKS))
                text = render("app_answer.html.j2", title=report.title_of(document), spec=spec, values=query, view=view)
                return HTMLResponse(cache.put_text(key, text) if spec.cache else text)

            return await offload(answer, key)

        return endpoint

    # -- search ------------------------------------------------------------

    def suggestions(text: str, files: SourceFiles, limit: int = 40) -> list[dict[str, str]]:
        text = text.strip()
        if not text:
            return []
        if len(text) > 200:
            raise BadInput("search text is too long")
        out: list[dict[str, str]] = []
        low = text.lower()
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
        for n, tid in traces.kernels():  # from each trace's summary, kept when it was imported
            if low in n.lower() and len(out) < limit:
                add(n, "GPU kernel", "trace", trace=f"/trace/{tid}")
        return out[:limit]

    async def suggest(request: Request) -> Response:
        q = request.query_params.get("q", "")
        generation = pages.generation()

        def answer() -> Response:
            try:
                return JSONResponse(suggestions(q, roots.current(generation)))
            except KernelmapError as e:
                return JSONResponse({"error": str(e)}, status_code=400)

        try:
            return await work.run(answer)
        except (Busy, TooSlow) as e:
            return JSONResponse({"error": str(e)}, status_code=503, headers={"Retry-After": "5"})

    async def search(request: Request) -> Response:
        q = request.query_params.get("q", "")
        generation = pages.generation()

        def answer() -> Response:
            try:
                results = suggestions(q, roots.current(generation), limit=80)
            except KernelmapError as e:
                return error(str(e))
            return page("app_search.html.j2", title=f"kernelmap: {q}", query=q, results=results)

        return await offload(answer)

    # -- source ------------------------------------------------------------

    async def source_view(request: Request) -> Response:
        q = request.query_params
        path = q.get("path", "")
        generation = pages.generation()

        def answer() -> Response:
            files = roots.current(generation)
            try:
                root_name = q.get("root") or _root_of(files, path, q.get("origin"))
                opened = files.open(root_name, path)
            except FileRefused as e:
                return error(str(e), 404)
            calls = _calls_in(files, root_name, path)
            rows = _source_rows(opened.text, path, calls, root_name)
            return page("app_source.html.j2", title=f"{path}", path=path, root=root_name, rows=rows)

        return await offload(answer)

    async def goto(request: Request) -> Response:
        """A name (a call in the source view, a C++ search result) -> its
        definition in the source view, or its operator's page."""
        name = request.query_params.get("name", "").strip()
        op = request.query_params.get("op")
        if not name:
            return error("goto needs a name")
        if len(name) > pages.MAX_TEXT:
            return error("the name is too long")
        generation = pages.generation()

        def answer() -> Response:
            files = roots.current(generation)
            root_name = request.query_params.get("root") or files.default_tree
            if root_name is not None and root_name not in files.roots:
                return error(f"no such root: {root_name[:200]!r}", 404)
            found = _definition(files, root_name, name)
            if found is not None:
                r, path, line = found
                return RedirectResponse(f"/source?{urlencode({'root': r, 'path': path, 'line': line})}#L{line}", status_code=303)
            if op:
                return RedirectResponse("/where?" + urlencode({"name": op}), status_code=303)
            return error(f"no definition of {name[:200]!r} in the index", 404)

        return await offload(answer)

    # -- traces ------------------------------------------------------------

    def limit_text() -> str:
        return f"the upload is larger than the limit of {max_upload // (1024 * 1024)} MB"

    async def trace_form(request: Request) -> Response:
        return page("app_trace.html.j2", title="kernelmap: import a trace", max_mb=max_upload // (1024 * 1024), traces=traces.names())

    async def trace_import(request: Request) -> Response:
        length = request.headers.get("content-length")
        if length is not None and (not _LENGTH.fullmatch(length) or int(length) > max_upload):
            return error(limit_text(), 413)
        received = 0

        async def counted():
            nonlocal received
            message = await request.receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > max_upload:
                    raise TooLarge(limit_text())
            return message

        counting = Request(request.scope, counted)
        try:
            form = await asyncio.wait_for(counting.form(max_files=1, max_fields=4, max_part_size=64 * 1024), BODY_TIMEOUT)
        except TooLarge as e:
            return error(str(e), 413)
        except asyncio.TimeoutError:
            return error(f"the upload did not arrive within {BODY_TIMEOUT:g} s", 408)
        except Exception as e:  # noqa: BLE001 - Starlette's form parser raises its own and python-multipart's errors
            return error(f"cannot read the upload: {str(e)[:200]}")
        upload = form.get("file")
        if "path" in form:
            await form.close()
            return error("traces are imported by upload here; to import a file by its path, use `kernelmap trace FILE` on the command line")
        if upload is None or not getattr(upload, "filename", None):
            await form.close()
            return error("choose a trace file to upload")
        name = str(upload.filename)[:300]

        def imported() -> Response:
            try:
                try:
                    tid = _import_trace(upload.file, name, max_upload, source, traces, env, roots.current(pages.generation()))
                finally:
                    upload.file.close()
            except TooLarge as e:
                return error(str(e), 413)
            except KernelmapError as e:
                return error(f"cannot import the trace: {e}")
            return RedirectResponse(f"/trace/{tid}", status_code=303)

        return await offload(imported)

    async def trace_view(request: Request) -> Response:
        return await trace_page(request.path_params["tid"], None)

    async def trace_node(request: Request) -> Response:
        return await trace_page(request.path_params["tid"], request.path_params["node"])

    async def trace_page(tid: str, node: str | None) -> Response:
        """A stored trace's page (its summary and bounded tree), or the bounded
        tree of one of its nodes, opened from the trace store by id."""
        if not _TRACE_ID.fullmatch(tid) or (node is not None and not _NODE.fullmatch(node)):
            return error("no such trace (a trace is named by its 32 hex digits)", 404)
        generation = pages.generation()
        key = f"{hash(generation):x}|trace|{tid}|{node}"
        cached = cache.get(key)
        if cached is not None:
            return HTMLResponse(cached)

        def answer() -> Response:
            try:
                text = _trace_page(tid, None if node is None else int(node), source, env, roots.current(generation))
            except BadInput as e:
                return error(str(e), 404)
            return HTMLResponse(cache.put_text(key, text))

        return await offload(answer, key)

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
        Route("/trace/{tid}/node/{node}", trace_node),
    ]
    routes += [Route(f"/{name}", answer_page(name)) for name in pages.PAGES]
    hosts = tuple(hosts)
    app = Starlette(routes=routes, middleware=[Middleware(SecurityHeaders), Middleware(Guard, token=token, hosts=hosts)])
    app.state.files = files
    app.state.traces = traces
    app.state.work = work
    app.state.token = token
    app.state.pages = cache
    return app


def _asset(name: str) -> bytes:
    text = report.asset(name)
    if name == "report.css":
        text += "\n" + report.pygments_css()
    return text.encode()


def _import_trace(file, name: str, limit: int, source: str | None, traces: Traces, env, files: SourceFiles) -> str:
    """An uploaded trace (its bytes in `file`) -> its tables in the trace
    store, and its name and kernel names in `traces`; the trace's store id.
    An error names the upload, never this machine's temporary file."""
    from kernelmap.trace import store

    with tempfile.TemporaryDirectory(prefix="kernelmap-upload-") as d:
        target = Path(d) / "upload.json"
        unpack_to(file, target, limit)
        try:
            t = store.load(target, source_tree=source, memo=False)
        except KernelmapError as e:
            raise BadInput(str(e).replace(str(target), name).replace(target.name, name)[:400]) from None
        if t.id is None:
            raise BadInput("the trace was read, but the cache folder cannot be written to keep it")
        kernels = _kernel_names(t.summary())
    return traces.add(t.id, name, kernels)


def _kernel_names(summary) -> list[str]:
    """The GPU kernel names a trace's summary lists: those of each operator, and the unresolved ones."""
    names = [k for row in summary.ops for k in row.kernels]
    names += list(summary.gpu.unresolved)
    return names


def _trace_page(tid: str, node: int | None, source: str | None, env, files: SourceFiles) -> str:
    """The page of a stored trace: its summary and bounded tree, or the
    bounded tree of its node `node` (views.node_tree)."""
    from kernelmap.trace import store, views

    trace = store.open_stored(tid, source_tree=source)
    if node is None:
        document = {"kernelmap": "trace/2", "tree": views.hot_tree(trace).to_json(), "summary": trace.summary().to_json()}
    else:
        document = {"kernelmap": "trace/2", "tree": views.node_tree(trace, node).to_json(), "summary": None}
    del trace
    view = Markup(report.fragment(document, excerpt=files.excerpt, links={**LINKS, "expand": f"/trace/{tid}/node"}))
    return env.get_template("app_view.html.j2").render(title=report.title_of(document), view=view, pages=pages.PAGES, query="")


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

