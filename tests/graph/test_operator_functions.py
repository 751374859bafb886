"""Operator functions as targets: `stack`, `callers` and `path` take a name
whose last part is `operator()` (a function object's call, as `find` lists
it), on the real 2.6.0 tree; ground truth read from ReduceSumProdKernel.cu."""

from __future__ import annotations

import re

import pytest

from kernelmap import graph
from kernelmap.graph.path import path
from kernelmap.graph.rules import is_symbol_text
from tests.conftest import run_kernelmap
from tests.graph.conftest import TREE_NAME, line_of, walk

FILE = "aten/src/ATen/native/cuda/ReduceSumProdKernel.cu"


def sum_functor_call_lines(tree_2_6) -> set[int]:
    """The lines of ReduceSumProdKernel.cu that define `operator()` inside a
    `struct sum_functor` (the primary template and its specialisation)."""
    lines = (tree_2_6 / FILE).read_text().splitlines()
    found, inside = set(), False
    for number, text in enumerate(lines, 1):
        if re.match(r"\s*struct sum_functor\b", text):
            inside = True
        elif re.match(r"\s*struct \w+", text) or text.startswith("}"):
            inside = False
        if inside and "operator()" in text:
            found.add(number)
    return found


@pytest.mark.parametrize("text", ["sum_functor::operator()", "at::native::sum_functor::operator()", "operator()",
                                  "Vectorized<float>::operator+", "Foo::operator[]", "Foo::operator ()"])
def test_operator_functions_are_names(text):
    assert is_symbol_text(text, ".<>")


@pytest.mark.parametrize("text", ["a::operator(", "a::operator()x", "::operator()", "a b", "operator() + 1", "(x)"])
def test_other_punctuation_is_not_a_name(text):
    assert not is_symbol_text(text, ".<>")


def test_stack_of_a_call_operator_starts_at_its_definitions(context, tree_2_6):
    tree = graph.stack("sum_functor::operator()", context("cuda"), depth=2)
    located = {n.location.line for n, _ in walk(tree) if n.location is not None and n.location.path == FILE and n.name.endswith("sum_functor::operator()")}
    expected = sum_functor_call_lines(tree_2_6)
    assert expected and located == expected
    for node, _ in walk(tree):
        if node.location is not None and node.location.path == FILE and node.name.endswith("::operator()"):
            assert "operator()" in line_of(node)
    names = {n.name for n, _ in walk(tree)}
    assert "at::native::gpu_reduce_kernel" in names  # the primary's call


def test_callers_of_a_call_operator_reach_its_stub(context):
    tree = graph.callers("sum_functor::operator()", context("cuda"), depth=3)
    by_name = {n.name: n for n, _ in walk(tree)}
    kernel = by_name["at::native::sum_kernel_cuda"]
    assert "sum_kernel_cuda" in line_of(kernel)
    assert "sum_stub" in by_name


def test_path_to_a_call_operator(context):
    answer = path("at::native::sum_kernel_cuda", "sum_functor::operator()", context("cuda"))
    assert answer.routes
    last = answer.routes[0].steps[-1]
    assert last.name.endswith("sum_functor::operator()") and "operator()" in line_of(last)


def test_cli_takes_a_call_operator_and_still_refuses_punctuation(indexed_tree):
    done = run_kernelmap("callers", "sum_functor::operator()", "--source", TREE_NAME, "--depth", "2")
    assert done.returncode == 0, done.stderr
    assert "sum_kernel_cuda" in done.stdout
    bad = run_kernelmap("stack", "sum_functor::operator(", "--source", TREE_NAME)
    assert bad.returncode == 2 and bad.stderr.startswith("kernelmap: error: not a target") and bad.stderr.count("\n") == 1
