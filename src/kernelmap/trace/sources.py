"""A kernel symbol -> its definition in an indexed PyTorch source tree, for
trace nodes; or the reason no such link can be made.

The index itself belongs to `kernelmap.source` (tree-sitter -> SQLite). This
module only asks it where a qualified name is defined, and turns every way
that can fail (no source package, no tree registered, tree not indexed, an
index of another schema) into one explicit reason shown on the nodes, never
an exception that would lose the trace.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from kernelmap.errors import KernelmapError
from kernelmap.model import Location


class SqliteSourceIndex:
    """Definitions read from a tree's index database (read-only)."""

    def __init__(self, db_path: Path, origin: Any):
        self.db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, check_same_thread=False)
        self.origin = origin
        self._cache: dict[str, Location | None] = {}

    def locate(self, symbol: str) -> Location | None:
        """Where `symbol` (at::native::foo, at::native::(anonymous namespace)::k) is defined."""
        lookup = symbol.replace("(anonymous namespace)::", "")
        if lookup in self._cache:
            return self._cache[lookup]
        row = self.db.execute(
            "SELECT f.path, s.line, s.end_line FROM symbols s JOIN strings n ON n.id = s.lookup_id "
            "JOIN files f ON f.id = s.file_id WHERE n.text = ? "
            "ORDER BY (s.kind = 'function') DESC, s.end_line - s.line DESC LIMIT 1",
            (lookup,),
        ).fetchone()
        location = Location(row[0], row[1], max(row[2], row[1]), origin=self.origin) if row else None
        self._cache[lookup] = location
        return location


def open_source_index(tree: Path | str | None = None) -> tuple[Any, str | None]:
    """(index, None) when kernel sources can be linked, else (None, reason).

    `tree` is a registered tree's name or a directory; None picks the tree
    `kernelmap.source` would (the installed torch's commit, or KERNELMAP_SOURCE).
    """
    try:
        from kernelmap.source import trees
        from kernelmap.source.build import index_path
        from kernelmap.source.schema import SCHEMA_VERSION
    except ImportError as e:
        return None, f"no source index support in this build of kernelmap ({e.name} is missing)"
    try:
        selected = trees.select_tree(str(tree) if tree is not None else None)
    except KernelmapError as e:
        return None, str(e)
    path = index_path(selected)
    if not path.is_file():
        return None, f"the tree {selected.name} is not indexed yet (run `kernelmap index`)"
    try:
        index = SqliteSourceIndex(path, selected.origin)
        row = index.db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    except sqlite3.Error as e:
        return None, f"the index of {selected.name} is unreadable ({e})"
    if row is not None and str(row[0]) != str(SCHEMA_VERSION):
        return None, f"the index of {selected.name} has schema {row[0]}, this kernelmap reads {SCHEMA_VERSION}: re-run `kernelmap index`"
    return index, None
