"""`kernelmap render` on documents anyone may have edited: a FIFO, a document
of the right kind but another shape, control characters in its strings; and
`kernelmap kernel` on a name that is not UTF-8. One `kernelmap: error:` line
and exit status 2, or the document shown with its control characters escaped."""

from __future__ import annotations

import json
import os

import pytest

from tests.conftest import run_kernelmap


def one_line_error(done, pattern=""):
    lines = done.stderr.strip().splitlines()
    return done.returncode == 2 and len(lines) == 1 and lines[0].startswith("kernelmap: error:") and pattern in lines[0]


@pytest.fixture(scope="module")
def gen_doc(tmp_path_factory):
    done = run_kernelmap("gen", "aten::relu", "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_fifo_is_refused_not_waited_on(tmp_path):
    fifo = tmp_path / "doc.json"
    os.mkfifo(fifo)
    assert one_line_error(run_kernelmap("render", str(fifo)), "not a regular file")


@pytest.mark.parametrize("edit", [
    lambda d: d.update(bindings=5),
    lambda d: d.update(kernelmap="calltree/2", root=5),
    lambda d: d.update(kernelmap="where/2", operator={"dispatch": [{"location": {"path": {"a": 1}}}]}),
])
def test_a_document_of_another_shape_is_one_line(tmp_path, gen_doc, edit):
    _render_edited(tmp_path, gen_doc, edit)


def test_a_where_document_with_a_key_that_is_no_text_is_one_line(tmp_path):
    done = run_kernelmap("where", "aten::relu", "--static", "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    doc["operator"]["dispatch"][0]["key"] = 5
    _render_edited(tmp_path, doc, lambda d: None)


def _render_edited(tmp_path, original, edit):
    doc = json.loads(json.dumps(original))
    edit(doc)
    path = tmp_path / "doc.json"
    path.write_text(json.dumps(doc))
    done = run_kernelmap("render", str(path))
    assert one_line_error(done) and "Traceback" not in done.stderr, done.stderr


def test_control_characters_in_a_document_never_reach_the_terminal(tmp_path, gen_doc):
    text = json.dumps(gen_doc).replace("THPVariable_relu", "THP\\u001b]0;PWNED\\u0007\\u001b[2J")
    assert "\\u001b" in text
    path = tmp_path / "gen.json"
    path.write_text(text)
    done = run_kernelmap("render", str(path))
    assert done.returncode == 0, done.stderr
    assert "\x1b" not in done.stdout and "\x07" not in done.stdout and "THP\\x1b]0;PWNED\\x07" in done.stdout


def test_a_kernel_name_that_is_not_utf8_is_one_line():
    import subprocess
    import sys

    done = subprocess.run([sys.executable.encode(), b"-m", b"kernelmap", b"kernel", b"\xff\xfe"], capture_output=True, env=dict(os.environ))
    lines = done.stderr.decode("utf-8", "replace").strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and "not valid UTF-8" in lines[0], lines
