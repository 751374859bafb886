"""The trace store (Note [trace store] in kernelmap.trace.store): every test
trace's summary and the trace/2 JSON of its full tree are the same read from
the JSON, re-opened from its tables, and as the importer made them before
the store existed (digests in golden-before-store.json, written by this
module's `__main__` with the code of that time); a re-open reads no JSON; a
killed import leaves no tables; an edited file is imported again."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
TRACES = sorted([*(HERE / "data").glob("hta-*.json.gz"), HERE / "data" / "rocm-miopen-rocblas.json", *(HERE / "cuda").glob("*.json.gz"),
                 *(HERE / "cuda" / "extension").glob("*.json.gz")])
GOLDEN = HERE / "golden-before-store.json"


def _normal(doc):
    """A document without what names this machine's folders (a location's
    `file`, an origin's `root`), and without an operator row's `kernel_key`
    where it is null (a column added since, apart from the dispatch key)."""
    stack = [doc]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            item.pop("file", None)
            item.pop("root", None)
            if "kernel_key" in item and item["kernel_key"] is None:
                del item["kernel_key"]
            stack.extend(v for v in item.values() if isinstance(v, (dict, list)))
        elif isinstance(item, list):
            stack.extend(v for v in item if isinstance(v, (dict, list)))
    return doc


def documents(t) -> tuple[dict, dict]:
    """(summary JSON, trace/2 JSON of the full tree) of a trace."""
    from kernelmap.render.json import to_json

    return t.summary().to_json(), {"kernelmap": "trace/2", "tree": to_json(t.tree), "summary": t.summary().to_json()}


def digest(doc) -> str:
    return hashlib.sha256(json.dumps(_normal(doc), sort_keys=True).encode()).hexdigest()


def golden_of(path: Path) -> dict[str, str]:
    from kernelmap.trace import load

    summary, full = documents(load(path, resolve=False))
    return {"summary": digest(summary), "trace": digest(full)}


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name.split(".")[0])
def test_unresolved_answers_are_those_of_the_importer_before_the_store(path, tmp_path, monkeypatch):
    """Summary and full tree of each test trace, imported into the store and
    re-opened from it, equal the digests the importer gave before the store."""
    monkeypatch.setenv("KERNELMAP_CACHE_DIR", str(tmp_path))
    from kernelmap.trace import load

    expected = json.loads(GOLDEN.read_text())[path.name]
    first = load(path, resolve=False, store=True)
    again = load(path, resolve=False, store=True)
    assert again.id == first.id and again._table.c.columns["event"].base is not None  # mapped from the tables, not read
    for t in (first, again):
        summary, full = documents(t)
        assert {"summary": digest(summary), "trace": digest(full)} == expected


@pytest.fixture(scope="module")
def resolved_pairs(tmp_path_factory):
    """Each test trace resolved in memory, and the same trace saved and re-opened."""
    from kernelmap.trace import load
    from kernelmap.trace.store import open_variant, save

    out = []
    for path in TRACES:
        t = load(path)
        folder = tmp_path_factory.mktemp("store") / "v"
        save(t, folder)
        out.append((path, t, open_variant(folder, path)))
    return out


def test_resolved_summaries_and_full_trees_are_the_same_from_the_tables(resolved_pairs):
    """... and the full tree's document streamed from the tables (`--json --full-tree`) is the same data."""
    import io

    from kernelmap.render.json import loads
    from kernelmap.trace.views import write_full_json

    for path, memory, reopened in resolved_pairs:
        a, b = documents(memory), documents(reopened)
        assert a[0] == b[0], path.name
        assert a[1] == b[1], path.name
        streamed = io.StringIO()
        write_full_json(reopened, streamed)
        assert loads(streamed.getvalue()) == a[1], path.name
        assert memory.summary().to_text(width=160) == reopened.summary().to_text(width=160)


