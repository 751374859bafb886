"""One set of options: every command that reads a tree takes --source with the
same error; bad dtypes and usage errors are one line and exit 2."""

from __future__ import annotations

import re

import pytest

from tests.conftest import run_kernelmap

TREE_COMMANDS = [
    ("where", "conv2d", "--device", "cpu"),
    ("stack", "conv2d"),
    ("callers", "cudnnConvolutionForward"),
    ("explain", "aten::add.Tensor"),
    ("gen", "conv2d"),
    ("find", "mul_stub"),
    ("index",),
    ("trace", "-c", "pass"),
    ("scaffold", "aten::relu", "--name", "myrelu", "--out", "never-written"),
]


@pytest.mark.parametrize("args", TREE_COMMANDS, ids=[a[0] for a in TREE_COMMANDS])
def test_every_tree_command_takes_source_with_one_error(args):
    out = run_kernelmap(*args, "--source", "no-such-tree")
    assert out.returncode == 2, (args, out.stdout, out.stderr)
    assert out.stderr.startswith("kernelmap: error: ") and out.stderr.count("\n") == 1, out.stderr
    assert "no-such-tree" in out.stderr


@pytest.mark.parametrize("value", ["notadtype", "int7", ""])
def test_bad_dtypes_are_refused(value):
    for command in (("where", "conv2d", "--static"), ("stack", "conv2d"), ("explain", "conv2d")):
        out = run_kernelmap(*command, "--dtype", value)
        assert out.returncode == 2 and "unknown dtype" in out.stderr and out.stderr.count("\n") == 1, out.stderr


def test_dtype_names_come_from_the_installed_torch():
    from kernelmap import env

    stubs = (env.torch_install().torch_dir / "_C" / "__init__.pyi").read_text()
    assert {"float32", "bfloat16", "int64", "bool"} <= env.torch_dtypes()
    assert all(f"\n{name}: dtype = ..." in stubs for name in env.torch_dtypes())


@pytest.mark.parametrize("args", [("stack", "--bogus"), ("where",), ("stack", "conv2d", "--device", "tpu"), ("stack", "conv2d", "--width", "5")])
def test_usage_errors_are_one_line(args):
    out = run_kernelmap(*args)
    assert out.returncode == 2 and out.stderr.startswith("kernelmap: error: ") and out.stderr.count("\n") == 1, out.stderr


def test_where_accepts_module_names_like_stack():
    out = run_kernelmap("where", "torch.nn.Conv2d", "--static")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0].startswith("aten::conv2d ")


def test_a_modules_forward_answers_as_the_module_does():
    """nn.Conv2d's forward (torch/nn/modules/conv.py of the installed wheel,
    read here) calls F.pad only when padding_mode is not 'zeros', its default;
    `where torch.nn.Conv2d.forward` answers aten::conv2d, as `where torch.nn.Conv2d`."""
    from kernelmap import env

    text = (env.torch_install().torch_dir / "nn" / "modules" / "conv.py").read_text()
    conv2d = text[text.index("class Conv2d("):text.index("class Conv3d(")]
    assert 'if self.padding_mode != "zeros":' in conv2d and "F.pad(" in conv2d and '] = "zeros",' in conv2d
    out = run_kernelmap("where", "torch.nn.Conv2d.forward", "--static")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0].startswith("aten::conv2d ")


@pytest.mark.parametrize("dunder", ["__neg__", "__abs__", "__pos__", "__rtruediv__"])
def test_tensor_methods_bound_at_class_level_answer_their_operator(dunder):
    """torch/_tensor.py's Tensor binds `__neg__ = _C.TensorBase.neg` (read
    here), and `__rtruediv__ = __rdiv__`, whose body returns
    `self.reciprocal() * other`: the operator of the method it is bound to."""
    from kernelmap import env

    text = (env.torch_install().torch_dir / "_tensor.py").read_text()
    bound = re.search(rf"^    {dunder} = (\w+(?:\.\w+)*)$", text, re.M).group(1)
    if bound.startswith("__"):
        body = text[text.index(f"def {bound}(self"):]
        method = re.search(r"return self\.(\w+)\(\)", body[: body.index("\n\n")]).group(1)
    else:
        method = re.fullmatch(r"_C\.TensorBase\.(\w+)", bound).group(1)
    out = run_kernelmap("where", f"torch.Tensor.{dunder}", "--static")
    assert out.returncode == 0, out.stderr
    assert re.match(rf"aten::{method}(\.\w+)? ", out.stdout.splitlines()[0]), (method, out.stdout[:200])


