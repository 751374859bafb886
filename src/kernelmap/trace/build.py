"""Chrome/Kineto trace events -> one nested call tree (mutable while resolving).

The profiler writes complete events (`ph: "X"`) per thread; nesting is not
stored, it is implied by time: an event that starts inside another on the
same thread ran inside it. Python frames (`python_function`), operators
(`cpu_op`), annotations and runtime calls (`cuda_runtime`, `cuda_driver`)
live on host threads and are nested by time with one explicit stack per
thread. Device activity (`kernel`, `gpu_memcpy`, `gpu_memset`) runs on
streams, not threads: each is hung under the runtime call that launched it,
found by its correlation id (`args.correlation`), by the `ac2g` flow events
that join launch and kernel, or failing both by its `External id` (the
operator that was running).

Note [trace tree shape]
root (trace) -> thread -> user Python frames and nn.Module frames ->
torch.nn.functional frames -> builtin -> aten ops, nested as the
dispatcher called them -> runtime call (cudaLaunchKernel) -> GPU kernel. Autograd nodes
(`autograd::engine::evaluate_function: XBackward0`) become one `autograd`
node whose children are the aten ops of the backward formula. Python frames
that ran no operator are dropped, and the wrappers every module call passes
through (`Module._call_impl`, ...) are spliced out, unless all frames are kept.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from kernelmap.model import CallNode, CallTree, Location

HOST_CATEGORIES = {"python_function": 0, "user_annotation": 1, "cpu_op": 2, "cuda_runtime": 3, "cuda_driver": 3}
DEVICE_CATEGORIES = {"kernel", "gpu_memcpy", "gpu_memset"}
# The args worth keeping per category: the rest (Ev Idx, Record function id,
# Python ids...) is dropped so a large trace holds only what the tree shows.
_KEPT_ARGS = {
    "cpu_op": ("Input Dims", "Input type", "External id", "Sequence number", "Fwd thread id"),
    "cuda_runtime": ("correlation", "External id"),
    "cuda_driver": ("correlation", "External id"),
    "kernel": ("correlation", "External id", "device", "stream", "grid", "block"),
    "gpu_memcpy": ("correlation", "External id", "device", "stream"),
    "gpu_memset": ("correlation", "External id", "device", "stream"),
}
# Convolutions keep what select_conv_backend needs (Note [conv backend] in resolve).
_CONV_ARGS = ("Input Strides", "Concrete Inputs")
_CONV_OPS = frozenset({"aten::_convolution", "aten::convolution_backward"})
_EPS = 0.002  # µs: ends rounded to the nanosecond may overshoot their parent by this much

_PY_FRAME = re.compile(r"^(?P<path>.+?)\((?P<line>\d+)\): (?P<func>.+)$")
_BUILTIN = re.compile(r"^<built-in (?:method|function) (?P<name>[\w.]+)(?: of (?P<owner>[\w.]+) object)?")
# Python frames every module call passes through, and frames of the profiler
# and of kernelmap itself: spliced out of the tree (their children stay).
_SPLICED_FRAMES = re.compile(
    r"^(torch/nn/modules/module\.py\(\d+\): (_call_impl|_wrapped_call_impl|__getattr__|__call__)"
    r"|torch/profiler/|torch/autograd/profiler|kernelmap/|runpy\.py|<frozen runpy>|contextlib\.py"
    r"|torch/utils/_contextlib\.py|<built-in method _get_tracing_state|<built-in function exec>"
    r"|click/|kernelmap\(\d+\): <module>)"
)


class Attrs(Mapping):
    """A node's own attributes over the facts it shares with every call of the
    same operator (dispatch key, kernel, source...): one dict per distinct
    call instead of one copy per node. Keys starting with "_" stay private."""

    __slots__ = ("own", "shared")

    def __init__(self, own: dict[str, Any], shared: dict[str, Any]):
        self.own = own
        self.shared = shared

    def __getitem__(self, key: str) -> Any:
        if key in self.own:
            return self.own[key]
        if key[:1] != "_" and key in self.shared:
            return self.shared[key]
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        yield from self.own
        for key in self.shared:
            if key[:1] != "_" and key not in self.own:
                yield key

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __repr__(self) -> str:
        return repr(dict(self))


@dataclass(eq=False, slots=True)
class Node:
    """A node under construction: the event it came from and its children."""

    name: str
    kind: str
    ts: float = 0.0  # µs
    dur: float = 0.0  # µs
    cat: str = ""
    args: dict[str, Any] = field(default_factory=dict)
    children: list[Node] = field(default_factory=list)
    attrs: dict[str, Any] = field(default_factory=dict)
    location: Location | None = None
    index: int = -1  # position of the event in the trace file, for export
    parent: Node | None = None
    thread: tuple[Any, Any] = (None, None)  # (pid, tid) of a host event
    shared: dict[str, Any] | None = None  # facts shared with every call of the same op, inputs and device

    @property
    def end(self) -> float:
        return self.ts + self.dur


def classify(name: str, cat: str) -> str:
    """The CallNode kind of a trace event."""
    if cat == "python_function":
        if name.startswith("nn.Module: "):
            return "module"
        if name.startswith("<built-in"):
            return "builtin"
        return "python"
    if cat == "cpu_op":
        if name.startswith("autograd::engine::evaluate_function: "):
            return "autograd"
        if "::" in name and name.split("::", 1)[0] in ("aten", "prims", "quantized", "torchvision", "c10d", "_c10d_functional"):
            return "op"
        if name.startswith("torch::autograd::"):
            return "autograd"
        return "annotation"
    if cat == "user_annotation":
        return "annotation"
    if cat in ("cuda_runtime", "cuda_driver"):
        return "runtime"
    if cat == "kernel":
        return "gpu_kernel"
    if cat in ("gpu_memcpy", "gpu_memset"):
        return cat
    return "annotation"


def display_name(name: str, kind: str) -> str:
    """The name a node shows: `Conv2d_0` for `nn.Module: Conv2d_0`,
    `torch.conv2d` for `<built-in method conv2d of type object at 0x..>`,
    `ConvolutionBackward0` for the autograd engine's record."""
    if kind == "module":
        return name[len("nn.Module: ") :]
    if kind == "builtin":
        m = _BUILTIN.match(name)
        if m:
            owner = m["owner"]
            if owner == "Tensor":
                return f"Tensor.{m['name']}"
            if owner == "type":  # torch._C._VariableFunctions: the torch.* builtins
                return f"torch.{m['name']}"
            return m["name"] if owner is None else f"{owner}.{m['name']}"
        return name
    if kind == "python":
        m = _PY_FRAME.match(name)
        if m:
            module = m["path"].removesuffix(".py").replace("/", ".").removesuffix(".__init__")
            return f"{module}.{m['func']}"
    if kind == "autograd" and name.startswith("autograd::engine::evaluate_function: "):
        return name.split(": ", 1)[1]
    return name


