"""What a cold question reads instead of working out again: the code-only
shared results (Note [shared results on disk] in kernelmap.graph.context) and
the Python layer's children and callers (Note [Python read once] in
kernelmap.graph.python). Read back, they give the same answer as computed;
a changed tree file, a changed kernelmap module or a damaged index never
serves another's results; files are written aside and renamed, and their
number and size are bounded."""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path

import pytest

from kernelmap import env


def _fresh_memory():
    import kernelmap.graph.context as context
    import kernelmap.graph.python as python

    context._SHARED.clear()
    context._ON_DISK.clear()
    python._TABLES.clear()
    python._SEEN.clear()


def test_a_stack_read_back_from_disk_is_the_one_computed(served):
    """A process that finds the tables on disk (a later CLI run) answers the
    same, adds nothing to the shared tables, and parses no Python module the
    stored children cover (torch/nn/functional.py)."""
    from kernelmap import graph, pysource
    import kernelmap.graph.context as context
    import kernelmap.graph.python as python
    from tests.mcp.conftest import TREE_NAME

    ctx = graph.open_context("cuda", source=TREE_NAME)
    results = env.cache_dir() / "results"
    _fresh_memory()
    for stored in (context._results_path(ctx.code_key)[0], python._table(ctx.python_dir).path):
        stored.unlink(missing_ok=True)
    _fresh_memory()
    computed = graph.stack("torch.nn.Conv2d", ctx).to_json()
    context.write_shared_results()
    python.write_tables()
    assert context._results_path(ctx.code_key)[0].is_file() and python._table(ctx.python_dir).path.is_file()
    assert not [p for p in results.iterdir() if p.name.endswith(".tmp")], "a temporary file was left behind"

    _fresh_memory()
    pysource.find_def.cache_clear()
    read: list[Path] = []
    pysource._READ.append(read)
    try:
        again = graph.stack("torch.nn.Conv2d", graph.open_context("cuda", source=TREE_NAME)).to_json()
    finally:
        pysource._READ.remove(read)
    assert again == computed
    resolved = context._SHARED[ctx.code_key]["_resolve_direct"]
    assert len(resolved) > 0 and resolved.added == 0, "the resolved calls were worked out again"
    assert ctx.python_dir / "torch/nn/functional.py" not in read and ctx.python_dir / "torch/overrides.py" not in read


def test_callers_read_back_from_disk_are_the_ones_computed(served):
    from kernelmap import graph
    import kernelmap.graph.python as python
    from tests.mcp.conftest import TREE_NAME

    ctx = graph.open_context("cpu", source=TREE_NAME)
    _fresh_memory()
    python._table(ctx.python_dir).path.unlink(missing_ok=True)
    _fresh_memory()
    computed = graph.callers("cudnnConvolutionForward", ctx).to_json()
    assert any(k.startswith('["callers"') for k in python._table(ctx.python_dir).entries), "no Python callers were asked"
    python.write_tables()
    _fresh_memory()
    assert graph.callers("cudnnConvolutionForward", graph.open_context("cpu", source=TREE_NAME)).to_json() == computed
    assert python._TABLES[ctx.python_dir].added == 0


def test_a_stored_definition_parses_its_node_when_asked(served):
    import ast

    from kernelmap import pysource
    from kernelmap.graph.python import def_spec, stored_def
    from tests.mcp.conftest import TREE_NAME
    from kernelmap import graph

    root = graph.open_context("cpu", source=TREE_NAME).python_dir
    for name in ("torch.nn.modules.conv.Conv2d", "torch.nn.modules.conv.Conv2d.forward", "torch.nn.functional.conv2d"):
        real = pysource.find_def(name, root)
        stored = stored_def(def_spec(real, root), root)
        assert (stored.qualname, stored.path, stored.line, stored.end_line) == (real.qualname, real.path, real.line, real.end_line)
        assert stored.node is real.node
        assert stored.is_class == isinstance(real.node, ast.ClassDef)


