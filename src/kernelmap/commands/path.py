"""`kernelmap path FROM TO`: the routes a call takes from one name to another
symbol or vendor call, each one chain with the conditions it needs."""

from __future__ import annotations

import click

from kernelmap.commands.options import all_option, codegen_bar, device_option, dtype_option, emit, observe_option, output_options, source_option


@click.command()
@click.argument("start", metavar="FROM")
@click.argument("target", metavar="TO")
@device_option(default=None, help="The device whose kernels to follow [default: cuda for a CUDA library's call or a kernel in .cu files, else cpu].")
@dtype_option
@click.option("--depth", type=int, default=48, show_default=True, help="How deep to search from FROM.")
@click.option("--limit", type=int, default=5, show_default=True, help="How many routes to show (shortest first).")
@all_option
@observe_option
@source_option
@output_options
def path(start, target, device, dtype, depth, limit, show_all, observe, source, as_json, width, html):
    """Show the routes from FROM to TO on one device, each step at its file:line.

    FROM is a Python name (torch.nn.Conv2d, torch.mm), an operator
    (aten::conv2d) or a C++ symbol; TO is a C++ symbol, a vendor call
    (cudnnConvolutionForward, cublasSgemm), an operator or a Python name.
    The first route is shown step by step, the others folded to a line each
    saying where they leave it; --all shows every route in full. Without
    --device, a TO in a CUDA library (cudnn*, cublas*) or defined only in .cu
    files is searched on cuda, and no route on the cpu says whether cuda has
    some. Exit status 1 when TO is not reached from FROM; 2 when a name is
    unknown.

    \b
    Example:
      kernelmap path torch.nn.Conv2d cudnnConvolutionForward --device cuda
      kernelmap path torch.nn.Conv2d cudnnBackendExecute --device cuda --limit 1
      kernelmap path torch.add ufunc::add --device cpu --json
    """
    from kernelmap import graph
    from kernelmap.graph.path import path as find_routes

    with codegen_bar() as bar:
        context = graph.open_context(device or "cpu", source=source, dtype=dtype, progress=bar)
        if device is None and _on_cuda(target, context):
            device = "cuda"
            context = graph.open_context(device, source=source, dtype=dtype, progress=bar)
    from kernelmap.suggest import closest_names

    with closest_names(python_root=context.python_dir, index=context.index):
        answer = find_routes(start, target, context, depth, limit)
    if not answer.routes and device is None:  # say whether the other device has routes, and how to ask for them
        from dataclasses import replace

        other = find_routes(start, target, graph.open_context("cuda", source=source, dtype=dtype), depth, limit)
        count = len(other.routes) + int(other.searched.get("more") or 0)
        if count:
            hint = f"no route on cpu; on cuda: {count} route{'s' if count != 1 else ''} (add --device cuda)"
            answer = replace(answer, notes=(*answer.notes, hint))
    if observe:
        from kernelmap.api import observed

        answer = observed(answer, start, device=device or "cpu", dtype=dtype, source=source)
    emit(answer, as_json, width, html, full=show_all)
    if not answer.routes:
        click.get_current_context().exit(1)


# Libraries whose calls run on a GPU (CUDA, or ROCm under the cuda device): a
# route to one of their calls exists on cuda only.
_GPU_LIBRARIES = frozenset({"cudart", "cudnn", "nccl", "cublasLt", "cublas", "cufft", "cusparse", "cusolver",
                            "miopen", "rocblas", "rocfft", "hipblas", "hipsparse", "rocsolver"})


def _on_cuda(target: str, context) -> bool:
    """Whether TO is reached on cuda only: a call of a GPU library, or a
    symbol whose definitions are all in CUDA files (.cu, .cuh)."""
    from kernelmap import vendors

    library = vendors.of_call(target.strip())
    if library is not None:
        return library.id in _GPU_LIBRARIES
    if context.index is None or "::" not in target and not target.replace("_", "").isalnum():
        return False
    found = context.index.definitions(target.strip())
    return bool(found) and all(d.location.path.endswith((".cu", ".cuh")) for d in found)
