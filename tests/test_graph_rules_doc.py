"""docs/graph-rules.md, the one table of the static graph's rules, against
what it names: each rule's Note in its module, each example on its line of
the 2.6.0 tree, each test in its file. Read from the files, so the table
cannot drift from the code, the tree or the tests."""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "graph-rules.md"
PACKAGE = ROOT / "src" / "kernelmap"

_ROW = re.compile(
    r"^\| `(?P<rule>\[[^\]]+\])` \| `(?P<module>[\w/]+\.py)` \| (?P<decides>[^|]+) \| "
    r"`(?P<code>.+?)` at `(?P<path>[^`:]+):(?P<line>\d+)` \| `(?P<test>[^`]+)` \|$"
)


def _rows() -> list[dict[str, str]]:
    rows = []
    for line in PAGE.read_text().splitlines():
        if not line.startswith("| `["):
            continue
        match = _ROW.match(line)
        assert match, f"a row of docs/graph-rules.md is not `rule | module | decides | example | test`: {line[:80]}"
        rows.append(match.groupdict())
    return rows


ROWS = _rows()


@cache
def _tests_of(path: str) -> frozenset[str]:
    tree = ast.parse((ROOT / path).read_text())
    return frozenset(node.name for node in tree.body if isinstance(node, ast.FunctionDef))


def test_the_table_lists_the_graphs_rules():
    rules = [row["rule"] for row in ROWS]
    assert len(rules) >= 30 and len(set(rules)) == len(rules)
    # every rule Note of the graph package is in the table
    defined = set()
    for path in (PACKAGE / "graph").glob("*.py"):
        defined |= set(re.findall(r"^(?:# )?Note (\[[^\]]+\])\s*$", path.read_text(), re.M))
    graph_only = {"[graph versions]", "[route order]",  # what an answer is, not what a call runs
                  "[shared results on disk]", "[Python read once]"}  # how results are kept between runs
    assert defined - graph_only <= set(rules), defined - graph_only - set(rules)


@pytest.mark.parametrize("row", ROWS, ids=[row["rule"] for row in ROWS])
def test_each_rule_has_its_note_where_it_is_applied(row):
    text = (PACKAGE / row["module"]).read_text()
    assert f"Note {row['rule']}" in text, f"no Note {row['rule']} in {row['module']}"


@pytest.mark.parametrize("row", ROWS, ids=[row["rule"] for row in ROWS])
def test_each_example_is_on_its_line_of_the_tree(row, tree_2_6):
    lines = (tree_2_6 / row["path"]).read_text(errors="replace").splitlines()
    line = int(row["line"])
    assert line <= len(lines) and row["code"] in lines[line - 1], f"{row['path']}:{line} is {lines[line - 1]!r}"


@pytest.mark.parametrize("row", ROWS, ids=[row["rule"] for row in ROWS])
def test_each_rule_is_held_by_a_test_that_exists(row):
    path, _, name = row["test"].partition("::")
    assert (ROOT / path).is_file() and name in _tests_of(path), row["test"]
