"""`kernelmap gen`: the generated code one operator passes through."""

from __future__ import annotations

import click

from kernelmap.commands.options import codegen_bar, emit, output_options, source_option

LAYERS = ("binding", "ops", "autograd", "register", "ufunc", "all")


@click.command()
@click.argument("op")
@click.option(
    "--layer",
    type=click.Choice(LAYERS),
    default="all",
    show_default=True,
    help="Which generated code to show: the Python binding, at::_ops entry points, "
    "autograd/tracing wrappers, Register<Key> wrappers, or ufunc kernels.",
)
@source_option
@click.option("--regenerate", is_flag=True, help="Generate the files again even if the cache has them.")
@output_options
def gen(op: str, layer: str, source: str | None, regenerate: bool, as_json: bool, width: int | None, html: str | None) -> None:
    """Show the generated code behind operator OP: the code that exists only
    in a PyTorch build directory, regenerated with torchgen and cached.

    OP is an operator name: aten::conv2d, conv2d, add.out (a base name such
    as `add` picks its most common overload). With --source, the files are
    generated from that tree with its own torchgen.

    \b
    Example:
      kernelmap gen aten::conv2d --layer binding
      kernelmap gen add.out --layer ufunc --json
    """
    from kernelmap.codegen import Layer, locate
    from kernelmap.commands.source import one_line_warnings

    one_line_warnings()
    tree = None
    if source is not None:
        from kernelmap.source import select_tree

        tree = select_tree(source).root
    layers = tuple(Layer) if layer == "all" else (Layer(layer),)
    with codegen_bar() as bar:
        code = locate(op, layers=layers, tree=tree, progress=bar, regenerate=regenerate)
    emit(code, as_json, width, html)
