"""A resolved trace tree -> summaries per operator, per module and per source
file, as plain data with a JSON form and a fixed-width text form.

Times are the profiler's: `total` is an event's duration, `self` its
duration less that of its operator children (host time); device time is the
sum of the GPU kernels it launched, itself or below it. An operator that
calls another counts in both rows, as in `key_averages()`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from kernelmap.model import Answer, CallNode, CallTree, check_document, document
from kernelmap.trace.build import attrs_of, codes_of, subtree_sizes
from kernelmap.trace.codes import climb, combine, first_seen, KIND



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
    kernel_versions: dict = field(default_factory=dict)  # device kernel name -> the version of its "file:line" (Note [versions in a trace])
    dispatch_key: str | None = None  # the runtime key that answered (CPU, CUDA, AutogradCUDA)
    kernel_key: str | None = None  # the alias key its kernel is registered under, where it is one
    kernel: str | None = None
    source: str | None = None  # file:line of the kernel, or the catalog entry
    source_version: str | None = None  # the version `source` is of, where the trace mixes versions (Note [versions in a trace])
    library: str | None = None  # the library its own kernel calls, else the closed one it ends in
    closed: bool = False  # it, or something it calls, runs closed vendor code
    unknown: bool = False

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["shapes"] = [{"shapes": s, "calls": n} for s, n in self.shapes.most_common(5)]
        d["kernels"] = [{"name": k, "launches": n, "source": self.kernel_sources.get(k)} | ({"version": self.kernel_versions[k]} if k in self.kernel_versions else {})
                        for k, n in self.kernels.most_common()]
        del d["kernel_sources"], d["kernel_versions"]
        if d["source_version"] is None:  # said only where the trace mixes versions
            del d["source_version"]
        for k in ("self_us", "total_us", "device_us"):
            d[k] = round(d[k], 3)
        return d

    @staticmethod
    def from_json(d: dict[str, Any]) -> OpRow:
        fields = {k: v for k, v in d.items() if k not in ("shapes", "kernels")}
        row = OpRow(**fields)
        row.shapes = Counter({s["shapes"]: s["calls"] for s in d.get("shapes") or ()})
        row.kernels = Counter({k["name"]: k["launches"] for k in d.get("kernels") or ()})
        row.kernel_sources = {k["name"]: k["source"] for k in d.get("kernels") or () if k.get("source")}
        row.kernel_versions = {k["name"]: k["version"] for k in d.get("kernels") or () if k.get("version")}
        return row

    def at(self, versions: bool) -> str | None:
        """`source`, with its version after it when the trace mixes versions."""
        return _located(self.source, self.source_version if versions else None)

    def kernel_at(self, kernel: str, versions: bool) -> str | None:
        """Where a device kernel's source is (or its library), with its version when the trace mixes versions."""
        return _located(self.kernel_sources.get(kernel), self.kernel_versions.get(kernel) if versions else None)


