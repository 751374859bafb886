"""Trace files a hostile tester made (issue "Hardening and scale"): a lone
surrogate in a name, numbers that are not finite, names too long for the
OS, escape sequences in file names, outputs that are not regular files, and
calls nested thousands deep. Each gives a correct answer, or one
`kernelmap: error:` line and exit status 2."""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path

import pytest

from tests.conftest import run_kernelmap

DATA = Path(__file__).resolve().parent / "data"


def event(name="aten::add", ts=1000, dur=50):
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": {}}


def write(path, text):
    path.write_text(text)
    return path


def one_line_error(done, pattern=""):
    lines = done.stderr.strip().splitlines()
    return done.returncode == 2 and len(lines) == 1 and lines[0].startswith("kernelmap: error:") and pattern in lines[0]


def test_a_lone_surrogate_in_a_name_is_shown_escaped(tmp_path):
    # json.dumps writes the lone surrogate as the escape \ud800, as the audit's file had it
    trace = write(tmp_path / "s.json", json.dumps({"traceEvents": [event("aten::add\ud800"), event("void k\ud800()", 1010, 5) | {"cat": "kernel", "pid": 0, "tid": 7}]}))
    for args in ((), ("--json",)):
        done = run_kernelmap("trace", "--from", str(trace), *args)
        assert done.returncode == 0, done.stderr
        assert "aten::add\\ud800" in done.stdout.replace("\\\\", "\\")


@pytest.mark.parametrize("field, value, what", [
    ("dur", "NaN", "duration nan"), ("dur", "1e400", "duration inf"), ("ts", "Infinity", "ts inf"), ("ts", "-Infinity", "ts -inf"),
])
def test_numbers_that_are_not_finite_are_refused(tmp_path, field, value, what):
    text = json.dumps({"traceEvents": [event(), event("aten::mul", 1100, 10)]}).replace(f'"{field}": {1100 if field == "ts" else 10}', f'"{field}": {value}')
    assert value in text
    done = run_kernelmap("trace", "--from", str(write(tmp_path / "t.json", text)))
    assert one_line_error(done, what), done.stderr


def test_a_name_too_long_for_the_os_is_one_line(tmp_path):
    done = run_kernelmap("trace", "--from", str(tmp_path / ("a" * 300 + ".json")))
    assert one_line_error(done, "too long"), done.stderr


def test_a_file_name_with_escape_sequences_is_shown_escaped(tmp_path):
    folder = tmp_path / "d"
    folder.mkdir()
    write(folder / "r\x1b]0;PWNED\x07.json", json.dumps({"traceEvents": [event(dur=-1)]}))
    done = run_kernelmap("trace", "--from", str(folder))
    assert one_line_error(done, "r\\x1b]0;PWNED\\x07.json"), done.stderr
    assert "\x1b" not in done.stderr and "\x07" not in done.stderr


@pytest.mark.parametrize("option", ["--export-chrome", "--html"])
def test_an_output_that_is_not_a_regular_file_is_refused_and_kept(tmp_path, option):
    trace = write(tmp_path / "t.json", json.dumps({"traceEvents": [event()]}))
    fifo = tmp_path / "out.json"
    os.mkfifo(fifo)
    done = run_kernelmap("trace", "--from", str(trace), option, str(fifo))
    assert one_line_error(done, "not a regular file"), done.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_where_html_into_a_fifo_is_refused(tmp_path):
    fifo = tmp_path / "out.html"
    os.mkfifo(fifo)
    done = run_kernelmap("where", "conv2d", "--static", "--html", str(fifo))
    assert one_line_error(done, "not a regular file"), done.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def nested(path, n):
    """`n` operators, each running inside the one before."""
    return write(path, json.dumps({"traceEvents": [event(ts=i, dur=2 * n - 2 * i) for i in range(n)]}))


