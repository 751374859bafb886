"""Hostile input to the source layer: damaged caches and registries, races
with the tree and with `source remove`, degenerate C++, wildcard names, and
option values out of range. Each must give a correct answer, or one
`kernelmap: error:` line and exit status 2."""

from __future__ import annotations

import json
import os
import sqlite3
import time

import pytest
from click.testing import CliRunner

from kernelmap.cli import cli
from kernelmap.errors import BadInput, SourceError
from kernelmap.source import add_tree, build_index, index_path, list_trees, open_index, remove_tree
from kernelmap.source import build as build_module
from kernelmap.source import extract
from kernelmap.source.facts import OperatorNames
from kernelmap.source.trees import registry_path

from .conftest import make_tree
from .test_source_build import small

NO_OPS = OperatorNames(frozenset(), frozenset())


def run(*args):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def assert_one_line_error(result, pattern):
    assert result.exit_code == 2, result.output
    err = result.stderr.strip()
    assert "\n" not in err and "Traceback" not in err, err
    assert err.startswith("kernelmap: error:") and pattern in err, err


# -- find ----------------------------------------------------------------------


def test_find_percent_is_literal_not_a_wildcard(tmp_path, cache):
    tree = small(tmp_path / "t")
    build_index(tree, jobs=1)
    # '%' names nothing in the tree; before, LIKE '%.%' matched every dotted string.
    assert_one_line_error(run("find", "%", "--source", tree.name), "unknown name '%'")
    assert_one_line_error(run("find", "_", "--source", tree.name), "unknown name '_'")


def test_find_says_when_files_changed_since_the_index(tmp_path, cache):
    """A file edited after `index` may have moved its lines: find answers from
    the index and says so in one note naming the file; a file only touched
    (same content) is no change; `index` makes the note go."""
    tree = small(tmp_path / "t")
    build_index(tree, jobs=1)
    path = tree.root / "aten/src/ATen/native/cpu/NegKernel.cpp"
    assert run("find", "neg_stub", "--source", tree.name).stderr == ""
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))
    assert run("find", "neg_stub", "--source", tree.name).stderr == ""
    path.write_text("// a line more\n" + path.read_text())
    r = run("find", "neg_stub", "--source", tree.name)
    assert r.exit_code == 0 and r.stderr == (f"kernelmap: note: 1 file of {tree.name} changed since it was indexed "
                                             f"(aten/src/ATen/native/cpu/NegKernel.cpp): its lines may have moved; "
                                             f"run `kernelmap index --source {tree.name}`\n")
    with open_index(tree) as ix:
        assert ix.changed_files() == ["aten/src/ATen/native/cpu/NegKernel.cpp"]
    build_index(tree, jobs=1)
    assert run("find", "neg_stub", "--source", tree.name).stderr == ""


def test_find_limit_is_zero_or_more(tmp_path, cache):
    tree = small(tmp_path / "t")
    build_index(tree, jobs=1)
    with open_index(tree) as ix:
        every = len(ix.callers_of("neg_stub"))
    assert every >= 1
    assert_one_line_error(run("find", "neg_stub", "--source", tree.name, "--limit", "-1"), "--limit")
    doc = json.loads(run("find", "neg_stub", "--source", tree.name, "--limit", "0", "--json").output)
    assert doc["references"] == [] and doc["more_references"] == every


@pytest.mark.parametrize("name, message", [("a" * 100_000, "too long"), ("neg\udcff", "not valid UTF-8"), ("neg\x1b[2J", "not a C++ name")])
def test_find_refuses_names_no_one_wrote(tmp_path, cache, name, message):
    tree = small(tmp_path / "t")
    build_index(tree, jobs=1)
    assert_one_line_error(run("find", name, "--source", tree.name), message)


# -- the index: damage, races, budgets --------------------------------------------


