"""Chrome/Kineto trace events -> one nested call tree, held as columns.

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

Note [columnar trace]
A trace of a million events would be a million Python objects twice over
(builder nodes, then frozen CallNodes) and gigabytes for a large file. The
events are kept instead as NumPy columns, one row per complete event of a
kept category (`Collected`), and the tree as columns over its nodes in
pre-order (`Table`: kind, label, row, parent, subtree size, start,
duration), so a subtree is a contiguous range and the summary's sums are
array operations. Facts shared by many nodes (a label's kind, display name
and Python location; an operator's resolved facts) are stored once and
referred to by index. CallNodes are made only when the tree itself is asked
for (`to_tree`), one pass in reverse pre-order.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec
import numpy as np
from msgspec import Raw

from kernelmap.model import FACT_NAMES, CallNode, CallTree, Location, NodeKind
from kernelmap.printable import printable

HOST_CATEGORIES = {"python_function": 0, "user_annotation": 1, "cpu_op": 2, "cuda_runtime": 3, "cuda_driver": 3}
CONV_OPS = frozenset({"aten::_convolution", "aten::convolution_backward"})  # what select_conv_backend decides (Note [conv backend] in resolve)
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


class PythonFrames:
    """Where the Python frames of a trace are (`torch/nn/modules/conv.py(552):
    forward`). Frames of torch are located in `origin`, the installed torch.
    A trace names no torch version, and one recorded elsewhere may come from
    another: with `check`, a frame is placed in the installed file only where
    its line lies in a function of its name there, and kept as the trace
    names it otherwise (counted in `mismatched`, for one note)."""

    def __init__(self, origin, check: bool):
        self.origin = origin
        self.check = check
        self.mismatched = 0
        self._spans: dict[str, dict[str, list[tuple[int, int]]] | None] = {}

    def location(self, name: str) -> Location | None:
        m = _PY_FRAME.match(name)
        if not m or m["path"].startswith("/") or m["path"].startswith("<"):
            return None
        path = m["path"]
        line = max(int(m["line"]), 1)
        if not path.startswith("torch/") or self.origin is None:
            return Location(path, line)
        if self.check and not self._in_function(path, line, m["func"]):
            self.mismatched += 1
            return Location(path, line)
        return Location(path, line, origin=self.origin)

    def _in_function(self, path: str, line: int, func: str) -> bool:
        spans = self._spans.get(path, False)
        if spans is False:
            spans = self._spans[path] = _function_spans(self.origin.disk_path(path))
        if spans is None:
            return False
        return any(first <= line <= last for first, last in spans.get(func, ()))


_UNPLACED = PythonFrames(None, check=False)  # no torch to place frames in


def _function_spans(file) -> dict[str, list[tuple[int, int]]] | None:
    """Name -> (first, last) lines of each function, lambda and comprehension
    of a Python file, and of the module itself (`<module>`); None when the file
    cannot be read or parsed. Kept in the cache by the file's path, size and
    mtime: parsing torch/nn/functional.py costs a third of a second, every
    import of a trace that names it."""
    import hashlib
    import json
    import os

    try:
        st = os.stat(file)
        from kernelmap import env

        key = hashlib.sha256(f"{os.path.realpath(file)}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()[:32]
        kept = env.cache_dir() / "trace" / "spans" / f"{key}.json"
    except (OSError, TypeError, ValueError):
        kept = None
    if kept is not None:
        try:
            return {k: [tuple(x) for x in v] for k, v in json.loads(kept.read_text()).items()}
        except (OSError, ValueError, TypeError, AttributeError):
            pass
    spans = _parsed_spans(file)
    if kept is not None and spans is not None:
        try:
            kept.parent.mkdir(parents=True, exist_ok=True)
            tmp = kept.with_name(f"{kept.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(spans))
            os.replace(tmp, kept)
        except OSError:
            pass  # an unwritable cache: parsed again next time
    return spans


def _parsed_spans(file) -> dict[str, list[tuple[int, int]]] | None:
    import ast

    try:
        text = file.read_text(encoding="utf-8") if file is not None else None
        tree = ast.parse(text) if text is not None else None
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError, RecursionError, MemoryError):
        return None
    if tree is None:
        return None
    spans: dict[str, list[tuple[int, int]]] = {"<module>": [(1, max(text.count("\n") + 1, 1))]}
    frames = {ast.Lambda: "<lambda>", ast.ListComp: "<listcomp>", ast.SetComp: "<setcomp>", ast.DictComp: "<dictcomp>",
              ast.GeneratorExp: "<genexpr>"}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            spans.setdefault(node.name, []).append((first, node.end_lineno or node.lineno))
        elif type(node) in frames:
            spans.setdefault(frames[type(node)], []).append((node.lineno, node.end_lineno or node.lineno))
    return spans


# ---------------------------------------------------------------------------
# Codes
# ---------------------------------------------------------------------------

KINDS = ("trace", "thread", "python", "module", "builtin", "op", "autograd", "annotation", "runtime", "gpu_kernel", "gpu_memcpy", "gpu_memset")
KIND = {k: i for i, k in enumerate(KINDS)}
CATEGORIES = ("python_function", "user_annotation", "cpu_op", "cuda_runtime", "cuda_driver", "kernel", "gpu_memcpy", "gpu_memset")
CAT = {c: i for i, c in enumerate(CATEGORIES)}
_FIRST_DEVICE_CAT = CAT["kernel"]
_CAT_RANK = np.array([HOST_CATEGORIES.get(c, 9) for c in CATEGORIES], dtype=np.int8)
_FRAMES = np.array([KIND["python"], KIND["module"], KIND["builtin"]], dtype=np.int8)
DEVICE_KINDS = np.array([KIND["gpu_kernel"], KIND["gpu_memcpy"], KIND["gpu_memset"]], dtype=np.int8)
LINKS = (None, "correlation", "flow", "external id")  # how a device event was hung under its launch

# Note [encoded ids]
# Correlations, external ids, sequence numbers, devices and streams are
# JSON ints or strings. They are kept as int64 columns: an int of the usual
# range as itself, an absent value as NONE, anything else (a string, an int
# beyond the range) as a code below _ODD that stands for the value kept
# aside in `Values.odd`. Equal values get equal codes, so joins compare codes.
NONE = -(1 << 63)
_SOME = NONE + 1  # present, but no int or string (a list where a sequence number belongs)
_ODD = -(1 << 62)


class Values:
    """The values of encoded id columns that are not plain ints (Note [encoded ids])."""

    def __init__(self) -> None:
        self.odd: list[Any] = []
        self._codes: dict[Any, int] = {}

    def _code(self, v: Any) -> int:
        if v is None:
            return NONE
        if not isinstance(v, (int, str)):
            return _SOME
        key = (str if isinstance(v, str) else int, v)  # "5" and 5 stay apart
        code = self._codes.get(key)
        if code is None:
            code = self._codes[key] = NONE + 2 + len(self.odd)
            self.odd.append(v)
        return code

    def encode(self, values: list[Any]) -> np.ndarray:
        if values and values[0] is None:  # a column most events of a category lack: counted by identity, no failed conversion
            absent = values.count(None)
            if absent == len(values):
                return np.full(len(values), NONE, dtype=np.int64)
        try:  # the common case: every value an int
            out = np.array(values, dtype=np.int64)
        except (TypeError, ValueError, OverflowError):
            try:  # the next most common: ints, some absent (an arg one category of events has and another not)
                if None not in values:
                    raise TypeError
                out = np.array([NONE if v is None else v for v in values], dtype=np.int64)
            except (TypeError, ValueError, OverflowError):
                code = self._code  # bools read as ints, as numpy reads them (and a dict: True == 1)
                out = np.array([v if isinstance(v, int) and _ODD < v < -_ODD else code(v) for v in values], dtype=np.int64)
        if len(out) and out.min() < _ODD:
            for i in np.flatnonzero((out < _ODD) & (out > _SOME)).tolist():  # an int that falls among the codes: kept aside too
                if isinstance(values[i], int):
                    out[i] = self._code(values[i])
        return out

    def decode(self, code: int) -> Any:
        """The value a code stands for; None for none, or for one of no usable type."""
        if code >= _ODD:
            return int(code)
        if code == NONE or code == _SOME:
            return None
        return self.odd[code - NONE - 2]


def usable(codes: np.ndarray) -> np.ndarray:
    """Which codes stand for an int or a string."""
    return (codes != NONE) & (codes != _SOME)


def combine(*columns: np.ndarray) -> np.ndarray:
    """One non-negative int64 key per row of equal-length int columns: equal rows, equal keys."""
    key = np.zeros(len(columns[0]), dtype=np.int64)
    span = 1
    for col in columns:
        col = col.astype(np.int64) - (int(col.min()) if len(col) else 0)
        width = int(col.max()) + 1 if len(col) else 1
        if span * width >= 1 << 62:  # too wide to multiply out: number the distinct keys so far
            key = np.unique(key, return_inverse=True)[1].reshape(-1).astype(np.int64)
            span = int(key.max()) + 1 if len(key) else 1
            if span * width >= 1 << 62:
                col = np.unique(col, return_inverse=True)[1].reshape(-1).astype(np.int64)
                width = int(col.max()) + 1 if len(col) else 1
        key = key * width + col
        span *= width
    return key


def climb(nodes: np.ndarray, kind: np.ndarray, parent: np.ndarray, through) -> np.ndarray:
    """Per node of `nodes`, its nearest ancestor whose kind is not in `through` (-1: none)."""
    passing = np.isin(kind, list(through))
    above = parent[nodes].astype(np.int64)
    climbing = np.flatnonzero(above >= 0)
    while len(climbing):
        climbing = climbing[passing[above[climbing]]]
        above[climbing] = parent[above[climbing]]
        climbing = climbing[above[climbing] >= 0]
    return above


def first_seen(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct keys (non-negative) in order of first appearance: (the
    position of each one's first appearance, how often each appears, and per
    position the number of its key in that order). Without sorting the keys
    where they are dense."""
    n = len(keys)
    if not n:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty
    top = int(keys.max()) + 1
    if top <= 4 * n + 1024:
        first = np.full(top, n, dtype=np.int64)
        np.minimum.at(first, keys, np.arange(n, dtype=np.int64))
        distinct = np.flatnonzero(first < n)
    else:
        distinct, at = np.unique(keys, return_index=True)
        first = np.zeros(0, dtype=np.int64)
        first_of = at
    firsts = first[distinct] if len(first) else first_of
    order = np.argsort(firsts, kind="stable")
    if len(first):
        rank = np.empty(top, dtype=np.int64)
        rank[distinct[order]] = np.arange(len(order))
        inverse = rank[keys]
    else:
        inverse = np.searchsorted(distinct, keys)
        rank = np.empty(len(order), dtype=np.int64)
        rank[order] = np.arange(len(order))
        inverse = rank[inverse]
    return firsts[order], np.bincount(inverse, minlength=len(order)), inverse


