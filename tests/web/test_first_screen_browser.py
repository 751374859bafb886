"""The first screen in headless Chromium: a report shows the main path before
(and without) its script; with it, the main path (the cuDNN path, not F.pad)
is open; the app's `where` page is the CLI's (the delegate's kernels, the
source section, no "[object Object]"); no page shows a path of this machine."""

from __future__ import annotations

import re
import struct
import subprocess
import zlib

import pytest

from kernelmap.render import html
from tests.web.conftest import CHROMIUM, CHROMIUM_FLAGS, screenshot

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def conv_document(context):
    """`stack torch.nn.Conv2d --device cuda` as the command writes it: its main path marked."""
    from kernelmap import graph
    from kernelmap.api import with_main_path
    from kernelmap.render.json import to_json

    return to_json(with_main_path(graph.stack("torch.nn.Conv2d", context("cuda"))))


@pytest.fixture(scope="module")
def report(conv_document, files, tmp_path_factory):
    out = tmp_path_factory.mktemp("report") / "conv.html"
    out.write_text(html.render(conv_document, excerpt=files.excerpt))
    return out


def _machine_paths(files) -> list[str]:
    """The folders of this machine a page must never name: every served root
    (the tree, the generated files in the cache, the wheel)."""
    import os

    return sorted({str(root.directory) for root in files.roots.values()} | {os.environ["KERNELMAP_CACHE_DIR"]})


def _ink(png: bytes) -> float:
    """The share of a PNG's bytes (filtered scanlines) that are not white: a blank page has none."""
    pos, data = 8, b""
    while pos < len(png):
        size, kind = struct.unpack(">I4s", png[pos:pos + 8])
        if kind == b"IDAT":
            data += png[pos + 8:pos + 8 + size]
        pos += 12 + size
    raw = zlib.decompress(data)
    return sum(1 for b in raw if b not in (0, 255)) / len(raw)


def test_a_plain_headless_screenshot_has_the_main_path(report, tmp_path):
    shot = tmp_path / "plain.png"
    done = subprocess.run([CHROMIUM, *CHROMIUM_FLAGS, f"--screenshot={shot}", "--window-size=1400,900", report.as_uri()],
                          capture_output=True, timeout=120)
    assert done.returncode == 0 and shot.exists(), done.stderr[-2000:]
    assert _ink(shot.read_bytes()) > 0.01


def test_the_first_screen_needs_no_script(page, report, conv_document, tmp_path):
    page.context.new_cdp_session(page).send("Emulation.setScriptExecutionDisabled", {"value": True})
    page.goto(report.as_uri())
    steps = page.locator("[data-testid=first-screen] li")
    assert steps.count() > 20
    text = page.inner_text("[data-testid=first-screen]")
    assert "cudnnBackendExecute" in text and "aten/src/ATen/native/cudnn/Conv_v8.cpp:" in text
    assert "torch.nn.functional.pad" not in text
    screenshot(page, tmp_path, "first-screen-no-script")


def test_the_main_path_is_open_by_default(page, report, files, tmp_path):
    page.goto(report.as_uri())
    page.wait_for_selector("[data-km-ready]")
    cudnn = page.locator(".node.main > .row .name", has_text="cudnnBackendExecute")
    assert cudnn.count() == 1 and cudnn.first.is_visible()  # no click needed
    opened = page.evaluate("""() => Array.from(document.querySelectorAll('.row .name'))
        .filter(e => e.textContent === 'torch.nn.functional.pad').map(e => e.closest('.node').classList.contains('open'))""")
    assert opened == [False]  # F.pad is shown beside the path, closed
    body = page.inner_text("body")
    assert not any(p in body for p in _machine_paths(files))
    screenshot(page, tmp_path, "main-path-open")


def test_the_app_where_page_is_the_clis(page, app_server, files, tmp_path):
    page.goto(app_server.link("/where?name=torch.add&device=cpu"))
    page.wait_for_selector("[data-km-ready]")
    body = page.inner_text("body")
    assert "[object Object]" not in body and "also: aten::add.out" in body
    assert "at::native::ufunc_add_CPU" in page.inner_text("body")  # the delegate's kernels
    assert page.locator("[data-testid=source-section]").count() == 1
    assert "entry kernel" in body and "stub kernel" in body
    assert not any(p in body for p in _machine_paths(files))
    assert '"origins"' not in body and "call_site" not in body
    screenshot(page, tmp_path, "app-where")


def test_a_source_link_follows_the_build_configuration(app_server, indexed_tree):
    """/goto of raw_cudnn_convolution_forward_out goes to the definition a CUDA
    release build compiles (Conv_v8.cpp, under #if AT_CUDNN_ENABLED()), not
    ConvPlaceholders.cpp's placeholder under #if !AT_CUDNN_ENABLED()."""
    import httpx

    with app_server.client(follow_redirects=False) as client:
        r = client.get("/goto", params={"name": "at::native::raw_cudnn_convolution_forward_out", "root": f"tree:{indexed_tree.name}"})
    assert r.status_code == 303
    target = httpx.URL(r.headers["location"])
    path, line = target.params["path"], int(target.params["line"])
    assert path == "aten/src/ATen/native/cudnn/Conv_v8.cpp"
    assert "raw_cudnn_convolution_forward_out(" in (indexed_tree.root / path).read_text().splitlines()[line - 1]


def test_trace_tables_read_at_1400_px_and_the_icicle_zooms(page, resnet_document, files, tmp_path):
    out = tmp_path / "resnet50.html"
    out.write_text(html.render(resnet_document, excerpt=files.excerpt))
    page.goto(out.as_uri())
    page.wait_for_selector("[data-km-ready]")
    page.click("[data-testid=tab-operators]")
    table = page.locator("[data-testid=pane-operators] table.sortable")
    line = page.evaluate("() => parseFloat(getComputedStyle(document.querySelector('table.sortable td')).lineHeight) || 16")
    heights = table.locator("tbody tr").evaluate_all("rows => rows.slice(0, 40).map(r => r.getBoundingClientRect().height)")
    assert heights and max(heights) <= 2 * line + 8, heights  # a row is at most two lines
    source = table.locator("th", has_text="source").bounding_box()
    assert source is not None and source["x"] + min(source["width"], 200) <= 1400  # the source column is in view
    cells = table.locator("tbody tr td:nth-child(2)").all_inner_texts()
    assert any(re.search(r"\.(cpp|cu|h):\d+( \([\w.+]+\))?$", c) for c in cells), cells[:5]  # its file:line whole (and its version where the trace mixes), shortened from the left
    screenshot(page, tmp_path, "operators-1400")

    page.click("[data-testid=tab-time]")
    cells = page.locator("[data-testid=icicle] .cell.k-op")
    durations = cells.evaluate_all("cs => cs.slice(0, 20).map(c => c.dataset.dur)")
    assert cells.count() > 20 and all(d and d.split()[-1] in ("us", "ms", "s") for d in durations)  # labelled with their time
    widths = cells.evaluate_all("cs => cs.slice(0, 200).map(c => c.getBoundingClientRect().width)")
    narrow = min((i for i, w in enumerate(widths) if w >= 12), key=lambda i: widths[i])  # a narrow block, wide enough to click
    box = page.locator("[data-testid=icicle]").bounding_box()
    cells.nth(narrow).click(modifiers=["Shift"])
    assert float(page.get_attribute("[data-testid=icicle]", "data-zoom")) > 1
    zoomed = cells.nth(narrow).bounding_box()
    assert zoomed["width"] >= 0.8 * box["width"]  # the sliver fills the view
    screenshot(page, tmp_path, "icicle-zoomed")
