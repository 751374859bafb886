"""`kernelmap serve` as a user starts it: it answers on the port it names to
the link it prints (which holds its token) and refuses a request without
it; loopback in any spelling is loopback; a port in use, a host that does
not resolve or an unknown --source are one `kernelmap: error:` line and exit
status 2 before anything is served."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

from tests.conftest import run_kernelmap


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_line_error(done, pattern):
    lines = done.stderr.strip().splitlines()
    return done.returncode == 2 and len(lines) == 1 and lines[0].startswith("kernelmap: error:") and pattern in lines[0]


def serving(*args: str):
    """`kernelmap serve ARGS` started as a user starts it: (process, the first line it printed)."""
    proc = subprocess.Popen([sys.executable, "-m", "kernelmap", "serve", *args], stderr=subprocess.PIPE, text=True, env=dict(os.environ))
    return proc, proc.stderr.readline()


def answer(url: str, opener=None):
    """The response to GET `url` once the server answers: (status, body, final URL)."""
    deadline = time.monotonic() + 60
    while True:
        try:
            with (opener or urllib.request.build_opener()).open(url, timeout=10) as page:
                return page.status, page.read(), page.url
        except urllib.error.HTTPError as e:
            return e.code, e.read(), url
        except OSError:
            assert time.monotonic() < deadline, "the server never answered"
            time.sleep(0.3)


def test_serve_answers_on_its_port_to_its_link_only():
    port = free_port()
    proc, line = serving("--port", str(port))
    try:
        m = re.search(r"^kernelmap serving on (http://127\.0\.0\.1:(\d+)/\?token=([\w-]{40,})) ", line)
        assert m and int(m.group(2)) == port, line
        link, token = m.group(1), m.group(3)
        # without the token: a refusal that says what to open
        status, body, _ = answer(f"http://127.0.0.1:{port}/")
        assert status == 403 and b"the link" in body
        # the printed link lets a browser in: it sets the token's cookie and leads to the page without the token
        status, body, url = answer(link, urllib.request.build_opener(urllib.request.HTTPCookieProcessor()))
        assert status == 200 and b"What runs when you call PyTorch" in body
        assert url == f"http://127.0.0.1:{port}/" and token not in url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_loopback_in_any_spelling_is_loopback():
    """`--host 127.1` binds 127.0.0.1: no warning, and the app answers there."""
    port = free_port()
    proc, line = serving("--host", "127.1", "--port", str(port))
    try:
        assert line.startswith("kernelmap serving on http://127.1:"), line
        token = re.search(r"token=([\w-]+)", line).group(1)
        status, _, _ = answer(f"http://127.0.0.1:{port}/?token={token}", urllib.request.build_opener(urllib.request.HTTPCookieProcessor()))
        assert status == 200
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_a_port_in_use_is_one_line():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        done = run_kernelmap("serve", "--port", str(busy.getsockname()[1]))
    assert one_line_error(done, "cannot serve on 127.0.0.1:"), done.stderr


def test_a_host_that_does_not_resolve_is_one_line():
    done = run_kernelmap("serve", "--host", "999.1.1.1", "--port", str(free_port()))
    assert one_line_error(done, "cannot serve on 999.1.1.1:"), done.stderr


def test_an_unknown_source_is_one_line():
    done = run_kernelmap("serve", "--source", "no-such-tree", "--port", str(free_port()))
    assert one_line_error(done, "no-such-tree"), done.stderr