@dataclass
class Labels:
    """What a trace event's (name, category) pair is, once per distinct pair:
    its kind, the name it shows, its Python location and its raw name."""

    raw: list[str] = field(default_factory=list)
    kind: list[int] = field(default_factory=list)
    display: list[str] = field(default_factory=list)
    location: list[Location | None] = field(default_factory=list)
    ids: dict[tuple[Any, Any], int] = field(default_factory=dict)

    def add(self, raw: str, kind: str, display: str, location: Location | None = None) -> int:
        self.raw.append(raw)
        self.kind.append(KIND[kind])
        self.display.append(display)
        self.location.append(location)
        return len(self.raw) - 1


class Pool:
    """Shapes, dtype lists, grids and blocks: each distinct one stored once.
    The reader hands them over as raw JSON (msgspec.Raw), interned by their
    text and decoded once; a dict event's are Python values."""

    def __init__(self) -> None:
        self.items: list[Any] = []
        self._ids: dict[Any, int] = {}
        self._texts: dict[Any, dict[bytes, int]] = {}

    def encode(self, values: list[Any], raw: bool, check=None) -> np.ndarray:
        """Ids of `values` (-1 for none); `raw`: they are raw JSON or None, no
        Python values. `check(value)` says whether a value has the type its
        column holds (a list of shapes, of dtype names): one that has not is
        kept as none, as if the trace had not recorded it."""
        seen = self._texts.setdefault(check, {})  # a text's id per check: "[1, 1]" is a grid, but no list of dtype names
        texts = seen.get
        add = self._add if check is None else (lambda v: self._add(v) if check(v) else -2)
        try:  # the common case: raw JSON only (bytes(None) raises)
            if not raw:
                raise TypeError
            out = list(map(texts, map(bytes, values)))
        except TypeError:  # absent values, or a dict event's Python values
            out = [texts(bytes(v)) if type(v) is Raw else (-2 if v is None else add(v)) for v in values]
        if None in out:
            for i, x in enumerate(out):  # first sightings of a text
                if x is None:
                    text = bytes(values[i])
                    out[i] = seen[text] = add(msgspec.json.decode(text))
        codes = np.array(out, dtype=np.int32)
        codes[codes < -1] = -1
        return codes

    def _add(self, v: Any) -> int:
        if v is None:
            return -2
        if type(v) is list:  # arrays one level down are tuples too: shapes are hashable
            v = tuple(tuple(x) if isinstance(x, list) else x for x in v)
        try:
            i = self._ids.get(v)
        except TypeError:  # a list two levels down: kept as it is
            self.items.append(v)
            return len(self.items) - 1
        if i is None:
            i = self._ids[v] = len(self.items)
            self.items.append(v)
        return i

    def get(self, i: int) -> Any:
        return None if i < 0 else self.items[i]