@dataclass
class GroupRow:
    """A module type, or a source file: calls and time."""

    name: str
    calls: int = 0
    total_us: float = 0.0
    device_us: float = 0.0
    ops: Counter = field(default_factory=Counter)
    lines: dict = field(default_factory=dict)  # operator or kernel -> its line in this file (source files only)
    version: str | None = None  # the version the file is of, where the trace mixes versions (source files only)

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
        if self.version:
            d["version"] = self.version
        return d

    @staticmethod
    def from_json(d: dict[str, Any]) -> GroupRow:
        return GroupRow(d["name"], d["calls"], d["total_us"], d["device_us"], Counter(d.get("ops") or {}), dict(d.get("lines") or {}),
                        d.get("version"))

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
        # The difference of float sums: where every kernel is named it is a rounding
        # error either side of 0, never a negative time ("-0.0% unresolved").
        rest = self.total_us - self.source_us - self.library_us
        return rest if rest > 1e-9 * max(self.total_us, 1.0) else 0.0

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
    versions: dict = field(default_factory=dict)  # {"tree": ..., "installed": ...} where the trace mixes versions (Note [versions in a trace])

    def to_json(self) -> dict[str, Any]:
        return {
            "ops": [r.to_json() for r in self.ops],
            "modules": [r.to_json() for r in self.modules],
            "files": [r.to_json() for r in self.files],
            "notes": list(self.notes),
            "gpu_time": self.gpu.to_json(),
        } | ({"versions": dict(self.versions)} if self.versions else {})

    @staticmethod
    def from_json(d: dict[str, Any]) -> Summary:
        return Summary(
            [OpRow.from_json(r) for r in d.get("ops") or ()],
            [GroupRow.from_json(r) for r in d.get("modules") or ()],
            [GroupRow.from_json(r) for r in d.get("files") or ()],
            tuple(d.get("notes") or ()),
            versions=dict(d.get("versions") or {}),
        )

    def to_text(self, top: int = 25, width: int = 120) -> str:
        """Fixed-width tables, longest total time first; long cells end in "…"."""
        out = []
        v = bool(self.versions)
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
                    r.at(v) or "-",
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
            [(_located(r.name, r.version if v else None), str(r.calls), _ms(r.total_us), _ms(r.device_us) if r.device_us else "-", r.op_cells())
             for r in self.files[:top]],
            width,
            limits={0: 60},
            left_cut={0},
        ))
        kernel_rows = [(r.name, k, r.kernel_at(k, v) or "-") for r in self.ops[:top] for k in r.kernels]
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


def _located(where: str | None, version: str | None) -> str | None:
    """A location (or file) as a cell, with `(version)` after it (Note [versions in a trace])."""
    return f"{where} ({version})" if where and version else where


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


# Note [summary from columns]
# The summary is computed from a flat, pre-order view of the tree (`Flat`):
# per node its kind, parent, subtree size, duration and a group, where the
# nodes of one group share their name and every fact the summary reads (all
# calls of one operator with one set of resolved facts). Sums are array
# operations over the nodes; facts are read once per group. Where the
# tables keep an order (shapes, kernels, operators of a file or module, by
# first appearance; "the last library wins"), it is the order of a walk of
# the tree: the first or last node in pre-order, and for the kernels an
# operator launched and the operators a module called directly, the
# reverse pre-order in which those are found below each node.


@dataclass
class Flat:
    """A tree in pre-order, as columns (Note [summary from columns])."""

    kind: np.ndarray  # int8: build.KINDS, -1 for kinds of no trace
    parent: np.ndarray  # int64, -1 for the root
    size: np.ndarray  # int64
    dur: np.ndarray  # float64 µs (0 where none)
    group: np.ndarray  # int32 (int64 from a tree)
    names: list[str]  # per group
    facts: list[Any]  # per group: a Mapping of facts
    shape: np.ndarray  # int32 per node: index into shapes, -1 for none
    shapes: list[str]


def flat_of_tree(tree: CallTree) -> Flat:
    """A CallTree as a Flat view: each node its own group."""

    nodes: list[CallNode] = []
    parents: list[int] = []
    stack: list[tuple[CallNode, int]] = [(tree.root, -1)]
    while stack:
        n, p = stack.pop()
        parents.append(p)
        me = len(nodes)
        nodes.append(n)
        if n.children:
            stack.extend((c, me) for c in reversed(n.children))
    parent = np.array(parents, dtype=np.int64)
    shapes: list[str] = []
    shape = []
    for n in nodes:
        text = _shape_text(n.attrs.get("input_shapes")) if n.kind.value in ("op", "autograd") else ""
        if text:
            shapes.append(text)
        shape.append(len(shapes) - 1 if text else -1)
    return Flat(
        kind=np.array([KIND.get(n.kind.value, -1) for n in nodes], dtype=np.int8),
        parent=parent,
        size=subtree_sizes(parent),
        dur=np.array([float(n.attrs.get("duration_us", 0.0)) for n in nodes], dtype=np.float64),
        group=np.arange(len(nodes), dtype=np.int64),
        names=[n.name for n in nodes],
        facts=[n.attrs for n in nodes],
        shape=np.array(shape, dtype=np.int32),
        shapes=shapes,
    )


