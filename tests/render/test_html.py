"""The HTML renderer without a browser: one self-contained page per answer
document, its embedded data equal to the document, its excerpts equal to
the files they name, every text from the document inert."""

from __future__ import annotations

import html as html_lib
import json
import re

import pytest

from kernelmap.errors import BadInput
from kernelmap.render import html
from tests.web.conftest import (  # noqa: F401 - shared fixtures
    context,
    file_line,
    files,
    generated,
    indexed_tree,
    stack_document,
    walk,
)

EVIL_OP = "aten::<script>alert(1)</script>"
EVIL_KERNEL = '"><img src=x onerror=alert(1)>'


def embedded(page: str) -> dict:
    m = re.search(r'<script type="application/json" class="km-data" data-encoding="([a-z0-9-]+)">(.*?)</script>', page, re.S)
    assert m, "no embedded data"
    return html.embedded_data(m.group(1), m.group(2))


def evil_tree() -> dict:
    loc = {"path": "aten/src/ATen/native/<b>x</b>.cpp", "line": 3, "end_line": None, "origin": None, "url": "javascript:alert(1)"}
    kernel = {"name": EVIL_KERNEL, "kind": "gpu_kernel", "location": None, "via": None, "condition": "</script><script>alert(2)</script>",
              "attrs": {"duration_us": 5.0, "source": "x/<y>.cu:4"}, "children": []}
    op = {"name": EVIL_OP, "kind": "op", "location": loc, "via": "dispatcher", "condition": None,
          "attrs": {"dispatch_key": "<CPU>", "duration_us": 10.0}, "children": [kernel]}
    return {"kernelmap": "calltree/1", "kind": "trace", "notes": ["<i>note</i>"], "meta": {},
            "root": {"name": "trace", "kind": "trace", "location": None, "via": None, "condition": None,
                     "attrs": {"duration_us": 10.0}, "children": [op]}}


def test_page_is_self_contained_and_carries_the_document(stack_document, files):
    page = html.render(stack_document, excerpt=files.excerpt)
    # Nothing is fetched: no external script, stylesheet or image, and a CSP that forbids it.
    assert not re.search(r"<(script|link|img|iframe)[^>]+(src|href)=", page)
    assert "default-src 'none'" in page
    data = embedded(page)
    assert data["view"] == "calltree"
    assert data["document"] == json.loads(json.dumps(stack_document))


def test_excerpts_hold_the_lines_they_name(stack_document, files):
    data = html.view_data(stack_document, excerpt=files.excerpt)
    checked = 0
    for node, _ in walk(stack_document["root"]):
        loc = node.get("location")
        if not loc:
            continue
        shown = data["excerpts"].get(html.location_key(loc))
        if shown is None:
            continue
        # The excerpt's first numbered line is the location's line, holding the file's text.
        text = html_lib.unescape(re.sub(r"<[^>]+>", "", shown))
        first = text.lstrip().split("\n", 1)[0]
        assert first.lstrip().startswith(str(loc["line"])), (loc, first)
        assert file_line(files, loc).strip() in first, (loc, first)
        checked += 1
    assert checked >= 20


def test_every_kind_is_drawn_by_its_view():
    where = {"kernelmap": "where/1", "query": "x", "operator": {"name": "aten::x"}}
    assert html.view_data(where)["view"] == "where"
    assert html.view_data({"kernelmap": "explain/1", "op": "aten::x", "steps": []})["view"] == "explain"
    assert html.view_data({"kernelmap": "verify/1", "report": {}})["view"] == "json"
    assert "kernelmap verify" in html.render({"kernelmap": "verify/1"})


@pytest.mark.parametrize("document", [{}, {"kernelmap": 3}, [], {"root": {}}])
def test_not_a_document_is_refused(document):
    with pytest.raises(BadInput, match="not a kernelmap answer document"):
        html.render(document)


@pytest.mark.parametrize("compress", [False, True])
def test_text_from_the_document_cannot_become_markup(compress, monkeypatch):
    if compress:
        monkeypatch.setattr(html, "COMPRESS_ABOVE", 0)
    doc = evil_tree()
    page = html.render(doc, excerpt=lambda loc: "int x = 1; // </script><img src=x onerror=alert(3)>\n")
    for bad in ("<script>alert", "<img src=x", "<b>x</b>", "<i>note</i>"):
        assert bad not in page, bad
    # The page's own two script elements (data, viewer) and no other.
    assert page.count("<script") == 2 and page.count("</script>") == 2
    data = embedded(page)
    assert data["document"] == doc
    # The excerpt is highlighted and escaped by pygments.
    assert any("&lt;/script&gt;" in e for e in data["excerpts"].values())


def test_generated_code_is_shown_from_its_text():
    loc = {"path": "build/aten/src/ATen/RegisterCPU_0.cpp", "line": 7, "end_line": 8, "origin": "generated", "url": None,
           "text": "at::Tensor wrapper_CPU_add(const at::Tensor & self) {\n  return at::native::add(self);"}
    data = html.view_data({"kernelmap": "gen/1", "op": "aten::add", "schema": loc})
    shown = html_lib.unescape(re.sub(r"<[^>]+>", "", data["excerpts"][html.location_key(loc)]))
    assert re.match(r"\s*7\s*at::Tensor wrapper_CPU_add\(.*\n\s*8\s+return at::native::add", shown)


def test_repr_html_isolates_the_page():
    out = html.repr_html(evil_tree())
    assert out.startswith('<iframe sandbox="allow-scripts"')
    assert "<script" not in out and "<img" not in out


def test_answers_give_their_documents(stack_document):
    """What a notebook's `_repr_html_` shows: the same document as `--json`."""
    from kernelmap import api
    from kernelmap.model import CallTree, CallNode
    from kernelmap.render.json import to_json

    answer = api.where("aten::add.Tensor", static=True)
    assert html.document_of(answer) == answer.to_json()
    tree = CallTree(CallNode("aten::add", "op"))
    assert html.document_of(tree) == to_json(tree)
    assert html.document_of(stack_document) is stack_document
    page = html.repr_html(answer)
    data = embedded(html_lib.unescape(page[page.index('srcdoc="') + 8 : -len('"></iframe>')]))
    assert data["document"] == json.loads(json.dumps(answer.to_json()))
    with pytest.raises(BadInput, match="cannot show a object"):
        html.document_of(object())
