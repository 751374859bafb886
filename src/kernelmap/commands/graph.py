"""`kernelmap stack`, `kernelmap callers` and `kernelmap explain`: the
cross-layer call graph, top-down, bottom-up, and one call step by step."""

from __future__ import annotations

import click

from kernelmap.commands.options import all_option, codegen_bar, depth_check, device_option, dtype_option, emit, observe_option, output_options, source_option
from kernelmap.graph.rules import DEFAULT_DEPTH
from kernelmap.suggest import closest_names


@click.command()
@click.argument("target")
@device_option(help="The device whose kernels to follow.")
@dtype_option
@click.option("--requires-grad", is_flag=True, help="An input requires grad: the autograd wrapper records its backward node (the layer is shown either way).")
@click.option("--depth", type=int, default=DEFAULT_DEPTH, show_default=True, help="How many levels to expand.")
@click.option("--all-branches", is_flag=True, help="Follow branches for other devices too, instead of collapsing them.")
@click.option("--all-calls", is_flag=True, help="Expand tensor utility calls (by default one step each, nothing below) and show helpers that reach nothing else.")
@click.option("--compact", is_flag=True, help="One line per layer: nodes of their parent's layer are spliced out.")
@all_option
@observe_option
@source_option
@output_options
def stack(target, device, dtype, requires_grad, depth, all_branches, all_calls, compact, show_all, observe, source, as_json, width, html):
    """Show what a call of TARGET runs, top-down, down to kernels and vendor calls.

    TARGET is a Python name (torch.nn.Conv2d, torch.nn.functional.conv2d,
    torch.add, torch.Tensor.relu_), an operator (aten::conv2d) or a C++ symbol
    (at::native::_convolution). The main path comes first: the path a default
    call takes for the device and dtype, each step at its file:line, what else
    a step may call folded to one line; --all shows the whole tree.

    \b
    Example:
      kernelmap stack torch.nn.Conv2d --device cuda
      kernelmap stack torch.nn.Conv2d --device cuda --all
      kernelmap stack aten::add.Tensor --device cpu --requires-grad --depth 8
      kernelmap stack torch.nn.Conv2d --device cuda --compact --width 100
      kernelmap stack torch.nn.Conv2d --device cpu --observe
    """
    from kernelmap import graph

    depth_check(depth)
    with codegen_bar() as bar:
        context = graph.open_context(device, requires_grad, all_branches, source, all_calls=all_calls, dtype=dtype, progress=bar)
        with closest_names(python_root=context.python_dir, index=context.index):
            tree = graph.stack(target, context, depth)  # a tree's headers are generated on first use, under the bar
    from kernelmap.api import with_main_path
    from kernelmap.processors import compact_layers

    if observe:  # the observed path is the main path (kernelmap.observe.mark)
        from kernelmap.api import observed

        tree = observed(tree, target, device=device, dtype=dtype, source=source)
    else:
        tree = with_main_path(tree)  # Note [the main path] in kernelmap.processors
    if compact:
        tree = compact_layers(tree)
    emit(tree, as_json, width, html, full=show_all)


@click.command()
@click.argument("symbol")
@click.option("--depth", type=int, default=DEFAULT_DEPTH, show_default=True, help="How many levels to climb.")
@all_option
@source_option
@output_options
def callers(symbol, depth, show_all, source, as_json, width, html):
    """Show who calls SYMBOL, up through stubs and the dispatcher to operators and Python.

    SYMBOL is a C++ function (raw_cudnn_convolution_forward_out,
    at::native::add_kernel) or a vendor API (cudnnConvolutionForward). The
    main path comes first: the route up to the entry nearest the user (an
    nn.Module, a Python function, an operator), the other callers of each
    step folded to one line; --all shows the whole tree.

    \b
    Example:
      kernelmap callers cudnnConvolutionForward
      kernelmap callers at::native::cudnn_convolution --depth 6 --json
    """
    from kernelmap import graph

    depth_check(depth)
    with codegen_bar() as bar:
        context = graph.open_context(source=source, require_tree=True, progress=bar)
    from kernelmap.processors import callers_main_path, mark_main_path

    with closest_names(index=context.index):
        tree = graph.callers(symbol, context, depth)
    emit(mark_main_path(tree, callers_main_path(tree)), as_json, width, html, full=show_all)


@click.command()
@click.argument("op")
@device_option(help="The device whose kernels to explain.")
@dtype_option
@all_option
@source_option
@output_options
def explain(op, device, dtype, show_all, source, as_json, width, html):
    """Explain one operator call step by step, with the real code of each step.

    OP is an operator (aten::add.Tensor) or any name where and stack take
    (torch.nn.Conv2d, F.relu): then the first operator it reaches.

    Python argument parsing, autograd, the registration wrapper, then the
    native kernel's checks, output allocation, dtype switch, iteration, device
    loop and vendor call (the native steps need an indexed source tree).
    Each step's code is shown with --all.

    \b
    Example:
      kernelmap explain aten::add.Tensor --device cpu
      kernelmap explain torch.nn.Conv2d --device cuda
    """
    from kernelmap import graph
    from kernelmap.graph.explain import explain as explain_op

    with codegen_bar() as bar:
        context = graph.open_context(device, source=source, dtype=dtype, progress=bar)
    with closest_names(python_root=context.python_dir):
        answer = _explain_any_name(op, context, explain_op)
    emit(answer, as_json, width, html, full=show_all)


def _explain_any_name(name, context, explain_op):
    """`explain` of an operator, or of any name `where` and `stack` take
    (torch.nn.Conv2d, F.relu, torch.Tensor.add_): the first operator it
    reaches, said in a note."""
    from dataclasses import replace

    from kernelmap.errors import UnknownName
    from kernelmap.names import resolve_ops

    try:
        return explain_op(name, context)
    except UnknownName:
        if "." not in name or "::" in name:
            raise
        ops = resolve_ops(name, context.catalog, context.entry_catalog, context.python_dir)
    op = str(ops[0].name)
    answer = explain_op(op, context)
    others = f" (also: {', '.join(str(o.name) for o in ops[1:4])})" if len(ops) > 1 else ""
    return replace(answer, notes=(*answer.notes, f"{name} runs {op}: its steps follow{others}"))