def test_a_damaged_index_is_rebuilt_and_reads_never_trace(tmp_path, cache):
    tree = small(tmp_path / "t")
    build_index(tree, jobs=1)
    path = index_path(tree)
    data = bytearray(path.read_bytes())
    page = 4096
    # Flip bits past the header: in the b-tree pages of the tables.
    for i in range(page + 100, len(data), 97):
        data[i] ^= 0x5A
    path.write_bytes(bytes(data))
    r = run("find", "at::native::neg", "--source", tree.name)
    assert r.exit_code in (0, 2)
    if r.exit_code == 2:
        assert_one_line_error(r, "index")
    report = build_index(tree, jobs=1)
    assert report.full and ("damaged" in report.rebuilt_reason or "unreadable" in report.rebuilt_reason)
    with open_index(tree) as ix:
        assert [d.name for d in ix.definitions("at::native::neg")] == ["at::native::neg"]


def test_an_index_whose_schema_names_are_not_utf8_is_rebuilt_not_a_traceback(tmp_path, cache):
    """A flipped bit in a table's name in the schema (found by `make fuzz`:
    `registrations` read `\\xf2egistrations`): SQLite's error message quotes
    the name, and reading that message raised UnicodeDecodeError on every read."""
    tree = small(tmp_path / "t")
    build_index(tree, jobs=1)
    db = sqlite3.connect(index_path(tree))
    db.execute("PRAGMA writable_schema = ON")
    db.execute("UPDATE sqlite_master SET name = CAST(X'f2' || CAST(substr(name, 2) AS BLOB) AS TEXT) WHERE name = 'registrations'")
    db.commit()
    db.close()
    with pytest.raises(SourceError, match="unreadable"):
        open_index(tree)
    assert_one_line_error(run("find", "at::native::neg", "--source", tree.name), "unreadable")
    report = build_index(tree, jobs=1)
    assert report.full and "unreadable" in report.rebuilt_reason
    with open_index(tree) as ix:
        assert [d.name for d in ix.definitions("at::native::neg")] == ["at::native::neg"]


def test_a_fifo_or_a_symlink_out_of_the_tree_is_skipped_and_named(tmp_path, cache):
    outside = tmp_path / "outside.cpp"
    outside.write_text("namespace secret { void leaked() {} }\n")
    tree = small(tmp_path / "t")
    native = tree.root / "aten/src/ATen/native"
    (native / "Leak.cpp").symlink_to(outside)
    (native / "Inside.cpp").symlink_to(native / "Neg.cpp")  # inside the tree: indexed
    report = build_index(tree, jobs=1)
    skipped = dict(report.skipped)
    assert skipped["aten/src/ATen/native/Leak.cpp"] == "a symlink out of the tree"
    with open_index(tree) as ix:
        assert ix.definitions("secret::leaked") == []
        assert {d.location.path for d in ix.definitions("at::native::neg")} == {
            "aten/src/ATen/native/Neg.cpp", "aten/src/ATen/native/Inside.cpp"}
    # A file replaced by a FIFO between the scan and the read: never opened for a blocking read.
    fifo = native / "Fifo.cpp"
    os.mkfifo(fifo)
    started = time.monotonic()
    assert build_module.read_source(tree.root, "aten/src/ATen/native/Fifo.cpp") == "not a regular file"
    assert time.monotonic() - started < 5


@pytest.mark.parametrize("nofollow", [True, False], ids=["O_NOFOLLOW", "without O_NOFOLLOW"])
def test_a_link_out_of_the_tree_is_refused_however_files_are_opened(tmp_path, monkeypatch, nofollow):
    """A file is opened where its directory really is, without following a
    link (O_NOFOLLOW); a link is followed only after where it leads is read,
    and where the system has no O_NOFOLLOW, every file's path is read."""
    if not nofollow:
        monkeypatch.setattr(build_module, "_NOFOLLOW", 0)
    outside = tmp_path / "outside.cpp"
    outside.write_text("void leaked() {}\n")
    native = tmp_path / "t" / "aten/src/ATen/native"
    native.mkdir(parents=True)
    (native / "Neg.cpp").write_text("void neg() {}\n")
    (native / "Leak.cpp").symlink_to(outside)
    (native / "Inside.cpp").symlink_to(native / "Neg.cpp")
    dirs: dict[str, str] = {}
    read = [build_module.read_source(tmp_path / "t", f"aten/src/ATen/native/{name}", None, dirs) for name in ("Neg.cpp", "Leak.cpp", "Inside.cpp")]
    assert read == [b"void neg() {}\n", "a symlink out of the tree", b"void neg() {}\n"]
    assert list(dirs) == [str(native)]  # the directory was resolved once for its three files


