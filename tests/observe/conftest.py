"""Fixtures of the observe tests: the real 2.6.0 tree indexed (shared with
the other areas through the session cache), the recorded runtime golden set,
and the few live captures under gdb, each run once per session."""

from __future__ import annotations

import os
import shutil

import pytest

TREE_NAME = "debian-2.6.0"

needs_gdb = pytest.mark.skipif(shutil.which("gdb") is None, reason="gdb is not installed")


@pytest.fixture(scope="session")
def indexed_tree(tree_2_6, session_cache):
    from kernelmap.source import add_tree, build_index

    tree = add_tree(tree_2_6, TREE_NAME)
    build_index(tree, jobs=min(2, os.cpu_count() or 1))
    return tree


@pytest.fixture(scope="session")
def golden():
    from tests.golden.observed import load

    return load()


@pytest.fixture(scope="session")
def source_map(indexed_tree):
    from kernelmap.observe import source_map as open_map

    sources, context = open_map(TREE_NAME)
    return sources


@pytest.fixture(scope="session")
def conv_run(indexed_tree):
    """One live capture: torch.nn.Conv2d on its ModuleInfo's first input."""
    from kernelmap.observe import observe

    return observe("torch.nn.Conv2d", source=TREE_NAME, timeout=600)


@pytest.fixture(scope="session")
def add_run(indexed_tree):
    from kernelmap.observe import observe

    return observe("torch.add", source=TREE_NAME, timeout=600)


def walk(tree):
    """(node, path from the root) for every node, pre-order, no recursion."""
    stack = [(tree.root, (tree.root,))]
    while stack:
        node, path = stack.pop()
        yield node, path
        stack.extend((c, path + (c,)) for c in reversed(node.children))


def holds_function(node) -> bool:
    """Whether the line `node.location` names holds the node's function, read
    from the file: its own name, or a structured kernel's macro
    (`TORCH_META_FUNC2(add, Tensor)` defines `structured_add_Tensor::meta`)."""
    import re

    line = node.location.disk_path.read_text(errors="replace").splitlines()[node.location.line - 1]
    parts = node.name.split("::")
    if parts[-1] in ("impl", "meta") and len(parts) >= 2 and parts[-2].startswith("structured_"):
        kernel = parts[-2][len("structured_"):]
        m = re.search(r"TORCH_(?:META|IMPL)_FUNC2?\((\w+)(?:,\s*(\w+))?\)", line)
        return bool(m) and "_".join(x for x in m.groups() if x) == kernel
    if parts[-1] == "operator()" and "operator()" in line:
        return True
    while len(parts) > 1 and parts[-1] in ("operator()", "lambda"):  # a lambda is placed at its function
        parts.pop()
    return parts[-1] in line
