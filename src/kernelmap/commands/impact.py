"""`kernelmap impact TARGET`: what an edit makes a release build recompile, and what it costs."""

from __future__ import annotations

import click

from kernelmap.commands.options import codegen_bar, device_option, emit, output_options, source_option

IMPACT_DEVICES = ("cpu", "cuda", "rocm")


@click.command()
@click.argument("target", metavar="PATH[:LINE]|SYMBOL|OP")
@device_option(IMPACT_DEVICES, help="The device whose release build recompiles.")
@source_option
@output_options
def impact(target, device, source, as_json, width, html):
    """Show what editing TARGET costs a release build of the source tree:
    the translation units that recompile (.cpp, .cu, and each CPU capability's
    copy of a native/cpu file), the libraries they go into, the operators
    whose kernels, registrations or bindings they hold, an estimated rebuild
    time, and a cheaper place for the same change when there is one.

    TARGET is a path relative to the tree's root (a header, a source file, a
    configured .h.in, a torchgen template), a path and line (PATH:LINE; a line
    of native_functions.yaml is that operator's entry), a C++ symbol
    (at::native::add_out) or an operator (aten::add.Tensor: the files
    torchgen rewrites for an edit of its yaml entry).

    \b
    Example:
      kernelmap impact aten/src/ATen/native/cuda/Loops.cuh --device cuda
      kernelmap impact aten/src/ATen/cpu/vec/vec256/vec256_float.h
      kernelmap impact aten/src/ATen/native/BinaryOps.h:70
      kernelmap impact aten::add.Tensor --json
    """
    from kernelmap.impact import impact as impact_of

    with codegen_bar() as bar:
        answer = impact_of(target, device=device, source=source, progress=bar)
    emit(answer, as_json, width, html)
