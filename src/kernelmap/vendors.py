"""The one table of libraries outside ATen that a PyTorch call can end in:
which library a C++ call site calls, which library a GPU kernel name belongs
to, which library an operator's own kernel hands its work to, whether that
library's code is open, and where its source lives.

The call graph (vendor call sites), the trace (GPU kernels and operators),
`where` and `explain` all ask this table, so they never disagree on a name or
on whether code is closed. Nothing here imports anything but `re`.

Note [library ids]
The source index records, per vendor call site, a short lowercase id
(`cudnn`, `cublasLt`, `onednn`, ...): the first entry of `Library.ids`.
Renderers show `Library.name`. `library()` accepts either.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Library:
    """A library PyTorch calls into, or whose kernels a profiler shows."""

    name: str  # as its vendor spells it: "cuDNN", "oneDNN"
    closed: bool  # no source to read (binary-only)
    repository: str | None = None  # where the source lives, for open libraries outside PyTorch
    ids: tuple[str, ...] = ()  # Note [library ids]: the index's id first
    calls: re.Pattern[str] | None = None  # C++ callee names in PyTorch's source
    kernels: re.Pattern[str] | None = None  # GPU kernel names (demangled) a profiler shows
    ops: tuple[tuple[re.Pattern[str], str | None], ...] = field(default=())  # (operator, device or None)
    # its calls are an element loop themselves (memcpy's block copy, std::sort's sort): a call ends
    # there as in an inner loop, not in a library's work (Note [ranking a call's ends])
    inner_loop: bool = False
    in_tree: tuple[str, ...] = ()  # folders of the PyTorch tree that hold its kernels' source (a library vendored into ATen)
    # Note [library entries]: (a call of it, the library's own functions that run below it, outermost first)
    entries: tuple[tuple[re.Pattern[str], tuple[str, ...]], ...] = field(default=())

    def __post_init__(self) -> None:
        if self.closed and self.repository:
            raise ValueError(f"{self.name}: a closed library has no source repository")

    @property
    def id(self) -> str:
        return self.ids[0] if self.ids else self.name.lower()

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "closed": self.closed, "repository": self.repository}


class _Lazy:
    """A regular expression compiled when first used, as `re.Pattern` otherwise:
    a question uses a few of the ninety patterns below, and compiling them all
    cost each run of the CLI about 30 ms."""

    __slots__ = ("pattern", "_flags", "_compiled")

    def __init__(self, pattern: str, flags: int = 0):
        self.pattern = pattern
        self._flags = flags
        self._compiled: re.Pattern[str] | None = None

    def compiled(self) -> re.Pattern[str]:
        if self._compiled is None:
            self._compiled = re.compile(self.pattern, self._flags)
        return self._compiled

    def __getattr__(self, name: str):  # match, search, fullmatch, flags...: the compiled pattern's
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.compiled(), name)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Lazy) and (self.pattern, self._flags) == (other.pattern, other._flags)

    def __hash__(self) -> int:
        return hash((self.pattern, self._flags))

    def __repr__(self) -> str:
        return f"re.compile({self.pattern!r})" if not self._flags else f"re.compile({self.pattern!r}, {self._flags})"


def _re(pattern: str, flags: int = 0) -> re.Pattern[str]:
    return _Lazy(pattern, flags)  # type: ignore[return-value]  # used only as a Pattern


_GEMM_OPS = r"^aten::(mm|addmm|bmm|baddbmm|addbmm|addmv|mv|dot|vdot|_addmm_activation|_scaled_mm|_int_mm)(_|$)"
_CPU_GEMM_OPS = r"^aten::(mm|addmm|bmm|baddbmm|addbmm|addmv|mv|dot|vdot|_addmm_activation)(_|$)"
_LINALG_OPS = r"^aten::(linalg_|_linalg_|cholesky|lu_|_lu_|triangular_solve|geqrf|ormqr|orgqr)"

# Order matters where patterns overlap: the first row that matches wins
# (cuBLASLt calls before cuBLAS's; flash attention's and CUTLASS's kernel
# names before the generic gemm names of cuBLAS).
LIBRARIES: tuple[Library, ...] = (
    # its memory copies are where a copy between host and device does its work (cuda/Copy.cu's cudaMemcpyAsync)
    Library("CUDA runtime", closed=True, ids=("cudart",), calls=_re(r"^cudaMemcpy\w*$"), kernels=_re(r"^(Memcpy|Memset)")),
    # libc's block copies are where a kernel's fast path does its work (index_select's rows, cat's dim-0 inputs)
    Library("C library", closed=False, repository="https://sourceware.org/git/glibc.git", ids=("libc",), calls=_re(r"^(std::)?(memcpy|memmove)$"), inner_loop=True),
    # the standard library's sorts are where a CPU sort, topk or median does its work (SortingKernel.cpp's
    # std::sort of a row); where one only orders a few dims (an FFT's), the loop or library after it ranks first
    Library("C++ standard library", closed=False, repository="https://gcc.gnu.org/git/gcc.git", ids=("libstdcxx",),
            calls=_re(r"^std::(sort|stable_sort|partial_sort|nth_element)$"), inner_loop=True,
            # libstdc++'s sorts run these (std::sort is inlined into its caller; its introsort loop is a frame)
            entries=((_re(r"^std::sort$"), ("std::__introsort_loop",)),
                     (_re(r"^std::stable_sort$"), ("std::__merge_sort_with_buffer",)),
                     (_re(r"^std::nth_element$"), ("std::__introselect",)))),
    Library("HIP runtime", closed=False, repository="https://github.com/ROCm/clr", ids=("hip",), kernels=_re(r"^hipMemcpy|^hipMemset|^__amd_rocclr_")),
    Library(
        "cuDNN",
        closed=True,
        ids=("cudnn",),
        # cudnn_frontend is an open header library, but every call through it ends in cuDNN itself
        calls=_re(r"^(cudnn[A-Z]|cudnn_frontend::)"),
        kernels=_re(
            r"^(void )?cudnn::|cudnn|\bcask_cudnn::|implicit_convolve_sgemm|precomputed_convolve|explicit_convolve|winograd|"
            r"nchwToNhwc|nhwcToNchw|scalePackedTensor|conv2d_grouped_direct|^(void )?fft2d_[rc]2[rc]|^(void )?fft[123]d_|_cudnn_"
        ),
        ops=((_re(r"^aten::(cudnn_|_cudnn_|_scaled_dot_product_cudnn)"), None),),
    ),
    Library(
        "NCCL",
        closed=False,
        repository="https://github.com/NVIDIA/nccl",
        ids=("nccl",),
        calls=_re(r"^nccl[A-Z]"),
        kernels=_re(r"^nccl|ncclDevKernel|ncclKernel"),
    ),
    Library("RCCL", closed=False, repository="https://github.com/ROCm/rccl", ids=("rccl",), kernels=_re(r"^rcclKernel|\brccl")),
    Library(
        "FlashAttention/CUTLASS (in PyTorch)",
        closed=False,
        ids=("flash",),
        kernels=_re(r"pytorch_flash::|flash_fwd|flash_bwd|fmha_cutlass|mem_efficient|fmha"),
        in_tree=("aten/src/ATen/native/transformers/",),
    ),
    Library("Triton (generated)", closed=False, repository="https://github.com/triton-lang/triton", ids=("triton",), kernels=_re(r"^triton_|^triton__|^(void )?triton::")),
    Library(
        "FBGEMM",
        closed=False,
        repository="https://github.com/pytorch/FBGEMM",
        ids=("fbgemm",),
        kernels=_re(
            r"\bfbgemm_gpu::|^(void )?(split_embedding_|batch_index_select_|bounds_check_indices_kernel|linearize_index_kernel|"
            r"permute_pooled_embs_kernel|dense_embedding_|jagged_|grad_mean_kernel|embedding_|_block_bucketize|_bucketize|"
            r"reorder_batched_|recat_copy_async_kernel)"
        ),
    ),
    Library(
        "CUB/Thrust",
        closed=False,
        repository="https://github.com/NVIDIA/cccl",
        ids=("cub",),
        kernels=_re(r"^(void )?(cub::|thrust::|rocprim::|hipcub::)"),
    ),
    Library("Composable Kernel", closed=False, repository="https://github.com/ROCm/composable_kernel", ids=("ck",), kernels=_re(r"^(void )?(ck::|ck_tile::)")),
    Library("Tensile (rocBLAS/hipBLASLt)", closed=False, repository="https://github.com/ROCm/Tensile", ids=("tensile",), kernels=_re(r"^(Cijk_|Cij_|Alik_|Ailk_)")),
    Library("hipBLASLt", closed=False, repository="https://github.com/ROCm/hipBLASLt", ids=("hipblaslt",), kernels=_re(r"^(void )?hipblaslt|\bhipblasLt")),
    Library("cuBLASLt", closed=True, ids=("cublasLt",), calls=_re(r"^cublasLt[A-Z]")),
    Library(
        "cuBLAS",
        closed=True,
        ids=("cublas",),
        calls=_re(r"^cublas[A-Z]"),
        # cuBLAS's own CUTLASS-built kernels (`cutlass_80_tensorop_*`) before the generic CUTLASS row
        kernels=_re(
            r"^(void )?cutlass::Kernel2?<cutlass_\d+_|^cutlass_\d+_|^sm\d+_xmma|xmma_|^(ampere|volta|turing|maxwell)_[sdhcz]|^ampere_gcgemm|^hopper_|"
            r"^sm\d+_|^nvjet_|^(void )?(gemv|gemmk1_kernel|gemmSN|cublas|splitKreduce_kernel|dot_kernel|reduce_1Block_kernel|scal_kernel|"
            r"axpy_kernel|sgemm_|dgemm_|internal::gemvx::|epilogue::impl::|gemm_kernel)|^std::enable_if<.*>::type internal::gemvx::|\bcublasLt::"
        ),
        ops=((_re(_GEMM_OPS), "cuda"),),
    ),
    Library("CUTLASS", closed=False, repository="https://github.com/NVIDIA/cutlass", ids=("cutlass",), kernels=_re(r"\bcutlass::|cutlass")),
    Library(
        "cuFFT",
        closed=True,
        ids=("cufft",),
        calls=_re(r"^cufft[A-Z]"),
        kernels=_re(r"^(void )?(regular_fft|vector_fft|fft_)|\bcufft", re.I),
        ops=((_re(r"^aten::(_fft_)"), "cuda"),),
    ),
    Library("cuSPARSE", closed=True, ids=("cusparse",), calls=_re(r"^cusparse[A-Z]")),
    Library(
        "cuSOLVER/MAGMA",
        closed=True,
        ids=("cusolver",),
        calls=_re(r"^cusolver[A-Z]"),
        ops=((_re(r"^aten::(linalg_|_linalg_|cholesky|lu_|_lu_|triangular_solve|geqrf|ormqr|orgqr|_linalg_svd|_linalg_eigh)"), "cuda"),),
    ),
    Library("cuRAND", closed=True, ids=("curand",)),
    Library(
        "MIOpen",
        closed=False,
        repository="https://github.com/ROCm/MIOpen",
        ids=("miopen",),
        calls=_re(r"^miopen[A-Z]"),
        kernels=_re(r"^MIOpen|^miopen|^(void )?miopen::|^naive_conv_|^gridwise_convolution_|^Op[0-9]dTensorGeneric|^SubTensorOpWithScalar|^igemm_|^Im2Col|^Col2Im"),
        ops=((_re(r"^aten::(miopen_|_miopen)"), None),),
    ),
    Library("rocBLAS", closed=False, repository="https://github.com/ROCm/rocBLAS", ids=("rocblas",), calls=_re(r"^rocblas_"), kernels=_re(r"^(void )?rocblas_|\brocblas_")),
    # On ROCm, at::cuda::blas::gemm goes through hipBLAS to rocBLAS, or to hipBLASLt when
    # torch.backends.cuda.preferred_blas_library() says so (the default on recent Instinct GPUs);
    # a trace does not record which, so an operator names both until its kernels tell (Note [ROCm traces]).
    Library("rocBLAS/hipBLASLt", closed=False, repository="https://github.com/ROCm/rocBLAS", ids=("rocblas-hipblaslt",),
            ops=((_re(_GEMM_OPS), "rocm"),)),
    Library("rocFFT/hipFFT", closed=False, repository="https://github.com/ROCm/rocFFT", ids=("rocfft", "hipfft"),
            calls=_re(r"^(rocfft_|hipfft[A-Z])"), ops=((_re(r"^aten::(_fft_)"), "rocm"),)),
    Library("hipBLAS", closed=False, repository="https://github.com/ROCm/hipBLAS", ids=("hipblas",), calls=_re(r"^hipblas(Lt)?[A-Z]")),
    Library("hipSPARSE", closed=False, repository="https://github.com/ROCm/hipSPARSE", ids=("hipsparse",), calls=_re(r"^hipsparse[A-Z]")),
    Library("rocSOLVER", closed=False, repository="https://github.com/ROCm/rocSOLVER", ids=("rocsolver",), calls=_re(r"^(rocsolver_|hipsolver[A-Z])"),
            ops=((_re(r"^aten::(linalg_|_linalg_|cholesky|lu_|_lu_|triangular_solve|geqrf|ormqr|orgqr|_linalg_svd|_linalg_eigh)"), "rocm"),)),
    Library(
        "oneDNN",
        closed=False,
        repository="https://github.com/uxlfoundation/oneDNN",
        ids=("onednn",),
        calls=_re(r"^(dnnl::|ideep::|dnnl_)"),
        ops=((_re(r"^aten::(mkldnn_|_mkldnn|onednn)"), None),),
        entries=(
            (_re(r"^ideep::convolution_forward::compute(?:_v\d)?$"),
             ("ideep::convolution_forward::compute_dispatch", "ideep::convolution_forward::do_compute", "dnnl::primitive::execute", "dnnl_primitive_execute")),
            (_re(r"^ideep::(?:convolution_transpose_forward|matmul_forward)::compute(?:_v\d)?$"),
             ("{class}::do_compute", "dnnl::primitive::execute", "dnnl_primitive_execute")),
            (_re(r"^ideep::\w+::compute\w*$"), ("dnnl::primitive::execute", "dnnl_primitive_execute")),
        ),
    ),
    Library("NNPACK", closed=False, repository="https://github.com/Maratyszcza/NNPACK", ids=("nnpack",), ops=((_re(r"^aten::_nnpack_spatial"), None),)),
    Library("MKL", closed=True, ids=("mkl",), calls=_re(r"^(mkl_|MKL_|Dfti[A-Z]|v[sd]Rng[A-Z])")),
    # its vector math (vsLn, and the vmsExp, with a mode, that cpu/vml.h's IMPLEMENT_VML_MKL pastes together)
    # is a loop over an array, element by element, as an inner loop is: not a library's work
    Library("MKL VM", closed=True, ids=("mkl_vml",), calls=_re(r"^vm?[sdcz](?!Rng)[A-Z][a-z]"), inner_loop=True),
    # the vectorized math ATen's Vectorized<float>::exp and friends call (vec512_float.h's Sleef_expf16_u10):
    # a loop over a vector's lanes, an inner loop as MKL's vector math is
    Library("SLEEF", closed=False, repository="https://github.com/shibatch/sleef", ids=("sleef",), calls=_re(r"^Sleef_\w+$"), inner_loop=True),
    Library("MKL/pocketfft", closed=False, ids=("pocketfft",), ops=((_re(r"^aten::(_fft_)"), "cpu"),)),
    Library(
        "BLAS",
        closed=False,
        repository="https://github.com/OpenMathLib/OpenBLAS",
        ids=("blas",),
        calls=_re(
            r"^(cblas_|LAPACKE_|[sdcz](gemm|gemv|axpy|dot[cu]?|scal|copy|ger[cu]?|trsm|trmm|syrk|herk|nrm2|asum|swap"
            r"|potrf|potrs|potri|getrf|getrs|getri|geqrf|orgqr|ungqr|ormqr|unmqr|gesdd|gesvd|syevd|heevd|trtrs|gels[dsy]?"
            r"|geev|sytrf|hetrf|sytrs|hetrs|pstrf|lu|gemm_batch)_$)"
        ),
        ops=((_re(_CPU_GEMM_OPS), "cpu"),),
        # the wheel's LAPACK is MKL's: a Fortran entry runs MKL's implementation of the routine (sgetrf_ -> mkl_lapack_sgetrf)
        entries=((_re(r"^[sdcz](?:getrf|getrs|getri|gesdd|gesvd|geqrf|orgqr|ungqr|ormqr|unmqr|potrf|potrs|potri|syevd|heevd|geev|gels[dsy]?|trtrs"
                      r"|sytrf|hetrf|sytrs|hetrs|pstrf)_$"), ("mkl_lapack_{name}",)),),
    ),
    Library("LAPACK", closed=False, repository="https://github.com/Reference-LAPACK/lapack", ids=("lapack",), ops=((_re(_LINALG_OPS), "cpu"),)),
    Library("ATen", closed=False, repository="https://github.com/pytorch/pytorch", ids=("aten",)),
)

# Note [kernel families]
# A library's GPU kernel is launched by one of the library's entry points,
# called from PyTorch's code: cuDNN's `bn_fw_inf_*` kernels by
# cudnnBatchNormalizationForwardInference, its `*dgrad*` kernels by
# cudnnConvolutionBackwardData (or, with the v8 API, cudnnBackendExecute),
# cuBLAS's `gemv*` by at::cuda::blas::gemv. Which entry a kernel comes from is
# decided by its family, read from its name by the rows below, first match
# per library; the call sites shown are those of the family's entries. A
# kernel no row matches, or a family whose entries the tree never calls, is
# "unknown, because ..." (kernelmap.kernels.resolve), never another family's
# call sites.


@dataclass(frozen=True)
class KernelFamily:
    """The kernels of one library launched by the same entry points."""

    library: str  # Library.name
    name: str  # what the kernels do: "batch norm forward, inference"
    kernels: re.Pattern[str]  # searched in the demangled kernel name
    entries: tuple[str, ...]  # the library's entry points that launch them, as PyTorch's code calls them
    where: tuple[str, ...] = ("aten/",)  # the tree's folders (or files) whose call sites count
    caller: re.Pattern[str] | None = None  # the functions whose calls count, when an entry runs other families too


_CUDNN_CONV = ("aten/src/ATen/native/cudnn/",)
_CONV_ENTRIES = ("cudnnConvolutionForward", "cudnnConvolutionBackwardData", "cudnnConvolutionBackwardFilter", "cudnnBackendExecute")
_GEMM_ENTRIES = ("at::cuda::blas::gemm", "at::cuda::blas::bgemm", "at::cuda::blas::gemm_and_bias", "cublasGemmEx", "cublasLtMatmul")

FAMILIES: tuple[KernelFamily, ...] = (
    # cuDNN
    KernelFamily("cuDNN", "batch norm forward, inference", _re(r"\bbn_fw_inf|bn_fwd_inf|batchnorm_fwd_inf|BatchNormFwdInfer"),
                 ("cudnnBatchNormalizationForwardInference",)),
    KernelFamily("cuDNN", "batch norm forward, training", _re(r"\bbn_fw_tr|bn_fwd_tr|batchnorm_fwd_tr|BatchNormFwdTrain"),
                 ("cudnnBatchNormalizationForwardTrainingEx", "cudnnBatchNormalizationForwardTraining")),
    KernelFamily("cuDNN", "batch norm backward", _re(r"\bbn_bw|bn_bwd|batchnorm_bwd|BatchNormBwd"),
                 ("cudnnBatchNormalizationBackwardEx", "cudnnBatchNormalizationBackward")),
    KernelFamily("cuDNN", "RNN", _re(r"RNN|LSTM|GRU|\blstm|\brnn_|\bgru_"),
                 ("cudnnRNNForward", "cudnnRNNForwardTraining", "cudnnRNNForwardInference", "cudnnRNNBackwardData", "cudnnRNNBackwardData_v8",
                  "cudnnRNNBackwardWeights", "cudnnRNNBackwardWeights_v8")),
    KernelFamily("cuDNN", "CTC loss", _re(r"(?i)\bctc|_ctc"), ("cudnnCTCLoss",)),
    KernelFamily("cuDNN", "grid sampler and affine grid", _re(r"(?i)spatialtf|sampler|gridgen|grid_generator"),
                 ("cudnnSpatialTfSamplerForward", "cudnnSpatialTfSamplerBackward", "cudnnSpatialTfGridGeneratorForward", "cudnnSpatialTfGridGeneratorBackward")),
    # cuDNN's fused attention runs a cudnn_frontend graph: `mha_graph->execute(...)` in MHA.cpp, forward and backward
    KernelFamily("cuDNN", "scaled dot product attention, backward", _re(r"(?i)(sdpa|fmha|\bmha|flash).*bprop|dot_do_o|convert_dq"),
                 ("execute",), ("aten/src/ATen/native/cudnn/MHA.cpp",), _re(r"bprop")),
    KernelFamily("cuDNN", "scaled dot product attention, forward", _re(r"(?i)sdpa|fmha|\bmha|flash_fprop"),
                 ("execute",), ("aten/src/ATen/native/cudnn/MHA.cpp",), _re(r"fprop")),
    # cudnnBackendExecute runs any v8 graph (quantized adds too): a convolution's are made in native/cudnn/
    KernelFamily("cuDNN", "convolution backward, data", _re(r"dgrad"), ("cudnnConvolutionBackwardData", "cudnnBackendExecute"), _CUDNN_CONV),
    KernelFamily("cuDNN", "convolution backward, weight", _re(r"wgrad"), ("cudnnConvolutionBackwardFilter", "cudnnBackendExecute"), _CUDNN_CONV),
    KernelFamily("cuDNN", "convolution forward",
                 _re(r"fprop|implicit_convolve|precomputed_convolve|explicit_convolve|winograd|conv2d_grouped_direct|\bfft2d_|\bfft[123]d_|"
                     r"scudnn|ImplicitGemmConvolution"),
                 ("cudnnConvolutionForward", "cudnnBackendExecute"), _CUDNN_CONV),
    # layout changes, offsets, workspaces and split-K reductions a convolution plan runs around its main kernel
    KernelFamily("cuDNN", "convolution (a step of its plan: layout change, offsets, workspace, reduction)",
                 _re(r"nchwToNhwc|nhwcToNchw|scalePackedTensor|computeOffsets|init_device_workspace|ReduceSplitK"), _CONV_ENTRIES, _CUDNN_CONV),
    # cuBLAS / cuBLASLt
    KernelFamily("cuBLAS", "matrix-vector product (gemv)", _re(r"gemv"), ("at::cuda::blas::gemv", "cublasSgemv", "cublasDgemv")),
    KernelFamily("cuBLAS", "dot product", _re(r"\bdot_kernel|reduce_1Block_kernel"), ("at::cuda::blas::dot", "at::cuda::blas::vdot")),
    KernelFamily("cuBLAS", "matrix multiply (gemm)",
                 _re(r"gemm|xmma|cutlass|nvjet|^(ampere|volta|turing|maxwell|hopper)_|^sm\d+_|splitKreduce|epilogue::|scal_kernel|axpy_kernel|cublasLt"),
                 _GEMM_ENTRIES),
    # CUB (through at::cuda::cub)
    KernelFamily("CUB/Thrust", "radix sort", _re(r"RadixSort|radix_sort|SegmentedSort"),
                 ("at::cuda::cub::radix_sort_pairs", "at::cuda::cub::radix_sort_keys", "at::cuda::cub::segmented_sort_pairs")),
    KernelFamily("CUB/Thrust", "unique and reduce by key", _re(r"ReduceByKey|DeviceSelect|Unique|DeviceCompact"),
                 ("at::cuda::cub::unique", "at::cuda::cub::unique_by_key")),
    KernelFamily("CUB/Thrust", "scan", _re(r"DeviceScan|Scan"), ("at::cuda::cub::inclusive_scan", "at::cuda::cub::exclusive_scan")),
    # NCCL: the collective is in the kernel's name; torch/csrc calls it
    KernelFamily("NCCL", "all-reduce", _re(r"AllReduce"), ("ncclAllReduce",), ("torch/csrc/",)),
    KernelFamily("NCCL", "all-gather", _re(r"AllGather"), ("ncclAllGather",), ("torch/csrc/",)),
    KernelFamily("NCCL", "reduce-scatter", _re(r"ReduceScatter"), ("ncclReduceScatter",), ("torch/csrc/",)),
    KernelFamily("NCCL", "broadcast", _re(r"Broadcast"), ("ncclBroadcast",), ("torch/csrc/",)),
    KernelFamily("NCCL", "send and receive", _re(r"SendRecv|AllToAll|\bSend|\bRecv"), ("ncclSend", "ncclRecv", "ncclAllToAll"), ("torch/csrc/",)),
    KernelFamily("NCCL", "reduce", _re(r"Reduce"), ("ncclReduce",), ("torch/csrc/",)),
    # cuFFT
    KernelFamily("cuFFT", "FFT", _re(r"(?i)fft"), ("cufftXtExec",)),
    # MIOpen (ROCm)
    KernelFamily("MIOpen", "batch norm", _re(r"(?i)batchnorm"),
                 ("miopenBatchNormalizationForwardInference", "miopenBatchNormalizationForwardTraining", "miopenBatchNormalizationBackward")),
    KernelFamily("MIOpen", "convolution", _re(r"(?i)conv|igemm|Im2Col|Col2Im"),
                 ("miopenConvolutionForward", "miopenConvolutionBackwardData", "miopenConvolutionBackwardWeights")),
    # the CUDA runtime's copies and fills
    KernelFamily("CUDA runtime", "memory copy", _re(r"^Memcpy"), ("cudaMemcpyAsync", "cudaMemcpy2DAsync"), ("aten/", "c10/")),
    KernelFamily("CUDA runtime", "memory fill", _re(r"^Memset"), ("cudaMemsetAsync",), ("aten/", "c10/")),
)


def kernel_family(library: str, kernel: str) -> KernelFamily | None:
    """The family of `library`'s kernel named `kernel` (demangled): the first row that matches (Note [kernel families])."""
    return next((f for f in FAMILIES if f.library == library and f.kernels.search(kernel)), None)


