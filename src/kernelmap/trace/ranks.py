"""Traces of several ranks of one distributed run -> one `RanksSummary`: each
rank's GPU time split, the merged operator times, the collectives matched
across ranks (the same collective kernel, its n-th launch on each rank: its
time on each rank and the slowest rank), and the operators whose device time
differs most between ranks.

Ranks are read one at a time and only their summaries are kept, so memory is
bounded by one rank's tree, not by the sum of them. A rank is named by the
trace's `distributedInfo.rank`, else by its position on the command line.
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
class RanksSummary:
    """Several ranks of one run: per rank, merged, collectives matched (the ranks/1 answer)."""

    DOCUMENT: ClassVar[str] = "ranks"  # the renderer table's key

    ranks: tuple[RankRow, ...]
    merged_ops: tuple[tuple[str, int, float, float], ...]  # (operator, calls, total us, device us) over all ranks
    collectives: tuple[Collective, ...]
    differences: tuple[OpSpread, ...]  # operators by spread of device time between ranks, largest first
    notes: tuple[str, ...] = ()  # ranks numbered otherwise than their traces say

    def to_json(self) -> dict[str, Any]:
        return {
            "kernelmap": f"ranks/{VERSION}",
            "ranks": [r.__dict__ for r in self.ranks],
            "merged_ops": [{"name": n, "calls": c, "total_us": round(t, 3), "device_us": round(d, 3)} for n, c, t, d in self.merged_ops],
            "collectives": [{"name": c.name, "index": c.index, "us": {str(r): round(u, 3) for r, u in c.us}, "slowest": c.slowest} for c in self.collectives],
            "differences": [{"name": o.name, "device_us": {str(r): round(u, 3) for r, u in o.device_us}, "spread_us": round(o.spread_us, 3)} for o in self.differences],
            "notes": list(self.notes),
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


def summarize_ranks(paths: list[Path], load) -> RanksSummary:
    """Load each rank with `load(path) -> Trace`, keep its summary and collectives, drop its tree."""
    rows: list[RankRow] = []
    ops: dict[str, list] = {}
    op_device: dict[str, dict[int, float]] = defaultdict(dict)
    launches: dict[tuple[str, int], dict[int, float]] = defaultdict(dict)
    seen_ranks: dict[int, tuple[str, bool]] = {}  # rank -> (file shown as it, whether the file says so)
    notes: list[str] = []
    for position, path in enumerate(paths):
        t = load(path)
        claimed = t.meta.get("rank")
        rank = claimed if claimed is not None else position
        if rank in seen_ranks:  # two files claiming one rank: keep both, numbered apart, and say so
            free = max(seen_ranks) + 1
            said = f"says it is rank {rank}" if claimed is not None else f"names no rank (file {position + 1} given)"
            other, says = seen_ranks[rank]
            notes.append(f"{path.name} {said}, which {other} {'says too' if says else 'is shown as'}: shown as rank {free}")
            rank = free
        seen_ranks[rank] = (path.name, claimed is not None and claimed == rank)
        s = t.summary()
        counts: Counter = Counter()
        collective_us = 0.0
        mine = sorted(t.kernels(_COLLECTIVE_LIBRARIES))
        for _, name, dur in mine:  # in the order the device ran them
            launches[(name, counts[name])][rank] = dur
            counts[name] += 1
            collective_us += dur
        rows.append(RankRow(rank, path.name, s.gpu.total_us, s.gpu.source_us, s.gpu.library_us, collective_us))
        for r in s.ops:
            row = ops.setdefault(r.name, [0, 0.0, 0.0])
            row[0] += r.calls
            row[1] += r.total_us
            row[2] += r.device_us
            op_device[r.name][rank] = r.device_us
        del t, s  # one rank's tree at a time
    ranks = [r.rank for r in rows]
    collectives = tuple(
        Collective(name, i, tuple(sorted(per.items()))) for (name, i), per in sorted(launches.items()) if len(per) > 1
    )
    spreads = [OpSpread(name, tuple((r, per.get(r, 0.0)) for r in ranks)) for name, per in op_device.items()]
    spreads = [o for o in spreads if o.spread_us > 0]
    spreads.sort(key=lambda o: (-o.spread_us, o.name))
    merged = tuple(sorted(((n, c, t, d) for n, (c, t, d) in ops.items()), key=lambda x: (-x[2], x[0])))
    return RanksSummary(tuple(rows), merged, collectives, tuple(spreads), tuple(notes))
