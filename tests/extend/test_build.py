"""Scaffolded projects really compile (g++, just in time), load, agree with
ATen, and pass the tests they were generated with; a compile error in a user's
edit is reported by file:line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from kernelmap.extend import scaffold
from kernelmap.extend.build import first_compiler_error

from .conftest import first_line_number

pytestmark = pytest.mark.slow


def run_generated_tests(root):
    """The project's own pytest file, in a fresh process, as its user would run it
    (the library built by the fixture is up to date: ninja has nothing to do)."""
    env = dict(os.environ, PYTHONPATH="")
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=root, capture_output=True, text=True, env=env, timeout=600,
    )


def test_myrelu_agrees_with_aten(myrelu):
    x = torch.randn(7, 9)
    x[0, 0] = float("nan")
    mine = torch.ops.kernelmap_ext.myrelu(x.t())
    torch.testing.assert_close(mine, torch.relu(x.t()), equal_nan=True)


def test_myadd_agrees_with_aten_and_takes_its_extra_argument(myadd):
    a, b = torch.randn(4, 1, dtype=torch.float64), torch.randn(1, 5, dtype=torch.float64)
    torch.testing.assert_close(torch.ops.kernelmap_ext.myadd(a, b, alpha=2.5, beta=3.0), torch.add(a, b, alpha=2.5))
    schema = torch.ops.kernelmap_ext.myadd.default._schema
    assert [arg.name for arg in schema.arguments] == ["self", "other", "alpha", "beta", "mode"]
    assert schema.arguments[-1].default_value == 'fast, "exact"'  # torch read the C++ literal back
    import inspect

    import myadd  # its __init__.py holds the same string

    assert inspect.signature(myadd._fake).parameters["mode"].default == 'fast, "exact"'


def test_myadd_gradients_flow_through_the_registered_formula(myadd):
    a = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    b = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, y: torch.ops.kernelmap_ext.myadd(x, y, alpha=0.5), (a, b))


@pytest.mark.parametrize("fixture", ["myrelu", "myadd"])
def test_generated_tests_pass(fixture, request):
    built = request.getfixturevalue(fixture)
    done = run_generated_tests(built.root)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and "failed" not in done.stdout


def test_a_compile_error_names_file_and_line(projects, kernelmap_cli, tmp_path):
    root = projects / "broken"
    scaffold("aten::relu", "broken", out=root)
    source = root / "csrc" / "broken.cpp"
    text = source.read_text().replace("const int64_t n = out.numel();", "const int64_t n = out.numel() + undeclared_thing;")
    source.write_text(text)
    line = first_line_number(source, "undeclared_thing")
    model = tmp_path / "model.py"
    model.write_text("import torch\ndef model():\n    return torch.nn.ReLU()\ndef example_input():\n    return torch.randn(3)\n")
    done = kernelmap_cli("verify", str(model), "--load", str(root), "--override", "aten::relu=kernelmap_ext::broken")
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"kernelmap: error: building broken failed: csrc/broken.cpp:{line}: error: ")
    assert "undeclared_thing" in lines[0]


def test_first_compiler_error_of_gcc_and_nvcc_logs():
    log = "[1/2] c++ -c /x/p/csrc/k.cpp\n/x/p/csrc/k.cpp:12:5: error: 'y' was not declared in this scope\n   12 | y;\n"
    assert first_compiler_error(log, Path("/x/p")) == "csrc/k.cpp:12: error: 'y' was not declared in this scope"
    nvcc = "/x/p/csrc/k_kernel.cu(7): error: identifier \"z\" is undefined\n"
    assert first_compiler_error(nvcc, Path("/x/p")) == 'csrc/k_kernel.cu:7: error: identifier "z" is undefined'
    assert first_compiler_error("ninja: build stopped", None) is None


def test_ahead_of_time_build_and_benchmark(myrelu):
    """setup.py builds myrelu/_C*.so with BuildExtension; importing the package
    then loads that library, and the benchmark runs on it."""
    env = dict(os.environ, PYTHONPATH="")
    done = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"],
                          cwd=myrelu.root, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    libraries = list((myrelu.root / "myrelu").glob("_C*.so"))
    assert len(libraries) == 1
    done = subprocess.run([sys.executable, "bench_myrelu.py", "--min-run-time", "0.05"],
                          cwd=myrelu.root, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = done.stdout.strip().splitlines()
    assert [row.split()[0] for row in rows] == ["aten::relu", "kernelmap_ext::myrelu"]
    done = subprocess.run([sys.executable, "-c", "import myrelu; print(myrelu.LIBRARY)"],
                          cwd=myrelu.root, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == str(libraries[0])


def test_the_reduction_reference_agrees_with_aten(mysum):
    """The reduction family's loop, on its generated cases (all, some, negative
    and no dims; keepdim; empty; 0-dim; non-contiguous; dtype) in two dtypes."""
    import mysum as package  # imported by load_extension

    from mysum.cases import cases

    assert package.ORIGINAL == "aten::sum.dim_IntList"
    labels = set()
    for dtype in (torch.float32, torch.float64):
        for label, args, kwargs in cases(dtype):
            mine = torch.ops.kernelmap_ext.mysum(*args, **kwargs)
            theirs = torch.sum(*args, **kwargs)
            torch.testing.assert_close(mine, theirs, msg=lambda m, label=label: f"{label}: {m}")
            labels.add(label)
    assert {"transposed", "strided", "(0, 5) over [1]", "() over None", "dtype float64"} <= labels
    ints = torch.arange(12).reshape(3, 4)
    assert torch.equal(torch.ops.kernelmap_ext.mysum(ints, [0]), ints.sum(0))  # int64 accumulates exactly
