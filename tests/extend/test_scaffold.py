"""`kernelmap scaffold`: the files it writes, without torch, and its refusals
(one line on stderr, exit status 2)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from kernelmap.extend.project import MANIFEST


def test_scaffold_writes_a_project_and_never_imports_torch(tmp_path):
    out = tmp_path / "myadd"
    code = (
        "import sys\n"
        "from kernelmap.extend import scaffold\n"
        f"scaffold('aten::add.Tensor', 'myadd', out={str(out)!r}, extra=['float beta=1.0'], cuda=True)\n"
        "print('torch' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
    for rel in ("csrc/myadd.cpp", "csrc/myadd_kernel.cu", "csrc/myadd_cuda.cpp", "myadd/__init__.py", "myadd/_build.py",
                "myadd/cases.py", "setup.py", "tests/test_myadd.py", "bench_myadd.py", "README.md", MANIFEST):
        assert (out / rel).is_file(), rel
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest["custom_op"] == "kernelmap_ext::myadd"
    assert manifest["schema"] == "myadd(Tensor self, Tensor other, *, Scalar alpha=1, float beta=1.0) -> Tensor"
    cpp = (out / "csrc/myadd.cpp").read_text()
    assert f'm.def("{manifest["schema"]}");' in cpp
    assert "TORCH_LIBRARY_IMPL(kernelmap_ext, CPU, m)" in cpp
    cu = (out / "csrc/myadd_kernel.cu").read_text()
    assert "#include <torch" not in cu and "#include <ATen" not in cu and "#include <c10" not in cu
    init = (out / "myadd/__init__.py").read_text()
    assert "torch.library.register_fake(OP)" in init and "torch.library.register_autograd(OP" in init
    assert "BuildExtension" in (out / "setup.py").read_text()
    assert "cpp_extension.load(" in (out / "myadd/_build.py").read_text()


def test_without_cuda_no_cuda_files(tmp_path):
    from kernelmap.extend import scaffold

    result = scaffold("aten::relu", "plainrelu", out=tmp_path / "p")
    assert not any(str(f).endswith((".cu", "_cuda.cpp")) for f in result.files)
    assert result.family == "pointwise"


def test_families(tmp_path):
    from kernelmap.extend import scaffold

    assert scaffold("aten::convolution", "c", out=tmp_path / "c").family == "convolution"
    assert scaffold("aten::sum.dim_IntList", "r", out=tmp_path / "r").family == "reduction"
    assert scaffold("aten::prod.dim_int", "q", out=tmp_path / "q").family == "reduction"
    # var has a `correction` argument no reference loop reads: ATen does it
    assert scaffold("aten::var.correction", "v", out=tmp_path / "v").family == "aten"
    assert scaffold("aten::native_batch_norm", "b", out=tmp_path / "b").family == "batch_norm"
    assert scaffold("aten::erfinv", "e", out=tmp_path / "e").family == "aten"
    # add.Scalar's `other` is a Scalar: no pointwise formula over two tensors fits it
    assert scaffold("aten::add.Scalar", "s", out=tmp_path / "s").family == "aten"


def test_the_command_prints_the_schema_and_files(kernelmap_cli, tmp_path):
    done = kernelmap_cli("scaffold", "aten::relu", "--name", "myrelu", "--out", str(tmp_path / "r"))
    assert done.returncode == 0, done.stderr
    assert "kernelmap_ext::myrelu: myrelu(Tensor self) -> Tensor" in done.stdout
    assert "csrc/myrelu.cpp" in done.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["aten::not_an_op", "--name", "x"], "unknown name 'aten::not_an_op'"),
        (["torch.nn.Conv2d", "--name", "x"], "not an operator"),
        (["torch.nn.functional.relu", "--name", "x"], "not an operator with a schema; it reaches aten::relu"),
        (["aten::relu", "--name", "my-relu"], "NAME must be an identifier"),
        (["aten::relu", "--name", "numpy"], "the name of an installed module"),
        (["aten::relu", "--name", "r", "--extra", "float beta"], "needs a default"),
        (["aten::add_.Tensor", "--name", "r"], "in-place"),
    ],
)
def test_bad_input_is_one_line_and_status_2(kernelmap_cli, tmp_path, args, message):
    done = kernelmap_cli("scaffold", *args, "--out", str(tmp_path / "out"))
    assert done.returncode == 2, done.stderr
    assert message in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not (tmp_path / "out").exists()


def test_an_existing_folder_is_refused_unless_forced(kernelmap_cli, tmp_path):
    out = tmp_path / "myrelu"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    done = kernelmap_cli("scaffold", "aten::relu", "--name", "myrelu", "--out", str(out))
    assert done.returncode == 2
    assert "exists" in done.stderr and "--force" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert not (out / "csrc").exists()
    done = kernelmap_cli("scaffold", "aten::relu", "--name", "myrelu", "--out", str(out), "--force")
    assert done.returncode == 0, done.stderr
    assert (out / "csrc" / "myrelu.cpp").is_file()
    assert (out / "notes.txt").read_text() == "mine"  # --force rewrites the scaffold's files, nothing else