def _python_location(name: str, origin) -> Location | None:
    m = _PY_FRAME.match(name)
    if not m or m["path"].startswith("/") or m["path"].startswith("<"):
        return None
    path = m["path"]
    line = max(int(m["line"]), 1)
    if path.startswith("torch/") and origin is not None:
        return Location(path, line, origin=origin)
    return Location(path, line)


@dataclass
class Collected:
    """What one pass over the events keeps: host events per thread, device
    events, flow endpoints and thread names."""

    threads: dict[tuple[Any, Any], list[Node]] = field(default_factory=dict)
    device: list[Node] = field(default_factory=list)
    flow_starts: dict[Any, tuple[Any, Any, float]] = field(default_factory=dict)  # ac2g id -> (pid, tid, ts)
    flow_ends: dict[Any, tuple[Any, Any, float]] = field(default_factory=dict)
    thread_names: dict[tuple[Any, Any], str] = field(default_factory=dict)
    process_names: dict[Any, str] = field(default_factory=dict)
    events: int = 0
    skipped: int = 0
    device_count: int = 0  # device events, counted before the tree takes them


def collect(events: Iterable[dict], python_origin=None) -> Collected:
    """One streaming pass: keep the events the tree needs, as small nodes."""
    c = Collected()
    intern: dict[str, str] = {}
    shapes: dict[tuple, tuple] = {}
    seen: dict[tuple[str, str], tuple[str, str, Location | None]] = {}
    for index, e in enumerate(events):
        c.events += 1
        ph = e.get("ph")
        if ph == "X":
            cat = e.get("cat", "")
            if cat not in HOST_CATEGORIES and cat not in DEVICE_CATEGORIES:
                c.skipped += 1
                continue
            try:
                name = e["name"]
                ts = float(e["ts"])
                dur = float(e.get("dur", 0.0))
            except (KeyError, TypeError, ValueError) as err:
                raise ValueError(f"event #{index} ({e.get('name', '?')!r}) lacks a usable name/ts/dur: {err}") from None
            name = intern.setdefault(name, name)
            raw = e.get("args") or {}
            args = {k: raw[k] for k in _KEPT_ARGS.get(cat, ()) if k in raw}
            if name in _CONV_OPS:
                args.update((k, raw[k]) for k in _CONV_ARGS if k in raw)
            for k in ("Input Dims", "Input type", "grid", "block"):
                v = args.get(k)
                if isinstance(v, list):  # repeated shapes and types are stored once
                    t = tuple(tuple(x) if isinstance(x, list) else x for x in v)
                    args[k] = shapes.setdefault(t, t)
            described = seen.get((name, cat))
            if described is None:  # once per distinct name: kind, display name, location
                kind = classify(name, cat)
                location = _python_location(name, python_origin) if kind == "python" else None
                described = seen[(name, cat)] = (kind, display_name(name, kind), location)
            kind, display, location = described
            node = Node(display, kind, ts, dur, cat, args, index=index, location=location)
            if kind in ("python", "module", "builtin"):
                node.attrs["frame"] = name
            if cat in DEVICE_CATEGORIES:
                node.attrs["pid"], node.attrs["tid"] = e.get("pid"), e.get("tid")
                c.device.append(node)
            else:
                c.threads.setdefault((e.get("pid"), e.get("tid")), []).append(node)
        elif ph in ("s", "f") and e.get("cat") == "ac2g":
            target = c.flow_starts if ph == "s" else c.flow_ends
            target[e.get("id")] = (e.get("pid"), e.get("tid"), float(e.get("ts", 0.0)))
        elif ph == "M":
            if e.get("name") == "thread_name":
                c.thread_names[(e.get("pid"), e.get("tid"))] = (e.get("args") or {}).get("name", "")
            elif e.get("name") == "process_name":
                c.process_names[e.get("pid")] = (e.get("args") or {}).get("name", "")
        else:
            c.skipped += 1
    return c


