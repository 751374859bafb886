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
    assert "outputs    output float32[1x1000]: identical" in text.splitlines()
    assert text.splitlines()[-1] == "verdict    PASS: every result within tolerance"


def test_another_value_changes_the_outputs(myconv, conv_layers):
    report = verify(RESNET50, OVERRIDE, runs=1, load=[myconv.root], extra_args={"scale": 1.5})
    assert not report.outputs.identical
    assert report.outputs.max_rel > 1e-3 and not report.outputs.within
    assert report.calls_per_run == {"aten::convolution": conv_layers}


def _off_by_1e3_batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps):
    """aten::native_batch_norm in evaluation (ResNet-50's), its output 1e-3 too large."""
    assert not training
    shape = (1, -1) + (1,) * (input.dim() - 2)
    out = (input - running_mean.view(shape)) * torch.rsqrt(running_var.view(shape) + eps) * weight.view(shape) + bias.view(shape)
    return out * 1.001, input.new_empty(0), input.new_empty(0)  # no statistics saved in evaluation, as ATen


def test_the_unmodified_batch_norm_scaffold_passes(mybn):
    """Its loop sums in another order than ATen's: each call within assert_close,
    and the model's output, which the element-wise rule failed (Note [verify tolerances]),
    within in norm."""
    report = verify(RESNET50, {"aten::native_batch_norm": mybn.op}, runs=1, load=[mybn.root])
    from kernelmap.render.verify import to_text

    text = to_text(report, width=200, color=False)
    assert report.calls_per_run == {"aten::native_batch_norm": 53}
    assert report.ops[0].error.within and report.ops[0].error.rule == "elementwise"
    (out,) = report.outputs.tensors
    assert out.name == "output" and out.rule == "norm" and out.dtype == "float32" and out.shape == (1, 1000)
    assert out.within and report.passed, text
    assert text.splitlines()[-1] == "verdict    PASS: every result within tolerance"


def test_the_unmodified_direct_convolution_passes(mydconv, tmp_path):
    """The ResNet-50 of the example at a 64x64 input: the same 53 convolutions,
    each summing as many terms as at 224x224 (channels x kernel), in a twelfth
    of the direct loop's time."""
    small = tmp_path / "resnet50_64.py"
    small.write_text(f"import runpy\nimport torch\n_example = runpy.run_path({str(RESNET50)!r})\n\n"
                     "def model():\n    return _example['resnet50']()\n\n"
                     "def example_input():\n    return torch.randn(1, 3, 64, 64)\n")
    report = verify(small, {"aten::convolution": mydconv.op}, runs=1, load=[mydconv.root])
    assert report.calls_per_run == {"aten::convolution": 53}
    assert report.ops[0].error.within
    (out,) = report.outputs.tensors
    assert not out.identical and out.within and report.passed, out


@pytest.mark.parametrize("kernel", ["convolution", "batch_norm"])
def test_a_kernel_off_by_1e_3_fails(myconv, kernel):
    """Each call outside assert_close's rule, and the model's output outside in norm too."""
    if kernel == "convolution":
        report = verify(RESNET50, OVERRIDE, runs=1, load=[myconv.root], extra_args={"scale": 1.001})
    else:
        report = verify(RESNET50, {"aten::native_batch_norm": _off_by_1e3_batch_norm}, runs=1)
    assert not report.passed
    assert not report.ops[0].error.within
    (out,) = report.outputs.tensors
    assert not out.within and out.share > 10 and out.norm_rel > 1e-4, out
    from kernelmap.render.verify import to_text

    lines = to_text(report, width=300, color=False).splitlines()
    (line,) = [ln for ln in lines if ln.startswith("outputs")]
    assert line.startswith("outputs    output float32[1x1000]: max abs") and line.endswith("OUTSIDE tolerance")
    assert lines[-1] == "verdict    FAIL: results outside tolerance"


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
    assert report["kernelmap"] == "verify/2" and report["passed"] is False
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
