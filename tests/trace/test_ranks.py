"""Two ranks of one real distributed run (tests/trace/data) read together:
per-rank summaries, collectives matched across ranks, per-rank differences;
a FIFO given as --from is refused."""

from __future__ import annotations

import gzip
import json
import os
from collections import defaultdict
from pathlib import Path

from tests.conftest import run_kernelmap

DATA = Path(__file__).resolve().parent / "data"
RANK0 = DATA / "hta-timeline_analysis-sampled_rank-0.json.gz"
RANK1 = DATA / "hta-trace_filter-sampled_rank-1.json.gz"


def nccl_kernels(path: Path) -> list[tuple[str, float]]:
    with gzip.open(path) as f:
        events = json.load(f)["traceEvents"]
    nccl = [e for e in events if e.get("cat") == "kernel" and e["name"].startswith("nccl")]
    return [(e["name"], e["dur"]) for e in sorted(nccl, key=lambda e: e["ts"])]


def test_two_ranks_merged_with_collectives_matched():
    r = run_kernelmap("trace", "--from", str(RANK0), "--from", str(RANK1), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["kernelmap"] == "ranks/1"
    assert [x["rank"] for x in doc["ranks"]] == [0, 1]  # from each trace's distributedInfo
    # Ground truth from the files: the n-th launch of each NCCL kernel on each rank.
    expected = defaultdict(dict)
    for rank, path in ((0, RANK0), (1, RANK1)):
        seen = defaultdict(int)
        for name, dur in nccl_kernels(path):
            expected[(name, seen[name])][str(rank)] = dur
            seen[name] += 1
    matched = {(c["name"], c["index"]): c for c in doc["collectives"]}
    assert set(matched) == {k for k, v in expected.items() if len(v) == 2}
    for key, c in matched.items():
        assert c["us"] == {r: round(d, 3) for r, d in expected[key].items()}
        assert c["slowest"] == int(max(c["us"], key=c["us"].get))
    for rank_row, path in zip(doc["ranks"], (RANK0, RANK1)):
        assert round(rank_row["collective_us"], 3) == round(sum(d for _, d in nccl_kernels(path)), 3)
    assert doc["differences"] and all(d["spread_us"] > 0 for d in doc["differences"])


def test_a_folder_is_its_traces_and_a_fifo_is_refused(tmp_path):
    for p in (RANK0, RANK1):
        (tmp_path / p.name).write_bytes(p.read_bytes())
    r = run_kernelmap("trace", "--from", str(tmp_path), "--top", "3")
    assert r.returncode == 0, r.stderr
    assert "Collectives matched across ranks" in r.stdout
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    r = run_kernelmap("trace", "--from", str(fifo))
    assert r.returncode == 2 and r.stderr == f"kernelmap: error: --from {fifo} is not a regular file\n"


def test_one_trace_twice_is_refused_and_a_rank_claimed_twice_is_said(tmp_path):
    """The same file twice would double every figure: refused. Two files whose
    traces say one rank (a copy of rank 0's, read here) are both kept, the
    second numbered apart, and a note says so, in the text and the document."""
    with gzip.open(RANK0) as f:
        assert json.load(f)["distributedInfo"]["rank"] == 0
    r = run_kernelmap("trace", "--from", str(RANK0), "--from", str(RANK0.parent / "." / RANK0.name))
    assert r.returncode == 2 and r.stderr.startswith("kernelmap: error: --from names one trace twice:") and r.stderr.count("\n") == 1
    copy = tmp_path / "copy-of-rank-0.json.gz"
    copy.write_bytes(RANK0.read_bytes())
    r = run_kernelmap("trace", "--from", str(RANK0), "--from", str(copy), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert [x["rank"] for x in doc["ranks"]] == [0, 1]
    assert doc["notes"] == [f"{copy.name} says it is rank 0, which {RANK0.name} says too: shown as rank 1"]
    text = run_kernelmap("trace", "--from", str(RANK0), "--from", str(copy), "--top", "1")
    assert text.returncode == 0 and text.stdout.startswith(f"note: {copy.name} says it is rank 0")


def test_ranks_and_kernel_answers_are_documents_that_load_back(tmp_path):
    """ranks/1 and kernel/1 are in the answer table: each document loads back
    into an equal answer, renders the same text, and `render FILE` shows it."""
    from kernelmap import answers
    from kernelmap.kernels import KernelResolver
    from kernelmap.render import render
    from kernelmap.trace import load
    from kernelmap.trace.ranks import summarize_ranks

    summary = summarize_ranks([RANK0, RANK1], load)
    doc = summary.to_json()
    again = answers.load(doc)
    assert again.to_json() == doc
    assert render(again, "text", width=140) == render(summary, "text", width=140)
    assert "Collectives matched across ranks" in render(again, "text", width=140)
    kernel = KernelResolver().resolve("ncclKernel_AllReduce_RING_LL_Sum_float")
    loaded = answers.load(kernel.to_json())
    assert loaded == kernel and "NCCL (open)" in render(loaded, "text")
    saved = tmp_path / "ranks.json"
    saved.write_text(json.dumps(doc))
    r = run_kernelmap("render", str(saved), "--width", "140")
    assert r.returncode == 0, r.stderr
    assert r.stdout == render(summary, "text", width=140)
