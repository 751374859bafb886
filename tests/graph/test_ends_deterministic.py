"""Note [ranking a call's ends]: an arm taken only with deterministic
algorithms on ranks after the arms of the default settings."""

from __future__ import annotations

import re

from kernelmap.graph.ends import call_ends, deterministic_only


def test_only_an_unnegated_conjunct_of_the_setting_opts_in():
    assert deterministic_only("if (globalContext().deterministicAlgorithms() && (self.device().type() == DeviceType::CUDA || x))")
    assert deterministic_only("if (at::globalContext().deterministicAlgorithms())")
    assert not deterministic_only("else of if (globalContext().deterministicAlgorithms() && self.is_cuda())")
    assert not deterministic_only("if (!globalContext().deterministicAlgorithms() && self.is_cuda())")
    assert not deterministic_only("if (globalContext().deterministicAlgorithms() || self.is_cpu())")
    assert not deterministic_only("if (self.is_cuda())") and not deterministic_only(None)


def test_scatter_adds_deterministic_route_ranks_after_the_others(tree_2_6, context):
    """scatter_add on CUDA goes through index_put_ only when deterministic
    algorithms are on (TensorAdvancedIndexing.cpp, read here): each end
    reached through that arm carries it in its rank, the others do not."""
    from kernelmap import graph

    text = (tree_2_6 / "aten/src/ATen/native/TensorAdvancedIndexing.cpp").read_text()
    body = text[text.index("TORCH_IMPL_FUNC(scatter_add)"):]
    assert re.search(r"if \(globalContext\(\)\.deterministicAlgorithms\(\) &&[^\n]*\n\s*_scatter_via_index_put", body)
    ends = call_ends(graph.stack("aten::scatter_add", context("cuda")))
    opted = [any(deterministic_only(n.condition) for n in end.path) for end in ends]
    assert any(opted)
    assert [end.rank[0] for end in ends] == [int(o) for o in opted] == sorted(int(o) for o in opted)
