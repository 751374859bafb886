"""Building an index on small trees: incremental updates, bad input, a
corrupted database, concurrent and interrupted builds."""

from __future__ import annotations

import hashlib
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from kernelmap.errors import SourceError
from kernelmap.source import add_tree, build_index, index_path, open_index
from kernelmap.source.extract import MAX_FILE_BYTES
from tests.conftest import default_sigint

from .conftest import make_tree

KERNEL = """
namespace at { namespace native {
DEFINE_DISPATCH(neg_stub);
Tensor neg(const Tensor& self) { neg_stub(self.device().type(), self); return at::empty({}); }
}}
"""
CPU_KERNEL = """
namespace at { namespace native {
static void neg_kernel(TensorIteratorBase& iter) { cpu_kernel(iter, [](float a) { return -a; }); }
REGISTER_DISPATCH(neg_stub, &neg_kernel);
}}
"""
HEADER = "#pragma once\nnamespace at { namespace native { DECLARE_DISPATCH(unary_fn, neg_stub); }}\n"


def small(root, **extra):
    files = {
        "aten/src/ATen/native/Neg.cpp": KERNEL,
        "aten/src/ATen/native/Neg.h": HEADER,
        "aten/src/ATen/native/cpu/NegKernel.cpp": CPU_KERNEL,
        "c10/util/Util.h": "namespace c10 { inline int one() { return 1; } }\n",
        "torch/csrc/api/Api.cpp": "namespace torch { void api() { c10::one(); } }\n",
        "aten/src/ATen/native/native_functions.yaml": (
            "- func: neg(Tensor self) -> Tensor\n  variants: function, method\n"
            "- func: empty.memory_format(SymInt[] size) -> Tensor\n"
        ),
    }
    files.update(extra)
    return add_tree(make_tree(root, files))


def digest(path):
    return hashlib.sha1(path.read_bytes()).hexdigest()


def test_build_then_update_only_what_changed(tmp_path, cache):
    tree = small(tmp_path / "t")
    first = build_index(tree, jobs=1)
    assert (first.files, first.parsed, first.full, first.missing_parts) == (5, 5, True, ())
    with open_index(tree) as ix:
        [neg] = ix.definitions("at::native::neg")
        assert [(c.name, c.kind.value) for c in ix.calls_from(neg)] == [("neg_stub", "stub"), ("type", "direct"), ("empty", "dispatcher")]
        [reg] = ix.stub_registrations("neg_stub")
        assert (reg.kernel, reg.device) == ("neg_kernel", "CPU")

    again = build_index(tree, jobs=1)
    assert (again.parsed, again.full) == (0, False)

    path = tree.root / "aten/src/ATen/native/cpu/NegKernel.cpp"
    os.utime(path, ns=(time.time_ns(), time.time_ns()))  # touched, not changed
    assert build_index(tree, jobs=1).parsed == 0

    path.write_text(CPU_KERNEL.replace("neg_kernel", "neg_kernel_v2"))
    (tree.root / "c10/util/Util.h").unlink()
    (tree.root / "c10/util/New.h").write_text("namespace c10 { int two() { return 2; } }\n")
    update = build_index(tree, jobs=1)
    assert (update.parsed, update.removed, update.files, update.full) == (2, 1, 5, False)
    with open_index(tree) as ix:
        assert [r.kernel for r in ix.stub_registrations("neg_stub")] == ["neg_kernel_v2"]
        assert ix.definitions("c10::one") == [] and ix.definitions("c10::two")


