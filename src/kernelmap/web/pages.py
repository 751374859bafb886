"""Query parameters -> an answer's JSON document, one entry per page of the
web app. Each entry calls one library function and returns the document the
CLI's `--json` prints; the app renders it with the HTML viewer. A new answer
(`path`, `diff`, ...) becomes a page by adding one `Page` to `PAGES`.

Every parameter is checked before a producer sees it (`produce`): a choice
is one of its choices, a number is ASCII digits in its range, a name holds
no control character and no path, and a source tree is one of the
registered trees, by name: a request never names a folder (a tree named by
path would be read, and its code generation run, from wherever it points).
A parameter may bring its own check instead: the impact page's target is a
path relative to the selected tree's root (no `..`, no leading `/` or `~`)
or a name.
"""

from __future__ import annotations

import os
import re
import threading
from collections import OrderedDict
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
    choices_of: Callable[[], tuple[str, ...]] | None = None  # choices known only when asked (the registered trees)
    bounds: tuple[int, int] | None = None  # a whole number in this range
    check: Callable[[str], None] | None = None  # its own check instead of check_name's (BadInput when refused)

    def options(self) -> tuple[str, ...]:
        """The values this parameter may take; () when any text may be given."""
        return self.choices_of() if self.choices_of is not None else self.choices


@dataclass(frozen=True)
class Page:
    name: str  # the URL path: /NAME
    title: str
    params: tuple[Param, ...]
    produce: Callable[[Mapping[str, str]], dict[str, Any]]  # validated params -> JSON document
    cache: bool = True  # answers depend only on their params and the cache directory (`generation()` tells when it changed)


DEVICES = ("cpu", "cuda", "mps", "meta")
MAX_TEXT = 500

# The producers keep caches that were written for one caller at a time; the
# app runs one producer call at a time (answers are cached, and each thread
# reads the databases through its own connection: kernelmap.connections).
PRODUCER_LOCK = threading.Lock()
_CONTEXTS: OrderedDict[tuple, Any] = OrderedDict()
_KEPT_CONTEXTS = 8


def generation() -> tuple:
    """What tells the cache directory's answers apart from those before a
    change: the tree registry, each index, the catalogs and the generated
    files (size, mtime and inode of each, and of the folders they are in, so
    that an index rebuilt and renamed into place is a new generation). A few
    stats: cheap enough for every request."""
    from kernelmap import env

    cache = env.cache_dir()
    out = []
    for path in (cache / "trees.json", cache / "index", cache / "catalog", cache / "codegen"):
        out.append(_stat(path))
    try:
        names = sorted(os.listdir(cache / "index"))
    except OSError:
        names = []
    out.extend(_stat(cache / "index" / n) for n in names if n.endswith((".sqlite", ".json")))
    return tuple(out)


def _stat(path) -> tuple:
    try:
        st = os.stat(path)
    except OSError:
        return (str(path),)
    return (str(path), st.st_ino, st.st_size, st.st_mtime_ns)


def registered_trees() -> tuple[str, ...]:
    """"" (the tree `serve --source` names, or kernelmap's default) and the names of the registered trees."""
    from kernelmap.source.trees import list_trees

    return ("", *(t.name for t in list_trees()))


def _context(device: str, source: str | None, **options: Any):
    """The graph context of these options, opened once per generation of the
    cache (a rebuilt index is opened again, not answered from the old one)."""
    from kernelmap import graph

    key = (generation(), device, source, tuple(sorted(options.items())))
    if key not in _CONTEXTS:
        _CONTEXTS[key] = graph.open_context(device, source=source, **options)
        while len(_CONTEXTS) > _KEPT_CONTEXTS:
            _CONTEXTS.popitem(last=False)
    _CONTEXTS.move_to_end(key)
    return _CONTEXTS[key]


_DIGITS = re.compile(r"[0-9]{1,6}")  # ASCII digits only: str.isdigit() also takes "²" and "٣"
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_PATH = re.compile(r"(?<!operator)[/\\]|^~")  # C++ `operator/` is a name; any other slash, backslash or ~ makes a path


def parse_int(name: str, text: str, low: int, high: int) -> int:
    """`text` as a whole number from `low` to `high`, written in ASCII digits; BadInput otherwise."""
    if not _DIGITS.fullmatch(text) or not low <= int(text) <= high:
        raise BadInput(f"{name} must be a whole number from {low} to {high}")
    return int(text)


