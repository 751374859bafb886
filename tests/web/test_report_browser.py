"""HTML reports opened in headless Chromium: the ResNet-50 trace, a real GPU
trace, and `stack torch.nn.Conv2d --device cuda`. Each test clicks through
the page as a user would and saves a screenshot in its output folder."""

from __future__ import annotations

import re

import pytest

from kernelmap.render import html
from tests.web.conftest import apply_search, file_line, pick_hit, screenshot, walk

pytestmark = pytest.mark.slow


def open_report(page, document, files, tmp_path, name):
    out = tmp_path / f"{name}.html"
    out.write_text(html.render(document, excerpt=files.excerpt))
    page.goto(out.as_uri())
    page.wait_for_selector("[data-km-ready]")
    return out


def detail_text(page) -> str:
    return page.inner_text("[data-testid=detail]")


def search_and_pick(page, text):
    apply_search(page, text)
    page.locator(".row.hit").first.click()


def test_resnet50_trace_report(page, resnet_document, files, tmp_path):
    out = open_report(page, resnet_document, files, tmp_path, "resnet50-trace")
    assert out.stat().st_size < 3 * 1024 * 1024
    screenshot(page, tmp_path, "resnet50-tree")

    # The operators table sorts by total time: the first row is the largest total.
    ops = resnet_document["summary"]["ops"]
    page.click("[data-testid=tab-operators]")
    table = page.locator("[data-testid=pane-operators] table.sortable")
    header = table.locator("th", has_text="total")
    header.click()
    first = table.locator("tbody tr").first.locator("td").first.inner_text()
    assert first == max(ops, key=lambda r: r["total_us"])["name"]
    header.click()  # and back, smallest first
    first = table.locator("tbody tr").first.locator("td").first.inner_text()
    assert first == min(ops, key=lambda r: r["total_us"])["name"]

    # The icicle: a click on the widest operator block opens that operator in the tree.
    page.click("[data-testid=tab-time]")
    cells = page.locator("[data-testid=icicle] .cell.k-op")
    assert cells.count() > 20
    screenshot(page, tmp_path, "resnet50-time")
    widest = max(range(min(cells.count(), 200)), key=lambda i: cells.nth(i).bounding_box()["width"])
    label = cells.nth(widest).inner_text()
    cells.nth(widest).click()
    assert page.is_visible("[data-testid=tree]")
    assert page.inner_text("[data-testid=detail] h3") == label

    # A CPU kernel: the operator, its dispatch path and the kernel's source.
    node = next(n for n, _ in walk(resnet_document["tree"]["root"])
                if n["kind"] == "op" and n["name"] == "aten::convolution" and n["facts"].get("source"))
    page.click("[data-testid=tab-tree]")
    search_and_pick(page, "aten::convolution")
    text = detail_text(page)
    assert node["facts"]["kernel"] in text
    path = page.inner_text("[data-testid=dispatch-path]")
    for key in node["facts"]["dispatch_keys"]:
        assert key in path
    src = html.source_location(node["facts"]["source"])
    assert node["facts"]["source"] in text
    assert file_line(files, src).strip() in text
    screenshot(page, tmp_path, "resnet50-kernel")


def test_a_trace_shows_its_document_in_a_notebook(resnet_trace, resnet_document):
    assert html.document_of(resnet_trace) == resnet_document
    assert html.repr_html(resnet_trace).startswith("<iframe")


def test_gpu_kernel_leads_to_its_op_dispatch_path_and_source(page, gpu_document, files, tmp_path):
    open_report(page, gpu_document, files, tmp_path, "gpu-trace")
    kernel, ancestors = next((n, up) for n, up in walk(gpu_document["tree"]["root"])
                             if n["kind"] == "gpu_kernel" and re.search(r":\d+$", n["facts"].get("source") or ""))
    op = next(a for a in reversed(ancestors) if a["kind"] == "op")
    apply_search(page, kernel["facts"]["kernel"])
    pick_hit(page, kernel["name"])
    text = detail_text(page)
    assert "launched by operator " + (op["facts"].get("op") or op["name"]) in text
    for key in op["facts"].get("dispatch_keys", []):
        assert key in page.inner_text("[data-testid=dispatch-path]")
    assert file_line(files, html.source_location(kernel["facts"]["source"])).strip() in text
    screenshot(page, tmp_path, "gpu-kernel")
    # From the kernel to its operator in the tree.
    page.click("[data-testid=kernel-op] a")
    assert page.inner_text("[data-testid=detail] h3") == (op["facts"].get("op") or op["name"])