def test_an_entry_is_used_only_while_its_files_hold_the_same_bytes(tmp_path, monkeypatch):
    """Content, not stamps: a file edited with its size and mtime put back is read again."""
    from kernelmap import pysource
    import kernelmap.graph.python as python

    monkeypatch.setenv(env.CACHE_ENV, str(tmp_path / "cache"))
    root = tmp_path / "tree"
    (root / "torch").mkdir(parents=True)
    module = root / "torch" / "m.py"
    module.write_text("def f():\n    return g()\n")
    computed = []

    def compute():
        computed.append(1)
        return [n.name for n in pysource._parse(module).body]

    _fresh_memory()
    assert python.remembered(root, ("test",), compute) == ["f"]
    assert python.remembered(root, ("test",), compute) == ["f"] and len(computed) == 1
    python.write_tables()
    _fresh_memory()
    assert python.remembered(root, ("test",), compute) == ["f"] and len(computed) == 1, "not read back from disk"

    st = module.stat()
    module.write_text("def h():\n    return g()\n")  # same size
    os.utime(module, ns=(st.st_atime_ns, st.st_mtime_ns))
    pysource._parse_file.cache_clear()
    assert python.remembered(root, ("test",), compute) == ["f"] and len(computed) == 1  # this process: as it read it
    python._SEEN.clear()  # another process
    assert python.remembered(root, ("test",), compute) == ["h"] and len(computed) == 2
    python.write_tables()
    _fresh_memory()


def test_an_entry_that_read_unrecorded_files_is_not_stored(tmp_path, monkeypatch):
    import kernelmap.graph.python as python

    monkeypatch.setenv(env.CACHE_ENV, str(tmp_path / "cache"))
    _fresh_memory()

    def reads_a_binding_table():
        python._READING_UNKNOWN[:] = [True] * len(python._READING_UNKNOWN)
        return 1

    assert python.remembered(tmp_path, ("unknown",), reads_a_binding_table) == 1
    assert python._table(tmp_path).entries == {}
    _fresh_memory()


def test_the_python_table_is_bounded_and_keyed_by_kernelmap_s_code(tmp_path, monkeypatch):
    import kernelmap.graph.context as context
    import kernelmap.graph.python as python

    monkeypatch.setenv(env.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(python, "_STORED", 3)
    _fresh_memory()
    for i in range(5):
        python.remembered(tmp_path, ("n", i), lambda i=i: i)
    assert [k for k in python._table(tmp_path).entries] == ['["n", 2]', '["n", 3]', '["n", 4]']
    python.write_tables()
    _fresh_memory()
    assert len(python._table(tmp_path).entries) == 3
    _fresh_memory()
    monkeypatch.setattr(context, "_code_stamp", lambda: "other code")
    assert python._table(tmp_path).entries == {}, "another kernelmap's table was read"
    _fresh_memory()


def test_the_code_stamp_changes_with_any_module(tmp_path):
    from kernelmap.graph.context import code_stamp

    package = tmp_path / "kernelmap"
    shutil.copytree(Path(code_stamp.__code__.co_filename).parents[1], package, ignore=shutil.ignore_patterns("__pycache__"))
    before = code_stamp(package)
    assert code_stamp(package) == before
    edited = package / "graph" / "resolve.py"
    edited.write_text(edited.read_text() + "\n# edited\n")
    assert code_stamp(package) != before


def test_the_code_key_names_the_index_and_the_files_edited_since(served, tmp_path):
    """A file of the tree edited after indexing (`GraphContext.edited`, stamped
    as it is now) is another key, so another file of shared results."""
    from kernelmap import graph
    import kernelmap.graph.context as context
    from tests.mcp.conftest import TREE_NAME

    ctx = graph.open_context("cpu", source=TREE_NAME)
    assert ctx.code_key[2] == context._index_stamp(ctx.index.path)
    source = tmp_path / "a.cpp"
    source.write_text("int f();\n")
    once = context._stamped(tmp_path, ["a.cpp", "gone.cpp"])
    assert once[1] == ("gone.cpp",)
    source.write_text("int f(); int g();\n")
    again = context._stamped(tmp_path, ["a.cpp", "gone.cpp"])
    assert once != again
    keys = {dataclasses.replace(ctx, edited=e).code_key for e in ((), once, again)}
    assert len(keys) == 3
    assert len({context._results_path(k)[0] for k in keys}) == 3


class _Damaged:
    class _db:
        damaged = "the index of 't' is damaged (a test)"


def test_shared_results_are_not_written_from_a_damaged_index_and_are_bounded(tmp_path, monkeypatch):
    import kernelmap.graph.context as context

    monkeypatch.setenv(env.CACHE_ENV, str(tmp_path))
    _fresh_memory()

    def fill(key, index):
        context._SHARED[key] = {"_t": context._Kept(10)}
        context._ON_DISK[key] = ({}, index)
        context._SHARED[key]["_t"]["a"] = ("answer", key)

    fill(("damaged",), _Damaged())
    context.write_shared_results()
    assert not (tmp_path / "results").exists() or not list((tmp_path / "results").iterdir())
    _fresh_memory()
    for i in range(context._DISK_FILES + 3):
        fill(("key", i), None)
        context._write_results(("key", i))
    kept = list((tmp_path / "results").iterdir())
    assert len(kept) == context._DISK_FILES and all(p.suffix == ".pickle" for p in kept)
    newest = ("key", context._DISK_FILES + 2)
    assert context._read_results(newest) == {"_t": {"a": ("answer", newest)}}
    assert context._read_results(("key", 0)) == {}


def test_a_damaged_or_foreign_results_file_is_not_read(tmp_path, monkeypatch):
    import kernelmap.graph.context as context

    monkeypatch.setenv(env.CACHE_ENV, str(tmp_path))
    _fresh_memory()
    key, other = ("mine",), ("other",)
    path, _ = context._results_path(key)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"\x80\x05not a pickle")
    assert context._read_results(key) == {}
    context._SHARED[other] = {"_t": context._Kept(10)}
    context._ON_DISK[other] = ({}, None)
    context._SHARED[other]["_t"]["a"] = 1
    context._write_results(other)
    shutil.copy(context._results_path(other)[0], path)  # another key's tables under this key's name
    assert context._read_results(key) == {}
    _fresh_memory()