def flat_of_table(t) -> Flat:
    """A trace's columns (build.Table) as a Flat view: one group per label and
    set of facts, one per node for the few nodes with facts of their own."""

    n = len(t)
    facts = t.facts if t.facts is not None else np.full(n, -1, dtype=np.int32)
    flagged = getattr(t.own, "library_nodes", None)  # a re-opened trace's: read without decoding every node's facts
    own = flagged() if flagged is not None else [i for i, o in t.own.items() if "library" in o or "closed" in o]
    if own:
        single = np.full(n, -1, dtype=np.int64)
        single[own] = own
        first, _, group = first_seen(combine(t.label, facts, single))
        del single
    else:  # (a column of one value adds nothing to the keys: not made, a million nodes are 8 MB)
        first, _, group = first_seen(combine(t.label, facts))
    group = group.astype(np.int32) if len(first) < 1 << 31 else group  # one per label and facts: half the bytes per node
    display = t.c.labels.display
    shape = np.full(n, -1, dtype=np.int32)
    shapes: list[str] = []
    if t.resolved:
        ops = np.flatnonzero(t.kind == KIND["op"])
        dims = t.c.dims[t.row[ops]]
        seen, _, back = first_seen(dims + 1)
        texts = [_shape_text(t.c.pool.get(int(dims[j]))) for j in seen.tolist()]
        index = np.array([-1 if not text else k for k, text in enumerate(texts)], dtype=np.int64)
        shape[ops] = index[back] if len(seen) else -1
        shapes = texts
    dur = np.round(t.dur, 3)  # the nodes' duration_us
    return Flat(
        kind=t.kind,
        parent=t.parent,
        size=t.size,
        dur=dur,
        group=group,
        names=[display[t.label[i]] for i in first.tolist()],
        facts=attrs_of(t, first),
        shape=shape,
        shapes=shapes,
    )


def summarize(tree: CallTree) -> Summary:
    """Aggregate a resolved call tree (Note [summary from columns])."""
    return _summarize(flat_of_tree(tree), tuple(tree.notes), (tree.meta or {}).get("versions"))


def summarize_table(table, notes: tuple[str, ...], versions: dict | None = None) -> Summary:
    """Aggregate a trace's columns without making its CallNode tree;
    `versions` as the trace's meta holds them (Note [versions in a trace])."""
    return _summarize(flat_of_table(table), tuple(notes), versions)


# Note [versions in a trace]
# A trace resolved against a registered tree that is not the installed
# torch's own commit mixes versions: kernel sources ("source") are the tree's
# lines, while the catalog entry ("yaml") and the registration the live
# dispatcher names ("registered_at") are the installed wheel's. The resolver
# puts both versions in the trace's meta ("versions": {"tree", "installed"});
# the summary then says, on each location it shows, which version it is of
# (Note [versions on locations] in kernelmap.model), and keeps a file of one
# version apart from the same path of the other. A kernel in the user's own
# extension (an absolute path) is of no torch version.


def _fact_version(a, key: str, versions: dict | None) -> str | None:
    """The version of the location under `key` of facts `a`, where the trace mixes versions."""
    if not versions or not a.get(key):
        return None
    if key == "source":
        return None if str(a.get("source_file") or a["source"]).startswith("/") else versions.get("tree")
    return versions.get("installed")


def _first_below(nodes: np.ndarray, size: np.ndarray, marked: np.ndarray) -> np.ndarray:
    """Per node of `nodes`, the first marked node of its subtree in pre-order (-1: none)."""
    marks = np.flatnonzero(marked)
    if not len(marks):
        return np.full(len(nodes), -1, dtype=np.int64)
    at = np.searchsorted(marks, nodes)
    found = marks[np.minimum(at, len(marks) - 1)]
    return np.where((at < len(marks)) & (found < nodes + size[nodes]), found, -1)


