"""verify on a small model file: the file convention, Python callables as
overrides, and the report's numbers (no compiler needed)."""

from __future__ import annotations

import json

import pytest
import torch

from kernelmap.errors import BadInput
from kernelmap.extend import verify
from kernelmap.extend.compare import parse_extra_args, parse_override

MODEL = '''
import torch

def model():
    return torch.nn.Sequential(torch.nn.Conv2d(2, 4, 3), torch.nn.ReLU(), torch.nn.Conv2d(4, 2, 1))

def other():
    return torch.nn.Conv2d(2, 2, 1)

def example_input():
    return torch.randn(1, 2, 6, 6)
'''


def conv_via_aten(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups, scale=1.0):
    out = torch.ops.aten._convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding,
                                      groups, False, False, True, True)
    return out * scale


@pytest.fixture
def model_file(tmp_path):
    path = tmp_path / "small.py"
    path.write_text(MODEL)
    return path


def test_a_neutral_python_override_changes_nothing(model_file):
    report = verify(model_file, {"aten::convolution": conv_via_aten}, runs=2, backward=True)
    assert report.outputs.identical and report.gradients.identical
    # forward and backward: ConvolutionBackward0 calls convolution_backward, never the override
    assert report.calls_per_run == {"aten::convolution": 2}
    # input gradient + weight and bias of two convolutions
    assert report.gradients.count == 5
    assert report.passed
    (row,) = report.ops
    assert row.calls_per_run == 2 and row.sampled == 2 and row.backward_reruns == 0
    assert row.error.identical and row.original_s > 0 and row.override_s > 0
    assert report.original.backward_s > 0 and report.override.backward_s > 0


def test_a_changed_result_is_measured(model_file):
    report = verify(model_file, {"aten::convolution": lambda *a: conv_via_aten(*a, scale=2.0)}, runs=1)
    assert not report.outputs.identical
    assert report.outputs.worst.name == "output"
    assert report.outputs.max_rel > 0
    assert not report.passed and not report.outputs.within and [t.name for t in report.outputs.outside] == ["output"]
    (row,) = report.ops
    assert not row.error.within and row.error.max_rel > 0.4  # each call doubles its result


def test_model_fn_names_another_factory(model_file):
    report = verify(model_file, {"aten::convolution": conv_via_aten}, runs=1, model_fn="other")
    # one convolution, where model() has two
    assert report.calls_per_run == {"aten::convolution": 1}


def test_the_file_convention_is_enforced(tmp_path):
    no_input = tmp_path / "a.py"
    no_input.write_text("def model():\n    return None\n")
    with pytest.raises(BadInput, match="example_input"):
        verify(no_input, {"aten::relu": lambda self: self}, runs=1)
    two = tmp_path / "b.py"
    two.write_text("def f():\n    pass\ndef g():\n    pass\ndef example_input():\n    pass\n")
    with pytest.raises(BadInput, match="public functions found: f, g"):
        verify(two, {"aten::relu": lambda self: self}, runs=1)


def test_option_parsing():
    assert parse_override("aten::convolution = kernelmap_ext::myconv") == ("aten::convolution", "kernelmap_ext::myconv")
    assert parse_extra_args(["scale=1.5", "flag=True", "name='x'"]) == {"scale": 1.5, "flag": True, "name": "x"}
    with pytest.raises(BadInput):
        parse_extra_args(["scale=abc"])
    with pytest.raises(BadInput):
        parse_override("aten::convolution")


def test_load_takes_only_projects_and_libraries(tmp_path, model_file):
    from kernelmap.extend import load_extension

    with pytest.raises(BadInput, match="no project written by kernelmap scaffold"):
        load_extension(tmp_path)
    with pytest.raises(BadInput, match="a scaffolded project folder or a shared library"):
        load_extension(model_file)
    fake = tmp_path / "libnothing.so"
    fake.write_text("not a library")
    with pytest.raises(BadInput, match="cannot load"):
        load_extension(fake)


# A model file that defines its own custom operator (torch.library.custom_op,
# no compiler): a convolution times `scale`.
CUSTOM = MODEL + '''

@torch.library.custom_op("kernelmap_test::scaled_conv", mutates_args=())
def scaled_conv(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, stride: list[int],
                padding: list[int], dilation: list[int], transposed: bool, output_padding: list[int], groups: int,
                *, scale: float = 1.0) -> torch.Tensor:
    return torch.ops.aten._convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding,
                                       groups, False, False, True, True) * scale


def checkpointed():
    """model(), its forward recomputed in the backward (activation checkpointing)."""
    inner = model()
    return lambda x: torch.utils.checkpoint.checkpoint(inner, x, use_reentrant=False)
'''