def test_an_edited_file_is_imported_again_and_a_kill_leaves_no_tables(tmp_path):
    env = {**os.environ, "KERNELMAP_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT / "src")}
    trace = tmp_path / "t.json"
    events = [{"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": i * 10, "dur": 5} for i in range(200_000)]
    trace.write_text(json.dumps({"traceEvents": events}))
    code = "import sys; from kernelmap.trace import load; t = load(sys.argv[1], resolve=False, store=True); print(t.id, t.summary().ops[0].calls)"
    # Killed in the middle of its import: no variant folder, and the next import works.
    child = subprocess.Popen([sys.executable, "-c", code, str(trace)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    store = tmp_path / "cache" / "trace" / "store"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and child.poll() is None and not any(store.glob("*/*.tmp-*")):
        time.sleep(0.01)
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert not [p for p in store.glob("*/*") if ".tmp-" not in p.name and p.parent.name != "by-stat"]
    done = subprocess.run([sys.executable, "-c", code, str(trace)], env=env, capture_output=True, text=True)
    tid, calls = done.stdout.split()
    assert calls == "200000"
    events[0]["name"] = "aten::mul"
    trace.write_text(json.dumps({"traceEvents": events}))
    edited = subprocess.run([sys.executable, "-c", code, str(trace)], env=env, capture_output=True, text=True)
    assert edited.stdout.split() == [edited.stdout.split()[0], "199999"] and edited.stdout.split()[0] != tid


def test_a_stored_trace_opens_by_its_id(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELMAP_CACHE_DIR", str(tmp_path))
    from kernelmap.trace import load
    from kernelmap.trace.store import UnknownTrace, open_stored, stored

    path = HERE / "data" / "hta-trace_filter-sampled_rank-1.json.gz"
    t = load(path, resolve=False, store=True)
    again = open_stored(t.id, resolve=False)
    assert again.summary().to_json() == t.summary().to_json()
    assert [s["id"] for s in stored()] == [t.id]
    for bad in ("../../etc", "0" * 32, "x"):
        with pytest.raises(UnknownTrace):
            open_stored(bad, resolve=False)


if __name__ == "__main__":  # python -m tests.trace.test_store: the digests of the code on the path
    GOLDEN.write_text(json.dumps({p.name: golden_of(p) for p in TRACES}, indent=1) + "\n")


def test_a_reopened_tables_columns_are_views_of_the_mapped_files(tmp_path, monkeypatch):
    """Every column is one record batch, so opening copies nothing: the arrays
    are read-only views whose memory is the file's."""
    monkeypatch.setenv("KERNELMAP_CACHE_DIR", str(tmp_path))
    from kernelmap.trace import load

    path = HERE / "data" / "hta-trace_filter-sampled_rank-1.json.gz"
    from kernelmap.trace.codes import Sparse

    fresh = load(path, resolve=False, store=True)._table  # a fresh import is answered from its tables too
    t = load(path, resolve=False, store=True)._table
    for table in (fresh, t):
        columns = [part for v in table.c.columns.values() for part in ((v.rows, v.values) if isinstance(v, Sparse) else (v,))]
        assert any(isinstance(v, Sparse) for v in table.c.columns.values())  # kept sparse (Note [sparse arg columns])
        for column in (table.kind, table.parent, table.size, table.dur, *columns):
            assert not column.flags.writeable and not column.flags.owndata or not len(column)  # (an empty column maps nothing)


def test_a_reopened_traces_own_facts_and_default_view_are_read_from_their_files(tmp_path, monkeypatch):
    """Per-node facts are a mapped table, decoded per node asked (facts.json
    holds none); the default bounded view is kept at import, and the one a
    re-open shows is the one the columns give; facts set after opening (an
    execution trace linked) are held over the table, and the kept view is then
    not used."""
    monkeypatch.setenv("KERNELMAP_CACHE_DIR", str(tmp_path))
    from kernelmap.trace import load
    from kernelmap.trace.store import MappedFacts
    from kernelmap.trace.views import DEFAULT_NODES, hot_nodes, hot_tree, subset_root

    path = HERE / "cuda" / "resnet50_train_fp32_bench.json.gz"
    fresh = load(path, store=True)
    again = load(path, store=True)
    own = again._table.own
    assert isinstance(own, MappedFacts) and dict(own.items()) == fresh._table.own and len(own) > 0
    doc = json.loads((again.stored / "facts.json").read_text())
    assert "own" not in doc and "conv" not in doc
    assert dict(again._table.c.conv.items()) == fresh._table.c.conv
    assert sorted(own.library_nodes()) == sorted(i for i, o in fresh._table.own.items() if "library" in o or "closed" in o)
    assert (again.stored / f"view-{DEFAULT_NODES}-None.json").is_file()
    kept, computed = hot_tree(again), hot_tree(fresh)
    assert kept.to_json() == computed.to_json()
    from kernelmap.render import render

    assert render(kept, "text", width=160) == render(computed, "text", width=160)
    node = next(iter(own))
    own.setdefault(node, {})["schema"] = "aten::x(Tensor self) -> Tensor"
    assert own.changed and own[node]["schema"].startswith("aten::x")
    from kernelmap.trace.store import stored_view

    assert stored_view(again, DEFAULT_NODES, None) is None
    assert hot_tree(again).root == subset_root(again._table, hot_nodes(again._table, DEFAULT_NODES))


def test_the_store_is_bounded_least_recently_used_first(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELMAP_CACHE_DIR", str(tmp_path))
    from kernelmap.errors import BadInput
    from kernelmap.trace import load
    from kernelmap.trace.store import evict, stored

    a, b, c = (HERE / "data" / name for name in ("hta-trace_filter-sampled_rank-1.json.gz", "hta-timeline_analysis-sampled_rank-0.json.gz",
                                                  "hta-critical_path-alexnet-benchmark_result_2869224_1695835535_trace.json.gz"))
    first, second = load(a, resolve=False, store=True), load(b, resolve=False, store=True)
    sizes = {s["id"]: s["bytes"] for s in stored()}
    assert set(sizes) == {first.id, second.id}
    os.utime(second.stored / "used", (time.time() - 100, time.time() - 100))
    load(a, resolve=False, store=True)  # opened again: now the most recently used
    # room for one more besides the first: the second, least recently used, goes
    monkeypatch.setenv("KERNELMAP_TRACE_STORE_MB", str((sizes[first.id] + sizes[first.id]) / 2**20))
    third = load(c, resolve=False, store=True)
    assert {s["id"] for s in stored()} == {first.id, third.id}
    assert not (second.stored.parent).exists()
    latest = load(b, resolve=False, store=True)  # imported again, and the first, now least recently used, goes
    assert latest.summary().to_json() == second.summary().to_json() and {s["id"] for s in stored()} == {third.id, latest.id}
    # a store smaller than the trace just imported keeps that trace alone
    monkeypatch.setenv("KERNELMAP_TRACE_STORE_MB", "0")
    for s in stored():
        os.utime(tmp_path / "trace" / "store" / s["id"] / s["variant"] / "used", (0, 0))
    assert evict(0, keep=latest.stored) == [third.stored]
    assert [s["id"] for s in stored()] == [latest.id]
    monkeypatch.setenv("KERNELMAP_TRACE_STORE_MB", "lots")
    with pytest.raises(BadInput, match="KERNELMAP_TRACE_STORE_MB must be a number"):
        load(c, resolve=False, store=True)


def test_flows_and_links_tables_join_launches_to_device_events_as_the_file_says(tmp_path, monkeypatch):
    """flows.arrow holds every ac2g flow endpoint of the file; links.arrow
    each device event hung under its launch, read with a plain Arrow reader:
    the launch is the runtime call of the device event's correlation id, as
    the file's own events say."""
    import gzip

    import pyarrow.ipc as ipc

    monkeypatch.setenv("KERNELMAP_CACHE_DIR", str(tmp_path))
    from kernelmap.trace import load

    path = HERE / "cuda" / "resnet50_train_fp32_bench.json.gz"
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    flows = [e for e in events if e.get("cat") == "ac2g" and e.get("ph") in ("s", "f")]
    t = load(path, resolve=False, store=True)
    table = {name: ipc.open_file(str(t.stored / f"{name}.arrow")).read_all().to_pydict() for name in ("flows", "links", "nodes", "events")}
    f = table["flows"]
    assert len(flows) > 100 and len(f["id"]) == len(flows)
    assert sorted(zip(f["id"], f["end"])) == sorted((e["id"], int(e["ph"] == "f")) for e in flows)
    launches = {e["args"]["correlation"] for e in events
                if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    device = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    links, rows, index = table["links"], table["nodes"]["row"], table["events"]["event"]
    hows = [how for how in links["how"]]
    assert hows.count(1) == sum(e["args"].get("correlation") in launches for e in device) > 100
    for node, launch, how, corr in zip(links["node"], links["launch"], links["how"], links["correlation"]):
        kernel, launcher = events[index[rows[node]]], events[index[rows[launch]]]
        assert corr == kernel["args"]["correlation"]
        if how == 1:  # by correlation id: the runtime call that launched it
            assert launcher["cat"] in ("cuda_runtime", "cuda_driver") and launcher["args"]["correlation"] == corr
        else:  # by external id (the operator that was running), no launch of its correlation in the file
            assert how == 3 and corr not in launches and launcher["args"]["External id"] == kernel["args"]["External id"]
        assert table["nodes"]["parent"][node] == launch
    again = load(path, resolve=False, store=True)  # re-opened: the flows the import read, from their table
    assert again._table.c.flows["id"].tolist() == f["id"]