def has_families(library: str) -> bool:
    return any(f.library == library for f in FAMILIES)


_BY_KEY: dict[str, Library] = {}
for _lib in LIBRARIES:
    for _key in (_lib.name, *_lib.ids):
        _BY_KEY.setdefault(_key.lower(), _lib)

# Backends `_select_conv_backend` names, by the library their kernels run in.
_CONV_BACKENDS = {
    "Mkldnn": "oneDNN",
    "MkldnnTranspose": "oneDNN",
    "MkldnnEmpty": "oneDNN",
    "Cudnn": "cuDNN",
    "CudnnTranspose": "cuDNN",
    "Miopen": "MIOpen",
    "MiopenDepthwise": "MIOpen",
    "MiopenTranspose": "MIOpen",
    "NnpackSpatial": "NNPACK",
}
_CONV_OPS = ("aten::_convolution", "aten::convolution_backward")


def library(name: str | None) -> Library | None:
    """The library named `name` (its name or an id, any case); None when unknown."""
    return _BY_KEY.get(name.lower()) if name else None


# Every library's callee pattern as one alternation, in LIBRARIES' order: the
# index classifies tens of thousands of distinct callees, and one match tried
# left to right gives the library the loop over the patterns would.
_CALLERS = [lib for lib in LIBRARIES if lib.calls is not None]
_ANY_CALL = _re("|".join(f"(?P<l{i}>{lib.calls.pattern})" for i, lib in enumerate(_CALLERS)))