def rows_as_text(path):
    """Every fact of an index with its string ids replaced by their texts: two
    builds of the same files must agree on these, whatever ids they gave."""
    db = sqlite3.connect(path)
    text = "(SELECT text FROM strings WHERE id = {})".format
    queries = {
        "symbols": f"SELECT f.path, {text('name_id')}, {text('lookup_id')}, {text('short_id')}, kind, line, end_line,"
                   f" {text('cond_id')}, {text('op_id')} FROM symbols s JOIN files f ON f.id = s.file_id",
        "calls": f"SELECT f.path, (SELECT {text('name_id')} FROM symbols WHERE id = c.symbol_id), {text('callee_id')},"
                 f" {text('short_id')}, c.kind, {text('lib_id')}, {text('op_id')}, c.line, {text('cond_id')}, {text('pp_id')},"
                 f" c.symbol_id IS NULL, c.lib_id IS NULL, c.op_id IS NULL, c.cond_id IS NULL, c.pp_id IS NULL"
                 f" FROM calls c JOIN files f ON f.id = c.file_id",
        "registrations": f"SELECT f.path, r.symbol_id IS NULL, r.kind, {text('name_id')}, {text('target_id')}, {text('key_id')},"
                         f" {text('detail_id')}, r.line, {text('pp_id')} FROM registrations r JOIN files f ON f.id = r.file_id",
        "stubs": f"SELECT f.path, s.kind, {text('name_id')}, {text('detail_id')}, s.line, {text('pp_id')}"
                 f" FROM stubs s JOIN files f ON f.id = s.file_id",
    }
    try:
        return {table: sorted(db.execute(sql).fetchall(), key=repr) for table, sql in queries.items()}
    finally:
        db.close()


def test_an_updated_index_holds_what_a_fresh_build_of_the_same_files_holds(tmp_path, cache):
    # Strings are given ids as rows are written: an update must find the ids
    # of texts already in the database and give new ones to the rest.
    tree = small(tmp_path / "t")
    build_index(tree, jobs=1)
    (tree.root / "aten/src/ATen/native/cpu/NegKernel.cpp").write_text(
        CPU_KERNEL.replace("neg_kernel", "neg_kernel_v2") + "namespace at { void again() { c10::one(); at::neg(x); } }\n")
    (tree.root / "c10/util/New.h").write_text("#if defined(NEW)\nnamespace c10 { int two() { return one() + at::empty(3); } }\n#endif\n")
    update = build_index(tree, jobs=1)
    assert (update.parsed, update.full) == (2, False)
    fresh = add_tree(tree.root, "fresh")
    assert build_index(fresh, jobs=1).full
    updated, rebuilt = rows_as_text(index_path(tree)), rows_as_text(index_path(fresh))
    assert updated == rebuilt
    assert ("c10/util/New.h", "c10::two", "one", "one") in [row[:4] for row in updated["calls"]]


def test_a_tree_missing_parts_indexes_what_is_there(tmp_path, cache):
    tree = add_tree(make_tree(tmp_path / "t", {"c10/core/A.cpp": "namespace c10 { int a() { return 1; } }\n"}))
    report = build_index(tree, jobs=1)
    assert report.missing_parts == ("aten", "torch/csrc")
    with open_index(tree) as ix:
        assert ix.definitions("c10::a")
        assert ix.meta["missing_parts"] == "aten,torch/csrc"


