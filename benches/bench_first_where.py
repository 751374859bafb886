"""The first `kernelmap where torch.add` in a fresh cache (it builds the
catalog with torchgen and imports torch for the live dispatcher) against
`python -c "import torch"`, measured in the same run, alternately (median
wall and CPU time of several runs each, every `where` in a new empty cache).

Goal: the first `where` takes at most 2.5x the time of importing torch (about
10 s where importing torch takes 4 s): the catalog's build runs beside the
import of torch, not before it.

    python benches/bench_first_where.py [--runs N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile

from timing import wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    refs, ours, ref_cpu, our_cpu = [], [], [], []
    for _ in range(args.runs):
        w, c = wall([sys.executable, "-c", "import torch"], 1)
        refs.append(w)
        ref_cpu.append(c)
        with tempfile.TemporaryDirectory(prefix="kernelmap-first-") as cache:
            env = {**os.environ, "KERNELMAP_CACHE_DIR": cache}
            w, c = wall([sys.executable, "-m", "kernelmap", "where", "torch.add"], 1, env=env)
        ours.append(w)
        our_cpu.append(c)
    reference, first = statistics.median(refs), statistics.median(ours)
    ratio = first / reference
    print(f"import torch                          {reference:6.2f} s wall, {statistics.median(ref_cpu):6.2f} s CPU (median of {args.runs})")
    print(f"first kernelmap where torch.add       {first:6.2f} s wall, {statistics.median(our_cpu):6.2f} s CPU (median of {args.runs})")
    print(f"ratio {ratio:.2f}x (goal <= 2.50x): {'ok' if ratio <= 2.5 else 'MISSED'}")


if __name__ == "__main__":
    main()