def test_a_file_deleted_during_a_parallel_build_is_named(tmp_path, cache, monkeypatch):
    tree = small(tmp_path / "t", **{f"aten/src/ATen/native/F{i}.cpp": f"namespace at {{ void f{i}() {{}} }}\n" for i in range(60)})
    real_scan = build_module.scan

    def scan_then_delete(t):
        found = real_scan(t)
        (t.root / "aten/src/ATen/native/F7.cpp").unlink()
        return found

    monkeypatch.setattr(build_module, "scan", scan_then_delete)
    report = build_index(tree, jobs=2)
    assert dict(report.skipped)["aten/src/ATen/native/F7.cpp"].startswith("unreadable")


@pytest.mark.parametrize(
    "name, text, why",
    [
        ("nested namespaces", "namespace a {" * 20_000 + "void f() {}" + "}" * 20_000, "nested more than"),
        ("unclosed templates", "template<" * 60_000, "side by side"),
        ("nested braces", "{" * 100_000 + "}" * 100_000, "nested more than"),
    ],
)
def test_degenerate_cpp_is_skipped_quickly_with_a_reason(name, text, why):
    ex = extract.Extractor(NO_OPS)
    started = time.monotonic()
    facts = ex.extract("aten/src/ATen/native/Hostile.cpp", text.encode())
    assert time.monotonic() - started < 5, name
    assert facts.skipped is not None and why in facts.skipped


def test_the_time_budget_stops_a_slow_file():
    ex = extract.Extractor(NO_OPS, budget=0.05)
    body = "".join(f"void f{i}(int x) {{ if (x) {{ g{i}(x); }} }}\n" for i in range(20_000))
    facts = ex.extract("aten/src/ATen/native/Slow.cpp", f"namespace at {{\n{body}}}\n".encode())
    assert facts.skipped == "took more than 0.05 s to parse"
    # The extractor is usable afterwards: the next file is parsed from scratch.
    ok = ex.extract("aten/src/ATen/native/Ok.cpp", b"namespace at { void ok() {} }\n")
    assert [d.name for d in ok.definitions] == ["at::ok"]


def test_jobs_out_of_range_is_one_line(tmp_path, cache):
    tree = small(tmp_path / "t")
    assert_one_line_error(run("index", "--source", tree.name, "--jobs", str(10**20)), "--jobs")
    assert_one_line_error(run("index", "--source", tree.name, "--jobs", "0"), "--jobs")


def test_stale_copies_of_killed_builds_are_cleaned_for_every_tree(tmp_path, cache):
    one, two = small(tmp_path / "one"), add_tree(make_tree(tmp_path / "two", {"c10/X.h": "int x();\n"}), "two")
    build_index(one, jobs=1)
    directory = index_path(one).parent
    dead = 2**22 + 12345  # above the kernel's pid_max default: no such process
    stale = directory / f".{index_path(two).name}.{dead}.tmp"
    live = directory / f".{index_path(two).name}.{os.getpid()}.tmp"
    stale.write_bytes(b"x")
    live.write_bytes(b"x")
    build_index(one, jobs=1)  # another tree's build cleans it
    assert not stale.exists() and live.exists()


