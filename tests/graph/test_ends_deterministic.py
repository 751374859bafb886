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
    # an end under that arm may pass more arms away from the defaults (`if (!accumulate)` below the
    # `accumulate=true` index_put_ is passed): it counts each
    assert [min(end.rank[0], 1) for end in ends] == [int(o) for o in opted] == sorted(int(o) for o in opted)


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
    tree = graph.stack("aten::transpose.int", context("cpu"))
    sparse = [n for n, _ in _walk(tree) if n.name.endswith("sparse_compressed_transpose")]
    assert sparse and all(other_layouts_only(n.condition) for n in sparse)
    # its only loop was at::arange's, filling indices to validate: plumbing, no end of the call
    ends = call_ends(tree)
    assert all(any(other_layouts_only(n.condition) for n in end.path) for end in ends)
    answer = api.where("aten::transpose.int", device="cpu", static=True, with_source=True, source=indexed_tree.name)
    roles = {s.role for s in answer.source}
    assert "entry kernel" in roles and "stub kernel" not in roles and "leaf" not in roles


def test_an_end_reached_by_growing_a_storage_ranks_after_the_calls_work(tree_2_6, context, indexed_tree):
    """resize_bytes_cuda (cuda/Resize.cpp, read here) copies a grown
    storage's old data with cudaMemcpyAsync: setup of batch_norm's output, not
    its work. The ends reached through it rank after the others, and `where`
    leads with batch_norm's own kernels (Normalization.cuh)."""
    from kernelmap import api, graph

    text = (tree_2_6 / "aten/src/ATen/native/cuda/Resize.cpp").read_text()
    body = text[text.index("void resize_bytes_cuda("):]
    assert "cudaMemcpyAsync(" in body[: body.index("\n}\n")]
    ends = call_ends(graph.stack("aten::native_batch_norm", context("cuda")))
    grown = [any(n.name.endswith("resize_bytes_cuda") for n in end.path) for end in ends]
    assert any(grown) and not all(grown)
    assert [end.rank[4] > 0 for end in ends] == grown == sorted(grown)
    assert any(end.node.name == "cudaMemcpyAsync" for end, g in zip(ends, grown) if g)
    answer = api.where("aten::native_batch_norm", device="cuda", static=True, with_source=True, source=indexed_tree.name)
    leaves = [s for s in answer.source if s.role == "leaf"]
    assert leaves and all(s.name != "cudaMemcpyAsync" for s in leaves)
    first = leaves[0]
    assert first.location.path == "aten/src/ATen/native/cuda/Normalization.cuh"
    assert first.name in (tree_2_6 / first.location.path).read_text().splitlines()[first.location.line - 1]


def _walk(tree):
    stack = [(tree.root, None)]
    while stack:
        node, parent = stack.pop()
        yield node, parent
        stack.extend((c, node) for c in node.children)


def test_a_cpu_sort_ends_in_the_standard_librarys_sort_and_an_fft_in_its_execution(tree_2_6, indexed_tree):
    """The C++ standard library's sorts are an inner loop (SortingKernel.cpp's
    sort_kernel_impl sorts each row with std::sort/std::stable_sort, read
    here); cuFFT's execution, not its stream setup, is where an FFT ends."""
    from kernelmap import api

    text = (tree_2_6 / "aten/src/ATen/native/cpu/SortingKernel.cpp").read_text()
    impl = text[text.index("static inline void sort_kernel_impl("):]
    assert re.search(r"std::stable_sort\(composite_accessor", impl) and re.search(r"std::sort\(composite_accessor", impl)
    answer = api.where("aten::sort", device="cpu", static=True, with_source=True, source=indexed_tree.name)
    leaves = [s for s in answer.source if s.role == "leaf"]
    assert leaves and all(leaf.name in ("std::sort", "std::stable_sort") and leaf.detail.startswith("C++ standard library") for leaf in leaves)
    for leaf in leaves:
        assert f"{leaf.name}(composite_accessor" in (tree_2_6 / leaf.location.path).read_text().splitlines()[leaf.location.line - 1]

    answer = api.where("aten::_fft_c2c", device="cuda", static=True, with_source=True, source=indexed_tree.name)
    leaves = [s for s in answer.source if s.role == "leaf"]
    assert leaves[0].name == "cufftXtExec" and any(s.name == "cufftSetStream" for s in leaves[1:])
    assert "cufftXtExec(" in (tree_2_6 / leaves[0].location.path).read_text().splitlines()[leaves[0].location.line - 1]


