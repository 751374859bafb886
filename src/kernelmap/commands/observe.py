"""`kernelmap observe`: run a call on the installed torch under gdb and show
its real native stacks, joined to the source map."""

from __future__ import annotations

import click

from kernelmap.commands.options import dtype_option, emit, observe_timeout_option, output_options, source_option


@click.command(context_settings={"ignore_unknown_options": True})
@click.argument("target", required=False)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.option("-c", "code", default=None, metavar="CODE", help="Python code to run instead of a TARGET.")
@click.option("--break", "breaks", multiple=True, metavar="SYMBOL", help="Stop where SYMBOL runs (sgemm_, at::native::add_kernel, add_kernel) and show the stacks there; repeatable.")
@click.option("--sample", "sample_hz", type=click.FloatRange(0, 1000), default=0.0, help="Also sample every thread this many times a second (the hot path).")
@click.option("--all-frames", is_flag=True, help="Keep the dispatcher's plumbing frames (wrap_kernel_functor, KernelFunction::call, ...).")
@click.option("--launches", "launches", default=None, metavar="FILE",
              help="Show a recording of a CUDA build's kernel launches (scripts/record_cuda_launches.py) instead of running: "
                   "each launch's host stack down to the vendor call and the launch, with the kernel it ran; TARGET picks one call.")
@dtype_option
@observe_timeout_option
@source_option
@output_options
def observe(target, args, code, breaks, sample_hz, all_frames, launches, dtype, timeout, source, as_json, width, html):
    """Run TARGET under gdb and show what really ran, frame by frame.

    TARGET is a script (model.py, run with ARGS), module:function (called
    with no arguments), or an operator or Python name (aten::add.Tensor,
    torch.add, torch.nn.Conv2d), which runs on the first sample input of its
    OpInfo or ModuleInfo. Each native frame is named from the binary's symbol
    table and joined to its definition in the source tree (file:line), with
    the CPU capability and dtype case it ran; Python frames show the model's
    lines. Without --break, every function that does work is caught the first
    time it runs; with --break, the stacks where SYMBOL runs (exit status 1
    when it never runs). Needs gdb and ptrace.

    \b
    Example:
      kernelmap observe torch.nn.Conv2d
      kernelmap observe torch.add --dtype float64
      kernelmap observe -c "import torch; torch.mm(torch.ones(64, 64), torch.ones(64, 64))" --break sgemm_
      kernelmap observe train.py --epochs 1 --break at::native::cpu_kernel_vec --timeout 300
      kernelmap observe --launches cuda-launches.jsonl.gz torch.nn.Conv2d
    """
    from kernelmap.observe import NeverRan, observe as run

    if launches is not None:
        from kernelmap.observe.cuda import recorded_tree

        emit(recorded_tree(launches, target, source=source), as_json, width, html)
        return

    try:
        tree = run(target, code=code, argv=tuple(args), breaks=tuple(breaks), source=source, timeout=timeout, dtype=dtype,
                   sample_hz=sample_hz, all_frames=all_frames)
    except NeverRan as e:
        click.echo(f"kernelmap: {e}", err=True)
        raise click.exceptions.Exit(1) from None
    emit(tree, as_json, width, html)
