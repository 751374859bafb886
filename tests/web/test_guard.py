"""Who may talk to the app, on every route: a foreign Host (DNS rebinding),
another site's page (Origin, Sec-Fetch-Site) and a request without this
launch's token are refused before any route runs; the app's routes are read
from the app itself, so a new route is covered as soon as it exists. And
what a request may name: no folder, no file outside the served roots, on any
route, through any parameter."""

from __future__ import annotations

import re
import socket
import warnings
from pathlib import Path

import pytest
from starlette.routing import Route
from starlette.testclient import TestClient

from kernelmap.web.files import Root, SourceFiles
from kernelmap.web.guard import cookie_name, loopback_address, split_host
from tests.web.conftest import Served

ORIGIN = "http://127.0.0.1:8765"
TOKEN = "a-test-token-of-this-launch-0123456789abcdef"
SECRET = "the secret beside the tree"
FOREIGN = [
    ("host", {"host": "evil.example"}),  # a DNS name rebound to 127.0.0.1
    ("host and port", {"host": "evil.example:8765"}),
    ("host with loopback prefix", {"host": "127.0.0.1.evil.example:8765"}),
    ("host of the machine's LAN", {"host": "192.168.1.10:8765"}),
    ("origin", {"origin": "http://evil.example"}),
    ("null origin", {"origin": "null"}),  # a sandboxed frame, a data: URL
    ("origin of another local port", {"origin": "http://127.0.0.1:9999"}),
    ("cross-site fetch", {"sec-fetch-site": "cross-site"}),
    ("same-site fetch", {"sec-fetch-site": "same-site"}),  # another port of 127.0.0.1 is the same site
]


@pytest.fixture(scope="module")
def roots(tmp_path_factory):
    """A served tree with one file, a secret beside it, and a folder shaped
    like a PyTorch tree whose Python would leave a mark if anything ran it."""
    base = tmp_path_factory.mktemp("guard")
    (base / "secret.txt").write_text(SECRET)
    tree = base / "tree"
    (tree / "aten").mkdir(parents=True)
    (tree / "aten" / "a.cpp").write_text("int a = 1;\n")
    hostile = base / "hostile"
    mark = base / "ran"
    for package in ("torchgen", "tools", "tools/autograd", "torch"):
        (hostile / package).mkdir(parents=True, exist_ok=True)
        (hostile / package / "__init__.py").write_text(f"open({str(mark)!r}, 'a').write({package!r})\n")
    (hostile / "aten" / "src" / "ATen" / "native").mkdir(parents=True)
    (hostile / "version.txt").write_text("2.6.0\n")
    for name in ("native_functions.yaml", "tags.yaml"):
        (hostile / "aten/src/ATen/native" / name).write_text("[]\n")
    (hostile / "tools/autograd/derivatives.yaml").write_text("[]\n")
    files = SourceFiles([Root("tree:guarded", tree.resolve(), "tree guarded")], default_tree="tree:guarded")
    return files, base, hostile, mark


@pytest.fixture(scope="module")
def app(roots):
    from kernelmap.web.app import create_app

    return create_app(roots[0], token=TOKEN, max_upload=64 * 1024)


@pytest.fixture(scope="module")
def client(app):
    warnings.simplefilter("ignore", DeprecationWarning)
    with TestClient(app, base_url=ORIGIN, follow_redirects=False) as c:
        c.cookies.set(cookie_name(8765), TOKEN)
        yield c


def every_request(app):
    """(method, path) of every route the app has, path parameters filled in."""
    out = []
    for route in app.routes:
        assert isinstance(route, Route), route  # a Mount or websocket route would need its own requests here
        path = re.sub(r"\{\w+(:\w+)?\}", "report.js", route.path)
        out.extend((method, path) for method in sorted(route.methods or ("GET",)))
    assert len(out) >= 20, out  # every page, GET and HEAD, and the upload
    return out