def test_stack_report(page, stack_document, files, tmp_path):
    open_report(page, stack_document, files, tmp_path, "stack-conv2d-cuda")
    screenshot(page, tmp_path, "stack")
    root = stack_document["root"]
    # Expand a closed node: its children appear.
    closed = page.locator(".node:not(.open) > .row").filter(has=page.locator(".tog", has_text="\u25b8")).first
    name = closed.locator(".name").inner_text()
    closed.locator(".tog").click()
    node = next(n for n, _ in walk(root) if (n["facts"].get("op") or n["name"]) == name and n["children"])
    kids = page.locator(".node.open", has=page.locator(".row.sel")).last.locator(":scope > .kids > .node > .row .name")
    assert kids.first.inner_text() == (node["children"][0]["facts"].get("op") or node["children"][0]["name"])

    # Search: cuDNN's convolution, with its condition badge and its yaml lines.
    search_and_pick(page, "cudnn_convolution")
    hit = next(n for n, _ in walk(root) if "cudnn_convolution" in n["name"] and n.get("location"))
    assert page.locator(".row.hit .badge.cond").count() >= 1
    assert "case ConvBackend::Cudnn" in page.inner_text("[data-testid=tree]")
    first_hit = page.inner_text("[data-testid=detail] h3")
    picked = next(n for n, _ in walk(root) if (n["facts"].get("op") or n["name"]) == first_hit)
    if picked.get("location"):
        assert file_line(files, picked["location"]).strip() in detail_text(page)
    assert hit  # the tree holds it

    # Closed vendor code only: every row shown is closed, or leads to one.
    closed_nodes = [n for n, _ in walk(root) if n is not root and n["facts"].get("library")
                    and n["facts"].get("closed")]
    assert closed_nodes
    page.fill("[data-testid=tree-search]", "")
    page.wait_for_selector('[data-testid=tree][data-applied=""]')
    page.select_option("[data-testid=filter-vendor]", "closed")
    page.wait_for_selector('[data-testid=tree][data-applied="|||closed"]')
    hits = page.locator(".row.hit")
    assert hits.count() == len(closed_nodes)
    for i in range(hits.count()):
        assert "(closed)" in hits.nth(i).inner_text()
    page.select_option("[data-testid=filter-vendor]", "")

    # "expanded above" jumps to the expanded twin.
    page.click("text=collapse")
    page.click("text=expand all")
    twin_links = page.locator("[data-testid=twin-link]")
    assert twin_links.count() >= 1
    repeat_name = twin_links.first.locator("xpath=..").locator(".name").inner_text()
    twin_links.first.click()
    selected = page.locator(".row.sel")
    assert selected.locator(".name").inner_text() == repeat_name
    assert selected.locator("xpath=..").evaluate("e => e.classList.contains('open')")
    screenshot(page, tmp_path, "stack-twin")


def test_a_trace_that_mixes_versions_says_each_locations_version(page, gpu_document, files, tmp_path, indexed_tree):
    """Kernel sources are the 2.6.0 tree's, catalog entries and registrations
    the installed wheel's: the operators and files panes say which, as the
    text tables do (Note [versions in a trace])."""
    from kernelmap import env

    summary = gpu_document["summary"]
    tree, installed = indexed_tree.version, env.torch_install().version
    assert summary["versions"] == {"tree": tree, "installed": installed}
    open_report(page, gpu_document, files, tmp_path, "gpu-trace-versions")
    yaml = "aten/src/ATen/native/native_functions.yaml"
    page.click("[data-testid=tab-operators]")
    cells = page.locator("[data-testid=pane-operators] table.sortable tbody tr td:nth-child(2)").all_inner_texts()
    expected = [f"({installed if r['source'].startswith(yaml + ':') else tree})" for r in summary["ops"] if r.get("source")]
    shown = [c for c in cells if c]
    assert expected and sorted(c.rsplit(" ", 1)[-1] for c in shown) == sorted(expected)
    page.click("[data-testid=tab-files]")
    names = page.locator("[data-testid=pane-files] table.sortable tbody tr td:nth-child(1)").all_inner_texts()
    assert sorted(names) == sorted(f"{r['name']} ({installed if r['name'] == yaml else tree})" for r in summary["files"])
