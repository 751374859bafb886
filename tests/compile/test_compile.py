"""`kernelmap compile` against the real installed torch and Inductor on CPU:
the kernels it reports are checked against Inductor's own debug output, read
here independently of kernelmap's reader."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kernelmap.compile import CompileAnswer
from tests.compile import models

pytestmark = pytest.mark.slow  # each Inductor compile takes tens of seconds here

MODELS = Path(models.__file__)


@pytest.fixture(scope="session")
def answer(tmp_path_factory) -> CompileAnswer:
    from kernelmap.compile import compile_callable

    return compile_callable(models.run, workdir=tmp_path_factory.mktemp("inductor"))


def _inductor_records(output_code: str) -> tuple[dict, dict[str, str]]:
    """Inductor's provenance mapping (kernel -> post-grad nodes) and each
    post-grad node's aten target, read from the graph's debug folder."""
    folder = Path(output_code).parent
    mapping = json.loads((folder / "inductor_provenance_tracking_node_mappings.json").read_text())
    targets = dict(re.findall(r"^\s*(\w+)(?:: \"[^\"]*\")? = torch\.ops\.([\w.]+)\(", (folder / "fx_graph_transformed.py").read_text(), re.M))
    return mapping["cppCodeToPost"], targets


def _aten(target: str) -> str:
    ns, _, rest = target.partition(".")
    return f"{ns}::{rest.removesuffix('.default')}"


def test_every_kernel_maps_to_the_ops_inductor_names(answer):
    assert answer.error is None
    assert len(answer.graphs) >= 4  # conv block, MLP, attention, and two around the break
    seen = 0
    for graph in answer.graphs:
        kernel_to_post, targets = _inductor_records(graph.output_code)
        assert {k.name for k in graph.kernels} == {h.rsplit(":", 1)[0] for h in kernel_to_post}
        for handle, post in kernel_to_post.items():
            kernel = next(k for k in graph.kernels if k.name == handle.rsplit(":", 1)[0])
            assert {o.op for o in kernel.ops} == {_aten(targets[n]) for n in post if n in targets}
            seen += 1
    assert seen >= 5


def test_generated_kernels_at_their_definition_in_the_output_code(answer):
    generated = [k for k in answer.kernels if k.generated]
    assert generated
    for k in generated:
        lines = Path(k.definition.path).read_text().splitlines()
        assert lines[k.definition.line - 1].startswith(f"{k.name} = async_compile.")
        assert k.name in lines[k.call.line - 1]


def _untraced_nodes(output_code: str) -> set[str]:
    """Nodes Inductor lists under "No stacktrace found" (made by its own rewrites)."""
    names, untraced = set(), False
    for line in (Path(output_code).parent / "fx_graph_transformed.py").read_text().splitlines():
        if "# No stacktrace found" in line:
            untraced = True
        elif "# File:" in line or not line.strip():
            untraced = False
        elif untraced and (m := re.match(r"\s*(\w+)", line)):
            names.add(m[1])
    return names


def test_user_lines_point_at_the_model_source(answer):
    source = MODELS.read_text().splitlines()
    with_line = 0
    for graph in answer.graphs:
        untraced = _untraced_nodes(graph.output_code)
        for k in graph.kernels:
            for op in k.ops:
                if op.user is None:
                    assert op.node in untraced, op
                    continue
                assert Path(op.user.path) == MODELS
                assert source[op.user.line - 1].strip() == op.code
                with_line += 1
    assert with_line >= 10


def test_fallbacks_and_decompositions(answer):
    extern = [k for k in answer.kernels if not k.generated]
    assert any("convolution" in k.name for k in extern)  # CPU Inductor calls ATen's convolution
    decomposed = [op for k in answer.kernels for op in k.ops if op.decomposition]
    assert decomposed
    for op in decomposed:
        d = op.decomposition
        line = Path(d.location.path).read_text().splitlines()[d.location.line - 1]
        assert f"def {d.function.rsplit('.', 1)[-1]}" in line
        assert "torch/_decomp" in d.location.path or "torch/_refs" in d.location.path or "torch/_inductor" in d.location.path


def test_graph_break_with_reason_and_user_line(answer):
    assert answer.graph_breaks
    source = MODELS.read_text().splitlines()
    b = answer.graph_breaks[0]
    assert Path(b.user.path) == MODELS and "print(" in source[b.user.line - 1]
    assert "print" in b.detail


def test_profiled_time_per_kernel_and_group(answer):
    timed = [k for k in answer.kernels if k.generated and k.time_us]
    assert timed and all(k.calls >= 1 for k in timed)
    assert answer.group_times()


def test_json_round_trip_and_text(answer):
    doc = answer.to_json()
    assert doc["kernelmap"] == "compile/1"
    again = CompileAnswer.from_json(json.loads(json.dumps(doc)))
    assert again.to_json() == doc
    from kernelmap.render.compile import to_text

    text = to_text(answer, width=200, color=False)
    for k in answer.kernels:
        assert k.name in text


def test_from_json_refuses_another_document():
    from kernelmap.errors import BadInput

    with pytest.raises(BadInput):
        CompileAnswer.from_json({"kernelmap": "where/1"})


def _cli(*args, env=None, timeout=600):
    return subprocess.run([sys.executable, "-m", "kernelmap", "compile", *args], capture_output=True, text=True, env=env, timeout=timeout)


def test_code_that_fails_to_compile_exits_1_without_our_traceback():
    r = _cli("-c", "import torch\ntorch.compile(lambda x: x @ x)(torch.randn(2, 3))")
    assert r.returncode == 1
    assert "RuntimeError" in r.stderr or "Error" in r.stderr
    assert "kernelmap/compile" not in r.stderr and "kernelmap/commands" not in r.stderr


def test_no_cxx_compiler_is_a_clear_error(tmp_path):
    env = dict(os.environ, PATH=str(tmp_path))
    env.pop("CXX", None)
    r = _cli("-c", "pass", env=env)
    assert r.returncode == 2
    assert r.stderr.startswith("kernelmap: error: no C++ compiler on PATH") and "g++" in r.stderr
    assert "Traceback" not in r.stderr


def test_resnet50_compiled_end_to_end(tmp_path):
    example = Path(__file__).resolve().parents[2] / "examples" / "resnet50.py"
    code = (
        "import runpy, torch\n"
        f"ns = runpy.run_path({str(example)!r})\n"
        "model = ns['resnet50']().eval() if 'resnet50' in ns else ns['ResNet50']().eval()\n"
        "with torch.no_grad():\n"
        "    torch.compile(model)(torch.randn(1, 3, 64, 64))\n"
    )
    r = _cli("-c", code, "--json", "--output-dir", str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(r.stdout)
    kernels = [k for g in doc["graphs"] for k in g["kernels"]]
    assert sum(k["generated"] for k in kernels) >= 10
    assert any(not k["generated"] and "convolution" in k["name"] for k in kernels)
    assert any(k["time_us"] for k in kernels if k["generated"])


def test_a_used_output_dir_is_refused(tmp_path):
    (tmp_path / "old").write_text("an earlier run")
    r = _cli("-c", "pass", "--output-dir", str(tmp_path))
    assert r.returncode == 2
    assert r.stderr.strip() == f"kernelmap: error: the output directory must be new or empty: {tmp_path}"
    r = _cli("-c", "pass", "--output-dir", "")
    assert r.returncode == 2 and r.stderr == "kernelmap: error: --output-dir is an empty path\n"


def test_unknown_function_is_a_clear_error():
    r = _cli("no_such_module_kernelmap:f")
    assert r.returncode == 2 and r.stderr.startswith("kernelmap: error: cannot import no_such_module_kernelmap")


def test_the_example_breaks_its_graph_and_leaves_nothing_behind(tmp_path):
    """examples/compile_block.py: the graph break its docstring promises, at
    the line that makes it; what it prints on stderr, the answer alone on
    stdout; no warning of Inductor's or Dynamo's about what the answer says
    already; and nothing in the temporary folder afterwards (Inductor's
    precompiled headers went to $TMPDIR/torchinductor_<user>, 149 MB a run)."""
    example = Path(__file__).resolve().parents[2] / "examples" / "compile_block.py"
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    r = _cli(str(example), "--json", env=dict(os.environ, TMPDIR=str(temporary)))
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(r.stdout)
    assert len(doc["graphs"]) == 2 and doc["kept"] is False
    source = example.read_text().splitlines()
    (brk,) = doc["graph_breaks"]
    assert Path(brk["user"]["path"]) == example and ".item()" in source[brk["user"]["line"] - 1]
    assert "graph break" in source[brk["user"]["line"] - 1]  # the line the docstring points at
    assert r.stderr.startswith("(2, 8, 16, 16) mean activation")  # the example's own print
    assert not re.search(r"^[WIE]\d{4} ", r.stderr, re.M), r.stderr  # torch's log lines
    assert sorted(temporary.iterdir()) == []


def test_without_output_dir_no_path_names_a_removed_file():
    from kernelmap.render.compile import to_text

    doc = {"kernelmap": "compile/1", "workdir": "/gone/run", "torch_version": "2.13.0", "kept": False, "notes": [],
           "graphs": [{"name": "g0", "output_code": "/gone/run/debug/g0/output_code.py", "kernels": [
               {"name": "cpp_fused_relu_0", "generated": True, "definition": {"path": "/gone/run/debug/g0/output_code.py", "line": 33},
                "call": None, "ops": [], "time_us": None, "calls": 0}]}]}
    text = to_text(CompileAnswer.from_json(doc), width=200, color=False)
    assert "/gone/run" not in text and "cpp_fused_relu_0  [generated]  output_code.py:33" in text
    assert "Inductor output: a temporary folder, removed (--output-dir DIR keeps it)" in text
