"""Fixtures for the source-tree tests: a private cache dir for the whole
session, the real Debian PyTorch 2.6.0 tree, and its index built once."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session", autouse=True)
def no_user_selection():
    """A user's tree selection or archive URL must not leak into the tests
    (the session cache dir itself comes from tests/conftest.py)."""
    old = {k: os.environ.pop(k, None) for k in ("KERNELMAP_SOURCE", "KERNELMAP_ARCHIVE_URL")}
    yield
    for k, v in old.items():
        if v is not None:
            os.environ[k] = v


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A fresh cache dir for one test (registry and indexes of its own)."""
    path = tmp_path / "cache"
    monkeypatch.setenv("KERNELMAP_CACHE_DIR", str(path))
    return path


@pytest.fixture(scope="session")
def real_tree_root(tree_2_6) -> Path:
    """The Debian pytorch 2.6.0+dfsg tree, fetched by scripts/fetch-test-tree."""
    return tree_2_6


@pytest.fixture(scope="session")
def real_tree(real_tree_root, session_cache):
    from kernelmap.source import add_tree

    return add_tree(real_tree_root, "debian-2.6.0")


@pytest.fixture(scope="session")
def real_build(real_tree):
    """The real tree's index, built once per session (the slow part of the suite)."""
    from kernelmap.source import build_index

    return build_index(real_tree, jobs=min(2, os.cpu_count() or 1))


@pytest.fixture(scope="session")
def real_index(real_tree, real_build):
    from kernelmap.source import open_index

    ix = open_index(real_tree)
    yield ix
    ix.close()


def line_of(root: Path, path: str, line: int) -> str:
    """The text of one line of a tree file (1-based)."""
    return (root / path).read_text(encoding="utf-8", errors="replace").splitlines()[line - 1]


def make_tree(root: Path, files: dict[str, str | bytes], version: str = "2.6.0a0") -> Path:
    """A small PyTorch-shaped tree: version.txt plus the given files."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "version.txt").write_text(version + "\n")
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(text, bytes):
            p.write_bytes(text)
        else:
            p.write_text(text)
    return root
