"""Say what to try, on the real 2.6.0 tree and the installed wheel: closest
names for C++ symbols, stubs, vendor calls and case slips in every command;
`explain` takes the names where and stack take; `path` infers cuda from a
CUDA library's call and says when only cuda has routes."""

from __future__ import annotations

import pytest

from tests.conftest import run_kernelmap
from tests.graph.conftest import TREE_NAME


def _error(*args: str) -> str:
    done = run_kernelmap(*args)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, (args, done.stdout[-500:], done.stderr)
    return done.stderr


@pytest.mark.parametrize("args, closest", [
    (("find", "mul_stubb"), "closest: mul_stub"),
    (("callers", "cudnnConvolutionForwrd"), "closest: cudnnConvolutionForward"),
    (("stack", "torch.nn.Conv2D", "--device", "cuda"), "closest: torch.nn.Conv2d"),
    (("path", "torch.nn.conv2d", "cudnnConvolutionForward"), "closest: torch.nn.Conv2d"),
    (("find", "cudnnconvolutionforward"), "closest: cudnnConvolutionForward"),
])
def test_closest_names_in_every_command(args, closest, indexed_tree, generated):
    assert closest in _error(*args, "--source", TREE_NAME)


def test_where_names_a_case_slip_without_a_tree(wheel_only_cache):
    assert "closest: torch.nn.Conv2d" in _error("where", "torch.nn.Conv2D", "--static")


def test_explain_takes_a_python_name(indexed_tree, generated):
    done = run_kernelmap("explain", "torch.nn.Conv2d", "--device", "cuda", "--source", TREE_NAME, "--width", "100")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("note: torch.nn.Conv2d runs aten::conv2d") and lines[1] == "aten::conv2d on cuda, float32"


def test_path_infers_cuda_or_says_to_add_it(indexed_tree, generated):
    inferred = run_kernelmap("path", "torch.nn.Conv2d", "cudnnConvolutionForward", "--source", TREE_NAME, "--width", "100")
    assert inferred.returncode == 0 and inferred.stdout.startswith("torch.nn.Conv2d -> cudnnConvolutionForward on cuda: 4 routes")
    hint = run_kernelmap("path", "torch.nn.Conv2d", "raw_cudnn_convolution_forward_out", "--source", TREE_NAME)
    assert hint.returncode == 1 and "on cpu: no route" in hint.stdout
    assert "no route on cpu; on cuda: " in hint.stdout and "(add --device cuda)" in hint.stdout
    explicit = run_kernelmap("path", "torch.nn.Conv2d", "raw_cudnn_convolution_forward_out", "--device", "cpu", "--source", TREE_NAME)
    assert explicit.returncode == 1 and "add --device cuda" not in explicit.stdout  # asked for cpu: cpu's answer alone


def test_module_names_follow_star_imports():
    from kernelmap import env
    from kernelmap.suggest import module_names

    names = module_names("torch.nn", env.torch_install().site_packages)
    assert {"Conv2d", "Linear", "functional", "Module"} <= names


def test_gen_takes_a_python_name(generated):
    done = run_kernelmap("gen", "torch.nn.Conv2d", "--layer", "ops", "--json")
    assert done.returncode == 0, done.stderr
    import json

    doc = json.loads(done.stdout)
    assert any("torch.nn.Conv2d runs aten::conv2d" in n for n in doc["notes"])
    assert "closest: torch.nn.Conv2d" in _error("gen", "torch.nn.Conv2D")