def plain(value: Any) -> Any:
    """A value of the reader's records as Python data (raw JSON decoded)."""
    return msgspec.json.decode(bytes(value)) if type(value) is Raw else value


# ---------------------------------------------------------------------------
# One pass over the events: columns
# ---------------------------------------------------------------------------


@dataclass
class Collected:
    """The complete events of the kept categories as columns, in file order
    (one row each), flow endpoints, thread names (Note [columnar trace])."""

    labels: Labels = field(default_factory=Labels)
    values: Values = field(default_factory=Values)
    pool: Pool = field(default_factory=Pool)
    threads: list[tuple[Any, Any]] = field(default_factory=list)  # thread id -> (pid, tid)
    thread_ids: dict[tuple[Any, Any], int] = field(default_factory=dict)
    thread_names: dict[tuple[Any, Any], str] = field(default_factory=dict)
    process_names: dict[Any, str] = field(default_factory=dict)
    conv: dict[int, dict[str, Any]] = field(default_factory=dict)  # row -> the args a convolution keeps besides the columns
    columns: dict[str, np.ndarray] = field(default_factory=dict)
    flows: dict[str, np.ndarray] = field(default_factory=dict)
    events: int = 0
    skipped: int = 0
    device_count: int = 0

    def __getattr__(self, name: str) -> np.ndarray:
        try:
            return self.__dict__["columns"][name]
        except KeyError:
            raise AttributeError(name) from None

    def thread_id(self, key: tuple[Any, Any]) -> int:
        i = self.thread_ids.get(key)
        if i is None:
            i = self.thread_ids[key] = len(self.threads)
            self.threads.append(key)
        return i


_ROW_COLUMNS = {  # name -> dtype
    "label": np.int32, "cat": np.int8, "thread": np.int32, "ts": np.float64, "dur": np.float64, "event": np.int64,
    "corr": np.int64, "ext": np.int64, "seq": np.int64, "dims": np.int32, "types": np.int32,
    "gpu": np.int64, "stream": np.int64, "grid": np.int32, "block": np.int32, "rf": np.int64,
}
_EMPTY = {"corr": NONE, "ext": NONE, "seq": NONE, "gpu": NONE, "stream": NONE, "dims": -1, "types": -1, "grid": -1, "block": -1, "rf": NONE}
# Which args each category keeps, as (column, Args attribute): the rest (Ev
# Idx, Python ids...) is never stored.
_RUNTIME_ARGS = (("corr", "correlation"), ("ext", "external_id"))
_COPY_ARGS = (*_RUNTIME_ARGS, ("gpu", "device"), ("stream", "stream"))
_KEPT_ARGS = {
    "cpu_op": (("ext", "external_id"), ("seq", "sequence_number"), ("dims", "input_dims"), ("types", "input_type"), ("rf", "record_function_id")),
    "cuda_runtime": _RUNTIME_ARGS,
    "cuda_driver": _RUNTIME_ARGS,
    "kernel": (*_COPY_ARGS, ("grid", "grid"), ("block", "block")),
    "gpu_memcpy": _COPY_ARGS,
    "gpu_memset": _COPY_ARGS,
}
# Convolutions keep what select_conv_backend needs besides (Note [conv backend] in resolve).
_CONV_ARGS = (("Input Strides", "input_strides"), ("Concrete Inputs", "concrete_inputs"))
_POOLED = frozenset({"dims", "types", "grid", "block"})


def _is_list(v: Any) -> bool:
    return type(v) is list


def _is_names(v: Any) -> bool:
    return type(v) is list and all(type(x) is str for x in v)


# What a pooled column's values must be; any other value is read as not recorded
# (`"Input type": 5`, `"Input Dims": true`).
_POOL_CHECKS = {"dims": _is_list, "types": _is_names, "grid": _is_list, "block": _is_list}


def collect(batches: Iterable[list[Any]], python_frames: PythonFrames | None = None) -> Collected:
    """One streaming pass: keep the events the tree needs, as columns.
    `batches` are the reader's windows (`read_batches`): lists of `Event`
    records, or of `Event` and `Loose` records (or dicts) in any other sequence."""
    from kernelmap.trace.reader import Args, Event

    c = Collected()
    chunks = _Blocks(_ROW_COLUMNS)
    flow_chunks: dict[str, list[np.ndarray]] = {k: [] for k in ("id", "thread", "ts", "end")}
    empty_args = Args()
    conv_labels: set[int] = set()
    for batch in batches:
        base = c.events
        c.events += len(batch)
        raw = type(batch) is list
        if not raw:  # the reader's slow path: records that did not fit `Event` among them
            batch = [e if type(e) is Event else _loose(e if type(e) is dict else e.raw, base + i) or _SKIP for i, e in enumerate(batch)]
        # Note [columns from records]: list comprehensions with plain attribute
        # access (specialised by the interpreter) are the fastest way through a
        # window, three times faster than map(attrgetter(...)).
        xi = [i for i, e in enumerate(batch) if e.ph == "X" and e.cat in CAT]
        if len(xi) < len(batch):  # flows, thread names, and what is skipped
            fi = [i for i, e in enumerate(batch) if e.cat == "ac2g" and (e.ph == "s" or e.ph == "f")]
            names = [e for e in batch if e.ph == "M"]
            for e in names:
                _name_thread(c, e)
            c.skipped += len(batch) - len(xi) - len(fi) - len(names)
            if fi:
                _collect_flows(c, [batch[i] for i in fi], [base + i for i in fi], flow_chunks)
        if not xi:
            continue
        xs = [batch[i] for i in xi]
        rows = _collect_rows(c, xs, xi, base, python_frames, conv_labels)
        args = [e.args for e in xs]
        cats = rows["cat"]
        n_before = chunks.rows
        for cat, fields in _KEPT_ARGS.items():
            where = np.flatnonzero(cats == CAT[cat])
            if not len(where):
                continue
            selected = list(map(args.__getitem__, where.tolist()))
            if None in selected:
                selected = [a or empty_args for a in selected]
            for column, attr in fields:
                values = _ARG_COLUMNS[attr](selected)
                encoded = c.pool.encode(values, raw, _POOL_CHECKS[column]) if column in _POOLED else c.values.encode(values)
                rows[column][where] = encoded
        if conv_labels:
            for i in np.flatnonzero(np.isin(rows["label"], list(conv_labels))).tolist():
                a = args[i]
                values = ((key, plain(getattr(a, attr, None))) for key, attr in _CONV_ARGS)
                kept = {k: v for k, v in values if v is not None}
                if kept:
                    c.conv[n_before + i] = kept
        chunks.add(rows)
        del rows
    c.columns = chunks.columns()
    c.flows = {k: np.concatenate(v) if v else np.zeros(0) for k, v in flow_chunks.items()}
    return c


