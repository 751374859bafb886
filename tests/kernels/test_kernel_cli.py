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
    for punctuation in ("()", "<", "::", "<>()"):
        r = run_kernelmap("kernel", punctuation)
        assert r.returncode == 2 and r.stderr == f"kernelmap: error: not a kernel name: {punctuation!r} (no name in it)\n", r.stderr


def _traced_kernel_name(word: str) -> str:
    """A kernel's name as a real trace recorded it (tests/trace/cuda/extension:
    ResNet-50 on an H100, its convolutions routed to a scaffolded `mydconv`)."""
    import gzip
    from pathlib import Path

    fixture = Path(__file__).resolve().parents[1] / "trace/cuda/extension/resnet50_fwd_fp32_mydconv.json.gz"
    events = json.loads(gzip.decompress(fixture.read_bytes()))["traceEvents"]
    return next(e["name"] for e in events if word in e.get("name", ""))


def test_a_kernel_of_an_extension_project_is_found_in_its_sources(tmp_path, real_tree, real_index):
    """--extension DIR (Note [kernels of an extension]): a kernel no tree or
    library names is looked for among the project's sources, and its location
    is given by the file's path there."""
    project = tmp_path / "proj"
    made = run_kernelmap("scaffold", "aten::convolution", "--name", "mydconv", "--kernel", "direct", "--cuda", "--out", str(project))
    assert made.returncode == 0, made.stderr
    name = _traced_kernel_name("mydconv_conv2d_kernel")
    without = json.loads(run_kernelmap("kernel", name, "--source", real_tree.name, "--json").stdout)
    assert without["library"] is None and without["kernel"] is None

    r = run_kernelmap("kernel", name, "--source", real_tree.name, "--extension", str(project), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert (doc["library"], doc["closed"], doc["tree"], doc["extension"]) == ("extension proj", False, None, str(project.resolve()))
    path, line = doc["kernel"]["location"].rsplit(":", 1)
    assert "__global__ void mydconv_conv2d_kernel(" in (project / path).read_text().splitlines()[int(line) - 1]

    from kernelmap.kernels.resolve import KernelAnswer
    from kernelmap.model import OriginKind

    back = KernelAnswer.from_json(doc)  # the project's folder comes back with the location
    assert back.kernel.location.origin.kind is OriginKind.EXTENSION and back.kernel.location.disk_path == (project / path).resolve()
    assert back.to_json() == doc

    text = run_kernelmap("kernel", name, "--source", real_tree.name, "--extension", str(project)).stdout
    assert f"{(project / path).resolve()}:{line}" in text  # the user's own file, by its path
    assert f"(in the sources of the extension project {project.resolve()})" in text and "locations in the tree" not in text


def test_extension_is_consulted_only_for_kernels_nothing_else_names(tmp_path, real_tree, real_index):
    (tmp_path / "k.cu").write_text("__global__ void fill_kernel(float* x) { x[0] = 1; }\n")
    with_dir = json.loads(run_kernelmap("kernel", FILL, "--source", real_tree.name, "--extension", str(tmp_path), "--json").stdout)
    plain = json.loads(run_kernelmap("kernel", FILL, "--source", real_tree.name, "--json").stdout)
    assert with_dir == plain and plain["library"] == "ATen" and plain["extension"] is None

    r = run_kernelmap("kernel", "void myext::other_kernel<float>(float*)", "--source", real_tree.name, "--extension", str(tmp_path))
    assert r.returncode == 0 and "unrecognised" in r.stdout
    assert f"no __global__ definition of other_kernel in the sources under {tmp_path.resolve()}" in r.stderr


def test_extension_must_name_a_folder(tmp_path):
    (tmp_path / "file").write_text("x")
    for bad in (str(tmp_path / "missing"), str(tmp_path / "file"), "x" * 5000):
        r = run_kernelmap("kernel", "void myext::k<float>(float*)", "--extension", bad)
        assert r.returncode == 2 and r.stderr.startswith("kernelmap: error: --extension") and r.stderr.count("\n") == 1, r.stderr
