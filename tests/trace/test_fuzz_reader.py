"""Property tests of the trace importer (Hypothesis, bounded budget): any JSON
document, and any mutation of a valid event, gives a tree or a
TraceFormatError naming the file, never another exception."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernelmap.trace import TraceFormatError, load

SCALARS = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(10**400), max_value=10**400), st.floats(),
                    st.text(alphabet=st.characters(), max_size=20))
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=20)
EVENT = st.fixed_dictionaries(
    {"ph": st.sampled_from(["X", "s", "f", "M", "i"]), "cat": st.sampled_from(["cpu_op", "kernel", "cuda_runtime", "ac2g", "python_function"]),
     "name": st.one_of(st.text(max_size=30), VALUES), "pid": VALUES, "tid": VALUES, "ts": VALUES, "dur": VALUES},
    optional={"args": VALUES, "id": VALUES},
)
BUDGET = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def _load(tmp_path, text: str):
    path = tmp_path / "t.json"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    try:
        load(path, resolve=False)
    except TraceFormatError as e:
        assert str(e).startswith("t.json: ")


@BUDGET
@given(events=st.lists(EVENT, max_size=8))
def test_mutated_events_never_crash(tmp_path, events):
    _load(tmp_path, json.dumps({"traceEvents": events}))


@BUDGET
@given(doc=VALUES)
def test_any_json_document_never_crashes(tmp_path, doc):
    _load(tmp_path, json.dumps(doc))


def test_deep_nesting_and_huge_integers_are_one_error(tmp_path):
    for text in ('{"traceEvents":[{"ph":"X","args":' + "[" * 5000 + "]" * 5000 + "}]}",
                 json.dumps({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 10**400, "dur": 1}]}),
                 json.dumps({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 0, "dur": -5}]})):
        path = tmp_path / "t.json"
        path.write_text(text)
        try:
            load(path, resolve=False)
        except TraceFormatError as e:
            assert "\n" not in str(e)
        else:
            raise AssertionError(f"accepted: {text[:80]}")