@pytest.fixture(scope="module")
def custom_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("verify") / "custom.py"
    path.write_text(CUSTOM)
    return path


def verify_cli(kernelmap_cli, path, *args):
    return kernelmap_cli("verify", str(path), "--override", "aten::convolution=kernelmap_test::scaled_conv", "--runs", "1", *args)


def test_exit_status_0_within_tolerance_and_1_beyond(kernelmap_cli, custom_file):
    import json

    from kernelmap.extend.compare import VerifyReport

    # a relative change of 1e-4 is outside float32's default rtol (1.3e-6) but within --rtol 1e-3
    beyond = verify_cli(kernelmap_cli, custom_file, "--extra-args", "scale=1.0001")
    assert beyond.returncode == 1, beyond.stderr
    assert "verdict    FAIL: results outside tolerance" in beyond.stdout
    within = verify_cli(kernelmap_cli, custom_file, "--extra-args", "scale=1.0001", "--rtol", "1e-3", "--atol", "1e-5", "--json")
    assert within.returncode == 0, within.stderr
    document = json.loads(within.stdout)
    assert document["kernelmap"] == "verify/2" and document["passed"] is True
    report = VerifyReport.from_json(document)
    assert report.rtol == 1e-3 and report.outputs.within and not report.outputs.identical
    assert report.to_json() == document
    # the same numbers against assert_close itself
    assert 1e-4 > torch.testing._comparison.default_tolerances(torch.empty(1))[0]


def test_a_backward_that_reruns_the_original_is_named(custom_file):
    report = verify(custom_file, {"aten::convolution": "kernelmap_test::scaled_conv"}, runs=1, backward=True,
                    model_fn="checkpointed")
    (row,) = report.ops
    # two convolutions in the forward, run again by the backward's recomputation (which may stop early)
    assert row.backward_reruns > 0 and row.calls_per_run > 2
    assert report.passed
    from kernelmap.render.verify import to_text

    text = to_text(report, width=160, color=False)
    assert f"aten::convolution: the backward runs it again {row.backward_reruns} time(s) per run" in text
    assert "backward   original" in text and "forward    original" in text


BN_MODEL = '''
import torch

def model():
    return torch.nn.Sequential(torch.nn.Conv2d(2, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.BatchNorm2d(4))

def example_input():
    return torch.randn(1, 2, 6, 6)
'''


def test_an_override_of_an_op_that_does_not_run_warns_with_the_op_that_does(tmp_path, kernelmap_cli):
    from torch.profiler import ProfilerActivity, profile

    path = tmp_path / "bn.py"
    path.write_text(BN_MODEL)
    report = verify(path, {"aten::cudnn_batch_norm": lambda *a: None}, runs=1)
    (row,) = report.ops
    assert row.calls_per_run == 0 and row.error is None and not report.passed
    # what runs instead, read from the profiler over the same model
    from kernelmap.extend.compare import load_model_file

    factory, example = load_model_file(path)
    with profile(activities=[ProfilerActivity.CPU]) as prof, torch.no_grad():
        factory().eval()(example())
    ran = {e.key: e.count for e in prof.key_averages() if "batch_norm" in e.key and e.key != "aten::cudnn_batch_norm"}
    assert ran and dict(row.runs_instead) == ran
    assert row.runs_instead[0][1] == 2  # two batch norms per run
    done = kernelmap_cli("verify", str(path), "--override", "aten::convolution=kernelmap_test::nothing", "--runs", "1")
    assert done.returncode == 2 and "unknown name 'kernelmap_test::nothing' (is its library loaded?" in done.stderr