def _summarize(f: Flat, notes: tuple[str, ...], versions: dict | None = None) -> Summary:

    n = len(f.kind)
    kind, group, dur = f.kind, f.group, f.dur
    facts, names = f.facts, f.names
    # (Arrays of a value per node are freed as soon as they are used: the
    # summary's temporaries, not the trace's columns, set its peak memory.)
    is_device = np.isin(kind, (KIND["gpu_kernel"], KIND["gpu_memcpy"], KIND["gpu_memset"]))
    is_row = np.isin(kind, (KIND["op"], KIND["autograd"]))
    rows = np.flatnonzero(is_row)
    # Device time below each node, itself included: one running sum, read at the nodes asked for
    # (operators and modules: no array of a value per node besides the sum).
    cs = np.zeros(n + 1)  # (made in place: durations are finite and not negative, so dur * is_device is where(is_device, dur, 0))
    np.multiply(dur, is_device, out=cs[1:])
    np.add.accumulate(cs[1:], out=cs[1:])

    def device(nodes: np.ndarray) -> np.ndarray:
        return cs[nodes + f.size[nodes]] - cs[nodes]
    # The closed library a call ends in, itself or anywhere below it: the first in pre-order.
    closed_lib = [a.get("library") if a.get("closed") and a.get("library") != "CUDA runtime" else None for a in facts]
    has_closed = np.array([bool(x) for x in closed_lib], dtype=bool)
    below_rows = _first_below(rows, f.size, has_closed[group])
    # Self time of each operator row: less its host children's time (summed per row in the
    # children's order, as a sum per node would: the same floats).
    host_child = np.flatnonzero(np.isin(kind, (KIND["op"], KIND["autograd"], KIND["annotation"])) & (f.parent >= 0))
    parents = f.parent[host_child]
    at = np.searchsorted(rows, parents)
    mine = (at < len(rows)) & (rows[np.minimum(at, max(len(rows) - 1, 0))] == parents) if len(rows) else np.zeros(len(at), bool)
    self_us = np.bincount(at[mine], weights=dur[host_child[mine]], minlength=len(rows)).astype(np.float64, copy=False)
    del host_child, parents, at, mine  # (with no host child, bincount counts in ints)
    np.subtract(dur[rows], self_us, out=self_us)  # per row of `rows`
    name_code, distinct_names = codes_of(names)  # per group

    row_name = name_code[group[rows]]
    first, _, row_key = first_seen(row_name)
    ops = {distinct_names[name_code[group[rows[j]]]]: OpRow(distinct_names[name_code[group[rows[j]]]]) for j in first.tolist()}
    k = len(ops)
    calls = np.bincount(row_key, minlength=k)
    total = np.bincount(row_key, weights=dur[rows], minlength=k)
    selfs = np.bincount(row_key, weights=self_us, minlength=k)
    devs = np.bincount(row_key, weights=device(rows), minlength=k)
    rows_list = list(ops.values())
    for row, c, t, s, d in zip(rows_list, calls.tolist(), total.tolist(), selfs.tolist(), devs.tolist()):
        row.calls, row.total_us, row.self_us, row.device_us = c, t, s, d
    if len(rows):
        _row_facts(rows_list, rows, row_key, group, facts, below_rows, closed_lib, versions)
        _row_shapes(rows_list, rows, row_key, f)
    _row_kernels(rows_list, f, is_device, is_row, name_code, distinct_names, row_key, rows, versions)
    modules = _modules(f, device, name_code, distinct_names)
    files = _files(f, is_row, rows, self_us, name_code, distinct_names, versions)  # (self_us per row of `rows`)
    return Summary(
        ops=sorted(ops.values(), key=lambda r: (-r.total_us, r.name)),
        modules=sorted(modules.values(), key=lambda r: (-r.total_us, r.name)),
        files=sorted(files.values(), key=lambda r: (-(r.total_us + r.device_us), r.name)),
        notes=notes,
        gpu=_gpu_time(f, is_device, name_code, distinct_names),
        versions=dict(versions or {}),
    )


