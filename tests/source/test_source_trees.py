"""The tree registry: adding checkouts (version, git HEAD), listing, removing, selecting."""

from __future__ import annotations

import json

import pytest

from kernelmap.errors import KernelmapError, SourceError
from kernelmap.source import NotATree, UnknownTree, add_tree, build_index, choose_tree, index_path, list_trees, remove_tree, select_tree
from kernelmap.source.trees import read_git_head, registry_path

from .conftest import make_tree

SHA_A = "1eba9b3aa3c43f86f4a2c807ac8e12c4a7767340"
SHA_B = "2236df1770800ffea5697b11b0bb0d910b2e59e1"


def small_tree(root):
    return make_tree(root, {"c10/core/A.cpp": "namespace c10 { int a() { return 1; } }\n"})


def test_add_reads_version_and_a_loose_ref(tmp_path, cache):
    root = small_tree(tmp_path / "pytorch")
    (root / ".git/refs/heads").mkdir(parents=True)
    (root / ".git/HEAD").write_text("ref: refs/heads/main\n")
    (root / ".git/refs/heads/main").write_text(SHA_A + "\n")
    tree = add_tree(root)
    assert (tree.name, tree.version, tree.commit, tree.kind) == ("pytorch", "2.6.0a0", SHA_A, "local")
    assert tree.origin.commit == SHA_A
    assert [t.name for t in list_trees()] == ["pytorch"]
    data = json.loads(registry_path().read_text())
    assert data["trees"][0]["root"] == str(root.resolve())


def test_git_head_from_packed_refs_detached_head_and_gitdir_file(tmp_path):
    root = small_tree(tmp_path / "a")
    (root / ".git").mkdir()
    (root / ".git/HEAD").write_text("ref: refs/heads/release/2.6\n")
    (root / ".git/packed-refs").write_text(f"# pack-refs with: peeled fully-peeled sorted\n{SHA_B} refs/heads/release/2.6\n^{SHA_A}\n")
    assert read_git_head(root) == SHA_B
    (root / ".git/HEAD").write_text(SHA_A + "\n")
    assert read_git_head(root) == SHA_A
    other = small_tree(tmp_path / "b")
    (other / ".git").write_text(f"gitdir: {root / '.git'}\n")
    assert read_git_head(other) == SHA_A
    (root / ".git/HEAD").write_text("ref: refs/heads/unborn\n")
    assert read_git_head(root) is None


def test_a_directory_that_is_no_pytorch_tree_is_refused(tmp_path, cache):
    (tmp_path / "empty").mkdir()
    with pytest.raises(NotATree, match="no version.txt"):
        add_tree(tmp_path / "empty")
    make_tree(tmp_path / "other", {"src/main.cpp": "int main() {}"})
    with pytest.raises(NotATree, match="none of aten, c10, torch/csrc"):
        add_tree(tmp_path / "other")
    with pytest.raises(NotATree, match="not a directory"):
        add_tree(tmp_path / "missing")
    assert list_trees() == []


def test_names_are_unique_per_root(tmp_path, cache):
    add_tree(small_tree(tmp_path / "x" / "pytorch"))
    with pytest.raises(SourceError, match="already exists"):
        add_tree(small_tree(tmp_path / "y" / "pytorch"))
    add_tree(tmp_path / "y" / "pytorch", "second")
    with pytest.raises(KernelmapError, match="tree name"):
        add_tree(tmp_path / "y" / "pytorch", "bad name/")
    for name in ("+", "-x", ".", ".."):  # characters of a name, not its start: the message says both
        with pytest.raises(KernelmapError, match="starting with a letter or digit"):
            add_tree(tmp_path / "y" / "pytorch", name)
    assert [t.name for t in list_trees()] == ["pytorch", "second"]


def test_a_directory_of_several_names_selects_the_indexed_one(tmp_path, cache):
    """KERNELMAP_SOURCE or --source given as a directory that two registered
    names share: the one with an index, not the first registered."""
    from kernelmap.source import select_tree

    root = small_tree(tmp_path / "pytorch")
    add_tree(root, "first")
    second = add_tree(root, "second")
    build_index(second, jobs=1)
    assert select_tree(str(root)).name == "second"


def test_remove_forgets_the_tree_and_its_index(tmp_path, cache):
    tree = add_tree(small_tree(tmp_path / "pytorch"))
    build_index(tree, jobs=1)
    assert index_path(tree).exists()
    remove_tree("pytorch")
    assert list_trees() == [] and not index_path(tree).exists()
    assert (tmp_path / "pytorch/version.txt").exists()  # a local checkout's files stay
    with pytest.raises(UnknownTree):
        remove_tree("pytorch")


def test_selection_prefers_the_installed_commit_then_the_name(tmp_path, cache, monkeypatch):
    from kernelmap import env

    a = add_tree(small_tree(tmp_path / "a"))
    root_b = small_tree(tmp_path / "b")
    (root_b / ".git").mkdir()
    (root_b / ".git/HEAD").write_text(SHA_B + "\n")
    b = add_tree(root_b)
    monkeypatch.setattr(env, "torch_install", lambda: env.TorchInstall("2.6.0", SHA_B, None, tmp_path))
    assert select_tree() == b
    assert select_tree("a") == a  # an explicit --source wins
    monkeypatch.setattr(env, "torch_install", lambda: env.TorchInstall("2.13.0", SHA_A, None, tmp_path))
    choice = choose_tree()  # Note [the default tree]: of several, one by a stated rule, and said
    assert choice.tree == a and choice.rule == "nearest" and "2 source trees are registered; tree a" in choice.note
    monkeypatch.setenv("KERNELMAP_SOURCE", "a")
    assert select_tree() == a
    monkeypatch.setenv("KERNELMAP_SOURCE", "nope")
    with pytest.raises(UnknownTree, match="known: a, b"):
        select_tree()
    # A directory may be named without registering it.
    assert select_tree(str(tmp_path / "b")) == b


def test_locations_of_a_checkout_link_to_its_commit(tmp_path, cache):
    from kernelmap.source import open_index

    root = small_tree(tmp_path / "pytorch")
    (root / ".git").mkdir()
    (root / ".git/HEAD").write_text(SHA_A + "\n")
    tree = add_tree(root)
    build_index(tree, jobs=1)
    with open_index(tree) as ix:
        [d] = ix.definitions("c10::a")
    assert d.location.origin.commit == SHA_A and d.location.origin.root == str(root.resolve())
    assert d.location.url == f"https://github.com/pytorch/pytorch/blob/{SHA_A}/c10/core/A.cpp#L1"
    assert d.location.disk_path == root.resolve() / "c10/core/A.cpp"