_BLOCK = 1 << 18  # rows per block of the collected columns


class _Blocks:
    """The collected row columns, filled a window at a time into blocks of
    _BLOCK rows. A window's few thousand rows kept as arrays of their own
    would lie among the window's freed temporaries on the heap, which then
    cannot shrink (a million events: 75 MB held for nothing); a block is one
    allocation of its own, and its pages are taken only as rows are written."""

    def __init__(self, dtypes: dict[str, Any]):
        self.dtypes = dtypes
        self.blocks: dict[str, list[np.ndarray]] = {k: [] for k in dtypes}
        self.rows = 0
        self._fill = _BLOCK  # rows written in the last block

    def add(self, rows: dict[str, np.ndarray]) -> None:
        m = len(next(iter(rows.values())))
        at = 0
        while at < m:
            if self._fill == _BLOCK:
                for k, dtype in self.dtypes.items():
                    self.blocks[k].append(np.empty(_BLOCK, dtype=dtype))
                self._fill = 0
            take = min(m - at, _BLOCK - self._fill)
            for k, v in rows.items():
                self.blocks[k][-1][self._fill : self._fill + take] = v[at : at + take]
            self._fill += take
            at += take
        self.rows += m

    def columns(self) -> dict[str, np.ndarray]:
        """Each column joined, a column at a time (its blocks freed as it is)."""
        out = {}
        for k in list(self.blocks):
            parts = self.blocks.pop(k)
            if parts:
                parts[-1] = parts[-1][: self._fill]
            out[k] = np.concatenate(parts) if len(parts) > 1 else parts[0].copy() if parts else np.zeros(0, dtype=self.dtypes[k])
            del parts
        return out


def _collect_rows(c: Collected, xs: list, xi: list[int], base: int, python_frames: PythonFrames | None,
                  conv_labels: set[int]) -> dict[str, np.ndarray]:
    """The row columns of one window's complete events, checked."""
    n = len(xs)
    names = [e.name for e in xs]
    cats = [e.cat for e in xs]
    ts_a = np.array([e.ts for e in xs], dtype=np.float64)  # None reads as NaN, and is refused as one
    durs = [e.dur for e in xs]
    dur_a = np.array(durs, dtype=np.float64)
    for i in np.flatnonzero(np.isnan(dur_a)).tolist():
        if durs[i] is None:  # no duration: an instant (a NaN stays, and is refused)
            dur_a[i] = 0.0
    bad_time = np.flatnonzero(~(np.abs(ts_a) < _FINITE) | ~((dur_a >= 0) & (dur_a < _FINITE)))
    labels = c.labels
    get = labels.ids.get
    try:
        label = list(map(get, zip(names, cats)))
    except TypeError:  # an unhashable name
        label = [get(k) if isinstance(k[0], str) else -2 for k in zip(names, cats)]
    first_bad = int(bad_time[0]) if len(bad_time) else n
    for i, lab in enumerate(label) if None in label or -2 in label else ():
        if lab is not None and lab >= 0:
            continue
        name = names[i]
        if type(name) is not str:
            first_bad = min(first_bad, i)
            break
        if i > first_bad:
            break
        lab = get((name, cats[i]))
        if lab is None:  # once per distinct name and category: kind, display name, location
            text = _encodable(name)
            kind = classify(text, cats[i])
            location = (python_frames or _UNPLACED).location(text) if kind == "python" else None
            lab = labels.ids[(name, cats[i])] = labels.add(text, kind, display_name(text, kind), location)
            if text in CONV_OPS and cats[i] == "cpu_op":
                conv_labels.add(lab)
        label[i] = lab
    if first_bad < n:
        e = xs[first_bad]
        name, t, d = e.name, e.ts, e.dur if e.dur is not None else 0.0
        what = ("name is not a string" if type(name) is not str else "ts is missing" if t is None
                else f"ts {t} is not a finite number" if not (-_FINITE < t < _FINITE)
                else f"negative duration {d}" if d < 0 else f"duration {d} is not a finite number")
        raise ValueError(f"event #{base + xi[first_bad]} ({printable(str(name if name is not None else '?')[:80])!r}) lacks a usable name/ts/dur: {what}")
    rows = {
        "label": np.array(label, dtype=np.int32),
        "cat": np.array(list(map(CAT.__getitem__, cats)), dtype=np.int8),
        "thread": _thread_ids(c, xs),
        "ts": ts_a,
        "dur": dur_a,
        "event": np.array(xi, dtype=np.int64) + base,
    }
    for k, fill in _EMPTY.items():
        rows[k] = np.full(n, fill, dtype=_ROW_COLUMNS[k])
    return rows


_ID_TYPES = {int, str, type(None)}


def _collect_flows(c: Collected, flows: list, where: list[int], chunks: dict[str, list[np.ndarray]]) -> None:
    ids = [e.id for e in flows]
    if not set(map(type, ids)) <= _ID_TYPES:  # checked one by one only when some id is of another type
        for i, fid in enumerate(ids):
            if fid is not None and not isinstance(fid, (int, str)):
                raise ValueError(f"flow event #{where[i]} is unusable: an id is a {type(fid).__name__}, not an int or a string")
    chunks["id"].append(c.values.encode(ids))
    chunks["thread"].append(_thread_ids(c, flows))
    ts = np.array([0.0 if e.ts is None else e.ts for e in flows], dtype=np.float64)
    chunks["ts"].append(ts)
    chunks["end"].append(np.array([e.ph == "f" for e in flows], dtype=bool))


_ARG_COLUMNS = {  # Note [columns from records]
    "correlation": lambda args: [a.correlation for a in args],
    "external_id": lambda args: [a.external_id for a in args],
    "sequence_number": lambda args: [a.sequence_number for a in args],
    "device": lambda args: [a.device for a in args],
    "stream": lambda args: [a.stream for a in args],
    "grid": lambda args: [a.grid for a in args],
    "block": lambda args: [a.block for a in args],
    "input_dims": lambda args: [a.input_dims for a in args],
    "input_type": lambda args: [a.input_type for a in args],
    "record_function_id": lambda args: [a.record_function_id for a in args],
}


