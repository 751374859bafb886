"""Warm traces: `trace --warmup N` runs the target N times unprofiled first,
and `--steps M` profiles M runs; the cold first call is not in the trace. The
facts are read from the trace's own operators (their calls and times)."""

from __future__ import annotations

import json
import sys

import pytest

import kernelmap

STEP = '''
import torch

calls = 0


def step():
    """The first call does work later calls skip, as a cold first call does (lazy initialisation)."""
    global calls
    calls += 1
    if calls == 1:
        torch.ones(4096).cumsum(0)
    return torch.ones(8).neg()
'''


@pytest.fixture
def step_module(tmp_path, monkeypatch):
    (tmp_path / "warm_step.py").write_text(STEP)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    sys.modules.pop("warm_step", None)
    yield "warm_step"
    sys.modules.pop("warm_step", None)


def ops(trace) -> dict[str, dict]:
    return {row["name"]: row for row in trace.summary().to_json()["ops"]}


def test_the_api_warmup_leaves_the_cold_call_out(step_module):
    import importlib

    module = importlib.import_module(step_module)
    cold = ops(kernelmap.trace(module.step))
    assert cold["aten::cumsum"]["calls"] == 1 and cold["aten::neg"]["calls"] == 1
    module.calls = 0
    warm = ops(kernelmap.trace(module.step, warmup=1, steps=3))
    assert "aten::cumsum" not in warm  # only the first, unprofiled call ran it
    assert warm["aten::neg"]["calls"] == 3
    assert module.calls == 4


def test_the_command_runs_warmup_and_steps(step_module, kernelmap_cli):
    done = kernelmap_cli("trace", f"{step_module}:step", "--warmup", "2", "--steps", "2", "--json")
    assert done.returncode == 0, done.stderr
    rows = {row["name"]: row for row in json.loads(done.stdout)["summary"]["ops"]}
    assert "aten::cumsum" not in rows and rows["aten::neg"]["calls"] == 2


def test_the_summary_comes_before_the_tree(step_module, kernelmap_cli):
    done = kernelmap_cli("trace", f"{step_module}:step", "--width", "200")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    first_summary = next(i for i, line in enumerate(lines) if line.lstrip().startswith("operator"))
    first_tree = next(i for i, line in enumerate(lines) if "aten::neg" in line and "warm_step" not in line and i > first_summary
                      and not line.lstrip().startswith("aten::neg "))
    assert first_summary < first_tree


@pytest.mark.parametrize("args, message", [(["--warmup", "-1"], "--warmup"), (["--steps", "0"], "--steps")])
def test_bad_counts_are_one_line(step_module, kernelmap_cli, args, message):
    done = kernelmap_cli("trace", f"{step_module}:step", *args)
    assert done.returncode == 2 and message in done.stderr


def test_warmup_needs_code_to_run(kernelmap_cli, tmp_path):
    trace_file = tmp_path / "t.json"
    trace_file.write_text('{"traceEvents": []}')
    done = kernelmap_cli("trace", "--from", str(trace_file), "--warmup", "1")
    assert done.returncode == 2 and "recorded already" in done.stderr
