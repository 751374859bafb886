"""verify on a small model file: the file convention, Python callables as
overrides, and the report's numbers (no compiler needed)."""

from __future__ import annotations

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
    assert report.calls_per_run == {"aten::convolution": 2}
    # input gradient + weight and bias of two convolutions
    assert report.gradients.count == 5
    assert report.to_json()["calls_per_run"] == {"aten::convolution": 2}


def test_a_changed_result_is_measured(model_file):
    report = verify(model_file, {"aten::convolution": lambda *a: conv_via_aten(*a, scale=2.0)}, runs=1)
    assert not report.outputs.identical
    assert report.outputs.worst == "output"
    assert report.outputs.max_rel > 0


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
