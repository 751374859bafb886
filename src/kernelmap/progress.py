"""Progress for steps that can take more than a second (the first build of
the catalog, importing torch for the live dispatcher): a spinner with what
is being done on standard error, drawn only when standard error is a
terminal, so that piped output and tests see nothing. The CLI turns it on
(`enable`); the library only says which step it is in (`step`).

    with progress.step("reading native_functions.yaml with torchgen (once per torch version)"):
        extracted = run_extractor(files)
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

_enabled = False
_console = None  # a rich Console on a terminal's stderr, made at the first step once enabled (rich is not imported before)


def enable() -> None:
    """Show steps on standard error, if it is a terminal."""
    global _enabled, _console
    _enabled, _console = True, None


@contextmanager
def step(text: str) -> Iterator[None]:
    """A spinner labelled `text` while the block runs (nothing when not enabled)."""
    global _enabled, _console
    if _enabled and _console is None:
        from rich.console import Console

        console = Console(stderr=True)
        _enabled, _console = console.is_terminal, console if console.is_terminal else None
    if _console is None:
        yield
        return
    with _console.status(text, spinner="dots"):
        yield
