"""Benchmark: what `scaffold` costs a user, against what they would do by hand,
in the same run.

1. Scaffold + first build + load of aten::relu's project (kernelmap's
   `scaffold` then `load_extension`, in a fresh process) against a plain
   `torch.utils.cpp_extension.load` of the same C++ source (fresh process,
   fresh build folder). Both compile the same file with the same flags; the
   difference is what kernelmap adds (catalog, templates, package import,
   fake and autograd registration).
2. The cost of routing calls through an override: `torch.relu(x)` while
   `override("aten::relu", "kernelmap_ext::benchrelu", key="CPU")` is active,
   against calling `torch.ops.kernelmap_ext.benchrelu(x)` directly, and against
   ATen's own relu, on a small tensor (dispatch overhead dominates) and a large one.

    python benches/bench_scaffold.py [--repeat 1]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SCAFFOLD_AND_BUILD = """
import sys
from kernelmap.extend import scaffold, load_extension
scaffold("aten::relu", "benchrelu", out=sys.argv[1])
load_extension(sys.argv[1])
"""

PLAIN_LOAD = """
import sys
from torch.utils import cpp_extension
cpp_extension.load(name="plainrelu", sources=[sys.argv[1]], extra_cflags=["-O3"], build_directory=sys.argv[2],
                   is_python_module=False)
"""

OVERHEAD = """
import sys, time, statistics, warnings
import torch
from kernelmap.extend import load_extension, override
load_extension(sys.argv[1])
custom = torch.ops.kernelmap_ext.benchrelu.default

def per_call(fn, x, n):
    for _ in range(10):
        fn(x)
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            fn(x)
        times.append((time.perf_counter() - t0) / n)
    return statistics.median(times)

for label, shape, n in (("small", (64,), 20000), ("large", (1024, 1024), 50)):
    x = torch.randn(shape)
    aten = per_call(torch.relu, x, n)
    direct = per_call(custom, x, n)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with override("aten::relu", "kernelmap_ext::benchrelu", key="CPU"):
            routed = per_call(torch.relu, x, n)
    print(label, aten, direct, routed)
"""


def run(code: str, *args: str, env: dict[str, str] | None = None) -> tuple[float, str]:
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise SystemExit(f"benchmark command failed: {done.stderr[-2000:]}")
    return time.perf_counter() - t0, done.stdout


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=1, help="builds of each kind (each takes a compile)")
    a = ap.parse_args()
    env = dict(os.environ, MAX_JOBS="1")
    ours, plain = [], []
    with tempfile.TemporaryDirectory() as d:
        for i in range(a.repeat):
            project = Path(d) / f"p{i}"
            wall, _ = run(SCAFFOLD_AND_BUILD, str(project), env=env)
            ours.append(wall)
            build = Path(d) / f"plain{i}"
            build.mkdir()
            wall, _ = run(PLAIN_LOAD, str(project / "csrc" / "benchrelu.cpp"), str(build), env=env)
            plain.append(wall)
        o, p = statistics.median(ours), statistics.median(plain)
        print(f"scaffold + first build + load (aten::relu)   {o:7.2f} s")
        print(f"plain cpp_extension.load of the same source   {p:7.2f} s")
        print(f"ratio                                          {o / p:7.2f}x")
        _, out = run(OVERHEAD, str(Path(d) / "p0"), env=env)
    print()
    print(f"{'per call':10s} {'aten::relu':>12s} {'custom op':>12s} {'overridden':>12s} {'override/custom':>16s} {'override/aten':>14s}")
    for line in out.strip().splitlines():
        label, aten, direct, routed = line.split()
        aten, direct, routed = float(aten), float(direct), float(routed)
        print(f"{label:10s} {aten * 1e6:10.2f}us {direct * 1e6:10.2f}us {routed * 1e6:10.2f}us {routed / direct:15.2f}x {routed / aten:13.2f}x")


if __name__ == "__main__":
    main()
