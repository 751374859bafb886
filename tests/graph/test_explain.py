"""`kernelmap explain` on the real 2.6.0 tree and the regenerated files:
each step's location holds the code the step names."""

from __future__ import annotations

import json
import re

from kernelmap import graph
from kernelmap.graph.explain import explain
from tests.conftest import run_kernelmap
from tests.graph.conftest import TREE_NAME, no_tree_cache


def by_title(result):
    return {s.title: s for s in result.steps}


def text_at(step, generated):
    path = step.location.disk_path
    if path is None or not path.exists():
        path = generated.root / step.location.path
    return path.read_text(errors="replace").splitlines()[step.location.line - 1]


def test_add_cpu_anatomy(context, generated):
    steps = by_title(explain("aten::add.Tensor", context("cpu")))
    assert "PythonArgParser" in steps["Python argument parsing"].summary
    assert "AddBackward0" in steps["autograd"].summary
    meta = steps["output allocation (structured meta)"]
    assert "TORCH_META_FUNC2(add, Tensor)" in text_at(meta, generated)
    assert "TORCH_IMPL_FUNC(ufunc_add_CPU)" in text_at(steps["native kernel"], generated)
    assert "add_stub" in steps["stub"].summary
    dtype = steps["dtype switch"]
    assert "Float" in dtype.summary and "AT_DISPATCH_SWITCH" in text_at(dtype, generated) + dtype.excerpt
    loop = steps["device loop / launch"]
    assert loop.location.path.endswith("UfuncCPUKernel_add.cpp")
    assert re.search(r"\badd\(", steps["inner loop"].excerpt)


def test_conv2d_cuda_anatomy_shows_backend_selection_and_cudnn(context, generated):
    result = explain("aten::conv2d", context("cuda"))
    steps = by_title(result)
    assert "aten::cudnn_convolution" in steps["decomposition"].summary
    selection = steps["backend selection"]
    assert re.search(r"select_conv_backend|ConvBackend|use_cudnn", text_at(selection, generated))
    assert "ConvBackend::Cudnn" in steps["branch taken"].summary
    vendor = steps["vendor call"]
    assert "closed source" in vendor.summary and "cudnn" in vendor.summary
    assert vendor.summary.split()[0] in text_at(vendor, generated)


def test_explain_cli_json(indexed_tree, generated):
    out = run_kernelmap("explain", "aten::mul.Tensor", "--device", "cpu", "--source", TREE_NAME, "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["kernelmap"] == "explain/2"
    titles = [s["title"] for s in doc["steps"]]
    assert titles[0] == "Python argument parsing" and "dtype switch" in titles
    bad = run_kernelmap("explain", "aten::no_such_op", "--source", TREE_NAME)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr


def test_explain_without_a_tree_says_which_steps_are_missing(tmp_path, monkeypatch, generated):
    monkeypatch.setenv("KERNELMAP_CACHE_DIR", str(no_tree_cache(tmp_path, generated)))
    monkeypatch.delenv("KERNELMAP_SOURCE", raising=False)
    result = explain("aten::relu", graph.open_context("cpu"))
    assert any("need a source tree" in n for n in result.notes)
    assert all(s.title not in ("native kernel", "dtype switch") for s in result.steps)
