"""Device loops, stubs and dtype branches as nodes of `stack` on the real
2.6.0 tree (issue 16, cause 7): the CPU-capability choice a stub makes, and
the branches a kernel takes for one dtype, each read back from the files."""

from __future__ import annotations

import re

from kernelmap import graph
from kernelmap.model import NodeKind
from tests.graph.conftest import walk


def _registration(tree, relative, stub):
    """The text of the line that registers `stub` in a tree file."""
    return next(t for t in (tree / relative).read_text().splitlines() if re.search(rf"REGISTER\w*DISPATCH\(\s*{stub}\b", t))


def _choose(tree_node):
    return next(n for n, _ in walk(tree_node) if n.name.endswith("DispatchStubImpl::choose_cpu_impl"))


def test_a_stub_says_which_capability_fills_the_avx512_slot(context, tree_2_6):
    """REGISTER_DISPATCH in a native/cpu file leaves the AVX512 slot nullptr
    (DispatchStub.h), so choose_cpu_impl falls back to AVX2's kernel;
    ALSO_REGISTER_AVX512_DISPATCH fills it."""
    header = (tree_2_6 / "aten/src/ATen/native/DispatchStub.h").read_text()
    assert re.search(r"#define REGISTER_DISPATCH\(name, fn\) REGISTER_ARCH_DISPATCH\(name, CPU_CAPABILITY, \(\(void\*\)\(fn\) \? nullptr : nullptr\)\)", header)
    assert _registration(tree_2_6, "aten/src/ATen/native/cpu/BinaryOpsKernel.cpp", "mul_stub").startswith("REGISTER_DISPATCH(")
    mul = _choose(graph.stack("aten::mul.Tensor", context("cpu")))
    assert "REGISTER_DISPATCH leaves the AVX512 slot nullptr" in mul.condition
    assert _registration(tree_2_6, "aten/src/ATen/native/cpu/Activation.cpp", "glu_stub").startswith("ALSO_REGISTER_AVX512_DISPATCH(")
    glu = _choose(graph.stack("aten::glu", context("cpu")))
    assert "ALSO_REGISTER_AVX512_DISPATCH fills the AVX512 slot" in glu.condition


def test_mul_follows_the_branch_of_its_dtype(context, tree_2_6):
    """mul_kernel's `if (dtype == ScalarType::Bool)` branch is collapsed for
    float32 and followed for bool; the reduced-float branch is collapsed for
    float32 and followed for bfloat16 (it also needs a CPU scalar: undecided)."""
    source = (tree_2_6 / "aten/src/ATen/native/cpu/BinaryOpsKernel.cpp").read_text().splitlines()
    start = next(n for n, t in enumerate(source, 1) if t.startswith("void mul_kernel("))
    bool_call = next(n for n, t in enumerate(source, 1) if n > start and "cpu_kernel(iter, [=](bool a, bool b)" in t)

    def loops(dtype):
        tree = graph.stack("aten::mul.Tensor", context("cpu", dtype=dtype))
        return {(n.attrs["call_site"].line): n for n, _ in walk(tree) if n.kind is NodeKind.DEVICE_LOOP and "call_site" in n.attrs
                and n.attrs["call_site"].path.endswith("BinaryOpsKernel.cpp")}

    float32, boolean, bf16 = loops("float32"), loops("bool"), loops("bfloat16")
    assert float32[bool_call].attrs["branch"] == "a branch for another dtype than float32" and not float32[bool_call].children
    assert "branch" not in boolean[bool_call].attrs and boolean[bool_call].children
    reduced = next(line for line, n in float32.items() if "isReducedFloatingType" in (n.condition or "") and not n.condition.startswith("else"))
    assert "branch" in float32[reduced].attrs and "branch" not in bf16[reduced].attrs
    followed = [line for line, n in float32.items() if "branch" not in n.attrs]
    assert len(followed) == 1 and "_AT_DISPATCH_MUL_TYPES" in source[followed[0] - 2]


def test_a_one_dimensional_lambda_goes_through_the_loop1d_overload(context, tree_2_6):
    """cpu_serial_kernel passes a 1-d lambda: serial_for_each's loop1d_t
    overload (TensorIterator.h) wraps it and calls the loop2d_t one
    (TensorIterator.cpp); the lambda, called through loop2d_t inside
    loop_2d_from_1d (TensorIterator.h, whose copy of the data pointers into a
    c10::SmallVector is set-up, not followed here), runs basic_loop."""
    loops_h = (tree_2_6 / "aten/src/ATen/native/cpu/Loops.h").read_text().splitlines()
    header = (tree_2_6 / "aten/src/ATen/TensorIterator.h").read_text().splitlines()
    source = (tree_2_6 / "aten/src/ATen/TensorIterator.cpp").read_text().splitlines()
    start = next(n for n, t in enumerate(loops_h, 1) if re.match(r"void cpu_serial_kernel\(", t))
    lambda_line = next(n for n, t in enumerate(loops_h, 1) if n > start and "iter.serial_for_each([&](char** data" in t)
    expected = [
        ("aten/src/ATen/TensorIterator.h", next(n for n, t in enumerate(header, 1) if re.search(r"void serial_for_each\(loop1d_t loop", t))),
        ("aten/src/ATen/TensorIterator.cpp", next(n for n, t in enumerate(source, 1) if t.startswith("void TensorIteratorBase::serial_for_each(loop2d_t"))),
        ("aten/src/ATen/TensorIteratorInternal.h", None),
        ("aten/src/ATen/TensorIterator.h", next(n for n, t in enumerate(header, 1) if re.search(r"auto loop_2d_from_1d\(", t))),
        ("aten/src/ATen/native/cpu/Loops.h", lambda_line),
        ("aten/src/ATen/native/cpu/Loops.h", next(n for n, t in enumerate(loops_h, 1) if t.startswith("basic_loop("))),
    ]
    tree = graph.stack("cpu_serial_kernel", context("cpu"))
    root = next(c for c in tree.root.children if c.location.line == start)
    node, found, nodes = root, [], []
    while node.children:
        node = next(c for c in node.children if not c.location.path.startswith("c10/"))  # the pointer copy: set-up
        found.append((node.location.path, node.location.line))
        nodes.append(node)
    assert [f for f, _ in found] == [f for f, _ in expected]
    assert all(line is None or (f, line) in found for f, line in expected), found
    assert nodes[4].name.endswith("cpu_serial_kernel::[&](char** data, const int64_t* strides, int64_t n)")