def _row_facts(rows_list, rows, row_key, group, facts, below, closed_lib, versions=None) -> None:
    """Each operator row's facts: the first call's that has each, the last's library
    (`below`: per row, the first node below it of a closed library, -1: none)."""
    keys = combine(row_key, group[rows])
    first, _, _ = first_seen(keys, inverse=False)
    last_first, _, _ = first_seen(keys[::-1], inverse=False)
    last_at = {int(keys[::-1][j]): len(keys) - 1 - j for j in last_first.tolist()}
    libraries: dict[int, tuple[int, str]] = {}
    for j in first.tolist():  # each distinct (row, facts), in order of first call
        row, g = rows_list[row_key[j]], int(group[rows[j]])
        a = facts[g]
        row.op = row.op or a.get("op")
        row.dispatch_key = row.dispatch_key or a.get("dispatch_key")
        row.kernel_key = row.kernel_key or a.get("kernel_key")
        row.kernel = row.kernel or a.get("kernel")
        if not row.source:
            key = "source" if a.get("source") else "yaml"
            row.source, row.source_version = a.get(key), _fact_version(a, key, versions)
        if a.get("library"):
            at = last_at[int(keys[j])]
            r = int(row_key[j])
            if r not in libraries or libraries[r][0] < at:
                libraries[r] = (at, a["library"])
            row.closed = row.closed or bool(a.get("closed"))
        row.unknown = row.unknown or bool(a.get("unknown")) and row.name.startswith("aten::")
    for r, (_, library) in libraries.items():
        rows_list[r].library = library
    for j in np.flatnonzero(below >= 0).tolist():  # the first call's closed library below
        row = rows_list[row_key[j]]
        row.closed = True
        row.library = row.library or closed_lib[group[below[j]]]


def _row_shapes(rows_list, rows, row_key, f: Flat) -> None:
    shape = f.shape[rows]
    has = shape >= 0
    if not has.any():
        return
    row_key, shape = row_key[has], shape[has]
    first, counts, _ = first_seen(combine(row_key, shape), inverse=False)
    for j, count in zip(first.tolist(), counts.tolist()):
        rows_list[row_key[j]].shapes[f.shapes[shape[j]]] += count


def _directly_below(f: Flat, nodes: np.ndarray, through: tuple[int, ...], holds: np.ndarray, row_of: np.ndarray):
    """Of `nodes`, those whose nearest ancestor of a kind not in `through` is a
    holder (`holds`), with their holder's row (`row_of`): ordered holder by
    holder, each as a walk taking its last child first (a stack of children)."""
    holder = climb(nodes, f.kind, f.parent, through)
    mine = (holder >= 0) & holds[np.maximum(holder, 0)]
    nodes, holder = nodes[mine], holder[mine]
    order = np.lexsort((-nodes, holder))
    return nodes[order], row_of[holder[order]]


def _row_kernels(rows_list, f: Flat, is_device, is_row, name_code, distinct_names, row_key, rows, versions=None) -> None:
    """Device events an operator launched itself (through runtime calls, not a nested op):
    per operator row, by first appearance in a walk that finds the last launch first."""

    devices = np.flatnonzero(is_device)
    if not len(devices) or not len(rows):
        return
    row_of = np.full(len(f.kind), -1, dtype=np.int32)  # (a few thousand rows at most: half the bytes of int64 per node)
    row_of[rows] = row_key
    devices, r = _directly_below(f, devices, (KIND["runtime"],), is_row, row_of)
    kname = name_code[f.group[devices]]
    keys = combine(r, kname)
    first, counts, _ = first_seen(keys, inverse=False)
    for j, count in zip(first.tolist(), counts.tolist()):
        rows_list[r[j]].kernels[distinct_names[kname[j]]] += count
    where = [f.facts[g].get("source") or f.facts[g].get("library") for g in range(len(f.names))]
    has = np.array([bool(w) for w in where], dtype=bool)[f.group[devices]]
    if has.any():  # the last launch's source or library
        kept = np.flatnonzero(has)
        last, _, _ = first_seen(keys[kept][::-1], inverse=False)
        for j in last.tolist():
            at = kept[::-1][j]
            a = f.facts[f.group[devices[at]]]
            rows_list[r[at]].kernel_sources[distinct_names[kname[at]]] = where[f.group[devices[at]]]
            version = _fact_version(a, "source", versions)
            if version:
                rows_list[r[at]].kernel_versions[distinct_names[kname[at]]] = version


