"""Robustness, as a user meets it: format characters (bidi controls, zero-width
characters) never reach the terminal raw; `render` reads back any document
kernelmap writes, however deep; a reader that goes away ends a command quietly;
`serve --port 0` names the port it listens on; a generation killed with
SIGKILL leaves nothing behind once the next one starts."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import unicodedata
import urllib.request
from pathlib import Path

import pytest

from kernelmap.printable import FORMAT_RANGES, printable, printable_line
from tests.conftest import run_kernelmap


def one_line_error(done, pattern=""):
    lines = done.stderr.strip().splitlines()
    return done.returncode == 2 and len(lines) == 1 and lines[0].startswith("kernelmap: error:") and pattern in lines[0]


def escape(c: str) -> str:
    n = ord(c)
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}" if n < 0x10000 else f"\\U{n:08x}"


ALL = [chr(n) for n in range(0x110000) if not 0xD800 <= n <= 0xDFFF]


# -- 1. format characters -----------------------------------------------------------------------


def test_every_format_character_of_this_python_is_escaped():
    formats = [c for c in ALL if unicodedata.category(c) == "Cf"]
    assert len(formats) > 150 and "\u202e" in formats and "\u200b" in formats and "\U000e0001" in formats
    for c in formats:
        assert printable(f"a{c}b") == f"a{escape(c)}b", hex(ord(c))
        assert printable_line(f"a{c}b") == f"a{escape(c)}b", hex(ord(c))


def test_the_table_holds_format_characters_only():
    # a code point of the table is a format character here, or one of a later Unicode (unassigned here)
    listed = [chr(n) for a, b in FORMAT_RANGES for n in range(a, b + 1)]
    assert {unicodedata.category(c) for c in listed} <= {"Cf", "Cn"}


def test_what_is_neither_control_nor_format_is_kept():
    # letters, marks, numbers, punctuation, symbols and spaces of every script, astral ones included
    shown = "".join(c for c in ALL if unicodedata.category(c)[0] in "LMNPS" or unicodedata.category(c) == "Zs")
    assert len(shown) > 100_000 and "\U0001f600" in shown and "中" in shown and "é" in shown
    assert printable(shown) == shown and printable_line(shown) == shown
    assert printable("a\tb\nc") == "a\tb\nc" and printable_line("a\tb\nc") == "a\\x09b\\x0ac"


def test_a_kernel_name_with_a_bidi_override_is_shown_escaped():
    done = run_kernelmap("kernel", "void evil\u202eabc<float>(int)")
    assert done.returncode == 0, done.stderr
    assert "evil\\u202eabc" in done.stdout and "\u202e" not in done.stdout + done.stderr


def test_trace_names_with_format_characters_are_shown_escaped(tmp_path):
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::add\u2066\u200b", "pid": 1, "tid": 1, "ts": 1000, "dur": 50, "args": {}},
        {"ph": "X", "cat": "kernel", "name": "void k\U000e0041\u202e()", "pid": 0, "tid": 7, "ts": 1010, "dur": 5, "args": {}},
    ]
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"traceEvents": events}))
    done = run_kernelmap("trace", "--from", str(trace), "--width", "200")
    assert done.returncode == 0, done.stderr
    assert "aten::add\\u2066\\u200b" in done.stdout and "void k\\U000e0041\\u202e()" in done.stdout
    assert not any(unicodedata.category(c) == "Cf" for c in done.stdout + done.stderr)


def test_a_tree_whose_path_has_format_characters_is_shown_escaped(tmp_path):
    root = tmp_path / "py\u202etorch\u200b"
    (root / "aten").mkdir(parents=True)
    (root / "version.txt").write_text("2.6.0a0\n")
    env = {"KERNELMAP_CACHE_DIR": str(tmp_path / "cache")}
    added = run_kernelmap("source", "add", str(root), "--name", "tiny", env=env)
    listed = run_kernelmap("source", "list", env=env)
    for done in (added, listed):
        assert done.returncode == 0, done.stderr
        assert "py\\u202etorch\\u200b" in done.stdout
        assert "\u202e" not in done.stdout + done.stderr and "\u200b" not in done.stdout + done.stderr
    unknown = run_kernelmap("index", "--source", "ev\u202eil", env=env)
    assert one_line_error(unknown, "'ev\\u202eil'") and "\u202e" not in unknown.stderr, unknown.stderr


# -- 2. render reads what kernelmap writes, at any depth -----------------------------------------


def deep_trace(path: Path, depth: int) -> Path:
    """`depth` calls of aten::add on one thread, each inside the one before."""
    events = [{"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 1000 + i, "dur": 2 * (depth - i) + 10, "args": {}}
              for i in range(depth)]
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def test_render_reads_a_deep_trace_document_kernelmap_wrote(tmp_path):
    done = run_kernelmap("trace", "--from", str(deep_trace(tmp_path / "deep.json", 600)), "--json")
    assert done.returncode == 0, done.stderr
    saved = tmp_path / "out.json"
    saved.write_text(done.stdout)
    assert done.stdout.count('"children"') >= 600  # nested deeper than json.load recurses

    again = run_kernelmap("render", str(saved), "--json")
    assert again.returncode == 0, again.stderr
    assert again.stdout == done.stdout
    text = run_kernelmap("render", str(saved), "--width", "100")
    assert text.returncode == 0, text.stderr
    assert "aten::add" in text.stdout and text.stderr == ""


@pytest.mark.parametrize("text, where", [("[" * 100_000, "line 1 column 100001"), ("[" * 5000 + "1," + "]" * 5000, "line 1 column 5003"),
                                         ('{"a":' * 3000 + "x", "line 1 column 15001")])
def test_render_refuses_deep_garbage_in_one_line(tmp_path, text, where):
    bad = tmp_path / "bad.json"
    bad.write_text(text)
    done = run_kernelmap("render", str(bad))
    assert one_line_error(done, "is not JSON: Expecting"), done.stderr
    assert where in done.stderr


def test_loads_reads_as_json_does_at_any_depth():
    from kernelmap.render.json import _loads_deep, dumps, loads

    doc = {"a": [1, -2.5e3, True, False, None, "x\u00e9\n\"", {}, []], "b": {"c": {"d": [[], [{}]]}}, "n": 10**30}
    for text in (json.dumps(doc), dumps(doc), dumps(doc, None), " [ ] ", '"s"', "3"):
        assert _loads_deep(text) == json.loads(text)
    deep: object = {"leaf": 1}
    for i in range(30_000):
        deep = {"children": [deep], "i": i}
    text = dumps(deep)
    assert dumps(loads(text)) == text  # `==` on the data would recurse
    for bad in ("", "[", "[1,]", '{"a"}', '{"a":1,}', "[1 2]", "{1:2}", "[1]]", "[1] x", '{"a":1]', "[1}", "tru"):
        with pytest.raises(ValueError) as deep_error:
            _loads_deep(bad)
        with pytest.raises(ValueError) as standard:
            json.loads(bad)
        assert str(deep_error.value) == str(standard.value), bad


# -- 3. a reader that goes away -------------------------------------------------------------------


def run_into_closed_pipe(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run kernelmap with standard output a pipe whose reader is already gone (`| head -0`, at once)."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run([sys.executable, "-m", "kernelmap", *args], stdout=write, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, **(env or {})}, timeout=300)
    finally:
        os.close(write)


def test_every_command_ends_quietly_when_its_reader_goes(tmp_path):
    tree = tmp_path / "pytorch"
    (tree / "aten/src/ATen/native").mkdir(parents=True)
    (tree / "version.txt").write_text("2.6.0a0\n")
    (tree / "aten/src/ATen/native/Neg.cpp").write_text("namespace at::native {\nDEFINE_DISPATCH(neg_stub);\n}\n")
    env = {"KERNELMAP_CACHE_DIR": str(tmp_path / "cache")}
    assert run_kernelmap("source", "add", str(tree), "--name", "tiny", env=env).returncode == 0
    for args in (("index", "--source", "tiny"), ("find", "neg_stub", "--source", "tiny"), ("source", "list"), ("--help",)):
        done = run_into_closed_pipe(*args, env=env)
        assert (done.returncode, done.stderr) == (1, ""), (args, done.returncode, done.stderr)
    assert run_kernelmap("find", "neg_stub", "--source", "tiny", env=env).returncode == 0  # the index was built all the same


# -- 4. serve --port 0 ----------------------------------------------------------------------------


def test_serve_on_port_0_names_the_port_it_listens_on():
    proc = subprocess.Popen([sys.executable, "-m", "kernelmap", "serve", "--port", "0"], stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stderr.readline()
        m = re.fullmatch(r"kernelmap serving on (http://127\.0\.0\.1:(\d+)/\?token=[\w-]+) \(Ctrl-C stops\)\n", line)
        assert m and int(m.group(2)) != 0, line
        # the printed link sets the launch's cookie and leads to the page: a client keeps the cookie
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor())
        deadline = time.monotonic() + 60
        while True:
            try:
                with opener.open(m.group(1), timeout=10) as page:
                    assert page.status == 200 and b"kernelmap" in page.read()
                break
            except OSError:
                assert time.monotonic() < deadline, "the server never answered on the port it named"
                time.sleep(0.3)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


# -- 5. a killed generation -----------------------------------------------------------------------


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_folders_of_dead_generations_go_and_a_running_ones_stay():
    from kernelmap.codegen.build import cache_root

    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    holder = subprocess.Popen([sys.executable, "-c", "import filelock, sys, time; lock = filelock.FileLock(sys.argv[1]); lock.acquire(); print('held', flush=True); time.sleep(120)",
                               str(root / ".fake-held.lock")], stdout=subprocess.PIPE, text=True)
    dead = dead_pid()
    gone = [root / f".fake-a.tmp-{dead}-abcd1234", root / f".fake-a.old-{dead}", root / ".fake-free.tmp-k4z985hc"]
    kept = [root / f".fake-a.tmp-{alive.pid}-abcd1234", root / ".fake-held.tmp-k4z985hc"]
    try:
        assert holder.stdout.readline() == "held\n"
        for folder in gone + kept:
            (folder / "build").mkdir(parents=True)
            (folder / "build/file.cpp").write_text("int x;\n")
        done = run_kernelmap("gen", "aten::mm", "--layer", "ops")
        assert done.returncode == 0, done.stderr
        assert [f.name for f in gone if f.exists()] == []
        assert [f.name for f in kept if not (f / "build/file.cpp").exists()] == []  # a live owner's folder is whole
    finally:
        for proc in (alive, holder):
            proc.kill()
            proc.wait()
        for folder in gone + kept:
            shutil.rmtree(folder, ignore_errors=True)
        (root / ".fake-held.lock").unlink(missing_ok=True)
        (root / ".fake-free.lock").unlink(missing_ok=True)


def children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads a process's children from /proc")
def test_a_generation_killed_with_sigkill_leaves_nothing_behind(wheel_only_cache):  # no tree: gen generates the wheel's files
    from kernelmap.codegen.build import cache_root, installed_source

    root = cache_root()
    slug = installed_source().slug
    before = {p.name for p in root.iterdir()}
    proc = subprocess.Popen([sys.executable, "-m", "kernelmap", "gen", "aten::mm", "--regenerate"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    torchgen: list[int] = []
    left: list[Path] = []
    try:
        deadline = time.monotonic() + 120
        while len(torchgen) < 2 or not left or not any(left[0].rglob("*.cpp")):  # torchgen is writing into its folder
            assert proc.poll() is None and time.monotonic() < deadline, "the generation never started writing"
            torchgen = children(proc.pid)
            left = [root / n for n in os.listdir(root) if n.startswith(f".{slug}.tmp-") and n not in before]
            time.sleep(0.1)
        proc.kill()
        proc.wait()
        deadline = time.monotonic() + 5
        while any(running(pid) for pid in torchgen):
            assert time.monotonic() < deadline, "torchgen goes on writing after its parent was killed"
            time.sleep(0.05)
        assert all(folder.exists() for folder in left)  # the kill left it, as a SIGKILL does

        done = run_kernelmap("gen", "aten::mm", "--layer", "ops")
        assert done.returncode == 0, done.stderr
        assert [folder.name for folder in left if folder.exists()] == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in torchgen:
            if running(pid):
                os.kill(pid, signal.SIGKILL)
        for folder in left:
            shutil.rmtree(folder, ignore_errors=True)


def test_a_cache_directory_that_is_a_file_is_said_so(tmp_path):
    """KERNELMAP_CACHE_DIR naming a file: the commands that read the tree
    registry say so in one line, exit 2, not that trees.json is unreadable
    (the catalog works uncached, as from a read-only cache directory)."""
    file = tmp_path / "not-a-dir"
    file.write_text("x")
    for args in (("source", "list"), ("find", "mul_stub"), ("source", "remove", "x")):
        r = run_kernelmap(*args, env={"KERNELMAP_CACHE_DIR": str(file)})
        assert r.returncode == 2 and r.stderr == f"kernelmap: error: the cache directory {file} is a file, not a directory (set by KERNELMAP_CACHE_DIR)\n", (args, r.stderr)
    assert file.read_text() == "x"
