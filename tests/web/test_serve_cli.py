"""`kernelmap serve` as a user starts it: it answers on the port it names,
and a port in use, a host that does not resolve or an unknown --source are
one `kernelmap: error:` line and exit status 2 before anything is served."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request

from tests.conftest import run_kernelmap


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_line_error(done, pattern):
    lines = done.stderr.strip().splitlines()
    return done.returncode == 2 and len(lines) == 1 and lines[0].startswith("kernelmap: error:") and pattern in lines[0]


def test_serve_answers_on_its_port():
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "kernelmap", "serve", "--port", str(port)], stderr=subprocess.PIPE, text=True, env=dict(os.environ))
    try:
        assert "kernelmap serving on http://127.0.0.1:" in proc.stderr.readline()
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as page:
                    assert page.status == 200 and b"kernelmap" in page.read()
                break
            except OSError:
                assert time.monotonic() < deadline, "the server never answered"
                time.sleep(0.3)
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
