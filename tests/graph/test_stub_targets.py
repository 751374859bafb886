"""A DispatchStub named as a target (`stack mul_stub`, `path torch.mul
at::native::mul_stub`): its kernels are those registered for it, and a
function that shares its name (PaddingKernel.cpp's local `add_stub`) is meant
only when named in full. Lines are read from the tree's files."""

from __future__ import annotations

import re

from kernelmap import graph
from kernelmap.graph.path import path
from kernelmap.model import NodeKind
from tests.graph.conftest import called_operator


def line_of(tree_2_6, path: str, pattern: str) -> int:
    lines = (tree_2_6 / path).read_text(errors="replace").splitlines()
    return next(i for i, text in enumerate(lines, 1) if re.search(pattern, text))


def test_a_stub_is_a_target_by_its_name_qualified_or_not(context, tree_2_6):
    declared = line_of(tree_2_6, "aten/src/ATen/native/BinaryOps.h", r"DECLARE_DISPATCH\(.*\bmul_stub\)")
    registered = line_of(tree_2_6, "aten/src/ATen/native/cpu/BinaryOpsKernel.cpp", r"REGISTER_DISPATCH\(mul_stub, &mul_kernel\)")
    for target in ("mul_stub", "at::native::mul_stub"):
        root = graph.stack(target, context("cpu"), depth=2).root
        assert (root.kind, root.name, root.location.path, root.location.line) == (NodeKind.STUB, "mul_stub", "aten/src/ATen/native/BinaryOps.h", declared)
        kernels = [c for c in root.children if c.kind is NodeKind.KERNEL and c.name.endswith("::mul_kernel")]
        assert kernels and kernels[0].location.path == "aten/src/ATen/native/cpu/BinaryOpsKernel.cpp"
        assert "REGISTER_DISPATCH for CPU" in kernels[0].condition and registered > kernels[0].location.line


def test_a_helper_in_an_anonymous_namespace_does_not_hide_the_stub_of_its_name(context, tree_2_6):
    context = context("cpu")
    helpers = [d for d in context.index.definitions("at::native::add_stub") if "(anonymous namespace)" in d.name]
    assert helpers and helpers[0].location.path == "aten/src/ATen/native/cpu/PaddingKernel.cpp"  # PaddingKernel.cpp's own add_stub
    for target in ("add_stub", "at::native::add_stub"):
        root = graph.stack(target, context, depth=1).root
        assert root.kind is NodeKind.STUB and root.location.path == "aten/src/ATen/native/BinaryOps.h"
        assert re.search(r"DECLARE_DISPATCH\(.*\badd_stub\)", (tree_2_6 / root.location.path).read_text().splitlines()[root.location.line - 1])


def test_a_route_to_a_qualified_stub_is_found(context):
    for target in ("mul_stub", "at::native::mul_stub"):
        answer = path("torch.mul", target, context("cpu"), limit=1)
        assert answer.routes and answer.routes[0].steps[-1].name == "mul_stub"


def test_a_stub_passed_to_a_helper_is_followed(context, tree_2_6):
    """structured_cumsum_out::impl runs cumsum_stub through
    `impl_func_cum_ops(self, dim, result, cumsum_stub)`, which calls its
    `Stub& stub` parameter (Note [stub parameters]): the stub is reached where
    the helper calls it, under the helper's test, and not again at the line
    that passes it."""
    passed = line_of(tree_2_6, "aten/src/ATen/native/ReduceOps.cpp", r"impl_func_cum_ops\(self, dim, result, cumsum_stub\)")
    called = line_of(tree_2_6, "aten/src/ATen/native/ReduceOps.cpp", r"^\s*stub\(self\.device\(\)\.type\(\), result")
    registered = line_of(tree_2_6, "aten/src/ATen/native/cpu/ReduceOpsKernel.cpp", r"REGISTER_DISPATCH\(cumsum_stub,")
    root = graph.stack("aten::cumsum", context("cpu"), depth=5).root
    [impl] = [n for n in walk(root) if n.name == "at::native::structured_cumsum_out::impl"]
    assert not [n for n in impl.children if n.kind is NodeKind.STUB]
    [helper] = [n for n in impl.children if n.name == "at::native::impl_func_cum_ops"]
    assert helper.attrs["call_site"].line == passed
    [stub] = [n for n in helper.children if n.kind is NodeKind.STUB]
    assert (stub.name, stub.location.path, stub.location.line) == ("cumsum_stub", "aten/src/ATen/native/ReduceOps.cpp", called)
    assert stub.condition.endswith("stub = cumsum_stub") and stub.condition.startswith("else of if (self.numel() == 0)")
    kernels = [n for n in stub.children if n.kind is NodeKind.KERNEL and n.name.endswith("::cumsum_cpu_kernel")]
    assert kernels and kernels[0].location.path == "aten/src/ATen/native/cpu/ReduceOpsKernel.cpp" and kernels[0].location.line < registered


def walk(node):
    yield node
    for child in node.children:
        yield from walk(child)


def test_an_operator_passed_to_a_helper_is_followed(context, tree_2_6):
    """Note [operators passed on]: `at::native::abs` returns
    `unary_op_impl_with_complex_to_float(self, at::abs_out)`, and the helper
    calls its parameter: aten::abs.out is reached at the line that passes it;
    `static_cast<OutFunc>(at::logical_and_out)` likewise."""
    ctx = context("cpu")
    for op, kernel, spelled, reached in (
        ("aten::abs", "at::native::abs", r"unary_op_impl_with_complex_to_float\(self, at::abs_out\)", "aten::abs.out"),
        ("aten::logical_and", "at::native::logical_and", r"comparison_op\(self, other, static_cast<OutFunc>\(at::logical_and_out\)\)",
         "aten::logical_and.out"),
    ):
        path = "aten/src/ATen/native/UnaryOps.cpp" if "abs" in op else "aten/src/ATen/native/BinaryOps.cpp"
        passed = line_of(tree_2_6, path, spelled)
        root = graph.stack(op, ctx, depth=4).root
        kernels = [n for n in walk(root) if n.name == kernel and n.location is not None and n.location.path == path]
        assert kernels, [n.name for n in walk(root)]
        ops = [called_operator(c) for c in kernels[0].children if called_operator(c).kind is NodeKind.OPERATOR and called_operator(c).name == reached]
        assert ops and ops[0].attrs["call_site"].line == passed
