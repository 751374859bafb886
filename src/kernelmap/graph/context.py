"""What one call graph draws on: the selected device and options, and the
producers that answer each layer (catalogs, the source index, the generated
files), opened once. Producers that are missing become notes, not errors,
unless the user asked for them by name.

Note [graph versions]
A source tree is authoritative for its own operators and C++ (its own yaml,
read by its own torchgen); the Python and generated layers come from the
installed torch. When their versions differ, the tree's notes say so once,
and every node's location carries its origin's label.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kernelmap import env
from kernelmap.errors import BadInput, KernelmapError
from kernelmap.graph.rules import DEVICE_KEYS

if TYPE_CHECKING:
    from kernelmap.codegen.build import Reporter

if TYPE_CHECKING:
    from kernelmap.catalog import Catalog
    from kernelmap.codegen import GeneratedFiles
    from kernelmap.source import Index
    from kernelmap.source.config import BuildConfig

NEEDS_TREE = (
    "no source tree: showing the Python, binding, operator and generated layers only "
    "(add one with `kernelmap source add PATH` or `kernelmap source fetch`, then `kernelmap index`)"
)


@dataclass(frozen=True)
class GraphContext:
    """The producers one graph draws on. Any of index/generated may be None."""

    device: str
    requires_grad: bool
    all_branches: bool
    all_calls: bool  # also expand tensor utility calls (empty, view, contiguous, ...)
    catalog: Catalog  # the selected tree's, when a tree is selected
    wheel_catalog: Catalog  # the installed torch's (Python entry points, bindings)
    index: Index | None = None
    generated: GeneratedFiles | None = None
    site_packages: Path | None = None
    notes: tuple[str, ...] = ()
    dtype: str = "float32"
    build: BuildConfig | None = None  # the release build's macros on `device` (Note [build configuration])


def open_context(
    device: str = "cpu",
    requires_grad: bool = False,
    all_branches: bool = False,
    source: str | None = None,
    require_tree: bool = False,
    all_calls: bool = False,
    dtype: str = "float32",
    progress: Reporter | None = None,
) -> GraphContext:
    """Open every producer a graph can use; missing ones become notes.

    `source` names a registered tree or a directory: then it must open, or
    the error is raised (as with `require_tree`). `progress` hears of each
    step while build files are generated for the first time (the CLI draws a bar)."""
    from kernelmap.catalog import load_catalog

    if device not in DEVICE_KEYS:
        raise BadInput(f"unknown device {device!r}; choose one of {', '.join(DEVICE_KEYS)}")
    install = env.torch_install()
    wheel_catalog = load_catalog()
    notes: list[str] = []
    catalog, index = wheel_catalog, None
    try:
        from kernelmap.source import open_index, select_tree

        tree = select_tree(source)
        index = open_index(tree)
        catalog = load_catalog(tree=tree.root, origin=tree.origin)
        if tree.commit != install.commit:
            notes.append(
                f"version mismatch: operators and C++ come from {tree.origin.label} ({tree.version}), "
                f"Python and generated code from torch {install.version}; each location names its origin"
            )
    except KernelmapError as e:
        if source is not None or require_tree:
            raise
        notes.append(f"{NEEDS_TREE} [{e}]")
    generated = None
    try:
        from kernelmap.codegen import generated_files

        # the first graph of a torch version regenerates its build files (cached)
        generated = generated_files(progress=progress)
    except KernelmapError as e:
        notes.append(f"generated code unavailable, showing no bindings or wrappers: {e}")
    build = None
    if index is not None:
        from kernelmap.source.config import build_config

        build = build_config(index.tree.root, device, install.site_packages)
    return GraphContext(
        device, requires_grad, all_branches, all_calls, catalog, wheel_catalog, index, generated, install.site_packages, tuple(notes), dtype, build
    )
