"""The impact answer's HTML report (kernelmap.impact) in headless Chromium: the heading, the
units by kind, the estimate, the advice and a sortable table of every unit,
with no script error (the page fixture fails the test on one)."""

from __future__ import annotations

import pytest

from kernelmap.render import render
from tests.impact.conftest import answer  # noqa: F401 - impact answers over the real tree, each asked once

pytestmark = pytest.mark.slow


def test_the_report_shows_every_unit_sorted_by_cost(answer, page, tmp_path):  # noqa: F811 - fixtures
    found = answer("aten/src/ATen/native/UnaryOps.h:26")
    out = tmp_path / "impact.html"
    out.write_text(render(found, "html"))
    page.goto(out.as_uri())
    page.wait_for_selector("[data-km-ready]")
    assert page.inner_text("h2") == "impact of aten/src/ATen/native/UnaryOps.h:26 on cpu"
    counts = page.inner_text("[data-testid=impact-units]")
    assert f"{len(found.units)} units rebuild" in counts and f"cpp {found.counts()['cpp']}" in counts
    assert found.advice[0].summary in page.inner_text(".impact-advice")
    rows = page.locator("table.sortable tbody tr")
    assert rows.count() == len(found.units)
    page.locator("table.sortable th", has_text="seconds").click()  # largest first
    first = rows.first.locator("td").nth(3).inner_text()
    assert float(first) == pytest.approx(max(u.seconds for u in found.units), abs=0.05)
    page.screenshot(path=str(tmp_path / "impact.png"), full_page=False)
