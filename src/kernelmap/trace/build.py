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

import math
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from kernelmap.model import FACT_NAMES, CallNode, CallTree, Location, NodeKind
from kernelmap.trace.text import sanitize

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

    # Fast paths of Mapping's generic methods: the summary reads every node's facts.
    def get(self, key: str, default: Any = None) -> Any:
        own = self.own
        if key in own:
            return own[key]
        if key[:1] != "_":
            return self.shared.get(key, default)
        return default

    def __contains__(self, key: object) -> bool:
        return key in self.own or (isinstance(key, str) and key[:1] != "_" and key in self.shared)

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
    children: list[Node] | tuple = ()  # a list once it has any: most nodes are leaves
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


def _finite(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what} is not a number")
    f = float(value)  # OverflowError for integers beyond float range
    if not math.isfinite(f):
        raise ValueError(f"{what} is not finite")
    return f


def _id(value: Any) -> Any:
    """pid / tid / flow ids / correlations: an int or a string (or absent)."""
    if value is None or isinstance(value, (int, str)):
        return value
    raise TypeError(f"an id is a {type(value).__name__}, not an int or a string")


def _checked(e: dict) -> tuple[str, float, float]:
    """(name, ts, dur) of a complete event, its ids and args checked: a
    malformed event is refused here, not deep in the tree builder."""
    name = e["name"]
    if not isinstance(name, str):
        raise TypeError("name is not a string")
    ts = _finite(e["ts"], "ts")
    dur = _finite(e.get("dur", 0.0), "dur")
    if dur < 0:
        raise ValueError(f"negative duration {dur}")
    _id(e.get("pid"))
    _id(e.get("tid"))
    args = e.get("args")
    if args is not None and not isinstance(args, dict):
        raise TypeError("args is not an object")
    if isinstance(args, dict):
        for k in ("correlation", "External id", "stream", "device"):
            _id(args.get(k))
    return name, ts, dur


_RELEVANT = frozenset(HOST_CATEGORIES) | DEVICE_CATEGORIES
_KEPT_FIELDS: dict[str, tuple[tuple[str, str], ...]] = {}  # category -> (Args attribute, arg name) kept


def _kept_fields(cat: str) -> tuple[tuple[str, str], ...]:
    from kernelmap.trace.reader import ARG_FIELDS

    by_key = {v: k for k, v in ARG_FIELDS.items()}
    return tuple((by_key[k], k) for k in _KEPT_ARGS.get(cat, ()))


def _loose(raw: dict, index: int):
    """An event whose fields did not fit the reader's `Event` record, checked
    here as a dict: a malformed event the tree needs is refused with what is
    wrong; one it does not need is skipped."""
    from kernelmap.trace.reader import Args, Event

    ph = raw.get("ph")
    if ph == "X":
        cat = raw.get("cat", "")
        if not isinstance(cat, str) or cat not in _RELEVANT:
            return None
        try:
            name, ts, dur = _checked(raw)
        except (KeyError, TypeError, ValueError, OverflowError) as err:
            raise ValueError(f"event #{index} ({str(raw.get('name', '?'))[:80]!r}) lacks a usable name/ts/dur: {err}") from None
        a = raw.get("args") or {}
        args = Args(**{attr: a[key] for attr, key in _kept_fields(cat) + tuple((attr, key) for attr, key in _conv_fields() if name in _CONV_OPS) if key in a})
        return Event("X", cat, name, raw.get("pid"), raw.get("tid"), ts, dur, None, args)
    if ph in ("s", "f") and raw.get("cat") == "ac2g":
        try:
            fid, pid, tid = _id(raw.get("id")), _id(raw.get("pid")), _id(raw.get("tid"))
            fts = _finite(raw.get("ts", 0.0), "ts")
        except (TypeError, ValueError, OverflowError) as err:
            raise ValueError(f"flow event #{index} is unusable: {err}") from None
        return Event(ph, "ac2g", None, pid, tid, fts, None, fid, None)
    if ph == "M" and raw.get("name") in ("thread_name", "process_name"):
        try:
            pid, tid = _id(raw.get("pid")), _id(raw.get("tid"))
        except TypeError:
            return None  # a name for a thread no event can name
        a = raw.get("args")
        return Event("M", None, raw["name"], pid, tid, args=Args(name=a.get("name", "") if isinstance(a, dict) else ""))
    return None


