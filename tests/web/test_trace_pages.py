"""Traces in the app come from the trace store: an upload is imported into
it, its page is opened from its tables by the store id (32 hex digits;
anything else is a 404), even by an app started later; a folded part of the
tree opens on its own page (`/trace/ID/node/N`, views.node_tree); the search
box finds the kernel names the trace's summary lists."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from tests.trace.conftest import ATEN_ADD, CUBLAS_GEMM, KinetoWriter

ORIGIN = "http://127.0.0.1:8765"


def client_of(app) -> TestClient:
    from kernelmap.web.guard import cookie_name

    warnings.simplefilter("ignore", DeprecationWarning)
    c = TestClient(app, base_url=ORIGIN, follow_redirects=False)
    c.cookies.set(cookie_name(8765), app.state.token)
    return c


def many_calls(path: Path, layers: int = 600) -> bytes:
    """A GPU trace of `layers` modules, each an add launching a kernel: more nodes than a bounded view shows."""
    k = KinetoWriter()
    for i in range(layers):
        t = i * 300.0
        k.host("python_function", f"nn.Module: Layer_{i}", t, 100)
        k.op("aten::add", t + 1, 80, [(2, 2), (2, 2)], ["float", "float"])
        k.launch(ATEN_ADD if i % 2 else CUBLAS_GEMM, t + 5, t + 10, 1.0 + i % 7)
    return k.write(path).read_bytes()


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    from kernelmap.web.app import create_app
    from kernelmap.web.files import SourceFiles

    data = many_calls(tmp_path_factory.mktemp("upload") / "t.json")
    app = create_app(SourceFiles([]))
    with client_of(app) as c:
        r = c.post("/trace", files={"file": ("many.json", data, "application/json")})
        assert r.status_code == 303, r.text[-300:]
        location = r.headers["location"]
        page = c.get(location)
    return app, location, page


def test_an_upload_is_stored_and_its_page_opened_by_its_id(imported):
    from kernelmap.trace.store import open_stored

    app, location, page = imported
    tid = re.fullmatch(r"/trace/([0-9a-f]{32})", location)[1]
    assert page.status_code == 200 and "data-km" in page.text
    t = open_stored(tid)  # the tables are in the store
    assert t.summary().ops and app.state.traces.names() == {tid: "many.json"}
    # an app started later opens it by id too (the store is the cache's, not the session's)
    from kernelmap.web.app import create_app
    from kernelmap.web.files import SourceFiles

    with client_of(create_app(SourceFiles([]))) as c:
        assert c.get(location).status_code == 200


def test_a_folded_node_opens_on_its_own_page(imported):
    from kernelmap.trace import views
    from kernelmap.trace.store import open_stored

    app, location, _ = imported
    t = open_stored(location.rsplit("/", 1)[1])
    notes = [n for _, n in views.hot_tree(t).walk() if n.kind.value == "note"]
    assert notes, "the view folds some calls"
    node = notes[0].attrs["node"]
    with client_of(app) as c:
        r = c.get(f"{location}/node/{node}")
        assert r.status_code == 200 and "data-km" in r.text
        for bad in (f"{location}/node/{len(t._table)}", f"{location}/node/-1", f"{location}/node/x", f"{location}/node/{'9' * 13}",
                    f"{location}/node/1.5"):
            assert c.get(bad).status_code == 404, bad


def test_only_a_store_id_names_a_trace(imported):
    app, location, _ = imported
    tid = location.rsplit("/", 1)[1]
    with client_of(app) as c:
        for bad in (tid[:16], tid + "0", tid.upper(), "0" * 32, "%2e%2e%2fetc", "report.js", tid[:31] + "g"):
            r = c.get(f"/trace/{bad}")
            assert r.status_code == 404, bad
            assert r.status_code == 404 and c.get(f"/trace/{bad}/node/1").status_code == 404, bad


def test_the_search_box_finds_kernels_from_the_summary(imported):
    app, location, _ = imported
    with client_of(app) as c:
        hits = c.get("/api/suggest", params={"q": "sgemm"}).json()
    assert any(h["kind"] == "GPU kernel" and h["name"] == CUBLAS_GEMM and h["url"] == location for h in hits)
