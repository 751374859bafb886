"""verify on ResNet-50 (examples/resnet50.py): aten::convolution on the CPU
swapped for a scaffolded custom operator whose kernel multiplies its result by
an extra argument `scale`. With scale 1 the outputs are identical; with another
value they differ; every convolution of the forward is routed to it."""

from __future__ import annotations

import json

import pytest
import torch

from kernelmap.extend import verify
from kernelmap.extend.compare import load_model_file

from .conftest import RESNET50

pytestmark = pytest.mark.slow

OVERRIDE = {"aten::convolution": "kernelmap_ext::myconv"}


@pytest.fixture(scope="module")
def conv_layers() -> int:
    factory, _ = load_model_file(RESNET50)
    return sum(isinstance(m, torch.nn.Conv2d) for m in factory().modules())


def test_neutral_parameter_gives_identical_outputs(myconv, conv_layers):
    report = verify(RESNET50, OVERRIDE, runs=1, load=[myconv.root], extra_args={"scale": 1.0})
    from kernelmap.render.verify import to_text

    text = to_text(report, width=200, color=False)
    assert report.outputs.identical, text
    assert report.calls_per_run == {"aten::convolution": conv_layers}
    assert report.original_s > 0 and report.override_s > 0
    assert report.passed and report.ops[0].error.identical and report.ops[0].sampled > 0
    assert any(line.startswith("outputs") and line.endswith("identical") for line in text.splitlines())
    assert text.splitlines()[-1] == "verdict    PASS: every result within tolerance"


def test_another_value_changes_the_outputs(myconv, conv_layers):
    report = verify(RESNET50, OVERRIDE, runs=1, load=[myconv.root], extra_args={"scale": 1.5})
    assert not report.outputs.identical
    assert report.outputs.max_rel > 1e-3
    assert report.calls_per_run == {"aten::convolution": conv_layers}


def test_backward_compares_gradients(myconv, conv_layers):
    report = verify(RESNET50, OVERRIDE, runs=1, backward=True, load=[myconv.root])
    assert report.gradients is not None
    assert report.gradients.identical and report.outputs.identical
    # the input's gradient and one per parameter
    factory, _ = load_model_file(RESNET50)
    assert report.gradients.count == 1 + len(list(factory().parameters()))
    assert report.calls_per_run == {"aten::convolution": conv_layers}


def test_the_command_reports_calls_and_differences(myconv, conv_layers, kernelmap_cli):
    """Loading the built library itself (.so) works as well as loading the project."""
    library = myconv.root / "build" / "jit" / "kernelmap_ext_myconv.so"
    assert library.is_file()
    done = kernelmap_cli("verify", str(RESNET50), "--load", str(library), "--override",
                         "aten::convolution=kernelmap_ext::myconv", "--extra-args", "scale=1.5", "--runs", "1", "--json")
    assert done.returncode == 1, done.stderr  # a scale of 1.5 is far outside tolerance
    report = json.loads(done.stdout)
    assert report["kernelmap"] == "verify/1" and report["passed"] is False
    assert report["ops"][0]["calls_per_run"] == conv_layers
    assert report["ops"][0]["extra_args"] == {"scale": 1.5}
    assert not report["outputs"]["identical"] and not report["outputs"]["within"]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--override", "aten::convolution=kernelmap_ext::myadd"], "kernelmap_ext::myadd cannot stand in for aten::convolution"),
        (["--override", "aten::convolution"], "--override takes OP=CUSTOM_OP"),
        (["--override", "aten::convolution=kernelmap_ext::myconv", "--extra-args", "shift=1"], "shift"),
        (["--override", "aten::convolution=kernelmap_ext::nothing"], "unknown name"),
    ],
)
def test_bad_overrides_are_one_line_and_status_2(myconv, myadd, kernelmap_cli, args, message):
    done = kernelmap_cli("verify", str(RESNET50), "--load", str(myconv.root), "--load", str(myadd.root), "--runs", "1", *args)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