# Note [library entries]
# A call into a library whose source PyTorch's tree does not hold (oneDNN's
# ideep headers live in third_party, outside the Debian tree and the wheel)
# ends in functions of the library that a native stack shows:
# `ideep::convolution_forward::compute_v3` is inlined into ATen's caller, and
# `compute_dispatch`, `do_compute`, `dnnl::primitive::execute` and the C
# entry `dnnl_primitive_execute` run below it (torch 2.13's stacks of
# Conv2d; the wheel's symbol table holds each name). So do libstdc++'s
# std::sort (its __introsort_loop) and MKL's LAPACK (sgetrf_ runs
# mkl_lapack_sgetrf). A library row lists, per call, the functions that run
# so, outermost first (`{class}` is the call's class, `{name}` the call
# without its trailing `_`); the first row that matches a call answers.


def entries(callee: str, library_id: str | None) -> tuple[str, ...]:
    """The library's own functions that run below a call of `callee` (Note [library entries]); () when none are known."""
    lib = library(library_id)
    for pattern, names in (lib.entries if lib is not None else ()):
        if pattern.match(callee):
            owner = callee.rsplit("::", 1)[0]
            return tuple(n.replace("{class}", owner).replace("{name}", callee.rstrip("_")) for n in names)
    return ()


def of_call(callee: str) -> Library | None:
    """The library a C++ call of `callee` (qualified, template arguments removed) goes into."""
    m = _ANY_CALL.match(callee)
    return _CALLERS[int(m.lastgroup[1:])] if m is not None else None


