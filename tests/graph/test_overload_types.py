"""Note [overloads told apart by an argument's type]: a call whose overloads
differ in a parameter's type, passed a name whose declaration gives its type,
is the overload that takes that type. Ground truth is read from the 2.6.0 tree."""

from __future__ import annotations

import re

from kernelmap import graph
from kernelmap.graph.overloads import _parameter_type
from kernelmap.graph.ends import call_ends
from kernelmap.model import NodeKind
from tests.graph.conftest import line_of, walk

SCATTER = "aten/src/ATen/native/cuda/ScatterGatherKernel.cu"


def _operator_parameters(lines: list[str], line: int) -> str:
    """The text of a declarator from its line to the `)` that closes its parameters."""
    text = "\n".join(lines[line - 1 : line + 12])
    return text[: text.index(")", text.index("operator()") + len("operator()"))]


def test_the_functor_overload_taking_the_arguments_declared_type(tree_2_6, context):
    text = (tree_2_6 / SCATTER).read_text()
    lines = text.splitlines()
    declared = re.search(r"^static (\w+) reduce_add;", text, re.M).group(1)
    body = text[text.index("void scatter_add_cuda_kernel("):]
    assert re.match(r"[^}]*cuda_scatter_gather_base_kernel<[^>]*>\(\)\(\s*self, dim, index, src,\s*\"\w+\", reduce_add\);", body)

    tree = graph.stack("at::native::scatter_add_cuda_kernel", context("cuda"), depth=2)
    called = [n for n in tree.root.children if n.name.endswith("cuda_scatter_gather_base_kernel::operator()")]
    assert len(called) == 1 and called[0].kind is NodeKind.KERNEL, [(n.name, n.kind) for n in tree.root.children]
    chosen = called[0].location.line
    assert f"const {declared}& f" in _operator_parameters(lines, chosen)
    # the struct's other call operators take another type there: the choice was needed
    others = [i + 1 for i, t in enumerate(lines) if re.match(r"\s*void operator\(\)\(\s*$", t) and i + 1 != chosen]
    assert others and all(f"const {declared}& f" not in _operator_parameters(lines, o) for o in others)
    assert called[0].children, "followed, not shown as an ambiguous call"


def test_scatter_add_on_cuda_ends_in_the_launch_of_its_default_route(context):
    """The default route (not the deterministic one through index_put_) now reaches its launch."""
    ends = call_ends(graph.stack("aten::scatter_add", context("cuda")))
    best = ends[0]
    names = [n.name for n in best.path]
    assert "scatter_add_stub" in names and not any(n.startswith("aten::index_put") for n in names)
    assert best.node.kind in (NodeKind.LAUNCH, NodeKind.DEVICE_LOOP)
    assert "<<<" in line_of(best.node) or best.node.name in line_of(best.node)


def test_parameter_types_are_read_without_qualifiers():
    assert _parameter_type("const ReduceAdd& f") == "ReduceAdd"
    assert _parameter_type("const at::Tensor &self") == "Tensor"
    assert _parameter_type("c10::optional<std::vector<int64_t>> sizes = std::nullopt") == "optional<vector<int64_t>>"
    assert _parameter_type("std::optional<Generator> generator") == _parameter_type("const std::optional<at::Generator>&")
    assert _parameter_type("const Arguments&") == "Arguments"  # unnamed
    assert _parameter_type("unsigned int x") == _parameter_type("unsigned int") and _parameter_type("void (*f)(int)") is None


def test_a_cast_argument_chooses_the_overload_of_its_type(tree_2_6, context):
    """native::randn(size, static_cast<std::optional<Generator>>(std::nullopt), ...)
    is the overload taking a generator, not the one taking names (TensorFactories.cpp)."""
    path = "aten/src/ATen/native/TensorFactories.cpp"
    lines = (tree_2_6 / path).read_text().splitlines()
    [call] = [i for i, t in enumerate(lines, 1) if "return native::randn(size, static_cast<std::optional<Generator>>(std::nullopt)" in t]
    tree = graph.stack("aten::randn", context("cpu"), depth=4)
    [caller] = [n for n, _ in walk(tree) if n.name == "at::native::randn" and n.location.line < call < (n.location.end_line or 0) + 1]
    [called] = [c for c in caller.children if c.name == "at::native::randn"]
    assert called.kind is NodeKind.KERNEL and called.location.path == path
    assert "std::optional<Generator> generator" in " ".join(lines[called.location.line - 1 : called.location.line + 1])


def test_an_overload_taking_another_plain_class_of_the_file_cannot_be_called(tree_2_6, context):
    """cpu_scatter_gather_base_kernel<>()(..., tensor_assign): no call operator
    takes a TensorAssign; the ones taking ReduceMean& or ReduceMaximum& (other
    plain classes of ScatterGatherKernel.cpp) cannot, the template can."""
    path = "aten/src/ATen/native/cpu/ScatterGatherKernel.cpp"
    text = (tree_2_6 / path).read_text()
    lines = text.splitlines()
    declared = re.search(r"^static (\w+) tensor_assign;", text, re.M).group(1)
    assert re.search(rf"^class {declared} \{{", text, re.M)
    tree = graph.stack("aten::gather", context("cpu"), depth=5)
    [kernel] = [n for n, _ in walk(tree) if n.name.endswith("::gather_cpu_kernel")]
    [called] = [c for c in kernel.children if c.name.endswith("cpu_scatter_gather_base_kernel::operator()")]
    assert called.kind is NodeKind.KERNEL
    head = " ".join(lines[called.location.line - 3 : called.location.line + 2])
    assert "func_t& kernel_func" in head and re.search(r"template\s*<\s*typename func_t\s*>", head)
