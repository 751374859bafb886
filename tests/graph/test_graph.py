"""`stack` and `callers` on the real Debian 2.6.0 tree and the installed torch.
Every location is checked against the file it names."""

from __future__ import annotations

import json
import re

import pytest

from kernelmap import graph
from kernelmap.errors import BadInput, UnknownName
from kernelmap.model import EdgeKind
from tests.conftest import run_kernelmap
from tests.graph.conftest import TREE_NAME, in_order, line_of, no_tree_cache, paths_to, walk


def name_is(text):
    return lambda node: node.name == text


def name_ends(text):
    return lambda node: node.name.endswith(text)


def check_locations(tree):
    """Each C++ definition node's line really holds that definition's name."""
    checked = 0
    for node, _ in walk(tree):
        if node.kind == "kernel" and node.location is not None and node.location.disk_path is not None:
            short = node.name.rsplit("::", 1)[-1]
            if short in ("meta", "impl"):  # TORCH_META_FUNC / TORCH_IMPL_FUNC spell the op, not the method
                continue
            text = "\n".join(node.location.disk_path.read_text(errors="replace").splitlines()[node.location.line - 1 : node.location.line + 2])
            assert short in text, (node.name, str(node.location))
            checked += 1
    return checked


@pytest.fixture(scope="module")
def conv_cuda(context):
    return graph.stack("torch.nn.Conv2d", context("cuda"))


def test_conv2d_cuda_reaches_cudnn_through_every_layer(conv_cuda):
    wanted = [
        name_ends("Conv2d.forward"),
        name_is("torch.nn.functional.conv2d"),
        name_is("torch.conv2d"),
        lambda n: n.kind == "binding" and n.name == "THPVariable_conv2d",
        name_is("aten::conv2d"),
        name_is("at::native::conv2d_symint"),
        name_is("aten::convolution"),
        name_is("aten::_convolution"),
        lambda n: n.name == "aten::cudnn_convolution" and "ConvBackend::Cudnn" in (n.condition or ""),
        name_is("at::native::cudnn_convolution"),
        name_is("at::native::raw_cudnn_convolution_forward_out"),
    ]
    v8 = paths_to(conv_cuda, lambda n: n.kind == "vendor" and n.name in ("cudnnBackendExecute", "cudnn_frontend::VariantPackBuilder"))
    v7 = paths_to(conv_cuda, lambda n: n.kind == "vendor" and n.name == "cudnnConvolutionForward")
    assert v8 and v7, "both the cuDNN v8 (frontend/backend) and v7 API paths are shown"
    assert any(in_order(p, wanted) for p in v8)
    assert any(in_order(p, wanted + [name_ends("raw_cudnn_convolution_forward_out_v7")]) for p in v7)
    for path in v7[:1] + v8[:1]:
        assert path[-1].attrs["closed"] is True
        assert any("AT_CUDNN_ENABLED()" in (n.condition or "") for n in path)
    assert check_locations(conv_cuda) > 20


def test_both_cudnn_definitions_are_shown_under_their_conditions(conv_cuda):
    groups = paths_to(conv_cuda, lambda n: n.kind == "alternatives" and n.name.endswith("raw_cudnn_convolution_forward_out"))
    assert groups
    conditions = {c.condition for c in groups[0][-1].children}
    assert conditions == {"#if AT_CUDNN_ENABLED()", "#if !AT_CUDNN_ENABLED()"}
    for child in groups[0][-1].children:
        assert "raw_cudnn_convolution_forward_out" in line_of(child)


def test_python_layer_points_into_the_selected_tree(conv_cuda, indexed_tree):
    """Note [graph versions]: the tree's own conv.py, not the wheel's."""
    forward = paths_to(conv_cuda, name_ends("Conv2d.forward"))[0][-1]
    assert forward.location.origin == indexed_tree.origin
    assert forward.location.disk_path == indexed_tree.root / "torch/nn/modules/conv.py"
    assert line_of(forward).lstrip().startswith("def forward(")
    binding = paths_to(conv_cuda, lambda n: n.kind == "binding" and n.name == "THPVariable_conv2d")[0][-1]
    assert binding.location.path.startswith("torch/csrc/autograd/generated/python_torch_functions")
    assert binding.location.origin.version == indexed_tree.origin.version
    assert "THPVariable_conv2d" in line_of(binding)
    assert any("conv2d(Tensor input" in s for s in binding.attrs["signatures"])


