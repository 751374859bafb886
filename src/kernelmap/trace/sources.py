"""A kernel symbol -> its definition in an indexed PyTorch source tree, for
trace nodes; or the reason no such link can be made.

The index belongs to `kernelmap.source` (tree-sitter -> SQLite); this module
only asks it where a qualified name is defined (`Index.definitions`), and
turns every way that can fail (no tree registered, tree not indexed, an index
of another schema) into one explicit reason shown on the nodes and in the
notes, never an exception that would lose the trace.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kernelmap.errors import KernelmapError
from kernelmap.model import Location

# Kinds of definition that are a kernel's body, best first.
_KIND_RANK = {"structured_impl": 0, "function": 1, "global_kernel": 1, "method": 2, "structured_meta": 3}


class SourceIndex:
    """Kernel symbols -> definitions, through one opened `kernelmap.source.Index`."""

    def __init__(self, index: Any):
        self.index = index
        self.name = index.tree.name
        self._cache: dict[tuple[str, bool], Location | None] = {}

    def locate(self, symbol: str, structured: bool = False) -> Location | None:
        """Where `symbol` (`at::native::foo`, `at::native::(anonymous namespace)::k`)
        is defined. A structured kernel is named by its out= function in the yaml
        (`at::native::sum_out`) but written `TORCH_IMPL_FUNC(sum_out)`."""
        key = (symbol, structured)
        if key in self._cache:
            return self._cache[key]
        lookup = symbol.replace("(anonymous namespace)::", "")
        found = list(self.index.definitions(lookup))
        if structured:
            short = lookup.rsplit("::", 1)[-1]
            found += self.index.definitions(f"TORCH_IMPL_FUNC({short})")
        best = min(
            found,
            key=lambda d: (
                _KIND_RANK.get(d.symbol.kind, 5),
                not d.location.path.startswith("aten/src/ATen/native/"),
                -((d.location.end_line or d.location.line) - d.location.line),
            ),
            default=None,
        )
        location = best.location if best is not None else None
        self._cache[key] = location
        return location


def open_source_index(tree: Path | str | None = None) -> tuple[SourceIndex | None, str | None]:
    """(index, None) when kernel sources can be linked, else (None, reason).

    `tree` is a registered tree's name or a directory; None picks the tree
    `kernelmap.source` would (the installed torch's commit, or KERNELMAP_SOURCE).
    """
    try:
        from kernelmap.source import open_index, select_tree
    except ImportError as e:
        return None, f"no source index support in this build of kernelmap ({e.name} is missing)"
    try:
        selected = select_tree(str(tree) if tree is not None else None)
        return SourceIndex(open_index(selected)), None
    except KernelmapError as e:
        return None, str(e)
