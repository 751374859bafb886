"""A FIFO or a link loop at a path kernelmap reads or writes is refused at
once, in one line, never waited on (kernelmap.safefiles).

The paths are not listed here: representative commands run once with an
audit hook that records every file they open, connect SQLite to or rename
into place; each recorded path under a private cache (and each output a
command writes) then gets a FIFO, and then a link loop, in its place, and
the command that read it runs again. It must end (a FIFO that is read
blocks for ever) with its answer or one `kernelmap: error:` line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kernelmap.errors import BadInput
from kernelmap.safefiles import NotRegularFile, check_output, check_regular, connect, open_regular, read_text, write_output
from tests.graph.conftest import indexed_tree  # noqa: F401 - the graph tests' indexed 2.6.0 tree

# Runs `python -m kernelmap ARGS` with an audit hook recording the paths it opens, connects to or renames into place.
RECORDER = r"""
import atexit, json, os, sys, urllib.parse
seen = {}
def hook(event, args):
    if event in ("open", "sqlite3.connect", "os.rename", "os.replace") and args:
        for a in (args[:2] if event.startswith("os.") else args[:1]):
            if isinstance(a, (str, bytes, os.PathLike)):
                p = os.fsdecode(a)
                if p.startswith("file:"):  # a SQLite URI
                    p = urllib.parse.unquote(urllib.parse.urlsplit(p).path)
                seen.setdefault(os.path.abspath(p), event)
sys.addaudithook(hook)
atexit.register(lambda: json.dump(seen, open(os.environ["KM_RECORD"], "w")))
sys.argv = ["kernelmap", *sys.argv[1:]]
from kernelmap.cli import main
main()
"""

TIMEOUT = 60  # seconds: a FIFO that is read blocks for ever; an answer takes a few


# -- the helper, on its own ------------------------------------------------------------------


@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "fifo"
    os.mkfifo(path)
    return path


@pytest.fixture
def loop(tmp_path):
    a, b = tmp_path / "loop-a", tmp_path / "loop-b"
    a.symlink_to(b)
    b.symlink_to(a)
    return a


def test_a_fifo_or_a_loop_is_refused_at_once_and_a_file_is_read(tmp_path, fifo, loop):
    for path, words in ((fifo, "a FIFO"), (loop, "a symbolic link loop"), (tmp_path, "a folder")):
        with pytest.raises(NotRegularFile, match=f"the cache file {path} is {words}, not a regular file"):
            read_text(path, "the cache file")
        with pytest.raises(NotRegularFile):
            check_regular(path, "the cache file")
        with pytest.raises(NotRegularFile):
            connect(path, "the cache file")
    assert check_regular(tmp_path / "absent") is None and check_regular(tmp_path / "absent" / "below") is None
    with pytest.raises(FileNotFoundError):
        open_regular(tmp_path / "absent")
    real = tmp_path / "real.txt"
    real.write_text("text")
    link = tmp_path / "link.txt"
    link.symlink_to(real)
    assert read_text(real) == read_text(link) == "text"  # a link to a regular file is read


def test_an_output_is_checked_before_any_work_and_written_aside(tmp_path, fifo, loop):
    for path, words in ((fifo, "it is a FIFO"), (tmp_path, "it is a folder"), (loop / "x.html", "symbolic link loop"),
                        (tmp_path / "missing" / "x.html", "no such file"), (Path("/dev/null"), "it is a character device")):
        with pytest.raises(BadInput, match=f"cannot write --html {path}") as refused:
            check_output(path, "--html")
        assert words.lower() in str(refused.value).lower(), refused.value
    with pytest.raises(BadInput, match="names no file"):
        check_output(" ", "--html")
    write_output(loop, "<p>replaced</p>", "--html")  # a link (even a loop) at the name is replaced, never written through
    assert not loop.is_symlink() and loop.read_text() == "<p>replaced</p>"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo", "loop-a", "loop-b"]  # nothing left aside


def test_the_cli_refuses_a_fifo_output_before_it_computes(fifo):
    done = subprocess.run([sys.executable, "-m", "kernelmap", "where", "aten::relu", "--static", "--html", str(fifo)],
                          capture_output=True, text=True, timeout=TIMEOUT)
    assert done.returncode == 2 and done.stderr == f"kernelmap: error: cannot write --html {fifo}: it is a FIFO, not a regular file\n"


# -- every path the commands touch ---------------------------------------------------------


def _link_tree(source: Path, target: Path) -> None:
    """`target` as a copy of `source` whose files are hard links (a copy where
    links cannot be made): a FIFO is planted by renaming a name away, so the
    session cache's files are never written."""
    for folder, dirs, files in os.walk(source):
        rel = Path(folder).relative_to(source)
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        (target / rel).mkdir(parents=True, exist_ok=True)
        for name in files:
            if name.startswith(".") or name.endswith(".lock"):
                continue
            src, dst = Path(folder) / name, target / rel / name
            try:
                os.link(src, dst)
            except OSError:
                shutil.copy2(src, dst)


