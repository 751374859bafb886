"""Fixtures of the two-tree tests: Debian's 2.6.0 tree registered as the
graph tests register it (its index is shared with them), and Debian's 1.13.1
tree used by its directory, never registered: a second registered tree would
change which tree every other test selects by default. Both are indexed once
in the session cache."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests.graph.conftest import TREE_NAME as TREE_2_6, indexed_tree  # noqa: F401 - the graph tests' indexed 2.6.0 tree

YAML = "aten/src/ATen/native/native_functions.yaml"


@pytest.fixture(scope="session")
def new_tree(indexed_tree):
    """The 2.6.0 tree, registered and indexed as the graph tests do it."""
    return indexed_tree


@pytest.fixture(scope="session")
def old_tree(tree_1_13, session_cache):
    from kernelmap.source import build_index, select_tree

    tree = select_tree(str(tree_1_13.resolve()))
    build_index(tree, jobs=min(2, os.cpu_count() or 1))
    return tree


@pytest.fixture(scope="session")
def both(old_tree, new_tree):
    """(tree, --source value) for each tree."""
    return {"1.13": (old_tree, str(old_tree.root)), "2.6": (new_tree, new_tree.name)}


def yaml_entry(root: Path, func: str) -> tuple[int, dict[str, str], dict[str, str]]:
    """The `- func:` entry of the operator `func` ("relu", "add.Tensor") in the
    tree's own native_functions.yaml, read as text: its line, its top-level
    fields (as written) and its dispatch table (key -> kernel, each key of a
    `CPU, CUDA: kernel` line on its own)."""
    lines = (root / YAML).read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(rf"- func: {re.escape(func)}\(", line))
    fields: dict[str, str] = {}
    dispatch: dict[str, str] = {}
    in_dispatch = False
    for line in lines[start + 1 :]:
        if line.startswith("- func:"):
            break
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if not line.startswith(" "):
            break
        m = re.match(r"  (\w+):\s*(.*)$", line)
        if m:
            fields[m[1]] = m[2].strip()
            in_dispatch = m[1] == "dispatch"
            continue
        m = re.match(r"    ([\w, ]+):\s*(\S+)", line)
        if in_dispatch and m:
            for key in m[1].split(","):
                dispatch[key.strip()] = m[2]
    return start + 1, fields, dispatch


def line_at(location) -> str:
    """The line a location names, read from its file on disk."""
    return location.disk_path.read_text(errors="replace").splitlines()[location.line - 1]


def defines(location, name: str, span: int = 1) -> bool:
    """True when the definition of `name` (its last `::` part) starts at the
    location: on its line or, for a signature split over lines, the next few."""
    short = re.sub(r"<.*", "", name).rsplit("::", 1)[-1]
    lines = location.disk_path.read_text(errors="replace").splitlines()
    text = " ".join(lines[location.line - 1 : location.line - 1 + span])
    return re.search(rf"(?<!\w){re.escape(short)}(?!\w)", text) is not None  # operator() ends in no word character