# The precision a routine is written for, by its library's naming convention: BLAS and LAPACK
# (sgemm_, cblas_dgemm, LAPACKE_zgeqrf) and MKL's vector math (vsExp, vmdLn): s and c single, d and z double.
_PRECISION_LETTER = {"blas": _re(r"^(?:cblas_|LAPACKE_)?([sdcz])[a-z]"), "mkl": _re(r"^v([sd])Rng[A-Z]"),
                     "mkl_vml": _re(r"^vm?([sdcz])[A-Z]"), "sleef": _re(r"^Sleef_[a-z0-9]*?([fd])(?:\d+|x)_")}


# Note [SLEEF's vector-ABI names]
# SLEEF exports each vector function under two names at one address: the name
# ATen's Vectorized methods call (`Sleef_expf16_u10`: the function, `f` for
# float, the lanes, the accuracy) and its name in the x86 vector function ABI
# (`_ZGVeN16v_Sleef_expf_u10`: `_ZGV`, the ISA's letter, N for unmasked, the
# lanes, one letter per parameter, then the scalar function's name). A
# debugger shows either at that address; both are the function the tree
# calls. The ISA's vector width over the lanes gives the element's width: 512
# bits in 16 lanes are floats (`expf` -> `Sleef_expf16_u10`), in 8 doubles
# (`exp` -> `Sleef_expd8_u10`).
_VECTOR_ABI = _re(r"_ZGV([bcde])N(\d+)[vul\d]+_Sleef_(\w+?)(_u\d+)?")
_ISA_BITS = {"b": 128, "c": 256, "d": 256, "e": 512}


