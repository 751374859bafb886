"""Options every command spells the same way, as decorators, and the one way
a command writes its answer (`emit`): the renderer table picks the format.

    @click.command()
    @source_option
    @device_option()
    @dtype_option
    @output_options
    def stack(..., source, device, dtype, as_json, width): ...

Values are checked here, once: an unknown device or dtype, a width below 1,
is one `kernelmap: error:` line and exit status 2 (the CLI turns BadInput
into that), never a traceback or a silent default.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable
from typing import Any

import click

from kernelmap.errors import BadInput

DEVICES = ("cpu", "cuda", "mps", "meta", "xpu")
GRAPH_DEVICES = ("cpu", "cuda", "mps", "meta")


def _source(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is not None and not value.strip():
        raise BadInput("--source names a registered tree or a directory; it is empty")
    return value


source_option = click.option(
    "--source",
    "source",
    metavar="NAME|PATH",
    default=None,
    callback=_source,
    help="Source tree to read: a registered name or a directory (default: the tree of the installed torch's commit, "
    "else $KERNELMAP_SOURCE, else the only registered tree).",
)


def device_option(devices: tuple[str, ...] = GRAPH_DEVICES, default: str | None = "cpu", help: str = "Device of the call's tensors.") -> Callable:
    def check(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
        if value is not None and value not in devices:
            raise BadInput(f"unknown device {value!r}; choose one of {', '.join(devices)}")
        return value

    return click.option("--device", metavar="|".join(devices), default=default, callback=check, show_default=default is not None, help=help)


def check_dtype(value: str) -> str:
    """`value` when the installed torch has a dtype of that name (read without importing torch)."""
    from kernelmap import env

    names = env.torch_dtypes()
    if value not in names:
        close = sorted(n for n in names if n.startswith(value[:3]))[:4] or ["float32", "bfloat16", "int64"]
        raise BadInput(f"unknown dtype {value!r}; torch has e.g. {', '.join(close)}")
    return value


def one_line_warnings() -> None:
    """Show library warnings (a cache rebuilt, a registry entry ignored) as
    one `kernelmap: warning:` line each, not Python's two-line form."""
    import warnings

    def show(message, category, filename, lineno, file=None, line=None):
        from kernelmap.printable import printable_line

        click.echo(f"kernelmap: warning: {printable_line(str(message))}", err=True)

    warnings.showwarning = show


def _dtype(ctx: click.Context, param: click.Parameter, value: str) -> str:
    if value == param.default:  # float32: every torch has it; its stubs are read only for another name
        return value
    return check_dtype(value)


dtype_option = click.option("--dtype", default="float32", show_default=True, callback=_dtype, help="dtype of the call's tensors (a torch dtype name).")


MAX_WIDTH = 10_000  # columns: wider than any terminal, and text padded to it stays small
MAX_RUNS = 1_000  # --warmup and --steps: a profile of more runs would not fit in memory anyway


def check_width(ctx: click.Context, param: click.Parameter, value: int | None) -> int | None:
    if value is not None and not 20 <= value <= MAX_WIDTH:
        raise BadInput(f"--width is a number of columns from 20 to {MAX_WIDTH}, not {value}")
    return value


def output_options(f: Callable) -> Callable:
    """--json (the answer's document), --html FILE (a self-contained report)
    and --width (text columns)."""
    f = click.option("--html", "html", type=click.Path(dir_okay=False), default=None, callback=_html_path, help="Also write the answer as one self-contained HTML file.")(f)
    f = click.option("--width", type=int, default=None, callback=check_width, help="Text width in columns (default: the terminal's).")(f)
    f = click.option("--json", "as_json", is_flag=True, help="Print the answer's JSON document (see kernelmap.answers).")(f)
    return f


def _observe_timeout(ctx: click.Context, param: click.Parameter, value: float) -> float:
    if not math.isfinite(value) or not 0 < value <= 3600:
        raise BadInput(f"--timeout is seconds above 0 and at most 3600, not {value:g}")
    return value


observe_timeout_option = click.option("--timeout", type=float, default=120.0, show_default=True, callback=_observe_timeout,
                                      help="Seconds the observed run may take; it is stopped past them.")
observe_option = click.option("--observe", "observe", is_flag=True,
                              help="Run the call on the installed torch under gdb (example inputs) and mark each step observed, inlined or not taken; the observed path first.")
all_option = click.option(
    "--all", "show_all", is_flag=True,
    help="Show everything: the whole tree (or every route, step and leaf), not the main path with the rest folded.",
)


def depth_check(value: int) -> int:
    if value < 0:
        raise BadInput(f"depth must be 0 or more, not {value}")
    return value


def check_min_us(value: float) -> float:
    if not math.isfinite(value) or value < 0:
        raise BadInput(f"--min-us must be a finite number of 0 or more, not {value}")
    return value


