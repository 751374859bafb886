"""Real CUDA evidence, replayed without a GPU (tests/trace/cuda, recorded on
an H100 by scripts/cuda/record and made into fixtures by
scripts/cuda/fixtures.py; README.md there says what each file is).

- The traces (ResNet-50 forward and forward+backward, float32 and bfloat16
  autocast, cudnn.benchmark off and on; a transformer block with each
  attention backend) are read as `kernelmap trace --from` reads them, against
  the 2.6.0 tree: every GPU kernel hangs under the operator that launched it,
  and at least 99% of each ResNet-50 trace's GPU time is attached to a source
  location in the tree or to a closed library. Every location is checked
  against the file.
- The backends torch chose for ResNet-50's layers on that GPU
  (`_select_conv_backend`, `_select_batch_norm_backend`) are the branches the
  traces show running and the branches `stack --device cuda` keeps open.
- The dispatcher's registrations, `where --device cuda` and `verify --key
  CUDA` as they came out on the GPU.
"""

from __future__ import annotations

import gzip
import json
import re
from collections import Counter
from pathlib import Path

import pytest

from kernelmap import answers, graph
from kernelmap.kernels import KernelResolver
from kernelmap.trace import load
from tests.graph.conftest import context, generated, indexed_tree  # noqa: F401

pytestmark = pytest.mark.slow

DATA = Path(__file__).resolve().parent / "cuda"
TRACES = sorted(DATA.glob("*.json.gz"))
RESNET = [p for p in TRACES if p.name.startswith("resnet50_")]
DEVICE = ("gpu_kernel", "gpu_memcpy", "gpu_memset")


def live() -> dict:
    return json.loads((DATA / "live.json").read_text())


@pytest.fixture(scope="module")
def traces(indexed_tree):
    """Every fixture trace, loaded and resolved against the 2.6.0 tree (once)."""
    return {p.name: load(p, source_tree=indexed_tree.name) for p in TRACES}


@pytest.fixture(scope="module")
def resolver(indexed_tree):
    from kernelmap.source import open_index

    return KernelResolver(open_index(indexed_tree), indexed_tree.root, indexed_tree.name)


def device_nodes(t):
    """(node, the operators above it, innermost first) of every device event."""
    stack = [(t.tree.root, ())]
    while stack:
        node, ops = stack.pop()
        if node.kind in DEVICE:
            yield node, ops
        inner = (node.name, *ops) if node.kind == "op" else ops
        stack.extend((c, inner) for c in node.children)


def ops_below(node, name):
    """Operators named `name` at or below `node`."""
    stack = [node]
    while stack:
        n = stack.pop()
        if n.kind == "op" and n.name == name:
            yield n
        stack.extend(n.children)


def test_the_fixtures_say_where_they_were_recorded():
    run = live()["run"]
    assert run["torch"].startswith("2.11") and run["gpu"].startswith("NVIDIA H100") and run["capability"] == "9.0"
    assert run["cudnn"] >= 90000 and run["cublas_wheel"].startswith("13.")
    assert len(RESNET) == 8 and len(TRACES) == 12
    for path in TRACES:
        with gzip.open(path) as f:
            doc = json.load(f)
        assert doc["deviceProperties"][0]["name"] == run["gpu"]
        assert not any("kernelmap" in (e.get("args") or {}) for e in doc["traceEvents"]), "annotations are taken out"


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name.removesuffix(".json.gz"))
def test_every_gpu_kernel_hangs_under_the_operator_that_launched_it(path, traces):
    t = traces[path.name]
    seen = 0
    for node, ops in device_nodes(t):
        seen += 1
        assert ops, f"{node.name} has no operator above it"
        assert node.attrs.get("launched_by") == ops[0], (node.name, ops[:2])
    assert seen > 20


def _split(t) -> tuple[float, float, float, Counter]:
    """(total, with a source location, in a closed library) GPU time, and the rest by kernel name."""
    total = source = closed = 0.0
    rest: Counter = Counter()
    for node, _ in device_nodes(t):
        us = float(node.attrs.get("duration_us", 0.0))
        total += us
        if node.attrs.get("source"):
            source += us
        elif node.attrs.get("library") and node.attrs.get("closed"):
            closed += us
        else:
            rest[node.name] += us
    return total, source, closed, rest


@pytest.mark.parametrize("path", RESNET, ids=lambda p: p.name.removesuffix(".json.gz"))
def test_resnet50_gpu_time_is_in_the_tree_or_a_closed_library(path, traces):
    total, source, closed, rest = _split(traces[path.name])
    assert total > 0 and source > 0 and closed > 0
    assert (source + closed) / total >= 0.99, rest.most_common(5)
    gpu = traces[path.name].summary().gpu  # the summary's split agrees with the tree's
    assert gpu.total_us == pytest.approx(total) and gpu.source_us == pytest.approx(source)


