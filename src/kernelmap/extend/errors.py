"""The errors a user can cause while scaffolding, building, overriding or
verifying a custom kernel. Each is a `KernelmapError`: the CLI prints it as one
line and exits with status 2."""

from __future__ import annotations

from kernelmap.errors import BadInput, KernelmapError

__all__ = ["BuildError", "OutputExists", "SchemaMismatch", "OverrideError", "NotScaffoldable"]


class OutputExists(KernelmapError):
    """The output folder of a scaffold exists already (pass --force to overwrite)."""


class NotScaffoldable(BadInput):
    """An operator that scaffold cannot start a custom op from (in-place, out=, view)."""


class BuildError(KernelmapError):
    """A custom kernel that fails to compile; the message names file:line and the compiler's words."""

    def __init__(self, message: str, log: str = ""):
        self.log = log  # the whole compiler output, for whoever wants more than the first error
        super().__init__(message)


class SchemaMismatch(KernelmapError):
    """An override whose arguments or returns do not fit the operator it replaces."""


class OverrideError(KernelmapError):
    """An override that cannot be installed, or that did not restore the dispatcher exactly."""
