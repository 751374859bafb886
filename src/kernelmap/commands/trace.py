"""`kernelmap trace`: what runs in my model, as one call tree and summaries."""

from __future__ import annotations

import os
import shutil
import sys
import traceback
from pathlib import Path

import click

from kernelmap.commands.options import (MAX_RUNS, MAX_WIDTH, check_input_file, check_min_us, check_output_file, check_width, emit,
                                       fit_to_width, source_option, write_rendered_html)
from kernelmap.errors import BadInput


# A text tree's lines are indented by their depth, so a trace nested 10,000 calls deep
# draws as 200 MB of guides: text stops at this depth (saying how many children are
# below), --depth N goes further, --json and --html hold every level.
TEXT_DEPTH = 200


def _check_options(width, top, min_us, depth, export_chrome) -> None:
    """Option values click's types accept but that mean nothing: one-line errors."""
    if width is not None and not 20 <= width <= MAX_WIDTH:
        raise BadInput(f"--width is a number of columns from 20 to {MAX_WIDTH}, not {width}")
    if top < 0:
        raise BadInput(f"--top must be 0 or more, not {top}")
    if depth is not None and depth < 0:
        raise BadInput(f"--depth must be 0 or more, not {depth}")
    check_min_us(min_us)
    if export_chrome is not None:
        check_output_file(export_chrome, "--export-chrome")  # a folder, a FIFO, a link loop, an unwritable folder: said now


def _several_ranks(files, source_tree, all_frames, as_json, top, width, use_store, workers, scheduler) -> None:
    from kernelmap.trace.ranks import summarize_ranks

    if workers is None:
        workers = min(len(files), os.cpu_count() or 1)
    result = summarize_ranks(files, keep_frames=all_frames, source_tree=source_tree, store=use_store, workers=workers, scheduler=scheduler)
    columns = width or max(120, shutil.get_terminal_size((120, 24)).columns)
    emit(result, as_json, columns, top=top)


def _export_tree(result, path: str) -> None:
    """The whole tree to `path`, written aside and renamed into place."""
    from kernelmap.trace import views

    target = Path(path)
    tmp = target.with_name(f".{target.name}.part")
    try:
        tmp.unlink(missing_ok=True)
        views.export_tree(result, tmp, fmt="parquet" if target.name.endswith(".parquet") else "jsonl")
        os.replace(tmp, target)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise BadInput(f"cannot write --export-tree {path}: {e.strerror}") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _print_error(error: BaseException) -> None:
    """The traced code's traceback, without kernelmap's and runpy's own frames."""
    te = traceback.TracebackException.from_exception(error)
    te.stack = traceback.StackSummary.from_list(
        [f for f in te.stack if "kernelmap/trace/" not in f.filename and not f.filename.endswith("runpy.py")]
    )
    click.echo("".join(te.format()).rstrip(), err=True)