def _int(params: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    return parse_int(name, params.get(name) or str(default), low, high)


def check_name(label: str, text: str) -> str:
    """`text` when it can be a name (Python, operator, C++ symbol, kernel);
    BadInput for control characters and paths."""
    if _CONTROL.search(text):
        raise BadInput(f"{label} must not hold control characters")
    if _PATH.search(text):
        raise BadInput(f"{label} is a name, not a path: '/', '\\' and a leading '~' are refused")
    return text


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


_SOURCE = Param("source", "source tree", "", choices_of=registered_trees)
PAGES: dict[str, Page] = {}


def register(page: Page) -> Page:
    """Add a page (its URL is /NAME)."""
    PAGES[page.name] = page
    return page


register(Page("where", "where", (Param("name", "name", required=True), Param("device", "device", "cpu", DEVICES), Param("live", "dispatcher (live imports torch)", "static", ("static", "live")), _SOURCE), where_document))
register(Page("stack", "stack", (Param("target", "target", required=True), Param("device", "device", "cpu", DEVICES), Param("depth", "depth", "", bounds=(0, 64)), _SOURCE), stack_document))
register(Page("callers", "callers", (Param("symbol", "symbol", required=True), Param("depth", "depth", "", bounds=(0, 64)), _SOURCE), callers_document))
register(Page("explain", "explain", (Param("op", "operator", required=True), Param("device", "device", "cpu", DEVICES), _SOURCE), explain_document))
register(Page("gen", "gen", (Param("op", "operator", required=True), Param("layer", "layer", "all", _layers())), gen_document))


_REPO_PATH = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*(?:/[A-Za-z0-9_][A-Za-z0-9_.+-]*)*(?::[0-9]{1,7})?")


def check_repository_path_or_name(label: str, text: str) -> None:
    """A repository path inside the selected tree (`aten/src/ATen/native/BinaryOps.h:70`:
    relative, no `..`, no backslash, no leading `~`), or a name as check_name takes it."""
    if _CONTROL.search(text):
        raise BadInput(f"{label} must not hold control characters")
    if "/" in text and "operator" not in text:
        if not _REPO_PATH.fullmatch(text) or ".." in text.split("/"):
            raise BadInput(f"{label} is a path relative to the tree's root (letters, digits, _ . + - between slashes, then :LINE), or a name")
        return
    check_name(label, text)


def impact_document(params: Mapping[str, str]) -> dict[str, Any]:
    from kernelmap.impact import impact

    return impact(params["target"], device=params.get("device") or "cpu", source=_source(params)).to_json()


register(Page("impact", "impact", (Param("target", "path[:line], symbol or operator", required=True,
                                         check=lambda text: check_repository_path_or_name("path[:line], symbol or operator", text)),
                                   Param("device", "device", "cpu", ("cpu", "cuda", "rocm")), _SOURCE), impact_document))


def produce(page: Page, query: Mapping[str, str], default_source: str | None = None) -> dict[str, Any]:
    """The page's document for `query`; BadInput when a parameter is not one
    the page takes (see the module's docstring). `default_source` is the tree
    of a page that names none (`serve --source`, which may be a path: the
    user gave it on the command line)."""
    params = check(page, query)
    with PRODUCER_LOCK:
        if "source" in params:
            if params["source"]:
                check_choice(_SOURCE, params["source"])  # again, under the lock: a tree removed meanwhile is refused, not looked for as a folder
            else:
                params["source"] = default_source or ""
        return page.produce(params)


def check(page: Page, query: Mapping[str, str]) -> dict[str, str]:
    """The page's parameters from `query`, checked; BadInput for the first bad one."""
    params: dict[str, str] = {}
    for p in page.params:
        value = (query.get(p.name) or p.default).strip()
        if p.required and not value:
            raise BadInput(f"{page.name} needs {p.label}")
        if len(value) > MAX_TEXT:
            raise BadInput(f"{p.label} is too long")
        if value:
            check_choice(p, value)
            if p.bounds is not None:
                parse_int(p.name, value, *p.bounds)
            elif p.check is not None:
                p.check(value)
            elif not p.options():
                check_name(p.label, value)
        params[p.name] = value
    return params


def check_choice(p: Param, value: str) -> None:
    options = p.options()
    if options and value not in options:
        shown = ", ".join(o for o in options if o)
        if p.choices_of is registered_trees:
            raise BadInput(f"{p.label} {value[:200]!r} is not a registered tree: it must be a registered tree, by name: {shown or 'none is registered'}")
        raise BadInput(f"{p.label} must be one of {shown}")
