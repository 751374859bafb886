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


def test_the_definitions_table_is_kept_and_read_again_only_when_a_file_changes(tmp_path, monkeypatch):
    """Note [definitions cache]: a second resolver on the same tree reads the
    table from the cache (the sources are not read again); an edited file
    makes another digest, and its new definition is found at its line."""
    import os

    from kernelmap.kernels import resolve

    monkeypatch.setenv("KERNELMAP_CACHE_DIR", str(tmp_path / "cache"))
    folder = tmp_path / "tree/aten/src/ATen/native/cuda"
    folder.mkdir(parents=True)
    source = folder / "k.cuh"
    source.write_text(SOURCE)
    first = KernelResolver(None, tmp_path / "tree", "t")._grep("my_fwd_kernel", "kernel")
    assert len(list((tmp_path / "cache/kernels").iterdir())) == 1
    read = []
    monkeypatch.setattr(resolve, "read_text", lambda path, **kw: read.append(path) or path.read_text())
    again = KernelResolver(None, tmp_path / "tree", "t")._grep("my_fwd_kernel", "kernel")
    assert again == first and read == []
    edited = "// moved down one line\n" + SOURCE
    source.write_text(edited)
    os.utime(source, ns=(1, 1))  # another size and time
    moved = KernelResolver(None, tmp_path / "tree", "t")._grep("my_fwd_kernel", "kernel")
    assert read == [source] and (moved.path, moved.line) == (first.path, first.line + 1)
    assert "my_fwd_kernel" in edited.splitlines()[moved.line - 1]
