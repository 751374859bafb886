"""`kernelmap kernel NAME` on the command line."""

from __future__ import annotations

import json

from tests.conftest import run_kernelmap

FILL = ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, at::detail::Array<char*, 1> >"
        "(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)")


def test_kernel_answers_with_launcher_and_functor(real_tree, real_index):
    r = run_kernelmap("kernel", FILL, "--source", real_tree.name, "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["kernelmap"] == "kernel/1" and doc["library"] == "ATen"
    for site, word in ((doc["functor"], "operator()"), (doc["kernel"], "vectorized_elementwise_kernel")):
        path, line = site["location"].rsplit(":", 1)
        assert word in (real_tree.root / path).read_text().splitlines()[int(line) - 1]
    text = run_kernelmap("kernel", FILL, "--source", real_tree.name)
    assert "FillFunctor::operator()" in text.stdout and "launcher" in text.stdout


def test_library_kernel_and_empty_name():
    r = run_kernelmap("kernel", "ncclKernel_AllReduce_RING_LL_Sum_float")
    assert r.returncode == 0 and "NCCL (open)" in r.stdout and "https://github.com/NVIDIA/nccl" in r.stdout
    r = run_kernelmap("kernel", "")
    assert r.returncode == 2 and r.stderr == "kernelmap: error: empty kernel name\n"
