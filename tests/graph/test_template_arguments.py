"""Note [template arguments]: a call of a template parameter of its caller
runs what the caller's instantiation passes. `bernoulli_impl_<BernoulliStub,
Generator>(self, p, gen)` binds `bernoulli_scalar_kernel` to BernoulliStub,
whose operator() calls bernoulli_scalar_stub. Lines are read from the tree."""

from __future__ import annotations

import re

from kernelmap import graph
from kernelmap.model import NodeKind
from tests.graph.conftest import line_of, walk

TEMPLATES = "aten/src/ATen/native/DistributionTemplates.h"
DISTRIBUTIONS = "aten/src/ATen/native/Distributions.cpp"


def test_a_template_parameter_called_is_the_argument_the_caller_passes(context, tree_2_6):
    templates = (tree_2_6 / TEMPLATES).read_text()
    head = re.search(r"template<template<typename> class (\w+), typename RNG>\nTensor& bernoulli_impl_\(Tensor& self, double p,", templates)
    parameter = head.group(1)
    assert f"{parameter}<RNG>()(self, p, gen);" in templates[head.end():head.end() + 400]
    argument = re.search(r"bernoulli_impl_<(\w+), Generator>\(self, p, ", (tree_2_6 / DISTRIBUTIONS).read_text()).group(1)

    for device in ("cpu", "cuda"):
        tree = graph.stack("aten::bernoulli_.float", context(device), depth=8)
        nodes = [n for n, _ in walk(tree)]
        called = [n for n in nodes if n.name == f"at::native::{argument}::operator()" and parameter in (n.condition or "")]
        assert called, [n.name for n in nodes]
        node = called[0]
        assert f"{parameter} = {argument}" in node.condition and node.location.path == DISTRIBUTIONS
        assert "double p" in "\n".join((tree_2_6 / DISTRIBUTIONS).read_text().splitlines()[node.location.line - 1 : node.location.line + 1])
        stubs = [c for c in node.children if c.kind is NodeKind.STUB]
        assert stubs and "bernoulli_scalar_stub" in line_of(stubs[0])
        # never the file of another device's kernel named like the parameter
        wrong = "cuda/" if device == "cpu" else "cpu/"
        assert not any(n.name.endswith(f"::{parameter}") and n.location and wrong in n.location.path for n in nodes)


SORT = "aten/src/ATen/native/cuda/Sort.cu"


def test_a_template_parameter_deduced_from_a_temporary_binds_the_receivers_class(context, tree_2_6, indexed_tree):
    """sortKeyValueInplace calls `sortCommon(SmallBitonicSort{}, ...)` and
    `sortCommon(MediumRadixSort{}, ...)` (Sort.cu, read here); sortCommon's
    `sorter.template sort<A>(...)` (in its local HANDLE_SORT_CASE) runs each
    class's sort, which launches its kernel. Each instantiation is its own node."""
    from kernelmap import api

    text = (tree_2_6 / SORT).read_text()
    assert re.search(r"template <typename Sorter>\nvoid sortCommon\(Sorter sorter,", text)
    body = text[text.index("void sortKeyValueInplace("):]
    sorters = re.findall(r"sortCommon\((\w+)\{\}, key, value, dim, descending\);", body[: body.index("\n}\n")])
    assert {"SmallBitonicSort", "MediumRadixSort"} <= set(sorters)

    tree = graph.stack("aten::sort.stable", context("cuda"))
    common = [n for n, _ in walk(tree) if n.name == "at::native::sortCommon"]
    assert len(common) >= 2 and not any(n.attrs.get("repeat") for n in common)
    reached = {}
    for node in common:
        methods = [m for m in node.children if "Sorter = " in (m.condition or "")]  # beside the helpers it calls (getTensorInfo)
        assert methods, node
        for method in methods:
            sorter = method.name.removeprefix("at::native::").removesuffix("::sort")
            assert method.name.endswith("::sort") and f"Sorter = {sorter}" in method.condition
            assert re.match(r"\s*void sort\(", line_of(method)), line_of(method)
            reached[sorter] = _launches_below(method)
    assert set(reached.get("SmallBitonicSort", ())) == {"bitonicSortKVInPlace"}
    assert set(reached.get("MediumRadixSort", ())) == {"radixSortKVInPlace"}
    for name in ("bitonicSortKVInPlace", "radixSortKVInPlace"):
        assert re.search(rf"__global__ void\s+{name}\(", (tree_2_6 / "aten/src/ATen/native/cuda/SortUtils.cuh").read_text())
    # the small-input route is tested first (`if (should_use_small_sort(self, dim))` in Sort.cpp): its kernel leads
    answer = api.where("aten::sort", device="cuda", static=True, with_source=True, source=indexed_tree.name)
    leaves = [s.name for s in answer.source if s.role == "leaf"]
    assert leaves[0] == "bitonicSortKVInPlace", leaves


def _launches_below(node):
    """The names of the launches below `node`, each checked at the line that defines it."""
    found, stack = [], [node]
    while stack:
        n = stack.pop()
        if n.kind is NodeKind.LAUNCH:
            assert line_of(n).startswith(f"{n.name}("), (n.name, str(n.location))
            found.append(n.name)
        stack.extend(n.children)
    return found