def test_conv2d_cpu_reaches_slow_and_onednn_paths_and_collapses_cudnn(context):
    tree = graph.stack("torch.nn.Conv2d", context("cpu"))
    slow = paths_to(tree, lambda n: n.name in ("aten::thnn_conv2d", "aten::_slow_conv2d_forward") and n.kind == "op")
    assert any("ConvBackend::Slow2d" in (n.condition or "") for p in slow for n in p)
    assert paths_to(tree, name_is("at::native::slow_conv2d_forward_cpu"))
    onednn = paths_to(tree, lambda n: n.kind == "vendor" and n.name.startswith("ideep::convolution_forward"))
    assert onednn and any(p[-1].attrs["library"] for p in onednn)
    assert any(any(n.name == "aten::mkldnn_convolution" for n in p) for p in onednn)
    cudnn = paths_to(tree, lambda n: n.name == "aten::cudnn_convolution")
    assert cudnn and all(p[-1].attrs.get("collapsed") and not p[-1].children for p in cudnn)


def test_add_cpu_reaches_meta_ufunc_stub_kernel_and_inner_loop(context):
    generated = context("cpu").generated  # the tree's own, regenerated with its torchgen
    tree = graph.stack("torch.add", context("cpu"))
    meta = paths_to(tree, name_ends("structured_add_Tensor::meta"))
    assert meta and "TORCH_META_FUNC2(add, Tensor)" in line_of(meta[0][-1])
    impl = paths_to(tree, lambda n: n.kind == "generated" and n.location.path.endswith("UfuncCPU_add.cpp"))
    assert impl and "TORCH_IMPL_FUNC(ufunc_add_CPU)" in (generated.root / impl[0][-1].location.path).read_text().splitlines()[impl[0][-1].location.line - 1]
    stub_kernel = paths_to(tree, lambda n: n.kind == "generated" and n.via is EdgeKind.STUB)
    assert stub_kernel and any(n.name == "add_stub" for n in stub_kernel[0])
    kernel_file = (generated.root / stub_kernel[0][-1].location.path).read_text()
    assert "REGISTER_DISPATCH(add_stub, &add_kernel)" in kernel_file
    loop = paths_to(tree, lambda n: n.kind == "inner_loop")
    assert loop and loop[0][-1].location.path == "aten/src/ATen/native/ufunc/add.h"
    assert re.search(r"\badd\(", line_of(loop[0][-1]))
    assert paths_to(tree, lambda n: n.kind == "device_loop" and n.name == "cpu_kernel_vec")


def test_add_cuda_reaches_the_gpu_loop(context):
    tree = graph.stack("torch.add", context("cuda"))
    launches = paths_to(tree, lambda n: n.kind == "device_loop" and n.name == "gpu_kernel")
    assert launches and any(n.location.path.endswith("UfuncCUDA_add.cu") for n in launches[0] if n.location)


def test_mul_cpu_reaches_mul_stub_cpu_kernel(context, indexed_tree):
    tree = graph.stack("torch.mul", context("cpu"))
    kernels = [p for p in paths_to(tree, lambda n: n.via is EdgeKind.STUB and n.kind == "kernel") if any(x.name == "mul_stub" for x in p)]
    assert kernels
    kernel = kernels[0][-1]
    assert kernel.location.path.startswith("aten/src/ATen/native/cpu/")
    text = kernel.location.disk_path.read_text()
    assert re.search(rf"REGISTER_DISPATCH\(mul_stub,\s*&{kernel.name.rsplit('::', 1)[-1]}\)", text)