def _modules(f: Flat, device, name_code, distinct_names) -> dict[str, GroupRow]:
    """Per module type: calls, time with nested modules, and the operators it called directly."""

    nodes = np.flatnonzero(f.kind == KIND["module"])
    if not len(nodes):
        return {}
    type_code, types = codes_of([distinct_names[c].rsplit("_", 1)[0] for c in range(len(distinct_names))])
    of_node = type_code[name_code[f.group[nodes]]]
    first, _, key = first_seen(of_node)
    modules = {types[of_node[j]]: GroupRow(types[of_node[j]]) for j in first.tolist()}
    rows = list(modules.values())
    k = len(rows)
    for row, c, t, d in zip(rows, np.bincount(key, minlength=k).tolist(), np.bincount(key, weights=f.dur[nodes], minlength=k).tolist(),
                            np.bincount(key, weights=device(nodes), minlength=k).tolist()):
        row.calls, row.total_us, row.device_us = c, t, d
    # The outermost operators under a module: through Python frames, not nested modules.
    row_of = np.full(len(f.kind), -1, dtype=np.int32)  # (a few thousand rows at most: half the bytes of int64 per node)
    row_of[nodes] = key
    ops, m = _directly_below(f, np.flatnonzero(f.kind == KIND["op"]), (KIND["python"], KIND["builtin"]), f.kind == KIND["module"], row_of)
    if len(ops):
        op_name = name_code[f.group[ops]]
        first, counts, _ = first_seen(combine(m, op_name), inverse=False)
        for j, count in zip(first.tolist(), counts.tolist()):
            rows[m[j]].ops[distinct_names[op_name[j]]] += count
    return modules


def _files(f: Flat, is_row, op_rows, self_us, name_code, distinct_names, versions=None) -> dict[tuple, GroupRow]:
    """Source files: operators by their kernel's source (else their registration), GPU kernels by theirs
    (named by the symbol on that line: the functor, where the source is the functor's). A file of one
    version is kept apart from the same path of another (Note [versions in a trace])."""

    groups = len(f.names)
    kernel_group = np.zeros(groups, dtype=bool)
    kernel_group[f.group[f.kind == KIND["gpu_kernel"]]] = True
    paths, whats, lines = [], [], []
    for g, a in enumerate(f.facts):  # once per group: its file, what it counts as, its line
        if kernel_group[g]:
            path = a.get("source_file") or None
            functor = a.get("functor") and a.get("source") and a.get("source") != a.get("launcher")  # the source is the functor's
            what = (a.get("functor") if functor else a.get("kernel")) or f.names[g]
            line = str(a.get("source") or "").rsplit(":", 1)[-1]
            version = _fact_version(a, "source", versions)
        else:
            src = a.get("source")
            path = src.rsplit(":", 1)[0] if src else None
            version = _fact_version(a, "source", versions)
            if path is None and a.get("registered_at"):
                path = a["registered_at"].rsplit(":", 1)[0]
                version = _fact_version(a, "registered_at", versions)
            what = f.names[g]
            line = (src or a.get("registered_at") or "").rsplit(":", 1)[-1]
        paths.append(path and (path, version))
        whats.append(what)
        lines.append(int(line) if line.isdigit() else -1)
    path_code, distinct_paths = codes_of(paths)
    what_code, distinct_whats = codes_of(whats)
    path_code, what_code = path_code.astype(np.int32), what_code.astype(np.int32)  # (one per group: int32 per node when gathered)
    nodes = np.flatnonzero(is_row | (f.kind == KIND["gpu_kernel"]))
    g = f.group[nodes]
    has_path = np.array([p is not None for p in distinct_paths], dtype=bool)[path_code[g]]
    nodes, g = nodes[has_path], g[has_path]
    if not len(nodes):
        return {}
    p = path_code[g]
    first, _, key = first_seen(p)
    files = {distinct_paths[p[j]]: GroupRow(distinct_paths[p[j]][0], version=distinct_paths[p[j]][1]) for j in first.tolist()}  # (path, version) -> its row
    del p, has_path
    rows = list(files.values())
    k = len(rows)
    is_kernel = f.kind[nodes] == KIND["gpu_kernel"]
    calls = np.bincount(key, minlength=k)
    weights = np.zeros(len(nodes))
    weights[~is_kernel] = self_us[np.searchsorted(op_rows, nodes[~is_kernel])]  # the others are operator rows (self_us per row of `op_rows`)
    host = np.bincount(key, weights=weights, minlength=k)
    del weights
    dev = np.bincount(key, weights=np.where(is_kernel, f.dur[nodes], 0.0), minlength=k)
    del is_kernel, nodes
    for row, c, t, d in zip(rows, calls.tolist(), host.tolist(), dev.tolist()):
        row.calls, row.total_us, row.device_us = c, t, d
    w = what_code[g]
    keys = combine(key, w)
    first, counts, _ = first_seen(keys, inverse=False)
    for j, count in zip(first.tolist(), counts.tolist()):
        rows[key[j]].ops[distinct_whats[w[j]]] += count
    known = np.flatnonzero(np.array([x >= 0 for x in lines], dtype=bool)[g])  # (the line read per group: no line per node)
    if len(known):
        first, _, _ = first_seen(keys[known], inverse=False)
        for j in known[first].tolist():
            rows[key[j]].lines.setdefault(distinct_whats[w[j]], lines[g[j]])
    return files


