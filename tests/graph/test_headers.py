"""Generated headers: the installed wheel's torch/include as its version's
partial tree, the headers regenerated with the installed torchgen compared
with the shipped ones file by file, and `stack`'s header, `_ops` entry and
device-loop steps found at their lines in the real files (no tree, and the
2.6.0 tree's own regenerated headers)."""

from __future__ import annotations

import re

import pytest

from kernelmap import env, graph
from kernelmap.codegen.headers import compare_headers, generated_headers, unguard, wheel_headers
from kernelmap.model import NodeKind
from tests.graph.conftest import TREE_NAME, no_tree_cache, walk

HEADER_STEP = re.compile(r"inline .*\b(Tensor::)?\w+\(")


def line(location) -> str:
    return location.disk_path.read_text(errors="replace").splitlines()[location.line - 1]


def test_regenerated_headers_equal_the_shipped_ones(generated):
    """Every header torchgen regenerates is shipped, identical once the
    build's TORCH_STABLE_ONLY guard is taken off (Note [shipped header guard]);
    the shipped ops/ headers not regenerated are the two hand-written ones
    the repository keeps in aten/src/ATen/ops/."""
    shipped = wheel_headers()
    assert shipped is not None
    found = compare_headers(generated_headers(), shipped)
    total = len(found.identical) + len(found.guarded)
    print(f"\nheaders: {total} regenerated; identical {len(found.identical)}, identical inside the guard {len(found.guarded)}, "
          f"differing {len(found.differing)}, not shipped {len(found.not_shipped)}; shipped only: {', '.join(found.not_regenerated)}")
    assert total > 7000 and not found.differing and not found.not_shipped
    assert set(found.not_regenerated) == {"ops/from_blob.h", "ops/tensor.h"}
    text = (shipped.aten_dir / "ops/add.h").read_text()
    assert unguard(text) != text and text.splitlines()[0].startswith("#if !defined(TORCH_STABLE_ONLY)")


@pytest.fixture(scope="module")
def add_without_tree(tmp_path_factory, generated):
    import os

    cache = no_tree_cache(tmp_path_factory.mktemp("headers"), generated)
    previous = os.environ["KERNELMAP_CACHE_DIR"]
    os.environ["KERNELMAP_CACHE_DIR"] = str(cache)
    try:
        return {device: graph.stack("torch.add", graph.open_context(device)) for device in ("cpu", "cuda")}
    finally:
        os.environ["KERNELMAP_CACHE_DIR"] = previous


def test_without_a_tree_headers_and_loops_come_from_the_wheels_include(add_without_tree):
    include = env.torch_install().torch_dir / "include"
    nodes = {(n.name, n.kind): n for n, _ in walk(add_without_tree["cpu"])}
    header = nodes[("at::Tensor::add", NodeKind.HEADER)]
    assert header.location.disk_path == include / "ATen/core/TensorBody.h"
    assert re.match(r"inline at::Tensor Tensor::add\(const at::Tensor & other", line(header.location))
    entry = header.children[0]
    assert entry.kind is NodeKind.OPS_ENTRY and entry.name == "at::_ops::add_Tensor::call"
    assert "add_Tensor::call(" in line(entry.location) and entry.location.path.startswith("build/aten/src/ATen/Operators_")
    assert header.attrs["calls"] == ("at::_ops::add_Tensor::call",)
    assert f"return {entry.name}(" in "\n".join(header.location.disk_path.read_text().splitlines()[header.location.line : header.location.line + 2])
    assert entry.children[0].name == "aten::add.Tensor"
    out = nodes[("at::add_out", NodeKind.HEADER)]
    assert out.location.disk_path == include / "ATen/ops/add.h" and "inline at::Tensor & add_out(" in line(out.location)
    # float32's AT_DISPATCH_CASE of the generated add_kernel calls cpu_kernel_vec; cpu_kernel is the Bool case's
    assert ("cpu_kernel", NodeKind.DEVICE_LOOP) not in nodes
    for name in ("cpu_kernel_vec",):
        loop = nodes[(name, NodeKind.DEVICE_LOOP)]
        assert loop.location.disk_path == include / "ATen/native/cpu/Loops.h"
        assert re.match(rf"void {name}\(", line(loop.location))
        assert loop.location.url.endswith(f"/aten/src/ATen/native/cpu/Loops.h#L{loop.location.line}")
    stub = nodes[("add_stub", NodeKind.STUB)]
    declared = stub.attrs["declared_at"]
    assert declared.disk_path == include / "ATen/native/BinaryOps.h"
    assert re.match(r"DECLARE_DISPATCH\(\w+, add_stub\)", line(declared))
    gpu = [n for n, _ in walk(add_without_tree["cuda"]) if n.kind is NodeKind.DEVICE_LOOP and n.location.path.endswith(".cuh")]
    assert gpu and all(re.match(rf"void {n.name}\(", line(n.location)) for n in gpu)


def test_a_trees_stack_uses_its_own_regenerated_headers(context, indexed_tree):
    ctx = context("cpu", requires_grad=True)
    assert ctx.headers is not None and ctx.headers.origin.version == indexed_tree.origin.version
    tree = graph.stack("torch.nn.functional.relu", ctx)
    headers = [n for n, _ in walk(tree) if n.kind is NodeKind.HEADER]
    assert headers
    for node in headers:
        assert node.location.disk_path.is_relative_to(ctx.headers.aten_dir.parents[3])
        assert HEADER_STEP.search(line(node.location)), (node.name, str(node.location))
        assert node.name.rsplit("::", 1)[-1] + "(" in line(node.location)
        (entry,) = node.children
        assert entry.kind is NodeKind.OPS_ENTRY and entry.name.rsplit("::", 2)[-2] + "::call(" in line(entry.location)
    autograd = [n for n, _ in walk(tree) if n.kind is NodeKind.WRAPPER and n.name.startswith("VariableType::")]
    assert autograd
    redispatch = autograd[0].attrs["redispatch"]
    assert "at::redispatch::" in line(redispatch) and redispatch.origin.version == indexed_tree.origin.version
    loops = [n for n, _ in walk(graph.stack("torch.add", context("cpu"))) if n.kind is NodeKind.DEVICE_LOOP and n.location.path.endswith("Loops.h")]
    assert loops and all(n.location.disk_path.is_relative_to(indexed_tree.root) and re.match(rf"void {n.name}\(", line(n.location)) for n in loops)


def test_the_cli_stack_shows_header_steps(indexed_tree):
    from tests.conftest import run_kernelmap

    out = run_kernelmap("stack", "torch.Tensor.add", "--device", "cpu", "--source", TREE_NAME, "--depth", "4")
    assert out.returncode == 0, out.stderr
    assert "at::Tensor::add  [header]" in out.stdout and "at::_ops::add_Tensor::call  [ops_entry]" in out.stdout
