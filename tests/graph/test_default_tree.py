"""Several registered trees, one default rule, said (Note [the default tree]),
and every location with its version where an answer mixes versions or a tree
answers for another version than the installed torch's (Note [versions on
locations]).

Registering a second tree used to remove the source layer without a word
(`where --device cuda` lost its source section; `stack` fell to a note
telling you to add a tree); `gen` answered from the wheel while `stack`
answered from the tree; a yaml line of the 2.6.0 tree was printed as if it
were the installed torch's."""

from __future__ import annotations

import json
import os
import re

import pytest

from kernelmap import env
from tests.conftest import run_kernelmap
from tests.source.conftest import make_tree

YAML = "aten/src/ATen/native/native_functions.yaml"


@pytest.fixture
def two_trees(tmp_path, indexed_tree, session_cache, monkeypatch):
    """A private cache with the session's 2.6.0 tree (its index, catalogs
    and generated files shared) and a second, small tree of another version,
    registered and indexed."""
    from kernelmap.source import add_tree, build_index

    cache = tmp_path / "cache"
    (cache / "index").mkdir(parents=True)
    for sub in ("catalog", "codegen"):
        (cache / sub).symlink_to(session_cache / sub, target_is_directory=True)
    for name in (f"{indexed_tree.name}.sqlite", f"{indexed_tree.name}.sqlite.record"):
        (cache / "index" / name).symlink_to(session_cache / "index" / name)
    monkeypatch.setenv("KERNELMAP_CACHE_DIR", str(cache))
    monkeypatch.delenv("KERNELMAP_SOURCE", raising=False)
    add_tree(indexed_tree.root, indexed_tree.name)
    small = make_tree(tmp_path / "small", {"aten/src/ATen/native/Small.cpp": "namespace at { namespace native {\nvoid small() {}\n}}\n"},
                      version="1.4.0a0")
    build_index(add_tree(small, "small-1.4"), jobs=1)
    return cache


def test_of_several_trees_the_nearest_answers_and_says_so(two_trees, indexed_tree):
    from kernelmap.source import choose_tree

    choice = choose_tree()
    assert choice.tree.name == indexed_tree.name and choice.rule == "nearest"
    assert choice.note.startswith(f"2 source trees are registered; tree {indexed_tree.name} ({indexed_tree.version}) answers")
    assert env.torch_install().version in choice.note and "--source" in choice.note


def test_a_second_tree_keeps_where_s_source_section(two_trees, indexed_tree, session_cache):
    both = run_kernelmap("where", "aten::conv2d", "--device", "cuda", "--static", "--width", "200")
    one = run_kernelmap("where", "aten::conv2d", "--device", "cuda", "--static", "--width", "200", env={"KERNELMAP_CACHE_DIR": str(session_cache)})
    assert both.returncode == 0 and one.returncode == 0, both.stderr + one.stderr
    section = lambda text: text[text.index("\nsource ("):]  # noqa: E731
    assert f"source (tree {indexed_tree.name})" in both.stdout and section(both.stdout) == section(one.stdout)
    assert "note: 2 source trees are registered" in both.stdout and "source trees are registered" not in one.stdout
    doc = json.loads(run_kernelmap("where", "aten::conv2d", "--device", "cuda", "--static", "--json").stdout)
    assert any(n.startswith("2 source trees are registered") for n in doc["notes"]) and doc["source"]


def test_a_second_tree_keeps_the_stack(two_trees, session_cache):
    # piped, every line: on a screen the second tree's note takes a line from the folded `+` lines
    both = run_kernelmap("stack", "aten::conv2d", "--device", "cuda")
    one = run_kernelmap("stack", "aten::conv2d", "--device", "cuda", env={"KERNELMAP_CACHE_DIR": str(session_cache)})
    assert both.returncode == 0 and one.returncode == 0, both.stderr + one.stderr
    body = lambda text: [line for line in text.splitlines() if not line.startswith("note:")]  # noqa: E731
    assert body(both.stdout) == body(one.stdout) and len(body(both.stdout)) > 25
    assert "add one with" not in both.stdout and "note: 2 source trees are registered" in both.stdout


def test_gen_answers_from_the_tree_stack_and_path_answer_from(two_trees, indexed_tree):
    doc = json.loads(run_kernelmap("gen", "aten::conv2d", "--layer", "register", "--json").stdout)
    origin = doc["origins"][doc["origin"]]
    assert origin["kind"] == "generated" and origin["version"] == indexed_tree.version and indexed_tree.name in origin["label"]
    assert any(n.startswith("2 source trees are registered") for n in doc["notes"])
    path = json.loads(run_kernelmap("path", "torch.conv2d", "at::native::conv2d_symint", "--json").stdout)
    versions = {o["version"] for o in path["origins"].values()}
    assert versions == {indexed_tree.version}  # the same origin for every command


def yaml_line(root, func: str) -> int:
    lines = (root / YAML).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if re.match(rf"- func: {re.escape(func)}\(", line))


def test_a_tree_s_yaml_line_carries_its_version(indexed_tree, session_cache, wheel_only_cache):
    tree_line = yaml_line(indexed_tree.root, "conv2d")
    wheel_yaml = env.torch_install().native_yaml.read_text().splitlines()
    wheel_line = next(i for i, line in enumerate(wheel_yaml, 1) if line.startswith("- func: conv2d("))
    assert tree_line != wheel_line  # the versions differ here, which is why the line must say whose it is
    done = run_kernelmap("where", "aten::conv2d", "--static", "--source", indexed_tree.name, "--width", "200",
                         env={"KERNELMAP_CACHE_DIR": str(session_cache)})
    assert done.returncode == 0, done.stderr
    assert f"yaml      {YAML}:{tree_line} ({indexed_tree.version})" in done.stdout
    # with no tree, the wheel answers alone and its lines need no version
    no_tree = run_kernelmap("where", "aten::conv2d", "--static", "--width", "200")
    assert no_tree.returncode == 0, no_tree.stderr
    assert f"yaml      {YAML}:{wheel_line}\n" in no_tree.stdout


def test_a_live_answer_mixing_two_versions_tags_every_location(indexed_tree):
    done = run_kernelmap("where", "aten::add.Tensor", "--source", indexed_tree.name, "--width", "250")
    assert done.returncode == 0, done.stderr
    located = [line for line in done.stdout.splitlines() if re.search(r"\.(cpp|yaml|h|cu):\d+", line)]
    assert located and all(re.search(r"\.(cpp|yaml|h|cu):\d+ \((2\.6\.0a0|" + re.escape(env.torch_install().version) + r")\)", line)
                           for line in located), "\n".join(located)
    assert f"({env.torch_install().version})" in done.stdout and f"({indexed_tree.version})" in done.stdout


def test_a_tree_answering_alone_tags_its_locations_in_stack_path_and_explain(indexed_tree):
    version = indexed_tree.version
    for args in (["stack", "aten::add.Tensor"], ["path", "torch.add", "add_stub"], ["explain", "aten::add.Tensor"]):
        done = run_kernelmap(*args, "--source", indexed_tree.name, "--width", "250")
        assert done.returncode == 0, done.stderr
        located = [line for line in done.stdout.splitlines() if re.search(r"\.(cpp|yaml|h|cu|py|cuh):\d+", line)]
        assert located and all(f"({version})" in line for line in located), (args, "\n".join(x for x in located if version not in x))
