"""The one timer the benches share: median wall and CPU time of a command run
as its own process, so every bench compares like with like in the same run."""

from __future__ import annotations

import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path


def wall(cmd: list[str], runs: int, env: dict[str, str] | None = None) -> tuple[float, float]:
    """Median wall time and median CPU time (user + system, the command and
    every process it waited for) of `runs` runs."""
    walls, cpus = [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        walls.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    return statistics.median(walls), statistics.median(cpus)


def option(name: str) -> Path | None:
    """Take `NAME PATH` out of the command line; None when absent."""
    if name in sys.argv:
        i = sys.argv.index(name)
        value = Path(sys.argv[i + 1])
        del sys.argv[i : i + 2]
        return value
    return None


def tree_root() -> Path:
    """The tree given as the first argument, else the 2.6.0 test tree (fetched once)."""
    if len(sys.argv) > 1:
        return Path(sys.argv[1])
    repo = Path(__file__).resolve().parents[1]
    out = subprocess.run([str(repo / "scripts/fetch-test-tree")], capture_output=True, text=True, check=True)
    return Path(out.stdout.strip().splitlines()[-1])
