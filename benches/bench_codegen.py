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
import subprocess
import sys
import tempfile

from timing import wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="runs of each warm measurement (median reported)")
    parser.add_argument("--cold-runs", type=int, default=1, help="full regenerations, each in a new cache")
    args = parser.parse_args()

    py = sys.executable
    import_torch, import_cpu = wall([py, "-c", "import torch"], args.runs)
    print(f'python -c "import torch":               {import_torch:6.2f} s wall, {import_cpu:6.2f} s cpu (median of {args.runs})')

    with tempfile.TemporaryDirectory(prefix="kernelmap-bench-") as cache:
        env = dict(os.environ, KERNELMAP_CACHE_DIR=cache)
        # The catalog is the operator-name step, not codegen: fill it first so
        # the cold figure is the regeneration alone.
        subprocess.run([py, "-c", "from kernelmap.catalog import load_catalog; load_catalog()"], check=True, env=env)
        regen = [py, "-c", "from kernelmap.codegen import generated_files; generated_files(regenerate=True)"]
        cold, cold_cpu = wall(regen, args.cold_runs, env)
        print(
            f"first full regeneration:                {cold:6.2f} s wall, {cold_cpu:6.2f} s cpu"
            f"  = {cold / import_torch:5.2f}x import torch (wall), {cold_cpu / import_cpu:5.2f}x (cpu)"
        )
        for label, cmd in (
            ("warm kernelmap gen aten::conv2d:        ", ["gen", "aten::conv2d"]),
            ("warm kernelmap gen ... binding --json:  ", ["gen", "aten::conv2d", "--layer", "binding", "--json"]),
        ):
            warm, warm_cpu = wall([py, "-m", "kernelmap", *cmd], args.runs, env)
            print(
                f"{label}{warm:6.2f} s wall, {warm_cpu:6.2f} s cpu"
                f"  = {warm / import_torch:5.2f}x import torch (wall), {warm_cpu / import_cpu:5.2f}x (cpu)"
            )
    print(f"cpus: {os.cpu_count()}; load average: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