def _conv_fields() -> tuple[tuple[str, str], ...]:
    return (("input_strides", "Input Strides"), ("concrete_inputs", "Concrete Inputs"))


def collect(events: Iterable[Any], python_origin=None) -> Collected:
    """One streaming pass: keep the events the tree needs, as small nodes.
    `events` are the reader's `Event` / `Loose` records (`read_events`), or dicts."""
    from kernelmap.trace.reader import Loose

    c = Collected()
    intern: dict[str, str] = {}
    shapes: dict[tuple, tuple] = {}
    seen: dict[tuple[str, str], tuple[str, str, Location | None]] = {}
    kept = {cat: _kept_fields(cat) for cat in _RELEVANT}
    conv = _conv_fields()
    shaped = ("Input Dims", "Input type", "grid", "block")
    threads = c.threads
    for index, e in enumerate(events):
        c.events += 1
        t = type(e)
        if t is Loose or t is dict:
            e = _loose(e.raw if t is Loose else e, index)
            if e is None:
                c.skipped += 1
                continue
        ph = e.ph
        if ph == "X":
            cat = e.cat
            if cat not in _RELEVANT:
                c.skipped += 1
                continue
            name, ts, dur = e.name, e.ts, e.dur
            if dur is None:
                dur = 0.0
            # one comparison each refuses NaN, infinities (1e400 reads as inf) and negative durations
            if type(name) is not str or ts is None or not (-_FINITE < ts < _FINITE) or not (0 <= dur < _FINITE):
                what = ("name is not a string" if type(name) is not str else "ts is missing" if ts is None
                        else f"ts {ts} is not a finite number" if not (-_FINITE < ts < _FINITE)
                        else f"negative duration {dur}" if dur < 0 else f"duration {dur} is not a finite number")
                raise ValueError(f"event #{index} ({sanitize(str(name if name is not None else '?')[:80])!r}) lacks a usable name/ts/dur: {what}")
            interned = intern.get(name)
            if interned is None:  # once per distinct name
                interned = intern[name] = _encodable(name)
            name = interned
            a = e.args
            args: dict[str, Any] = {}
            if a is not None:
                for attr, key in kept[cat]:
                    v = getattr(a, attr)
                    if v is not None:
                        args[key] = v
                if name in _CONV_OPS:
                    for attr, key in conv:
                        v = getattr(a, attr)
                        if v is not None:
                            args[key] = v
                for k in shaped:
                    v = args.get(k)
                    if v is None:
                        continue
                    if type(v) is list:  # from a dict event; the reader's records hold tuples already
                        v = tuple(tuple(x) if isinstance(x, list) else x for x in v)
                    if type(v) is tuple:  # repeated shapes and types are stored once
                        try:
                            args[k] = shapes.setdefault(v, v)
                        except TypeError:  # a list two levels down: kept as it is
                            args[k] = v
            described = seen.get((name, cat))
            if described is None:  # once per distinct name: kind, display name, location
                kind = classify(name, cat)
                location = _python_location(name, python_origin) if kind == "python" else None
                described = seen[(name, cat)] = (kind, display_name(name, kind), location)
            kind, display, location = described
            node = Node(display, kind, ts, dur, cat, args or _NO_ARGS, index=index, location=location)
            if kind in ("python", "module", "builtin"):
                node.attrs["frame"] = name
            if cat in DEVICE_CATEGORIES:
                node.attrs["pid"], node.attrs["tid"] = e.pid, e.tid
                c.device.append(node)
            else:
                key = (e.pid, e.tid)
                lst = threads.get(key)
                if lst is None:
                    lst = threads[key] = []
                lst.append(node)
        elif (ph == "s" or ph == "f") and e.cat == "ac2g":
            fid = e.id
            if fid is not None and not isinstance(fid, (int, str)):
                raise ValueError(f"flow event #{index} is unusable: an id is a {type(fid).__name__}, not an int or a string")
            target = c.flow_starts if ph == "s" else c.flow_ends
            target[fid] = (e.pid, e.tid, e.ts if e.ts is not None else 0.0)
        elif ph == "M":
            if e.name == "thread_name":
                c.thread_names[(e.pid, e.tid)] = _encodable(e.args.name) if e.args is not None and isinstance(e.args.name, str) else ""
            elif e.name == "process_name":
                c.process_names[e.pid] = _encodable(e.args.name) if e.args is not None and isinstance(e.args.name, str) else ""
        else:
            c.skipped += 1
    return c


