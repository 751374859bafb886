"""The app's defences, against a server running on 127.0.0.1: files outside
the served roots stay out of reach however the path is spelled, text from
traces, names and files is escaped, every response carries the CSP, uploads
have a limit."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kernelmap.commands.serve import is_loopback
from kernelmap.web.app import CSP
from kernelmap.web.files import FileRefused, Root, SourceFiles, check_relative
from tests.trace.conftest import KinetoWriter
from tests.web.conftest import Served, screenshot

EVIL_OP = "aten::<script>alert(1)</script>"
EVIL_KERNEL = '"><img src=x onerror=alert(2)>'
EVIL_TEXT = '// </script><script>alert(3)</script>\nint x = 1; // "><img src=x onerror=alert(4)>\n'
SECRET = "the secret outside the tree"
LIMIT = 64 * 1024


@pytest.fixture(scope="module")
def evil(tmp_path_factory):
    """A served tree holding a file with markup in it, a symlink out of the
    tree and a symlinked folder out; a secret beside the tree."""
    base = tmp_path_factory.mktemp("evil")
    (base / "secret.txt").write_text(SECRET)
    tree = base / "tree"
    (tree / "aten").mkdir(parents=True)
    (tree / "aten" / "evil.cpp").write_text(EVIL_TEXT)
    (tree / "aten" / "link.txt").symlink_to(base / "secret.txt")
    (tree / "up").symlink_to(base, target_is_directory=True)
    files = SourceFiles([Root("tree:evil", tree.resolve(), "tree evil")], default_tree="tree:evil")
    from kernelmap.web.app import create_app

    served = Served(create_app(files, max_upload=LIMIT))
    yield served, base
    served.stop()


@pytest.fixture(scope="module")
def client(evil):
    served, _ = evil
    with served.client(follow_redirects=False, timeout=30) as c:
        yield c


def test_server_listens_on_loopback_only(evil):
    served, _ = evil
    assert served.server.config.host == "127.0.0.1"
    for spelling in ("127.0.0.1", "::1", "localhost", "127.1", "127.0.1", "2130706433", "0x7f.1", "127.255.255.254", "[::1]", "::ffff:127.0.0.1"):
        assert is_loopback(spelling), spelling
    for other in ("0.0.0.0", "::", "192.168.1.2", "example.org", "127.0.0.1 example.org", "128.1", ""):
        assert not is_loopback(other), other


@pytest.mark.parametrize(
    "raw_query",
    [
        "path=../secret.txt",
        "path=aten/../../secret.txt",
        "path=%2e%2e/secret.txt",  # decoded once by the server: ../secret.txt
        "path=%2e%2e%2fsecret.txt",
        "path=%252e%252e%252fsecret.txt",  # double-encoded
        "path=..%5csecret.txt",  # backslash
        "path=..%c0%afsecret.txt",  # overlong UTF-8 slash
        "path=" + "%2F" + "etc/passwd",  # absolute
        "path=/etc/passwd",
        "path=aten/link.txt",  # a symlink out of the tree
        "path=up/secret.txt",  # a symlinked folder out of the tree
        "path=aten/evil.cpp%00.txt",  # NUL
        "path=./aten/evil.cpp",
        "root=tree:../x&path=secret.txt",
        "root=generated&path=../secret.txt",
    ],
)
def test_files_outside_the_tree_are_refused(client, raw_query):
    query = raw_query if "root=" in raw_query else "root=tree:evil&" + raw_query
    r = client.get("/source?" + query)
    assert r.status_code == 404
    assert SECRET not in r.text
    assert "root:x:0:0" not in r.text  # /etc/passwd


def test_static_files_are_only_the_assets(client):
    for url in ("/static/..%2fapp.py", "/static/%2e%2e%2f%2e%2e%2fweb%2fapp.py", "/static/report.html.j2"):
        r = client.get(url)
        assert r.status_code == 404, url
    assert client.get("/static/report.js").status_code == 200


def test_check_relative():
    assert check_relative("aten/src/ATen/native/Convolution.cpp")
    for bad in ("", "/x", "../x", "a/../b", "a\\b", "a%2fb", "C:/x", "a/./b", "x\x00"):
        with pytest.raises(FileRefused):
            check_relative(bad)


def test_file_contents_are_escaped(client, evil, page, tmp_path):
    served, _ = evil
    r = client.get("/source?root=tree:evil&path=aten/evil.cpp")
    assert r.status_code == 200
    assert "<script>alert" not in r.text and "<img src=x" not in r.text
    assert "&lt;/script&gt;" in r.text or "&lt;script&gt;" in r.text
    page.goto(served.link("/source?root=tree:evil&path=aten/evil.cpp"))
    assert page.locator("main img").count() == 0
    assert "<script>alert(3)</script>" in page.inner_text("[data-testid=source]")
    screenshot(page, tmp_path, "escaped-source")


def test_names_in_searches_and_pages_are_escaped(client):
    for url in ("/search?q=<script>alert(1)</script>", '/stack?target="><img src=x onerror=alert(1)>', "/where?name=<script>alert(1)</script>"):
        r = client.get(url)
        assert "<script>alert" not in r.text and "<img src=x" not in r.text, url


def evil_trace(path: Path) -> Path:
    k = KinetoWriter()
    k.host("python_function", 'nn.Module: <script>alert(5)</script>', 0, 100)
    k.op(EVIL_OP, 10, 80, [(2, 2)], ["float"])
    k.launch(EVIL_KERNEL, 20, 200, 5)
    return k.write(path)


def test_trace_names_are_escaped(client, evil, page, tmp_path):
    served, _ = evil
    trace = evil_trace(tmp_path / "evil.json")
    r = client.post("/trace", files={"file": ("<b>evil</b>.json", trace.read_bytes(), "application/json")})
    assert r.status_code == 303, r.text
    view = r.headers["location"]
    r = client.get(view)
    assert r.status_code == 200
    for bad in ("<script>alert", "<img src=x", "<b>evil"):
        assert bad not in r.text, bad
    # In the browser: the names show as text, no element is made of them, no script runs.
    page.goto(served.link(view))
    page.wait_for_selector("[data-km-ready]")
    page.click("text=expand all")
    tree = page.inner_text("[data-testid=tree]")
    assert EVIL_OP in tree and EVIL_KERNEL in tree
    assert page.locator("main img").count() == 0
    page.click("[data-testid=tab-operators]")
    assert EVIL_OP in page.inner_text("[data-testid=pane-operators]")
    screenshot(page, tmp_path, "escaped-trace")
    # The home page lists the upload by its escaped name.
    home = client.get("/").text
    assert "<b>evil" not in home and "&lt;b&gt;evil" in home


def test_every_response_carries_the_csp(client):
    for url in ("/", "/source?root=tree:evil&path=aten/evil.cpp", "/source?path=../x", "/static/report.js", "/api/suggest?q=x", "/nowhere"):
        r = client.get(url)
        assert r.headers["content-security-policy"] == CSP, url
        assert r.headers["x-content-type-options"] == "nosniff"
    assert "script-src 'self'" in CSP and "unsafe-inline" not in CSP


def test_uploads_beyond_the_limit_are_refused(client):
    big = b"[" + b" " * (LIMIT + 10) + b"]"
    r = client.post("/trace", files={"file": ("big.json", big, "application/json")})
    assert r.status_code == 413
    assert "larger than the limit" in r.text
    assert r.headers["content-security-policy"] == CSP


def test_uploads_without_a_length_are_counted(evil):
    served, _ = evil

    def chunks():  # a well-formed file part that goes on past the limit, sent without a length
        yield b'--x\r\nContent-Disposition: form-data; name="file"; filename="t.json"\r\nContent-Type: application/json\r\n\r\n'
        for _ in range(LIMIT // 1024 + 8):
            yield b"x" * 1024

    with served.client(timeout=30) as c:
        r = c.post("/trace", content=chunks(), headers={"content-type": "multipart/form-data; boundary=x"})
    assert r.status_code == 413


def test_a_malformed_trace_is_a_clear_error(client, tmp_path):
    r = client.post("/trace", files={"file": ("bad.json", b'{"traceEvents": [', "application/json")})
    assert r.status_code == 400
    assert "cannot import the trace" in r.text


def test_no_file_outside_is_opened(evil):
    """The reader itself, without HTTP: a symlink out is refused even when the
    link's own name looks harmless."""
    _, base = evil
    files = SourceFiles([Root("tree:evil", (base / "tree").resolve(), "tree evil")])
    with pytest.raises(FileRefused, match="out of its tree"):
        files.open("tree:evil", "aten/link.txt")
    assert files.open("tree:evil", "aten/evil.cpp").text == EVIL_TEXT
    assert os.path.islink(base / "tree" / "up")


def test_serve_refuses_a_bad_port(kernelmap_cli):
    r = kernelmap_cli("serve", "--port", "70000")
    assert r.returncode == 2
    assert "70000" in r.stderr and "Traceback" not in r.stderr


def test_names_too_long_for_the_os_are_a_400_page(client):
    r = client.get("/where", params={"name": "torch." + "a" * 300 + ".x"})
    assert r.status_code == 400 and "unknown name" in r.text