@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": True})
@click.argument("target", required=False)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.option("-c", "--code", help="Trace this Python code instead of a script.")
@click.option("--from", "from_files", multiple=True, help="Read a Chrome/Kineto trace (.json or .json.gz) recorded elsewhere; repeat it, or name a folder, for the ranks of one distributed run.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True, help="Output format of the tree alone (json: the calltree/1 document).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document (trace/1): the tree (calltree/1) and the summary.")
@click.option("--tree/--no-tree", default=True, show_default=True, help="Show the call tree.")
@click.option("--summary/--no-summary", default=True, show_default=True, help="Show the per operator, module and file summary.")
@click.option("--depth", type=int, help=f"Show the tree down to this depth [default: {TEXT_DEPTH} in text, all in --json].")
@click.option("--min-us", type=float, default=0.0, help="Hide tree nodes shorter than this many microseconds.")
@click.option("--top", type=int, default=25, show_default=True, help="Rows per summary table.")
@click.option("--all-frames", is_flag=True, help="Keep every Python frame (by default frames that ran no operator and module-call wrappers are dropped).")
@source_option
@click.option("--export-chrome", type=click.Path(dir_okay=False), help="Write the trace with kernelmap's source links in each event's args (opens in Perfetto).")
@click.option("--html", "html", type=click.Path(dir_okay=False), default=None, help="Also write the trace as one self-contained HTML report.")
@click.option("--width", type=int, default=None, callback=check_width, help="Output width (default: the terminal's).")
@click.option("--hot", "hot", type=click.IntRange(min=1), default=None, help="Show the tree's hottest N nodes and their ancestors, each node's other children folded into one line [default: 1000].")
@click.option("--full-tree", is_flag=True, help="Show every node of the tree (text, --json, --html); --json then streams the document.")
@click.option("--export-tree", type=click.Path(dir_okay=False), default=None, help="Write the whole tree to this file, streamed: Parquet for a .parquet name, else JSON Lines (one node a line).")
@click.option("--execution-trace", "execution_trace", type=click.Path(dir_okay=False), default=None, help="A PyTorch execution trace (ExecutionTraceObserver JSON) of the same run as the --from trace: each operator gains its schema, node id and output shapes.")
@click.option("--workers", type=click.IntRange(min=1, max=1024), default=None, help="Import the ranks of several --from traces in this many processes [default: one per CPU].")
@click.option("--scheduler", default=None, help="Import the ranks of several --from traces on the Dask distributed cluster at this address (tcp://HOST:PORT); the workers read the files by their paths.")
@click.option("--store/--no-store", "use_store", default=True, show_default=True, help="Keep a trace read --from a file as tables in the cache, and open them from there the next time.")
@click.option("--warmup", type=click.IntRange(min=0, max=MAX_RUNS), default=0, show_default=True, help="Run the target this many times unprofiled first, so the cold first call is not traced.")
@click.option("--steps", type=click.IntRange(min=1, max=MAX_RUNS), default=1, show_default=True, help="Profile this many runs of the target (after the warm-up ones).")
def trace(target, args, code, from_files, fmt, as_json, tree, summary, depth, min_us, top, all_frames, source, export_chrome, width, html, warmup, steps,
          hot, full_tree, export_tree, execution_trace, workers, scheduler, use_store):
    """Run Python code under the profiler (or read a trace) and show what ran.

    TARGET is a script (run as `python script.py ARGS...`) or
    `package.module:function` (called with no arguments). Options kernelmap
    does not know are passed to the script; put the script's own options
    after `--` when they share a name with kernelmap's. Use -c for a code
    string, or --from for a trace exported by torch.profiler on another
    machine (GPU traces included: runtime launches and kernels are joined by
    correlation id and flow events).

    Every aten operator is resolved: its native_functions.yaml entry, the
    dispatch key and kernel that served it, the kernel's source (with an
    indexed source tree), the vendor library it ends in (closed or open),
    and for convolutions the backend chosen.

    If the traced code raises or is interrupted, the partial tree is shown,
    then the exception; the exit status is non-zero.

    \b
    Examples:
      kernelmap trace examples/resnet50.py --depth 8 --min-us 100
      kernelmap trace train.py --epochs 1 -- --json
      kernelmap trace -c "import torch; torch.nn.Conv2d(3, 8, 3)(torch.randn(1, 3, 32, 32))"
      kernelmap trace mypkg.bench:step --no-tree --top 10
      kernelmap trace mypkg.bench:step --warmup 2 --steps 3 --no-tree
      kernelmap trace --from trace.json.gz --export-chrome annotated.json
      kernelmap trace --from rank0.json.gz --hot 200 --export-tree tree.parquet
    """
    from kernelmap import trace as tracing
    from kernelmap.runscript import absolute, user_code

    # where the outputs go, fixed before any code runs: a script that changes folder
    # does not move them (Note [user code and kernelmap's output])
    export_path, html_path, tree_path = absolute(export_chrome), absolute(html), absolute(export_tree)
    _check_options(width, top, min_us, depth, export_chrome)
    if hot is not None and full_tree:
        raise BadInput("--hot shows part of the tree and --full-tree all of it: give one")
    if export_tree is not None:
        check_output_file(export_tree, "--export-tree")
    if html is not None:
        check_output_file(html, "--html")  # before the trace is run or read, not after
        if export_chrome is not None and os.path.realpath(html) == os.path.realpath(export_chrome):
            raise BadInput(f"--html and --export-chrome name the same file {html}; one would overwrite the other")
    from_file = None
    if from_files:
        from kernelmap.trace.ranks import trace_files

        if not all(f.strip() for f in from_files):  # an empty path would read as the current folder
            raise BadInput("--from names no file: an empty path")

        files = trace_files(from_files)
        for f in files:
            check_input_file(f, "--from")
        if len(files) > 1 or Path(from_files[0]).is_dir():
            if target is not None or code is not None:
                raise BadInput("give one of: a script or module:function, -c CODE, or --from TRACE")
            if html is not None or export_chrome is not None:
                raise BadInput("--html and --export-chrome write one trace; several ranks are summarised together (give one --from FILE)")
            _several_ranks(files, source, all_frames, as_json, top, width, use_store, workers, scheduler)
            return
        if scheduler is not None or workers is not None:
            raise BadInput("--workers and --scheduler import the ranks of several traces; give more than one --from")
        if execution_trace is not None:
            check_input_file(execution_trace, "--execution-trace")
        from_file = str(files[0])
    elif execution_trace is not None:
        raise BadInput("--execution-trace links an execution trace to the Kineto trace of the same run: give that one with --from")
    sources = sum(x is not None for x in (target, code, from_file))
    if sources != 1:
        raise BadInput("give one of: a script or module:function, -c CODE, or --from TRACE")
    if args and target is None:
        raise BadInput("arguments are passed to a script; give the script first")
    if target is not None and target.endswith((".json", ".json.gz")):  # a recorded trace, not code to run
        raise BadInput(f"{target} is a trace file, not a script: read it with --from {target}")
    source_tree = source
    options = {"keep_frames": all_frames, "source_tree": source_tree, "warmup": warmup, "steps": steps}
    if from_file is not None and (warmup or steps != 1):
        raise BadInput("--warmup and --steps run code; a trace read --from a file was recorded already")
    if from_file is not None:
        try:
            result = tracing.load(from_file, keep_frames=all_frames, source_tree=source_tree, store=use_store, execution_trace=execution_trace)
        except KeyboardInterrupt:
            click.echo(f"kernelmap: interrupted while reading {from_file}", err=True)
            sys.exit(130)
    else:
        with user_code():  # its prints go to stderr, kernelmap's answer alone to stdout
            if code is not None:
                result = tracing.run_code(code, **options)
            elif ":" in target and not target.endswith(".py"):
                result = tracing.run_function(target, **options)
            else:
                result = tracing.run_script(target, tuple(args), **options)

    from kernelmap.render import render
    from kernelmap.trace import views
    from kernelmap.trace.summary import TraceReport

    hot_view = []

    def shown():  # the tree a view shows: bounded unless every node is asked for (Note [hot subtrees] in kernelmap.trace.views)
        if not hot_view:
            hot_view.append(result.tree if full_tree else views.hot_tree(result, hot or views.DEFAULT_NODES))
        return hot_view[0]

    # Every output is rendered before any is written: one that fails leaves no other behind
    # (the whole tree as JSON excepted: streamed as it is rendered, it holds no tree in memory).
    text = None
    if as_json and full_tree and tree:
        pass
    elif as_json:
        text = render(TraceReport(shown() if tree else None, result.summary() if summary else None), "json")
    elif fmt != "text":
        text = render(shown(), "json")
    else:
        report = TraceReport(shown() if tree else None, result.summary() if summary else None)
        color = sys.stdout.isatty()
        columns = width if width is not None or not color else shutil.get_terminal_size((120, 24)).columns
        text = fit_to_width(render(report, "text", width=columns, color=color, max_depth=depth if depth is not None else TEXT_DEPTH,
                                   min_us=min_us, top=top), columns)
    page = None
    if html is not None:
        from kernelmap.web.files import SourceFiles

        page = render(TraceReport(shown(), result.summary()), "html", excerpt=SourceFiles.discover().excerpt)
    if export_chrome:
        try:
            result.export_chrome(export_path)
        except OSError as e:
            raise BadInput(f"cannot write --export-chrome {export_chrome}: {e.strerror or e}") from None
    if export_tree is not None:
        _export_tree(result, tree_path)
    if page is not None:
        write_rendered_html(page, html_path)
    if text is None:
        views.write_full_json(result, sys.stdout, summary=summary)
        sys.stdout.flush()
    else:
        click.echo(text, nl=False)
    if export_chrome and not as_json and fmt == "text":
        from kernelmap.printable import printable_line

        click.echo(f"wrote {printable_line(export_chrome)}")

    error = result.error
    if error is not None:
        if isinstance(error, KeyboardInterrupt):
            click.echo("kernelmap: the traced code was interrupted; the tree above is partial", err=True)
            sys.exit(130)
        if isinstance(error, SystemExit):
            sys.exit(error.code if isinstance(error.code, int) else 1)
        _print_error(error)
        click.echo("kernelmap: the traced code raised; the tree above is partial", err=True)
        sys.exit(1)
