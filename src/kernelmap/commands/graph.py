"""`kernelmap stack` and `kernelmap callers`: the cross-layer call graph, top-down and bottom-up."""

from __future__ import annotations

import dataclasses

import click

from kernelmap.graph import DEFAULT_DEPTH, DEVICE_KEYS


def _emit(tree, as_json: bool) -> None:
    from kernelmap.render import render

    click.echo(render(tree, "json" if as_json else "text", color=None if not as_json else False), nl=False)


@click.command()
@click.argument("target")
@click.option("--device", type=click.Choice(list(DEVICE_KEYS)), default="cpu", show_default=True, help="The device whose kernels to follow.")
@click.option("--dtype", default="float32", show_default=True, help="dtype of the call (shown; dtype switches are listed, not chosen).")
@click.option("--requires-grad", is_flag=True, help="Show the autograd layer (VariableType wrapper, backward node).")
@click.option("--depth", type=int, default=DEFAULT_DEPTH, show_default=True, help="How many levels to expand.")
@click.option("--all-branches", is_flag=True, help="Follow branches for other devices too, instead of collapsing them.")
@click.option("--all-calls", is_flag=True, help="Also show tensor utility calls and helpers that reach nothing else.")
@click.option("--source", default=None, help="Source tree to read C++ from (a registered name or a path).")
@click.option("--json", "as_json", is_flag=True, help="Print the call tree as JSON.")
def stack(target, device, dtype, requires_grad, depth, all_branches, all_calls, source, as_json):
    """Show what a call of TARGET runs, top-down, down to kernels and vendor calls.

    TARGET is a Python name (torch.nn.Conv2d, torch.nn.functional.conv2d,
    torch.add, torch.Tensor.relu_), an operator (aten::conv2d) or a C++ symbol
    (at::native::_convolution).

    \b
    Example:
      kernelmap stack torch.nn.Conv2d --device cuda
      kernelmap stack aten::add.Tensor --device cpu --requires-grad --depth 8
    """
    from kernelmap import graph

    context = graph.open_context(device, requires_grad, all_branches, source, all_calls=all_calls)
    tree = graph.stack(target, context, depth)
    _emit(dataclasses.replace(tree, meta={**tree.meta, "dtype": dtype}), as_json)


@click.command()
@click.argument("symbol")
@click.option("--depth", type=int, default=DEFAULT_DEPTH, show_default=True, help="How many levels to climb.")
@click.option("--source", default=None, help="Source tree to read C++ from (a registered name or a path).")
@click.option("--json", "as_json", is_flag=True, help="Print the call tree as JSON.")
def callers(symbol, depth, source, as_json):
    """Show who calls SYMBOL, up through stubs and the dispatcher to operators and Python.

    SYMBOL is a C++ function (raw_cudnn_convolution_forward_out,
    at::native::add_kernel) or a vendor API (cudnnConvolutionForward).

    \b
    Example:
      kernelmap callers cudnnConvolutionForward
      kernelmap callers at::native::cudnn_convolution --depth 6 --json
    """
    from kernelmap import graph

    context = graph.open_context(source=source, require_tree=True)
    _emit(graph.callers(symbol, context, depth), as_json)


@click.command()
@click.argument("op")
@click.option("--device", type=click.Choice(list(DEVICE_KEYS)), default="cpu", show_default=True, help="The device whose kernels to explain.")
@click.option("--source", default=None, help="Source tree to read C++ from (a registered name or a path).")
@click.option("--json", "as_json", is_flag=True, help="Print the steps as JSON.")
def explain(op, device, source, as_json):
    """Explain one operator call step by step, with the real code of each step.

    Python argument parsing, autograd, the registration wrapper, then the
    native kernel's checks, output allocation, dtype switch, iteration, device
    loop and vendor call (the native steps need an indexed source tree).

    \b
    Example:
      kernelmap explain aten::add.Tensor --device cpu
      kernelmap explain aten::conv2d --device cuda
    """
    from kernelmap import graph
    from kernelmap.graph.explain import explain as explain_op
    from kernelmap.render import explain as render

    context = graph.open_context(device, source=source)
    result = explain_op(op, context)
    click.echo(render.to_json_text(result) if as_json else render.to_text(result, color=None), nl=False)
