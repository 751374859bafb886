"""`kernelmap where`: the operator behind a name, its kernels and its dispatch path."""

from __future__ import annotations

import json

import click

from kernelmap import api
from kernelmap.dispatch import DEVICE_KEYS


@click.command()
@click.argument("name")
@click.option("--device", type=click.Choice(list(DEVICE_KEYS)), default=None, help="Device of the call's tensors [default: cpu]; given explicitly, also show the kernel's source on that device when a source tree is indexed.")
@click.option("--dtype", default="float32", show_default=True, help="dtype of the call's tensors.")
@click.option("--requires-grad", is_flag=True, help="The tensors require grad.")
@click.option("--autocast", is_flag=True, help="Run the call under torch.autocast.")
@click.option("--inference-mode", is_flag=True, help="Run the call under torch.inference_mode.")
@click.option("--static", is_flag=True, help="Answer from the catalog only: never import torch.")
@click.option("--json", "as_json", is_flag=True, help="Print the versioned JSON document (where/1).")
def where(name, device, dtype, requires_grad, autocast, inference_mode, static, as_json):
    """Show where the operator behind NAME is declared and which kernels run it.

    NAME is an operator (conv2d, aten::conv2d, aten::add.Tensor) or a Python
    name (torch.add, torch.Tensor.add_, torch.nn.functional.conv2d, F.relu).

    \b
    Example:
      kernelmap where torch.nn.functional.conv2d --device cuda
      kernelmap where aten::add.Tensor --requires-grad --json
    """
    from kernelmap.render import where as render

    answer = api.where(
        name,
        device=device or "cpu",
        with_source=device is not None,
        dtype=dtype,
        requires_grad=requires_grad,
        autocast=autocast,
        inference_mode=inference_mode,
        static=static,
    )
    if as_json:
        click.echo(json.dumps(render.to_json(answer), indent=2))
    else:
        click.echo(render.to_text(answer, color=None), nl=False)
