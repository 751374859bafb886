"""A ROCm-style trace imports and names its libraries; trace option values
that mean nothing, and escape sequences in trace names, are refused or made
harmless."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import run_kernelmap

DATA = Path(__file__).resolve().parent / "data"
ROCM = DATA / "rocm-miopen-rocblas.json"


def test_rocm_trace_imports_and_names_its_libraries():
    from kernelmap.trace import load

    t = load(ROCM)
    kernels = {n.name: n.attrs for _, n in t.tree.walk() if n.kind == "gpu_kernel"}
    events = [e for e in json.loads(ROCM.read_text())["traceEvents"] if e.get("cat") == "kernel"]
    assert set(kernels) == {e["name"] for e in events}
    libraries = {a.get("library") for a in kernels.values()}
    assert {"MIOpen", "Composable Kernel", "Tensile (rocBLAS/hipBLASLt)", "rocBLAS", "hipBLASLt", "ATen"} <= libraries
    summary = t.summary()
    assert summary.gpu.total_us == sum(e["dur"] for e in json.loads(ROCM.read_text())["traceEvents"] if e.get("cat") in ("kernel", "gpu_memcpy"))
    assert summary.gpu.unresolved_us == 0


def test_rocm_gemms_are_never_labelled_cublas(tmp_path):
    """A ROCm build's GEMMs go to rocBLAS or hipBLASLt: addmm (whose Tensile kernel
    either library may hold) is labelled both, mm is too (its kernels come
    from both), a GEMM whose kernels name one library is that one; the same
    trace read as an NVIDIA one says cuBLAS."""
    from kernelmap.trace import load
    from kernelmap.trace.resolve import platform_of

    def libraries(t):
        return {n.name: n.attrs.get("library") for _, n in t.tree.walk() if n.kind == "op"}

    found = libraries(load(ROCM))
    assert found["aten::addmm"] == found["aten::mm"] == "rocBLAS/hipBLASLt"
    doc = json.loads(ROCM.read_text())
    doc["traceEvents"] = [e for e in doc["traceEvents"] if "hipblaslt" not in e.get("name", "").lower()]
    one = tmp_path / "rocblas-only.json"
    one.write_text(json.dumps(doc))
    assert libraries(load(one))["aten::mm"] == "rocBLAS"
    nvidia = json.loads(ROCM.read_text())
    del nvidia["roctracer_version"]
    nvidia["deviceProperties"] = [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "computeMajor": 9, "computeMinor": 0}]
    for e in nvidia["traceEvents"]:
        if e.get("cat") == "cuda_runtime":
            e["name"] = "cudaLaunchKernel"
    path = tmp_path / "nvidia.json"
    path.write_text(json.dumps(nvidia))
    assert libraries(load(path))["aten::addmm"] == "cuBLAS"
    assert platform_of({"deviceProperties": [{"name": "AMD Instinct MI300X", "gcnArchName": "gfx942"}]}) == "rocm"
    assert platform_of({"deviceProperties": [{"name": "NVIDIA A100-SXM4-80GB"}]}) == "cuda"


def test_bad_option_values_are_one_line_errors(tmp_path):
    for option in (["--width", "-5"], ["--top", "-1"], ["--min-us", "nan"], ["--export-chrome", str(tmp_path / "no" / "x.json")]):
        r = run_kernelmap("trace", "--from", str(ROCM), *option)
        assert r.returncode == 2, option
        assert r.stderr.startswith("kernelmap: error: ") and r.stderr.count("\n") == 1, r.stderr


def test_escape_sequences_in_names_never_reach_the_terminal(tmp_path):
    doc = json.loads(ROCM.read_text())
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel":
            e["name"] = "\x1b]0;owned\x07\x1b[2J" + e["name"]
    path = tmp_path / "hostile.json"
    path.write_text(json.dumps(doc))
    r = run_kernelmap("trace", "--from", str(path), "--width", "200")
    assert r.returncode == 0, r.stderr
    assert "\x1b" not in r.stdout and "\x07" not in r.stdout
    assert "\\x1b]0;owned" in r.stdout