def test_static_where_imports_no_torch():
    import subprocess
    import sys

    probe = (
        "import runpy, sys\n"
        "sys.argv = ['kernelmap', 'where', 'torch.nn.Conv2d', '--static']\n"
        "try:\n    runpy.run_module('kernelmap', run_name='__main__')\nexcept SystemExit as e:\n    assert e.code == 0, e.code\n"
        "print('IMPORTED' if 'torch' in sys.modules else 'CLEAN')\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.rstrip().endswith("CLEAN")


EMPTY_OR_HUGE = [
    (("trace", "--from", ""), "--from names no file: an empty path"),
    (("trace", "--from", "t.json", "--export-chrome", "", "--no-tree"), "--export-chrome names no file: an empty path"),
    (("trace", "-c", "pass", "--html", ""), "--html names no file: an empty path"),
    (("source", "add", ".", "--name", ""), "--name is empty"),
    (("scaffold", "aten::relu", "--name", "r", "--extra", "", "--out", "never-written"), "an extra argument is empty"),
    (("trace", "-c", "pass", "--steps", "99999999999"), "--steps"),
    (("trace", "-c", "pass", "--warmup", "99999999999"), "--warmup"),
    (("trace", "--from", "t.json", "--width", "99999999999999999999"), "--width is a number of columns from 20 to 10000"),
    (("stack", "conv2d", "--width", "100000"), "--width is a number of columns from 20 to 10000"),
]


@pytest.mark.parametrize("args, words", EMPTY_OR_HUGE, ids=[" ".join(a[:3]) for a, _ in EMPTY_OR_HUGE])
def test_empty_paths_and_names_and_huge_counts_are_refused(tmp_path, args, words):
    # In a folder holding a trace: an empty --from read the current folder as the ranks of a run.
    (tmp_path / "t.json").write_text('{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::add", "ts": 1, "dur": 2, "pid": 1, "tid": 1}]}')
    (tmp_path / "u.json").write_text((tmp_path / "t.json").read_text())
    out = run_kernelmap(*args, cwd=tmp_path)
    assert out.returncode == 2 and out.stderr.startswith("kernelmap: error: ") and out.stderr.count("\n") == 1, out.stderr
    assert words in out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.json", "u.json"]  # nothing written


@pytest.mark.parametrize("args", [
    ("path", "torch.add", "ufunc::add", "--device", "cpu", "--width", "20"),
    ("explain", "aten::add.Tensor", "--device", "cpu", "--width", "40"),
    ("find", "mul_stub", "--width", "20"),
    ("kernel", "ampere_sgemm_128x64_nn", "--width", "30"),
    ("source", "list", "--width", "20"),
    ("trace", "--from", "{trace}", "--top", "3", "--depth", "3", "--width", "60"),
])
def test_width_holds_for_every_text_answer(args, indexed_tree):
    """No line of the text is wider than --width: a table row or a location
    that does not fit is folded onto the next lines, indented."""
    from pathlib import Path

    trace = Path(__file__).resolve().parent.parent / "trace" / "data" / "hta-trace_filter-sampled_rank-1.json.gz"
    words = [a.format(trace=trace) for a in args]
    if words[0] not in ("source", "trace"):
        words += ["--source", indexed_tree.name]
    out = run_kernelmap(*words)
    assert out.returncode == 0, out.stderr
    width = int(words[words.index("--width") + 1])
    lines = out.stdout.splitlines()
    assert lines and max(len(line) for line in lines) <= width, [line for line in lines if len(line) > width][:3]
