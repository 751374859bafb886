"""Benchmark one answer from a selected source tree (Note [graph versions]),
against `python -c "import torch"` measured in the same run.

1. First generation for a tree, in a fresh cache: its catalog first (not
   timed), then the sources step (bindings, Operators, Register<Key>,
   VariableType...) and the headers step (ops/<op>.h, TensorBody.h: about
   7,000 files), each with the tree's own torchgen, each in its own process.
2. Warm `stack torch.nn.Conv2d --device cuda`, `stack torch.add --device cpu
   --requires-grad` and `where aten::add.Tensor --static` with the tree
   selected, in the same cache once the tree is registered and indexed there
   (not timed). Goal: at most 0.5x importing torch.

    python benches/bench_tree_versions.py [--tree PATH] [--runs N]

The tree defaults to the test tree (Debian's 2.6.0, `scripts/fetch-test-tree`).
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
    parser.add_argument("--tree", default=None, help="a PyTorch source tree's directory (default: the test tree)")
    parser.add_argument("--runs", type=int, default=5, help="runs of each warm measurement (median reported)")
    args = parser.parse_args()

    py = sys.executable
    import_torch, import_cpu = wall([py, "-c", "import torch"], args.runs)
    print(f'python -c "import torch":                      {import_torch:6.2f} s wall, {import_cpu:6.2f} s cpu (median of {args.runs})')

    def ratio(label: str, seconds: float, cpu: float) -> None:
        print(f"{label:46s}{seconds:6.2f} s wall, {cpu:6.2f} s cpu  = {seconds / import_torch:5.2f}x import torch (wall), {cpu / import_cpu:5.2f}x (cpu)")

    if args.tree is None:
        fetch = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "fetch-test-tree")
        args.tree = subprocess.run([fetch], capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
    tree = os.path.abspath(args.tree)
    with tempfile.TemporaryDirectory(prefix="kernelmap-bench-") as cache:
        env = dict(os.environ, KERNELMAP_CACHE_DIR=cache)
        subprocess.run([py, "-c", f"from kernelmap.catalog import load_catalog; load_catalog(tree={tree!r})"], check=True, env=env)
        sources = wall([py, "-c", f"from kernelmap.codegen import generated_files; generated_files(tree={tree!r})"], 1, env)
        headers = wall([py, "-c", f"from kernelmap.codegen.headers import generated_headers; generated_headers({tree!r})"], 1, env)
        ratio("first generation, sources step:", *sources)
        ratio("first generation, headers step:", *headers)
        ratio("first generation, with headers:", sources[0] + headers[0], sources[1] + headers[1])
        print(f"  headers add {headers[0] / sources[0] * 100:.0f}% to the sources step's wall time")

        subprocess.run([py, "-m", "kernelmap", "source", "add", tree], check=True, stdout=subprocess.DEVNULL, env=env)
        subprocess.run([py, "-m", "kernelmap", "index"], check=True, stdout=subprocess.DEVNULL, env=env)
        warm_runs(py, tree, env, args.runs, ratio)
    print(f"cpus: {os.cpu_count()}; load average: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")


def warm_runs(py: str, tree: str, env: dict, runs: int, ratio) -> None:
    for label, cmd in (
        ("warm stack torch.nn.Conv2d --device cuda:", ["stack", "torch.nn.Conv2d", "--device", "cuda", "--source", tree]),
        ("warm stack torch.add --requires-grad:", ["stack", "torch.add", "--device", "cpu", "--requires-grad", "--source", tree]),
        ("warm where aten::add.Tensor --static:", ["where", "aten::add.Tensor", "--static", "--source", tree]),
    ):
        subprocess.run([py, "-m", "kernelmap", *cmd], check=True, stdout=subprocess.DEVNULL, env=env)  # warm the caches
        ratio(label, *wall([py, "-m", "kernelmap", *cmd], runs, env))


if __name__ == "__main__":
    main()