def check_input_file(path, what: str) -> None:
    """A file kernelmap reads to its end is a regular file: a FIFO or a device would block or never end."""
    import os
    import stat

    if not str(path).strip():
        raise BadInput(f"{what} names no file: an empty path")

    try:
        mode = os.stat(path).st_mode
    except OSError as e:
        raise BadInput(f"cannot read {what} {path}: {e.strerror}") from None
    except ValueError as e:  # a NUL in the name
        raise BadInput(f"cannot read {what} {path!r}: {e}") from None
    if not stat.S_ISREG(mode):
        raise BadInput(f"{what} {path} is not a regular file")


def check_output_file(path: str, option: str) -> None:
    """An output kernelmap writes aside and renames into place, checked
    before any work is done (kernelmap.safefiles.check_output): a regular
    file or a link, which is replaced, never followed, or nothing yet, in a
    writable folder; a folder, a FIFO, a device, a socket or a link loop is
    one error line."""
    from kernelmap.safefiles import check_output

    check_output(path, option)


def _html_path(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is not None:
        check_output_file(value, "--html")
    return value


def write_html(answer: Any, path: str) -> None:
    """The answer's HTML report, written aside and renamed into place, with
    excerpts read from the registered trees, the generated-code cache and the wheel."""
    from kernelmap.render import render
    from kernelmap.web.files import SourceFiles

    check_output_file(path, "--html")
    text = render(answer, "html", excerpt=SourceFiles.discover().excerpt)
    write_rendered_html(text, path)


def write_rendered_html(text: str, path: str) -> None:
    """Write a rendered report to `path` (atomically: nothing half-written is left behind) and say so on stderr."""
    from kernelmap.printable import printable_line
    from kernelmap.safefiles import write_output

    write_output(path, text, "--html")
    click.echo(f"wrote {printable_line(path)}", err=True)


def emit(answer: Any, as_json: bool = False, width: int | None = None, html: str | None = None, **options: Any) -> None:
    """Write `answer` to standard output: its JSON document, or text at
    `width` (coloured only on a terminal); with `html`, also its report.
    Every output is rendered before any is written: an answer that cannot
    be shown leaves no report behind."""
    from kernelmap.render import render

    if as_json:
        text = render(answer, "json")
    else:
        color = sys.stdout.isatty()
        if width is None and color:
            from kernelmap.render.text import terminal_width

            width = terminal_width(None)
        text = fit_to_width(render(answer, "text", width=width, color=color, **options), width)
    if html is not None:
        from kernelmap.web.files import SourceFiles

        check_output_file(html, "--html")
        write_rendered_html(render(answer, "html", excerpt=SourceFiles.discover().excerpt), html)
    click.echo(text, nl=False)


def fit_to_width(text: str, width: int | None) -> str:
    """`text` with each plain line wider than `width` folded onto more lines,
    indented under its start: a renderer's table or location that does not fit
    is folded, never cut (coloured lines are drawn to the width by their
    renderer already)."""
    if width is None or all(len(line) <= width for line in text.splitlines()):
        return text
    import textwrap

    out = []
    for line in text.split("\n"):
        if len(line) <= width or "\x1b" in line:
            out.append(line)
            continue
        lead = line[: len(line) - len(line.lstrip(" "))][: width // 2]
        out.extend(textwrap.wrap(line, width, subsequent_indent=lead + "  " if len(lead) + 2 < width // 2 else lead,
                                 break_long_words=True, break_on_hyphens=False, drop_whitespace=True) or [""])
    return "\n".join(out)


def _may_be_terminal(stream) -> bool:
    """False where rich's Console would find `stream` no terminal (it is no
    tty, and no TTY_COMPATIBLE or FORCE_COLOR says otherwise); True where
    rich must be asked."""
    if "TTY_COMPATIBLE" in os.environ or "FORCE_COLOR" in os.environ:
        return True
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


class codegen_bar:
    """A progress bar on stderr (a terminal only) for the first generation of
    build files: a context manager whose value is the reporter the library
    calls with (step, "start" | "done"), or None when stderr is no terminal."""

    def __enter__(self):
        if not _may_be_terminal(sys.stderr):  # rich (a tenth of a cold question) is not imported to hear no
            self._bar = None
            return None
        from rich.console import Console

        self._console = Console(stderr=True)
        if not self._console.is_terminal:
            self._bar = None
            return None
        from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        from kernelmap.codegen.build import STEPS

        labels = dict(STEPS) | {"index": "index the generated files", "headers": "headers: ops/<op>.h, TensorBody.h (once per tree)"}
        self._bar = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                             TimeElapsedColumn(), console=self._console, transient=True)
        self._bar.__enter__()
        tasks: dict[str, int] = {}
        overall: list[int] = []

        def report(step: str, state: str) -> None:
            if not overall:
                overall.append(self._bar.add_task("generating the build files (once per torch version)", total=len(labels)))
            if state == "start":
                tasks[step] = self._bar.add_task(f"  {labels.get(step, step)}", total=1)
            else:
                self._bar.update(tasks[step], completed=1, visible=False)
                self._bar.advance(overall[0])

        return report

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.__exit__(*exc)