def test_remove_refuses_while_a_build_holds_the_tree(tmp_path, cache):
    tree = small(tmp_path / "t")
    build_index(tree, jobs=1)
    lock = build_module.index_lock(index_path(tree))
    # A build in another process holds the lock; filelock is reentrant within one
    # object, so a second object over the same file stands for that process.
    from filelock import FileLock

    other = FileLock(str(index_path(tree)) + ".lock", is_singleton=False, thread_local=False)
    other.acquire()
    try:
        import multiprocessing

        ctx = multiprocessing.get_context("fork")
        q = ctx.Queue()
        p = ctx.Process(target=_remove_in_child, args=(tree.name, str(cache), q))
        p.start()
        p.join(30)
        assert "being indexed" in q.get(timeout=5)
    finally:
        other.release()
    assert index_path(tree).exists() and [t.name for t in list_trees()] == [tree.name]
    assert remove_tree(tree.name).name == tree.name
    assert not index_path(tree).exists() and not os.path.exists(lock.lock_file)


def _remove_in_child(name, cache, q):
    os.environ["KERNELMAP_CACHE_DIR"] = cache
    try:
        remove_tree(name)
        q.put("removed")
    except SourceError as e:
        q.put(str(e))


# -- the registry ---------------------------------------------------------------


def test_a_registry_entry_of_the_wrong_shape_is_ignored_with_a_warning(tmp_path, cache):
    tree = small(tmp_path / "t")
    data = json.loads(registry_path().read_text())
    data["trees"] += [["not", "an", "object"], {"name": 5, "root": "/x", "version": "1"}, {"name": "x"}]
    registry_path().write_text(json.dumps(data))
    r = run("source", "list")
    assert r.exit_code == 0 and r.stdout.startswith(tree.name + "\t")
    warnings = [ln for ln in r.stderr.splitlines() if ln]
    assert len(warnings) == 3 and all(ln.startswith("kernelmap: warning: the tree registry") for ln in warnings)


def test_a_registry_name_that_is_a_path_is_ignored_and_nothing_outside_is_removed(tmp_path, cache):
    small(tmp_path / "t")
    outside = tmp_path / "outside"
    outside.mkdir()
    precious = [outside / "precious.sqlite", outside / "precious.sqlite.record"]
    for p in precious:
        p.write_text("keep")
    data = json.loads(registry_path().read_text())
    data["trees"][0]["name"] = os.path.relpath(outside / "precious", registry_path().parent / "index")
    assert data["trees"][0]["name"].startswith("..")
    registry_path().write_text(json.dumps(data))
    r = run("source", "list")
    assert r.exit_code == 0 and "precious" not in r.stdout and "entry 0 is ignored" in r.stderr
    r = run("source", "remove", data["trees"][0]["name"])
    assert r.exit_code == 2 and r.stderr.splitlines()[-1].startswith("kernelmap: error: no source tree named")
    assert all(p.read_text() == "keep" for p in precious)


def test_long_tree_names_are_refused_and_old_ones_still_removable(tmp_path, cache):
    root = small(tmp_path / "t").root
    assert_one_line_error(run("source", "add", str(root), "--name", "n" * 300), "1 to 100")
    # A registry written before names were limited.
    data = json.loads(registry_path().read_text())
    data["trees"][0]["name"] = "n" * 300
    registry_path().write_text(json.dumps(data))
    assert run("source", "list").exit_code == 0
    assert run("index", "--source", "n" * 300, "--jobs", "1").exit_code == 0
    r = run("source", "remove", "n" * 300)
    assert r.exit_code == 0 and list_trees() == []


def test_paths_too_long_for_the_os_are_one_line(tmp_path, cache):
    long = str(tmp_path / ("d" * 5000))
    assert_one_line_error(run("source", "add", long), "not a directory")
    assert_one_line_error(run("index", "--source", long + "/"), "no such directory")


def test_a_bad_jobs_value_from_the_library_is_bad_input(tmp_path, cache):
    tree = small(tmp_path / "t")
    with pytest.raises(BadInput):
        build_index(tree, jobs=10**20)


