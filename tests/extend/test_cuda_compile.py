"""The scaffolded CUDA files compile here without a GPU: the kernel file with
nvcc alone (it includes no torch header), the C++ glue against the CPU wheel's
headers (it needs none of torch's CUDA headers). Each compiled once."""

from __future__ import annotations

import shutil
import subprocess
import sysconfig

import pytest
from torch.utils.cpp_extension import include_paths

pytestmark = pytest.mark.slow

NVCC = shutil.which("nvcc")


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
@pytest.mark.parametrize("fixture", ["myconv"])
def test_the_kernel_file_compiles_with_nvcc(fixture, request, tmp_path):
    built = request.getfixturevalue(fixture)
    name = built.op.split("::")[1]
    obj = tmp_path / f"{name}_kernel.o"
    done = subprocess.run([NVCC, "-c", str(built.root / "csrc" / f"{name}_kernel.cu"), "-o", str(obj)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert obj.stat().st_size > 0


def test_the_cuda_glue_compiles_without_torch_cuda_headers(projects, tmp_path):
    from kernelmap.extend import scaffold

    root = projects / "myaddcuda"
    scaffold("aten::add.Tensor", "myaddcuda", out=root, extra=["float beta=1.0"], cuda=True)
    includes = [f"-I{p}" for p in include_paths()] + [f"-I{sysconfig.get_paths()['include']}"]
    done = subprocess.run(["g++", "-std=c++20", "-fsyntax-only", *includes, str(root / "csrc" / "myaddcuda_cuda.cpp")],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    if NVCC is not None:
        obj = tmp_path / "myaddcuda_kernel.o"
        done = subprocess.run([NVCC, "-c", str(root / "csrc" / "myaddcuda_kernel.cu"), "-o", str(obj)],
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr
