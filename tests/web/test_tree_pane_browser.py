"""The tree pane in headless Chromium: it never scrolls sideways, and every
name and every location shows whole inside it, for `stack torch.nn.Conv2d --device
cuda` (its main path 27 levels deep) and a real GPU trace, at 1400 and 1000
pixels, opened, expanded whole, and with the deepest node revealed."""

from __future__ import annotations

import pytest

from kernelmap.render import html
from tests.web.conftest import screenshot

pytestmark = pytest.mark.slow

# The pane's sideways overflow, and the names and locations that are not whole inside it.
MEASURE = """() => {
  const t = document.querySelector('[data-testid=tree]');
  const box = t.getBoundingClientRect();
  const shown = sel => [...t.querySelectorAll(sel)].filter(n => n.getClientRects().length);
  const names = shown('.row .name'), locs = shown('.row .loc > *');
  const cut = names.concat(locs).filter(n => {
    const r = n.getBoundingClientRect();
    return r.left < box.left - 0.5 || r.right > box.right + 0.5 || n.scrollWidth > n.clientWidth + 1;
  }).map(n => n.textContent);
  return {overflow: t.scrollWidth - t.clientWidth, scrolled: t.scrollLeft, names: names.length, locs: locs.length,
          width: Math.round(box.width), cut: cut};
}"""

DEEPEST = """() => {
  let best = null, most = -1;
  for (const node of document.querySelectorAll('[data-testid=tree] .node')) {
    let depth = 0;
    for (let e = node; e; e = e.parentElement) if (e.classList && e.classList.contains('node')) depth++;
    if (depth > most) { most = depth; best = node; }
  }
  best.firstChild.scrollIntoView({block: 'center'});
  best.firstChild.click();
  return most;
}"""


@pytest.mark.parametrize("width", [1400, 1000])
@pytest.mark.parametrize("which", ["stack", "trace"])
def test_the_tree_pane_never_scrolls_sideways_and_names_and_locations_stay_whole(which, width, page, stack_document, gpu_document, files, tmp_path):
    document = stack_document if which == "stack" else gpu_document
    out = tmp_path / f"{which}.html"
    out.write_text(html.render(document, excerpt=files.excerpt))
    page.set_viewport_size({"width": width, "height": 900})
    page.goto(out.as_uri())
    page.wait_for_selector("[data-km-ready]")
    if which == "trace":
        page.click("[data-testid=tab-tree]")
    opened = page.evaluate(MEASURE)
    assert opened["names"] > 10 and opened["overflow"] <= 0 and not opened["cut"], opened
    page.click("text=expand all")
    whole = page.evaluate(MEASURE)
    assert whole["locs"] > 10, whole
    assert whole["names"] > opened["names"] and whole["overflow"] <= 0 and not whole["cut"], whole
    depth = page.evaluate(DEEPEST)
    revealed = page.evaluate(MEASURE)
    assert depth >= (20 if which == "stack" else 8)
    assert revealed["scrolled"] == 0 and revealed["overflow"] <= 0 and not revealed["cut"], revealed
    screenshot(page, tmp_path, f"{which}-{width}-deepest")
