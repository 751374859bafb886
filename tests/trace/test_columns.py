"""The columnar trace (Note [columnar trace]): the summary read from the
columns is the summary of the CallNode tree made from them, on every real
trace the tests carry and on a live one; the tree is made only when asked for."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from kernelmap.trace import load
from kernelmap.trace.summary import summarize

DATA = Path(__file__).resolve().parent / "data"
TRACES = sorted(p.name for p in DATA.iterdir() if p.name.endswith((".json", ".json.gz")))


def _close(a, b, path="") -> None:
    """Equal JSON documents, floats to a part in 1e9 (sums taken in another order)."""
    if isinstance(a, float) or isinstance(b, float):
        assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-6), (path, a, b)
    elif isinstance(a, dict):
        assert list(a) == list(b), path
        for k in a:
            _close(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            _close(x, y, f"{path}[{i}]")
    else:
        assert a == b, (path, a, b)


@pytest.mark.parametrize("name", TRACES)
@pytest.mark.parametrize("keep_frames", [False, True])
def test_the_summary_of_the_columns_is_the_summary_of_the_tree(name, keep_frames):
    t = load(DATA / name, keep_frames=keep_frames)
    assert t._tree is None  # loading made no CallNodes
    from_columns = t.summary().to_json()
    assert t._tree is None  # nor did the summary
    from_tree = summarize(t.tree).to_json()
    _close(from_columns, from_tree)
    assert from_columns["ops"], name  # every fixture has operators
    # and the text tables, cell for cell
    assert t.summary().to_text(width=200) == summarize(t.tree).to_text(width=200)


def test_a_live_trace_summarises_alike(resnet_trace):
    _, t = resnet_trace
    _close(t.summary().to_json(), summarize(t.tree).to_json())
    assert t.summary().to_text() == summarize(t.tree).to_text()


def test_the_tree_has_every_kept_event_once():
    """Each node of the tree is one event of the file (its `event` index), none twice."""
    t = load(DATA / "hta-trace_filter-sampled_rank-1.json.gz")
    events = [n.attrs["event"] for _, n in t.tree.walk() if "event" in n.attrs]
    assert len(events) == len(set(events))
    raw = json.loads(__import__("gzip").open(DATA / "hta-trace_filter-sampled_rank-1.json.gz").read())["traceEvents"]
    kinds = {raw[i]["cat"] for i in events}
    assert kinds <= {"python_function", "user_annotation", "cpu_op", "cuda_runtime", "cuda_driver", "kernel", "gpu_memcpy", "gpu_memset"}
    device = sum(1 for e in raw if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"))
    assert sum(1 for i in events if raw[i]["cat"] in ("kernel", "gpu_memcpy", "gpu_memset")) == device  # every device event is in the tree


_LOAD_PEAK = r"""
import json, sys
def peak_kb():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
from kernelmap.trace import load
import kernelmap.trace.build, kernelmap.trace.resolve, kernelmap.trace.summary, numpy, msgspec  # imports outside the measurement
base = peak_kb()
t = load(sys.argv[1], resolve=False)
s = t.summary()
print(json.dumps({"added_kb": peak_kb() - base, "tree_made": t._tree is not None, "ops": [r.calls for r in s.ops]}))
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmHWM from /proc")
def test_a_summary_of_200000_events_costs_columns_not_objects(tmp_path):
    """Loading and summarising keeps a few dozen bytes of columns per event:
    a CallNode tree of the same trace costs over 700 bytes an event."""
    from tests.trace.test_scale import run_child, write_trace

    path = tmp_path / "t.json"
    n = write_trace(path, 40_000)  # 200,000 events: an op, its launch, its kernel, a flow's two ends per step
    r = run_child(_LOAD_PEAK, str(path))
    assert not r["tree_made"] and r["ops"] == [40_000]
    assert r["added_kb"] * 1024 / n < 300, r  # bytes per event of the file


