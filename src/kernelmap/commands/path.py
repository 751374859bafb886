"""`kernelmap path FROM TO`: the routes a call takes from one name to another
symbol or vendor call, each one chain with the conditions it needs."""

from __future__ import annotations

import click

from kernelmap.commands.options import codegen_bar, device_option, dtype_option, emit, observe_option, output_options, source_option


@click.command()
@click.argument("start", metavar="FROM")
@click.argument("target", metavar="TO")
@device_option(help="The device whose kernels to follow.")
@dtype_option
@click.option("--depth", type=int, default=48, show_default=True, help="How deep to search from FROM.")
@click.option("--limit", type=int, default=5, show_default=True, help="How many routes to show (shortest first).")
@observe_option
@source_option
@output_options
def path(start, target, device, dtype, depth, limit, observe, source, as_json, width, html):
    """Show the routes from FROM to TO on one device, each step at its file:line.

    FROM is a Python name (torch.nn.Conv2d, torch.mm), an operator
    (aten::conv2d) or a C++ symbol; TO is a C++ symbol, a vendor call
    (cudnnConvolutionForward, cublasSgemm), an operator or a Python name.
    Exit status 1 when TO is not reached from FROM; 2 when a name is unknown.

    \b
    Example:
      kernelmap path torch.nn.Conv2d cudnnConvolutionForward --device cuda
      kernelmap path torch.nn.Conv2d cudnnBackendExecute --device cuda --limit 1
      kernelmap path torch.add ufunc::add --device cpu --json
      kernelmap path torch.Tensor.to at::native::copy_kernel --device cpu --observe
    """
    from kernelmap import graph
    from kernelmap.graph.path import path as find_routes

    with codegen_bar() as bar:
        context = graph.open_context(device, source=source, dtype=dtype, progress=bar)
    answer = find_routes(start, target, context, depth, limit)
    if observe:
        from kernelmap.api import observed

        answer = observed(answer, start, device=device, dtype=dtype, source=source)
    emit(answer, as_json, width, html)
    if not answer.routes:
        click.get_current_context().exit(1)
