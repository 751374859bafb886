"""`kernelmap where`: the operator behind a name, its kernels and its dispatch path."""

from __future__ import annotations

import click

from kernelmap.commands.options import DEVICES, all_option, device_option, dtype_option, emit, observe_option, output_options, source_option


@click.command()
@click.argument("name")
@device_option(DEVICES, default=None, help="Device of the call's tensors [default: cpu]; given explicitly, also show the kernel's source on that device when a source tree is indexed.")
@dtype_option
@click.option("--requires-grad", is_flag=True, help="The tensors require grad.")
@click.option("--autocast", is_flag=True, help="Run the call under torch.autocast.")
@click.option("--inference-mode", is_flag=True, help="Run the call under torch.inference_mode.")
@click.option("--static", is_flag=True, help="Answer from the catalog only: never import torch.")
@all_option
@observe_option
@source_option
@output_options
def where(name, device, dtype, requires_grad, autocast, inference_mode, static, show_all, observe, source, as_json, width, html):
    """Show where the operator behind NAME is declared and which kernels run it.

    NAME is an operator (conv2d, aten::conv2d, aten::add.Tensor) or a Python
    name (torch.add, torch.Tensor.add_, torch.nn.functional.conv2d, F.relu,
    torch.nn.Conv2d). The live registrations off the dispatch path and every
    leaf after the first are folded to one line each; --all lists them.

    \b
    Example:
      kernelmap where torch.nn.functional.conv2d --device cuda
      kernelmap where aten::add.Tensor --requires-grad --json
    """
    from kernelmap import api, env
    from kernelmap.suggest import closest_names

    if not static:  # the live sections import torch: begin now, beside a first build of the catalog (a subprocess)
        import threading

        threading.Thread(target=_import_torch, name="import torch", daemon=True).start()

    with closest_names(python_root=env.torch_install().site_packages):
        answer = _where(api, name, device, dtype, requires_grad, autocast, inference_mode, static, source)
    if observe:
        answer = api.observed(answer, name, device=device or "cpu", dtype=dtype, source=source)
    emit(answer, as_json, width, html, full=show_all)


def _where(api, name, device, dtype, requires_grad, autocast, inference_mode, static, source):
    return api.where(
        name,
        device=device or "cpu",
        with_source=device is not None,
        dtype=dtype,
        requires_grad=requires_grad,
        autocast=autocast,
        inference_mode=inference_mode,
        static=static,
        source=source,
    )


def _import_torch() -> None:
    try:
        import torch  # noqa: F401
    except Exception:  # noqa: BLE001 - the live dispatcher imports it again and reports the error there
        pass
