"""The translation units a release build of a tree compiles for one device,
each with its kind (a .cpp, a .cu, or one copy per CPU capability) and the
library it goes into: read from the tree's own build files where they list
sources (`build_variables.bzl`, read as data, never run; the CPU
capabilities of `cmake/Codegen.cmake`), and from the globs of
`aten/src/ATen/CMakeLists.txt` and `c10/CMakeLists.txt`, written here as
rules (Note [translation units of a release build]).

Note [translation units of a release build]
A Linux x86-64 release build (the wheels) compiles, for every device:
c10's sources (libc10), ATen's CPU sources and the generated sources
(libtorch_cpu), torch/csrc's `libtorch_cmake_sources`, distributed, lazy
TorchScript backend and C++ API lists (libtorch_cpu) and its Python
bindings (libtorch_python). Each file under `native/cpu/` (and
`native/quantized/cpu/kernels/`, and the generated `UfuncCPUKernel_*.cpp`) is
compiled once per CPU capability the tree's cmake names for x86-64
(DEFAULT, AVX2, AVX512: `-DCPU_CAPABILITY_AVX2 -mavx2 -mfma -mf16c`...). A CUDA
build adds ATen's cuda/, cudnn/ and native/*/cuda/ sources (libtorch_cuda;
native/cuda/linalg in libtorch_cuda_linalg, as BUILD_LAZY_CUDA_LINALG is on
by default), c10/cuda (libc10_cuda), the CUDA lists of build_variables.bzl,
and the generated CUDA registrations; a ROCm build compiles the same CUDA
sources hipified (libtorch_hip, libc10_hip) with MIOpen's instead of
cuDNN's. What this model leaves out (files only a mobile, Windows, macOS,
XPU or Vulkan build compiles, `.c` files) is not a unit here.
"""

from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass
from pathlib import Path

# CPU capabilities of an x86-64 release build (cmake/Codegen.cmake names them;
# these are its x86 ones, in the order it lists them).
X86_CAPABILITIES = ("DEFAULT", "AVX512", "AVX2")

KINDS = ("cpp", "cu", "capability")  # a unit's kind, as answers group them


@dataclass(frozen=True)
class Unit:
    """One compilation of one source file."""

    path: str  # the source file, repository-relative (generated ones under build/ or */generated/)
    kind: str  # cpp | cu | capability
    library: str  # libtorch_cpu.so, libtorch_cuda.so, libc10.so, ...
    capability: str | None = None  # DEFAULT, AVX2, AVX512 for kind "capability"

    @property
    def name(self) -> str:
        """How a build names the unit: `native/cpu/X.cpp.AVX2.cpp` for a capability copy."""
        return f"{self.path}.{self.capability}.cpp" if self.capability else self.path

    @property
    def context(self) -> str:
        """The compile context the include graph is evaluated in (kernelmap.impact.graph.CONTEXTS)."""
        if self.kind == "cu":
            return "cu"
        if self.capability:
            return self.capability
        return "cpp"


def _glob(pattern: str) -> re.Pattern:
    out = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out))


