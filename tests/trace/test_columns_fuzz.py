"""Property tests of the columnar builder (Hypothesis, bounded budget): on
random well-formed traces (nested host events on a few threads, zero
durations, equal starts, launches and kernels joined by correlation or not
at all), the tree keeps every event once, nests each inside an event of its
own thread that contains it, orders siblings by time, hangs each kernel under
the launch of its correlation, and summarises alike from columns and tree."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernelmap.trace import load
from kernelmap.trace.summary import summarize

HOST_NAMES = {
    "python_function": ["train.py(10): step", "torch/nn/modules/module.py(1750): _call_impl", "nn.Module: Linear_0",
                        "<built-in method addmm of type object at 0x1>", "torch/nn/functional.py(2800): linear"],
    "cpu_op": ["aten::addmm", "aten::linear", "aten::empty", "autograd::engine::evaluate_function: AddmmBackward0", "AddmmBackward0"],
    "user_annotation": ["ProfilerStep#1", "AddmmBackward0"],
    "cuda_runtime": ["cudaLaunchKernel", "cudaMemcpyAsync"],
}
EPS = 0.002


@st.composite
def traces(draw):
    events = []
    corr = 0
    launches = []
    for tid in range(1, draw(st.integers(1, 2)) + 1):
        t = 0
        for _ in range(draw(st.integers(1, 4))):  # top-level spans of this thread
            t += draw(st.integers(0, 3))
            stack = [(t, draw(st.integers(0, 40)))]
            while stack and len(events) < 40:
                start, dur = stack.pop()
                cat = draw(st.sampled_from(sorted(HOST_NAMES)))
                e = {"ph": "X", "cat": cat, "name": draw(st.sampled_from(HOST_NAMES[cat])), "pid": 1, "tid": tid, "ts": start, "dur": dur,
                     "args": {}}
                if cat == "cuda_runtime":
                    corr += 1
                    e["args"]["correlation"] = corr
                    launches.append(corr)
                elif cat == "cpu_op" and draw(st.booleans()):
                    e["args"]["Sequence number"] = draw(st.integers(0, 3))
                events.append(e)
                # children: inside [start, start + dur], possibly at the same start, possibly of no duration
                inner = start
                for _ in range(draw(st.integers(0, 2))):
                    if inner > start + dur:
                        break
                    d = draw(st.integers(0, max(0, start + dur - inner)))
                    stack.append((inner, d))
                    inner += d + draw(st.integers(0, 2))
            t = max([t, *(e["ts"] + e["dur"] for e in events if e["tid"] == tid)]) + 1
    for c in launches:
        if draw(st.booleans()):
            events.append({"ph": "X", "cat": "kernel", "name": draw(st.sampled_from(["ampere_sgemm_128x64_tn", "void at::native::k<float>()"])),
                           "pid": 0, "tid": 7, "ts": 1000 + c, "dur": draw(st.integers(0, 5)), "args": {"correlation": c, "stream": 7}})
    if draw(st.booleans()):  # a kernel no launch can be found for
        events.append({"ph": "X", "cat": "kernel", "name": "orphan_kernel", "pid": 0, "tid": 7, "ts": 5, "dur": 1, "args": {"correlation": 999}})
    return draw(st.permutations(events))


BUDGET = settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def _check(tmp_path, events, keep_frames):
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    t = load(path, resolve=False, keep_frames=keep_frames)
    tree = t.tree
    seen = []
    parents = {}
    stack = [(tree.root, None)]
    while stack:
        node, parent = stack.pop()
        parents[id(node)] = parent
        if "event" in node.attrs:
            seen.append(node.attrs["event"])
        hosts = [c for c in node.children if c.kind.value not in ("gpu_kernel", "gpu_memcpy", "gpu_memset")]
        starts = [(events[c.attrs["event"]]["ts"], -events[c.attrs["event"]]["dur"]) for c in hosts if "event" in c.attrs]
        assert starts == sorted(starts)  # siblings in time order, longest first
        for c in node.children:
            stack.append((c, node))
            if "event" not in c.attrs or "event" not in node.attrs:
                continue
            child, outer = events[c.attrs["event"]], events[node.attrs["event"]]
            if child["cat"] == "kernel":  # under the launch of its correlation
                assert outer["cat"] == "cuda_runtime" and outer["args"]["correlation"] == child["args"]["correlation"]
            else:  # inside an event of its own thread
                assert child["tid"] == outer["tid"]
                assert outer["ts"] <= child["ts"] <= outer["ts"] + outer["dur"]
    assert len(seen) == len(set(seen))  # no event twice
    kernels = {i for i, e in enumerate(events) if e["cat"] == "kernel"}
    assert kernels <= set(seen)  # every device event is in the tree
    if keep_frames:  # every host event is kept but the autograd engine's duplicate records
        missing = {i for i, e in enumerate(events) if e["cat"] != "kernel"} - set(seen)
        assert all(events[i]["cat"] in ("cpu_op", "user_annotation") and events[i]["name"].endswith("AddmmBackward0") for i in missing), missing
    else:  # Python frames are kept only above work
        for _, n in tree.walk():
            if n.kind.value in ("python", "module", "builtin"):
                below = [d for _, d in _walk(n) if d.kind.value not in ("python", "module", "builtin")]
                assert below, n.name
    assert t.summary().to_json() == summarize(tree).to_json()


def _walk(node):
    stack = list(node.children)
    while stack:
        n = stack.pop()
        yield 0, n
        stack.extend(n.children)


@BUDGET
@given(events=traces())
def test_random_traces_nest_as_their_times_say(tmp_path, events):
    _check(tmp_path, events, keep_frames=False)


@BUDGET
@given(events=traces())
def test_random_traces_keep_every_frame_when_asked(tmp_path, events):
    _check(tmp_path, events, keep_frames=True)
