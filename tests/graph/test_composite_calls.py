"""What a composite kernel's calls of operators reach, on the real 2.6.0 tree:
the overload a number passed picks (Note [overloads told apart by a
literal]), an unqualified call of an operator's function (Note [unqualified
operator calls]), and a reduction's own loop beside the pointwise op that
follows it (Note [ranking a call's ends]). Ground truth is read from the
tree's files, never copied from output."""

from __future__ import annotations

import re

from tests.graph.test_exact import file_lines, steps

LAYER_NORM = "aten/src/ATen/native/layer_norm.cpp"


def test_a_reductions_own_loop_ranks_with_the_loops_of_the_ops_beside_it(tree_2_6):
    """mean_out on the CPU (ReduceOps.cpp, read here) sums, then divides:
    `at::sum_out(...).div_(...)`. cascade_sum's `iter.parallel_reduce(...)`
    (SumKernel.cpp) is its kernel's own loop with nothing below it that does
    the work, so it ranks with div_'s cpu_kernel_vec, and comes first: the
    stub kernel is sum's."""
    reduce_ops = (tree_2_6 / "aten/src/ATen/native/ReduceOps.cpp").read_text()
    mean = reduce_ops[reduce_ops.index("TORCH_IMPL_FUNC(mean_out)"):]
    mean = mean[: mean.index("\n}\n")]
    assert re.search(r"at::sum_out\([^;]*\)\.div_\(", mean)
    sum_kernel = (tree_2_6 / "aten/src/ATen/native/cpu/SumKernel.cpp").read_text()
    kernel = re.search(r"REGISTER_DISPATCH\(sum_stub, &(\w+)\)", sum_kernel).group(1)
    assert "iter.parallel_reduce(" in sum_kernel
    roles, leaves = steps("aten::mean.dim", "cpu")
    assert roles["stub kernel"].name.endswith(f"::{kernel}")
    assert leaves[0].name == "at::TensorIteratorBase::parallel_reduce"
    assert "parallel_reduce(" in file_lines(leaves[0].location)[leaves[0].location.line - 1]
    assert [s.name for s in leaves[1:2]] == ["cpu_kernel_vec"]
