"""Many ranks (Note [stragglers] in kernelmap.trace.ranks): two real ranks and
eight written here, merged the same whether each rank is read here, in
parallel processes, or on a Dask cluster on loopback (`--scheduler`); the
rank the collectives waited for is named, and each rank's kernel time."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_kernelmap

DATA = Path(__file__).resolve().parent / "data"
REAL = [DATA / "hta-timeline_analysis-sampled_rank-0.json.gz", DATA / "hta-trace_filter-sampled_rank-1.json.gz"]
SLOW_RANK = 5
COLLECTIVES = 40


def write_rank(path: Path, rank: int) -> Path:
    """A rank of eight: per step an all-reduce after a matmul; every rank's
    matmul takes as long but SLOW_RANK's, so the others wait in the
    all-reduce for it (theirs last 100 us, its own 10 us)."""
    events = [{"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "main"}}]
    for i in range(COLLECTIVES):
        t = i * 1000.0
        for k, (op, kernel, dur) in enumerate((("aten::mm", "ampere_sgemm_128x64_tn", 300.0 + rank),
                                                ("c10d::allreduce_", "ncclKernel_AllReduce_RING_LL_Sum_float", 10.0 if rank == SLOW_RANK else 100.0))):
            corr = 2 * i + k
            start = t + 400 * k
            events += [
                {"ph": "X", "cat": "cpu_op", "name": op, "pid": 1, "tid": 1, "ts": start, "dur": 50, "args": {"External id": corr}},
                {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": start + 10, "dur": 5, "args": {"correlation": corr}},
                {"ph": "X", "cat": "kernel", "name": kernel, "pid": 0, "tid": 7, "ts": start + 20, "dur": dur,
                 "args": {"correlation": corr, "device": 0, "stream": 7}},
            ]
    path.write_text(json.dumps({"distributedInfo": {"rank": rank, "world_size": 8}, "traceEvents": events}))
    return path


@pytest.fixture(scope="module")
def eight(tmp_path_factory) -> list[Path]:
    folder = tmp_path_factory.mktemp("eight")
    return [write_rank(folder / f"rank{r}.json", r) for r in range(8)]


@pytest.fixture(scope="module")
def cluster():
    """A Dask cluster of two worker processes on loopback."""
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None) as c:
        yield c.scheduler_address


def test_eight_ranks_name_the_straggler_and_each_ranks_kernel_time(eight):
    from kernelmap.trace.ranks import summarize_ranks

    s = summarize_ranks(eight, workers=1, store=False)
    assert [r.rank for r in s.ranks] == list(range(8))
    assert len(s.collectives) == COLLECTIVES and all(len(c.us) == 8 for c in s.collectives)
    [first, *_] = s.stragglers
    assert (first.rank, first.last) == (SLOW_RANK, COLLECTIVES)
    assert first.wait_caused_us == pytest.approx(COLLECTIVES * 90.0)
    mm = next(k for k in s.kernels if k.name == "ampere_sgemm_128x64_tn")
    assert dict(mm.us) == {r: pytest.approx(COLLECTIVES * (300.0 + r)) for r in range(8)}
    text = s.to_text(width=160)
    assert "Stragglers" in text and "GPU kernels per rank" in text


def test_ranks_merge_alike_here_in_processes_and_on_a_cluster(eight, cluster, tmp_path):
    """Two real ranks and the eight: the same ranks/1 document read one at a
    time here, in two processes, and on the loopback Dask cluster (through
    the command's --scheduler)."""
    from kernelmap.trace import load
    from kernelmap.trace.ranks import summarize_ranks

    for paths in (REAL, eight):
        here = summarize_ranks(paths, lambda p: load(p)).to_json()
        assert summarize_ranks(paths, workers=2).to_json() == here
        assert summarize_ranks(paths, scheduler=cluster).to_json() == here
        done = run_kernelmap("trace", *(a for p in paths for a in ("--from", str(p))), "--scheduler", cluster, "--json")
        assert done.returncode == 0, done.stderr[-800:]
        assert json.loads(done.stdout) == here


def test_bad_cluster_options_are_one_line(eight, tmp_path):
    done = run_kernelmap("trace", "--from", str(eight[0]), "--from", str(eight[1]), "--scheduler", "tcp://127.0.0.1:9")
    assert done.returncode == 2 and done.stderr.startswith("kernelmap: error: cannot reach the Dask scheduler") and done.stderr.count("\n") == 1
    done = run_kernelmap("trace", "--from", str(eight[0]), "--workers", "2")
    assert done.returncode == 2 and "give more than one --from" in done.stderr
    broken = tmp_path / "broken.json"
    broken.write_text('{"traceEvents": [{"ph": "X"')
    done = run_kernelmap("trace", "--from", str(eight[0]), "--from", str(broken), "--workers", "2")
    assert done.returncode == 2 and done.stderr.startswith("kernelmap: error: broken.json: truncated") and done.stderr.count("\n") == 1
