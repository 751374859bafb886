"""Bounded memory and the fast reader: the reader's memory does not grow with
the number of events; several ranks cost one rank's tree, not the sum; the
window reader gives what the event-at-a-time reader gives, even on events it
cannot decode as a window; the dispatcher's answers are cached per install,
so a second trace imports no torch, and a damaged cache is ignored."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).resolve().parent / "data"
GPU_TRACE = DATA / "hta-trace_diff-control-control.json.gz"


def write_trace(path: Path, steps: int, tid: int = 1) -> int:
    """A Kineto-shaped GPU trace: per step an op, its launch, its kernel and the flow joining them."""
    n = 0
    with open(path, "w") as f:
        f.write('{"schemaVersion": 1, "distributedInfo": {"rank": %d}, "traceEvents": [\n' % (tid - 1))
        for i in range(steps):
            t = i * 100.0
            events = [
                {"ph": "X", "cat": "cpu_op", "name": "aten::mul", "pid": 1, "tid": tid, "ts": t, "dur": 50.0,
                 "args": {"External id": i, "Input Dims": [[64, 64], [64, 64]], "Input type": ["float", "float"], "Ev Idx": i}},
                {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": tid, "ts": t + 10, "dur": 5.0,
                 "args": {"correlation": i, "External id": i}},
                {"ph": "X", "cat": "kernel", "name": "ncclKernel_AllReduce_RING_LL_Sum_float", "pid": 0, "tid": 7, "ts": t + 20, "dur": 20.0 + tid,
                 "args": {"correlation": i, "External id": i, "device": 0, "stream": 7, "grid": [1, 1, 1], "block": [128, 1, 1]}},
                {"ph": "s", "id": i, "pid": 1, "tid": tid, "ts": t + 10, "cat": "ac2g", "name": "ac2g"},
                {"ph": "f", "id": i, "pid": 0, "tid": 7, "ts": t + 20, "cat": "ac2g", "name": "ac2g", "bp": "e"},
            ]
            for e in events:
                f.write(("" if n == 0 else ",\n") + json.dumps(e))
                n += 1
        f.write('\n], "traceName": "t"}\n')
    return n


# The peak resident size of the child's own address space (VmHWM): getrusage's
# ru_maxrss would carry the parent's (pytest's) peak across fork and exec.
_PEAK = r"""
def peak_kb():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
"""
needs_proc = pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmHWM from /proc")


def run_child(code: str, *args: str, env: dict | None = None) -> dict:
    """Run `code` in a fresh interpreter; it prints one JSON line."""
    environ = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]), **(env or {})}
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=environ, timeout=600)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


_READ = _PEAK + r"""
import json, sys
from kernelmap.trace.reader import read_events
base = peak_kb()
n = sum(1 for _ in read_events(sys.argv[1]))
print(json.dumps({"events": n, "added_kb": peak_kb() - base}))
"""


@needs_proc
def test_reader_memory_does_not_grow_with_the_events(tmp_path):
    small, large = tmp_path / "small.json", tmp_path / "large.json"
    write_trace(small, 2_000)
    n = write_trace(large, 40_000)  # 200,000 events, about 40 MB
    a, b = run_child(_READ, str(small)), run_child(_READ, str(large))
    assert b["events"] == n and a["added_kb"] > 0
    # A window (about one chunk of text and its records) at a time: 20 times
    # the events may not cost more than a few windows more.
    assert b["added_kb"] - a["added_kb"] < 24 * 1024, (a, b)


_RANKS = _PEAK + r"""
import json, sys
from pathlib import Path
from kernelmap.trace import load
from kernelmap.trace.ranks import summarize_ranks
base = peak_kb()
s = summarize_ranks([Path(p) for p in sys.argv[1:]], lambda p: load(p, resolve=False))
print(json.dumps({"ranks": len(s.ranks), "added_kb": peak_kb() - base}))
"""


@needs_proc
def test_several_ranks_cost_one_ranks_tree(tmp_path):
    paths = []
    for rank in range(4):
        p = tmp_path / f"rank{rank}.json"
        write_trace(p, 10_000, tid=rank + 1)
        paths.append(str(p))
    one = run_child(_RANKS, paths[0])
    four = run_child(_RANKS, *paths)
    assert four["ranks"] == 4 and one["added_kb"] > 8 * 1024  # a tree of 30,000 events was built
    # Each rank's tree is dropped before the next is read: four ranks cost
    # one tree plus what is kept per rank, far less than four trees.
    assert four["added_kb"] < 1.6 * one["added_kb"], (one, four)


def test_windows_and_one_event_at_a_time_agree(tmp_path):
    from kernelmap.trace.reader import Args, Event, Loose, read_events, read_trace

    path = tmp_path / "t.json"
    odd = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 1, "dur": 2, "args": {"External id": 3, "x": [1, {"}": "],"}]}},
        {"ph": "i", "name": ["not", "a", "string"], "pid": {"a": 1}, "ts": "soon"},  # unused: fits no record, stays whole
        {"ph": "X", "cat": "kernel", "name": "k}, {", "pid": 0, "tid": 7, "ts": 3, "dur": 1, "args": {"correlation": 3}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "main"}},
    ]
    path.write_text('{"traceEvents": [' + ",\n".join(json.dumps(e) for e in odd * 3000) + "]}")
    plain = list(read_trace(path))
    fast = list(read_events(path))
    assert len(plain) == len(fast) == 4 * 3000
    for d, e in zip(plain, fast):
        if isinstance(e, Loose):
            assert e.raw == d
            continue
        assert isinstance(e, Event)
        assert (e.ph, e.cat, e.name, e.pid, e.tid, e.ts, e.dur) == tuple(d.get(k) for k in ("ph", "cat", "name", "pid", "tid", "ts", "dur"))
        if "args" in d:
            assert isinstance(e.args, Args)
            assert e.args.external_id == d["args"].get("External id") and e.args.correlation == d["args"].get("correlation")
    assert sum(isinstance(e, Loose) for e in fast) == 3000


_LOAD = r"""
import json, sys
from kernelmap.trace import load
t = load(sys.argv[1])
s = t.summary()
print(json.dumps({"torch": "torch" in sys.modules, "ops": [r.to_json() for r in s.ops]}))
"""


def test_dispatch_answers_are_cached_per_install(tmp_path):
    cache = tmp_path / "cache"
    env = {"KERNELMAP_CACHE_DIR": str(cache)}
    catalog = Path(os.environ.get("KERNELMAP_CACHE_DIR") or "") / "catalog"
    if catalog.is_dir():  # reuse the session's built catalog: the cache under test is the dispatcher's
        cache.mkdir()
        os.symlink(catalog, cache / "catalog")
    first = run_child(_LOAD, str(GPU_TRACE), env=env)
    assert first["torch"]  # asked the live dispatcher
    [written] = (cache / "trace").glob("dispatch-*.json")
    second = run_child(_LOAD, str(GPU_TRACE), env=env)
    assert not second["torch"] and second["ops"] == first["ops"]
    for damage in ("", "{not json", json.dumps({"version": 1, "stamp": "x", "entries": []}), json.dumps([1, 2])):
        written.write_text(damage)
        again = run_child(_LOAD, str(GPU_TRACE), env=env)
        assert again["torch"] and again["ops"] == first["ops"]  # ignored, asked again, rewritten
    assert json.loads(written.read_text())["entries"]