def test_callers_of_cudnn_convolution_forward_reach_python(context):
    tree = graph.callers("cudnnConvolutionForward", context("cuda"))
    names = {node.name for node, _ in walk(tree)}
    assert {"aten::cudnn_convolution", "aten::_convolution", "aten::conv2d", "torch.nn.functional.conv2d"} <= names
    # (one route: aten::_convolution is reached from conv2d's convolution; the deprecated overload's route is another)
    assert any(in_order(path, [name_is("cudnnConvolutionForward"), name_is("aten::cudnn_convolution"), name_is("aten::_convolution"), name_is("aten::conv2d")])
               for path in paths_to(tree, name_is("torch.nn.functional.conv2d")))


def test_a_tree_answers_every_static_layer_so_stack_notes_no_mismatch(context, indexed_tree):
    """Nothing in a stack is live: with the tree holding its Python, yaml and
    codegen, every location is the tree's or generated from it, and no
    version note is printed."""
    tree = graph.stack("aten::conv2d", context("cuda"))
    assert not [n for n in tree.notes if "version mismatch" in n]
    versions = {node.location.origin.version for node, _ in walk(tree) if node.location and node.location.origin}
    assert versions == {indexed_tree.origin.version}
    out = run_kernelmap("stack", "aten::conv2d", "--device", "cuda", "--source", TREE_NAME)
    assert out.returncode == 0, out.stderr
    assert "version mismatch" not in out.stdout + out.stderr


def test_unknown_targets_and_bad_depths(context):
    with pytest.raises(UnknownName) as e:
        graph.stack("aten::conv2", context("cpu"))
    assert "conv2d" in e.value.suggestions
    with pytest.raises(UnknownName):
        graph.stack("at::native::no_such_kernel_anywhere", context("cpu"))
    with pytest.raises(BadInput):
        graph.stack("aten::conv2d", context("cpu"), depth=-1)
    with pytest.raises(BadInput):
        graph.stack("conv2d; rm -rf /", context("cpu"))
    root_only = graph.stack("aten::conv2d", context("cpu"), depth=0)
    assert not root_only.root.children and root_only.root.attrs.get("truncated")
    huge = graph.stack("aten::_convolution", context("cpu"), depth=10**6)
    assert sum(1 for _ in walk(huge)) <= graph.MAX_NODES * 2


def test_recursion_is_cut_and_marked(context):
    tree = graph.stack("aten::is_conj", context("cpu", all_calls=True))
    cycles = [n for n, _ in walk(tree) if n.attrs.get("cycle")]
    assert cycles and all(not n.children for n in cycles)


def test_a_symbol_with_many_same_named_candidates(context, indexed_tree):
    from kernelmap.source import open_index

    index = open_index(indexed_tree)
    counts = {}
    for (name,) in index._db.execute("SELECT s.text FROM symbols JOIN strings s ON s.id = symbols.short_id"):
        counts[name] = counts.get(name, 0) + 1
    name, count = max(((n, c) for n, c in counts.items() if re.fullmatch(r"[A-Za-z_]\w*", n)), key=lambda x: x[1])
    assert count >= 50
    tree = graph.stack(name, context("cpu"))
    assert tree.root.kind == "symbol"
    assert tree.root.attrs["candidates"] == len(index.definitions(name)) >= 50
    assert len(tree.root.children) == tree.root.attrs["candidates"]


