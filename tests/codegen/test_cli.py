"""`kernelmap gen`: invoked as a user would, its output and exit status
checked against the library's answer and the generated files."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from click.testing import CliRunner

from kernelmap.cli import cli
from kernelmap.codegen import locate
from tests.codegen.conftest import file_lines


@pytest.fixture(scope="module")
def runner(generated):  # generation happens once, before any command runs
    return CliRunner()


def test_gen_binding_prints_signatures_and_the_call(runner, generated, wheel_only_cache):  # no tree registered: the wheel answers
    result = runner.invoke(cli, ["gen", "aten::conv2d", "--layer", "binding"])
    assert result.exit_code == 0, result.output
    code = locate("aten::conv2d", layers=["binding"], files=generated)
    (binding,) = code.bindings
    out = result.stdout
    assert binding.function in out and str(binding.definition.location) in out
    for signature in binding.signatures:
        assert signature in out
    assert "at::conv2d_symint(" in out
    assert "Register<Key> wrappers" not in out and "RegisterCompositeImplicitAutograd" not in out  # only the layer asked for


def test_gen_all_layers_for_a_short_name(runner, generated, wheel_only_cache):  # no tree registered: the wheel answers
    result = runner.invoke(cli, ["gen", "conv2d", "--all"])
    assert result.exit_code == 0, result.output
    code = locate("conv2d", files=generated)
    reg = code.registration("CompositeImplicitAutograd")
    assert str(reg.block) in result.stdout and "at::native::conv2d_symint(" in result.stdout
    assert all(o.symbol in result.stdout for o in code.ops)


def test_gen_fits_the_first_screen_and_all_gives_every_piece(runner, generated, wheel_only_cache):  # no tree registered: the wheel answers
    """`gen add.Tensor` (940 lines of code) on one screen of 100 columns: each
    layer a call passes, in call order, at file:lines that hold what they
    name; the rest folded with counts; --all is today's full text."""
    result = runner.invoke(cli, ["gen", "add.Tensor", "--width", "100"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert len(lines) <= 40 and all(len(line) <= 100 for line in lines), lines
    code = locate("add.Tensor", files=generated)
    binding = code.bindings[0]
    cpu, cuda, autograd = code.registration("CPU"), code.registration("CUDA"), code.registration("Autograd")
    kernels = [u for u in code.ufunc if u.name == "add_kernel"]
    call = next(o for o in code.ops if o.symbol.endswith("::call"))
    wanted = [(binding.function, binding.definition.location), (call.symbol, call.definition.location),
              (autograd.symbol, autograd.definition.location), (cpu.symbol, cpu.definition.location),
              (cuda.symbol, cuda.definition.location), *((u.name, u.definition.location) for u in kernels)]
    text = result.stdout
    at = [text.index(str(location)) for _, location in wanted]
    assert at == sorted(at)  # binding, dispatcher entry, autograd, CPU and CUDA wrappers, the loops: the order a call takes
    for name, location in wanted:
        assert name in text
        assert name.rsplit("::", 1)[-1] in file_lines(generated, location.path)[location.line - 1], (name, str(location))
    folded = [line for line in lines if line.strip().startswith("+ ")]
    keys = len([r for r in code.registrations if r.layer.value == "register"])
    assert any(f"+ {keys - 3} other keys: " in line for line in folded), folded  # CPU, CUDA and the composite one shown
    full = runner.invoke(cli, ["gen", "add.Tensor", "--all", "--width", "100"]).stdout
    assert len(full.splitlines()) > 500 and all(str(r.block) in full.replace("\n", "") for r in code.registrations)


def test_gen_json_gives_locations_and_text(runner, generated, wheel_only_cache):  # no tree registered: the wheel answers
    result = runner.invoke(cli, ["gen", "add.out", "--layer", "ufunc", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["op"] == "aten::add.out" and data["layers"] == ["ufunc"]
    code = locate("add.out", layers=["ufunc"], files=generated)
    assert [u["definition"]["path"] for u in data["ufunc"]] == [u.definition.location.path for u in code.ufunc]
    assert [u["definition"]["text"] for u in data["ufunc"]] == [u.definition.text for u in code.ufunc]


@pytest.mark.parametrize("args", [["gen", "aten::conv2dd"], ["gen", "not an op!"], ["gen", ""]])
def test_bad_names_are_one_line_errors_with_status_2(runner, args):
    result = runner.invoke(cli, args)
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kernelmap: error:")
    assert "Traceback" not in result.output


def test_a_bad_layer_is_a_usage_error(runner):
    result = runner.invoke(cli, ["gen", "conv2d", "--layer", "kernels"])
    assert result.exit_code == 2 and "Traceback" not in result.output


def test_gen_never_imports_torch(generated, kernelmap_cli):
    script = (
        "import sys\n"
        "from kernelmap.cli import cli\n"
        "try:\n"
        "    cli(['gen', 'aten::conv2d'], prog_name='kernelmap')\n"
        "except SystemExit as e:\n"
        "    assert e.code in (0, None), e.code\n"
        "print('torch imported' if 'torch' in sys.modules else 'torch not imported')\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("torch not imported")
    # and as a command in its own process
    proc = kernelmap_cli("gen", "aten::add.out", "--layer", "register")
    assert proc.returncode == 0, proc.stderr
    assert "wrapper_CPU_add_out_out" in proc.stdout


def test_gen_from_a_source_tree(runner, tree_2_6):
    result = runner.invoke(cli, ["gen", "conv2d", "--source", str(tree_2_6), "--layer", "register", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["origins"][data["origin"]]["version"] == (tree_2_6 / "version.txt").read_text().strip()
    reg = next(r for r in data["registrations"] if r["key"] == "CompositeImplicitAutograd")
    assert "at::native::conv2d_symint" in reg["calls"]
