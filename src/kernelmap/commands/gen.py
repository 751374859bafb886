"""`kernelmap gen`: the generated code one operator passes through."""

from __future__ import annotations

import json
from pathlib import Path

import click

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
@click.option("--tree", type=click.Path(exists=True, file_okay=False, path_type=Path), help="Generate from this PyTorch source tree with its own torchgen, not from the installed torch.")
@click.option("--regenerate", is_flag=True, help="Generate the files again even if the cache has them.")
@click.option("--json", "as_json", is_flag=True, help="Print locations and text as JSON.")
def gen(op: str, layer: str, tree: Path | None, regenerate: bool, as_json: bool) -> None:
    """Show the generated code behind operator OP: the code that exists only
    in a PyTorch build directory, regenerated with torchgen and cached.

    OP is an operator name: aten::conv2d, conv2d, add.out (a base name such
    as `add` picks its most common overload).

    \b
    Example:
      kernelmap gen aten::conv2d --layer binding
      kernelmap gen add.out --layer ufunc --json
    """
    from kernelmap.codegen import Layer, locate
    from kernelmap.commands.source import one_line_warnings

    one_line_warnings()
    layers = tuple(Layer) if layer == "all" else (Layer(layer),)
    code = locate(op, layers=layers, tree=tree, progress=True, regenerate=regenerate)
    if as_json:
        click.echo(json.dumps({"version": 1, "layers": [x.value for x in layers], **code.to_json()}, indent=2))
        return
    from rich.console import Console

    from kernelmap.render.gen import render

    console = Console(highlight=False)
    if not console.is_terminal:  # piped: keep whole lines of code rather than 80 columns
        console = Console(highlight=False, width=max(console.width, 200))
    render(code, layers, console)
