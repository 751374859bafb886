"""The function symbols of a native library (`nm --defined-only -C`), and the
ones a capture breaks on to see every function that does an operator's work.

Note [the functions that do the work]
An operator's innermost kernel function is the deepest frame of a stack below
`at::_ops::<op>::call` that is ATen's kernel code or a library entry, not the
runtime around it (dispatcher, allocator, reference counts, TensorIterator's
set-up). In the binary those are: every function whose demangled name
mentions `at::native::` (kernels, structured `impl`s, stub kernels in their
CPU-capability namespaces, their lambdas, the `function_ref` callbacks and
`parallel_for` bodies that hold the vectorised loops, `std::sort` over an
ATen comparator) or is an `at::meta::` function; the entries of the vendor
libraries linked into libtorch_cpu (CBLAS and Fortran BLAS/LAPACK, oneDNN's
C API and primitive `execute`s, Sleef); `std::` sorting templates; and libc's
`memcpy`/`memmove`/`memset`. A breakpoint on each, recorded once per call
(one-shot, re-armed at the next call), yields the stack of every such
function that runs; the innermost ones are those no other recorded function
runs below.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from kernelmap.observe.capture import ObserveError

HOT = ("memcpy", "memmove", "memset")
_VENDOR_C = re.compile(r"(cblas_\w+|[sdcz](gemm|gemv|axpy|dot|scal|copy|trsm|trmm|syrk|herk|symm|hemm|ger|gesv|getrf|getrs|getri|potrf|potrs|potri|geqrf|orgqr|ungqr|ormqr|unmqr|gesdd|gesvd|syevd|heevd|geev|gels|gelsd|gelsy|gelss|trtrs|sytrf|hetrf|sytrs|hetrs|larfg|lapmt|gemm_batch|gemm3m)_|dnnl_\w+|Sleef_\w+|mkl_(cblas|lapack)\w*|MKL_\w+|LAPACKE_\w+)")
_STD_SORTS = ("std::__introsort_loop", "std::__insertion_sort", "std::__final_insertion_sort", "std::__stable_sort", "std::__merge_adaptive",
              "std::__inplace_stable_sort", "std::__merge_sort_with_buffer", "std::__adjust_heap", "std::__partial_sort", "std::__heap_select")


@dataclass(frozen=True)
class FunctionSymbol:
    offset: int
    name: str  # demangled


def read_symbols(library: Path) -> list[FunctionSymbol]:
    """The library's defined function symbols, sorted by address."""
    nm = shutil.which("nm")
    if nm is None:
        raise ObserveError("reading a library's symbols needs nm (binutils), which is not installed")
    out = subprocess.run([nm, "--defined-only", "-C", str(library)], capture_output=True, text=True, check=True).stdout
    found = []
    for line in out.splitlines():
        parts = line.split(" ", 2)
        if len(parts) == 3 and parts[1] in "tTwW" and parts[1]:
            found.append(FunctionSymbol(int(parts[0], 16), parts[2]))
    found.sort(key=lambda s: s.offset)
    return found


def strip_return_type(name: str) -> str:
    """`void at::native::AVX2::vectorized_loop<...>(...)` -> `at::native::AVX2::vectorized_loop<...>(...)`:
    a template function's demangled name starts with its return type, which
    ends at the last space outside brackets before the first bracket `(`."""
    depth, last_space = 0, -1
    for i, ch in enumerate(name):
        if ch in "<([{":
            if ch == "(" and depth == 0 and not name.startswith("(anonymous namespace)", i):
                break
            depth += 1
        elif ch in ">)]}":
            depth -= 1
        elif ch == " " and depth == 0:
            last_space = i
    return name[last_space + 1 :]


def does_work(name: str) -> bool:
    """Whether a function is one the golden set breaks on (Note [the functions that do the work])."""
    if "[clone .cold]" in name:
        return False
    if "at::native::" in name:
        return True
    bare = strip_return_type(name)
    if bare.startswith(("at::meta::", "dnnl::impl::")) and ("::meta(" in bare or "::execute" in bare or "compute_dispatch" in bare or bare.startswith("at::meta::")):
        return True
    if bare.startswith(_STD_SORTS):
        return True
    return "::" not in bare and "(" not in bare and bool(_VENDOR_C.fullmatch(bare))


def work_offsets(symbols: list[FunctionSymbol]) -> list[int]:
    """The entry offsets to break on, each once."""
    return sorted({s.offset for s in symbols if does_work(s.name)})