def send(client, method: str, path: str, headers: dict | None = None, cookies: dict | None = None):
    if cookies is not None:
        client = TestClient(client.app, base_url=ORIGIN, follow_redirects=False, cookies=cookies)
    return client.request(method, path, headers=headers or {})


def refused(r) -> bool:
    return r.status_code == 403 and (r.request.method == "HEAD" or "kernelmap: refused" in r.text) and "kernelmap serving" not in r.text


def test_every_route_answers_its_own_pages(app, client):
    """The control: with the token, the app's own Host and no foreign
    Origin, no route refuses (so a refusal below is the guard's)."""
    for method, path in every_request(app):
        r = send(client, method, path, {"origin": ORIGIN, "sec-fetch-site": "same-origin"} if method == "POST" else {})
        assert r.status_code != 403, (method, path, r.status_code)


@pytest.mark.parametrize("what, headers", FOREIGN, ids=[f[0] for f in FOREIGN])
def test_foreign_hosts_and_sites_are_refused_on_every_route(app, client, what, headers):
    for method, path in every_request(app):
        r = send(client, method, path, headers)
        assert refused(r), (what, method, path, r.status_code)


def test_requests_without_the_token_are_refused_on_every_route(app, client):
    """Everything but the app's own scripts and styles needs the token."""
    for cookies in ({}, {cookie_name(8765): "wrong"}, {cookie_name(9999): TOKEN}, {"kernelmap-token": TOKEN}):
        for method, path in every_request(app):
            r = send(client, method, path, cookies=cookies)
            if method in ("GET", "HEAD") and path.startswith("/static/"):
                assert r.status_code == 200, (path, r.status_code)
            else:
                assert refused(r), (cookies, method, path, r.status_code)


def test_the_link_sets_the_cookie_and_drops_the_token(client):
    fresh = TestClient(client.app, base_url=ORIGIN, follow_redirects=False)
    r = fresh.get(f"/source?root=tree:guarded&path=aten/a.cpp&token={TOKEN}")
    assert r.status_code == 303
    assert r.headers["location"] == "/source?root=tree:guarded&path=aten/a.cpp"
    cookie = r.headers["set-cookie"]
    assert cookie.startswith(f"{cookie_name(8765)}={TOKEN};")
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/" in cookie
    assert fresh.get(r.headers["location"]).status_code == 200
    # clicked in another site's page: the cookie, and a page that moves on by itself (a redirect would carry the other site's mark)
    r = TestClient(client.app, base_url=ORIGIN, follow_redirects=False).get(f"/search?q=relu&token={TOKEN}", headers={"sec-fetch-site": "cross-site"})
    assert r.status_code == 200 and r.headers["set-cookie"].startswith(f"{cookie_name(8765)}={TOKEN};")
    assert '<meta http-equiv="refresh" content="0; url=/search?q=relu">' in r.text and TOKEN not in r.text
    # a wrong token is no way in, and a redirect never leaves the server
    assert refused(TestClient(client.app, base_url=ORIGIN).get("/?token=guess"))
    r = TestClient(client.app, base_url=ORIGIN, follow_redirects=False).get(f"//evil.example/?token={TOKEN}")
    assert r.status_code == 303 and r.headers["location"].startswith("/") and not r.headers["location"].startswith("//")


def test_a_post_from_the_app_itself_is_let_in(client):
    """What the app's own form sends (Origin of the app, same-origin) passes."""
    r = client.post("/trace", headers={"origin": ORIGIN, "sec-fetch-site": "same-origin"}, files={"file": ("t.json", b"{}", "application/json")})
    assert r.status_code == 400 and "cannot import the trace" in r.text