@pytest.fixture(scope="module")
def private(tmp_path_factory, session_cache, tree_2_6, indexed_tree):
    """A private cache holding the session's registry, index, catalogs and
    generated files (of the selected tree and of the wheel), and a project
    and documents for the commands that read and write files by name."""
    from kernelmap import api
    from kernelmap.codegen import generated_files
    from kernelmap.render import render

    generated_files()
    generated_files(tree=tree_2_6.resolve())
    where = api.where("aten::relu", static=True)
    root = tmp_path_factory.mktemp("planted")
    cache = root / "cache"
    for part in ("index", "catalog", "codegen"):
        _link_tree(session_cache / part, cache / part)
    shutil.copy2(session_cache / "trees.json", cache / "trees.json")
    (root / "where.json").write_text(render(where, "json"))
    trace = root / "trace.json"
    trace.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 10, "dur": 5, "args": {}}]}))
    env = {**os.environ, "KERNELMAP_CACHE_DIR": str(cache)}
    done = subprocess.run([sys.executable, "-m", "kernelmap", "scaffold", "aten::relu", "--name", "myrelu", "--out", str(root / "proj")],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    return root, cache, env


def commands(root: Path) -> list[list[str]]:
    return [
        ["source", "list"],
        ["where", "aten::add.Tensor", "--static"],
        ["stack", "aten::add.Tensor"],
        ["gen", "aten::add.Tensor", "--layer", "ops"],
        ["kernel", "void cudnn::bn_fw_inf_1C11_kernel_NCHW<float, float, true, 1>(float)"],
        ["scaffold", "aten::relu", "--name", "myrelu", "--out", str(root / "proj"), "--force"],
        ["render", str(root / "where.json"), "--html", str(root / "out" / "where.html")],
        ["trace", "--from", str(root / "trace.json"), "--no-tree", "--export-chrome", str(root / "out" / "trace.json")],
    ]


def _run(args: list[str], env: dict, record: Path | None = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-c", RECORDER, *args] if record is not None else [sys.executable, "-m", "kernelmap", *args]
    return subprocess.run(cmd, capture_output=True, text=True, env={**env, "KM_RECORD": str(record or "")}, timeout=TIMEOUT)


@pytest.fixture(scope="module")
def touched(private):
    """(command, path) for every path under the private cache, the project
    and the outputs that a command opened, connected to or renamed into place."""
    root, cache, env = private
    (root / "out").mkdir()
    found: dict[str, list[str]] = {}
    for i, args in enumerate(commands(root)):
        record = root / f"record-{i}.json"
        done = _run(args, env, record)
        assert done.returncode == 0, (args, done.stderr)
        for path in json.loads(record.read_text()):
            inside = path.startswith((str(cache) + os.sep, str(root / "proj") + os.sep, str(root / "out") + os.sep))
            if inside and not path.startswith(str(cache / "trace")) and ".tmp" not in path and ".part" not in path:
                found.setdefault(path, args)
    # the trace's dispatch cache (cache/trace/) is read by kernelmap.trace, named apart in the report
    assert len(found) > 30, sorted(found)  # every file each command opened, not a list kept by hand
    return sorted((args, path) for path, args in found.items())


def test_the_commands_touch_every_kind_of_cache_file(touched, private):
    root, cache, _ = private
    rel = {str(Path(p).relative_to(root)) for _, p in touched}
    kinds = {"trees.json", "catalog", "index/", ".record", "manifest.json", "index.sqlite", ".cpp", "kernelmap.json", "where.html", "out/trace.json"}
    assert all(any(k in r for r in rel) for k in kinds), sorted(rel)


@pytest.mark.parametrize("plant", ["fifo", "loop"])
def test_a_fifo_or_a_link_loop_at_any_touched_path_ends_in_one_line(touched, private, plant):
    root, cache, env = private
    failures = []
    for args, path in touched:
        target = Path(path)
        aside = target.with_name(target.name + ".aside")
        existed = target.exists() or target.is_symlink()
        if existed:
            os.rename(target, aside)
        try:
            if plant == "fifo":
                os.mkfifo(target)
            else:
                other = target.with_name(target.name + ".loop")
                target.symlink_to(other)
                other.symlink_to(target)
            try:
                done = _run(args, env)
            except subprocess.TimeoutExpired:
                failures.append(f"{plant} at {path}: `kernelmap {' '.join(args[:2])}` still running after {TIMEOUT}s")
                continue
            lines = done.stderr.strip().splitlines()
            one_line = done.returncode == 2 and lines and lines[-1].startswith("kernelmap: error:") and "Traceback" not in done.stderr
            if not (done.returncode == 0 or one_line):
                failures.append(f"{plant} at {path}: `kernelmap {' '.join(args[:2])}` exit {done.returncode}: {done.stderr[-300:]}")
        finally:
            for leftover in (target, target.with_name(target.name + ".loop")):
                if leftover.is_symlink() or leftover.exists():
                    if leftover.is_dir() and not leftover.is_symlink():
                        shutil.rmtree(leftover)
                    else:
                        leftover.unlink()
            if existed:
                os.rename(aside, target)
    assert not failures, "\n".join(failures)
