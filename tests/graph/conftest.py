"""Fixtures of the call-graph tests: the real 2.6.0 tree indexed and the
installed torch's generated files, both built once in the session cache
(shared with tests/source and tests/codegen, so neither is built twice)."""

from __future__ import annotations

import os

import pytest

TREE_NAME = "debian-2.6.0"


@pytest.fixture(scope="session")
def indexed_tree(tree_2_6, session_cache):
    from kernelmap.source import add_tree, build_index

    tree = add_tree(tree_2_6, TREE_NAME)
    build_index(tree, jobs=min(2, os.cpu_count() or 1))
    return tree


@pytest.fixture(scope="session")
def generated(session_cache):
    from kernelmap.codegen import generated_files

    return generated_files()


@pytest.fixture(scope="session")
def context(indexed_tree, generated):
    """context(device, **options) -> a GraphContext over the real tree."""
    from kernelmap import graph

    cache = {}

    def make(device: str = "cpu", **options):
        key = (device, tuple(sorted(options.items())))
        if key not in cache:
            cache[key] = graph.open_context(device, source=TREE_NAME, **options)
        return cache[key]

    return make


def walk(tree):
    """(node, path from the root) for every node, pre-order, no recursion."""
    stack = [(tree.root, (tree.root,))]
    while stack:
        node, path = stack.pop()
        yield node, path
        stack.extend((c, path + (c,)) for c in reversed(node.children))


def called_operator(node):
    """The operator a C++ call reaches, below the inline function of the
    generated header and the `at::_ops::<op>::call` it is called through;
    `node` itself when it is no such call."""
    from kernelmap.model import NodeKind

    while node.kind in (NodeKind.HEADER, NodeKind.OPS_ENTRY) and len(node.children) == 1:
        node = node.children[0]
    return node


def paths_to(tree, predicate):
    return [path for node, path in walk(tree) if predicate(node)]


def in_order(path, names):
    """True when every name matches some node of `path`, in that order."""
    i = 0
    for node in path:
        if i < len(names) and names[i](node):
            i += 1
    return i == len(names)


def line_of(node) -> str:
    """The source line a node points at, read from the file on disk."""
    return node.location.disk_path.read_text(errors="replace").splitlines()[node.location.line - 1]


def no_tree_cache(tmp_path, generated):
    """A cache directory with no source tree registered, sharing the session's
    generated files (so a test without a tree does not regenerate them)."""
    cache = tmp_path / "no-tree-cache"
    cache.mkdir()
    (cache / "codegen").symlink_to(generated.root.parent, target_is_directory=True)
    return cache
