"""`kernelmap compile`: what torch.compile generated, mapped to ops, lines and source."""

from __future__ import annotations

import sys

import click

from kernelmap.commands.options import emit, output_options


def _print_error(error: BaseException) -> None:
    """The compiled code's traceback: the user's frames and the error, without
    kernelmap's, runpy's, or torch.compile's own (Dynamo's message already
    names the user's line)."""
    import os
    import traceback

    import torch

    torch_dir = os.path.dirname(torch.__file__) + os.sep
    te = traceback.TracebackException.from_exception(error)
    te.stack = traceback.StackSummary.from_list(
        [
            f
            for f in te.stack
            if not any(part in f.filename for part in ("kernelmap/compile/", "kernelmap/trace/", "kernelmap/commands/"))
            and not f.filename.endswith("runpy.py")
            and not f.filename.startswith(torch_dir)
        ]
    )
    click.echo("".join(te.format()).rstrip(), err=True)


@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": True})
@click.argument("target", required=False)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.option("-c", "--code", help="Run this Python code instead of a script.")
@click.option("--output-dir", type=click.Path(file_okay=False), help="Keep Inductor's output (its debug trace and output code) here [default: a temporary folder, removed after the run].")
@click.option("--profile/--no-profile", default=True, show_default=True, help="Time each generated kernel with the profiler.")
@output_options
def compile(target, args, code, output_dir, profile, as_json, width, html):  # noqa: A001 - the command's name
    """Run code under torch.compile and map each kernel Inductor generated to
    the aten ops it fused, the decompositions behind them, your lines, and
    its place in Inductor's output code; ATen kernels Inductor called
    instead; graph breaks with reason and line; time per kernel.

    TARGET is a script or code (-c) that calls torch.compile itself, or
    `package.module:function`, which is wrapped in torch.compile and called
    with no arguments. Each run uses a private Inductor cache, removed after
    it, and debug folder (kept with --output-dir), so nothing comes from an
    earlier run and nothing is left in the temporary folder. What the code
    prints goes to standard error; standard output holds the answer alone.

    \b
    Examples:
      kernelmap compile examples/compile_block.py
      kernelmap compile -c "import torch; torch.compile(lambda x: x.sin().cos())(torch.randn(8))"
      kernelmap compile mypkg.model:step --json
    """
    from kernelmap import compile as compiling
    from kernelmap.errors import BadInput
    from kernelmap.runscript import absolute, user_code

    if (target is None) == (code is None):
        raise BadInput("give one of: a script or module:function, or -c CODE")
    if args and target is None:
        raise BadInput("arguments are passed to a script; give the script first")
    # where the outputs go, fixed before any code runs (Note [user code and kernelmap's output])
    options = {"workdir": absolute(output_dir), "profile": profile}
    html_path = absolute(html)
    with user_code():  # its prints go to stderr, kernelmap's answer alone to stdout
        if code is not None:
            answer = compiling.run_code(code, **options)
        elif ":" in target and not target.endswith(".py"):
            answer = compiling.run_function(target, **options)
        else:
            answer = compiling.run_script(target, tuple(args), **options)

    emit(answer, as_json, width, html_path)
    if answer.exception is not None:
        if isinstance(answer.exception, KeyboardInterrupt):
            sys.exit(130)
        if isinstance(answer.exception, SystemExit):  # the script's own exit status, as python would give it
            status = answer.exception.code
            if not isinstance(status, int):
                click.echo(str(status), err=True)
            sys.exit(status if isinstance(status, int) else 1)
        _print_error(answer.exception)
        click.echo("kernelmap: the compiled code raised; the kernels above are those compiled before it", err=True)
        sys.exit(1)
