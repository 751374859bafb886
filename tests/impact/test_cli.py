"""`kernelmap impact` as a user runs it over the real 2.6.0 tree: text, its
JSON document loading back, an HTML report, the page of `kernelmap serve`,
and every bad input as one `kernelmap: error:` line with exit status 2."""

from __future__ import annotations

import json
import re

import pytest

from tests.conftest import run_kernelmap
from tests.graph.conftest import TREE_NAME

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ready(impact_data):
    impact_data("cpu")  # built once; each command below reads it back


def one_line_error(done, pattern: str) -> bool:
    lines = done.stderr.strip().splitlines()
    return done.returncode == 2 and len(lines) == 1 and lines[0].startswith("kernelmap: error:") and pattern in lines[0] and not done.stdout


def test_text_of_a_source_file(ready):
    done = run_kernelmap("impact", "aten/src/ATen/native/BinaryOps.cpp", "--source", TREE_NAME, "--width", "100")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("impact of aten/src/ATen/native/BinaryOps.cpp on cpu (tree debian-2.6.0, 2.6.0a0)\n")
    assert "\nrebuilds 1 unit: 1 .cpp\n" in done.stdout
    assert re.search(r"^     *\d+\.\d s  aten/src/ATen/native/BinaryOps.cpp  \[\.cpp, libtorch_cpu\.so\]$", done.stdout, re.M)
    assert all(len(line) <= 100 for line in done.stdout.splitlines())


def test_json_loads_back_and_html_is_written(ready, tmp_path):
    from kernelmap import answers

    out = tmp_path / "impact.html"
    done = run_kernelmap("impact", "c10/util/irange.h", "--source", TREE_NAME, "--json", "--html", str(out))
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["kernelmap"] == "impact/1" and doc["target"] == "file" and doc["counts"]["cpp"] > 100
    answer = answers.load(doc)
    assert len(answer.units) == len(doc["units"]) and answer.to_json() == doc
    page = out.read_text()
    assert "<title>kernelmap impact: c10/util/irange.h (cpu)</title>" in page


@pytest.mark.parametrize("args, pattern", [
    (("no/such/file.h",), "no file no/such/file.h"),
    (("aten/src/ATen/native/BinaryOps.cpp:999999",), "line 999999 is not one of them"),
    (("../etc/passwd.h",), "give a path inside the tree"),
    (("at::native::no_such_function_anywhere",), "unknown name"),
    (("aten/src/ATen/native/native_functions.yaml",), "name the entry edited"),
    (("torchgen/gen.py",), "is not C++ a release build reads"),
    (("c10/util/irange.h", "--device", "mps"), "unknown device 'mps'"),
    (("",), "impact needs a path, a symbol or an operator"),
])
def test_bad_input_is_one_line_and_status_2(ready, args, pattern):
    done = run_kernelmap("impact", *args, "--source", TREE_NAME)
    assert one_line_error(done, pattern), (done.returncode, done.stderr)


def test_the_serve_page_shows_the_library_answer(ready):
    import warnings

    from starlette.testclient import TestClient

    from kernelmap.impact import impact
    from kernelmap.render import html
    from kernelmap.web.app import create_app

    app = create_app()
    warnings.simplefilter("ignore")
    client = TestClient(app, base_url="http://127.0.0.1")
    client.get("/?token=" + app.state.token)  # the link `serve` prints: its cookie opens the pages
    r = client.get("/impact", params={"target": "aten/src/ATen/native/BinaryOps.cpp", "source": TREE_NAME})
    assert r.status_code == 200
    m = re.search(r'<script type="application/json" class="km-data" data-encoding="([a-z0-9-]+)">(.*?)</script>', r.text, re.S)
    data = html.embedded_data(m.group(1), m.group(2))
    assert data["view"] == "impact"
    assert data["document"] == json.loads(json.dumps(impact("aten/src/ATen/native/BinaryOps.cpp", source=TREE_NAME).to_json()))
    bad = client.get("/impact", params={"target": "no/such/file.h", "source": TREE_NAME})
    assert bad.status_code == 400 and "no file no/such/file.h" in bad.text
    for target in ("../../etc/passwd", "/etc/passwd", "aten/src/../../x.h", "~/x.h"):  # never a path out of the tree
        refused = client.get("/impact", params={"target": target, "source": TREE_NAME})
        assert refused.status_code == 400 and "a path relative to the tree" in refused.text, target
