"""A resolved trace tree -> summaries per operator, per module and per source
file, as plain data with a JSON form and a fixed-width text form.

Times are the profiler's: `total` is an event's duration, `self` its
duration less that of its operator children (host time); device time is the
sum of the GPU kernels it launched, itself or below it. An operator that
calls another counts in both rows, as in `key_averages()`.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any

from kernelmap.model import Answer, CallNode, CallTree, check_document, document

_HOST_KINDS = ("op", "autograd", "annotation")


@dataclass
class OpRow:
    name: str  # aten::conv2d (the profiler's name; `op` is the catalog's overload)
    op: str | None = None
    calls: int = 0
    self_us: float = 0.0
    total_us: float = 0.0
    device_us: float = 0.0
    shapes: Counter = field(default_factory=Counter)  # "[1, 3, 224, 224], [64, 3, 7, 7]" -> calls
    kernels: Counter = field(default_factory=Counter)  # device kernel name -> launches
    kernel_sources: dict = field(default_factory=dict)  # device kernel name -> "file:line" or its library
    dispatch_key: str | None = None
    kernel: str | None = None
    source: str | None = None  # file:line of the kernel, or the catalog entry
    library: str | None = None  # the library its own kernel calls, else the closed one it ends in
    closed: bool = False  # it, or something it calls, runs closed vendor code
    unknown: bool = False

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["shapes"] = [{"shapes": s, "calls": n} for s, n in self.shapes.most_common(5)]
        d["kernels"] = [{"name": k, "launches": n, "source": self.kernel_sources.get(k)} for k, n in self.kernels.most_common()]
        del d["kernel_sources"]
        for k in ("self_us", "total_us", "device_us"):
            d[k] = round(d[k], 3)
        return d

    @staticmethod
    def from_json(d: dict[str, Any]) -> OpRow:
        fields = {k: v for k, v in d.items() if k not in ("shapes", "kernels")}
        row = OpRow(**fields)
        row.shapes = Counter({s["shapes"]: s["calls"] for s in d.get("shapes") or ()})
        row.kernels = Counter({k["name"]: k["launches"] for k in d.get("kernels") or ()})
        return row


@dataclass
class GroupRow:
    """A module type, or a source file: calls and time."""

    name: str
    calls: int = 0
    total_us: float = 0.0
    device_us: float = 0.0
    ops: Counter = field(default_factory=Counter)
    lines: dict = field(default_factory=dict)  # operator or kernel -> its line in this file (source files only)

    def to_json(self) -> dict[str, Any]:
        d = {
            "name": self.name,
            "calls": self.calls,
            "total_us": round(self.total_us, 3),
            "device_us": round(self.device_us, 3),
            "ops": dict(self.ops.most_common(10)),
        }
        if self.lines:
            d["lines"] = {k: self.lines[k] for k in d["ops"] if k in self.lines}
        return d

    @staticmethod
    def from_json(d: dict[str, Any]) -> GroupRow:
        return GroupRow(d["name"], d["calls"], d["total_us"], d["device_us"], Counter(d.get("ops") or {}), dict(d.get("lines") or {}))

    def op_cells(self) -> str:
        """"aten::addmm:400, ...": each operator with its line in this file, where known."""
        return ", ".join(f"{k}:{self.lines[k]}" if k in self.lines else k for k in self.ops.keys())


@dataclass
class GpuTime:
    """How much of the GPU time kernelmap can name: with a source location,
    with a named library, or not at all (those kernels listed by time)."""

    total_us: float = 0.0
    source_us: float = 0.0
    library_us: float = 0.0
    unresolved: Counter = field(default_factory=Counter)  # kernel name -> GPU time

    @property
    def unresolved_us(self) -> float:
        return self.total_us - self.source_us - self.library_us

    def fraction(self, us: float) -> float:
        return us / self.total_us if self.total_us else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "total_us": round(self.total_us, 3),
            "source_us": round(self.source_us, 3),
            "library_us": round(self.library_us, 3),
            "unresolved_us": round(self.unresolved_us, 3),
            "unresolved": [{"name": k, "us": round(v, 3)} for k, v in self.unresolved.most_common()],
        }

    def to_text(self, top: int, width: int) -> str:
        if not self.total_us:
            return ""
        pct = lambda us: f"{100 * self.fraction(us):.1f}%"  # noqa: E731
        out = (f"GPU time {_ms(self.total_us)} ms: {pct(self.source_us)} with a source location, "
               f"{pct(self.library_us)} in a named library, {pct(self.unresolved_us)} unresolved\n")
        if self.unresolved:
            out += _table("Unresolved kernels (by GPU time)", ("dev ms", "kernel"),
                          [(_ms(v), k) for k, v in self.unresolved.most_common(top)], width)
        return out


@dataclass
class Summary:
    ops: list[OpRow]
    modules: list[GroupRow]
    files: list[GroupRow]
    notes: tuple[str, ...] = ()
    gpu: GpuTime = field(default_factory=GpuTime)

    def to_json(self) -> dict[str, Any]:
        return {
            "ops": [r.to_json() for r in self.ops],
            "modules": [r.to_json() for r in self.modules],
            "files": [r.to_json() for r in self.files],
            "notes": list(self.notes),
            "gpu_time": self.gpu.to_json(),
        }

    @staticmethod
    def from_json(d: dict[str, Any]) -> Summary:
        return Summary(
            [OpRow.from_json(r) for r in d.get("ops") or ()],
            [GroupRow.from_json(r) for r in d.get("modules") or ()],
            [GroupRow.from_json(r) for r in d.get("files") or ()],
            tuple(d.get("notes") or ()),
        )

    def to_text(self, top: int = 25, width: int = 120) -> str:
        """Fixed-width tables, longest total time first; long cells end in "…"."""
        out = []
        out.append(_table(
            f"Operators ({len(self.ops)}; top {min(top, len(self.ops))} by total time)",
            ("operator", "calls", "self ms", "total ms", "dev ms", "dispatch key", "kernel", "source", "library", "most common input shapes"),
            [
                (
                    r.name + (" ?" if r.unknown else ""),
                    str(r.calls),
                    _ms(r.self_us),
                    _ms(r.total_us),
                    _ms(r.device_us) if r.device_us else "-",
                    r.dispatch_key or "-",
                    r.kernel or "-",
                    r.source or "-",
                    (r.library + (" (closed)" if r.closed else "")) if r.library else "-",
                    r.shapes.most_common(1)[0][0] if r.shapes else "-",
                )
                for r in self.ops[:top]
            ],
            width,
            limits={0: 30, 5: 25, 6: 36, 7: 44, 8: 16},
            left_cut={7},
        ))
        out.append(_table(
            f"Modules ({len(self.modules)}; time includes nested modules)",
            ("module", "calls", "total ms", "dev ms", "operators called directly"),
            [(r.name, str(r.calls), _ms(r.total_us), _ms(r.device_us) if r.device_us else "-", ", ".join(r.ops.keys()) or "-") for r in self.modules[:top]],
            width,
        ))
        out.append(_table(
            f"Source files ({len(self.files)}; kernel sources, else the registration that serves the op)",
            ("file", "calls", "self ms", "dev ms", "operators / kernels"),
            [(r.name, str(r.calls), _ms(r.total_us), _ms(r.device_us) if r.device_us else "-", r.op_cells()) for r in self.files[:top]],
            width,
            limits={0: 60},
            left_cut={0},
        ))
        kernel_rows = [(r.name, k, r.kernel_sources.get(k) or "-") for r in self.ops[:top] for k in r.kernels]
        if kernel_rows:
            out.append(_table("Kernels of each operator (functor or kernel source, else library)", ("operator", "source", "kernel"),
                              [(op, src, k) for op, k, src in kernel_rows], width, limits={0: 30, 1: 60}, left_cut={1}))
        gpu = self.gpu.to_text(top, width)
        if gpu:
            out.append(gpu)
        unknown = [r.name for r in self.ops if r.unknown]
        if unknown:
            out.append(f"? not in the installed torch's catalog: {', '.join(unknown)}\n")
        return "\n".join(out)


def _ms(us: float) -> str:
    return f"{us / 1000:.3f}"


def _table(title: str, header: tuple[str, ...], rows: list[tuple[str, ...]], width: int, limits: dict[int, int] | None = None,
           left_cut: set[int] | frozenset[int] = frozenset()) -> str:
    """A fixed-width table; a long cell ends in "…", or, in the `left_cut`
    columns (file:line), starts with it, so that the file name and line stay."""
    cols = list(zip(header, *rows)) if rows else [(h,) for h in header]
    widths = [max(len(c) for c in col) for col in cols]
    for i, limit in (limits or {}).items():
        widths[i] = min(widths[i], max(limit, len(header[i])))
    # The last column takes what is left of the width.
    fixed = sum(widths[:-1]) + 2 * (len(widths) - 1)
    widths[-1] = max(10, min(widths[-1], width - fixed))
    numeric = {i for i, h in enumerate(header) if h in ("calls", "self ms", "total ms", "dev ms")}

    def line(cells):
        parts = []
        for i, (c, w) in enumerate(zip(cells, widths)):
            if len(c) > w:
                c = "…" + c[len(c) - w + 1:] if i in left_cut else c[: w - 1] + "…"
            parts.append(c.rjust(w) if i in numeric else c.ljust(w))
        return "  ".join(parts).rstrip()

    lines = [title, line(header), "  ".join("-" * w for w in widths)]
    lines += [line(r) for r in rows]
    return "\n".join(lines) + "\n"


def _shape_text(shapes: Any) -> str:
    if not shapes:
        return ""
    return ", ".join(str(list(s)) for s in shapes if isinstance(s, (list, tuple)) and s)


_DEVICE_KINDS = frozenset({"gpu_kernel", "gpu_memcpy", "gpu_memset"})


def summarize(tree: CallTree) -> Summary:
    """Aggregate the resolved tree (explicit-stack walks, no recursion)."""
    # Pre-order (children in order), then device time below each node post-order.
    nodes: list[CallNode] = []
    stack = [tree.root]
    while stack:
        n = stack.pop()
        nodes.append(n)
        if n.children:
            stack.extend(reversed(n.children))
    # Device time below each node, and the closed library a call ends in,
    # itself or anywhere below it (a conv2d whose cudnn_convolution runs cuDNN
    # kernels ends in cuDNN): post-order, kept only where there is some.
    device: dict[int, float] = {}
    closed_below: dict[int, str] = {}
    for n in reversed(nodes):
        a = n.attrs
        own = a.get("duration_us", 0.0) if n.kind in _DEVICE_KINDS else 0.0
        lib = a.get("library") if a.get("closed") and a.get("library") != "CUDA runtime" else None
        children = n.children
        if children:
            own += sum([device.get(id(c), 0.0) for c in children])
            if not lib:
                lib = next((closed_below[id(c)] for c in children if id(c) in closed_below), None)
        if own:
            device[id(n)] = own
        if lib:
            closed_below[id(n)] = lib

    ops: dict[str, OpRow] = {}
    modules: dict[str, GroupRow] = {}
    files: dict[str, GroupRow] = defaultdict(lambda: GroupRow(""))
    gpu = GpuTime()
    shape_texts: dict[Any, str] = {}
    for n in nodes:
        kind = n.kind
        if kind not in _SUMMED_KINDS:
            continue
        dur = float(n.attrs.get("duration_us", 0.0))
        if kind == "op" or kind == "autograd":
            row = ops.get(n.name)
            if row is None:
                row = ops[n.name] = OpRow(n.name)
            a = n.attrs
            row.calls += 1
            row.total_us += dur
            row.self_us += _self_us(n)
            row.device_us += device.get(id(n), 0.0)
            shapes = a.get("input_shapes")
            try:
                shape = shape_texts[shapes]
            except KeyError:
                shape = shape_texts[shapes] = _shape_text(shapes)
            except TypeError:  # unhashable (a tree read back from JSON)
                shape = _shape_text(shapes)
            if shape:
                row.shapes[shape] += 1
            row.op = row.op or a.get("op")
            row.dispatch_key = row.dispatch_key or a.get("dispatch_key")
            row.kernel = row.kernel or a.get("kernel")
            row.source = row.source or a.get("source") or a.get("yaml")
            if a.get("library"):
                row.library = a["library"]
                row.closed = row.closed or bool(a.get("closed"))
            row.unknown = row.unknown or bool(a.get("unknown")) and n.name.startswith("aten::")
            for k in _kernels_below(n):
                row.kernels[k.name] += 1
                where = k.attrs.get("source") or k.attrs.get("library")
                if where:
                    row.kernel_sources[k.name] = where
            below = closed_below.get(id(n))
            if below:
                row.closed = True
                row.library = row.library or below
            src = a.get("source")
            key = src.rsplit(":", 1)[0] if src else None
            if key is None and a.get("registered_at"):
                key = a["registered_at"].rsplit(":", 1)[0]
            if key:
                f = files[key]
                f.name = key
                f.calls += 1
                f.total_us += _self_us(n)
                f.ops[n.name] += 1
                line = (src or a.get("registered_at") or "").rsplit(":", 1)[-1]
                if line.isdigit():
                    f.lines.setdefault(n.name, int(line))
        elif n.kind == "module":
            mtype = n.name.rsplit("_", 1)[0]
            g = modules.setdefault(mtype, GroupRow(mtype))
            g.calls += 1
            g.total_us += dur
            g.device_us += device.get(id(n), 0.0)
            for c in _ops_directly_below(n):
                g.ops[c] += 1
        if n.kind in ("gpu_kernel", "gpu_memcpy", "gpu_memset"):
            gpu.total_us += dur
            if n.attrs.get("source"):
                gpu.source_us += dur
            elif n.attrs.get("library"):
                gpu.library_us += dur
            else:
                gpu.unresolved[n.name] += dur
        if n.kind == "gpu_kernel" and n.attrs.get("source_file"):
            f = files[n.attrs["source_file"]]
            f.name = n.attrs["source_file"]
            f.calls += 1
            f.device_us += dur
            f.ops[n.attrs.get("kernel") or n.name] += 1
            line = str(n.attrs.get("source") or "").rsplit(":", 1)[-1]
            if line.isdigit():
                f.lines.setdefault(n.attrs.get("kernel") or n.name, int(line))
    return Summary(
        ops=sorted(ops.values(), key=lambda r: (-r.total_us, r.name)),
        modules=sorted(modules.values(), key=lambda r: (-r.total_us, r.name)),
        files=sorted(files.values(), key=lambda r: (-(r.total_us + r.device_us), r.name)),
        notes=tree.notes,
        gpu=gpu,
    )


_SUMMED_KINDS = frozenset({"op", "autograd", "module", "gpu_kernel", "gpu_memcpy", "gpu_memset"})


def _self_us(n: CallNode) -> float:
    return float(n.attrs.get("duration_us", 0.0)) - sum(float(c.attrs.get("duration_us", 0.0)) for c in n.children if c.kind in _HOST_KINDS)


def _kernels_below(n: CallNode):
    """Device kernels launched by `n` itself (not through a nested op)."""
    stack = list(n.children)
    while stack:
        c = stack.pop()
        if c.kind in ("gpu_kernel", "gpu_memcpy", "gpu_memset"):
            yield c
        elif c.kind == "runtime":
            stack.extend(c.children)


def _ops_directly_below(n: CallNode):
    """The outermost operators under a module (through Python frames, not nested modules)."""
    stack = list(n.children)
    while stack:
        c = stack.pop()
        if c.kind == "op":
            yield c.name
        elif c.kind in ("python", "builtin"):
            stack.extend(c.children)


TRACE_VERSION = 2


@dataclass(frozen=True)
class TraceReport(Answer):
    """The answer of `kernelmap trace`: the call tree and the summaries (either may be left out)."""

    tree: CallTree | None
    summary: Summary | None

    DOCUMENT = "trace"

    def to_json(self) -> dict[str, Any]:
        return document(
            self.DOCUMENT,
            TRACE_VERSION,
            tree=self.tree.to_json() if self.tree is not None else None,
            summary=self.summary.to_json() if self.summary is not None else None,
        )

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> TraceReport:
        d = check_document(d, cls.DOCUMENT, TRACE_VERSION)
        return cls(
            CallTree.from_json(d["tree"]) if d.get("tree") else None,
            Summary.from_json(d["summary"]) if d.get("summary") else None,
        )
