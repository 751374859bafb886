"""PyTorch source trees: acquire one (a local checkout, or the archive of a
commit), index its C++/CUDA code with tree-sitter into SQLite, and query it.

    tree = add_tree("~/src/pytorch")          # or fetch_tree(), select_tree()
    build_index(tree)                         # parallel, incremental, atomic
    with open_index(tree) as ix:
        ix.definitions("at::native::_convolution")
        ix.stub_registrations("mul_stub")

Nothing here imports torch: the installed torch's commit comes from
`kernelmap.env`.
"""

from __future__ import annotations

from kernelmap.source.records import index_path
from kernelmap.source.trees import (NotATree, Tree, TreeChoice, UnknownTree, add_tree, choose_tree, get_tree, inspect_tree, list_trees,
                                    remove_tree, select_tree)

_LAZY = {
    # Reading an index (sqlite3 and its row types) is imported when a question
    # reads one: `where --static` only selects a tree.
    **dict.fromkeys(("CallSite", "Definition", "DtypeDispatch", "FileInfo", "Findings", "Index", "IndexMissing",
                     "LibraryRegistration", "StubDeclaration", "StubRegistration", "find", "open_index"), "kernelmap.source.index"),
    # Fetching (urllib, http, ssl) and building (tree-sitter, multiprocessing) are
    # imported only when asked for: a question put to an indexed tree does neither.
    **dict.fromkeys(("FetchError", "fetch_tree"), "kernelmap.source.fetch"),
    **dict.fromkeys(("IndexBusy", "IndexReport", "build_index"), "kernelmap.source.build"),
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "CallSite",
    "Definition",
    "DtypeDispatch",
    "FetchError",
    "FileInfo",
    "Findings",
    "Index",
    "IndexBusy",
    "IndexMissing",
    "IndexReport",
    "LibraryRegistration",
    "NotATree",
    "StubDeclaration",
    "StubRegistration",
    "Tree",
    "UnknownTree",
    "add_tree",
    "build_index",
    "fetch_tree",
    "find",
    "get_tree",
    "index_path",
    "inspect_tree",
    "list_trees",
    "open_index",
    "remove_tree",
    "select_tree",
    "choose_tree",
    "TreeChoice",
]