def _gpu_time(f: Flat, is_device, name_code, distinct_names) -> GpuTime:
    gpu = GpuTime()
    devices = np.flatnonzero(is_device)
    if not len(devices):
        return gpu
    kind = np.array([1 if a.get("source") else 2 if a.get("library") else 0 for a in f.facts], dtype=np.int8)[f.group[devices]]
    d = f.dur[devices]
    gpu.total_us = float(d.sum())
    gpu.source_us = float(d[kind == 1].sum())
    gpu.library_us = float(d[kind == 2].sum())
    unresolved = np.flatnonzero(kind == 0)
    if len(unresolved):
        names = name_code[f.group[devices[unresolved]]]
        first, _, key = first_seen(names)
        for j, us in zip(first.tolist(), np.bincount(key, weights=d[unresolved]).tolist()):
            gpu.unresolved[distinct_names[names[j]]] += us
    return gpu


def dump(summary: Summary) -> bytes:
    """The whole summary as JSON (every shape, operator and kernel, in order:
    `to_json` keeps only the top ones), for the trace store."""
    import msgspec

    def counter(c: Counter) -> list:
        return [[k, v] for k, v in c.items()]

    def group(r: GroupRow) -> dict:
        return {"name": r.name, "calls": r.calls, "total_us": r.total_us, "device_us": r.device_us, "ops": counter(r.ops), "lines": list(r.lines.items()),
                "version": r.version}

    ops = []
    for r in summary.ops:
        d = {k: getattr(r, k) for k in OpRow.__dataclass_fields__}
        d["shapes"], d["kernels"], d["kernel_sources"] = counter(r.shapes), counter(r.kernels), list(r.kernel_sources.items())
        d["kernel_versions"] = list(r.kernel_versions.items())
        ops.append(d)
    g = summary.gpu
    return msgspec.json.encode({"ops": ops, "modules": [group(r) for r in summary.modules], "files": [group(r) for r in summary.files],
                                "notes": list(summary.notes),
                                "versions": summary.versions,
                                "gpu": {"total_us": g.total_us, "source_us": g.source_us, "library_us": g.library_us, "unresolved": counter(g.unresolved)}})


def undump(data: bytes) -> Summary:
    """`dump`'s summary back, equal in every field."""
    import msgspec

    d = msgspec.json.decode(data)
    ops = []
    for r in d["ops"]:
        row = OpRow(**{k: v for k, v in r.items() if k not in ("shapes", "kernels", "kernel_sources", "kernel_versions")})
        row.shapes, row.kernels, row.kernel_sources = Counter(dict(r["shapes"])), Counter(dict(r["kernels"])), dict(r["kernel_sources"])
        row.kernel_versions = dict(r["kernel_versions"])
        ops.append(row)
    groups = lambda rows: [GroupRow(r["name"], r["calls"], r["total_us"], r["device_us"], Counter(dict(r["ops"])), dict(r["lines"]), r["version"])
                                 for r in rows]  # noqa: E731
    g = d["gpu"]
    return Summary(ops, groups(d["modules"]), groups(d["files"]), tuple(d["notes"]),
                   GpuTime(g["total_us"], g["source_us"], g["library_us"], Counter(dict(g["unresolved"]))), dict(d["versions"]))


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