def _thread_ids(c: Collected, events: list) -> np.ndarray:
    """The thread id of each event's (pid, tid): looked up once per distinct
    pair where both are ints (the usual case), else once per event."""
    pids, tids = [e.pid for e in events], [e.tid for e in events]
    try:
        p, t = np.array(pids, dtype=np.int64), np.array(tids, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):  # a string, or an absent id
        p = None
    if p is not None and len(p):
        distinct, first, inverse = np.unique(combine(p, t), return_index=True, return_inverse=True)
        ids = np.array([c.thread_id((pids[i], tids[i])) for i in first.tolist()], dtype=np.int32)
        return ids[inverse.reshape(-1)]
    get = c.thread_ids.get
    ids = [get((e.pid, e.tid)) for e in events]
    if None in ids:
        for i, t in enumerate(ids):
            if t is None:
                ids[i] = c.thread_id((events[i].pid, events[i].tid))
    return np.array(ids, dtype=np.int32)


def _name_thread(c: Collected, e) -> None:
    if e.name == "thread_name":
        c.thread_names[(e.pid, e.tid)] = _encodable(e.args.name) if e.args is not None and isinstance(e.args.name, str) else ""
    elif e.name == "process_name":
        c.process_names[e.pid] = _encodable(e.args.name) if e.args is not None and isinstance(e.args.name, str) else ""


_FINITE = 1e300  # µs: far beyond any real trace, and no NaN or infinity compares below it


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
        for k in ("correlation", "External id", "stream", "device", "Record function id"):
            _id(args.get(k))
    return name, ts, dur


def _loose(raw: dict, index: int):
    """An event whose fields did not fit the reader's `Event` record, checked
    here as a dict: a malformed event the tree needs is refused with what is
    wrong; one it does not need is skipped (None)."""
    from kernelmap.trace.reader import ARG_FIELDS, Args, Event

    ph = raw.get("ph")
    if ph == "X":
        cat = raw.get("cat", "")
        if not isinstance(cat, str) or cat not in CAT:
            return None
        try:
            name, ts, dur = _checked(raw)
        except (KeyError, TypeError, ValueError, OverflowError) as err:
            raise ValueError(f"event #{index} ({printable(str(raw.get('name', '?'))[:80])!r}) lacks a usable name/ts/dur: {err}") from None
        a = raw.get("args") or {}
        kept = [(ARG_FIELDS[attr], attr) for _, attr in _KEPT_ARGS.get(cat, ())] + (list(_CONV_ARGS) if name in CONV_OPS else [])
        args = Args(**{attr: a[key] for key, attr in kept if key in a})
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


class _Skipped:
    ph = cat = name = None


_SKIP = _Skipped()


def _encodable(text: str) -> str:
    """`text` as UTF-8 can write it: a lone surrogate (`\\ud800` in the JSON)
    becomes its escape, not an error when the name is printed or saved."""
    if text.isascii():  # no copy: a name may be hundreds of megabytes
        return text
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


# ---------------------------------------------------------------------------
# The tree, as columns in pre-order
# ---------------------------------------------------------------------------


@dataclass
class Table:
    """The call tree as columns, one entry per node in pre-order (Note
    [columnar trace]): node i's subtree is nodes i .. i + size[i] - 1."""

    c: Collected
    kind: np.ndarray  # int8, KINDS
    label: np.ndarray  # int32, c.labels
    row: np.ndarray  # int64: the node's row in c's columns, -1 for the root and thread nodes
    parent: np.ndarray  # int32, -1 for the root
    size: np.ndarray  # int32
    ts: np.ndarray
    dur: np.ndarray
    linked: np.ndarray  # int8 per node: LINKS, how a device event was joined to its launch
    notes: list[str] = field(default_factory=list)
    threads: dict[int, tuple[Any, Any]] = field(default_factory=dict)  # thread node -> (pid, tid)
    own: dict[int, dict[str, Any]] = field(default_factory=dict)  # node -> facts of its own, set while resolving
    facts: np.ndarray | None = None  # int32 per node: shared[facts[i]] are node i's shared facts (-1: none)
    shared: list[dict[str, Any]] = field(default_factory=list)
    resolved: bool = False
    n_children: np.ndarray | None = None  # int32 per node: its children (kept by the trace store; None: counted when asked)
    children_us: np.ndarray | None = None  # float64 per node: its children's durations summed (kept likewise)

    def __len__(self) -> int:
        return len(self.kind)

    def column(self, name: str, fill: Any, nodes: np.ndarray | None = None) -> np.ndarray:
        """A row column of the collected events, per node (of `nodes`, else of
        all), `fill` for nodes of no event."""
        rows = self.row if nodes is None else self.row[nodes]
        out = np.full(len(rows), fill, dtype=self.c.columns[name].dtype)
        has = rows >= 0
        out[has] = self.c.columns[name][rows[has]]
        return out

    def children(self, i: int) -> Iterator[int]:
        j, end, size = i + 1, i + int(self.size[i]), self.size
        while j < end:
            yield j
            j += int(size[j])