def test_only_a_test_for_an_empty_or_one_element_input_is_an_arm_for_trivial_inputs():
    from kernelmap.graph.ends import for_trivial_inputs

    assert for_trivial_inputs("if (self.dim() == 0 && self.numel() == 1)") and for_trivial_inputs("if (iter.numel() == 0)")
    assert for_trivial_inputs("if (self.numel() <= 1 || self.is_empty())") and for_trivial_inputs("if (t.sizes().empty())")
    assert not for_trivial_inputs("if (x.dim() == 1)") and not for_trivial_inputs("if (self.numel() < 20)")
    assert not for_trivial_inputs("if (!self.is_empty())") and not for_trivial_inputs("if (self.numel() == 0 || dim > 2)")
    assert not for_trivial_inputs("else of if (self.numel() == 0)") and not for_trivial_inputs(None)
    # one value of a scalar argument: pow's fast specialisations
    assert for_trivial_inputs("if (exp_scalar.equal(.5))") and for_trivial_inputs("if (exp.equal(0.0) || exp.equal(false))")
    assert not for_trivial_inputs("if (x.equal(y))") and not for_trivial_inputs("else of if (exp_scalar.equal(-0.5))")


def test_pow_of_a_scalar_ends_in_its_general_loop_not_in_the_square_root_of_an_exponent_of_a_half(tree_2_6, context):
    """pow_tensor_scalar_kernel (cpu/PowKernel.cpp, read here) returns
    sqrt_kernel(iter) under `if (exp_scalar.equal(.5))`, a fast specialisation
    for one exponent: the ends of that arm rank after the general case's."""
    text = (tree_2_6 / "aten/src/ATen/native/cpu/PowKernel.cpp").read_text()
    body = text[text.index("static void pow_tensor_scalar_kernel("):]
    assert body.index("if (exp_scalar.equal(.5)) {") < body.index("return sqrt_kernel(iter);") < body.index("pow_tensor_scalar_optimized_kernel<")
    ends = call_ends(graph_stack("aten::pow.Tensor_Scalar", context("cpu")))
    special = [i for i, e in enumerate(ends) if any(n.condition and "exp_scalar.equal(.5)" in n.condition for n in e.path)]
    assert special and 0 not in special and all(ends[i].rank[2] > 0 for i in special), [e.node.name for e in ends]
    assert not any(n.condition and n.condition.startswith("if (") and ".equal(" in n.condition for n in ends[0].path)  # only their else arms


def test_median_on_cuda_ends_in_its_sort_not_in_the_where_that_picks_the_middle(tree_2_6, context, indexed_tree):
    """CUDA median (cuda/Sorting.cpp, read here) sorts, then picks the middle
    value with at::where. The sort kernel (Sorting.cpp, read here) calls its
    stub in the `else` of its one-element case: the general case, so its ends
    rank with the where's, and come first in the kernel's order."""
    from kernelmap import api, graph

    cuda = (tree_2_6 / "aten/src/ATen/native/cuda/Sorting.cpp").read_text()
    impl = cuda[cuda.index("Tensor median_impl("):]
    impl = impl[: impl.index("\n}\n")]
    assert impl.index(".sort()") < impl.index("at::where(")
    sort = (tree_2_6 / "aten/src/ATen/native/Sorting.cpp").read_text()
    body = sort[sort.index("TORCH_IMPL_FUNC(sort_stable_out)"):]
    assert re.search(r"if \(self\.dim\(\) == 0 && self\.numel\(\) == 1\) \{[^}]*\} else \{[^}]*sort_stub\(", body)
    ends = call_ends(graph.stack("aten::median", context("cuda")))
    assert any(n.name.endswith("where_kernel_impl") for end in ends for n in end.path)
    assert not any(n.name.endswith("where_kernel_impl") for n in ends[0].path)
    answer = api.where("aten::median", device="cuda", static=True, with_source=True, source=indexed_tree.name)
    stub = next(s for s in answer.source if s.role == "stub kernel")
    assert stub.name.endswith("::sort_cuda_kernel")
    assert "sort_cuda_kernel(" in (tree_2_6 / stub.location.path).read_text().splitlines()[stub.location.line - 1]


def test_a_vendor_routine_ranks_before_its_setup(tree_2_6, indexed_tree):
    """at::cuda::blas::dot<float> (CUDABlas.cpp, read here) sets the handle's
    stream, then calls cublasSdot: the routine is the call's end, the stream
    its setup; likewise cublasSgetrfBatched for lu_factor."""
    from kernelmap import api

    text = (tree_2_6 / "aten/src/ATen/cuda/CUDABlas.cpp").read_text()
    assert "cublasSdot(" in text and "cublasSetStream(" in (tree_2_6 / "aten/src/ATen/cuda/CublasHandlePool.cpp").read_text()
    for op, routine in (("aten::dot", "cublasSdot"), ("aten::linalg_lu_factor_ex", "getrf")):
        answer = api.where(op, device="cuda", static=True, with_source=True, source=indexed_tree.name)
        leaves = [s for s in answer.source if s.role == "leaf"]
        assert routine in leaves[0].name, (op, [s.name for s in leaves])
        assert f"{leaves[0].name}(" in (tree_2_6 / leaves[0].location.path).read_text().splitlines()[leaves[0].location.line - 1]
        setup = [i for i, s in enumerate(leaves) if re.match(r"cu(?:blas|solverDn)Set", s.name)]
        assert setup and min(setup) > 0



