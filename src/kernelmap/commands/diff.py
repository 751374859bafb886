"""`kernelmap diff`: how one operator's path changed between two source trees."""

from __future__ import annotations

import click

from kernelmap.commands.options import GRAPH_DEVICES, device_option, emit, output_options


@click.command()
@click.argument("target")
@click.option("--from", "before", metavar="TREE", required=True, help="The older tree: a registered name or a directory.")
@click.option("--to", "after", metavar="TREE", required=True, help="The newer tree: a registered name or a directory.")
@device_option(GRAPH_DEVICES)
@click.option("--nodes", is_flag=True, help="Also compare every node of the call tree read from each tree.")
@output_options
def diff(target, before, after, device, nodes, as_json, width, html):
    """Show how the path of TARGET changed from one tree to another: its yaml
    entry (kind, delegate, dispatch keys, ufunc loops, tags), its kernels
    (added, removed, renamed or moved, matched by name and body), its stubs
    and their registrations, and the generated wrappers (each tree's own
    torchgen). Every location names its tree. Both trees must be indexed.

    TARGET is an operator (aten::conv2d, add.Tensor) or a Python name (torch.relu).

    \b
    Example:
      kernelmap diff aten::prelu --from pytorch-1.13.1+dfsg --to pytorch-2.6.0+dfsg
      kernelmap diff torch.relu --from pytorch-1.13.1+dfsg --to pytorch-2.6.0+dfsg --json
    """
    from kernelmap.commands.source import one_line_warnings
    from kernelmap.diff import diff_op

    one_line_warnings()
    emit(diff_op(target, before, after, device=device, nodes=nodes), as_json, width, html)