# (patterns under aten/src/ATen/, devices, library); in the order of the CMakeLists' groups.
_ATEN = "aten/src/ATen/"
_CUDA = ("cuda", "rocm")
_ATEN_RULES: tuple[tuple[tuple[str, ...], tuple[str, ...], str], ...] = (
    (("*.cpp", "detail/*.cpp", "cpu/*.cpp", "functorch/*.cpp", "core/**/*.cpp", "native/*.cpp", "native/ao_sparse/*.cpp",
      "native/ao_sparse/cpu/*.cpp", "native/ao_sparse/quantized/*.cpp", "native/ao_sparse/quantized/cpu/*.cpp", "native/sparse/*.cpp",
      "native/nested/*.cpp", "native/quantized/*.cpp", "native/quantized/cpu/*.cpp", "native/mkl/*.cpp", "native/mkldnn/*.cpp",
      "native/transformers/*.cpp", "native/utils/*.cpp", "native/xnnpack/*.cpp", "quantized/*.cpp", "mkl/*.cpp", "mkldnn/*.cpp",
      "vulkan/*.cpp", "metal/*.cpp", "native/cpu/*.cpp", "native/quantized/cpu/kernels/*.cpp"), ("cpu", "cuda", "rocm"), "libtorch_cpu.so"),
    (("cuda/*.cpp", "cuda/detail/*.cpp", "cuda/tunable/*.cpp", "native/cuda/*.cpp", "native/nested/cuda/*.cpp", "native/quantized/cuda/*.cpp",
      "native/sparse/cuda/*.cpp", "native/transformers/cuda/*.cpp", "native/transformers/cuda/flash_attn/*.cpp",
      "native/transformers/cuda/mem_eff_attention/*.cpp", "native/miopen/*.cpp",
      "cuda/*.cu", "cuda/detail/*.cu", "cuda/tunable/*.cu", "native/cuda/*.cu", "native/nested/cuda/*.cu", "native/sparse/cuda/*.cu",
      "native/quantized/cuda/*.cu", "native/transformers/cuda/*.cu", "native/transformers/cuda/flash_attn/*.cu",
      "native/transformers/cuda/flash_attn/kernels/*.cu", "native/transformers/cuda/mem_eff_attention/*.cu",
      "native/transformers/cuda/mem_eff_attention/kernels/*.cu"), _CUDA, "libtorch_cuda.so"),
    (("cudnn/*.cpp", "native/cudnn/*.cpp", "native/quantized/cudnn/*.cpp"), ("cuda",), "libtorch_cuda.so"),
    (("native/cuda/linalg/*.cpp",), _CUDA, "libtorch_cuda_linalg.so"),
    (("cuda/nvrtc_stub/*.cpp",), ("cuda",), "libcaffe2_nvrtc.so"),
)
_CAPABILITY_PATTERNS = (_glob(_ATEN + "native/cpu/*.cpp"), _glob(_ATEN + "native/quantized/cpu/kernels/*.cpp"))
_NOT_UNITS = re.compile(r"(?:^|/)(?:test|tests|benchmarks?)/|_test\.(?:cpp|cu)$|(?:^|/)test_[^/]*$")

_C10_RULES: tuple[tuple[tuple[str, ...], tuple[str, ...], str], ...] = (
    (("c10/*.cpp", "c10/core/*.cpp", "c10/core/impl/*.cpp", "c10/mobile/*.cpp", "c10/macros/*.cpp", "c10/util/*.cpp"), ("cpu", "cuda", "rocm"), "libc10.so"),
    (("c10/cuda/*.cpp", "c10/cuda/impl/*.cpp"), _CUDA, "libc10_cuda.so"),
)

# build_variables.bzl lists a release build compiles, per device, and their library.
_TORCH_LISTS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("libtorch_cmake_sources", ("cpu", "cuda", "rocm"), "libtorch_cpu.so"),
    ("libtorch_extra_sources", ("cpu", "cuda", "rocm"), "libtorch_cpu.so"),
    ("lazy_tensor_ts_sources", ("cpu", "cuda", "rocm"), "libtorch_cpu.so"),
    ("libtorch_distributed_base_sources", ("cpu", "cuda", "rocm"), "libtorch_cpu.so"),
    ("libtorch_distributed_extra_sources", ("cpu", "cuda", "rocm"), "libtorch_cpu.so"),
    ("torch_cpp_srcs", ("cpu", "cuda", "rocm"), "libtorch_cpu.so"),
    ("libtorch_python_core_sources", ("cpu", "cuda", "rocm"), "libtorch_python.so"),
    ("libtorch_python_distributed_sources", ("cpu", "cuda", "rocm"), "libtorch_python.so"),
    ("libtorch_cuda_sources", _CUDA, "libtorch_cuda.so"),
    ("libtorch_python_cuda_sources", _CUDA, "libtorch_python.so"),
)
_TORCH_API = _glob("torch/csrc/api/src/**/*.cpp")  # the C++ API, globbed by caffe2/CMakeLists.txt unless NO_API

# Generated sources (codegen's file names) per device and library.
_GENERATED_CUDA = re.compile(r"^build/aten/src/ATen/(?:Register\w*CUDA\w*\.cpp|UfuncCUDA_\w+\.cu)$")
_GENERATED_OTHER_BACKEND = re.compile(r"^build/aten/src/ATen/Register\w*(?:XPU|MPS|HIP|Vulkan|Metal|Lazy)\w*\.cpp$")
_GENERATED_CAPABILITY = re.compile(r"^build/aten/src/ATen/UfuncCPUKernel_\w+\.cpp$")
_GENERATED_PYTHON = re.compile(r"^torch/csrc/autograd/generated/python_\w+\.cpp$")


def _library(device: str, library: str) -> str:
    """ROCm builds name their CUDA libraries after HIP."""
    if device == "rocm":
        return library.replace("_cuda", "_hip")
    return library


def _kind(path: str) -> str:
    return "cu" if path.endswith(".cu") else "cpp"


def is_source(path: str) -> bool:
    return path.endswith((".cpp", ".cc", ".cu"))


