"""Note [kernels defined by a macro]: a macro whose expansion declares
`__global__ void` of its first parameter defines a kernel at each use."""

from __future__ import annotations

from kernelmap.kernels import KernelResolver
from kernelmap.kernels.resolve import _kernel_macros

SOURCE = """\
#define DEFINE_K(kernelName, ...) \\
template<typename T, __VA_ARGS__> \\
__global__ void kernelName(const T* p)

#define NOT_A_KERNEL(name) void name(int)
#define OTHER(a, name) __global__ void name(int)

DEFINE_K(my_fwd_kernel, bool B) {
}
NOT_A_KERNEL(plain)
"""


def test_only_macros_declaring_a_kernel_of_their_first_parameter_count():
    assert _kernel_macros(SOURCE) == {"DEFINE_K"}


def test_each_use_is_a_definition_at_its_line(tmp_path):
    folder = tmp_path / "aten/src/ATen/native/cuda"
    folder.mkdir(parents=True)
    (folder / "k.cuh").write_text(SOURCE)
    r = KernelResolver(None, tmp_path, "t")
    loc = r._grep("my_fwd_kernel", "kernel")
    assert (loc.path, loc.line) == ("aten/src/ATen/native/cuda/k.cuh", 8)
    assert "my_fwd_kernel" in SOURCE.splitlines()[loc.line - 1]
    assert r._grep("plain", "kernel") is None
