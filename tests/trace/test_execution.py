"""PyTorch execution traces (kernelmap.trace.execution), on the files
`data/execution/make_execution_trace.py` recorded with torch's own
ExecutionTraceObserver and the Kineto profiler in one run: read alone (the
operator graph nested as `ctrl_deps` says, resolved like any trace), and
linked to the Kineto trace by record-function id. Ground truth is read from
the two files."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from tests.conftest import run_kernelmap

DATA = Path(__file__).resolve().parent / "data" / "execution"
ET = DATA / "et-mlp.json.gz"
KINETO = DATA / "et-mlp-kineto.json.gz"
META = ("[pytorch|profiler|execution_trace|process]", "[pytorch|profiler|execution_trace|thread]")


def et_nodes() -> dict[int, dict]:
    with gzip.open(ET) as f:
        return {n["id"]: n for n in json.load(f)["nodes"]}


def attr(node: dict, name: str):
    return next(a["value"] for a in node["attrs"] if a["name"] == name)


def _walk(root):
    stack = [(root, None)]
    while stack:
        n, p = stack.pop()
        yield n, p
        stack.extend((c, n) for c in n.children)


def test_an_execution_trace_alone_is_its_operator_graph_resolved():
    from kernelmap.trace import load

    t = load(ET)
    nodes = et_nodes()
    ops = {i: n for i, n in nodes.items() if n["name"] not in META}
    shown = {}
    for n, parent in _walk(t.tree.root):
        if "et_node" in n.attrs:
            i = n.attrs["et_node"]
            assert i not in shown
            shown[i] = (n, parent)
    # every operator call, under its ctrl_deps parent where that is an operator too
    dropped = set(ops) - set(shown)  # the autograd engine's second record of a node, as in any trace (Note [trace tree shape])
    assert all(nodes[ops[i]["ctrl_deps"]]["name"] == f"autograd::engine::evaluate_function: {ops[i]['name']}" for i in dropped), dropped
    for i, (n, parent) in shown.items():
        assert n.name == ops[i]["name"] or n.name.endswith(ops[i]["name"].split(": ")[-1])
        up = ops[i]["ctrl_deps"]
        if up in ops and up in shown:
            assert parent.attrs.get("et_node") == up
        assert n.attrs["duration_us"] == 0.0
        if n.kind == "op":
            assert n.attrs.get("schema") == attr(ops[i], "op_schema")
            recorded = [s if all(isinstance(x, int) for x in s) else [] for s in ops[i]["inputs"]["shapes"]]
            shapes = [list(s) for s in n.attrs.get("input_shapes") or ()]
            assert shapes == recorded if shapes else not recorded
    addmm = [n for n, _ in shown.values() if n.name == "aten::addmm"]
    assert len(addmm) == 2 and all(n.attrs.get("op") == "aten::addmm" and n.attrs.get("kernel") for n in addmm)  # resolved
    assert any("execution trace" in note and "no times" in note for note in t.notes)
    assert {r.name for r in t.summary().ops} >= {"aten::addmm", "aten::relu", "aten::linear"}


def test_an_execution_trace_linked_to_its_kineto_trace():
    from kernelmap.trace import load

    t = load(KINETO, execution_trace=ET)
    nodes = et_nodes()
    by_rf = {attr(n, "rf_id"): n for n in nodes.values() if n["name"] not in META}
    with gzip.open(KINETO) as f:
        kineto_ops = [e for e in json.load(f)["traceEvents"] if e.get("cat") == "cpu_op"]
    assert all(e["args"]["Record function id"] in by_rf for e in kineto_ops)
    linked = 0
    for n, _ in _walk(t.tree.root):
        if n.kind != "op":
            continue
        et = nodes[n.attrs["et_node"]]
        assert attr(et, "rf_id") in by_rf and et["name"] == n.name
        assert n.attrs["schema"] == attr(et, "op_schema")
        assert list(map(list, n.attrs["output_shapes"])) == et["outputs"]["shapes"]
        assert n.attrs["duration_us"] > 0  # the Kineto trace's times
        linked += 1
    assert linked and any(f"{linked} of {linked} operators joined" in note for note in t.notes)


def test_execution_trace_options_are_checked(tmp_path):
    done = run_kernelmap("trace", "--from", str(KINETO), "--execution-trace", str(ET), "--hot", "5", "--top", "3")
    assert done.returncode == 0 and "linked to the execution trace" in done.stdout, done.stderr
    swapped = run_kernelmap("trace", "--from", str(ET), "--execution-trace", str(KINETO), "--hot", "5", "--top", "3")
    assert swapped.returncode == 0 and swapped.stdout == done.stdout
    done = run_kernelmap("trace", "--execution-trace", str(ET), "-c", "pass")
    assert done.returncode == 2 and "give that one with --from" in done.stderr
    done = run_kernelmap("trace", "--from", str(KINETO), "--execution-trace", str(KINETO))
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "not a PyTorch execution trace" in done.stderr
    bad = tmp_path / "bad-et.json"
    bad.write_text(json.dumps({"schema": "1.1.1-chakra.0.0.4", "nodes": [{"id": "x", "name": 5}]}))
    done = run_kernelmap("trace", "--from", str(bad))
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "not a PyTorch execution trace" in done.stderr
