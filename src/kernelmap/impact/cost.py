"""What compiling one unit costs: CPU seconds as a power law in the bytes of
source its include closure reads and in the bytes of the unit's own file,
fitted to real compiles of sampled units of the 2.6.0 tree on this
project's machine (`benches/bench_impact.py --calibrate`, which writes
`cost_model.json` beside this file). The answer states the model and its
measured error.

Note [rebuild cost model]
A unit's compile time follows the code the compiler reads (the preprocessed
text of its closure, which kernelmap knows from the include graph without
building) and, more steeply, the code it compiles itself (its own file's
function bodies: a generated binding or a vectorised kernel file). The
model is `seconds = k * closure_MB^b * own_MB^c`, fitted by least squares
on the logarithms (times spread over two orders of magnitude; a straight
line was dominated by the few slowest units and missed by half on a
typical one), with Duan's smearing factor so that sums over many units
are not biased low. Its error is each measured unit's distance from a
model fitted without it (leave one out), per unit and summed over the
sample. CPU time (user + system of the compiler), not wall time: the
machine is shared and a neighbour's load stretches wall time, not CPU
time. A .cu unit is costed as host C++ of the same size when no nvcc
compile was measured (a CPU machine's CUDA toolkit lacks the math
libraries' headers a real .cu compile needs); its device code, compiled
once per GPU architecture, comes on top and the answer says so.
"""

from __future__ import annotations

import functools
import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path

MODEL_FILE = Path(__file__).with_name("cost_model.json")
MB = 1_000_000
_FLOOR = 0.01  # MB added before the logarithm: a unit that reads almost nothing still costs a compiler start


@dataclass(frozen=True)
class Fit:
    """`seconds = exp(a + kinds[kind]) * smear * (closure_MB + 0.01)^b * (own_MB + 0.01)^c`."""

    a: float
    b: float  # exponent of the closure's size
    c: float  # exponent of the unit's own size
    smear: float  # mean of exp(residuals): sums are not biased low
    samples: int
    median_error: float  # leave-one-out |predicted - measured| / measured, median over the units
    within_50: float  # share of units predicted within 50%
    total_error: float  # leave-one-out predictions summed against the measured sum, signed
    kinds: dict[str, float] | None = None  # a kind's own term (log scale): "capability" copies compile vector code

    def predict(self, closure_bytes: int, own_bytes: int, kind: str = "cpp") -> float:
        extra = (self.kinds or {}).get(kind, 0.0)
        return math.exp(self.a + extra) * self.smear * (closure_bytes / MB + _FLOOR) ** self.b * (own_bytes / MB + _FLOOR) ** self.c


@dataclass(frozen=True)
class CostModel:
    fit: Fit
    machine: str  # where it was measured
    compiler: str
    calibrated_kinds: tuple[str, ...]  # kinds of unit among the measured ones

    def predict(self, kind: str, closure_bytes: int, own_bytes: int) -> float:
        return round(self.fit.predict(closure_bytes, own_bytes, kind), 2)

    def calibrated(self, kind: str) -> bool:
        return self.fit.samples > 0 and kind in self.calibrated_kinds

    def describe(self) -> tuple[str, str]:
        """(the model in words, its error in words)."""
        f = self.fit
        if not f.samples:
            return ("CPU seconds per unit = 1 s + 1 s per MB its closure reads (not calibrated: a rough guess)", "unmeasured")
        kinds = "".join(f", x {math.exp(v):.2f} for a {k} unit" for k, v in sorted((f.kinds or {}).items()))
        text = (f"CPU seconds per unit = {math.exp(f.a) * f.smear:.1f} x (MB its closure reads)^{f.b:.2f} x (MB of its own file)^{f.c:.2f}{kinds}, "
                f"fitted to {f.samples} compiles by {self.compiler} on {self.machine}")
        error = (f"per unit: median error {f.median_error:.0%}, {f.within_50:.0%} within 50%; summed over the {f.samples} units: "
                 f"{f.total_error:+.0%} (leave-one-out)")
        return text, error

    def to_json(self) -> dict:
        return {"format": 2, "machine": self.machine, "compiler": self.compiler, "kinds": list(self.calibrated_kinds), "fit": self.fit.__dict__}

    @staticmethod
    def from_json(d: dict) -> CostModel:
        if d.get("format") != 2:
            raise ValueError("another format")
        return CostModel(Fit(**d["fit"]), d.get("machine", ""), d.get("compiler", ""), tuple(d.get("kinds") or ()))


