"""A file the index skips (a link out of the tree, one too large to parse)
is recorded as the scan saw it: the tree is then "as indexed" until that file
changes, not "changed since indexed" for ever."""

from __future__ import annotations

from kernelmap.source import add_tree, build_index, open_index

from .conftest import make_tree


def test_a_skipped_file_is_as_indexed_until_it_changes(tmp_path, cache):
    outside = tmp_path / "outside.cpp"
    outside.write_text("void elsewhere() {}\n")
    root = make_tree(tmp_path / "t", {"aten/src/ATen/native/Good.cpp": "namespace at { namespace native {\nvoid good() {}\n}}\n"})
    (root / "aten/src/ATen/native/Out.cpp").symlink_to(outside)  # a symlink out of the tree: skipped
    tree = add_tree(root, "skips")
    report = build_index(tree, jobs=1)
    assert [path for path, _ in report.skipped] == ["aten/src/ATen/native/Out.cpp"]
    with open_index(tree) as index:
        assert index.changed_files() == [] and index.stale_note() is None
    again = build_index(tree, jobs=1)
    assert again.parsed == 0 and not again.full  # nothing to do: the skipped file is as the index recorded it
    outside.write_text("void elsewhere() { return; }\n")  # the file it stands for changes: said, and read again
    with open_index(tree) as index:
        assert index.changed_files() == ["aten/src/ATen/native/Out.cpp"]
    assert build_index(tree, jobs=1).parsed == 1
