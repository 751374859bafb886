"""`kernelmap source add|fetch|list|remove`, `kernelmap index`, `kernelmap find`:
wiring over `kernelmap.source`."""

from __future__ import annotations

import click

from kernelmap.commands.options import emit, one_line_warnings, output_options, source_option  # noqa: F401 - one_line_warnings: also imported from here

def _progress(description: str):
    """A rich progress bar on stderr, or a no-op when stderr is no terminal."""
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    columns = [TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn()]
    columns.insert(2, DownloadColumn() if description == "download" else MofNCompleteColumn())
    return Progress(*columns, console=console, transient=True, disable=not console.is_terminal)


def _line(text: str) -> str:
    """`text` for one line of output: control characters (a path's, a file name's) escaped."""
    from kernelmap.printable import printable_line

    return printable_line(text)


@click.group()
def source() -> None:
    """Manage PyTorch source trees: add a checkout, fetch an archive, list, remove.

    \b
    Example:
      kernelmap source add ~/src/pytorch
      kernelmap source fetch
    """
    one_line_warnings()


@source.command("add")
@click.argument("path", type=click.Path(file_okay=False, path_type=str))
@click.option("--name", default=None, help="Registry name (default: the directory's name).")
def add(path: str, name: str | None) -> None:
    """Register the local PyTorch checkout at PATH (any version).

    \b
    Example:
      kernelmap source add ~/src/pytorch --name main
    """
    from kernelmap.errors import BadInput
    from kernelmap.source import add_tree

    if name is not None and not name.strip():
        raise BadInput("--name is empty: give the tree a name, or leave --name out for the directory's")
    tree = add_tree(path, name)
    click.echo(f"added {tree.name}: {tree.version}{' @ ' + tree.commit[:12] if tree.commit else ''} at {_line(str(tree.root))}")
    if tree.missing_parts:
        click.echo(f"note: the tree has no {', '.join(tree.missing_parts)}; the index will hold what is there")


@source.command("fetch")
@click.option("--commit", default=None, metavar="SHA", help="Commit to fetch (default: the installed torch's).")
@click.option("--timeout", default=60.0, show_default=True, help="Seconds without data before giving up (more than 0, at most a day).")
def fetch(commit: str | None, timeout: float) -> None:
    """Download the source archive of a commit into the cache and register it.

    Keeps aten/, c10/, torch/csrc/, tools/autograd/, torchgen/, torch/*.py
    and version.txt. $KERNELMAP_ARCHIVE_URL replaces the GitHub archive URL.

    \b
    Example:
      kernelmap source fetch --commit 2236df1770800ffea5697b11b0bb0d910b2e59e1
    """
    from kernelmap.source import fetch_tree

    with _progress("download") as bar:
        task = bar.add_task("download", total=None)
        tree = fetch_tree(commit, progress=lambda done, total: bar.update(task, completed=done, total=total), timeout=timeout)
    click.echo(f"fetched {tree.name}: {tree.version} @ {tree.commit} at {_line(str(tree.root))}")


@source.command("list")
@output_options
def list_(as_json: bool, width: int | None, html: str | None) -> None:
    """List the registered trees.

    \b
    Example:
      kernelmap source list
    """
    from kernelmap.model import SourceEntry, SourceList
    from kernelmap.source import index_path, list_trees

    trees = tuple(SourceEntry(t.name, str(t.root), t.version, t.commit, t.kind, index_path(t).exists()) for t in list_trees())
    emit(SourceList(trees), as_json, width, html)


@source.command("remove")
@click.argument("name")
def remove(name: str) -> None:
    """Forget the tree NAME and delete its index (and its files, if fetched).

    \b
    Example:
      kernelmap source remove pytorch-2.6.0+dfsg
    """
    from kernelmap.source import remove_tree

    tree = remove_tree(name)
    click.echo(f"removed {tree.name}")


@click.command()
@source_option
@click.option("--jobs", "-j", type=int, default=None, help="Worker processes, 1 to 256 (default: all cores).")
def index(source: str | None, jobs: int | None) -> None:
    """Index a source tree's C++/CUDA code (aten/, c10/, torch/csrc/).

    Only files changed since the last build are parsed again.

    \b
    Example:
      kernelmap index --source pytorch-2.6.0+dfsg
    """
    from kernelmap.source import build_index, select_tree

    one_line_warnings()
    tree = select_tree(source)
    with _progress("parse") as bar:
        task = bar.add_task(f"index {tree.name}", total=None)
        report = build_index(
            tree,
            jobs=jobs,
            progress=lambda phase, done, total: bar.update(task, completed=done, total=total),
            on_wait=lambda: click.echo(f"another build of {tree.name} is running; waiting for it", err=True),
        )
    click.echo(
        f"indexed {tree.name}: {report.files} files, {report.parsed} parsed, {report.removed} removed"
        f"{' (full build: ' + report.rebuilt_reason + ')' if report.full else ''} in {report.seconds:.1f}s"
    )
    if report.with_errors:
        worst = ", ".join(f"{_line(p)} ({n})" for p, n in report.worst[:3])
        click.echo(f"{report.with_errors} files parse with errors (definitions still indexed); worst: {worst}")
    for path, why in report.skipped:
        click.echo(f"skipped {_line(path)}: {_line(why)}")
    if report.missing_parts:
        click.echo(f"missing from the tree: {', '.join(report.missing_parts)}")


@click.command()
@click.argument("name")
@source_option
@click.option("--limit", default=50, show_default=True, help="At most this many references (0 or more).")
@output_options
def find(name: str, source: str | None, limit: int, as_json: bool, width: int | None, html: str | None) -> None:
    """Print the definitions of NAME and the places that call or register it.

    NAME is qualified (at::native::_convolution), bare (cudnn_convolution),
    a stub (mul_stub), or a structured kernel (TORCH_IMPL_FUNC(mul_out)).

    \b
    Example:
      kernelmap find at::native::cudnn_convolution
      kernelmap find mul_stub --json
    """
    from kernelmap.source import find as find_name
    from kernelmap.source import open_index, select_tree

    one_line_warnings()
    tree = select_tree(source)
    from kernelmap.suggest import closest_names

    with open_index(tree) as ix:
        with closest_names(index=ix):
            found = find_name(ix, name, limit=limit)
        stale = ix.stale_note()
    emit(found, as_json, width, html)
    if stale:
        click.echo(f"kernelmap: note: {_line(stale)}", err=True)
