"""Outputs and error lines, as a hostile or careless user meets them: every
file kernelmap writes by name (--html, --export-chrome) is checked before any
work (a folder, a FIFO, a link loop, an unwritable folder: one line, exit 2)
and written whole or not at all; an answer that cannot be shown leaves no
report behind; an error line echoes a 100 KB input shortened; a saved
document of the right name and the wrong shape is one line, never a
traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import run_kernelmap


def one_line_error(done, *words):
    lines = done.stderr.strip().splitlines()
    return (done.returncode == 2 and len(lines) == 1 and lines[0].startswith("kernelmap: error:") and "Traceback" not in done.stderr
            and all(w in lines[0] for w in words))


@pytest.fixture(scope="module")
def where_doc(tmp_path_factory):
    done = run_kernelmap("where", "aten::add.Tensor", "--static", "--json")
    assert done.returncode == 0, done.stderr
    path = tmp_path_factory.mktemp("docs") / "where.json"
    path.write_text(done.stdout)
    return path


@pytest.fixture
def loop(tmp_path):
    a, b = tmp_path / "loop-a", tmp_path / "loop-b"
    a.symlink_to(b)
    b.symlink_to(a)
    return a


def test_every_output_path_class_is_one_line(tmp_path, where_doc, loop):
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 1, "dur": 2}]}))
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    bad = {
        "a link loop above it": str(loop / "out.json"),
        "a FIFO": str(fifo),
        "a folder": str(tmp_path),
        "a missing folder": str(tmp_path / "missing" / "out.json"),
        "a device": "/dev/null",
    }
    if os.geteuid() != 0:  # root writes anywhere
        bad["an unwritable folder"] = str(locked / "out.json")
    for what, path in bad.items():
        for option, args in (("--export-chrome", ["trace", "--from", str(trace), "--export-chrome", path]),
                             ("--html", ["render", str(where_doc), "--html", path]),
                             ("--html", ["where", "aten::relu", "--static", "--html", path])):
            done = run_kernelmap(*args)
            # click's own check of a folder says "Invalid value for '--html'": one line too
            assert one_line_error(done, f"cannot write {option}") or one_line_error(done, f"Invalid value for '{option}'"), (what, args, done.stderr)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo", "locked", "loop-a", "loop-b", "t.json"]  # nothing half-written


def test_an_export_to_a_symlink_loop_replaces_the_link(tmp_path, loop):
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 1, "dur": 2}]}))
    done = run_kernelmap("trace", "--from", str(trace), "--no-tree", "--export-chrome", str(loop))
    assert done.returncode == 0, done.stderr
    assert not loop.is_symlink() and json.loads(loop.read_text())["traceEvents"]


def test_render_writes_no_report_for_an_answer_it_cannot_show(tmp_path, where_doc):
    doc = json.loads(where_doc.read_text())
    doc["operator"]["location"] = None  # a where/2 document whose operator has no location
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps(doc))
    report = tmp_path / "report.html"
    for args in (["render", str(broken)], ["render", str(broken), "--html", str(report)], ["render", str(broken), "--json"]):
        done = run_kernelmap(*args)
        assert one_line_error(done, "no location"), done.stderr
    assert not report.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["broken.json"]
    # a document that loads, whose text cannot be drawn: the report is not written first
    tree = {"kernelmap": "calltree/2", "kind": "trace", "notes": [], "meta": {}, "origins": {},
            "root": {"name": "aten::add", "kind": "op", "facts": {"duration_us": "soon"}, "children": []}}
    (tmp_path / "tree.json").write_text(json.dumps(tree))
    done = run_kernelmap("render", str(tmp_path / "tree.json"), "--html", str(report))
    assert one_line_error(done), done.stderr
    assert not report.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["broken.json", "tree.json"]


def test_a_document_of_any_wrong_shape_is_one_line(tmp_path, where_doc):
    doc = json.loads(where_doc.read_text())
    shapes = {
        "a string for the operator": {**doc, "operator": "aten::add"},
        "a list for its dispatch": {**doc, "operator": {**doc["operator"], "dispatch": 5}},
        "a location of no line": {**doc, "operator": {**doc["operator"], "location": {"path": "x.yaml"}}},
        "a location before line 1": {**doc, "operator": {**doc["operator"], "location": {"path": "x.yaml", "line": 0}}},
    }
    for what, bad in shapes.items():
        path = tmp_path / "bad.json"
        path.write_text(json.dumps(bad))
        done = run_kernelmap("render", str(path))
        assert one_line_error(done), (what, done.stderr)


def test_an_error_line_shortens_what_it_echoes():
    long_name = "torch." + "x" * 100_000
    for args in (["where", long_name], ["path", "torch.add", long_name], ["render", "/" + "y" * 50_000]):
        done = run_kernelmap(*args)
        assert one_line_error(done), done.stderr[:300]
        assert len(done.stderr) < 1200 and "characters]" in done.stderr, len(done.stderr)
    from kernelmap.printable import shortened_line

    short = "unknown name 'torch.nn.Conv3dd'; closest: torch.nn.Conv3d"
    assert shortened_line(short) == short  # a line of ordinary length is as it was


def test_the_cli_module_formats_every_error_through_one_place():
    # an unknown option, a bad value, a library error: the same shortened line
    long = "z" * 20_000
    for args in (["where", "--device", long, "aten::add"], ["stack", "aten::add", "--width", long]):
        done = subprocess.run([sys.executable, "-m", "kernelmap", *args], capture_output=True, text=True)
        assert done.returncode == 2 and len(done.stderr) < 1200, (args, len(done.stderr))