def translation_units(tree_root: Path, tree_files: frozenset[str], generated_files: frozenset[str], device: str) -> tuple[Unit, ...]:
    """The units a release build for `device` compiles: of `tree_files` (the
    indexed files, repository-relative) and `generated_files` (regenerated
    sources: build/aten/src/ATen/*.cpp, torch/csrc/autograd/generated/*.cpp)."""
    device = "cpu" if device not in ("cuda", "rocm") else device
    capabilities = cpu_capabilities(tree_root)
    out: list[Unit] = []
    library_of: dict[str, str] = {}
    for patterns, devices, library in (*((tuple(_ATEN + p for p in ps), d, lib) for ps, d, lib in _ATEN_RULES), *_C10_RULES):
        if device not in devices:
            continue
        regexes = [_glob(p) for p in patterns]
        for path in tree_files:
            if path not in library_of and any(r.fullmatch(path) for r in regexes):
                library_of[path] = _library(device, library)
    lists = torch_source_lists(tree_root)
    for name, devices, library in _TORCH_LISTS:
        if device in devices:
            for path in lists.get(name, ()):
                if path in tree_files:
                    library_of.setdefault(path, _library(device, library))
    for path in tree_files:
        if _TORCH_API.fullmatch(path):
            library_of.setdefault(path, "libtorch_cpu.so")
    for path in sorted(library_of):
        if not is_source(path) or _NOT_UNITS.search(path):
            continue
        if path.endswith(".cu") and device == "cpu":
            continue
        library = library_of[path]
        if any(r.fullmatch(path) for r in _CAPABILITY_PATTERNS):
            out.extend(Unit(path, "capability", library, c) for c in capabilities)
        else:
            out.append(Unit(path, _kind(path), library))
    for path in sorted(generated_files):
        if not is_source(path) or _GENERATED_OTHER_BACKEND.match(path):
            continue
        if _GENERATED_CUDA.match(path):
            if device != "cpu":
                out.append(Unit(path, _kind(path), _library(device, "libtorch_cuda.so")))
        elif _GENERATED_CAPABILITY.match(path):
            out.extend(Unit(path, "capability", "libtorch_cpu.so", c) for c in capabilities)
        elif _GENERATED_PYTHON.match(path):
            out.append(Unit(path, "cpp", "libtorch_python.so"))
        elif path.endswith(".cpp"):
            out.append(Unit(path, "cpp", "libtorch_cpu.so"))
    return tuple(out)


_CAPABILITY_NAME = re.compile(r'list\(APPEND CPU_CAPABILITY_NAMES "(\w+)"\)')


@functools.lru_cache(maxsize=8)
def cpu_capabilities(tree_root: Path) -> tuple[str, ...]:
    """The x86-64 CPU capabilities the tree's cmake compiles native/cpu files for."""
    try:
        text = (tree_root / "cmake/Codegen.cmake").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return X86_CAPABILITIES
    named = [n for n in _CAPABILITY_NAME.findall(text) if n in X86_CAPABILITIES]
    return tuple(dict.fromkeys(named)) or X86_CAPABILITIES


@functools.lru_cache(maxsize=8)
def torch_source_lists(tree_root: Path) -> dict[str, tuple[str, ...]]:
    """The source lists of the tree's build_variables.bzl, read as data: its
    list literals, `+`, `sorted(...)` and names of lists defined before
    (the file is never run)."""
    try:
        module = ast.parse((tree_root / "build_variables.bzl").read_text(encoding="utf-8", errors="replace"))
    except (OSError, SyntaxError, ValueError):
        return {}
    values: dict[str, tuple[str, ...]] = {}
    for statement in module.body:
        if isinstance(statement, ast.Assign) and len(statement.targets) == 1 and isinstance(statement.targets[0], ast.Name):
            value = _list_value(statement.value, values)
            if value is not None:
                values[statement.targets[0].id] = value
    return values


def _list_value(node: ast.AST, known: dict[str, tuple[str, ...]]) -> tuple[str, ...] | None:
    if isinstance(node, (ast.List, ast.Tuple)):
        items = []
        for element in node.elts:
            if not (isinstance(element, ast.Constant) and isinstance(element.value, str)):
                return None
            items.append(element.value)
        return tuple(items)
    if isinstance(node, ast.Name):
        return known.get(node.id)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _list_value(node.left, known), _list_value(node.right, known)
        return None if left is None or right is None else left + right
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("sorted", "list") and len(node.args) == 1 and not node.keywords:
        inner = _list_value(node.args[0], known)
        return None if inner is None else (tuple(sorted(inner)) if node.func.id == "sorted" else inner)
    return None
