"""Warm static `kernelmap stack aten::conv2d --device cuda` and
`kernelmap callers cudnnConvolutionForward` against `python -c "import torch"`,
measured in the same run (median wall time of several runs each).

Goal: each at most 0.5x the time of importing torch. Needs a source tree
registered and indexed (`kernelmap source add`, `kernelmap index`); the bench
uses the real test tree from scripts/fetch-test-tree in a private cache.

    python benches/bench_graph.py [--runs N]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from timing import wall

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    tree = subprocess.run([str(ROOT / "scripts/fetch-test-tree")], capture_output=True, text=True, check=True).stdout.strip()
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "KERNELMAP_CACHE_DIR": cache}
        km = [sys.executable, "-m", "kernelmap"]
        subprocess.run(km + ["source", "add", tree], check=True, env=env, stdout=subprocess.DEVNULL)
        subprocess.run(km + ["index"], check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        subprocess.run(km + ["gen", "aten::conv2d"], check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        stack = km + ["stack", "aten::conv2d", "--device", "cuda"]
        callers = km + ["callers", "cudnnConvolutionForward"]
        for cmd in (stack, callers):  # warm
            subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
        reference, _ = wall([sys.executable, "-c", "import torch"], args.runs, env)
        print(f"import torch                                     {reference * 1000:8.1f} ms (median of {args.runs})")
        for label, cmd in (("stack aten::conv2d --device cuda", stack), ("callers cudnnConvolutionForward", callers)):
            ours, _ = wall(cmd, args.runs, env)
            ratio = ours / reference
            print(f"kernelmap {label:38} {ours * 1000:8.1f} ms  ratio {ratio:.2f}x (goal <= 0.50x): {'ok' if ratio <= 0.5 else 'MISSED'}")


if __name__ == "__main__":
    main()