def test_the_only_kernels_left_unnamed_are_absent_from_the_tree(traces, indexed_tree):
    """The transformer block's traces come from torch 2.11; a kernel left
    without a location is one that the 2.6.0 tree does not define."""
    left: Counter = Counter()
    for path in TRACES:
        total, source, closed, rest = _split(traces[path.name])
        left.update(rest)
        if path in RESNET:
            continue
        assert (source + closed) / total >= 0.85, rest.most_common(3)
    native = indexed_tree.root / "aten/src/ATen/native"
    text = "\n".join(p.read_text(errors="replace") for p in native.rglob("*") if p.suffix in (".cu", ".cuh", ".h", ".cpp"))
    for name in left:
        short = re.sub(r"<.*", "", name.removeprefix("void ")).rsplit("::", 1)[-1]
        assert short and not re.search(rf"\b{re.escape(short)}\b", text), f"{name} is defined in the tree but not found"


def test_every_location_holds_its_symbol(traces, resolver, indexed_tree):
    checked = 0
    names = {node.name for t in traces.values() for node, _ in device_nodes(t)}
    for name in sorted(names):
        answer = resolver.resolve(name)
        for site in (answer.kernel, answer.functor, *answer.launches):
            if site is None or site.location is None:
                continue
            line = (indexed_tree.root / site.location.path).read_text(errors="replace").splitlines()[site.location.line - 1]
            want = site.symbol.removesuffix("::{lambda}").rsplit("::", 1)[-1]
            assert want in line, (name, site, line)
            checked += 1
    assert checked > 100


def test_kernels_vendored_into_the_tree_are_located(traces, resolver):
    """Flash attention's and the memory-efficient attention's kernels are
    PyTorch's own code (aten/src/ATen/native/transformers), not a closed
    library: each has its definition, flash's through its defining macros."""
    names = {node.name for t in traces.values() for node, _ in device_nodes(t)}
    flash = [n for n in names if "pytorch_flash::" in n or n.startswith("fmha_cutlass")]
    assert len(flash) >= 8
    for name in flash:
        a = resolver.resolve(name)
        assert a.library == "FlashAttention/CUTLASS (in PyTorch)" and not a.closed
        assert a.kernel.location.path.startswith("aten/src/ATen/native/transformers/cuda/"), name


def test_generated_ufunc_functors_point_at_their_arithmetic(resolver, indexed_tree):
    """CUDAFunctor_add is written by torchgen at build time; its arithmetic is ufunc::add."""
    adds = [n for p in RESNET for n in _kernel_names(p) if "CUDAFunctor_add<" in n or "CUDAFunctorOnSelf_add<" in n]
    assert adds
    for name in adds:
        f = resolver.resolve(name).functor
        assert f.symbol == "at::native::ufunc::add" and f.location.path == "aten/src/ATen/native/ufunc/add.h"
    yaml = (indexed_tree.root / "aten/src/ATen/native/native_functions.yaml").read_text()
    assert re.search(r"ufunc_inner_loop:\n\s+Generic: add ", yaml), "add's inner loop is the one the functor calls"


def _kernel_names(path: Path) -> set[str]:
    with gzip.open(path) as f:
        return {e["name"] for e in json.load(f)["traceEvents"] if e.get("cat") == "kernel"}


def test_the_library_a_kernel_is_named_for_matches_the_operator_that_launched_it(traces):
    """The vendor table against the names a real H100 run printed: what cuDNN's
    operators launch is cuDNN's (or ATen's own helpers), what the GEMM
    operators launch is cuBLAS/cuBLASLt's, what the attention operators launch
    is flash attention's, cuDNN's (its SDPA) or ATen's."""
    expect = [
        (re.compile(r"^aten::cudnn_(convolution|batch_norm)"), {"cuDNN", "ATen"}),
        (re.compile(r"^aten::(mm|addmm|bmm|_addmm_activation)$"), {"cuBLAS", "cuBLASLt"}),
        (re.compile(r"^aten::_(flash|efficient)_attention"), {"FlashAttention/CUTLASS (in PyTorch)", "ATen"}),
        (re.compile(r"^aten::_(scaled_dot_product_)?cudnn_attention"), {"cuDNN", "ATen"}),  # 2.11: _cudnn_attention_forward
    ]
    matched: Counter = Counter()
    for t in traces.values():
        for node, ops in device_nodes(t):
            for rx, libraries in expect:
                if node.kind == "gpu_kernel" and rx.search(ops[0]):  # not their memsets (the CUDA runtime's)
                    assert node.attrs.get("library") in libraries, (ops[0], node.name, node.attrs.get("library"))
                    matched[rx.pattern] += 1
    assert all(matched[rx.pattern] for rx, _ in expect), matched


