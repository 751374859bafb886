"""Domain exceptions. The library raises these; the CLI turns each into a
one-line message and exit status 2. Anything else is a bug and keeps its
traceback."""

from __future__ import annotations


class KernelmapError(Exception):
    """Base of every error a user can cause."""


class UnknownName(KernelmapError):
    """A name that is no operator, Python entry point or symbol kernelmap knows."""

    def __init__(self, name: str, suggestions: tuple[str, ...] = ()):
        self.name = name
        self.suggestions = suggestions
        hint = f"; closest: {', '.join(suggestions)}" if suggestions else ""
        super().__init__(f"unknown name {name!r}{hint}")


class HandWrittenBinding(KernelmapError):
    """A Python name served by a hand-written C++ binding whose code calls no
    operator kernelmap can name (Note [hand-written bindings])."""

    def __init__(self, name: str, why: str):
        self.name = name
        super().__init__(f"{name} is a hand-written binding, not generated from native_functions.yaml: {why}")


class BadInput(KernelmapError):
    """An argument that is malformed (empty, wrong characters, wrong form)."""


class SourceError(KernelmapError):
    """A source tree that is missing, not a PyTorch tree, or unusable."""


class NoSourceTree(SourceError):
    """No source tree is registered at all (not: several, none chosen)."""


class TorchgenError(KernelmapError):
    """torchgen failed to read a yaml or to generate code."""


class TorchUnavailable(KernelmapError):
    """The live answer needs torch, and torch cannot be imported."""
