"""Benchmark `kernelmap compile` on the conv + batch norm + relu block
(examples/compile_block.py) against a plain `torch.compile` + profiler run of
the same code, measured in the same run. Each run, of either, starts with an
empty Inductor cache, so both compile from scratch. Goal: at most 1.3x.

    python benches/bench_compile.py [--runs N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

from timing import wall

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "compile_block.py"

REFERENCE = f"""
import runpy, torch
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
    runpy.run_path({str(EXAMPLE)!r}, run_name="__main__")
prof.key_averages()
"""


def fresh(cmd: list[str], runs: int) -> tuple[float, float]:
    """Median wall and CPU time, each run with its own empty Inductor cache."""
    walls, cpus = [], []
    for _ in range(runs):
        with tempfile.TemporaryDirectory(prefix="kernelmap-bench-") as d:
            env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=d)
            w, c = wall([*cmd, *(["--output-dir", d + "/km"] if "kernelmap" in cmd else [])], 1, env)
        walls.append(w)
        cpus.append(c)
    return statistics.median(walls), statistics.median(cpus)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1, help="runs of each (median reported)")
    args = parser.parse_args()
    py = sys.executable
    ref, ref_cpu = fresh([py, "-c", REFERENCE], args.runs)
    print(f"torch.compile + profiler (plain):     {ref:6.2f} s wall, {ref_cpu:6.2f} s cpu")
    km, km_cpu = fresh([py, "-m", "kernelmap", "compile", str(EXAMPLE), "--json"], args.runs)
    print(f"kernelmap compile examples/compile_block.py --json: {km:6.2f} s wall, {km_cpu:6.2f} s cpu"
          f"  = {km / ref:4.2f}x (wall), {km_cpu / ref_cpu:4.2f}x (cpu); goal <= 1.3x")
    print(f"cpus: {os.cpu_count()}; load average: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