def sleef_name(symbol: str) -> str | None:
    """The name the tree calls a SLEEF function by, for its vector-ABI symbol
    (`_ZGVeN16v_Sleef_expf_u10` -> `Sleef_expf16_u10`: Note [SLEEF's
    vector-ABI names]); None for any other symbol."""
    m = _VECTOR_ABI.fullmatch(symbol)
    if m is None:
        return None
    lanes = int(m.group(2))
    width = _ISA_BITS[m.group(1)] // lanes
    if width not in (32, 64):
        return None
    base = m.group(3) if width == 32 else m.group(3) + "d"
    return f"Sleef_{base}{lanes}{m.group(4) or ''}"


def precision(callee: str, library_id: str | None) -> str | None:
    """"single" or "double": the precision a routine of BLAS, LAPACK, MKL's
    vector math or SLEEF is written for (`vmsExp`, `dgetrf_`, `Sleef_expf16_u10`);
    None for another library's."""
    lib = library(library_id)
    pattern = _PRECISION_LETTER.get(lib.id) if lib is not None else None
    m = pattern.match(callee) if pattern is not None else None
    return None if m is None else ("single" if m.group(1) in "scf" else "double")


def of_conv_backend(backend: str | None) -> Library | None:
    """The library a `ConvBackend` value (`Cudnn`, `Mkldnn`) runs in; None for ATen's own."""
    return library(_CONV_BACKENDS.get(backend or ""))