def test_the_chosen_conv_backend_is_the_branch_that_ran_and_the_one_stack_keeps(traces, context):
    convs = live()["conv"]
    assert len({c["module"] for c in convs}) == 53  # every Conv2d of torchvision's ResNet-50
    backends = {c["backend"] for c in convs}
    assert backends == {"Cudnn"}
    for path in RESNET:  # each _convolution of the traces called cudnn_convolution
        for conv in ops_below(traces[path.name].tree.root, "aten::_convolution"):
            assert [c.name for c in conv.children if c.kind == "op"] == ["aten::cudnn_convolution"]
    tree = graph.stack("aten::_convolution", context("cuda"))
    branches = {n.condition: n for n in _walk(tree.root) if (n.condition or "").startswith("case ConvBackend::")}
    for backend in backends:
        node = branches[f"case ConvBackend::{backend}"]
        assert "collapsed" not in node.attrs
    assert branches["case ConvBackend::Miopen"].attrs.get("collapsed")


def test_the_chosen_batch_norm_backend_is_the_branch_that_ran(traces, context):
    """cuDNN for float32; ATen's own kernel for a bfloat16 input with float32
    parameters (autocast), as `_select_batch_norm_backend` said on the GPU."""
    chosen = {(b["dtype"], b["training"]): b["backend"] for b in live()["batch_norm"]}
    assert chosen == {("float32", False): "Cudnn", ("float32", True): "Cudnn",
                      ("bfloat16", False): "Native", ("bfloat16", True): "Native"}
    want = {"Cudnn": "aten::cudnn_batch_norm", "Native": "aten::native_batch_norm"}
    for path in RESNET:
        dtype = "bfloat16" if "_bf16_" in path.name else "float32"
        training = "_train_" in path.name
        for bn in ops_below(traces[path.name].tree.root, "aten::_batch_norm_impl_index"):
            ran = {c.name for c in bn.children if c.kind == "op"} & set(want.values())
            assert ran == {want[chosen[dtype, training]]}, path.name
    tree = graph.stack("aten::_batch_norm_impl_index", context("cuda"))
    kept = {n.name for n in _walk(tree.root) if n.kind == "op" and "collapsed" not in n.attrs}
    assert set(want.values()) <= kept


def _walk(node):
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(n.children)


def test_every_registration_from_generated_code_was_found_at_its_file_and_line():
    """On the GPU, against the files kernelmap regenerated with torch 2.11's
    own torchgen: each TORCH_LIBRARY_IMPL block the dispatcher named registers
    the operator under that key (live.py, as tests/codegen does on the CPU)."""
    r = live()["registrations"]
    assert r["generated"] == f"generated from torch {live()['run']['torch']}"
    assert r["checked"] == r["matched"] and not r["misses"]
    assert sum(r["checked"].values()) > 14000 and r["checked"]["CUDA"] > 1200
    for op, key, path, line, ok, text in r["cuda"]:
        assert ok and re.match(rf"TORCH_LIBRARY_IMPL\(\w+, {key}, m\)", text), (op, key, path, line, text)
        generated_in = "torch/csrc/autograd/generated/VariableType_" if key.startswith("Autograd") else f"build/aten/src/ATen/Register{key}_"
        assert path.startswith(generated_in), (op, key, path)


def test_where_on_the_gpu_names_the_registrations_the_dispatcher_check_found():
    found = {(op, key): (path, line) for op, key, path, line, _, _ in live()["registrations"]["cuda"]}
    checked = 0
    for path in sorted(DATA.glob("where-*.json")):
        doc = json.loads(path.read_text())
        answer = answers.load(doc)
        assert answer.to_json()["kernelmap"] == "where/2"
        op = doc["operator"]["name"]
        for reg in doc["live"]["registrations"]:
            if reg["key"] == "CUDA" and reg["location"]["path"].startswith("build/"):
                assert found[op, "CUDA"] == (reg["location"]["path"], reg["location"]["line"])
                checked += 1
    assert checked >= 4


def test_verify_routed_every_layer_on_the_gpu():
    convs = len({c["module"] for c in live()["conv"]})  # the modules the forward hooks saw on the GPU
    bns = len({b["module"] for b in live()["batch_norm"]})
    reports = {p.stem.removeprefix("verify-"): json.loads(p.read_text()) for p in DATA.glob("verify-*.json")}
    assert set(reports) == {"myconv", "myconv-backward", "dconv", "mycbn"}
    for name, report in reports.items():
        (op,) = report["ops"]
        assert report["passed"] and op["key"] == "CUDA", name
        want = bns if name == "mycbn" else convs
        assert op["calls_per_run"] == want == 53, name
    assert reports["myconv"]["outputs"]["identical"] and reports["mycbn"]["outputs"]["identical"]
    grads = reports["myconv-backward"]["gradients"]
    assert grads["within"] and grads["tensors"] > 100
    projects = dict(line.split(": ", 1) for line in (DATA / "scaffold-tests.txt").read_text().splitlines())
    assert set(projects) == {"add", "bn", "cbn", "conv", "dconv"}
    for name, line in projects.items():  # each scaffolded project's own tests, on the GPU
        assert re.fullmatch(r"\d+ passed(, \d+ skipped)? in [\d.]+s", line), (name, line)