def build(c: Collected, keep_frames: bool = False) -> Table:
    """The whole tree: one child of the root per host thread, plus device
    events no launch could be found for (Note [trace tree shape])."""
    labels = c.labels
    kind_of = np.array(labels.kind, dtype=np.int8) if labels.kind else np.zeros(0, dtype=np.int8)
    n_rows = len(c.ts)
    kind_rows = kind_of[c.label] if n_rows else np.zeros(0, dtype=np.int8)
    host = np.flatnonzero(c.cat < _FIRST_DEVICE_CAT)
    device = np.flatnonzero(c.cat >= _FIRST_DEVICE_CAT)
    c.device_count = len(device)

    # Host events: nested by time per thread, threads by their first event.
    n_threads = len(c.threads)
    tmin = np.full(n_threads, np.inf)
    np.minimum.at(tmin, c.thread[host], c.ts[host])
    first = np.full(n_threads, np.iinfo(np.int64).max)
    np.minimum.at(first, c.thread[host], host)
    thread_rank = np.empty(n_threads, dtype=np.int64)
    thread_rank[np.lexsort((first, tmin))] = np.arange(n_threads)
    order = host[np.lexsort((c.event[host], _CAT_RANK[c.cat[host]], -c.dur[host], c.ts[host], thread_rank[c.thread[host]]))]
    parent0 = _nest(c.ts[order], c.dur[order], thread_rank[c.thread[order]])
    H = len(order)
    pos_of_row = np.full(n_rows, -1, dtype=np.int64)
    pos_of_row[order] = np.arange(H)
    kind_pos = kind_rows[order]

    launch, how = _attach_device(c, host, device, kind_rows, pos_of_row)
    del pos_of_row, host

    # Simplify: drop Python frames that ran no operator, splice out wrapper frames
    # and the autograd engine's duplicate record of a node.
    children_count = np.bincount(parent0[parent0 >= 0], minlength=H) + np.bincount(launch[launch >= 0], minlength=H)
    work = ~np.isin(kind_pos, _FRAMES)
    work[launch[launch >= 0]] = True
    work = _propagate_up(work, parent0)
    label_pos = c.label[order]
    keep = work | keep_frames
    if not keep_frames:
        noise = np.array([bool(_SPLICED_FRAMES.match(raw)) for raw in labels.raw], dtype=bool) if labels.raw else np.zeros(0, bool)
        keep &= ~(np.isin(kind_pos, (KIND["python"], KIND["builtin"])) & noise[label_pos])
    has_parent = parent0 >= 0
    p = np.where(has_parent, parent0, 0)
    display_ids = codes_of(labels.display)[0]
    same_name = display_ids[label_pos] == display_ids[label_pos[p]] if H else np.zeros(0, bool)
    autograd_parent = has_parent & (kind_pos[p] == KIND["autograd"]) & same_name
    duplicate = autograd_parent & (((kind_pos == KIND["autograd"]) & (children_count[p] == 1)) | (kind_pos == KIND["annotation"]))
    keep &= ~duplicate
    up = _effective_parents(parent0, keep)

    # Pre-order: each kept host node, then the device events hung under it (file
    # order). Positions are host positions: a device event's is its launch's.
    # (Arrays are freed as soon as they are used: a million events make each 8 MB.)
    attached = np.flatnonzero(launch >= 0)
    kept = np.flatnonzero(keep).astype(np.int32)
    del keep
    n_kept = len(kept)
    body_pos = np.concatenate([kept, launch[attached].astype(np.int32)])
    body_order = np.lexsort((
        np.concatenate([np.zeros(n_kept, np.int64), c.event[device[attached]]]),
        np.concatenate([np.zeros(n_kept, np.int8), np.ones(len(attached), np.int8)]),
        body_pos,
    ))
    body_row = np.concatenate([order[kept], device[attached]])[body_order]
    body_link = np.concatenate([np.zeros(n_kept, np.int8), how[attached]])[body_order]
    del kept, attached, how
    body_pos = body_pos[body_order]
    is_host = body_order < n_kept
    del body_order
    B = len(body_row)
    body_tid = c.thread[order[body_pos]] if B else np.zeros(0, np.int32)  # a device event: its launch's thread
    del order
    starts = np.flatnonzero(np.diff(body_tid, prepend=-1)) if B else np.zeros(0, np.int64)
    n_thr = len(starts)
    thread_keys = [c.threads[int(body_tid[j])] for j in starts.tolist()]
    del body_tid
    # final index of body element j: j + 1 (root) + the thread nodes at or before it
    thread_of_body = np.zeros(B, dtype=np.int32)
    thread_of_body[starts] = 1
    thread_of_body = np.cumsum(thread_of_body, dtype=np.int32) - 1
    final_body = np.arange(2, B + 2, dtype=np.int32) + thread_of_body
    thread_final = starts + 1 + np.arange(n_thr)
    orphans = device[launch < 0]
    del launch, device
    N = 1 + n_thr + B + (1 + len(orphans) if len(orphans) else 0)

    final_of_pos = np.full(H, -1, dtype=np.int32)
    final_of_pos[body_pos[is_host]] = final_body[is_host]
    parent = np.full(N, -1, dtype=np.int32)
    parent[thread_final] = 0
    # a host node's parent: its nearest kept ancestor, else its thread; a device event's: its launch
    up_or_launch = np.where(is_host, up[body_pos], body_pos)
    del up, body_pos
    parent[final_body] = np.where(up_or_launch >= 0, final_of_pos[np.maximum(up_or_launch, 0)], thread_final[thread_of_body])
    del up_or_launch, final_of_pos
    kind = np.empty(N, dtype=np.int8)
    label = np.empty(N, dtype=np.int32)
    row = np.full(N, -1, dtype=np.int64)
    linked = np.zeros(N, dtype=np.int8)
    kind[0] = KIND["trace"]
    label[0] = labels.add("trace", "trace", "trace")
    kind[thread_final] = KIND["thread"]
    kind[final_body] = kind_rows[body_row]
    label[final_body] = c.label[body_row]
    row[final_body] = body_row
    linked[final_body] = body_link
    del body_link, is_host
    table = Table(c, kind, label, row, parent, np.ones(N, dtype=np.int32), np.zeros(N), np.zeros(N), linked)
    table.ts[final_body] = c.ts[body_row]
    table.dur[final_body] = c.dur[body_row]
    del body_row

    # Thread nodes: named, spanning their top-level nodes.
    top = final_body[parent[final_body] == thread_final[thread_of_body]]
    del final_body, thread_of_body
    top_thread = np.searchsorted(thread_final, top, side="right") - 1
    t_start = np.full(n_thr, np.inf)
    t_end = np.full(n_thr, -np.inf)
    np.minimum.at(t_start, top_thread, table.ts[top])
    np.maximum.at(t_end, top_thread, table.ts[top] + table.dur[top])
    for t, f in enumerate(thread_final.tolist()):
        key = thread_keys[t]
        name = c.thread_names.get(key) or f"thread {key[1]}"
        label[f] = labels.add(name, "thread", name)
        table.threads[f] = key
        table.ts[f] = t_start[t]
        table.dur[f] = t_end[t] - t_start[t]
    if len(orphans):
        g = 1 + n_thr + B
        table.notes.append(f"{len(orphans)} device events could not be joined to a launch (no correlation id or flow)")
        kind[g], parent[g] = KIND["thread"], 0
        label[g] = labels.add("device events without a launch", "thread", "device events without a launch")
        rest = np.arange(g + 1, N)
        parent[rest], kind[rest], label[rest], row[rest] = g, kind_rows[orphans], c.label[orphans], orphans
        table.ts[rest], table.dur[rest] = c.ts[orphans], c.dur[orphans]
    if n_thr:  # the group of device events without a launch starts and ends at 0
        table.ts[0] = min(t_start.min(), 0.0) if len(orphans) else t_start.min()
        ends = table.ts[thread_final] + table.dur[thread_final]
        table.dur[0] = max(ends.max(), 0.0) - table.ts[0] if len(orphans) else ends.max() - table.ts[0]
    table.size = subtree_sizes(parent)
    _link_backward(table)
    for k in ("label", "cat", "ts", "dur"):  # the table holds them per node now
        del c.columns[k]
    return table


