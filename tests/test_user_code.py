"""The user's code run by `trace` and `compile` never writes into kernelmap's
output (Note [user code and kernelmap's output] in kernelmap.runscript): what
it prints, from Python, straight to file descriptor 1 or from C, goes to
standard error, so `--json > t.json` is JSON; a folder it changes to moves
none of the files kernelmap writes."""

from __future__ import annotations

import json

import pytest

# Python's print, a write to the descriptor itself, and C's printf (buffered by libc, flushed at exit)
PRINTS = ("import ctypes, os, sys\n"
          "print('from python')\n"
          "os.write(1, b'from the descriptor\\n')\n"
          "ctypes.CDLL(None).printf(b'from C\\n')\n")
SAID = ("from python", "from the descriptor", "from C")


@pytest.mark.parametrize("how", ["script", "code"])
def test_trace_json_holds_only_the_answer(kernelmap_cli, tmp_path, how):
    script = tmp_path / "prints.py"
    script.write_text(PRINTS + "import torch\ntorch.ones(3).add(1)\n")
    target = [str(script)] if how == "script" else ["-c", script.read_text()]
    done = kernelmap_cli("trace", *target, "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)  # the answer alone
    assert document["kernelmap"].startswith("trace/")
    for text in SAID:
        assert text in done.stderr and text not in done.stdout
    (tmp_path / "t.json").write_text(done.stdout)
    again = kernelmap_cli("render", str(tmp_path / "t.json"), "--width", "120")  # the README's recipe
    assert again.returncode == 0, again.stderr


def test_trace_outputs_stay_where_they_were_named_when_the_code_changes_folder(kernelmap_cli, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    code = f"import os, torch\nos.chdir({str(elsewhere)!r})\ntorch.ones(3).add(1)\n"
    done = kernelmap_cli("trace", "-c", code, "--html", "report.html", "--export-chrome", "annotated.json", "--no-tree",
                         cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "report.html").is_file() and (tmp_path / "annotated.json").is_file()
    assert list(elsewhere.iterdir()) == []
    assert "wrote annotated.json" in done.stdout.splitlines()


def test_compile_json_holds_only_the_answer_and_the_exit_status_is_the_scripts(kernelmap_cli, tmp_path):
    done = kernelmap_cli("compile", "-c", PRINTS + "sys.exit(3)\n", "--json", cwd=tmp_path)
    assert done.returncode == 3, done.stderr  # as python would exit, not 1
    assert json.loads(done.stdout)["kernelmap"] == "compile/1"
    for text in SAID:
        assert text in done.stderr and text not in done.stdout
    assert "Traceback" not in done.stderr


def test_compile_says_why_it_compiled_no_graph(kernelmap_cli, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    code = f"import os, torch\nos.chdir({str(elsewhere)!r})\ntorch.ones(3).add(1)\n"
    done = kernelmap_cli("compile", "-c", code, "--output-dir", "out", "--html", "report.html", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].endswith(": 0 graph(s), 0 generated kernel(s), 0 ATen call(s)")
    assert lines[1].startswith("no graph: the code called no function or module wrapped in torch.compile")
    # named before the code ran: not in the folder it changed to
    assert (tmp_path / "out").is_dir() and (tmp_path / "report.html").is_file()
    assert list(elsewhere.iterdir()) == []
