"""Trace files a hostile user made (issue "Traps"): a gzip stream with
flipped bits, args of the wrong JSON type, a byte order mark, an event of
every category on the slow reader path, and hostile mutants of every test
trace (Hypothesis: a field of each event set to a value of each JSON type,
on the window path and the one-event-at-a-time path). Each gives an answer,
or one `kernelmap: error:` line and exit status 2. Also: the GPU time split
never says "-0.0%", and the dispatch-key column is one kind of key."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernelmap.errors import KernelmapError
from kernelmap.trace import load
from kernelmap.trace.codes import CATEGORIES
from tests.conftest import run_kernelmap

HERE = Path(__file__).resolve().parent
TRACES = sorted([*(HERE / "data").glob("*.json*"), *(HERE / "cuda").glob("*.json.gz")])


def event(**fields):
    return {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 1000, "dur": 50, "args": {}} | fields


def write(path: Path, events, text: str | None = None) -> Path:
    path.write_text(text if text is not None else json.dumps({"traceEvents": events}))
    return path


def one_line_error(done, pattern=""):
    lines = done.stderr.strip().splitlines()
    return done.returncode == 2 and len(lines) == 1 and lines[0].startswith("kernelmap: error:") and pattern in lines[0]


def test_a_gzip_trace_with_flipped_bits_is_one_line(tmp_path):
    data = bytearray((HERE / "data" / "hta-trace_filter-sampled_rank-1.json.gz").read_bytes())
    for i in range(2000, len(data) - 100, 997):
        data[i] ^= 0x55
    broken = tmp_path / "flipped.json.gz"
    broken.write_bytes(bytes(data))
    with pytest.raises(Exception) as raised:  # what gzip itself raises on these bytes: not an OSError
        with gzip.open(broken) as f:
            while f.read(1 << 20):
                pass
    assert not isinstance(raised.value, OSError)
    done = run_kernelmap("trace", "--from", str(broken), "--no-tree")
    assert one_line_error(done, "unreadable data"), done.stderr[-500:]


@pytest.mark.parametrize("args", [{"Input type": 5}, {"Input Dims": True}, {"Input type": [1, {"a": 2}]}, {"Input Dims": "x"},
                                  {"Input Dims": [[2, 2], 7], "Input type": ["float", None]}])
def test_args_of_the_wrong_json_type_are_read_as_not_recorded(tmp_path, args):
    trace = write(tmp_path / "t.json", [event(args=args), event(name="aten::mul", ts=1100, args={"Input Dims": [[2]], "Input type": ["float"]})])
    done = run_kernelmap("trace", "--from", str(trace), "--json")
    assert done.returncode == 0, done.stderr[-800:]
    doc = json.loads(done.stdout)
    assert {r["name"]: r["calls"] for r in doc["summary"]["ops"]} == {"aten::add": 1, "aten::mul": 1}


def test_a_trace_that_starts_with_a_byte_order_mark_is_read(tmp_path):
    plain = write(tmp_path / "plain.json", [event()])
    bom = tmp_path / "bom.json"
    bom.write_bytes(b"\xef\xbb\xbf" + plain.read_bytes())
    a, b = run_kernelmap("trace", "--from", str(plain), "--json"), run_kernelmap("trace", "--from", str(bom), "--json")
    assert b.returncode == 0, b.stderr
    strip = lambda doc: {**doc, "tree": {**doc["tree"], "meta": {**doc["tree"]["meta"], "file": None}}}  # noqa: E731
    assert strip(json.loads(a.stdout)) == strip(json.loads(b.stdout))
    twice = tmp_path / "twice.json"
    twice.write_bytes(b"\xef\xbb\xbf" + bom.read_bytes())  # a second mark is no JSON
    assert one_line_error(run_kernelmap("trace", "--from", str(twice)), "not a Chrome trace")


@pytest.mark.parametrize("cat", CATEGORIES)
def test_an_event_of_every_category_on_the_slow_path(tmp_path, cat):
    """`"correlation": true` fits no window record, so the event is checked as
    a dict (the path where `user_annotation` raised KeyError)."""
    events = [event(cat=cat, name="step" if cat != "kernel" else "void k()", pid=1 if "cuda" not in cat else 1, args={"correlation": True}),
              event(ts=1010, dur=10)]
    from kernelmap.trace.reader import Loose, read_events

    assert any(isinstance(e, Loose) for e in read_events(write(tmp_path / "t.json", events)))
    t = load(tmp_path / "t.json", resolve=False)
    assert t.meta["events"] == 2
    names = [n.name for _, n in t.tree.walk()]
    assert "aten::add" in names


def test_unresolved_gpu_time_is_never_negative():
    from kernelmap.trace.summary import GpuTime

    gpu = GpuTime(total_us=0.3 + 0.6, source_us=0.3, library_us=0.6)  # (0.3 + 0.6) - 0.3 - 0.6 < 0
    assert gpu.total_us - gpu.source_us - gpu.library_us < 0
    assert gpu.unresolved_us == 0.0
    text = gpu.to_text(5, 120)
    assert "-0.0%" not in text and "0.0% unresolved" in text
    assert gpu.to_json()["unresolved_us"] == 0.0 and str(gpu.to_json()["unresolved_us"]) == "0.0"


def test_the_dispatch_key_column_holds_the_runtime_key(gpu_step):
    """Each operator's dispatch key is the key the call passed through that
    answered it (one of its dispatch_keys); an alias key (Composite*) is
    kept apart, as kernel_key."""
    t = load(gpu_step)
    seen_alias = False
    for _, n in t.tree.walk():
        if n.kind != "op" or "dispatch_key" not in n.attrs:
            continue
        key = n.attrs["dispatch_key"]
        assert key in n.attrs["dispatch_keys"], (n.name, key)
        assert not key.startswith("Composite"), (n.name, key)
        seen_alias |= str(n.attrs.get("kernel_key", "")).startswith("Composite")
    assert seen_alias  # aten::conv2d and aten::linear are served by CompositeImplicitAutograd kernels
    rows = {r.name: r for r in t.summary().ops}
    [linear] = [n for _, n in t.tree.walk() if n.name == "aten::linear"]
    assert rows["aten::linear"].kernel_key == "CompositeImplicitAutograd"
    assert rows["aten::linear"].dispatch_key == linear.attrs["dispatch_key"] == linear.attrs["dispatch_keys"][-1]


# ---------------------------------------------------------------------------
# Hostile mutants of every test trace
# ---------------------------------------------------------------------------

SCALARS = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70), st.floats(),
                    st.text(max_size=12))
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=8)
TOP_FIELDS = ("ph", "cat", "name", "pid", "tid", "ts", "dur", "id", "args", "s", "bp")
ARG_FIELDS = ("correlation", "External id", "device", "stream", "grid", "block", "Input Dims", "Input type", "Input Strides",
              "Concrete Inputs", "Sequence number", "name", "Record function id", "Ev Idx")


def _sample(path: Path, per_category: int = 3) -> list[dict]:
    """A few events of each category and phase of a real trace, in file order."""
    from kernelmap.trace.reader import read_trace

    counts: dict[tuple, int] = {}
    out = []
    for e in read_trace(path):
        key = (e.get("ph"), e.get("cat"))
        if counts.get(key, 0) < per_category:
            counts[key] = counts.get(key, 0) + 1
            out.append(e)
    return out


SAMPLES: dict[str, list[dict]] = {}


def sample(path: Path) -> list[dict]:
    if path.name not in SAMPLES:
        SAMPLES[path.name] = _sample(path)
    return SAMPLES[path.name]


MUTANT_BUDGET = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@MUTANT_BUDGET
@given(data=st.data())
def test_hostile_mutants_of_every_test_trace_give_an_answer_or_one_line(tmp_path, data):
    path = data.draw(st.sampled_from(TRACES), label="trace")
    events = [dict(e) for e in sample(path)]
    for _ in range(data.draw(st.integers(1, 3), label="mutations")):
        i = data.draw(st.integers(0, len(events) - 1), label="event")
        if data.draw(st.booleans(), label="in args"):
            args = events[i].get("args")
            args = dict(args) if isinstance(args, dict) else {}
            args[data.draw(st.sampled_from(ARG_FIELDS), label="arg")] = data.draw(VALUES, label="value")
            events[i] = {**events[i], "args": args}
        else:
            events[i] = {**events[i], data.draw(st.sampled_from(TOP_FIELDS), label="field"): data.draw(VALUES, label="value")}
    # Events that fit the window record take the fast path; any that does not
    # sends its window the slow way: both are drawn here.
    target = tmp_path / "mutant.json"
    target.write_text(json.dumps({"traceEvents": events}), encoding="utf-8", errors="surrogatepass")
    try:
        t = load(target)
        t.summary().to_text()
        t.tree
    except KernelmapError as e:
        assert "\n" not in str(e) and str(e).startswith("mutant.json: "), str(e)


def test_mutants_reach_the_slow_path_and_the_cli_gives_one_line(tmp_path):
    """One mutant of each test trace through the command, as a user runs it."""
    for path in TRACES:
        events = sample(path)
        bad = [*events[:5], {**events[5 % len(events)], "ts": "soon"}, *events[6:]]
        target = write(tmp_path / f"{path.name.split('.')[0]}.json", bad)
        done = run_kernelmap("trace", "--from", str(target), "--no-tree")
        assert done.returncode in (0, 2), done.stderr[-800:]
        if done.returncode == 2:
            assert one_line_error(done), done.stderr
