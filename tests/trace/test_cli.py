"""`kernelmap trace` as a user runs it: the forms of TARGET, partial trees
when the traced code fails or is interrupted, and one-line errors for bad
trace files."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.conftest import default_sigint, run_kernelmap


def test_code_that_raises_shows_the_partial_tree_then_the_exception():
    r = run_kernelmap("trace", "-c", "import torch\ntorch.ones(3).add_(1)\nraise ValueError('boom')", "--width", "200")
    assert r.returncode == 1
    assert "aten::add_" in r.stdout and "partial trace" in r.stdout
    assert "ValueError: boom" in r.stderr and 'File "<string>", line 3' in r.stderr
    assert r.stdout.index("aten::add_") < len(r.stdout)


def test_keyboard_interrupt_in_the_code_gives_the_partial_tree():
    r = run_kernelmap("trace", "-c", "import torch\ntorch.ones(3).mul_(2)\nraise KeyboardInterrupt", "--no-summary")
    assert r.returncode == 130
    assert "aten::mul_" in r.stdout
    assert "interrupted" in r.stderr


def test_ctrl_c_stops_the_run_and_shows_what_ran():
    code = "import time, torch\ntorch.ones(3).sub_(1)\nprint('ready', flush=True)\ntime.sleep(60)"
    p = subprocess.Popen(
        [sys.executable, "-m", "kernelmap", "trace", "-c", code, "--no-summary", "--width", "200"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ), preexec_fn=default_sigint,
    )
    assert any(line.strip() == "ready" for line in p.stderr)  # the traced code's prints go to stderr
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 130
    assert "aten::sub_" in out


def test_script_with_arguments(tmp_path):
    script = tmp_path / "step.py"
    script.write_text("import sys, torch\nprint('argv', sys.argv[1:])\ntorch.ones(2, 2).mul(float(sys.argv[2]))\n")
    r = run_kernelmap("trace", str(script), "--scale", "3", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "argv ['--scale', '3']" in r.stderr  # the script's prints go to stderr, the answer alone to stdout
    assert "aten::mul.Tensor" in r.stdout or "aten::mul" in r.stdout
    assert "step.<module>" in r.stdout


def test_module_function_target(tmp_path):
    (tmp_path / "mymodel.py").write_text("import torch\n\ndef run():\n    torch.relu(torch.ones(4))\n")
    r = run_kernelmap("trace", "mymodel:run", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["kernelmap"] == "trace/2" and doc["tree"]["kernelmap"] == "calltree/2"
    assert "aten::relu" in {row["name"] for row in doc["summary"]["ops"]}


def test_malformed_trace_is_one_line_and_exit_2(tmp_path):
    bad = tmp_path / "bad.json"
    text = '{"traceEvents": [{"ph": "X", "name": "aten::relu", "ts": 1, "dur": 2}, {"ph": oops}]}'
    bad.write_text(text)
    r = run_kernelmap("trace", "--from", str(bad))
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [f"kernelmap: error: bad.json: malformed JSON in an event (Expecting value) at byte {text.index('oops')}"]


def test_gpu_trace_import_with_json_and_chrome_export(gpu_step, tmp_path):
    out = tmp_path / "annotated.json.gz"
    r = run_kernelmap("trace", "--from", str(gpu_step), "--json", "--export-chrome", str(out))
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    rows = {row["name"]: row for row in doc["summary"]["ops"]}
    assert rows["aten::addmm"]["closed"] and rows["aten::addmm"]["library"] == "cuBLAS"
    assert rows["aten::cudnn_convolution"]["closed"]
    import gzip

    exported = json.loads(gzip.decompress(out.read_bytes()))
    kernels = [e for e in exported["traceEvents"] if e.get("cat") == "kernel"]
    assert kernels and all("kernelmap" in e["args"] for e in kernels)
    assert exported["deviceProperties"][0]["computeMajor"] == 9


def test_target_is_required():
    r = run_kernelmap("trace")
    assert r.returncode == 2
    assert r.stderr.strip().startswith("kernelmap: error: give one of")


def test_format_json_prints_the_calltree_document_alone(gpu_step):
    from click.testing import CliRunner

    from kernelmap.cli import cli

    r = CliRunner().invoke(cli, ["trace", "--from", str(gpu_step), "--format", "json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["kernelmap"] == "calltree/2" and doc["kind"] == "trace"
    threads = doc["root"]["children"]
    assert [t["kind"] for t in threads] == ["thread"]


def test_profiler_log_lines_stay_out_of_stderr():
    r = run_kernelmap("trace", "-c", "import sys, torch\ntorch.ones(1).neg()\nprint('mine', file=sys.stderr)", "--no-tree", "--no-summary")
    assert r.returncode == 0
    assert r.stderr.strip().splitlines() == ["mine"]


def test_html_and_chrome_export_to_one_file_is_refused(gpu_step, tmp_path):
    """Both reports to one path would leave only the second: one line, exit 2, no file."""
    out = tmp_path / "report.html"
    r = run_kernelmap("trace", "--from", str(gpu_step), "--no-tree", "--no-summary", "--html", str(out),
                      "--export-chrome", str(tmp_path / "." / "report.html"))
    assert r.returncode == 2 and r.stderr.startswith("kernelmap: error: --html and --export-chrome name the same file")
    assert r.stderr.count("\n") == 1 and not out.exists()


def test_what_the_traced_code_prints_goes_to_stderr_beside_a_json_document():
    """The defect: `kernelmap trace examples/resnet50.py --json > trace.json`
    wrote the script's own "(1, 1000)" before the document, which then did not load."""
    code = "import torch\nprint('from the traced code')\ntorch.ones(3).add_(1)"
    for form in (("--json",), ("--format", "json")):
        r = run_kernelmap("trace", "-c", code, *form)
        assert r.returncode == 0, r.stderr
        json.loads(r.stdout)
        assert "from the traced code" in r.stderr and "from the traced code" not in r.stdout
    text = run_kernelmap("trace", "-c", code, "--no-summary")
    # the text view too: kernelmap's answer alone is on stdout, whatever the code prints (kernelmap.runscript)
    assert "from the traced code" in text.stderr and "from the traced code" not in text.stdout


def test_a_trace_file_given_as_the_script_is_one_line_naming_from():
    """`kernelmap trace rank0.json.gz` ran the file as Python (a SyntaxError and a partial tree, exit 1)."""
    trace = Path(__file__).resolve().parent / "cuda" / "resnet50_fwd_fp32_bench.json.gz"
    done = run_kernelmap("trace", str(trace))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and f"--from {trace}" in done.stderr and "Traceback" not in done.stderr
