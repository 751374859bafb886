"""Each page of the running app shows the document the library returns for
its parameters, and bad parameters get a clear message."""

from __future__ import annotations

import json
import re

import pytest

from kernelmap.render import html
from tests.web.conftest import TREE_NAME

pytestmark = pytest.mark.slow


def embedded(page: str) -> dict:
    m = re.search(r'<script type="application/json" class="km-data" data-encoding="([a-z0-9-]+)">(.*?)</script>', page, re.S)
    assert m, "no embedded data"
    return html.embedded_data(m.group(1), m.group(2))


@pytest.fixture(scope="module")
def client(app_server):
    with app_server.client() as c:
        yield c


def test_stack_page_is_the_library_answer(client, stack_document):
    r = client.get("/stack", params={"target": "torch.nn.Conv2d", "device": "cuda"})
    assert r.status_code == 200
    assert embedded(r.text)["document"] == json.loads(json.dumps(stack_document))


def test_where_callers_explain_gen_pages(client, context):
    from kernelmap import api, graph, processors
    from kernelmap.codegen import locate
    from kernelmap.graph.explain import explain
    from kernelmap.render.json import to_json

    # the app serves TREE_NAME (`serve --source`): a page that names no tree reads it
    doc = embedded(client.get("/where", params={"name": "aten::add.Tensor"}).text)["document"]
    assert doc == json.loads(json.dumps(api.where("aten::add.Tensor", static=True, source=TREE_NAME, with_source=True).to_json()))
    doc = embedded(client.get("/callers", params={"symbol": "cudnnConvolutionForward", "depth": "4"}).text)["document"]
    tree = graph.callers("cudnnConvolutionForward", context("cpu", require_tree=True), 4)
    assert doc == json.loads(json.dumps(to_json(processors.mark_main_path(tree, processors.callers_main_path(tree)))))
    doc = embedded(client.get("/explain", params={"op": "aten::mul.Tensor", "source": TREE_NAME}).text)["document"]
    assert doc == json.loads(json.dumps(explain("aten::mul.Tensor", context("cpu")).to_json()))
    r = client.get("/gen", params={"op": "aten::conv2d", "layer": "binding"})
    data = embedded(r.text)
    assert data["document"]["kernelmap"] == "gen/2"
    assert data["document"]["op"] == locate("aten::conv2d", layers=["binding"]).to_json()["op"]
    # The binding is shown from the regenerated file, highlighted.
    assert any("THPVariable_conv2d" in e for e in data["excerpts"].values())


def test_pages_read_the_tree_serve_names_unless_they_name_one(client, monkeypatch):
    """`serve --source` is the pages' tree: with KERNELMAP_SOURCE naming no
    tree, a page without a "source tree" value still answers from it; one
    that names a tree reads that one."""
    monkeypatch.setenv("KERNELMAP_SOURCE", "no-such-tree")
    for url, params in (("/callers", {"symbol": "cudnnConvolutionForward", "depth": "2"}), ("/explain", {"op": "aten::mul.Tensor"}),
                        ("/where", {"name": "aten::mul.Tensor"})):
        r = client.get(url, params=params)
        assert r.status_code == 200, (url, r.text[-500:])
        assert TREE_NAME in json.dumps(embedded(r.text)["document"]), url
    r = client.get("/callers", params={"symbol": "cudnnConvolutionForward", "source": "no-such-tree"})
    assert r.status_code == 400 and "no-such-tree" in r.text


@pytest.mark.parametrize(
    "url, message",
    [
        ("/stack?target=torch.nn.NoSuchThing", "unknown name"),
        ("/stack?target=conv2d&depth=many", "depth must be a whole number"),
        ("/stack?target=conv2d&device=tpu", "device must be one of"),
        ("/where?name=conv2", "closest: conv2d"),
        ("/goto?name=no_such_function_anywhere", "no definition"),
    ],
)
def test_bad_parameters_get_a_message(client, url, message):
    r = client.get(url)
    assert r.status_code in (400, 404)
    assert message in r.text


def test_empty_form_pages(client):
    for name in ("where", "stack", "callers", "explain", "gen"):
        r = client.get(f"/{name}")
        assert r.status_code == 200 and f'action="/{name}"' in r.text


def test_static_pages_never_import_torch(indexed_tree, generated):
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from kernelmap.web.app import create_app\n"
        "app = create_app()\n"
        "from starlette.testclient import TestClient\n"
        "import warnings; warnings.simplefilter('ignore')\n"
        "c = TestClient(app, base_url='http://127.0.0.1')\n"
        "c.get('/?token=' + app.state.token)\n"
        "for u in ['/stack?target=torch.nn.Conv2d&device=cuda', '/where?name=conv2d', '/search?q=conv2d',"
        " '/gen?op=conv2d&layer=binding', '/explain?op=aten::add.Tensor', '/source?root=tree:debian-2.6.0&path=aten/src/ATen/native/Convolution.cpp']:\n"
        "    assert c.get(u).status_code == 200, u\n"
        "print('torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
