"""Benchmark generated code on demand, against `python -c "import torch"`
measured in the same run.

1. The first full regeneration for the installed torch (torchgen's ATen,
   autograd and Python-binding steps, then the index), in a fresh, empty
   cache directory, in its own process. Goal: within a few times the wall
   time of importing torch.
2. A warm `kernelmap gen aten::conv2d` (all layers, output discarded), in its
   own process. Goal: well under the time of importing torch, which it can
   only reach by never importing torch.

    python benches/bench_codegen.py [--runs N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time


def wall(cmd: list[str], runs: int, env: dict[str, str] | None = None) -> tuple[float, list[float]]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        times.append(time.perf_counter() - start)
    return statistics.median(times), times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="runs of each warm measurement (median reported)")
    parser.add_argument("--cold-runs", type=int, default=1, help="full regenerations, each in a new cache")
    args = parser.parse_args()

    py = sys.executable
    import_torch, _ = wall([py, "-c", "import torch"], args.runs)
    print(f'python -c "import torch":            {import_torch:6.2f} s (median of {args.runs})')

    with tempfile.TemporaryDirectory(prefix="kernelmap-bench-") as cache:
        env = dict(os.environ, KERNELMAP_CACHE_DIR=cache)
        # The catalog is the operator-name step, not codegen: fill it first so
        # the cold figure is the regeneration alone.
        subprocess.run([py, "-c", "from kernelmap.catalog import load_catalog; load_catalog()"], check=True, env=env)
        cold_times = []
        for i in range(args.cold_runs):
            regen = [py, "-c", "from kernelmap.codegen import generated_files; generated_files(regenerate=True)"]
            cold, _ = wall(regen, 1, env)
            cold_times.append(cold)
        cold = statistics.median(cold_times)
        print(
            f"first full regeneration:              {cold:6.2f} s  = {cold / import_torch:5.2f}x import torch"
            f"  (runs: {', '.join(f'{t:.2f}' for t in cold_times)})"
        )
        warm, _ = wall([py, "-m", "kernelmap", "gen", "aten::conv2d"], args.runs, env)
        print(f"warm kernelmap gen aten::conv2d:      {warm:6.2f} s  = {warm / import_torch:5.2f}x import torch")
        warm_one, _ = wall([py, "-m", "kernelmap", "gen", "aten::conv2d", "--layer", "binding", "--json"], args.runs, env)
        print(f"warm kernelmap gen ... binding --json: {warm_one:6.2f} s  = {warm_one / import_torch:5.2f}x import torch")
    print(f"cpus: {os.cpu_count()}; load average: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