def test_a_dns_rebinding_request_is_refused_by_the_running_server(roots):
    """A real server: a request whose Host is a rebound name gets a 403 even
    with the token's cookie (a browser would not send it to that name)."""
    from kernelmap.web.app import create_app

    served = Served(create_app(roots[0]))
    try:
        with served.client() as c:
            assert c.get("/").status_code == 200
            r = c.get("/source", params={"root": "tree:guarded", "path": "aten/a.cpp"}, headers={"host": f"evil.example:{served.port}"})
            assert r.status_code == 403 and "int a = 1" not in r.text
            r = c.get("/", headers={"host": f"localhost:{served.port}"})
            assert r.status_code == 200
        # the raw request a rebound page's fetch makes: no cookie, Host evil.example
        with socket.create_connection(("127.0.0.1", served.port), timeout=10) as s:
            s.sendall(b"GET /source?root=tree:guarded&path=aten/a.cpp HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n")
            reply = b""
            while chunk := s.recv(65536):
                reply += chunk
        assert reply.startswith(b"HTTP/1.1 403") and b"int a = 1" not in reply
    finally:
        served.stop()


def test_host_names():
    assert split_host("127.0.0.1:8765") == "127.0.0.1" and split_host("[::1]:80") == "::1" and split_host("LocalHost.") == "localhost"
    assert split_host("[::1]x") is None and split_host("a:b") is None
    for address in ("127.0.0.1", "127.1", "::1", "::ffff:127.0.0.1", "0x7f.1"):
        assert loopback_address(address), address
    for other in ("localhost", "127.0.0.1.evil.example", "10.0.0.1", "127.0.0.1 x", "1.2.3.4.5"):
        assert not loopback_address(other), other


# -- what a request may name -------------------------------------------------------


def names(base: Path, hostile: Path) -> list[str]:
    return [str(hostile), str(hostile) + "/", str(base / "secret.txt"), "../secret.txt", "~", "~/", "/etc/passwd", "file:///etc/passwd",
            "tree:" + str(hostile), "tree:../secret.txt"]


def test_no_parameter_names_a_folder_or_a_file(app, client, roots):
    """Every route, every parameter any route reads, given a folder or a file
    outside the served roots: nothing is read from it and nothing in it runs."""
    from kernelmap.web import pages

    _, base, hostile, mark = roots
    params = {p.name for page in pages.PAGES.values() for p in page.params} | {"q", "path", "root", "origin", "name", "op", "line", "file", "tid"}
    for method, path in every_request(app):
        if method != "GET":
            continue
        for param in sorted(params):
            for value in names(base, hostile):
                r = client.get(path, params={param: value, **({"name": "torch.add"} if param == "source" else {})})
                assert SECRET not in r.text and "root:x:0:0" not in r.text, (path, param, value)
                assert not mark.exists(), (path, param, value, mark.read_text())


def test_a_page_naming_a_folder_as_its_tree_is_refused(client, roots):
    """The defect: `/where?name=...&source=FOLDER` ran the folder's Python
    (its torchgen, through code generation). Trees are chosen by registered
    name only."""
    _, _, hostile, mark = roots
    for page in ("where", "stack", "callers", "explain"):
        key = {"where": "name", "stack": "target", "callers": "symbol", "explain": "op"}[page]
        r = client.get(f"/{page}", params={key: "torch.add", "source": str(hostile)})
        assert r.status_code == 400 and "must be a registered tree, by name" in r.text, (page, r.text[-300:])
    assert not mark.exists()


def test_traces_are_imported_by_upload_only(client, roots):
    """The defect: a `path` field imported any file the user can read, and
    the error for others showed its first character."""
    _, base, _, _ = roots
    for fields in ({"path": str(base / "secret.txt")}, {"path": "/etc/passwd"}):
        r = client.post("/trace", data=fields, headers={"origin": ORIGIN})
        assert r.status_code == 400 and "by upload" in r.text
        assert SECRET not in r.text and "root:x" not in r.text
    # an upload's error names the upload, not where the server put it
    r = client.post("/trace", files={"file": ("mine.json", b'{"traceEvents": [', "application/json")})
    assert r.status_code == 400 and "mine.json" in r.text and "kernelmap-upload-" not in r.text
