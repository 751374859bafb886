"""Warm static `kernelmap where aten::conv2d --static` against `python -c "import torch"`,
measured in the same run (median wall time of several runs each).

Goal: the warm static lookup takes at most 0.5x the time of importing torch,
which it can only do by never importing torch.

    python benches/bench_where.py [--runs N]
"""

from __future__ import annotations

import argparse
import subprocess
import sys

from timing import wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    where = [sys.executable, "-m", "kernelmap", "where", "aten::conv2d", "--static"]
    subprocess.run(where, check=True, stdout=subprocess.DEVNULL)  # warm the cache
    reference, _ = wall([sys.executable, "-c", "import torch"], args.runs)
    ours, _ = wall(where, args.runs)
    ratio = ours / reference
    print(f"import torch                          {reference * 1000:8.1f} ms (median of {args.runs})")
    print(f"kernelmap where aten::conv2d --static {ours * 1000:8.1f} ms (median of {args.runs})")
    print(f"ratio {ratio:.2f}x (goal <= 0.50x): {'ok' if ratio <= 0.5 else 'MISSED'}")


if __name__ == "__main__":
    main()
