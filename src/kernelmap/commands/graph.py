"""`kernelmap stack`, `kernelmap callers` and `kernelmap explain`: the
cross-layer call graph, top-down, bottom-up, and one call step by step."""

from __future__ import annotations

import click

from kernelmap.commands.options import codegen_bar, depth_check, device_option, dtype_option, emit, observe_option, output_options, source_option
from kernelmap.graph.rules import DEFAULT_DEPTH


@click.command()
@click.argument("target")
@device_option(help="The device whose kernels to follow.")
@dtype_option
@click.option("--requires-grad", is_flag=True, help="An input requires grad: the autograd wrapper records its backward node (the layer is shown either way).")
@click.option("--depth", type=int, default=DEFAULT_DEPTH, show_default=True, help="How many levels to expand.")
@click.option("--all-branches", is_flag=True, help="Follow branches for other devices too, instead of collapsing them.")
@click.option("--all-calls", is_flag=True, help="Also show tensor utility calls and helpers that reach nothing else.")
@click.option("--compact", is_flag=True, help="One line per layer: nodes of their parent's layer are spliced out.")
@observe_option
@source_option
@output_options
def stack(target, device, dtype, requires_grad, depth, all_branches, all_calls, compact, observe, source, as_json, width, html):
    """Show what a call of TARGET runs, top-down, down to kernels and vendor calls.

    TARGET is a Python name (torch.nn.Conv2d, torch.nn.functional.conv2d,
    torch.add, torch.Tensor.relu_), an operator (aten::conv2d) or a C++ symbol
    (at::native::_convolution).

    \b
    Example:
      kernelmap stack torch.nn.Conv2d --device cuda
      kernelmap stack aten::add.Tensor --device cpu --requires-grad --depth 8
      kernelmap stack torch.nn.Conv2d --device cuda --compact --width 100
      kernelmap stack torch.nn.Conv2d --device cpu --observe
    """
    from kernelmap import graph

    depth_check(depth)
    with codegen_bar() as bar:
        context = graph.open_context(device, requires_grad, all_branches, source, all_calls=all_calls, dtype=dtype, progress=bar)
        tree = graph.stack(target, context, depth)  # a tree's headers are generated on first use, under the bar
    if observe:
        from kernelmap.api import observed

        tree = observed(tree, target, device=device, dtype=dtype, source=source)
    if compact:
        from kernelmap.processors import compact_layers

        tree = compact_layers(tree)
    emit(tree, as_json, width, html)


@click.command()
@click.argument("symbol")
@click.option("--depth", type=int, default=DEFAULT_DEPTH, show_default=True, help="How many levels to climb.")
@source_option
@output_options
def callers(symbol, depth, source, as_json, width, html):
    """Show who calls SYMBOL, up through stubs and the dispatcher to operators and Python.

    SYMBOL is a C++ function (raw_cudnn_convolution_forward_out,
    at::native::add_kernel) or a vendor API (cudnnConvolutionForward).

    \b
    Example:
      kernelmap callers cudnnConvolutionForward
      kernelmap callers at::native::cudnn_convolution --depth 6 --json
    """
    from kernelmap import graph

    depth_check(depth)
    with codegen_bar() as bar:
        context = graph.open_context(source=source, require_tree=True, progress=bar)
    emit(graph.callers(symbol, context, depth), as_json, width, html)


@click.command()
@click.argument("op")
@device_option(help="The device whose kernels to explain.")
@dtype_option
@source_option
@output_options
def explain(op, device, dtype, source, as_json, width, html):
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

    with codegen_bar() as bar:
        context = graph.open_context(device, source=source, dtype=dtype, progress=bar)
    emit(explain_op(op, context), as_json, width, html)