def _nest(ts: np.ndarray, dur: np.ndarray, thread: np.ndarray) -> np.ndarray:
    """Parents (positions, -1 at the top) of host events sorted by thread, start,
    longest first: each starts inside the innermost open event of its thread
    (an event with a duration closes _EPS early; one of none starting with its
    parent stays inside it)."""
    parent = np.full(len(ts), -1, dtype=np.int32)
    closes_all = ts + dur - np.where(dur > 0, _EPS, 0.0)
    stack: list[tuple[int, float, float]] = []  # (position, closes at, starts at) of the open events
    current = None
    for lo, hi in _slices(len(ts)):
        ts_l, closes, instant, threads = ts[lo:hi].tolist(), closes_all[lo:hi].tolist(), (dur[lo:hi] == 0).tolist(), thread[lo:hi].tolist()
        out = [-1] * (hi - lo)
        for k, t in enumerate(ts_l):
            if threads[k] != current:
                current = threads[k]
                stack = []
            while stack:
                top = stack[-1]
                if t >= top[1] and not (t == top[2] and instant[k]):
                    stack.pop()
                else:
                    break
            if stack:
                out[k] = stack[-1][0]
            stack.append((k + lo, closes[k], t))
        parent[lo:hi] = out
    return parent


_SLICE = 1 << 16  # rows turned into Python lists at a time (a list of a million ints is 36 MB)


def _slices(n: int, backwards: bool = False, size: int = _SLICE):
    starts = range(0, n, size)
    for lo in reversed(starts) if backwards else starts:
        yield lo, min(lo + size, n)


def _propagate_up(flag: np.ndarray, parent: np.ndarray) -> np.ndarray:
    """`flag` or'ed into every ancestor (parents come before children)."""
    out = flag.tolist()  # True and False: no objects of their own
    for lo, hi in _slices(len(out), backwards=True):
        par = parent[lo:hi].tolist()
        for k in range(hi - 1, lo - 1, -1):
            if out[k]:
                p = par[k - lo]
                if p >= 0:
                    out[p] = True
    return np.array(out, dtype=bool)


