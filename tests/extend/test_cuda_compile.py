"""The scaffolded CUDA files compile here without a GPU: the kernel file with
nvcc alone (it includes no torch header), the C++ glue against the CPU wheel's
headers (it needs none of torch's CUDA headers). Two projects: an elementwise
kernel (myaddcuda) and an ATen call followed by an epilogue kernel (myconv).
Each file is compiled once."""

from __future__ import annotations

import shutil
import subprocess
import sysconfig
from pathlib import Path

import pytest
from torch.utils.cpp_extension import COMMON_NVCC_FLAGS, include_paths

from kernelmap.extend import scaffold

pytestmark = pytest.mark.slow

NVCC = shutil.which("nvcc")


@pytest.fixture(scope="module")
def myaddcuda(projects) -> Path:
    root = projects / "myaddcuda"
    scaffold("aten::add.Tensor", "myaddcuda", out=root, extra=["float beta=1.0"], cuda=True)
    return root


@pytest.fixture(params=["myaddcuda", "myconv"])
def project(request) -> tuple[Path, str]:
    value = request.getfixturevalue(request.param)
    root = value if isinstance(value, Path) else value.root
    return root, request.param


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
def test_the_kernel_file_compiles_with_nvcc(project, tmp_path):
    root, name = project
    source = root / "csrc" / f"{name}_kernel.cu"
    assert "#include <torch" not in source.read_text() and "#include <ATen" not in source.read_text()
    obj = tmp_path / f"{name}_kernel.o"
    done = subprocess.run([NVCC, *COMMON_NVCC_FLAGS, "-c", str(source), "-o", str(obj)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert obj.stat().st_size > 0


def test_the_cuda_glue_compiles_without_torch_cuda_headers(project):
    root, name = project
    includes = [f"-I{p}" for p in include_paths()] + [f"-I{sysconfig.get_paths()['include']}"]
    done = subprocess.run(["g++", "-std=c++20", "-fsyntax-only", *includes, str(root / "csrc" / f"{name}_cuda.cpp")],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]


def test_the_epilogue_refuses_what_it_cannot_handle_instead_of_skipping(myconv):
    """fp16/bf16 results (autocast) and non-dense layouts get a TORCH_CHECK naming the dtype; channels_last,
    dense, runs through the same flat loop as contiguous."""
    glue = (myconv.root / "csrc" / "myconv_cuda.cpp").read_text()
    assert "if (out.is_contiguous()" not in glue
    assert "TORCH_CHECK(out.is_non_overlapping_and_dense()" in glue
    assert 'not ", out.scalar_type()' in glue
