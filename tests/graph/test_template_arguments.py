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
