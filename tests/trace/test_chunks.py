"""The import works a window at a time: the reader decodes a window of text,
the collector fills its columns a block at a time, the tree builder nests,
prunes and sizes a slice of events at a time with only the open stack (and
the slice's parents) carried across. Chunk sizes are a matter of memory, not
of answers: an import with tiny windows, blocks and slices gives the same
tables, the same full tree and the same summary as one with the usual ones,
and an event whose parent lies in an earlier slice nests under it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kernelmap.trace import build, codes, collect, reader
from kernelmap.trace.kineto import read_file
from kernelmap.trace.summary import dump

DATA = Path(__file__).resolve().parent / "data"
TRACES = sorted(p.name for p in DATA.iterdir() if p.name.endswith((".json", ".json.gz")))


@pytest.fixture
def tiny_chunks(monkeypatch):
    """Windows of 4 KB of text, column blocks of 64 values, slices of 7 events, climbs of 5 nodes."""
    monkeypatch.setattr(codes, "_CLIMB", 5)
    monkeypatch.setattr(reader, "CHUNK", 4096)
    monkeypatch.setattr(collect, "_BLOCK", 64)
    monkeypatch.setattr(build, "_SLICE", 7)


def tables(t) -> dict:
    """Every column and table an import makes, as plain values: codes numbered
    per window (threads, pooled shapes) as the values they stand for."""
    tb, c = t._table, t._table.c
    out = {name: np.asarray(getattr(tb, name)).tolist() for name in ("kind", "label", "row", "parent", "size", "ts", "dur", "linked")}
    out["facts"] = None if tb.facts is None else tb.facts.tolist()
    out["columns"] = {k: np.asarray(v).tolist() for k, v in c.columns.items()}
    out["columns"]["thread"] = [c.threads[i] for i in out["columns"]["thread"]]
    for k in collect._POOLED:
        out["columns"][k] = [c.pool.items[i] if i >= 0 else None for i in out["columns"][k]]
    out["flows"] = {k: np.asarray(v).tolist() for k, v in c.flows.items()}
    out["flows"]["thread"] = [c.threads[i] for i in out["flows"]["thread"]]
    out["labels"] = [c.labels.raw, c.labels.display, c.labels.kind, [repr(x) for x in c.labels.location]]
    out["threads"] = sorted(tb.threads.items())
    out["odd"] = c.values.odd
    out["conv"] = sorted(c.conv.items())
    out["own"] = sorted(tb.own.items())
    out["shared"] = repr(tb.shared)
    out["notes"] = [list(tb.notes), list(t.notes)]
    out["counts"] = [c.events, c.skipped, c.device_count]
    return out


def read(path: Path, resolve: bool):
    return read_file(path, False, resolve, None, False, None)


@pytest.mark.parametrize("name", TRACES)
def test_tiny_chunks_give_the_same_tables_tree_and_summary(name):
    path = DATA / name
    whole = read(path, resolve=False)
    expected = tables(whole), json.dumps(whole.tree.to_json()), dump(whole.summary())
    small = path.stat().st_size < 1 << 20  # the largest in windows of 64 KB, blocks of 4,096, slices of 1,000: a few seconds
    with pytest.MonkeyPatch.context() as m:
        m.setattr(reader, "CHUNK", 4096 if small else 1 << 16)
        m.setattr(collect, "_BLOCK", 64 if small else 4096)
        m.setattr(build, "_SLICE", 7 if small else 1000)
        m.setattr(codes, "_CLIMB", 5 if small else 1000)
        chunked = read(path, resolve=False)
        got = tables(chunked), json.dumps(chunked.tree.to_json()), dump(chunked.summary())
    assert len(whole._table) > (7 if small else 1000) * 3  # several slices
    assert got[0] == expected[0]
    assert got[1] == expected[1]
    assert got[2] == expected[2]


def test_tiny_chunks_resolved_give_the_same_summary_and_tree(tiny_chunks):
    path = DATA / "hta-trace_filter-sampled_rank-1.json.gz"
    chunked = read(path, resolve=True)
    got = tables(chunked), json.dumps(chunked.tree.to_json()), dump(chunked.summary())
    with pytest.MonkeyPatch.context() as m:
        m.setattr(reader, "CHUNK", 1 << 20)
        m.setattr(collect, "_BLOCK", 1 << 18)
        m.setattr(build, "_SLICE", 1 << 16)
        m.setattr(codes, "_CLIMB", 1 << 16)
        whole = read(path, resolve=True)
        expected = tables(whole), json.dumps(whole.tree.to_json()), dump(whole.summary())
    assert got == expected


def test_an_event_whose_parent_is_in_an_earlier_slice_nests_under_it(kineto, tmp_path, tiny_chunks):
    """A module frame holding a wrapper frame (spliced out) holding one op that
    runs 30 ops, the last with an op inside: with slices of 7 events, the late
    ops' parent (and the wrapper they skip) lie slices back. An op after the
    module ends is at the top again: the open stack closed across slices."""
    k = kineto
    k.host("python_function", "nn.Module: Block_0", 0, 10_000)
    k.host("python_function", "torch/nn/modules/module.py(1500): _call_impl", 1, 9_998)
    k.op("aten::linear", 2, 9_990)
    for i in range(30):
        k.op("aten::add_", 10 + 100 * i, 50)
    k.op("aten::empty", 10 + 100 * 29 + 5, 10)
    k.op("aten::zeros", 20_000, 30)
    t = read(k.write(tmp_path / "nested.json"), resolve=False)
    assert len(t._table) > 7 * 4
    thread = t.tree.root.children[0]
    assert [(n.kind, n.name) for n in thread.children] == [("module", "Block_0"), ("op", "aten::zeros")]
    block = thread.children[0]
    assert [n.name for n in block.children] == ["aten::linear"]  # the wrapper frame spliced out, across slices
    linear = block.children[0]
    assert [n.name for n in linear.children] == ["aten::add_"] * 30
    assert [n.name for n in linear.children[-1].children] == ["aten::empty"]
    assert all(not n.children for n in linear.children[:-1])
    # the columns say the same: the last add_'s parent is the linear op, many slices back
    tb = t._table
    adds = np.flatnonzero(np.array([t._table.c.labels.raw[x] for x in tb.label]) == "aten::add_")
    linear_node = int(tb.parent[adds[0]])
    assert adds[-1] - linear_node > 7 * 3 and int(tb.parent[adds[-1]]) == linear_node
    assert int(tb.size[linear_node]) == 32


@pytest.mark.parametrize("name", ["hta-trace_filter-sampled_rank-1.json.gz", "rocm-miopen-rocblas.json"])
def test_a_trace_read_without_the_store_answers_alike_from_its_spilled_tables(name, tmp_path, monkeypatch):
    """A large trace read without the store is written to a temporary folder
    of the cache and answered from its mapped tables (Note [import, then
    re-open] in kernelmap.trace.store): the same summary and full tree as
    from memory, and nothing left in the cache."""
    from kernelmap.trace import load, store

    monkeypatch.setenv("KERNELMAP_CACHE_DIR", str(tmp_path))
    in_memory = load(DATA / name)
    assert in_memory.stored is None and not isinstance(in_memory._table.own, store.MappedFacts)  # small: kept in memory
    monkeypatch.setattr(store, "SPILL_NODES", 0)
    spilled = load(DATA / name)
    assert isinstance(spilled._table.own, store.MappedFacts) and spilled.stored is None and spilled.id is None
    assert dump(spilled.summary()) == dump(in_memory.summary())
    assert json.dumps(spilled.tree.to_json()) == json.dumps(in_memory.tree.to_json())
    assert spilled.meta == in_memory.meta and spilled.notes == in_memory.notes
    assert not any((tmp_path / "trace" / "store" / "spill").iterdir())