def test_cli_json_and_errors(indexed_tree, generated):
    out = run_kernelmap("stack", "torch.mul", "--device", "cpu", "--source", TREE_NAME, "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["root"]["name"] == "torch.mul"
    bad = run_kernelmap("stack", "aten::conv2", "--source", TREE_NAME)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and "conv2d" in bad.stderr
    bad = run_kernelmap("callers", "no_such_symbol_xyz", "--source", TREE_NAME)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
    bad = run_kernelmap("stack", "aten::conv2d", "--depth", "-3", "--source", TREE_NAME)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr


def test_without_a_tree_the_python_and_operator_layers_still_answer(tmp_path, monkeypatch, generated):
    monkeypatch.setenv("KERNELMAP_CACHE_DIR", str(no_tree_cache(tmp_path, generated)))
    monkeypatch.delenv("KERNELMAP_SOURCE", raising=False)
    context = graph.open_context("cuda")
    tree = graph.stack("torch.nn.functional.conv2d", context)
    assert any("no source tree" in n for n in tree.notes)
    names = [n.name for n, _ in walk(tree)]
    assert "torch.conv2d" in names and "aten::conv2d" in names
    assert not any(n.location and n.location.origin and n.location.origin.kind.value == "tree" for n, _ in walk(tree))
    with pytest.raises(Exception) as e:
        graph.callers("cudnnConvolutionForward", graph.open_context("cuda"))
    assert "source tree" in str(e.value)


def test_where_with_a_device_shows_the_kernels_source(indexed_tree, generated):
    out = run_kernelmap("where", "torch.mul", "--device", "cpu", "--static", "--json", env={"KERNELMAP_SOURCE": TREE_NAME})
    assert out.returncode == 0, out.stderr
    steps = {s["role"]: s for s in json.loads(out.stdout)["source"]}
    stub = steps["stub kernel"]
    path = indexed_tree.root / stub["location"]["path"]
    assert stub["name"].endswith("mul_kernel")
    assert re.search(r"REGISTER_DISPATCH\(mul_stub,\s*&mul_kernel\)", path.read_text())
    assert "mul_kernel" in path.read_text().splitlines()[stub["location"]["line"] - 1]
    plain = run_kernelmap("where", "torch.mul", "--static", env={"KERNELMAP_SOURCE": TREE_NAME})
    assert "source (" not in plain.stdout  # only with an explicit --device


def test_where_names_the_structured_impl_not_meta(context, indexed_tree):
    """A structured operator's entry kernel on a device is its TORCH_IMPL_FUNC, not the meta function."""
    from kernelmap import api

    answer = api.where("aten::mm", device="cuda", with_source=True, static=True, source=indexed_tree.name)
    entry = next(s for s in answer.source if s.role == "entry kernel")
    assert entry.name.endswith("::impl") and "meta" not in entry.name
    line = entry.location.disk_path.read_text().splitlines()[entry.location.line - 1]
    assert "TORCH_IMPL_FUNC(mm_out_cuda)" in line


def test_backend_selectors_are_kept(context):
    """_select_conv_backend decides cuDNN vs the others: it is shown, not pruned as plumbing."""
    from kernelmap import graph

    tree = graph.stack("aten::_convolution", context("cuda"), depth=3)
    found = [n for _, n in tree.walk() if n.name.endswith("_select_conv_backend") and n.kind == "kernel"]
    assert found
    line = found[0].location.disk_path.read_text().splitlines()[found[0].location.line - 1 : found[0].location.line + 2]
    assert any("_select_conv_backend" in x for x in line)


def test_a_host_function_named_like_a_launcher_is_followed(context):
    """launch_clamp_scalar (cuda/TensorCompare.cu) is a host function: followed down to its gpu_kernel, not a leaf."""
    from kernelmap import graph

    tree = graph.stack("aten::clamp", context("cuda"), depth=12)
    nodes = [n for _, n in tree.walk() if n.name.endswith("launch_clamp_scalar")]
    assert nodes and all(n.kind == "kernel" for n in nodes)
    expanded = [n for n in nodes if n.children]
    assert expanded and any(c.kind == "device_loop" and c.name == "gpu_kernel" for c in expanded[0].children)
    line = expanded[0].location.disk_path.read_text().splitlines()[expanded[0].location.line - 1]
    assert "launch_clamp_scalar" in line


def test_calls_from_two_branches_with_the_same_condition_stay_apart(context, indexed_tree):
    """batch_norm_cpu calls batch_norm_cpu_transform_input_template under `if (!train)` twice (mixed type or not): both shown."""
    from kernelmap import graph

    tree = graph.stack("at::native::batch_norm_cpu", context("cpu", all_calls=True), depth=2)
    calls = [n for _, n in tree.walk() if n.name.endswith("batch_norm_cpu_transform_input_template") and n.condition == "if (!train)"]
    lines = sorted({n.attrs["call_site"].line for n in calls})
    assert len(lines) == 2
    text = (indexed_tree.root / calls[0].attrs["call_site"].path).read_text().splitlines()
    assert all("batch_norm_cpu_transform_input_template" in text[line - 1] for line in lines)