def test_calls_nested_thousands_deep_make_a_report_and_a_document_of_linear_size(tmp_path):
    n = 2000
    trace = nested(tmp_path / "deep.json", n)
    html = tmp_path / "deep.html"
    done = run_kernelmap("trace", "--from", str(trace), "--html", str(html))
    assert done.returncode == 0, done.stderr[-500:]
    assert html.stat().st_size > 0
    doc = run_kernelmap("trace", "--from", str(trace), "--json", "--full-tree")
    assert doc.returncode == 0, doc.stderr[-500:]
    # (json.loads would recurse once per level) every operator is there, each inside the one before
    assert doc.stdout.count('"aten::add"') >= n and doc.stdout.count('"children"') >= n
    bounded = run_kernelmap("trace", "--from", str(trace), "--json")  # by default, the hottest nodes: the outermost thousand
    from kernelmap.render.json import loads

    stack, shown = [loads(bounded.stdout)["tree"]["root"]], []
    while stack:
        node = stack.pop()
        shown.append(node["kind"])
        stack.extend(node["children"])
    assert len(shown) == 1000 + 1 and shown.count("note") == 1  # and one line saying what is below
    half = run_kernelmap("trace", "--from", str(nested(tmp_path / "half.json", n // 2)), "--json", "--full-tree")
    assert len(doc.stdout) < 2.5 * len(half.stdout)  # twice the depth, twice the text: not spaces growing with the depth


@pytest.mark.parametrize("seq", [[1], {"a": 1}])
def test_a_sequence_number_that_is_no_number_is_ignored(tmp_path, seq):
    trace = write(tmp_path / "seq.json", json.dumps({"traceEvents": [event() | {"args": {"Sequence number": seq}}]}))
    done = run_kernelmap("trace", "--from", str(trace), "--json")
    assert done.returncode == 0, done.stderr


def test_a_kernel_with_no_name_is_unknown_not_an_error(tmp_path):
    kernel = {"ph": "X", "cat": "kernel", "name": "", "pid": 0, "tid": 7, "ts": 1010, "dur": 1, "args": {}}
    done = run_kernelmap("trace", "--from", str(write(tmp_path / "k.json", json.dumps({"traceEvents": [event(), kernel]}))))
    assert done.returncode == 0, done.stderr


def test_several_ranks_refuse_the_outputs_of_one_trace(tmp_path):
    folder = tmp_path / "ranks"
    folder.mkdir()
    for name in ("a.json", "b.json"):
        write(folder / name, json.dumps({"traceEvents": [event()]}))
    for option in ("--html", "--export-chrome"):
        done = run_kernelmap("trace", "--from", str(folder), option, str(tmp_path / "out"))
        assert one_line_error(done, "several ranks"), done.stderr
        assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("value", ["nan", "-5", "inf"])
def test_render_checks_min_us_as_trace_does(tmp_path, value):
    saved = run_kernelmap("trace", "--from", str(write(tmp_path / "t.json", json.dumps({"traceEvents": [event()]}))), "--json")
    doc = write(tmp_path / "doc.json", saved.stdout)
    assert one_line_error(run_kernelmap("render", str(doc), "--min-us", value), "--min-us")


def test_code_nested_beyond_the_parser_is_one_line():
    done = run_kernelmap("trace", "-c", "x=" + "-" * 100000 + "1")
    assert one_line_error(done, "nested too deeply"), done.stderr[-300:]


def test_the_text_tree_of_a_trace_thousands_deep_stops_at_its_default_depth(tmp_path):
    from kernelmap.commands.trace import TEXT_DEPTH

    n = 3 * TEXT_DEPTH
    done = run_kernelmap("trace", "--from", str(nested(tmp_path / "deep.json", n)), "--no-summary")
    assert done.returncode == 0, done.stderr
    assert f"children below depth {TEXT_DEPTH}" in done.stdout
    assert TEXT_DEPTH - 2 <= done.stdout.count("aten::add") <= TEXT_DEPTH  # the levels drawn (below the trace and thread nodes)
    deeper = run_kernelmap("trace", "--from", str(tmp_path / "deep.json"), "--no-summary", "--depth", str(n + 1))
    assert deeper.stdout.count("aten::add") == n


def test_an_unusable_event_is_named_by_its_number_and_no_false_byte_offset(tmp_path):
    events = [event(ts=1000 + 100 * i) for i in range(1000)]
    events[700]["dur"] = "abc"
    trace = write(tmp_path / "bad.json", json.dumps({"traceEvents": events}))
    done = run_kernelmap("trace", "--from", str(trace))
    assert one_line_error(done, "event #700 ('aten::add') lacks a usable name/ts/dur: dur is not a number")
    assert "at byte" not in done.stderr  # the reader cannot tell where that event began: no offset is made up


def test_a_truncated_gzip_trace_says_where_its_data_breaks(tmp_path):
    """A real trace cut short inside its gzip stream: the error names how many
    bytes decompress before the break (counted here by reading the file 1 KB
    at a time until gzip gives up), not the reader's place in the JSON."""
    import gzip

    source = DATA / "hta-trace_filter-sampled_rank-1.json.gz"
    for cut in (20_000, 100_000):
        broken = tmp_path / f"cut-{cut}.json.gz"
        broken.write_bytes(source.read_bytes()[:cut])
        count = 0
        with gzip.open(broken) as f:
            try:
                while piece := f.read(1024):
                    count += len(piece)
            except EOFError:
                pass
        r = run_kernelmap("trace", "--from", str(broken), "--no-tree")
        assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
        found = int(re.search(r"after byte (\d+) of the decompressed data", r.stderr).group(1))
        assert count - 1024 < found <= count + 1024 and found > cut, (found, count)
