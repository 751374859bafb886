"""`kernelmap kernel NAME`: one GPU kernel name -> what it is and where its code is."""

from __future__ import annotations

import click

from kernelmap.commands.options import emit, output_options, source_option


@click.command()
@click.argument("name")
@source_option
@click.option("--extension", "extension", metavar="DIR", default=None,
              help="A C++/CUDA extension project (a scaffolded one, say) whose sources hold kernels that no tree or "
                   "library names: the kernel's __global__ definition is looked for there.")
@output_options
def kernel(name, source, extension, as_json, width, html):
    """What a GPU kernel is and where its code is, from its name as a profiler,
    Nsight or a trace prints it (mangled or demangled, possibly cut short).

    An ATen kernel is answered with its launcher template (CUDALoops.cuh,
    Reduce.cuh, ...) and the functor or lambda it was instantiated with, at
    file:line in the source tree; a library kernel (cuDNN, cuBLAS, NCCL, CUB,
    FBGEMM, MIOpen, rocBLAS, ...) with its library, whether its code is open,
    its repository and the ATen call sites that launch it.

    \b
    Examples:
      kernelmap kernel 'void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)'
      kernelmap kernel ncclKernel_AllReduce_RING_LL_Sum_float --json
      kernelmap kernel _ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEENS_6detail5ArrayIPcLi1EEEEEviT0_T1_ --source debian-2.6.0
      kernelmap kernel 'void kernelmap_ext::mydconv_conv2d_kernel<float>(...)' --extension ./mydconv
    """
    from kernelmap.errors import BadInput
    from kernelmap.kernels import open_resolver
    from kernelmap.model import extension_origin
    from kernelmap.printable import printable

    try:
        name.encode("utf-8")
    except UnicodeEncodeError:  # undecodable bytes of argv arrive as lone surrogates
        raise BadInput(f"not a kernel name (not valid UTF-8): {printable(name[:80])!r}") from None
    resolver, reason = open_resolver(source)
    if reason and source is not None:  # a tree asked for by name must open, as for every command's --source
        from kernelmap.errors import SourceError

        raise SourceError(reason)
    project = _project(extension) if extension is not None else None
    answer = resolver.resolve(name)
    if not any(c.isalnum() or c == "_" for c in answer.symbol):  # `()`, `<`: punctuation that parses to no name
        raise BadInput(f"not a kernel name: {printable(name[:80])!r} (no name in it)")
    missing = None
    if project is not None and answer.library is None:  # Note [kernels of an extension]
        found = resolver.in_extension(answer, extension_origin(str(project)))
        if found is None:
            missing = f"no __global__ definition of {answer.symbol.rsplit('::', 1)[-1]} in the sources under {project}"
            cut = resolver.extension_cuts.get(str(project))
            if cut:  # Note [kernels of an extension]: bounded, and said
                missing += f" ({cut}; name the project's own folder)"
        answer = found or answer
    emit(answer, as_json, width, html)
    if reason and not as_json:
        click.echo(f"no source locations: {printable(reason)}", err=True)
    if missing and not as_json:
        click.echo(printable(missing), err=True)


def _project(extension: str):
    """The extension project's folder, resolved; a clear error if it is none."""
    from pathlib import Path

    from kernelmap.errors import BadInput
    from kernelmap.printable import printable

    try:
        project = Path(extension).expanduser().resolve()
        if not project.is_dir():
            raise BadInput(f"--extension names no folder: {printable(extension[:200])!r}")
    except (OSError, RuntimeError, ValueError) as e:  # a name too long, a link loop, a NUL byte
        raise BadInput(f"--extension {printable(extension[:200])!r}: {printable(str(e)[:200])}") from None
    return project