# Note [ROCm traces]
# A ROCm build of PyTorch keeps the `cuda` device and ATen's CUDA code (hipified),
# but its GEMMs, FFTs and solvers go to ROCm's libraries, not NVIDIA's. So the
# rows of operators are keyed by platform: "cuda" rows for NVIDIA, "rocm" rows
# for AMD, asked with `platform="rocm"` when the trace came from a ROCm build
# (kernelmap.trace.resolve.platform_of). Convolutions are decided by the backend
# that ran (Miopen) either way.

PLATFORMS = ("cuda", "rocm")


def of_op(op: str, device: str, conv_backend: str | None = None, platform: str = "cuda") -> Library | None:
    """The library an operator's own kernel hands its work to on `device`
    (`aten::addmm` on cuda: cuBLAS; on a ROCm build: rocBLAS/hipBLASLt). For
    convolutions, the backend chosen (`_select_conv_backend`) decides."""
    if conv_backend is not None and op in _CONV_OPS:
        found = of_conv_backend(conv_backend)
        if found is not None:
            return found
    key = "rocm" if platform == "rocm" and device == "cuda" else device
    for lib in LIBRARIES:
        for pattern, only in lib.ops:
            if (only is None or only == key) and pattern.match(op):
                return lib
    return None


def is_gemm_op(op: str) -> bool:
    return bool(re.match(r"^aten::(mm|addmm|bmm|baddbmm|addbmm|addmv|mv|linear|matmul|_addmm_activation|_scaled_mm)(_|$)", op))


