"""README.md's five recipes stay true: each `$ kernelmap ...` line shown with
its output runs at 100 columns against the real trees and the installed
torch, and every output line the README shows (all but the `...` lines that
stand for lines left out) is among the first 40 lines of the real output:
the answer is on the first screen. Each file:line the README shows holds the
name beside it, read from the file itself."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_kernelmap
from tests.graph.conftest import TREE_NAME, generated, indexed_tree  # noqa: F401 - the shared indexed tree

README = ROOT / "README.md"
SCREEN = 40
WIDTH = "100"


def recipes() -> list[tuple[str, list[str]]]:
    """(command line, output lines shown) for each `$ kernelmap` line of the
    README that is followed by output."""
    found = []
    for block in re.findall(r"```\n(.*?)```", README.read_text(), re.S):
        command, shown = None, []
        for line in block.splitlines() + ["$ end"]:
            if line.startswith("$ "):
                if command is not None and shown:
                    found.append((command, shown))
                command, shown = line[2:], []
            elif command is not None:
                shown.append(line.rstrip())
    return found


def test_the_readme_has_the_five_questions():
    assert [shlex.split(c)[1] for c, _ in recipes()] == ["where", "path", "explain", "trace", "scaffold"]


@pytest.fixture(scope="module")
def tree(indexed_tree, generated):
    return indexed_tree


@pytest.mark.parametrize("command, shown", recipes(), ids=[shlex.split(c)[1] for c, _ in recipes()])
def test_a_recipe_answers_on_the_first_screen(command, shown, tree, tmp_path):
    words = shlex.split(command)[1:]
    if words[0] != "scaffold":  # scaffold reads no tree; the others read the tests' 2.6.0 tree
        words += ["--source", TREE_NAME]
    words = [str(ROOT / w) if w.startswith("tests/") else w for w in words]
    done = run_kernelmap(*words, "--width", WIDTH, cwd=tmp_path)
    assert done.returncode == 0, (command, done.stderr[-2000:])
    screen = [line.rstrip() for line in done.stdout.splitlines()[:SCREEN]]
    for line in shown:
        if line.strip() == "...":  # lines left out
            continue
        if line.endswith("..."):  # a line shown shortened
            assert any(s.startswith(line[:-3]) for s in screen), f"{command}: no line starts with {line[:-3]!r}"
            continue
        assert line in screen, f"{command}: {line!r} is not in the first {SCREEN} lines:\n" + "\n".join(screen)
    for name, path, number in re.findall(r"([\w:~]+)[ \t]+((?:aten|torch|c10)/[\w/.]+):(\d+)", "\n".join(shown)):
        if "/generated/" in path or re.fullmatch(r"[a-z]+", name):  # generated at build time; a label (yaml, leaf)
            continue
        text = (tree.root / path).read_text(errors="replace").splitlines()[int(number) - 1]
        assert name.split("::")[-1] in text, (name, path, number, text)