def test_a_vendor_classs_setup_method_is_setup_though_the_class_is_named_for_its_work(tree_2_6, context):
    """cpu_flash_attention (cpu/FlashAttentionKernel.cpp, read here) calls
    cpublas::brgemm_release(), whose body (CPUBlas.cpp, read here) calls
    dnnl::ukernel::brgemm::release_hw_context(): a method of the class brgemm
    that releases a context is setup, not a gemm; scaled_dot_product_attention
    on the CPU does not end there first."""
    assert "cpublas::brgemm_release()" in (tree_2_6 / "aten/src/ATen/native/cpu/FlashAttentionKernel.cpp").read_text()
    release = (tree_2_6 / "aten/src/ATen/native/CPUBlas.cpp").read_text()
    assert "dnnl::ukernel::brgemm::release_hw_context();" in release[release.index("void brgemm_release("):]
    ends = call_ends(graph_stack("aten::scaled_dot_product_attention", context("cpu")))
    released = [e for e in ends if e.node.name == "dnnl::ukernel::brgemm::release_hw_context"]
    assert released and all(e.rank[6] == 2 for e in released)  # setup
    assert ends[0].node.name != released[0].node.name and ends[0].rank[6] == 0


def test_a_leaf_names_the_case_of_the_choice_it_belongs_to(tree_2_6, indexed_tree):
    """at::native::_convolution (Convolution.cpp, read here) switches on the
    backend _select_conv_backend chose; conv2d on CUDA ends in cuDNN under
    `case ConvBackend::Cudnn`, and where says so beside the library."""
    from kernelmap import api

    text = (tree_2_6 / "aten/src/ATen/native/Convolution.cpp").read_text()
    body = text[text.index("at::Tensor _convolution("):]
    assert "switch (backend) {" in body and "case ConvBackend::Cudnn:" in body
    answer = api.where("aten::conv2d", device="cuda", static=True, with_source=True, source=indexed_tree.name)
    leaves = [s for s in answer.source if s.role == "leaf"]
    assert leaves and leaves[0].name.startswith("cudnn") and leaves[0].detail == "cuDNN; under case ConvBackend::Cudnn", leaves[0]

def test_the_calls_own_launch_ranks_before_another_operators(tree_2_6, context, indexed_tree):
    """embedding_renorm_cuda_ (Embedding.cu, read here) sorts its indices with
    at::sort, then launches its own renorm_kernel: the renorm leads."""
    from kernelmap import api

    text = (tree_2_6 / "aten/src/ATen/native/cuda/Embedding.cu").read_text()
    body = text[text.index("Tensor & embedding_renorm_cuda_("):]
    assert body.index("indices.sort()") < body.index("renorm_kernel<<<")
    ends = call_ends(graph_stack("aten::embedding_renorm_", context("cuda")))
    assert ends[0].node.name == "renorm_kernel" and not ends[0].rank[7]
    assert any(end.node.name == "bitonicSortKVInPlace" and end.rank[7] for end in ends)
    answer = api.where("aten::embedding_renorm_", device="cuda", static=True, with_source=True, source=indexed_tree.name)
    first = next(s for s in answer.source if s.role == "leaf")
    assert first.name == "renorm_kernel"
    assert "renorm_kernel" in (tree_2_6 / first.location.path).read_text().splitlines()[first.location.line - 1]


def test_the_calls_own_stub_kernel_is_named_when_its_best_end_is_another_operators(tree_2_6, indexed_tree):
    """var on CUDA calls std_var_stub itself (ReduceOps.cpp, read here), whose
    kernel's reduction is not followed, and other operators whose launches are
    the best ends: its own stub kernel is named, not another operator's."""
    from kernelmap import api

    text = (tree_2_6 / "aten/src/ATen/native/ReduceOps.cpp").read_text()
    body = text[text.index("static Tensor& std_var_out("):]
    assert "std_var_stub(" in body[: body.index("\n}\n")]
    answer = api.where("aten::var.dim", device="cuda", static=True, with_source=True, source=indexed_tree.name)
    stub = next(s for s in answer.source if s.role == "stub kernel")
    assert stub.name.endswith("::std_var_kernel_cuda")
    assert "std_var_kernel_cuda(" in (tree_2_6 / stub.location.path).read_text().splitlines()[stub.location.line - 1]