def test_an_index_without_its_tables_is_missing_not_a_traceback(tmp_path, cache):
    tree = small(tmp_path / "t")
    build_index(tree, jobs=1)
    db = sqlite3.connect(index_path(tree))
    db.execute("DROP TABLE calls")
    db.commit()
    db.close()
    assert_one_line_error(run("find", "neg_stub", "--source", tree.name), "damaged")
    assert build_index(tree, jobs=1).full
    assert run("find", "neg_stub", "--source", tree.name).exit_code == 0


@pytest.mark.parametrize("value", ["-1", "nan", "inf"])
def test_fetch_timeout_values_are_one_line(cache, value):
    assert_one_line_error(run("source", "fetch", "--commit", "2236df1770800ffea5697b11b0bb0d910b2e59e1", "--timeout", value), "--timeout")


def test_an_unwritable_cache_dir_is_one_line(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("KERNELMAP_CACHE_DIR", str(blocker / "cache"))  # under a file: ENOTDIR
    tree_root = make_tree(tmp_path / "t", {"c10/X.h": "int x();\n"})
    assert_one_line_error(run("source", "add", str(tree_root)), "cannot write the tree registry")


# -- a tree's own files ------------------------------------------------------------


@pytest.mark.parametrize("fifo", ["version.txt", ".git/HEAD"])
def test_a_fifo_in_a_trees_identity_files_never_blocks(tmp_path, cache, fifo):
    import subprocess
    import sys

    root = make_tree(tmp_path / "t", {"aten/src/ATen/native/X.cpp": "void f() {}\n"})
    target = root / fifo
    target.parent.mkdir(parents=True, exist_ok=True)
    target.unlink(missing_ok=True)
    os.mkfifo(target)
    done = subprocess.run([sys.executable, "-m", "kernelmap", "source", "add", str(root), "--name", "fifo"],
                          capture_output=True, text=True, timeout=60, env=dict(os.environ))
    if fifo == "version.txt":
        assert done.returncode == 2 and done.stderr.startswith("kernelmap: error:") and len(done.stderr.splitlines()) == 1
    else:
        assert done.returncode == 0, done.stderr  # no commit, as for a checkout without one


def test_a_version_line_with_escape_sequences_is_refused_and_never_printed(tmp_path, cache):
    root = make_tree(tmp_path / "t", {"aten/src/ATen/native/X.cpp": "void f() {}\n"}, version="2.6.0\x1b]0;PWNED\x07\x1b[2J")
    r = run("source", "add", str(root), "--name", "esc")
    assert_one_line_error(r, "does not hold one version line")
    assert "\x1b" not in r.stderr and "\x07" not in r.stderr


def test_control_characters_in_an_error_line_are_escaped(tmp_path, cache):
    from tests.conftest import run_kernelmap

    done = run_kernelmap("source", "add", str(tmp_path / "nope\x1b]0;X\x07"))
    assert done.returncode == 2 and "\x1b" not in done.stderr and "\\x1b]0;X\\x07" in done.stderr


@pytest.mark.parametrize("args", [(), ("source",)])
def test_no_command_is_one_line(args):
    from tests.conftest import run_kernelmap

    done = run_kernelmap(*args)
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [f"kernelmap: error: missing command (see {' '.join(('kernelmap',) + args)} --help)"]


def test_where_says_why_it_has_no_source_steps_when_the_index_is_damaged(tmp_path, cache, monkeypatch):
    """With the default tree's index damaged, the graph opens without it and
    says why; `where` passes that on instead of dropping its source section
    silently (the real tree is too large to damage here: the graph's context
    is the one a damaged index of the small tree gives)."""
    from kernelmap import api, graph

    tree = small(tmp_path / "t")
    build_index(tree, jobs=1)
    path = index_path(tree)
    path.write_bytes(path.read_bytes()[:-4096] + b"\0" * 4096)  # the database as someone changed it after the build
    with pytest.raises(SourceError) as damaged:
        open_index(tree)
    from kernelmap.graph.context import NEEDS_TREE

    context = type("Context", (), {"index": None, "notes": (f"{NEEDS_TREE} [{damaged.value}]",), "no_index": str(damaged.value), "stale": None})()
    monkeypatch.setattr(graph, "open_context", lambda device, source=None, dtype="float32": context)
    notes: list[str] = []
    assert api._source_steps("aten::neg", "cpu", notes) == ()
    assert len(notes) == 1 and f"kernelmap index --source {tree.name}" in notes[0]


def test_an_index_built_for_another_directory_of_the_same_name_is_not_used(tmp_path, cache):
    first = make_tree(tmp_path / "ft", {"aten/src/good.cpp": "namespace at { namespace native {\nvoid good_fn() {}\n}}\n"})
    assert run("index", "--source", str(first), "--jobs", "1").exit_code == 0
    other = make_tree(tmp_path / "other", {"aten/src/other.cpp": "namespace at { namespace native {\nvoid other_fn() {}\n}}\n"})
    assert run("source", "add", str(other), "--name", "ft").exit_code == 0
    assert_one_line_error(run("find", "good_fn", "--source", "ft"), "built for another directory")
    assert run("index", "--source", "ft", "--jobs", "1").exit_code == 0
    assert "other.cpp" in run("find", "other_fn", "--source", "ft").stdout


def test_a_cache_that_is_a_file_or_a_lock_that_is_a_folder_is_one_line(tmp_path, monkeypatch):
    from tests.conftest import run_kernelmap

    not_a_folder = tmp_path / "cachefile"
    not_a_folder.write_text("")
    done = run_kernelmap("gen", "aten::relu", "--layer", "ops", env={"KERNELMAP_CACHE_DIR": str(not_a_folder)})
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 2 and last.startswith("kernelmap: error:") and ("Not a directory" in last or "is a file, not a directory" in last), done.stderr
    assert "Traceback" not in done.stderr
    cache_dir = tmp_path / "cache"
    (cache_dir / "trees.json.lock").mkdir(parents=True)
    (cache_dir / "trees.json").write_text(json.dumps({"version": 1, "trees": []}))
    done = run_kernelmap("source", "remove", "x", env={"KERNELMAP_CACHE_DIR": str(cache_dir)})
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr, done.stderr


def test_a_registry_nested_a_thousand_deep_is_one_line(tmp_path, cache):
    registry_path().parent.mkdir(parents=True, exist_ok=True)
    registry_path().write_text('{"version": 1, "trees": ' + "[" * 1000 + "]" * 1000 + "}")
    r = run("source", "list")
    assert r.exit_code in (0, 2) and "Traceback" not in r.output
    assert len(r.stderr.strip().splitlines()) == 1


def test_a_full_disk_during_a_build_is_one_line_and_keeps_the_previous_index(tmp_path, cache, monkeypatch):
    tree = small(tmp_path / "t")
    build_index(tree, jobs=1)
    before = index_path(tree).read_bytes()
    (tree.root / "aten/src/ATen/native/Extra.cpp").write_text("namespace at { namespace native { void extra() {} }}\n")

    def full(*args, **kwargs):
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(build_module, "_apply", full)
    with pytest.raises(SourceError, match="cannot write the index"):
        build_index(tree, jobs=1)
    assert index_path(tree).read_bytes() == before
    assert not list(index_path(tree).parent.glob("*.tmp"))


def test_a_tree_path_with_control_characters_is_printed_escaped(tmp_path, cache):
    root = make_tree(tmp_path / "tx\x1b]0;PWNED\x07\nline2", {"aten/src/ATen/native/X.cpp": "void f() {}\n"})
    r = run("source", "add", str(root), "--name", "escdir")
    assert r.exit_code == 0, r.output
    listed = run("source", "list")
    for out in (r.stdout.splitlines()[0], listed.stdout):
        assert "\x1b" not in out and "\x07" not in out and "\\x1b]0;PWNED\\x07\\x0aline2" in out
        assert len(out.strip().splitlines()) == 1
