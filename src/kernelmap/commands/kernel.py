"""`kernelmap kernel NAME`: one GPU kernel name -> what it is and where its code is."""

from __future__ import annotations

import click

from kernelmap.commands.options import emit, output_options, source_option


@click.command()
@click.argument("name")
@source_option
@output_options
def kernel(name, source, as_json, width, html):
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
    """
    from kernelmap.errors import BadInput
    from kernelmap.kernels import open_resolver
    from kernelmap.printable import printable

    try:
        name.encode("utf-8")
    except UnicodeEncodeError:  # undecodable bytes of argv arrive as lone surrogates
        raise BadInput(f"not a kernel name (not valid UTF-8): {printable(name[:80])!r}") from None
    resolver, reason = open_resolver(source)
    if reason and source is not None:  # a tree asked for by name must open, as for every command's --source
        from kernelmap.errors import SourceError

        raise SourceError(reason)
    answer = resolver.resolve(name)
    emit(answer, as_json, width, html)
    if reason and not as_json:
        click.echo(f"no source locations: {printable(reason)}", err=True)