class _Guess(CostModel):
    """Before any calibration: about a second per MB read."""

    def predict(self, kind: str, closure_bytes: int, own_bytes: int) -> float:
        return round(1.0 + (closure_bytes + own_bytes) / MB, 2)


_UNCALIBRATED = _Guess(Fit(0.0, 1.0, 0.0, 1.0, 0, float("nan"), float("nan"), float("nan")), "no machine", "g++", ())


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


def least_squares(rows: list[list[float]], ys: list[float]) -> list[float]:
    """The coefficients minimising |X beta - y|^2 (normal equations, solved by elimination)."""
    k = len(rows[0])
    ata = [[sum(r[i] * r[j] for r in rows) for j in range(k)] for i in range(k)]
    aty = [sum(r[i] * y for r, y in zip(rows, ys)) for i in range(k)]
    m = [ata[i] + [aty[i]] for i in range(k)]
    for col in range(k):
        pivot = max(range(col, k), key=lambda r: abs(m[r][col]))
        if abs(m[pivot][col]) < 1e-12:
            raise ValueError("the measured units do not tell the model's terms apart")
        m[col], m[pivot] = m[pivot], m[col]
        for r in range(k):
            if r != col:
                factor = m[r][col] / m[col][col]
                m[r] = [x - factor * y for x, y in zip(m[r], m[col])]
    return [m[i][k] / m[i][i] for i in range(k)]


def _features(point: tuple[str, int, int, float], kinds: tuple[str, ...]) -> list[float]:
    kind, closure_bytes, own_bytes, _ = point
    return [1.0, math.log(closure_bytes / MB + _FLOOR), math.log(own_bytes / MB + _FLOOR), *(float(kind == k) for k in kinds)]


def _fit(points: list[tuple[str, int, int, float]], kinds: tuple[str, ...]) -> tuple[list[float], float]:
    rows = [_features(p, kinds) for p in points]
    ys = [math.log(p[3]) for p in points]
    beta = least_squares(rows, ys)
    smear = statistics.fmean(math.exp(y - sum(b * x for b, x in zip(beta, r))) for r, y in zip(rows, ys))
    return beta, smear


def fit(samples: list[tuple[str, int, int, float]], *, machine: str, compiler: str, min_kind: int = 5) -> CostModel:
    """A model from (kind, closure bytes, own bytes, measured CPU seconds)
    samples (Note [rebuild cost model]); a kind other than cpp with at least
    `min_kind` samples gets a term of its own."""
    points = [p for p in samples if p[3] > 0]
    if len(points) < 5:
        raise ValueError("too few measured compiles to fit a cost model (at least 5)")
    counts = {k: sum(p[0] == k for p in points) for k in {p[0] for p in points}}
    kinds = tuple(sorted(k for k, n in counts.items() if k != "cpp" and n >= min_kind))
    beta, smear = _fit(points, kinds)
    errors, predicted = [], []
    for i, p in enumerate(points):
        bi, si = _fit(points[:i] + points[i + 1:], kinds)
        guess = math.exp(sum(b * x for b, x in zip(bi, _features(p, kinds)))) * si
        predicted.append(guess)
        errors.append(abs(guess - p[3]) / p[3])
    total = sum(p[3] for p in points)
    f = Fit(beta[0], beta[1], beta[2], smear, len(points), statistics.median(errors), sum(e <= 0.5 for e in errors) / len(errors),
            sum(predicted) / total - 1, dict(zip(kinds, beta[3:])))
    return CostModel(f, machine, compiler, tuple(sorted(counts)))
