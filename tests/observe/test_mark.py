"""`stack`/`path`/`where --observe`'s marking, on the recorded golden set's
stacks of add (no live run): each static step observed, inlined or not
taken, frames the static map lacks added, the observed path first."""

from __future__ import annotations

import pytest

from kernelmap.observe.join import observed_tree
from kernelmap.observe.mark import ADDED, INLINED, NOT_TAKEN, OBSERVED, mark_tree

from tests.observe.conftest import TREE_NAME, walk
from tests.observe.test_golden_set import _capture

ORDER = {OBSERVED: 0, ADDED: 0, INLINED: 1, NOT_TAKEN: 3}


@pytest.fixture(scope="module")
def context(indexed_tree):
    from kernelmap import graph

    return graph.open_context("cpu", source=TREE_NAME)


@pytest.fixture(scope="module")
def marked(golden, source_map, context):
    from kernelmap import graph

    ran = observed_tree(_capture(golden, "aten::add.Tensor"), source_map, "aten::add.Tensor", meta={"torch": golden.header["torch"]})
    return mark_tree(graph.stack("aten::add.Tensor", context, 12), ran)


def test_the_steps_that_ran_are_observed(marked):
    status = {n.name: n.attrs.get("observed") for n, _ in walk(marked)}
    assert status["wrapper_CPU_add_Tensor"] == OBSERVED
    assert status["at::meta::structured_add_Tensor::meta"] == OBSERVED
    assert status["structured_ufunc_add_CPU::impl"] == OBSERVED
    assert status["add_kernel"] == OBSERVED  # reached by a tail call from impl: its caller's frame is gone
    assert NOT_TAKEN in status.values()


def test_every_step_is_marked_and_the_observed_path_leads(marked):
    for node, _ in walk(marked):
        states = [ORDER.get(c.attrs.get("observed"), 2) for c in node.children]
        assert states == sorted(states), node.name
    assert any(n.attrs.get("observed") for n, _ in walk(marked))
    assert any("steps ran" in note for note in marked.notes)


def test_a_stub_the_compiler_folded_is_inlined(marked):
    """add_stub's call operator is inlined into impl: no frame, yet add_kernel below it ran."""
    stubs = [n for n, _ in walk(marked) if n.name == "add_stub"]
    assert stubs and all(n.attrs["observed"] in (INLINED, OBSERVED) for n in stubs)


def test_the_main_path_is_the_observed_path(marked):
    """`stack --observe` marks as its main path the path the call took, down to its deepest work."""
    from kernelmap.observe.mark import observed_path

    path = observed_path(marked)
    assert path[0] is marked.root and len(path) > 3
    assert all(n.attrs.get("observed") in (OBSERVED, INLINED, ADDED, None) for n in path)
    assert path[-1].attrs.get("observed") in (OBSERVED, ADDED)
