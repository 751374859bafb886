"""A library kernel is answered with the call site of the library entry that
launches its family (Note [kernel families] in kernelmap.vendors), never
another family's: cuDNN's batch norm kernels with
cudnnBatchNormalization*, not the convolution call sites; and "unknown,
because ..." where no rule decides. Checked on every library kernel of the
real traces in tests/trace (HTA's, and the CUDA recordings of ResNet-50 and a
transformer block) against the real 2.6.0 tree: each call site's line holds
the entry it names."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from kernelmap import vendors
from kernelmap.kernels import KernelResolver

TRACES = Path(__file__).resolve().parents[1] / "trace"
FILES = sorted((TRACES / "data").glob("*.json*")) + sorted((TRACES / "cuda").glob("*.json.gz"))


def kernel_names() -> set[str]:
    names = set()
    for path in FILES:
        opener = gzip.open if path.name.endswith(".gz") else open
        with opener(path, "rt") as f:
            data = json.load(f)
        for e in data["traceEvents"] if isinstance(data, dict) else data:
            if isinstance(e, dict) and e.get("cat") in ("kernel", "Kernel", "gpu_memcpy", "gpu_memset") and isinstance(e.get("name"), str):
                names.add(e["name"])
    return names


@pytest.fixture(scope="module")
def resolver(real_index, real_tree):
    return KernelResolver(real_index, real_tree.root, real_tree.name)


@pytest.fixture(scope="module")
def answers(resolver):
    """Every library kernel of the real traces, answered."""
    found = {}
    for name in kernel_names():
        a = resolver.resolve(name)
        if a.library not in (None, "ATen"):
            found[name] = a
    assert len(found) > 300  # cuDNN, cuBLAS, CUB, NCCL, FBGEMM, MIOpen, ... kernels of the recordings
    return found


def line_of(root: Path, location) -> str:
    return (root / location.path).read_text(errors="replace").splitlines()[location.line - 1]


def test_batch_norm_kernels_come_from_cudnns_batch_norm_entries(answers, real_tree_root):
    bn = {n: a for n, a in answers.items() if re.search(r"cudnn::bn_(fw|bw)_", n)}
    assert len(bn) >= 6
    entries = {"bn_fw_inf": "cudnnBatchNormalizationForwardInference", "bn_fw_tr": "cudnnBatchNormalizationForwardTraining",
               "bn_bw": "cudnnBatchNormalizationBackward"}
    for name, a in bn.items():
        entry = next(v for k, v in entries.items() if f"cudnn::{k}" in name)
        assert a.launches and a.unknown is None, name
        for site in a.launches:
            line = line_of(real_tree_root, site.location)
            assert site.symbol.startswith(entry) and site.symbol in line, (name, site, line)
            assert site.location.path == "aten/src/ATen/native/cudnn/BatchNorm.cpp" and "Conv" not in site.location.path
    inference = next(a for n, a in bn.items() if "bn_fw_inf" in n)
    (site,) = inference.launches
    lines = (real_tree_root / site.location.path).read_text().splitlines()
    assert site.location.line == next(i for i, t in enumerate(lines, 1) if "cudnnBatchNormalizationForwardInference(" in t)


def test_convolution_kernels_split_by_direction(answers, real_tree_root):
    for word, entry in (("dgrad", "cudnnConvolutionBackwardData"), ("wgrad", "cudnnConvolutionBackwardFilter"), ("fprop", "cudnnConvolutionForward")):
        found = {n: a for n, a in answers.items() if word in n and a.library == "cuDNN" and (a.family or "").startswith("convolution")}
        assert found, word
        for name, a in found.items():
            symbols = {s.symbol for s in a.launches}
            assert entry in symbols and symbols <= {entry, "cudnnBackendExecute"}, (name, symbols)
            assert all(s.location.path.startswith("aten/src/ATen/native/cudnn/Conv_v") for s in a.launches)


def test_every_call_site_holds_its_entry_and_belongs_to_the_family(answers, real_tree_root):
    families = {}
    for name, a in answers.items():
        if vendors.library(a.library).in_tree:  # a library vendored into the tree: its kernel's own source is named
            assert a.family is None and a.unknown is None, name
            continue
        if a.family is None:
            assert a.unknown and a.unknown.startswith("unknown, because") and not a.launches, name
            continue
        family = next(f for f in vendors.FAMILIES if f.library == a.library and f.name == a.family)
        families[a.family] = families.get(a.family, 0) + 1
        assert (a.launches and a.unknown is None) or (not a.launches and a.unknown.startswith("unknown, because")), name
        for site in a.launches:
            short = site.symbol.split("<")[0].rsplit("::", 1)[-1].lstrip(".")  # `.execute` of `mha_graph->execute(`
            assert short in {e.rsplit("::", 1)[-1] for e in family.entries}, (name, site)
            assert short in line_of(real_tree_root, site.location), (name, site)
            assert site.location.path.startswith(family.where)
    for family in ("batch norm forward, inference", "batch norm forward, training", "batch norm backward", "convolution forward",
                   "convolution backward, data", "convolution backward, weight", "matrix multiply (gemm)", "matrix-vector product (gemv)",
                   "radix sort", "scan", "all-reduce", "send and receive", "memory copy"):
        assert families.get(family), (family, families)


def test_a_kernel_no_rule_decides_is_unknown_with_the_reason(resolver):
    for name, why in (("void cudnn::unheard_of_kernel<float>(float*)", "no rule of kernelmap's cuDNN kernel families matches"),
                      ("triton_poi_fused_add_0", "kernelmap has no rule for which Triton")):
        a = resolver.resolve(name)
        assert a.launches == () and a.family is None and a.unknown.startswith(f"unknown, because {why}"), a
        assert a.unknown in a.to_text()


def test_the_json_carries_the_family_and_the_reason(resolver):
    from kernelmap.kernels import KernelAnswer

    a = resolver.resolve("void cudnn::bn_fw_inf_1C11_kernel_NCHW<float, float, true, 1>(float, float)")
    doc = json.loads(json.dumps(a.to_json()))
    assert doc["family"] == "batch norm forward, inference" and doc["entries"] == ["cudnnBatchNormalizationForwardInference"]
    assert KernelAnswer.from_json(doc).family == a.family
