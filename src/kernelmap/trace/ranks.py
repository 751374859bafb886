"""Traces of several ranks of one distributed run -> one `RanksSummary`: each
rank's GPU time split, the merged operator times, the collectives matched
across ranks (the same collective kernel, its n-th launch on each rank: its
time on each rank and the slowest rank), and the operators whose device time
differs most between ranks.

Each rank is one step (`rank_step`): its trace imported (into the store,
when asked), summarised, and only what the merge needs kept (`RankResult`:
its GPU time split, operator times, collective kernels in device order,
kernel time by name). The steps run one after the other in this process
(memory bounded by one rank's tree), in parallel processes on this machine,
or on a Dask distributed cluster (`scheduler`: its address), where each
worker reads the rank's file from a file system it shares with this one.
Dask rather than Ray: the step is one plain function per file, which Dask's
futures run with a scheduler of a few megabytes and no cluster service of
its own. A rank is named by the trace's `distributedInfo.rank`, else by its
position on the command line.

Note [stragglers]
A collective ends on every rank at about the same moment, when the last rank
has joined it: the rank that arrived last spends the least time in it, and
every other rank waits for it. Per matched collective, the rank with the
shortest kernel is the one the others waited for, and the wait it caused is
the longest time minus the shortest. A rank that is last time after time is
a straggler: its work before the collective is slower than the others'.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from kernelmap.errors import BadInput
from kernelmap.printable import printable

VERSION = 1
_COLLECTIVE_LIBRARIES = ("NCCL", "RCCL")


@dataclass(frozen=True)
class RankRow:
    rank: int
    file: str
    gpu_us: float
    source_us: float
    library_us: float
    collective_us: float


@dataclass(frozen=True)
class Collective:
    """One collective, matched across ranks by kernel name and launch order."""

    name: str
    index: int  # its n-th launch (from 0) on each rank
    us: tuple[tuple[int, float], ...]  # (rank, duration) for each rank that ran it

    @property
    def slowest(self) -> int:
        return max(self.us, key=lambda ru: ru[1])[0]


@dataclass(frozen=True)
class OpSpread:
    name: str
    device_us: tuple[tuple[int, float], ...]  # (rank, device time)

    @property
    def spread_us(self) -> float:
        values = [v for _, v in self.device_us]
        return max(values) - min(values)


@dataclass(frozen=True)
class Straggler:
    """How often a rank was the one a collective waited for (Note [stragglers])."""

    rank: int
    last: int  # matched collectives it joined last
    wait_caused_us: float  # the others' wait, summed over those


@dataclass(frozen=True)
class KernelTime:
    name: str
    us: tuple[tuple[int, float], ...]  # (rank, GPU time of the kernel on that rank)


@dataclass(frozen=True)
class RanksSummary:
    """Several ranks of one run: per rank, merged, collectives matched (the ranks/1 answer)."""

    DOCUMENT: ClassVar[str] = "ranks"  # the renderer table's key

    ranks: tuple[RankRow, ...]
    merged_ops: tuple[tuple[str, int, float, float], ...]  # (operator, calls, total us, device us) over all ranks
    collectives: tuple[Collective, ...]
    differences: tuple[OpSpread, ...]  # operators by spread of device time between ranks, largest first
    notes: tuple[str, ...] = ()  # ranks numbered otherwise than their traces say
    stragglers: tuple[Straggler, ...] = ()  # per rank, most waited-for first (Note [stragglers])
    kernels: tuple[KernelTime, ...] = ()  # GPU kernels by their time over all ranks, with each rank's

    def to_json(self) -> dict[str, Any]:
        return {
            "kernelmap": f"ranks/{VERSION}",
            "ranks": [r.__dict__ for r in self.ranks],
            "merged_ops": [{"name": n, "calls": c, "total_us": round(t, 3), "device_us": round(d, 3)} for n, c, t, d in self.merged_ops],
            "collectives": [{"name": c.name, "index": c.index, "us": {str(r): round(u, 3) for r, u in c.us}, "slowest": c.slowest} for c in self.collectives],
            "differences": [{"name": o.name, "device_us": {str(r): round(u, 3) for r, u in o.device_us}, "spread_us": round(o.spread_us, 3)} for o in self.differences],
            "notes": list(self.notes),
            "stragglers": [{"rank": x.rank, "last": x.last, "wait_caused_us": round(x.wait_caused_us, 3)} for x in self.stragglers],
            "kernels": [{"name": k.name, "us": {str(r): round(u, 3) for r, u in k.us}} for k in self.kernels],
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> RanksSummary:
        if not isinstance(d, dict) or d.get("kernelmap") != f"ranks/{VERSION}":
            raise BadInput(f"not a ranks/{VERSION} document: {d.get('kernelmap') if isinstance(d, dict) else d!r}")
        by_rank = lambda m: tuple((int(r), float(u)) for r, u in m.items())  # noqa: E731
        return cls(
            tuple(RankRow(**r) for r in d["ranks"]),
            tuple((o["name"], o["calls"], o["total_us"], o["device_us"]) for o in d["merged_ops"]),
            tuple(Collective(c["name"], c["index"], by_rank(c["us"])) for c in d["collectives"]),
            tuple(OpSpread(o["name"], by_rank(o["device_us"])) for o in d["differences"]),
            tuple(str(n) for n in d.get("notes") or ()),
            tuple(Straggler(int(x["rank"]), int(x["last"]), float(x["wait_caused_us"])) for x in d.get("stragglers") or ()),
            tuple(KernelTime(k["name"], by_rank(k["us"])) for k in d.get("kernels") or ()),
        )

    def to_text(self, top: int = 25, width: int = 120) -> str:
        from kernelmap.trace.summary import _ms, _table

        pct = lambda part, whole: f"{100 * part / whole:.1f}%" if whole else "-"  # noqa: E731
        out = [f"note: {printable(n)}" for n in self.notes]
        out += [_table(f"Ranks ({len(self.ranks)})", ("rank", "file", "dev ms", "with source", "in a library", "collectives ms"),
                      [(str(r.rank), r.file, _ms(r.gpu_us), pct(r.source_us, r.gpu_us), pct(r.library_us, r.gpu_us), _ms(r.collective_us)) for r in self.ranks],
                      width, limits={1: 50})]
        out.append(_table(f"Operators over all ranks (top {min(top, len(self.merged_ops))} by total time)", ("operator", "calls", "total ms", "dev ms"),
                          [(n, str(c), _ms(t), _ms(d)) for n, c, t, d in self.merged_ops[:top]], width))
        ranks = [r.rank for r in self.ranks]
        slow = sorted(self.collectives, key=lambda c: -max(u for _, u in c.us))[:top]
        out.append(_table(f"Collectives matched across ranks ({len(self.collectives)}; slowest first)", ("#", "slowest rank", *(f"rank {r} ms" for r in ranks), "collective"),
                          [(str(c.index), str(c.slowest), *(_ms(dict(c.us)[r]) if r in dict(c.us) else "-" for r in ranks), c.name) for c in slow], width))
        out.append(_table("Operators whose device time differs most between ranks", ("operator", *(f"rank {r} ms" for r in ranks), "spread ms"),
                          [(o.name, *(_ms(dict(o.device_us).get(r, 0.0)) for r in ranks), _ms(o.spread_us)) for o in self.differences[:top]], width))
        if self.stragglers:
            out.append(_table("Stragglers: the rank each collective waited for (shortest kernel), and the others' wait", ("rank", "last in", "wait caused ms"),
                              [(str(x.rank), f"{x.last} of {len(self.collectives)}", _ms(x.wait_caused_us)) for x in self.stragglers], width))
        if self.kernels:
            out.append(_table(f"GPU kernels per rank (top {min(top, len(self.kernels))} by time over all ranks)", (*(f"rank {r} ms" for r in ranks), "kernel"),
                              [(*(_ms(dict(k.us).get(r, 0.0)) for r in ranks), k.name) for k in self.kernels[:top]], width))
        return "\n".join(out)


def trace_files(paths: tuple[str, ...]) -> list[Path]:
    """The trace files named, a folder standing for its `.json` / `.json.gz` files."""
    out: list[Path] = []
    for p in map(Path, paths):
        try:
            folder = p.is_dir()
            found = sorted(q for q in p.iterdir() if q.is_file() and q.name.endswith((".json", ".json.gz"))) if folder else []
        except OSError as e:  # a name too long for the OS, a folder that cannot be read
            raise BadInput(f"cannot read --from {p}: {e.strerror}") from None
        if folder:
            if not found:
                raise BadInput(f"{p}: no .json or .json.gz trace in this folder")
            out.extend(found)
        else:
            out.append(p)
    seen: dict[Path, Path] = {}
    for p in out:
        try:
            same = seen.setdefault(p.resolve(), p)
        except (OSError, RuntimeError):
            continue  # unreadable: the reader says so
        if same is not p:
            raise BadInput(f"--from names one trace twice: {same} and {p}")
    return out


@dataclass(frozen=True)
class RankResult:
    """What the merge keeps of one rank (small, picklable: it comes back from a worker)."""

    file: str
    claimed: int | None  # the rank the trace says it is
    gpu_us: float = 0.0
    source_us: float = 0.0
    library_us: float = 0.0
    ops: tuple[tuple[str, int, float, float], ...] = ()  # (operator, calls, total us, device us)
    collectives: tuple[tuple[float, str, float], ...] = ()  # (start us, kernel, duration us), in device order
    kernels: tuple[tuple[str, float], ...] = ()  # (kernel, GPU time) by name
    error: str | None = None  # a rank that could not be read: the one-line message


def rank_result(t, file: str) -> RankResult:
    """The merge's part of one rank's trace."""
    s = t.summary()
    kernels = _kernel_times(t)
    return RankResult(file, t.meta.get("rank"), s.gpu.total_us, s.gpu.source_us, s.gpu.library_us,
                      tuple((r.name, r.calls, r.total_us, r.device_us) for r in s.ops),
                      tuple(sorted(t.kernels(_COLLECTIVE_LIBRARIES))), kernels)


def _kernel_times(t) -> tuple[tuple[str, float], ...]:
    table = t._table
    if table is None:
        times: dict[str, float] = defaultdict(float)
        for _, n in t.tree.walk():
            if n.kind == "gpu_kernel":
                times[n.name] += float(n.attrs.get("duration_us", 0.0))
        return tuple(times.items())
    import numpy as np

    from kernelmap.trace.codes import KIND

    kernels = np.flatnonzero(table.kind == KIND["gpu_kernel"])
    if not len(kernels):
        return ()
    labels, inverse = np.unique(table.label[kernels], return_inverse=True)
    sums = np.bincount(inverse.reshape(-1), weights=np.round(table.dur[kernels], 3))
    display = table.c.labels.display
    out: dict[str, float] = defaultdict(float)
    for label, us in zip(labels.tolist(), sums.tolist()):
        out[display[label]] += us
    return tuple(out.items())


def rank_step(path: str, keep_frames: bool = False, source_tree: str | None = None, store: bool = True) -> RankResult:
    """Import one rank's trace and keep the merge's part: what runs in a worker."""
    from kernelmap.errors import KernelmapError
    from kernelmap.trace import load

    try:
        return rank_result(load(path, keep_frames=keep_frames, source_tree=source_tree, store=store), Path(path).name)
    except KernelmapError as e:  # its message comes back: an exception of ours need not unpickle in the caller
        return RankResult(Path(path).name, None, error=str(e))


def run_steps(paths: list[Path], *, keep_frames: bool = False, source_tree: str | None = None, store: bool = True,
              workers: int = 1, scheduler: str | None = None) -> list[RankResult]:
    """`rank_step` of each path: here, in `workers` processes, or on the Dask cluster at `scheduler`."""
    args = dict(keep_frames=keep_frames, source_tree=None if source_tree is None else str(source_tree), store=store)
    if scheduler is not None:
        try:
            from distributed import Client
        except ImportError:
            raise BadInput("--scheduler needs Dask distributed: pip install 'kernelmap[cluster]'") from None
        try:
            client = Client(scheduler, timeout=30, set_as_default=False)
        except (OSError, TimeoutError, ValueError) as e:
            raise BadInput(f"cannot reach the Dask scheduler at {printable(scheduler)[:200]}: {e}") from None
        with client:
            futures = client.map(rank_step, [str(p.resolve()) for p in paths], **args, pure=False)
            return client.gather(futures)
    if workers > 1 and len(paths) > 1:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        context = multiprocessing.get_context("spawn")  # no state of this process (a loaded torch, open files) is shared
        with ProcessPoolExecutor(max_workers=min(workers, len(paths)), mp_context=context) as pool:
            return list(pool.map(rank_step, [str(p) for p in paths], *([v] * len(paths) for v in args.values())))
    return [rank_step(str(p), **args) for p in paths]


def summarize_ranks(paths: list[Path], load=None, **steps: Any) -> RanksSummary:
    """Several ranks merged. With `load(path) -> Trace`, each rank is loaded
    with it, here, one at a time; else `run_steps(paths, **steps)`."""
    if load is not None:
        results = []
        for path in paths:
            results.append(rank_result(load(path), path.name))  # one rank's tree at a time: dropped before the next
    else:
        results = run_steps(paths, **steps)
    return merge(results)


def merge(results: list[RankResult]) -> RanksSummary:
    """The ranks' parts, merged (in the order given)."""
    rows: list[RankRow] = []
    ops: dict[str, list] = {}
    op_device: dict[str, dict[int, float]] = defaultdict(dict)
    launches: dict[tuple[str, int], dict[int, float]] = defaultdict(dict)
    kernel_us: dict[str, dict[int, float]] = defaultdict(dict)
    seen_ranks: dict[int, tuple[str, bool]] = {}  # rank -> (file shown as it, whether the file says so)
    notes: list[str] = []
    for position, r in enumerate(results):
        if r.error is not None:
            raise BadInput(r.error)
        claimed = r.claimed
        rank = claimed if claimed is not None else position
        if rank in seen_ranks:  # two files claiming one rank: keep both, numbered apart, and say so
            free = max(seen_ranks) + 1
            said = f"says it is rank {rank}" if claimed is not None else f"names no rank (file {position + 1} given)"
            other, says = seen_ranks[rank]
            notes.append(f"{r.file} {said}, which {other} {'says too' if says else 'is shown as'}: shown as rank {free}")
            rank = free
        seen_ranks[rank] = (r.file, claimed is not None and claimed == rank)
        counts: Counter = Counter()
        collective_us = 0.0
        for _, name, dur in r.collectives:  # in the order the device ran them
            launches[(name, counts[name])][rank] = dur
            counts[name] += 1
            collective_us += dur
        rows.append(RankRow(rank, r.file, r.gpu_us, r.source_us, r.library_us, collective_us))
        for name, calls, total, device in r.ops:
            row = ops.setdefault(name, [0, 0.0, 0.0])
            row[0] += calls
            row[1] += total
            row[2] += device
            op_device[name][rank] = device
        for name, us in r.kernels:
            kernel_us[name][rank] = us
    ranks = [r.rank for r in rows]
    collectives = tuple(
        Collective(name, i, tuple(sorted(per.items()))) for (name, i), per in sorted(launches.items()) if len(per) > 1
    )
    spreads = [OpSpread(name, tuple((r, per.get(r, 0.0)) for r in ranks)) for name, per in op_device.items()]
    spreads = [o for o in spreads if o.spread_us > 0]
    spreads.sort(key=lambda o: (-o.spread_us, o.name))
    merged = tuple(sorted(((n, c, t, d) for n, (c, t, d) in ops.items()), key=lambda x: (-x[2], x[0])))
    return RanksSummary(tuple(rows), merged, collectives, tuple(spreads), tuple(notes), _stragglers(collectives),
                        _kernels(kernel_us, ranks))


def _stragglers(collectives: tuple[Collective, ...]) -> tuple[Straggler, ...]:
    """Note [stragglers]."""
    last: Counter = Counter()
    caused: dict[int, float] = defaultdict(float)
    for c in collectives:
        rank, shortest = min(c.us, key=lambda ru: (ru[1], ru[0]))
        last[rank] += 1
        caused[rank] += max(u for _, u in c.us) - shortest
    out = [Straggler(r, n, caused[r]) for r, n in last.items()]
    out.sort(key=lambda x: (-x.wait_caused_us, -x.last, x.rank))
    return tuple(out)


def _kernels(kernel_us: dict[str, dict[int, float]], ranks: list[int]) -> tuple[KernelTime, ...]:
    out = [KernelTime(name, tuple((r, per.get(r, 0.0)) for r in ranks)) for name, per in kernel_us.items()]
    out.sort(key=lambda k: (-sum(u for _, u in k.us), k.name))
    return tuple(out[:200])