@pytest.mark.parametrize("name", TRACES)
def test_kernels_of_a_library_from_the_columns_are_those_of_the_tree(name):
    t = load(DATA / name)
    libraries = tuple({n.attrs.get("library") for _, n in t.tree.walk() if n.kind == "gpu_kernel"} - {None})
    from_tree = sorted((n.attrs["start_us"], n.name, n.attrs["duration_us"]) for _, n in t.tree.walk()
                       if n.kind == "gpu_kernel" and n.attrs.get("library") in libraries)
    assert sorted(t.kernels(libraries)) == from_tree
    if "rocm" not in name:
        assert from_tree, name  # every GPU fixture has kernels of a named library


def test_an_unresolved_trace_carries_only_the_events_own_times_and_links():
    """Without resolution a kernel node says where and when it ran and how it
    was joined to its launch; its stream, grid and correlation come with the facts."""
    t = load(DATA / "hta-trace_filter-sampled_rank-1.json.gz", resolve=False)
    kernels = [n for _, n in t.tree.walk() if n.kind.value == "gpu_kernel"]
    assert kernels
    assert {frozenset(n.attrs) for n in kernels} <= {frozenset({"pid", "tid", "linked_by", "duration_us", "start_us", "event"}),
                                                    frozenset({"pid", "tid", "duration_us", "start_us", "event"})}
    resolved = load(DATA / "hta-trace_filter-sampled_rank-1.json.gz")
    assert all("stream" in n.attrs for _, n in resolved.tree.walk() if n.kind.value == "gpu_kernel")


def test_the_sorted_join_keeps_what_a_dict_built_in_order_keeps():
    """build._lookup, the join of device events to launches by correlation
    (the last launch of an id, as a dict built in order keeps) and by
    external id (the first, as setdefault keeps), on ids with repeats,
    absent ids (NONE), and odd codes below zero."""
    import numpy as np

    from kernelmap.trace.build import _lookup
    from kernelmap.trace.codes import NONE

    rng = np.random.default_rng(7)
    keys = rng.integers(-5, 40, 300)
    keys[rng.integers(0, 300, 20)] = NONE  # never a key of a launch: filtered before the join, kept here to check it is never matched
    values = rng.permutation(1000)[:300]
    wanted = np.concatenate([rng.integers(-8, 50, 500), np.full(5, NONE)])
    for last in (True, False):
        table: dict[int, int] = {}
        for k, v in zip(keys.tolist(), values.tolist()):
            if last:
                table[k] = v
            else:
                table.setdefault(k, v)
        expected = [table.get(w, -1) if w != NONE else -1 for w in wanted.tolist()]
        assert _lookup(keys, values, wanted, last=last).tolist() == expected
    assert _lookup(keys[:0], values[:0], wanted, last=True).tolist() == [-1] * len(wanted)


def test_the_nesting_keeps_what_one_stack_per_thread_keeps():
    """build._nest (the innermost open event in locals, threads cut apart
    beforehand) against the plain stack per thread it replaced, on several
    threads, equal starts, instants (one starting with its parent stays
    inside it), events ending where the next starts, partial overlaps, and
    more events than one slice of _nest's lists."""
    import numpy as np

    from kernelmap.trace.build import _EPS, _nest, _SLICE

    def reference(ts, dur, thread):
        parent, stack, current = [], [], None
        for k, (t, d, th) in enumerate(zip(ts.tolist(), dur.tolist(), thread.tolist())):
            if th != current:
                current, stack = th, []
            while stack and t >= stack[-1][1] and not (t == stack[-1][2] and d == 0):
                stack.pop()
            parent.append(stack[-1][0] if stack else -1)
            stack.append((k, t + d - (_EPS if d > 0 else 0.0), t))
        return parent

    rng = np.random.default_rng(3)
    for trial in range(60):
        n = _SLICE + 500 if trial == 0 else int(rng.integers(0, 400))
        thread = np.sort(rng.integers(0, int(rng.integers(1, 5)), n))
        ts = rng.integers(0, 40, n).astype(float) if trial % 2 else np.round(rng.random(n) * 400, 1)
        dur = np.where(rng.random(n) < 0.3, 0.0, rng.integers(0, 25, n).astype(float))
        order = np.lexsort((-dur, ts, thread))
        ts, dur, thread = ts[order], dur[order], thread[order]
        assert _nest(ts, dur, thread).tolist() == reference(ts, dur, thread)


