"""PyTorch Execution Traces (`torch.profiler.ExecutionTraceObserver` JSON,
the input of Chakra and PARAM) -> a trace: the operator graph with its
shapes, read alone, or linked to the Kineto trace recorded in the same run.

An execution trace holds one node per operator call (`nodes`), each with
its parent (`ctrl_deps`), the exact schema it was called with, its inputs'
and outputs' shapes, dtypes and values, and the record-function id (`rf_id`)
that the Kineto trace of the same run gives the same call (`args["Record
function id"]`): Chakra's trace linker joins the two so.

Alone, its operators become a trace of their own, nested as `ctrl_deps`
says, one thread per `tid`, and resolved like any trace's (catalog entry,
dispatch key, kernel and its source); it records no times, so every
duration is 0 and a note says so. Linked, the Kineto trace is the tree (its
times, its launches and kernels) and each of its operators found in the
execution trace gains the schema, the execution-trace node and the output
shapes; a note counts what was joined.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import msgspec

from kernelmap.trace.reader import TraceFormatError, open_trace


class _Values(msgspec.Struct, gc=False):
    shapes: list[Any] = []
    types: list[Any] = []


class _Attr(msgspec.Struct, gc=False):
    name: str
    value: Any = None


class Node(msgspec.Struct, gc=False):
    """One operator call of an execution trace (the fields kernelmap reads)."""

    id: int
    name: str
    ctrl_deps: int = 0
    inputs: _Values | None = None
    outputs: _Values | None = None
    attrs: list[_Attr] = []

    def attr(self, name: str) -> Any:
        return next((a.value for a in self.attrs if a.name == name), None)


class ExecutionTrace(msgspec.Struct, gc=False):
    schema: str
    nodes: list[Node]
    pid: Any = None


_DECODER = msgspec.json.Decoder(ExecutionTrace)
_ROOT = "[pytorch|profiler|execution_trace|process]"
_THREAD = "[pytorch|profiler|execution_trace|thread]"


def is_execution_trace(path: Path) -> bool:
    """Whether `path` holds an execution trace: its top-level object names a
    `schema` and `nodes` (a Kineto trace has `traceEvents`)."""
    try:
        with open_trace(path) as f:
            head = f.read(4096).decode("utf-8", "ignore")
    except Exception:  # noqa: BLE001 - unreadable here: the trace reader says why, in one line
        return False
    return head.lstrip("\ufeff \t\r\n").startswith("{") and '"nodes"' in head and '"schema"' in head and '"traceEvents"' not in head


def read(path: Path) -> ExecutionTrace:
    """The execution trace at `path` (its nodes, typed: a node of the wrong shape is one error)."""
    try:
        with open_trace(path) as f:
            data = f.read()
    except (OSError, EOFError, ValueError) as e:
        raise TraceFormatError(path.name, None, f"unreadable execution trace ({e})") from None
    except Exception as e:  # noqa: BLE001 - zlib.error and the like: a broken gzip stream
        raise TraceFormatError(path.name, None, f"unreadable execution trace ({e})") from None
    try:
        return _DECODER.decode(data.removeprefix(b"\xef\xbb\xbf"))
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as e:
        raise TraceFormatError(path.name, None, f"not a PyTorch execution trace: {str(e)[:200]}") from None


_TENSOR = re.compile(r"^Tensor\((.*)\)$")


def kineto_type(t: Any) -> str:
    """An execution trace's input type as the profiler's `Input type` writes it."""
    if not isinstance(t, str):
        return ""
    m = _TENSOR.match(t)
    if m:
        return m.group(1)
    if t in ("Int", "Double", "Bool", "Float", "SymInt"):
        return "Scalar"
    if t.startswith("GenericList[Tensor"):
        return "TensorList"
    if t.startswith("GenericList["):
        return "ScalarList"
    return "" if t == "None" else t


def _shape(s: Any) -> list:
    """A tensor's shape, or [] for anything else (a list of ints is [[], []] in an execution trace)."""
    return s if isinstance(s, list) and all(type(x) is int for x in s) else []