def graph_stack(op, ctx):
    from kernelmap import graph

    return graph.stack(op, ctx)


def test_a_channels_last_arm_ranks_after_the_contiguous_one(tree_2_6, indexed_tree):
    """max_pool2d_with_indices_out_cuda_template (cuda/DilatedMaxPool2d.cu,
    read here) launches max_pool_forward_nhwc under `case
    MemoryFormat::ChannelsLast`, before max_pool_forward_nchw under `case
    MemoryFormat::Contiguous`: answers are for contiguous tensors, so the nchw
    kernel comes first; on the CPU, the pooling kernel's own at::parallel_for
    (cpu/MaxPoolKernel.cpp, read here) is its loop."""
    from kernelmap import api
    from kernelmap.graph.ends import for_channels_last

    lines = (tree_2_6 / "aten/src/ATen/native/cuda/DilatedMaxPool2d.cu").read_text().splitlines()
    nhwc = next(i for i, t in enumerate(lines) if "case MemoryFormat::ChannelsLast:" in t)
    nchw = next(i for i, t in enumerate(lines) if "case MemoryFormat::Contiguous:" in t)
    assert nhwc < nchw and "max_pool_forward_nhwc<" in "\n".join(lines[nhwc:nchw]) and "max_pool_forward_nchw<" in "\n".join(lines[nchw:nchw + 8])
    leaves = [s for s in api.where("aten::max_pool2d", device="cuda", static=True, with_source=True, source=indexed_tree.name).source if s.role == "leaf"]
    assert [s.name for s in leaves[:2]] == ["max_pool_forward_nchw", "max_pool_forward_nhwc"], leaves
    kernel = (tree_2_6 / "aten/src/ATen/native/cpu/MaxPoolKernel.cpp").read_text()
    assert "at::parallel_for(0, nbatch * output_depth * output_height * output_width, 0, [&](int64_t begin, int64_t end) {" in kernel
    leaves = [s for s in api.where("aten::max_pool2d", device="cpu", static=True, with_source=True, source=indexed_tree.name).source if s.role == "leaf"]
    assert leaves and leaves[0].name == "at::parallel_for" and "parallel_for(" in (tree_2_6 / leaves[0].location.path).read_text().splitlines()[leaves[0].location.line - 1]
    assert for_channels_last("if (input.is_contiguous(at::MemoryFormat::ChannelsLast) || input.is_contiguous(at::MemoryFormat::ChannelsLast3d))")
    assert for_channels_last("case at::MemoryFormat::ChannelsLast") and for_channels_last("if (input.suggest_memory_format() == at::MemoryFormat::ChannelsLast)")
    assert not for_channels_last("else of if (input.is_contiguous(c10::MemoryFormat::ChannelsLast))")
    assert not for_channels_last("if (!output.is_contiguous(at::MemoryFormat::ChannelsLast))") and not for_channels_last("case at::MemoryFormat::Contiguous")


def test_a_fallback_for_offsets_past_32_bits_ranks_after_the_kernel(tree_2_6, indexed_tree):
    """grid_sampler_2d_cpu (GridSampler.cpp, read here) calls its scalar
    fallback under `if (max_gather_offset > std::numeric_limits<int32_t>::max())`
    and its stub otherwise: the stub's kernel is named, the fallback's loop
    ranks after it."""
    from kernelmap import api
    from kernelmap.graph.ends import for_larger_inputs

    text = (tree_2_6 / "aten/src/ATen/native/GridSampler.cpp").read_text()
    body = text[text.index("Tensor grid_sampler_2d_cpu("):]
    assert body.index("if (max_gather_offset > std::numeric_limits<int32_t>::max()) {") < body.index("_grid_sampler_2d_cpu_fallback(") < body.index("grid_sampler_2d_cpu_kernel(")
    answer = api.where("aten::grid_sampler_2d", device="cpu", static=True, with_source=True, source=indexed_tree.name)
    stub = next(s for s in answer.source if s.role == "stub kernel")
    assert stub.name.endswith("::grid_sampler_2d_cpu_kernel_impl")
    assert for_larger_inputs("else of if (N <= std::numeric_limits<int>::max())") and for_larger_inputs("else of if (canUse32BitIndexMath(input))")
    assert not for_larger_inputs("if (N <= std::numeric_limits<int>::max())") and not for_larger_inputs("if (canUse32BitIndexMath(input))")
