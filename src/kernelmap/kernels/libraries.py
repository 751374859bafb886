"""GPU kernel names -> the library that ships them: one row per library, with
whether its code is open, where it lives, the kernel-name patterns that
identify it (CUDA and ROCm spellings), and the C++ names through which ATen
launches it (looked up as call sites in the index).

Order matters: the first row whose pattern matches wins, so specific names
(cuDNN's own CUTLASS-built kernels) come before generic ones (CUTLASS).
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class GpuLibrary:
    name: str
    closed: bool
    repository: str | None
    kernel_patterns: tuple[str, ...]  # regular expressions searched in the demangled name
    aten_calls: tuple[str, ...] = ()  # C++ callees whose call sites in ATen launch it

    def matches(self, name: str) -> bool:
        return any(re.search(p, name) for p in self.kernel_patterns)


GPU_LIBRARIES: tuple[GpuLibrary, ...] = (
    GpuLibrary("CUDA runtime", True, None, (r"^Memcpy ", r"^Memset ", r"^Memcpy$", r"^Memset$")),
    GpuLibrary("HIP runtime", False, "https://github.com/ROCm/clr", (r"^hipMemcpy", r"^hipMemset", r"^__amd_rocclr_")),
    GpuLibrary("NCCL", False, "https://github.com/NVIDIA/nccl", (r"^ncclKernel_", r"^ncclDevKernel_", r"\bncclKernel\b"), ("ncclAllReduce", "ncclAllGather", "ncclReduceScatter", "ncclSend", "ncclRecv", "ncclBroadcast")),
    GpuLibrary("RCCL", False, "https://github.com/ROCm/rccl", (r"^rcclKernel", r"\brccl")),
    GpuLibrary("cuDNN", True, None, (r"^(void )?cudnn::", r"^cudnn_", r"_cudnn$", r"\bcask_cudnn::", r"^(void )?fft2d_[rc]2[rc]_", r"^(void )?fft[123]d_", r"implicit_convolve_sgemm", r"precomputed_convolve", r"explicit_convolve_sgemm", r"winograd", r"conv2d_grouped_direct_kernel"), ("cudnnConvolutionForward", "cudnnBackendExecute")),
    GpuLibrary("MIOpen", False, "https://github.com/ROCm/MIOpen", (r"^MIOpen", r"^miopen", r"^(void )?miopen::", r"^naive_conv_", r"^gridwise_convolution_", r"^Op[0-9]dTensorGeneric", r"^SubTensorOpWithScalar", r"^igemm_", r"^Im2Col", r"^Col2Im")),
    GpuLibrary("Composable Kernel", False, "https://github.com/ROCm/composable_kernel", (r"^(void )?ck::", r"^(void )?ck_tile::", r"\bck::kernel_")),
    GpuLibrary("Tensile (rocBLAS/hipBLASLt)", False, "https://github.com/ROCm/Tensile", (r"^Cijk_", r"^Cij_", r"^Alik_", r"^Ailk_")),
    GpuLibrary("rocBLAS", False, "https://github.com/ROCm/rocBLAS", (r"^(void )?rocblas_", r"\brocblas_"), ("at::cuda::blas::gemm",)),
    GpuLibrary("hipBLASLt", False, "https://github.com/ROCm/hipBLASLt", (r"^(void )?hipblaslt", r"\bhipblasLt")),
    GpuLibrary("FlashAttention (in PyTorch)", False, "https://github.com/pytorch/pytorch", (r"pytorch_flash::", r"^(void )?flash_fwd", r"^(void )?flash_bwd", r"fmha_cutlass", r"\bAttentionKernel\b", r"\bAttentionBackwardKernel\b")),
    GpuLibrary("Triton (generated)", False, "https://github.com/triton-lang/triton", (r"^triton_", r"^triton__", r"^(void )?triton::")),
    GpuLibrary("FBGEMM", False, "https://github.com/pytorch/FBGEMM", (r"\bfbgemm_gpu::", r"^(void )?split_embedding_", r"^(void )?batch_index_select_", r"^(void )?bounds_check_indices_kernel", r"^(void )?linearize_index_kernel", r"^(void )?permute_pooled_embs_kernel", r"^(void )?dense_embedding_", r"^(void )?jagged_", r"^(void )?grad_mean_kernel", r"^(void )?split_embedding", r"^(void )?embedding_", r"^(void )?_block_bucketize", r"^(void )?_bucketize", r"^(void )?reorder_batched_", r"^(void )?recat_copy_async_kernel")),
    GpuLibrary("CUB/Thrust", False, "https://github.com/NVIDIA/cccl", (r"^(void )?cub::", r"^(void )?thrust::", r"\bcub::(CUB_\d+_\w+::)?Device", r"^(void )?rocprim::", r"^(void )?hipcub::"), ("at::cuda::cub::radix_sort_pairs", "at::cuda::cub::radix_sort_keys", "at::cuda::cub::inclusive_scan", "at::cuda::cub::exclusive_scan")),
    GpuLibrary("cuBLAS", True, None, (r"^(void )?cutlass::Kernel2?<cutlass_\d+_", r"^cutlass_\d+_", r"^sm\d+_xmma_gemm", r"^(void )?gemv", r"^(void )?gemmk1_kernel", r"^(void )?gemmSN_", r"^(void )?gemmSN", r"^ampere_[sdhcz]", r"^volta_[sdhcz]", r"^turing_[sdhcz]", r"^maxwell_[sdhcz]", r"^hopper_", r"^sm\d+_xmma_", r"^nvjet_", r"^(void )?cublas", r"\bcublasLt::", r"^(void )?splitKreduce_kernel", r"^(void )?dot_kernel", r"^(void )?reduce_1Block_kernel", r"^(void )?scal_kernel", r"^(void )?axpy_kernel", r"^(void )?sgemm_", r"^(void )?dgemm_", r"^(void )?internal::gemvx::", r"^std::enable_if<.*>::type internal::gemvx::", r"^(void )?epilogue::impl::", r"^(void )?gemm_kernel", r"^(void )?ampere_gcgemm"), ("at::cuda::blas::gemm", "at::cuda::blas::bgemm", "at::cuda::blas::gemm_and_bias", "cublasGemmEx", "cublasLtMatmul")),
    GpuLibrary("CUTLASS", False, "https://github.com/NVIDIA/cutlass", (r"\bcutlass::",)),
    GpuLibrary("cuFFT", True, None, (r"^(void )?regular_fft", r"^(void )?vector_fft", r"^(void )?fft_", r"\bcufft")),
)


def library_of(name: str) -> GpuLibrary | None:
    """The first library whose kernel-name pattern matches the (demangled) name."""
    for lib in GPU_LIBRARIES:
        if lib.matches(name):
            return lib
    return None