def kineto_events(doc: ExecutionTrace) -> list[dict[str, Any]]:
    """The operators of an execution trace as Kineto `cpu_op` events, nested as
    `ctrl_deps` says: node k of the pre-order walk starts at k and lasts as many
    units as its subtree has nodes (times made only to nest them)."""
    by_id = {n.id: n for n in doc.nodes}
    children: dict[int, list[int]] = {}
    roots: list[int] = []
    for n in doc.nodes:
        if n.name == _ROOT:
            continue
        parent = by_id.get(n.ctrl_deps)
        if parent is None or parent.name == _ROOT or parent.id == n.id:
            roots.append(n.id)
        else:
            children.setdefault(parent.id, []).append(n.id)
    events: list[dict[str, Any]] = []
    pid = doc.pid if isinstance(doc.pid, (int, str)) else 0
    order: list[tuple[int, int]] = []  # (node, thread id), pre-order
    seen: set[int] = set()
    for root in sorted(roots):
        tid = by_id[root].attr("tid")
        tid = tid if isinstance(tid, int) and not isinstance(tid, bool) else 0
        stack = [root]
        while stack:
            i = stack.pop()
            if i in seen:  # a cycle of ctrl_deps: each node once
                continue
            seen.add(i)
            order.append((i, tid))
            stack.extend(sorted(children.get(i, ()), reverse=True))
    position = {i: k for k, (i, _) in enumerate(order)}
    size = {i: 1 for i, _ in order}
    for i, _ in reversed(order):
        p = by_id[i].ctrl_deps
        if p in size and p != i and position.get(p, len(order)) < position[i]:
            size[p] += size[i]
    for k, (i, tid) in enumerate(order):
        n = by_id[i]
        if n.name == _THREAD:
            events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": f"thread {tid}"}})
            continue
        inputs = n.inputs or _Values()
        seq = n.attr("seq_id")
        args = {
            "Input Dims": [_shape(s) for s in inputs.shapes] if isinstance(inputs.shapes, list) else [],
            "Input type": [kineto_type(t) for t in inputs.types] if isinstance(inputs.types, list) else [],
            "Record function id": n.id,
        }
        if isinstance(seq, int) and not isinstance(seq, bool) and seq >= 0:
            args["Sequence number"] = seq
        events.append({"ph": "X", "cat": "cpu_op", "name": n.name, "pid": pid, "tid": tid, "ts": float(k), "dur": float(size[i]) - 0.5,
                       "args": args})
    return events


def link(t, doc: ExecutionTrace, key: str) -> tuple[int, int]:
    """Give each operator-event node of `t` (operator, autograd node,
    annotation) whose record-function id is an execution trace node's `key`
    ("rf_id", or "id" for a trace made of the execution trace itself) that
    node's schema, id and output shapes. (joined, operators of `t`)."""
    import numpy as np

    from kernelmap.trace.codes import KIND, NONE, usable

    table = t._table
    nodes = {}
    for n in doc.nodes:
        k = n.id if key == "id" else n.attr("rf_id")
        if isinstance(k, int) and not isinstance(k, bool) and n.name not in (_ROOT, _THREAD):
            nodes.setdefault(k, n)
    rf = table.column("rf", NONE)  # only operator events (cpu_op) have one: operators, autograd nodes, annotations
    ops = np.flatnonzero(usable(rf))
    joined = 0
    for i, code in zip(ops.tolist(), rf[ops].tolist()):
        n = nodes.get(table.c.values.decode(int(code)))
        if n is None:
            continue
        own = table.own.setdefault(i, {})
        schema = n.attr("op_schema")
        if isinstance(schema, str) and schema:
            own["schema"] = schema
        own["et_node"] = n.id
        outputs = n.outputs.shapes if n.outputs is not None and isinstance(n.outputs.shapes, list) else []
        own["output_shapes"] = tuple(tuple(s) if isinstance(s, list) else s for s in outputs)
        joined += int(table.kind[i] == KIND["op"])
    return joined, int((table.kind == KIND["op"]).sum())


def load(path: Path, *, keep_frames: bool = False, resolve: bool = True, source_tree=None, meta: dict[str, Any] | None = None):
    """The execution trace at `path` alone: its operator calls nested as
    recorded, with no times."""
    import gc

    from kernelmap.trace.kineto import read as read_kineto
    from kernelmap.trace.reader import Mixed

    doc = read(path)
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        t = read_kineto(path, keep_frames, resolve, source_tree, False, {"execution_trace": path.name, **(meta or {})},
                 batches=[Mixed(kineto_events(doc))])
    finally:
        if was_enabled:
            gc.enable()
    table = t._table
    table.ts[:] = 0.0  # made only to nest the calls: an execution trace records no times
    table.dur[:] = 0.0
    link(t, doc, "id")
    t.with_notes(f"{path.name} is a PyTorch execution trace ({doc.schema}): its {len(doc.nodes):,} nodes are the operator calls "
                 "nested as recorded, with no times (every duration is 0); link it to the Kineto trace of the same run "
                 "for times and kernels (--from KINETO --execution-trace THIS)")
    return t


def pair(path: Path, et_path: Path) -> tuple[Path, Path]:
    """(the Kineto trace, the execution trace) of two files given for one run,
    in either order; TraceFormatError when neither is an execution trace."""
    if is_execution_trace(path) and not is_execution_trace(et_path):
        path, et_path = et_path, path  # given the other way round
    if not is_execution_trace(et_path):
        raise TraceFormatError(et_path.name, None, "not a PyTorch execution trace: its top-level object has no \"schema\" and \"nodes\"")
    return path, et_path


def link_file(t, et_path: Path) -> None:
    """Join the execution trace at `et_path` into the Kineto trace `t` of the same run."""
    doc = read(et_path)
    joined, ops = link(t, doc, "rf_id")
    t.meta["execution_trace"] = et_path.name
    t.with_notes(f"linked to the execution trace {et_path.name}: {joined:,} of {ops:,} operators joined by record-function id "
                 "(schema, node id and output shapes in their facts)")
