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


def test_only_a_positive_test_of_another_layout_is_an_arm_for_other_layouts():
    from kernelmap.graph.ends import other_layouts_only

    assert other_layouts_only("if (self.is_sparse())") and other_layouts_only("if (input.is_quantized() && dim > 0)")
    assert other_layouts_only("if (a && (x.is_mkldnn() || x.layout() == kSparseCsr))")
    assert other_layouts_only("if (x.layout() == kSparseBsr || x.layout() == kSparseCsr || x.layout() == kSpar...)")  # recorded cut
    assert not other_layouts_only("if (!self.is_sparse())") and not other_layouts_only("else of if (self.is_sparse())")
    assert not other_layouts_only("if (a || x.is_sparse())") and not other_layouts_only("if (x.layout() == kStrided)")


def test_a_strided_transpose_names_no_stub_though_its_sparse_arm_has_a_loop(tree_2_6, context, indexed_tree):
    """at::native::transpose (TensorShape.cpp, read here) takes a sparse
    compressed tensor's own route; a strided tensor's transpose is a view."""
    from kernelmap import api, graph
    from kernelmap.graph.ends import other_layouts_only

    text = (tree_2_6 / "aten/src/ATen/native/TensorShape.cpp").read_text()
    body = text[text.index("Tensor transpose(const Tensor & self, int64_t dim0, int64_t dim1)"):]
    assert re.search(r"if \(self\.layout\(\) == kSparseBsr[^{]*\{\s*return sparse_compressed_transpose\(", body)
    ends = call_ends(graph.stack("aten::transpose.int", context("cpu")))
    assert ends and all(any(other_layouts_only(n.condition) for n in end.path) for end in ends)
    answer = api.where("aten::transpose.int", device="cpu", static=True, with_source=True, source=indexed_tree.name)
    roles = {s.role for s in answer.source}
    assert "entry kernel" in roles and "stub kernel" not in roles and "leaf" not in roles
