"""What compiling one unit costs: CPU seconds as a straight line in the
bytes of source its include closure reads, fitted to real compiles of
sampled units of the 2.6.0 tree on this project's machine
(`benches/bench_impact.py --calibrate`, which writes `cost_model.json`
beside this file). The answer states the line and its measured error.

Note [rebuild cost model]
A unit's compile time follows the code the compiler reads: the preprocessed
text of its closure, which kernelmap knows from the include graph without
building. `seconds = a + b * MB` is fitted by least squares per kind
(`cpp`; `capability` copies, compiled with -mavx2 / -mavx512); its error is
each measured unit's distance from a line fitted without it (leave one
out). CPU time (user + system of the compiler), not wall time: the machine
is shared and a neighbour's load stretches wall time, not CPU time. A .cu
unit is costed as host C++ of the same size when no nvcc compile was
measured; its device code, compiled once per GPU architecture, comes on top
and the answer says so.
"""

from __future__ import annotations

import functools
import json
import statistics
from dataclasses import dataclass
from pathlib import Path

MODEL_FILE = Path(__file__).with_name("cost_model.json")
MB = 1_000_000


@dataclass(frozen=True)
class Line:
    a: float  # seconds
    b: float  # seconds per MB of closure
    samples: int
    median_error: float  # leave-one-out |predicted - measured| / measured, median
    within_25: float  # share of units predicted within 25%

    def predict(self, closure_bytes: int) -> float:
        return max(0.05, self.a + self.b * closure_bytes / MB)


@dataclass(frozen=True)
class CostModel:
    lines: dict[str, Line]  # kind -> its line; "cpp" is always there
    machine: str  # where it was measured
    compiler: str

    def line(self, kind: str) -> Line:
        return self.lines.get(kind) or self.lines["cpp"]

    def predict(self, kind: str, closure_bytes: int) -> float:
        return self.line(kind).predict(closure_bytes)

    def calibrated(self, kind: str) -> bool:
        return kind in self.lines

    def describe(self) -> tuple[str, str]:
        """(the model in words, its error in words)."""
        parts = [f"{kind}: {ln.a:.2f} s + {ln.b:.2f} s per MB of source read" for kind, ln in self.lines.items()]
        errors = [f"{kind}: median error {ln.median_error:.0%}, {ln.within_25:.0%} within 25% (leave-one-out, {ln.samples} units)"
                  for kind, ln in self.lines.items()]
        return (f"CPU seconds per unit = {'; '.join(parts)} ({self.compiler} on {self.machine})", "; ".join(errors))

    def to_json(self) -> dict:
        return {"format": 1, "machine": self.machine, "compiler": self.compiler,
                "lines": {k: {"a": v.a, "b": v.b, "samples": v.samples, "median_error": v.median_error, "within_25": v.within_25}
                          for k, v in self.lines.items()}}

    @staticmethod
    def from_json(d: dict) -> CostModel:
        lines = {k: Line(float(v["a"]), float(v["b"]), int(v["samples"]), float(v["median_error"]), float(v["within_25"]))
                 for k, v in d["lines"].items()}
        return CostModel(lines, d.get("machine", ""), d.get("compiler", ""))


# Before any calibration: a line through typical figures (about 1 s a MB), said to be unmeasured.
_UNCALIBRATED = CostModel({"cpp": Line(0.5, 1.0, 0, float("nan"), float("nan"))}, "no machine (not calibrated)", "g++")


@functools.lru_cache(maxsize=1)
def cost_model() -> CostModel:
    try:
        return CostModel.from_json(json.loads(MODEL_FILE.read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return _UNCALIBRATED


def model_fingerprint() -> str:
    try:
        return MODEL_FILE.read_text()
    except OSError:
        return ""


def fit_line(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Least squares `y = a + b x` over (x, y) points."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    if sxx == 0:
        return my, 0.0
    b = sum((x - mx) * (y - my) for x, y in points) / sxx
    return my - b * mx, b


def fit(samples: list[tuple[str, int, float]], *, machine: str, compiler: str, min_samples: int = 5) -> CostModel:
    """A model from (kind, closure bytes, measured CPU seconds) samples: a
    line per kind with at least `min_samples`, `cpp` from all if it has fewer."""
    by_kind: dict[str, list[tuple[float, float]]] = {}
    for kind, nbytes, seconds in samples:
        by_kind.setdefault(kind, []).append((nbytes / MB, seconds))
    lines: dict[str, Line] = {}
    everything = [p for pts in by_kind.values() for p in pts]
    for kind, pts in [("cpp", by_kind.get("cpp") if len(by_kind.get("cpp", [])) >= min_samples else everything),
                      *((k, v) for k, v in by_kind.items() if k != "cpp" and len(v) >= min_samples)]:
        if len(pts) < 3:
            continue
        a, b = fit_line(pts)
        errors = []
        for i, (x, y) in enumerate(pts):
            ai, bi = fit_line(pts[:i] + pts[i + 1:])
            errors.append(abs(max(0.05, ai + bi * x) - y) / y)
        lines[kind] = Line(a, b, len(pts), statistics.median(errors), sum(e <= 0.25 for e in errors) / len(errors))
    if "cpp" not in lines:
        raise ValueError("too few measured compiles to fit a cost model")
    return CostModel(lines, machine, compiler)