_NO_ARGS: dict[str, Any] = {}  # shared by events with no kept args: never written to
_FINITE = 1e300  # µs: far beyond any real trace, and no NaN or infinity compares below it


def _encodable(text: str) -> str:
    """`text` as UTF-8 can write it: a lone surrogate (`\\ud800` in the JSON)
    becomes its escape, not an error when the name is printed or saved."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


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
            parent = node.parent = stack[-1]
            if parent.children:
                parent.children.append(node)
            else:
                parent.children = [node]
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
        if launch.children:
            launch.children.append(dev)
        else:
            launch.children = [dev]
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
        if not n.children:
            continue
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
        n.children = new_children or ()
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
        root.children = [*root.children, thread]
    if orphans:
        notes.append(f"{len(orphans)} device events could not be joined to a launch (no correlation id or flow)")
        unlinked = Node("device events without a launch", "thread", children=orphans)
        unlinked.parent = root
        root.children = [*root.children, unlinked]
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
        if isinstance(seq, (int, str)) and n.kind == "op":  # a list or an object is no sequence number
            forward[seq] = n.name  # pre-order: the innermost op with the number recorded the node
    for n in nodes:
        if n.kind == "autograd" and isinstance(n.args.get("Sequence number"), (int, str)):
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
    checked: set = set()
    while order:
        n = order.pop()
        attrs: Mapping[str, Any] = n.attrs
        if n.kind != "trace" or n.dur:
            n.attrs.setdefault("duration_us", round(n.dur, 3))
        if n.kind in ("gpu_kernel", "gpu_memcpy", "gpu_memset"):
            n.attrs.setdefault("start_us", n.ts)  # device order: collectives are matched across ranks by it
        if n.index >= 0:
            n.attrs["event"] = n.index
        if n.shared is not None:
            attrs = Attrs(n.attrs, n.shared)
        frozen = _call_node(n.name, n.kind, n.location, tuple(done.pop(id(ch)) for ch in n.children), attrs, checked)
        for ch in n.children:
            ch.parent = None
        n.children = ()
        n.args = _NO_ARGS
        n.shared = None
        done[id(n)] = frozen
    assert frozen is not None
    return frozen


_KINDS = {k.value: k for k in NodeKind}
_new = object.__new__
_set = object.__setattr__


def _call_node(name: str, kind: str, location, children: tuple, attrs: Mapping[str, Any], checked: set) -> CallNode:
    """CallNode(name, kind, location, None, None, children, attrs), its facts
    checked against model.FACTS once per distinct set of keys (and once per
    shared dict) instead of once per node: a trace has millions of nodes
    and a few dozen shapes of facts."""
    own = attrs.own if isinstance(attrs, Attrs) else attrs
    key = tuple(own)
    if key not in checked:
        undeclared = own.keys() - FACT_NAMES
        if undeclared:
            raise ValueError(f"{name}: undeclared node facts {sorted(undeclared)}; every fact is declared in model.FACTS")
        checked.add(key)
    if isinstance(attrs, Attrs) and id(attrs.shared) not in checked:
        undeclared = {k for k in attrs.shared if k[:1] != "_"} - FACT_NAMES
        if undeclared:
            raise ValueError(f"{name}: undeclared node facts {sorted(undeclared)}; every fact is declared in model.FACTS")
        checked.add(id(attrs.shared))  # shared dicts live as long as the tree: their ids are not reused
    node = _new(CallNode)
    _set(node, "name", name)
    _set(node, "kind", _KINDS[kind])
    _set(node, "location", location)
    _set(node, "via", None)
    _set(node, "condition", None)
    _set(node, "children", children)
    _set(node, "attrs", attrs)
    return node


def to_tree(root: Node, notes: list[str], meta: dict[str, Any]) -> CallTree:
    return CallTree(freeze(root), tuple(notes), meta)
