"""The trace's text view answers DESIGN.md's fourth question on its first
screen (40 lines at 100 columns), without --top: per operator, which kernels
ran, how long, where their source is, and whether it is open or closed. A
real GPU trace (ResNet-50 on an H100) and a CPU run under the profiler; each
file:line shown holds the kernel it names, read from the tree itself."""

from __future__ import annotations

import json
import re

import pytest

from tests.conftest import ROOT, run_kernelmap
from tests.graph.conftest import TREE_NAME, indexed_tree  # noqa: F401 - the shared indexed tree

SCREEN, WIDTH = 40, 100
GPU_TRACE = ROOT / "tests/trace/cuda/resnet50_fwd_fp32_nobench.json.gz"
CPU_CODE = ("import torch; m = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Flatten(), "
            "torch.nn.Linear(8 * 30 * 30, 10)); m(torch.randn(4, 3, 32, 32))")


def _run(*args: str) -> str:
    done = run_kernelmap("trace", *args, "--source", TREE_NAME)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def _holds(tree, location: str, name: str) -> bool:
    path, line = location.rsplit(":", 1)
    text = (tree.root / path).read_text(errors="replace").splitlines()[int(line) - 1]
    return name.rsplit("::", 1)[-1] in text


def _ms(us: float) -> str:
    return f"{us / 1000:.3f}"


@pytest.fixture(scope="module")
def gpu(indexed_tree):
    doc = json.loads(_run("--from", str(GPU_TRACE), "--no-tree", "--json"))
    text = _run("--from", str(GPU_TRACE), "--width", str(WIDTH))
    return doc["summary"], text.splitlines()[:SCREEN]


def test_a_gpu_trace_answers_on_the_first_screen(gpu, indexed_tree):
    summary, screen = gpu
    assert all(len(line) <= WIDTH for line in screen)
    gpu_time = summary["gpu_time"]
    assert any(f"GPU time {_ms(gpu_time['total_us'])} ms" in line for line in screen)
    launching = sorted((r for r in summary["ops"] if r["kernels"]), key=lambda r: -r["device_us"])
    text = "\n".join(screen)
    for row in launching[:5]:  # the five operators with the most GPU time, and how long
        assert any(line.startswith(f"{row['name']}  {row['calls']} call") and f"{_ms(row['device_us'])} ms GPU" in line
                   for line in screen), row["name"]
        assert f"{row['kernel']} (" in text and row["source"] in text  # the kernel that served it, where it is
        if not row["source"].endswith(".yaml:548"):
            assert _holds(indexed_tree, row["source"], row["kernel"]), row
        top = row["kernels"][0]
        assert f"{top['launches']}x " in text
        if re.search(r":\d+$", top["source"] or ""):
            assert top["source"] in text  # an open kernel: its source, at a line of the tree
            assert (indexed_tree.root / top["source"].rsplit(":", 1)[0]).is_file()
        else:
            assert f"[{top['source']} (" in text  # a library's kernel: the library, open or closed
    conv = next(line for line in screen if line.startswith("aten::cudnn_convolution "))
    assert conv.endswith("ends in cuDNN (closed)")


@pytest.fixture(scope="module")
def cpu(indexed_tree, tmp_path_factory):
    """A CPU run under the profiler, kept as a trace file so that the text and
    the JSON read the same times."""
    recorded = tmp_path_factory.mktemp("cpu-trace") / "run.json"
    _run("-c", CPU_CODE, "--no-tree", "--no-summary", "--export-chrome", str(recorded))
    doc = json.loads(_run("--from", str(recorded), "--no-tree", "--json"))
    text = _run("--from", str(recorded), "--no-tree", "--width", str(WIDTH))
    return doc["summary"], text.splitlines()[:SCREEN]


def test_a_cpu_run_answers_on_the_first_screen(cpu, indexed_tree):
    summary, screen = cpu
    assert all(len(line) <= WIDTH for line in screen)
    text = "\n".join(screen)
    # the operators that did the work (time of their own), each with its kernel at a line that holds it
    for name in ("aten::addmm", "aten::mkldnn_convolution"):
        row = next(r for r in summary["ops"] if r["name"] == name)
        line = next(line for line in screen if line.startswith(f"{name}  "))
        assert f"{_ms(row['self_us'])} ms self" in line
        assert f"{row['kernel']} (CPU)  @ {row['source']}" in text and _holds(indexed_tree, row["source"], row["kernel"])
        assert line.endswith(f"ends in {row['library']} ({'closed' if row['closed'] else 'open'})" if row["library"] else "ATen (open)")