def test_a_missing_model_file_is_not_blamed_on_the_override(kernelmap_cli, tmp_path):
    done = kernelmap_cli("verify", str(tmp_path / "missing.py"), "--override", "aten::convolution=kernelmap_ext::absent")
    assert done.returncode == 2 and "no model file" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    broken = tmp_path / "broken.py"
    broken.write_text("raise ValueError('my bug')\n")
    done = kernelmap_cli("verify", str(broken), "--override", "aten::convolution=kernelmap_ext::absent")
    assert done.returncode == 2 and "fails to load: ValueError: my bug" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_a_missing_model_file_is_refused_before_torch_is_imported(tmp_path):
    """Importing torch takes seconds (13-29 s on a busy machine): a missing
    file is refused first, with or without --load."""
    import subprocess
    import sys

    project = tmp_path / "project"
    project.mkdir()
    code = ("import sys\nfrom kernelmap.cli import main\n"
            f"sys.argv = ['kernelmap', 'verify', 'missing.py', '--load', {str(project)!r}, '--override', 'aten::relu=x::y']\n"
            "try:\n    main()\nexcept SystemExit as e:\n    print(e.code, 'torch' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert done.stdout == "2 False\n", done.stdout + done.stderr
    assert done.stderr == "kernelmap: error: no model file missing.py\n"


def test_a_model_that_raises_is_the_model_files_failure(kernelmap_cli, tmp_path):
    """The original model raising, before any override runs: one line naming the
    model file and the exception, exit 2, no traceback of kernelmap's."""
    path = tmp_path / "raises.py"
    path.write_text("import torch\ndef example_input(): return torch.randn(3)\n"
                    "def model():\n    def f(x): raise ValueError('fwd\\nsecond line')\n    return f\n")
    done = kernelmap_cli("verify", str(path), "--override", "aten::relu=aten::gelu", "--runs", "1")
    assert done.returncode == 2 and done.stderr == f"kernelmap: error: model file {path}: the model raised ValueError: fwd\n", done.stderr


@pytest.mark.parametrize("args, message", [(["--rtol", "-1"], "--rtol must be"), (["--atol", "nan"], "--atol must be")])
def test_bad_tolerances(kernelmap_cli, model_file, args, message):
    done = kernelmap_cli("verify", str(model_file), "--override", "aten::convolution=kernelmap_ext::absent", *args)
    assert done.returncode == 2 and message in done.stderr


def test_from_json_refuses_another_document():
    from kernelmap.extend.compare import VerifyReport

    with pytest.raises(BadInput, match="not a verify/2 document"):
        VerifyReport.from_json({"kernelmap": "verify/1"})
    with pytest.raises(BadInput, match="missing or malformed"):
        VerifyReport.from_json({"kernelmap": "verify/2"})


@pytest.mark.parametrize("text, message", [
    ("import torch\ndef model():\n    return torch.nn.ReLU()\ndef example_input():\n    raise RuntimeError('boom')\n", "example_input() raised RuntimeError: boom"),
    ("import sys\nsys.exit(4)\n", "fails to load: SystemExit: 4"),
    ("import torch\ndef model():\n    return torch.nn.ReLU()\ndef example_input():\n    return torch.randn(2)\n", None),
])
def test_a_model_file_that_fails_is_one_line(kernelmap_cli, tmp_path, text, message):
    path = tmp_path / "m.py"
    path.write_text(text)
    args = ["--model-fn", "example_input"] if message is None else []
    done = kernelmap_cli("verify", str(path), "--override", "aten::relu=aten::sigmoid", *args)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and lines[-1].startswith("kernelmap: error:") and "Traceback" not in done.stderr, done.stderr
    assert (message or "returned a Tensor, not a model") in lines[-1]


def test_an_override_that_changes_nothing_is_one_line_without_profiler_lines(kernelmap_cli, tmp_path):
    path = tmp_path / "tiny.py"
    path.write_text("import torch\ndef model():\n    return torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())\n"
                    "def example_input():\n    return torch.randn(2, 4)\n")
    done = kernelmap_cli("verify", str(path), "--override", "aten::relu=aten::relu")
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_runs_beyond_any_measurement_are_refused(kernelmap_cli, model_file):
    done = kernelmap_cli("verify", str(model_file), "--override", "aten::convolution=kernelmap_ext::absent", "--runs", "100000000000000000000")
    assert done.returncode == 2 and "--runs is 1 to" in done.stderr


def test_float32_is_compared_without_tf32_and_the_settings_come_back(model_file):
    """On a GPU cuDNN's float32 convolutions use TF32 by default (torch's
    allow_tf32), about 5e-4 off float32: an exact kernel would fail against
    them. verify turns TF32 off in cuDNN and cuBLAS while it runs, then puts
    the user's settings back."""
    seen = []

    def conv(*args):
        seen.append((torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32))
        return conv_via_aten(*args)

    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = True
    try:
        verify(model_file, {"aten::convolution": conv}, runs=1)
        assert seen and set(seen) == {(False, False)}
        assert (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32) == (True, True)
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


def test_the_model_files_prints_stay_out_of_the_report(kernelmap_cli, custom_file, tmp_path):
    """verify --json is JSON when the model file prints, at import and in the
    forward (Note [user code and kernelmap's output] in kernelmap.runscript)."""
    noisy = tmp_path / "noisy.py"
    noisy.write_text("print('imported')\n" + CUSTOM.replace("    return torch.randn(1, 2, 6, 6)",
                                                             "    print('an input')\n    return torch.randn(1, 2, 6, 6)"))
    done = verify_cli(kernelmap_cli, noisy, "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["kernelmap"] == "verify/2"
    assert "imported" in done.stderr and "an input" in done.stderr
