"""The one timer the benches share: median wall and CPU time of a command run
as its own process, so every bench compares like with like in the same run."""

from __future__ import annotations

import resource
import statistics
import subprocess
import time


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