def test_bad_files_are_indexed_or_skipped_with_a_reason(tmp_path, cache):
    generated = "namespace at { int table[] = {\n" + "  1, 2, 3, 4, 5, 6, 7, 8,\n" * (10 * 2**20 // 25) + "}; }\n"
    assert len(generated) > 10 * 2**20 > MAX_FILE_BYTES
    tree = small(
        tmp_path / "t",
        **{
            "aten/src/ATen/native/Latin1.cpp": "namespace at { // caf\xe9\n int latin() { return 0; } }\n".encode("latin-1"),
            "aten/src/ATen/native/Nul.cpp": b"namespace at { int f() { return 0; } }\0\0\0",
            "aten/src/ATen/native/Generated.cpp": generated,
        },
    )
    t0 = time.monotonic()
    report = build_index(tree, jobs=1)
    assert time.monotonic() - t0 < 30
    skipped = dict(report.skipped)
    assert skipped["aten/src/ATen/native/Nul.cpp"] == "binary (NUL bytes)"
    assert skipped["aten/src/ATen/native/Generated.cpp"].startswith("larger than")
    with open_index(tree) as ix:
        assert ix.definitions("at::latin")


def test_a_corrupted_database_is_rebuilt(tmp_path, cache):
    tree = small(tmp_path / "t")
    build_index(tree, jobs=1)
    path = index_path(tree)
    data = bytearray(path.read_bytes())
    data[0:16] = b"garbage garbage!"
    path.write_bytes(bytes(data))
    with pytest.raises(SourceError, match="unreadable"):
        open_index(tree)
    report = build_index(tree, jobs=1)
    assert report.full and "unreadable" in report.rebuilt_reason
    with open_index(tree) as ix:
        assert ix.definitions("at::native::neg")


def test_a_database_of_another_schema_is_rebuilt(tmp_path, cache):
    tree = small(tmp_path / "t")
    build_index(tree, jobs=1)
    db = sqlite3.connect(index_path(tree))
    db.execute("UPDATE meta SET value = '0' WHERE key = 'schema_version'")
    db.commit()
    db.close()
    report = build_index(tree, jobs=1)
    assert report.full and report.rebuilt_reason == "schema_version changed"


def test_a_tree_that_vanished_is_a_clear_error(tmp_path, cache):
    tree = small(tmp_path / "t")
    import shutil

    shutil.rmtree(tree.root)
    with pytest.raises(SourceError, match="is gone"):
        build_index(tree)


def big_tree(root, copies=400):
    """A tree that takes a few seconds to index, to race builds against."""
    body = "".join(f"Tensor f{i}(const Tensor& t) {{ if (t.defined()) {{ return at::add(t, t); }} return t.mul({i}); }}\n" for i in range(300))
    files = {f"aten/src/ATen/native/G{i}.cpp": "namespace at { namespace native {\n" + body + "}}\n" for i in range(copies)}
    return add_tree(make_tree(root, files))


def run_index(tree, cache):
    env = {**os.environ, "KERNELMAP_CACHE_DIR": str(cache)}
    return subprocess.Popen(
        [sys.executable, "-m", "kernelmap", "index", "--source", tree.name, "--jobs", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, preexec_fn=default_sigint,
    )


def test_two_builds_at_once_wait_for_each_other(tmp_path, cache):
    tree = big_tree(tmp_path / "t", copies=150)
    a = run_index(tree, cache)
    time.sleep(0.5)
    b = run_index(tree, cache)
    out_a, err_a = a.communicate(timeout=300)
    out_b, err_b = b.communicate(timeout=300)
    assert a.returncode == 0 and b.returncode == 0, err_a + err_b
    assert "waiting" in err_a + err_b
    # The second build found everything done by the first.
    assert sorted(re.search(r"\b(\d+) parsed", out).group(1) for out in (out_a, out_b)) == ["0", "150"]
    with open_index(tree) as ix:
        assert ix.stats()["files"] == 150
        assert len(ix.definitions("at::native::f7")) == 150


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL])
def test_an_interrupted_build_leaves_the_previous_database(tmp_path, cache, sig):
    tree = big_tree(tmp_path / "t", copies=150)
    build_index(tree, jobs=1)
    path = index_path(tree)
    before = digest(path)
    for p in (tree.root / "aten/src/ATen/native").glob("G*.cpp"):
        p.write_text(p.read_text().replace("return t.mul(", "return t.neg().mul("))
    proc = run_index(tree, cache)
    deadline = time.monotonic() + 60
    while not list(path.parent.glob(f".{path.name}.*.tmp")) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.01)
    time.sleep(0.3)  # well into parsing
    assert proc.poll() is None, "the build finished before it could be interrupted"
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode != 0
    if sig == signal.SIGINT:
        assert "Traceback" not in err or "KeyboardInterrupt" in err
    assert digest(path) == before
    with open_index(tree) as ix:
        assert ix.stats()["files"] == 150
    if sig == signal.SIGINT:
        assert list(path.parent.glob(f".{path.name}.*.tmp")) == []
    # The next build finishes the job and cleans up any copy left by a killed one.
    report = build_index(tree, jobs=1)
    assert report.parsed == 150
    assert list(path.parent.glob(f".{path.name}.*.tmp")) == []


def test_ctrl_c_of_a_parallel_build_prints_one_line(tmp_path, cache):
    # Ctrl-C at a terminal reaches the whole process group, workers included.
    tree = big_tree(tmp_path / "t", copies=300)
    path = index_path(tree)
    env = {**os.environ, "KERNELMAP_CACHE_DIR": str(cache)}
    proc = subprocess.Popen([sys.executable, "-m", "kernelmap", "index", "--source", tree.name, "--jobs", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, preexec_fn=default_sigint,
                            start_new_session=True)
    deadline = time.monotonic() + 60
    while not list(path.parent.glob(f".{path.name}.*.tmp")) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.01)
    time.sleep(0.5)  # the workers are parsing
    assert proc.poll() is None, "the build finished before it could be interrupted"
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert (proc.returncode, err.strip()) == (130, "kernelmap: aborted"), err  # no worker's traceback
    assert not path.exists() and list(path.parent.glob(f".{path.name}.*.tmp")) == []