def test_a_server_writes_back_after_its_first_call_and_then_now_and_then(monkeypatch):
    """Note [what a server writes back]: a server is ended by a signal, which
    runs no exit handler; its producer thread writes the tables instead."""
    import asyncio

    import kernelmap.mcp.warm as warm_module
    from kernelmap.mcp.warm import Warm

    written = []
    monkeypatch.setattr(warm_module, "write_back", lambda shared=True: written.append(shared))
    warm = Warm()
    try:
        async def calls(n):
            for _ in range(n):
                await warm.run(lambda: None)

        def settled():  # the producer thread runs one job at a time, in order: the last call's settling is done
            warm._executor.submit(lambda: None).result()

        asyncio.run(calls(4))
        settled()
        assert written == [True, False, False, False]  # the Python tables after each call, the shared results after the first
        warm._written -= warm_module.WRITE_EVERY  # as if that long had passed
        asyncio.run(calls(2))
        settled()
        assert written[4:] == [True, False]
    finally:
        warm.close()


def test_computing_an_entry_leaves_what_the_process_remembered(tmp_path, monkeypatch):
    """An entry is computed with lookups of their own memory (every file read
    is recorded); the process's memory of lookups stays for what follows."""
    from kernelmap import pysource
    import kernelmap.graph.python as python

    monkeypatch.setenv(env.CACHE_ENV, str(tmp_path / "cache"))
    root = tmp_path / "tree"
    (root / "torch").mkdir(parents=True)
    (root / "torch" / "__init__.py").write_text("from torch.m import f\n")
    (root / "torch" / "m.py").write_text("def f():\n    return 1\n")
    _fresh_memory()
    assert pysource.find_def("torch.f", root) is not None  # remembered, with both files read
    kept = pysource.find_def
    before = kept.cache_info().currsize
    read = python.remembered(root, ("f",), lambda: pysource.find_def("torch.f", root).path.name)
    assert read == "m.py"
    assert pysource.find_def is kept and kept.cache_info().currsize >= before
    assert set(python._table(root).entries['["f"]']["files"]) == {"torch/__init__.py", "torch/m.py"}, "a file the lookup walked through was not recorded"
    _fresh_memory()
