"""The `kernelmap` command: wiring only. Each command parses its options, calls
one library function, picks a renderer and writes. Commands live in
`kernelmap.commands.*` and are imported only when run, so `kernelmap where`
never pays for the imports of `kernelmap trace`.

Library errors (`KernelmapError`) become one line on stderr and exit status 2.
A reader that goes away (`kernelmap index | head -1`) ends the command
quietly, as click ends it: exit status 1, no message.
"""

from __future__ import annotations

import importlib
import sys

import click

from kernelmap import __version__
from kernelmap.errors import KernelmapError

# command name -> "module:attribute"; one line per command, in help order.
COMMANDS: dict[str, str] = {
    "where": "kernelmap.commands.where:where",
    "source": "kernelmap.commands.source:source",
    "index": "kernelmap.commands.source:index",
    "find": "kernelmap.commands.source:find",
    "gen": "kernelmap.commands.gen:gen",
    "stack": "kernelmap.commands.graph:stack",
    "callers": "kernelmap.commands.graph:callers",
    "path": "kernelmap.commands.path:path",
    "trace": "kernelmap.commands.trace:trace",
    "kernel": "kernelmap.commands.kernel:kernel",
    "compile": "kernelmap.commands.compile:compile",
    "explain": "kernelmap.commands.graph:explain",
    "diff": "kernelmap.commands.diff:diff",
    "impact": "kernelmap.commands.impact:impact",
    "scaffold": "kernelmap.commands.extend:scaffold",
    "verify": "kernelmap.commands.extend:verify",
    "render": "kernelmap.commands.render:render_",
    "serve": "kernelmap.commands.serve:serve",
    "observe": "kernelmap.commands.observe:observe",
    "mcp": "kernelmap.commands.mcp:mcp",
}


class LazyGroup(click.Group):
    """A group whose commands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [name for name in COMMANDS if self._load(name) is not None]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return self._load(cmd_name)

    @staticmethod
    def _load(name: str) -> click.Command | None:
        target = COMMANDS.get(name)
        if target is None:
            return None
        module_name, attr = target.split(":")
        return getattr(importlib.import_module(module_name), attr)

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except KernelmapError as e:
            click.echo(f"kernelmap: error: {_printable(str(e))}", err=True)
            ctx.exit(2)
        except OSError as e:  # the machine's, not a bug: a cache folder that is a file, a lock that is a folder, a name too long
            if isinstance(e, BrokenPipeError) and _reader_gone():
                raise  # click's main ends quietly with status 1 and keeps the exit's flush quiet
            where = f": {e.filename}" if e.filename else ""
            click.echo(f"kernelmap: error: {_printable((e.strerror or str(e)) + where)}", err=True)
            ctx.exit(2)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="kernelmap")
def cli() -> None:
    """What code runs when you call PyTorch, where it is, and how to change it.

    \b
    Example:
      kernelmap where torch.nn.functional.conv2d --device cuda
    """


def _reader_gone() -> bool:
    """Whether standard output is a pipe or socket whose reader has closed it
    (a broken pipe of another kind, such as a child's, is still an error)."""
    import select

    if not hasattr(select, "poll"):  # Windows: no way to ask; a broken pipe there is most likely stdout's
        return True
    try:
        poll = select.poll()
        poll.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poll.poll(0))
    except (AttributeError, OSError, ValueError):  # a stdout with no file behind it (captured) is no pipe
        return False


def _printable(message: str) -> str:
    """An error line names what the user gave (a file name, a tree's version):
    its control characters are shown escaped, never sent to the terminal, and
    what is very long is shortened to its start and end (100 KB of a name
    would make the line a page)."""
    from kernelmap.printable import printable_line, shortened_line

    return shortened_line(printable_line(message))


def main() -> None:
    """Run the CLI. Usage errors (an unknown option, a missing argument, a bad
    value) are one `kernelmap: error:` line and exit status 2, like every
    other user mistake, not click's usage block."""
    from kernelmap.commands.options import one_line_warnings

    one_line_warnings()
    from kernelmap import progress

    progress.enable()  # a spinner on a terminal's stderr for slow first steps
    try:
        status = cli.main(prog_name="kernelmap", standalone_mode=False)
    except click.exceptions.NoArgsIsHelpError as e:  # `kernelmap`, `kernelmap source`: no command named
        path = e.ctx.command_path if e.ctx else "kernelmap"
        click.echo(f"kernelmap: error: missing command (see {path} --help)", err=True)
        sys.exit(2)
    except click.UsageError as e:
        hint = f" (see kernelmap {e.ctx.command_path.split(' ', 1)[1] + ' ' if e.ctx and ' ' in e.ctx.command_path else ''}--help)"
        click.echo(f"kernelmap: error: {_printable(e.format_message())}{hint}", err=True)
        sys.exit(2)
    except click.Abort:
        click.echo("kernelmap: aborted", err=True)
        sys.exit(130)
    except click.ClickException as e:
        click.echo(f"kernelmap: error: {_printable(e.format_message())}", err=True)
        sys.exit(e.exit_code)
    sys.exit(status if isinstance(status, int) else 0)


if __name__ == "__main__":
    sys.exit(main())