def nest(nodes: list[Node]) -> list[Node]:
    """Nest one thread's events by time containment; returns the top level."""
    nodes.sort(key=lambda n: (n.ts, -n.dur, HOST_CATEGORIES.get(n.cat, 9), n.index))
    top: list[Node] = []
    stack: list[Node] = []
    for node in nodes:
        while stack and node.ts >= stack[-1].end - _EPS * (stack[-1].dur > 0) and not (
            node.ts == stack[-1].ts and node.dur == 0
        ):
            stack.pop()
        if stack:
            node.parent = stack[-1]
            stack[-1].children.append(node)
        else:
            top.append(node)
        stack.append(node)
    return top


def attach_device(c: Collected, hosts: Iterable[Node]) -> list[Node]:
    """Hang each device event under its launch; returns those with no launch found."""
    by_correlation: dict[Any, Node] = {}
    by_position: dict[tuple[Any, Any, float], Node] = {}
    by_external: dict[Any, Node] = {}
    for node in hosts:
        if node.kind == "runtime":
            corr = node.args.get("correlation")
            if corr is not None:
                by_correlation[corr] = node
            by_position[(node.thread[0], node.thread[1], node.ts)] = node
        elif node.kind == "op":
            ext = node.args.get("External id")
            if ext is not None:
                by_external.setdefault(ext, node)
    # ac2g flows: start on the launch, end on the kernel (same id).
    flow_launch: dict[tuple[Any, Any, float], Node] = {}
    for fid, end in c.flow_ends.items():
        start = c.flow_starts.get(fid)
        if start is not None and start in by_position:
            flow_launch[end] = by_position[start]
    orphans = []
    for dev in c.device:
        corr = dev.args.get("correlation")
        launch = by_correlation.get(corr) if corr is not None else None
        how = "correlation"
        if launch is None:
            launch = flow_launch.get((dev.attrs.get("pid"), dev.attrs.get("tid"), dev.ts))
            how = "flow"
        if launch is None and dev.args.get("External id") is not None:
            launch = by_external.get(dev.args["External id"])
            how = "external id"
        if launch is None:
            orphans.append(dev)
            continue
        dev.attrs["linked_by"] = how
        dev.parent = launch
        launch.children.append(dev)
    return orphans


def _is_noise(node: Node) -> bool:
    return node.kind in ("python", "builtin") and bool(_SPLICED_FRAMES.match(node.attrs.get("frame", "")))


