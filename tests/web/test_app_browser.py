"""The running app in headless Chromium: search, a stack page, a node
expanded, a location followed to the source view and a call there to its
definition, a GPU trace imported and a kernel followed to its source."""

from __future__ import annotations

import re

import pytest

from kernelmap.render import html
from tests.web.conftest import GPU_TRACE, apply_search, file_line, pick_hit, screenshot, walk

pytestmark = pytest.mark.slow


def source_line(page) -> tuple[int, str]:
    """(line, text) of the source view's targeted row."""
    m = re.search(r"#L(\d+)$", page.url)
    assert m, page.url
    line = int(m.group(1))
    return line, page.inner_text(f"tr#L{line} td.code")


def test_search_stack_expand_source(page, app_server, files, tmp_path):
    page.goto(app_server.link("/"))
    page.fill("[data-testid=app-search]", "conv2d")
    page.press("[data-testid=app-search]", "Enter")
    page.wait_for_selector("[data-testid=results]")
    names = page.locator("[data-testid=results] tbody tr td:first-child").all_inner_texts()
    assert "torch.conv2d" in names and "conv2d" in names and "at::native::conv2d_symint" in names
    screenshot(page, tmp_path, "app-search")

    # The operator's stack page.
    row = page.locator("[data-testid=results] tbody tr", has=page.locator("td:first-child", has_text=re.compile(r"^conv2d$")))
    row.locator("[data-testid=result-stack]").click()
    page.wait_for_selector("[data-km-ready]")
    assert "/stack?target=conv2d" in page.url

    # Expand a closed node: its children appear.
    closed = page.locator(".node:not(.open) > .row").filter(has=page.locator(".tog", has_text="\u25b8")).first
    closed.locator(".tog").click()
    assert page.locator(".row.sel").locator("xpath=..").locator(":scope > .kids > .node").count() >= 1
    screenshot(page, tmp_path, "app-stack")

    # A C++ location, followed to the source view: the line shown is the file's.
    link = page.locator(".row a.loc-src", has_text=re.compile(r"^aten/src/.*\.cpp:\d+")).first
    path, line = re.match(r"(.*):(\d+)", link.inner_text()).groups()
    link.click()
    page.wait_for_selector("[data-testid=source]")
    shown_line, text = source_line(page)
    assert shown_line == int(line)
    origin = page.evaluate("() => new URLSearchParams(location.search).get('origin')")
    assert text.strip() == file_line(files, {"path": path, "line": int(line), "origin": origin}).strip()
    screenshot(page, tmp_path, "app-source")

    # A call in the source view leads to its definition.
    call = page.locator("a.call").first
    called = call.inner_text()
    call.click()
    page.wait_for_selector("[data-testid=source]")
    _, text = source_line(page)
    assert called in text


def test_trace_import_kernel_to_source(page, app_server, gpu_document, files, tmp_path):
    page.goto(app_server.link("/trace"))
    page.set_input_files("[data-testid=trace-file]", str(GPU_TRACE))
    page.click("[data-testid=trace-submit]")
    page.wait_for_selector("[data-km-ready]")
    assert re.search(r"/trace/[0-9a-f]{32}$", page.url)  # its id in the trace store

    kernel = next(n for n, _ in walk(gpu_document["tree"]["root"])
                  if n["kind"] == "gpu_kernel" and re.search(r":\d+$", n["facts"].get("source") or ""))
    apply_search(page, kernel["facts"]["kernel"])
    pick_hit(page, kernel["name"])
    screenshot(page, tmp_path, "app-trace-kernel")
    page.locator("[data-testid=detail] a.loc-src", has_text=kernel["facts"]["source"]).first.click()
    page.wait_for_selector("[data-testid=source]")
    line, text = source_line(page)
    src = html.source_location(kernel["facts"]["source"])
    assert line == src["line"]
    assert text.strip() == file_line(files, src).strip()
    screenshot(page, tmp_path, "app-trace-source")

    # The GPU kernel's name is now searchable from the app's search box.
    page.goto(app_server.url + "/search?q=" + kernel["facts"]["kernel"].rsplit("::", 1)[-1])  # the cookie the link set lets it in
    kinds = page.locator("[data-testid=results] tbody tr td:nth-child(2)").all_inner_texts()
    assert "GPU kernel" in kinds


@pytest.mark.parametrize(
    "url, marker",
    [
        ("/where?name=aten::add.Tensor", "aten::add.Tensor"),
        ("/explain?op=aten::mul.Tensor", "aten::mul.Tensor"),
        ("/gen?op=aten::conv2d&layer=binding", "THPVariable_conv2d"),
        ("/callers?symbol=cudnnConvolutionForward&depth=3", "cudnnConvolutionForward"),
    ],
)
def test_answer_pages_draw(page, app_server, url, marker, tmp_path):
    page.goto(app_server.link(url))
    page.wait_for_selector("[data-km-ready]")
    assert marker in page.inner_text("[data-km-root]")
    screenshot(page, tmp_path, url.strip("/").split("?")[0])


def test_the_printed_link_works_from_another_page_and_no_other_link_does(page, app_server, tmp_path):
    """A link to the app on another site's page is refused, even where this
    browser holds the token's cookie; the printed link, clicked in another
    page (a terminal in a browser), still lets the user in."""
    other = tmp_path / "other.html"
    other.write_text(f'<!doctype html><a id="plain" href="{app_server.url}/search?q=relu">plain</a> '
                     f'<a id="printed" href="{app_server.link("/search?q=relu")}">printed</a>')
    page.goto(other.as_uri())
    page.click("#plain")
    page.wait_for_selector("[data-testid=refused]")
    assert "requests from other sites are refused" in page.inner_text("body")
    page.goto(other.as_uri())
    page.click("#printed")
    page.wait_for_selector("[data-testid=results]")
    assert page.url == f"{app_server.url}/search?q=relu"
