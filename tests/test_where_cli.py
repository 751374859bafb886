"""`kernelmap where` as a user runs it: output, JSON document, exit statuses."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest

from kernelmap import api, env
from kernelmap.render import where as render
from tests.conftest import run_kernelmap


@pytest.fixture(autouse=True)
def no_tree(wheel_only_cache):
    """These tests ask the installed wheel (tests/conftest.py's wheel_only_cache)."""


def _yaml_line(n: int) -> str:
    return env.torch_install().native_yaml.read_text().splitlines()[n - 1]


def test_static_where_prints_the_catalog_facts():
    out = run_kernelmap("where", "aten::conv2d", "--static")
    assert out.returncode == 0, out.stderr
    answer = api.where("aten::conv2d", static=True)
    op = answer.op
    assert _yaml_line(op.location.line).startswith("- func: conv2d(")
    lines = out.stdout.splitlines()
    assert lines[0] == "aten::conv2d  composite implicit"
    assert f"yaml      aten/src/ATen/native/native_functions.yaml:{op.location.line}" in lines
    assert "CompositeImplicitAutograd  at::native::conv2d_symint" in lines
    assert "live registrations" not in out.stdout


def test_static_where_never_imports_torch():
    script = textwrap.dedent(
        """
        import sys
        from click.testing import CliRunner
        from kernelmap.cli import cli
        result = CliRunner().invoke(cli, ["where", "torch.nn.functional.conv2d", "--static"])
        assert result.exit_code == 0, result.output
        print("torch" in sys.modules)
        """
    )
    import subprocess

    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_live_where_shows_registrations_and_path():
    out = run_kernelmap("where", "aten::add.Tensor", "--requires-grad")
    assert out.returncode == 0, out.stderr
    assert "dispatch path (cpu, float32, requires_grad)" in out.stdout
    steps = [l for l in out.stdout.splitlines() if l[:1].isdigit()]
    assert steps[0].startswith("1. AutogradCPU") and "redispatches" in steps[0]
    assert steps[-1].split()[1] == "CPU" and "answers" in steps[-1]
    assert "at::native::ufunc_add_CPU" in steps[-1]


def test_cuda_on_cpu_build_is_said_once():
    out = run_kernelmap("where", "torch.nn.functional.conv2d", "--device", "cuda")
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("built without CUDA") == 1


def test_json_document():
    out = run_kernelmap("where", "torch.add", "--json", "--requires-grad")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["kernelmap"] == "where/2"
    assert doc["operator"]["name"] == "aten::add.Tensor"
    assert doc["operator"]["kind"] == "structured"
    assert doc["structured_delegate"]["name"] == "aten::add.out"
    assert doc["structured_delegate"]["kind"] == "ufunc"
    assert "aten::add.out" in [o["name"] for o in doc["also"]]
    loc = doc["operator"]["location"]
    assert _yaml_line(loc["line"]).startswith("- func: add.Tensor(")
    assert loc["url"].endswith(f"/{env.torch_install().commit}/aten/src/ATen/native/native_functions.yaml#L{loc['line']}")
    keys = [s["key"] for s in doc["live"]["dispatch_path"]["steps"]]
    assert keys[0] == "AutogradCPU" and keys[-1] == "CPU"
    assert doc["torch"]["version"] == env.torch_install().version
    # a Python-registered kernel is shown as the function that runs, at its own line
    meta = next(k for k in doc["live"]["registrations"] if k["key"] == "Meta")
    assert meta["kind"] == "python"
    lines = (env.torch_install().site_packages / meta["location"]["path"]).read_text().splitlines()
    head = "\n".join(lines[meta["location"]["line"] - 1 : meta["location"]["line"] + 9])  # decorators, then the def
    assert lines[meta["location"]["line"] - 1].lstrip().startswith(("def ", "@"))
    assert f"def {meta['symbol'].rsplit('.', 1)[-1]}(" in head


def test_renderer_exact_text_at_fixed_width():
    answer = api.where("relu_", static=True)
    text = render.to_text(answer, width=200, color=False)
    op = answer.op
    expected_head = [
        "aten::relu_  dispatch, in-place",
        f"schema    {op.schema}",
        f"yaml      aten/src/ATen/native/native_functions.yaml:{op.location.line}",
        f"python    {', '.join(op.python_entry_points)}",
        f"tags      {', '.join(op.tags)}",
    ]
    assert text.splitlines()[: len(expected_head)] == expected_head
    assert "\x1b[" not in text
    narrow = render.to_text(answer, width=80, color=False)
    assert all(len(line) <= 80 for line in narrow.splitlines())
    assert narrow.splitlines()[0] == expected_head[0]


def test_unknown_name_exits_2_with_suggestions():
    out = run_kernelmap("where", "conv2")
    assert out.returncode == 2
    assert out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("kernelmap: error: unknown name 'conv2'")
    assert "conv2d" in lines[0] and "conv1d" in lines[0]


@pytest.mark.parametrize("name", ["", " ", "conv 2d", "conv2d;ls", "`id`", "a&&b", "../../etc/passwd"])
def test_bad_names_exit_2_without_traceback(name):
    out = run_kernelmap("where", name, "--static")
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_bad_options_exit_2():
    out = run_kernelmap("where", "conv2d", "--device", "tpu")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    out = run_kernelmap("where", "conv2d", "--dtype", "float33")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_python_dash_m_and_console_script_agree():
    import shutil
    import subprocess

    exe = shutil.which("kernelmap", path=str(__import__("pathlib").Path(sys.executable).parent))
    assert exe, "the console script kernelmap is installed beside python"
    a = subprocess.run([exe, "where", "F.relu", "--static"], capture_output=True, text=True)
    b = run_kernelmap("where", "F.relu", "--static")
    assert a.returncode == b.returncode == 0
    assert a.stdout == b.stdout