def test_the_flow_join_keeps_what_dicts_built_in_file_order_keep():
    """build._flow_launches against the dicts it replaced, on flows with
    repeated ids, absent ids, several flows ending at one place, starts at
    -0.0 and 0.0, and runtime calls sharing a place."""
    import numpy as np

    from kernelmap.trace.build import _flow_launches
    from kernelmap.trace.codes import NONE
    from kernelmap.trace.collect import Collected

    rng = np.random.default_rng(11)
    joined = 0
    for _ in range(30):
        c = Collected()
        n = 60
        c.columns = {"thread": rng.integers(0, 3, n).astype(np.int32), "ts": rng.choice([-0.0, 0.0, 1.0, 2.5, 3.0, 4.0], n)}
        m = 40
        ids = rng.integers(0, 12, m)
        ids[rng.integers(0, m, 3)] = NONE
        c.flows = {"id": ids, "thread": rng.integers(0, 3, m).astype(np.int32),
                   "ts": rng.choice([-0.0, 0.0, 1.0, 2.5, 3.0, 4.0], m), "end": rng.integers(0, 2, m).astype(bool)}
        runtime = rng.permutation(n)[:25]
        positions = rng.permutation(1000)[:25]
        rows = np.setdiff1d(np.arange(n), runtime)
        by_position = dict(zip(zip(c.thread[runtime].tolist(), c.ts[runtime].tolist()), positions.tolist()))
        f = c.flows
        starts, ends = np.flatnonzero(~f["end"]), np.flatnonzero(f["end"])
        start_of = dict(zip(f["id"][starts].tolist(), zip(f["thread"][starts].tolist(), f["ts"][starts].tolist())))
        end_of = dict(zip(f["id"][ends].tolist(), zip(f["thread"][ends].tolist(), f["ts"][ends].tolist())))
        flow_launch = {}
        for fid, end in end_of.items():
            start = start_of.get(fid)
            if start is not None and start in by_position:
                flow_launch[end] = by_position[start]
        expected = [flow_launch.get((int(c.thread[r]), float(c.ts[r])), -1) for r in rows.tolist()]
        assert _flow_launches(c, runtime, positions, rows).tolist() == expected
        joined += sum(p >= 0 for p in expected)
    assert joined > 100  # the cases above join many rows, not none


def test_first_seen_without_inverse_gives_the_same_firsts_and_counts():
    """first_seen(keys, inverse=False), which makes no number per position
    where the keys are dense, finds the same first positions and counts as
    with the inverse, on dense keys and on sparse ones (the sort path)."""
    import numpy as np

    from kernelmap.trace.codes import first_seen

    rng = np.random.default_rng(7)
    for keys in (rng.integers(0, 50, 10_000), rng.integers(0, 1 << 40, 10_000), np.repeat(rng.integers(0, 1 << 40, 30), 7),
                 np.zeros(1, dtype=np.int64)):
        first, counts, inverse = first_seen(keys)
        first2, counts2, none = first_seen(keys, inverse=False)
        assert first2.tolist() == first.tolist() and counts2.tolist() == counts.tolist() and len(inverse) == len(keys)
        assert keys[first].tolist() == list(dict.fromkeys(keys.tolist()))  # first appearance order, read from the keys
        assert counts.tolist() == [keys.tolist().count(k) for k in keys[first].tolist()]
