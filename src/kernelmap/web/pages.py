"""Query parameters -> an answer's JSON document, one entry per page of the
web app. Each entry calls one library function and returns the document the
CLI's `--json` prints; the app renders it with the HTML viewer. A new answer
(`path`, `diff`, ...) becomes a page by adding one `Page` to `PAGES`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kernelmap.errors import BadInput


@dataclass(frozen=True)
class Param:
    name: str
    label: str
    default: str = ""
    choices: tuple[str, ...] = ()  # a select box when given
    required: bool = False


@dataclass(frozen=True)
class Page:
    name: str  # the URL path: /NAME
    title: str
    params: tuple[Param, ...]
    produce: Callable[[Mapping[str, str]], dict[str, Any]]  # validated params -> JSON document
    cache: bool = True  # answers depend only on their params and the cache directory


DEVICES = ("cpu", "cuda", "mps", "meta")

# The producers hold SQLite connections and caches that are not meant for
# concurrent use; the app runs one producer call at a time (answers are cached).
PRODUCER_LOCK = threading.Lock()
_CONTEXTS: dict[tuple, Any] = {}


def _context(device: str, source: str | None, **options: Any):
    from kernelmap import graph

    key = (device, source, tuple(sorted(options.items())))
    if key not in _CONTEXTS:
        _CONTEXTS[key] = graph.open_context(device, source=source, **options)
    return _CONTEXTS[key]


def _int(params: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    text = params.get(name) or str(default)
    if not text.isdigit() or not low <= int(text) <= high:
        raise BadInput(f"{name} must be a whole number from {low} to {high}")
    return int(text)


def _source(params: Mapping[str, str]) -> str | None:
    return params.get("source") or None


def where_document(params: Mapping[str, str]) -> dict[str, Any]:
    from kernelmap import api

    answer = api.where(params["name"], device=params.get("device") or "cpu", with_source=True,  # as the CLI's with --device: its source section
                       static=params.get("live") != "live", source=_source(params))
    return answer.to_json()


def stack_document(params: Mapping[str, str]) -> dict[str, Any]:
    from kernelmap import graph
    from kernelmap.render.json import to_json

    from kernelmap.api import with_main_path

    context = _context(params.get("device") or "cpu", _source(params), requires_grad=params.get("requires_grad") == "1")
    return to_json(with_main_path(graph.stack(params["target"], context, _int(params, "depth", graph.DEFAULT_DEPTH, 0, 64))))


def callers_document(params: Mapping[str, str]) -> dict[str, Any]:
    from kernelmap import graph
    from kernelmap.render.json import to_json

    from kernelmap.processors import callers_main_path, mark_main_path

    context = _context("cpu", _source(params), require_tree=True)
    tree = graph.callers(params["symbol"], context, _int(params, "depth", graph.DEFAULT_DEPTH, 0, 64))
    return to_json(mark_main_path(tree, callers_main_path(tree)))


def explain_document(params: Mapping[str, str]) -> dict[str, Any]:
    from kernelmap.graph.explain import explain

    return explain(params["op"], _context(params.get("device") or "cpu", _source(params))).to_json()


def gen_document(params: Mapping[str, str]) -> dict[str, Any]:
    from kernelmap.codegen import Layer, locate

    layer = params.get("layer") or "all"
    layers = list(Layer) if layer == "all" else [Layer(layer)]
    code = locate(params["op"], layers=layers)
    return code.to_json()


def _layers() -> tuple[str, ...]:
    from kernelmap.codegen import Layer

    return ("all", *(x.value for x in Layer))


PAGES: dict[str, Page] = {}


def register(page: Page) -> Page:
    """Add a page (its URL is /NAME)."""
    PAGES[page.name] = page
    return page


register(Page("where", "where", (Param("name", "name", required=True), Param("device", "device", "cpu", DEVICES), Param("live", "dispatcher (live imports torch)", "static", ("static", "live")), Param("source", "source tree", "")), where_document))
register(Page("stack", "stack", (Param("target", "target", required=True), Param("device", "device", "cpu", DEVICES), Param("depth", "depth", ""), Param("source", "source tree", "")), stack_document))
register(Page("callers", "callers", (Param("symbol", "symbol", required=True), Param("depth", "depth", ""), Param("source", "source tree", "")), callers_document))
register(Page("explain", "explain", (Param("op", "operator", required=True), Param("device", "device", "cpu", DEVICES), Param("source", "source tree", "")), explain_document))
register(Page("gen", "gen", (Param("op", "operator", required=True), Param("layer", "layer", "all", _layers())), gen_document))


def produce(page: Page, query: Mapping[str, str]) -> dict[str, Any]:
    """The page's document for `query`; BadInput when a required parameter is
    missing or a choice is not one of its choices."""
    params: dict[str, str] = {}
    for p in page.params:
        value = (query.get(p.name) or p.default).strip()
        if p.required and not value:
            raise BadInput(f"{page.name} needs {p.label}")
        if value and p.choices and value not in p.choices:
            raise BadInput(f"{p.label} must be one of {', '.join(p.choices)}")
        if len(value) > 500:
            raise BadInput(f"{p.label} is too long")
        params[p.name] = value
    with PRODUCER_LOCK:
        return page.produce(params)
