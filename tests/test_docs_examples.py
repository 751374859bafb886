"""The documentation site stays true: each example of a static command that
reads a source tree (find, stack, callers, path, explain, diff, kernel, where
--static) on any page under docs/ runs against the real trees, as written but
for the tree names (the pages' names of the 2.6.0 and 1.13.1 trees become the
tests'), and exits 0 with an answer."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.conftest import run_kernelmap
from tests.diff.conftest import indexed_tree, new_tree, old_tree  # noqa: F401 - the shared indexed trees
from tests.graph.conftest import TREE_NAME

DOCS = Path(__file__).resolve().parent.parent / "docs"
COMMANDS = ("find", "stack", "callers", "path", "explain", "diff", "kernel", "where")


def examples() -> list[str]:
    """The pages' example lines of COMMANDS that run from the tree alone:
    no GPU, no torch import (`where` only with --static), no files of the
    user's (`--extension ./x`, `--html`, redirections), no error shown on purpose."""
    found = []
    blocks = [b for page in sorted(DOCS.rglob("*.md")) for b in re.findall(r"^```[\w-]*\n(.*?)^```", page.read_text(), re.S | re.M)]
    for block in blocks:
        for line in block.splitlines():
            line = line.strip().removeprefix("$ ")
            line = re.sub(r"\s+#.*$", "", line)
            m = re.match(rf"kernelmap ({'|'.join(COMMANDS)})\s", line)
            if m is None or any(word in line for word in ("--extension", "--html", ">", "path/to")):
                continue
            if m.group(1) == "where" and "--static" not in line:
                continue
            found.append(line)
    return found


def test_the_docs_have_examples_of_each():
    assert {line.split()[1] for line in examples()} == set(COMMANDS)


@pytest.mark.parametrize("line", examples())
def test_a_docs_example_runs(line, new_tree, old_tree):
    import shlex

    words = shlex.split(line)[1:]
    # the pages' tree names, as the tests register the trees
    names = {"pytorch-2.6.0+dfsg": TREE_NAME, "debian-2.6.0": TREE_NAME, "pytorch-1.13.1+dfsg": str(old_tree.root)}
    words = [names.get(w, w) for w in words]
    if words[0] not in ("diff",) and "--source" not in words and "--from" not in words:
        words += ["--source", TREE_NAME]
    done = run_kernelmap(*words)
    assert done.returncode == 0, (line, done.stderr[-2000:])
    assert done.stdout.strip(), line
    if "--json" in words:
        assert isinstance(json.loads(done.stdout), dict)
