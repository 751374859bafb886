"""Benchmark: importing the largest of the real traces (tests/trace/data)
with kernelmap (read, tree, resolution of every op and kernel, summary)
against Holistic Trace Analysis 0.5.0 (`TraceAnalysis` loading the same file,
a bench-only dependency: `pip install HolisticTraceAnalysis==0.5.0`), in the
same run, each in a fresh process: median wall time and peak RSS.

kernelmap asks the installed torch's dispatcher once per (op, device, dtype,
grad mode) and caches the answers per torch install (Note [dispatch facts
cache] in kernelmap.trace.resolve): the first trace read after installing
torch imports it, later ones do not. Both are measured: "cold" with an empty
dispatcher cache (the catalog cache kept), "warm" with the filled one.

    python benches/bench_trace_hta.py [--repeat 3] [--source debian-2.6.0]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "trace" / "data"

KERNELMAP = """
import sys
from kernelmap.trace import load
t = load(sys.argv[1], source_tree=sys.argv[2] or None)
s = t.summary()
print(s.gpu.fraction(s.gpu.source_us + s.gpu.library_us))
"""
HTA = """
import sys, logging
logging.disable(logging.CRITICAL)
from hta.trace_analysis import TraceAnalysis
TraceAnalysis(trace_dir=sys.argv[1])
"""


def run(code: str, *args: str, env: dict | None = None) -> tuple[float, float, str]:
    """(wall seconds, peak RSS MB, stdout) of `python -c code args` in a fresh process."""
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env={**os.environ, **(env or {})})
    out = proc.stdout.read() if proc.stdout else ""
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"benchmark command failed ({proc.returncode})")
    return wall, usage.ru_maxrss / 1024, out.strip()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--source", default="", help="source tree for kernel locations (default: none selected)")
    a = ap.parse_args()
    largest = max(DATA.glob("hta-*.json.gz"), key=lambda p: p.stat().st_size)
    with tempfile.TemporaryDirectory() as d:
        # HTA reads every trace in a folder: give it this one alone.
        shutil.copy(largest, Path(d) / largest.name)
        cold_cache = Path(d) / "cache"
        cold_cache.mkdir()
        from kernelmap import env

        for kept in env.cache_dir().iterdir() if env.cache_dir().is_dir() else ():
            if kept.name != "trace":  # everything but the dispatcher's answers
                os.symlink(kept, cold_cache / kept.name)
        run(KERNELMAP, str(largest), a.source)  # fills the dispatcher cache if this install has none yet
        cold = [run(KERNELMAP, str(largest), a.source, env={"KERNELMAP_CACHE_DIR": str(cold_cache)})]
        km = [run(KERNELMAP, str(largest), a.source) for _ in range(a.repeat)]
        hta = [run(HTA, d) for _ in range(a.repeat)]
    kw, km_mb = statistics.median(w for w, _, _ in km), max(m for _, m, _ in km)
    hw, hta_mb = statistics.median(w for w, _, _ in hta), max(m for _, m, _ in hta)
    print(f"trace: {largest.name} ({largest.stat().st_size / 1e6:.1f} MB gzip)")
    cw, cold_mb = cold[0][0], cold[0][1]
    print(f"kernelmap: {kw:.2f} s, {km_mb:.0f} MB peak; GPU time named: {float(km[0][2]):.1%}")
    print(f"kernelmap, empty dispatcher cache (imports torch): {cw:.2f} s, {cold_mb:.0f} MB peak")
    print(f"HTA 0.5.0: {hw:.2f} s, {hta_mb:.0f} MB peak")
    print(f"ratio kernelmap / HTA: time {kw / hw:.2f}x, memory {km_mb / hta_mb:.2f}x "
          f"(empty dispatcher cache: time {cw / hw:.2f}x, memory {cold_mb / hta_mb:.2f}x)")


if __name__ == "__main__":
    main()