def _effective_parents(parent: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """The nearest kept ancestor of each node (-1: none), in pre-order."""
    up = np.full(len(parent), -1, dtype=np.int32)
    kept = keep.tolist()
    spliced = np.flatnonzero(~keep)
    if not len(spliced):
        up[:] = parent
        return up
    for lo, hi in _slices(len(parent)):
        par = parent[lo:hi].tolist()
        out = [-1] * (hi - lo)
        for k, p in enumerate(par):
            if p >= 0:
                out[k] = p if kept[p] else (out[p - lo] if p >= lo else int(up[p]))
        up[lo:hi] = out
    return up


def subtree_sizes(parent: np.ndarray) -> np.ndarray:
    """Subtree sizes from parents in pre-order."""
    size = [1] * len(parent)  # mostly small ints: no objects of their own
    for lo, hi in _slices(len(parent), backwards=True):
        par = parent[lo:hi].tolist()
        for i in range(hi - 1, max(lo, 1) - 1, -1):
            size[par[i - lo]] += size[i]
    return np.array(size, dtype=np.int32)


def codes_of(values: list[Any]) -> tuple[np.ndarray, list[Any]]:
    """Codes of `values` (equal values, equal codes) and the distinct values by code."""
    codes: dict[Any, int] = {}
    out = np.array([codes.setdefault(v, len(codes)) for v in values], dtype=np.int64)
    return out, list(codes)


def _attach_device(c: Collected, host: np.ndarray, device: np.ndarray, kind_rows: np.ndarray, pos_of_row: np.ndarray):
    """The launch (host position) of each device row, -1 when none is found,
    and how it was found (LINKS)."""
    launch = np.full(len(device), -1, dtype=np.int64)
    how = np.zeros(len(device), dtype=np.int8)
    if not len(device):
        return launch, how
    # Hosts in thread order, then file order: a later duplicate wins, as in a dict.
    hosts = host[np.lexsort((c.event[host], c.thread[host]))]
    runtime = hosts[kind_rows[hosts] == KIND["runtime"]]
    has_corr = runtime[c.corr[runtime] != NONE]
    launch[:] = _lookup(c.corr[has_corr], pos_of_row[has_corr], c.corr[device], last=True)
    how[launch >= 0] = 1
    missing = np.flatnonzero(launch < 0)
    if len(missing) and len(c.flows.get("id", ())):
        found = _flow_launches(c, runtime, pos_of_row[runtime], device[missing])
        launch[missing[found >= 0]], how[missing[found >= 0]] = found[found >= 0], 2
        missing = np.flatnonzero(launch < 0)
    if len(missing):
        ops = hosts[(kind_rows[hosts] == KIND["op"]) & (c.ext[hosts] != NONE)]
        found = _lookup(c.ext[ops], pos_of_row[ops], c.ext[device[missing]], last=False)
        launch[missing[found >= 0]], how[missing[found >= 0]] = found[found >= 0], 3
    return launch, how


def _flow_launches(c: Collected, runtime: np.ndarray, positions: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Per device row of `rows`, the position of the runtime call (of
    `runtime`, at `positions`) a flow joins it to (-1: none): a flow's start
    lies where the call starts (thread and time), its end where the device
    event starts; of flows with one id, the last start and the last end
    count, and of flows ending at one place, the one whose id ends last in
    the file's order of ids (as dicts built in file order keep them)."""
    f = c.flows
    starts, ends = np.flatnonzero(~f["end"]), np.flatnonzero(f["end"])
    # Each (thread, start time) one code, the same in all four groups (-0.0 and 0.0 alike, as == has them).
    parts = [(c.thread[runtime], c.ts[runtime]), (f["thread"][starts], f["ts"][starts]), (f["thread"][ends], f["ts"][ends]),
             (c.thread[rows], c.ts[rows])]
    bits = (np.concatenate([ts for _, ts in parts]).astype(np.float64) + 0.0).view(np.int64)
    place = combine(np.concatenate([t for t, _ in parts]).astype(np.int64), np.unique(bits, return_inverse=True)[1].reshape(-1))
    at = np.cumsum([0, *(len(t) for t, _ in parts)])
    runtime_at, start_at, end_at, row_at = (place[at[k] : at[k + 1]] for k in range(4))
    start_ids, end_ids = f["id"][starts], f["id"][ends]
    fids, first = np.unique(end_ids, return_index=True)
    last = len(end_ids) - 1 - np.unique(end_ids[::-1], return_index=True)[1]
    start = _lookup(start_ids, start_at, fids, last=True, absent=None)
    launch = _lookup(runtime_at, positions, start, last=True)
    joined = np.flatnonzero(launch >= 0)
    joined = joined[np.argsort(first[joined], kind="stable")]  # in the order the ids first end
    return _lookup(end_at[last[joined]], launch[joined], row_at, last=True)


def _lookup(keys: np.ndarray, values: np.ndarray, wanted: np.ndarray, last: bool, absent: int | None = NONE) -> np.ndarray:
    """Per code of `wanted`, the value of the equal key (-1: none, or
    `absent` wanted): of equal keys the last (`last`) or the first, as a
    dict built in their order (or with setdefault) keeps. A sorted join: no
    Python object per event."""
    out = np.full(len(wanted), -1, dtype=np.int64)
    if not len(keys) or not len(wanted):
        return out
    order = np.argsort(keys, kind="stable")
    keys, values = keys[order], values[order]
    del order
    edge = np.ones(len(keys), dtype=bool)  # the kept one of each run of equal keys
    if last:
        edge[:-1] = keys[1:] != keys[:-1]
    else:
        edge[1:] = keys[1:] != keys[:-1]
    keys, values = keys[edge], values[edge]
    at = np.minimum(np.searchsorted(keys, wanted), len(keys) - 1)
    hit = keys[at] == wanted
    if absent is not None:
        hit &= wanted != absent
    out[hit] = values[at[hit]]
    return out


def _link_backward(t: Table) -> None:
    """Name on each autograd node the forward operator that recorded it: the
    forward op carries a sequence number, the node repeats it with the id of
    the forward thread."""
    seq = t.column("seq", NONE)
    good = usable(seq)
    ops = np.flatnonzero(good & (t.kind == KIND["op"]))
    display = t.c.labels.display
    nodes = np.flatnonzero(good & (t.kind == KIND["autograd"]))
    forward = _lookup(seq[ops], t.label[ops].astype(np.int64), seq[nodes], last=True)  # pre-order: the innermost op wins
    for i, fwd in zip(nodes.tolist(), forward.tolist()):
        own = t.own.setdefault(i, {})
        own["sequence_nr"] = t.c.values.decode(int(seq[i]))
        if fwd >= 0 and display[fwd]:
            own["forward_op"] = display[fwd]


# ---------------------------------------------------------------------------
# The frozen tree, on demand
# ---------------------------------------------------------------------------


_THREAD, _TRACE, _OP = KIND["thread"], KIND["trace"], KIND["op"]
_FRAME_KINDS = frozenset(_FRAMES.tolist())
_DEVICE_KIND_SET = frozenset(DEVICE_KINDS.tolist())
_DEVICE_COLUMNS = (("gpu", "gpu"), ("stream", "stream"), ("grid", "grid"), ("block", "block"), ("corr", "correlation"))


def attrs_of(t: Table, nodes: np.ndarray) -> list[Mapping[str, Any]]:
    """The facts of each of `nodes`, as their CallNodes carry them: the
    columns are read for all of them at once, then one dict a node."""
    c = t.c
    kinds, labels, links = t.kind[nodes].tolist(), t.label[nodes].tolist(), t.linked[nodes].tolist()
    durs, starts = t.dur[nodes].tolist(), t.ts[nodes].tolist()
    events = t.column("event", -1, nodes).tolist()
    threads = t.column("thread", -1, nodes).tolist()
    facts = t.facts[nodes].tolist() if t.facts is not None else [-1] * len(nodes)
    dims = t.column("dims", -1, nodes).tolist() if t.resolved else None
    device = None
    if t.resolved:  # resolution adds a device event's own facts too
        device = [t.column(column, -1 if column in _POOLED else NONE, nodes).tolist() for column, _ in _DEVICE_COLUMNS]
    raw, pool, shared, own_of, decode = c.labels.raw, c.pool.items, t.shared, t.own, c.values.decode
    out: list[Mapping[str, Any]] = []
    for j, i in enumerate(nodes.tolist()):
        kind = kinds[j]
        a: dict[str, Any] = {}
        if kind in _DEVICE_KIND_SET:
            a["pid"], a["tid"] = c.threads[threads[j]]
            if links[j]:
                a["linked_by"] = LINKS[links[j]]
        elif kind in _FRAME_KINDS:
            a["frame"] = raw[labels[j]]
        elif kind == _THREAD and i in t.threads:
            a["pid"], a["tid"] = t.threads[i]
        elif kind == _OP and dims is not None and dims[j] >= 0 and pool[dims[j]]:
            a["input_shapes"] = pool[dims[j]]
        own = own_of.get(i)
        if own:
            a.update(own)
        if kind in _DEVICE_KIND_SET:
            if device is not None:
                if facts[j] >= 0:
                    a.update(shared[facts[j]])
                for k, (column, key) in enumerate(_DEVICE_COLUMNS):
                    code = device[k][j]
                    if column in _POOLED:
                        if code >= 0:
                            a[key] = pool[code]
                    elif code != NONE:
                        a[key] = decode(code)
            a["duration_us"] = round(durs[j], 3)
            a["start_us"] = starts[j]
        elif kind != _TRACE or durs[j]:
            a["duration_us"] = round(durs[j], 3)
        if events[j] >= 0:
            a["event"] = events[j]
        out.append(Attrs(a, shared[facts[j]]) if kind == _OP and facts[j] >= 0 else a)
    return out


def kernels_of(t: Table, libraries: tuple[str, ...]) -> list[tuple[float, str, float]]:
    """(start µs, name, duration µs) of each GPU kernel node whose library is one of `libraries`."""
    if t.facts is None:
        return []
    wanted = np.array([f.get("library") in libraries for f in t.shared] + [False], dtype=bool)
    nodes = np.flatnonzero((t.kind == KIND["gpu_kernel"]) & wanted[t.facts])  # facts -1: the last, False
    display = t.c.labels.display
    return [(float(t.ts[i]), display[t.label[i]], round(float(t.dur[i]), 3)) for i in nodes.tolist()]


def to_tree(t: Table, notes: list[str], meta: dict[str, Any]) -> CallTree:
    """The frozen CallNode tree (reverse pre-order with an explicit stack),
    its facts read a slice of nodes at a time."""
    checked: set = set()
    display = t.c.labels.display
    locations = t.c.labels.location
    kinds = t.kind.tolist()
    label = t.label.tolist()
    counts = np.bincount(t.parent[1:], minlength=len(t)).tolist() if len(t) > 1 else [0]
    op = KIND["op"]
    done: list[CallNode] = []
    for lo, hi in _slices(len(t), backwards=True):
        attrs_slice = attrs_of(t, np.arange(lo, hi))
        for i in range(hi - 1, lo - 1, -1):
            n = counts[i]
            if n:
                children = tuple(done[-1 : -n - 1 : -1])
                del done[-n:]
            else:
                children = ()
            attrs = attrs_slice[i - lo]
            location = locations[label[i]]
            if kinds[i] == op and isinstance(attrs, Attrs):
                location = attrs.shared.get("_location")
            done.append(_call_node(display[label[i]], KINDS[kinds[i]], location, children, attrs, checked))
    return CallTree(done[0], tuple(notes), meta)


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
