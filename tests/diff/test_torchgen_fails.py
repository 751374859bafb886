"""A tree whose own code generators cannot run here: generation fails with
one error naming the tree and the step that failed, while what needs no
generated code (the operator from its yaml) still answers, and `diff` says
which side's wrappers it could not compare.

The tree is the real 1.13.1 tree seen through symbolic links, with one
generator of its tools/autograd replaced by one that fails on import, as a
generator written for an older Python does."""

from __future__ import annotations

import pytest

from tests.conftest import run_kernelmap
from tests.diff.conftest import YAML, line_at, yaml_entry

FAILURE = "RuntimeError: this generator does not run under this Python"


@pytest.fixture(scope="module")
def broken_tree(tree_1_13, tmp_path_factory):
    real = tree_1_13.resolve()
    root = tmp_path_factory.mktemp("broken") / "pytorch-broken"
    root.mkdir()
    for entry in real.iterdir():
        if entry.name != "tools":
            (root / entry.name).symlink_to(entry)
    (root / "tools").mkdir()
    for entry in (real / "tools").iterdir():
        if entry.name != "autograd":
            (root / "tools" / entry.name).symlink_to(entry)
    (root / "tools/autograd").mkdir()
    for entry in (real / "tools/autograd").iterdir():
        if entry.name != "gen_variable_type.py":
            (root / "tools/autograd" / entry.name).symlink_to(entry)
    kind, message = FAILURE.split(": ", 1)
    (root / "tools/autograd/gen_variable_type.py").write_text(f"raise {kind}({message!r})\n")
    return root


def test_gen_names_what_failed(broken_tree):
    out = run_kernelmap("gen", "aten::relu", "--source", str(broken_tree))
    assert out.returncode == 2 and out.stdout == ""
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith("kernelmap: error: the torchgen of the tree ") and str(broken_tree) in line
    assert "failed generating autograd" in line and FAILURE in line


def test_the_yaml_still_answers(broken_tree):
    out = run_kernelmap("where", "aten::relu", "--static", "--source", str(broken_tree), "--json")
    assert out.returncode == 0, out.stderr
    import json

    from kernelmap.answers import load

    answer = load(json.loads(out.stdout))
    op = answer.ops[0]
    line, _, _ = yaml_entry(broken_tree, "relu")
    assert op.location.path == YAML and op.location.line == line
    assert op.location.origin.root == str(broken_tree.resolve())
    assert line_at(op.location).startswith("- func: relu(")


def test_diff_says_which_wrappers_it_could_not_compare(broken_tree):
    from kernelmap.diff import _generated
    from kernelmap.source import select_tree

    notes: list[str] = []
    assert _generated("aten::relu", select_tree(str(broken_tree)), notes) is None
    (note,) = notes
    assert note.startswith("generated wrappers of tree pytorch-broken not compared: ") and FAILURE in note