def of_kernel(name: str, launched_by: tuple[str, ...] = ()) -> Library | None:
    """The library a GPU kernel belongs to, by its (demangled) name, and by the
    operators that launched it when the name alone is ambiguous: the same
    `sm80_xmma_*` and CUTLASS kernels ship inside both cuDNN and cuBLAS."""
    for lib in LIBRARIES:
        if lib.kernels is None or not lib.kernels.search(name):
            continue
        if lib.name in ("cuBLAS", "CUTLASS") and any("cudnn" in op or (of_conv_backend_op(op) or "").startswith("Cudnn") for op in launched_by):
            return library("cuDNN")
        if lib.name == "CUTLASS" and any(is_gemm_op(op) for op in launched_by):
            return library("cuBLAS")
        return lib
    return None


# Operators that show, by running, which convolution backend was chosen.
CONV_BACKEND_OPS = {
    "aten::mkldnn_convolution": "Mkldnn",
    "aten::mkldnn_convolution_backward": "Mkldnn",
    "aten::thnn_conv2d": "Slow2d",
    "aten::_slow_conv2d_forward": "Slow2d",
    "aten::_slow_conv2d_backward": "Slow2d",
    "aten::slow_conv3d": "Slow3d",
    "aten::slow_conv3d_forward": "Slow3d",
    "aten::slow_conv_dilated2d": "SlowDilated2d",
    "aten::slow_conv_dilated3d": "SlowDilated3d",
    "aten::slow_conv_transpose2d": "SlowTranspose2d",
    "aten::slow_conv_transpose3d": "SlowTranspose3d",
    "aten::cudnn_convolution": "Cudnn",
    "aten::cudnn_convolution_transpose": "CudnnTranspose",
    "aten::miopen_convolution": "Miopen",
    "aten::miopen_depthwise_convolution": "MiopenDepthwise",
    "aten::_nnpack_spatial_convolution": "NnpackSpatial",
    "aten::_conv_depthwise2d": "CudaDepthwise2d",
    "aten::conv_depthwise3d": "CudaDepthwise3d",
    "aten::_mps_convolution": "Mps",
    "aten::mkldnn_convolution_transpose": "MkldnnTranspose",
}


def of_conv_backend_op(op: str) -> str | None:
    """The ConvBackend an operator's run shows (`aten::cudnn_convolution` -> `Cudnn`)."""
    return CONV_BACKEND_OPS.get(op)