def simplify(roots: list[Node], keep_frames: bool = False) -> list[Node]:
    """Drop Python frames that ran no operator, splice out wrapper frames and
    the autograd engine's duplicate record of a node (post-order, explicit stack)."""
    order: list[Node] = []
    stack = list(roots)
    while stack:
        n = stack.pop()
        order.append(n)
        stack.extend(n.children)
    # Post-order: children are settled before their parent.
    has_work: dict[int, bool] = {}
    for n in reversed(order):
        work = n.kind not in ("python", "module", "builtin") or any(has_work[id(ch)] for ch in n.children)
        has_work[id(n)] = work
        new_children: list[Node] = []
        for ch in n.children:
            if not keep_frames and not has_work[id(ch)]:
                continue
            if (not keep_frames and _is_noise(ch)) or (
                n.kind == "autograd" and ch.kind == "autograd" and ch.name == n.name and len(n.children) == 1
            ) or (n.kind == "autograd" and ch.kind == "annotation" and ch.name == n.name):
                for g in ch.children:
                    g.parent = n
                new_children.extend(ch.children)
                continue
            new_children.append(ch)
        n.children = new_children
    kept = []
    for r in roots:
        if not keep_frames and not has_work[id(r)]:
            continue
        if not keep_frames and _is_noise(r):
            kept.extend(r.children)
        else:
            kept.append(r)
    return kept


def walk(roots: Iterable[Node]) -> Iterator[Node]:
    stack = list(reversed(list(roots)))
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(n.children))


def build(c: Collected, keep_frames: bool = False) -> tuple[Node, list[str]]:
    """The whole tree: one child of the root per host thread, plus device
    events no launch could be found for. Returns (root, notes)."""
    notes: list[str] = []
    root = Node("trace", "trace")
    hosts: list[Node] = []
    for (pid, tid), nodes in c.threads.items():
        for n in nodes:
            n.thread = (pid, tid)
        hosts.extend(nodes)
    orphans = attach_device(c, hosts)
    del hosts
    # The tree holds every node from here on: drop the flat lists, so that
    # freezing can release builder nodes one by one.
    c.device_count = len(c.device)
    c.device = []
    threads = sorted(c.threads.items(), key=lambda kv: min(n.ts for n in kv[1]))
    c.threads = {}
    for (pid, tid), nodes in threads:
        top = nest(nodes)
        top = simplify(top, keep_frames)
        if not top:
            continue
        label = c.thread_names.get((pid, tid)) or f"thread {tid}"
        thread = Node(label, "thread", children=top)
        thread.ts = min(n.ts for n in top)
        thread.dur = max(n.end for n in top) - thread.ts
        thread.attrs.update(pid=pid, tid=tid)
        for n in top:
            n.parent = thread
        thread.parent = root
        root.children.append(thread)
    if orphans:
        notes.append(f"{len(orphans)} device events could not be joined to a launch (no correlation id or flow)")
        unlinked = Node("device events without a launch", "thread", children=orphans)
        unlinked.parent = root
        root.children.append(unlinked)
    _link_backward(root)
    if root.children:
        root.ts = min(t.ts for t in root.children if t.children)
        root.dur = max(t.end for t in root.children) - root.ts
    return root, notes


def _link_backward(root: Node) -> None:
    """Name on each autograd node the forward operator that recorded it: the
    forward op carries a sequence number, the node repeats it with the id of
    the forward thread."""
    forward: dict[Any, str] = {}
    nodes = list(walk(root.children))
    for n in nodes:
        seq = n.args.get("Sequence number")
        if seq is not None and n.kind == "op":
            forward[seq] = n.name  # pre-order: the innermost op with the number recorded the node
    for n in nodes:
        if n.kind == "autograd" and n.args.get("Sequence number") is not None:
            n.attrs["sequence_nr"] = n.args["Sequence number"]
            fwd = forward.get(n.args["Sequence number"])
            if fwd:
                n.attrs["forward_op"] = fwd


def freeze(root: Node) -> CallNode:
    """The frozen CallNode tree (post-order, explicit stack). Builder nodes are
    released as they are frozen, so the two trees barely coexist in memory."""
    order: list[Node] = []
    stack = [root]
    while stack:
        n = stack.pop()
        order.append(n)
        stack.extend(n.children)
    done: dict[int, CallNode] = {}
    frozen = None
    while order:
        n = order.pop()
        attrs: Mapping[str, Any] = n.attrs
        if n.kind != "trace" or n.dur:
            n.attrs.setdefault("duration_us", round(n.dur, 3))
        if n.index >= 0:
            n.attrs["event"] = n.index
        if n.shared is not None:
            attrs = Attrs(n.attrs, n.shared)
        frozen = CallNode(
            name=n.name,
            kind=n.kind,
            location=n.location,
            via=None,
            children=tuple(done.pop(id(ch)) for ch in n.children),
            attrs=attrs,
        )
        for ch in n.children:
            ch.parent = None
        n.children = []
        n.args = {}
        n.shared = None
        done[id(n)] = frozen
    assert frozen is not None
    return frozen


def to_tree(root: Node, notes: list[str], meta: dict[str, Any]) -> CallTree:
    return CallTree(freeze(root), tuple(notes), meta)