def test_a_fifo_or_a_dangling_link_in_the_tree_is_named_among_the_skipped(tmp_path, cache):
    tree = small(tmp_path / "t")
    native = tree.root / "aten/src/ATen/native"
    os.mkfifo(native / "Fifo.cpp")
    (native / "Dangling.cpp").symlink_to(native / "Gone.cpp")  # in the tree, to nothing
    started = time.monotonic()
    report = build_index(tree, jobs=1)
    assert time.monotonic() - started < 30
    skipped = dict(report.skipped)
    assert skipped["aten/src/ATen/native/Fifo.cpp"] == "not a regular file"
    assert skipped["aten/src/ATen/native/Dangling.cpp"].startswith("unreadable")


def test_stub_calls_follow_the_trees_stub_declarations(tmp_path, cache):
    tree = add_tree(make_tree(tmp_path / "t", {
        "aten/src/ATen/native/A.cpp": "namespace at::native { void a() { foo_stub(kCPU, 1); } }\n",
        "aten/src/ATen/native/B.h": "namespace at::native { DECLARE_DISPATCH(fn, foo_stub); }\n",
    }))
    build_index(tree, jobs=1)

    def kinds():
        with open_index(tree) as ix:
            return [c.kind.value for c in ix.callers_of("foo_stub")]

    assert kinds() == ["stub"]
    (tree.root / "aten/src/ATen/native/B.h").write_text("namespace at::native { }\n")
    build_index(tree, jobs=1)
    assert kinds() == ["direct"]
    (tree.root / "aten/src/ATen/native/C.cpp").write_text("namespace at::native { DEFINE_DISPATCH(foo_stub); }\n")
    build_index(tree, jobs=1)
    assert kinds() == ["stub"]


def test_a_stub_passed_to_a_helper_is_a_stub_call_only_while_the_tree_declares_it(tmp_path, cache):
    """Note [stubs passed on]: `helper(x, foo_stub)` runs foo_stub when the
    tree declares it; `bar_stub`, declared nowhere, and a macro's argument
    are no calls; a name the file defines itself is no stub."""
    tree = add_tree(make_tree(tmp_path / "t", {
        "aten/src/ATen/native/A.cpp": (
            "namespace at::native {\n"
            "void a() {\n"
            "  helper(x,\n"
            "         &foo_stub);\n"
            "  helper(x, bar_stub);\n"
            "  CHECK_STUB(foo_stub);\n"
            "}\n"
            "}\n"),
        "aten/src/ATen/native/B.h": "namespace at::native { DECLARE_DISPATCH(fn, foo_stub); DECLARE_DISPATCH(fn, baz_stub); }\n",
        "aten/src/ATen/native/C.cpp": "namespace at::native { void baz_stub() {} void c() { helper(baz_stub); } }\n",
    }))
    build_index(tree, jobs=1)

    def sites(name):
        with open_index(tree) as ix:
            return [(c.kind.value, c.caller.qualified_name, c.location.line) for c in ix.callers_of(name)]

    assert sites("foo_stub") == [("stub", "at::native::a", 4)]  # the line that holds it
    assert sites("bar_stub") == [] and sites("baz_stub") == []
    (tree.root / "aten/src/ATen/native/B.h").write_text("namespace at::native { }\n")
    build_index(tree, jobs=1)
    assert sites("foo_stub") == []
    (tree.root / "aten/src/ATen/native/B.h").write_text("namespace at::native { DEFINE_DISPATCH(foo_stub); }\n")
    build_index(tree, jobs=1)
    assert sites("foo_stub") == [("stub", "at::native::a", 4)]


def test_a_file_gone_between_scan_and_parse_is_recorded_not_fatal(tmp_path):
    from kernelmap.source import build
    from kernelmap.source.facts import OperatorNames

    build._init_worker(str(tmp_path), OperatorNames(frozenset(), frozenset()))
    facts = build._extract_one("aten/src/ATen/Gone.cpp")
    assert facts.skipped.startswith("unreadable") and facts.definitions == ()
