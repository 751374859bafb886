"""Caches keyed by content (Note [generated files keyed by content]): an
edit of a tree's native_functions.yaml makes its generated files another
version's, so they are generated again; a generated file edited to the same
size (its mtime kept, or not) is never served as it was generated. Every
edit is made to a copy: of the tree (a folder of links, the yaml a real
copy) and of the cache, never of .cache/ or of the session's cache."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from kernelmap.codegen import CacheDamaged, CacheMismatch, open_generated
from kernelmap.codegen.build import check_manifest, tree_source
from kernelmap.codegen.locate import GeneratedFiles

YAML = "aten/src/ATen/native/native_functions.yaml"


def linked_tree(root: Path, into: Path) -> Path:
    """`into` as the tree at `root`: each entry a link, but the folders on the
    way to native_functions.yaml real, and the yaml itself a copy to edit."""
    into.mkdir()
    here, there = root, into
    parts = Path(YAML).parts
    for i, part in enumerate(parts):
        for entry in here.iterdir():
            if entry.name != part:
                (there / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())
        if i == len(parts) - 1:
            shutil.copy2(here / part, there / part)
        else:
            (there / part).mkdir()
            here, there = here / part, there / part
    return into


@pytest.fixture
def copied(tmp_path, tree_2_6, session_cache, monkeypatch):
    """A copy of the 2.6.0 tree and a private cache holding the tree's
    generated files as they were generated from it (hard links: nothing is
    ever written to them), their manifest moved to the copy as though the
    copy had been generated before the edit."""
    import json

    from kernelmap.codegen import generated_files

    original = generated_files(tree=tree_2_6.resolve())
    copy = linked_tree(tree_2_6.resolve(), tmp_path / "tree")
    cache = tmp_path / "cache"
    monkeypatch.setenv("KERNELMAP_CACHE_DIR", str(cache))
    source = tree_source(copy)
    target = cache / "codegen" / source.slug
    for folder, _, files in os.walk(original.root):
        rel = Path(folder).relative_to(original.root)
        (target / rel).mkdir(parents=True, exist_ok=True)
        for name in files:
            if name != "manifest.json":
                os.link(Path(folder) / name, target / rel / name)
    manifest = dict(original.manifest)
    manifest["fingerprint"] = source.fingerprint()  # the copy, before any edit, generated these files
    (target / "manifest.json").write_text(json.dumps(manifest))
    return copy, target


def test_the_copy_before_an_edit_opens_its_files(copied):
    copy, target = copied
    assert open_generated(copy).root == target


def test_an_edit_of_the_yaml_makes_the_files_another_version_s(copied):
    copy, target = copied
    yaml = copy / YAML
    text = yaml.read_text()
    yaml.write_text(text.replace("- func: relu(Tensor self) -> Tensor\n", "- func: relu(Tensor self) -> Tensor\n  # a comment moves every line below\n", 1))
    with pytest.raises(CacheMismatch, match="inputs"):
        open_generated(copy)  # generated_files() would now generate them again
    yaml.write_text(text)
    assert open_generated(copy).root == target  # the same bytes: the same key


def test_a_new_operator_in_the_yaml_is_a_new_key(copied):
    copy, _ = copied
    yaml = copy / YAML
    yaml.write_text(yaml.read_text() + "\n- func: traps_new_op(Tensor self) -> Tensor\n  variants: function\n")
    with pytest.raises(CacheMismatch):
        open_generated(copy)


def same_size_edit(path: Path, keep_mtime: bool) -> None:
    """Swap two letters of `path` in a new file at its name (a hard link is
    never written through), keeping its mtime when asked."""
    data = path.read_bytes()
    st = path.stat()
    i = data.index(b"at::")
    edited = data[:i] + b"ta::" + data[i + 4:]
    path.unlink()
    path.write_bytes(edited)
    if keep_mtime:
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


@pytest.mark.parametrize("keep_mtime", [False, True])
def test_a_same_size_edit_of_a_generated_file_is_never_served(copied, keep_mtime):
    copy, target = copied
    files = open_generated(copy)
    rel = "build/aten/src/ATen/RegisterCPU.cpp"
    same_size_edit(target / rel, keep_mtime)
    if not keep_mtime:
        with pytest.raises(CacheDamaged, match="RegisterCPU.cpp is not the file that was generated"):
            check_manifest(target, tree_source(copy))  # found on open: its mtime moved
        return
    check_manifest(target, tree_source(copy))  # size and mtime as generated: the open does not hash every file
    with pytest.raises(CacheDamaged, match="RegisterCPU.cpp is not the file that was generated"):
        GeneratedFiles(target, files.manifest, files.origin).lines(rel)  # read: its bytes are hashed as they are read


def test_a_file_hashed_once_is_trusted_until_any_write(copied, monkeypatch):
    """Note [generated files hashed once]: a file whose bytes were checked is
    recorded and read again without hashing; an edit that keeps its size and
    mtime still changes its ctime, and is found."""
    import hashlib
    import json

    import kernelmap.verified

    monkeypatch.setattr(kernelmap.verified, "MARGIN_NS", 0)  # the copy was just written: record it all the same
    copy, target = copied
    files = open_generated(copy)
    rel = "build/aten/src/ATen/RegisterCPU.cpp"
    first = list(files.lines(rel)[:5])
    assert rel in json.loads((target / "read.verified").read_text())
    hashed = []
    real_sha256 = hashlib.sha256
    monkeypatch.setattr(hashlib, "sha256", lambda *a: hashed.append(a) or real_sha256(*a))
    assert list(GeneratedFiles(target, files.manifest, files.origin).lines(rel)[:5]) == first  # recorded: not hashed again
    assert hashed == []
    same_size_edit(target / rel, keep_mtime=True)
    with pytest.raises(CacheDamaged, match="RegisterCPU.cpp is not the file that was generated"):
        GeneratedFiles(target, files.manifest, files.origin).lines(rel)
    assert hashed  # the record no longer matched: hashed, and refused


def _located(files: GeneratedFiles, tree: Path, name: str = "aten::add.Tensor"):
    from kernelmap.codegen import Layer, resolve_op
    from kernelmap.codegen.locate import locate_op

    op, ufunc_op = resolve_op(name, tree)
    return locate_op(files, op, tuple(Layer), ufunc_op)


def test_a_located_answer_is_kept_and_never_served_for_an_edited_file(copied, tree_2_6, monkeypatch):
    """Note [located answers kept]: an operator located once is answered from
    its record by the next process, the same answer; once a file it read is
    edited (size and mtime kept), the record is not used and the edit is found."""
    import importlib

    locate = importlib.import_module("kernelmap.codegen.locate")  # the package's `locate` function hides the module
    monkeypatch.setattr("kernelmap.verified.MARGIN_NS", 0)  # the copy was just written: record it all the same
    copy, target = copied
    files = open_generated(copy)
    before = set((target / "located").glob("*.json"))  # the session's records, linked: another manifest's
    first = _located(files, tree_2_6.resolve())
    records = sorted(set((target / "located").glob("*.json")) - before)
    assert len(records) == 1
    computed = []
    real = locate._locate_op
    monkeypatch.setattr(locate, "_locate_op", lambda *a: computed.append(a) or real(*a))
    again = GeneratedFiles(target, files.manifest, files.origin)  # another process: nothing kept in memory
    assert _located(again, tree_2_6.resolve()) == first
    assert computed == []  # answered from the record
    read = json.loads(records[0].read_text())["files"]
    rel = next(p for p in read if "RegisterCPU" in p)  # a file the answer read
    same_size_edit(target / rel, keep_mtime=True)
    with pytest.raises(CacheDamaged, match="is not the file that was generated"):
        _located(GeneratedFiles(target, files.manifest, files.origin), tree_2_6.resolve())
    assert computed  # the record no longer matched: located again, and the edit found


@pytest.mark.parametrize("damage", ["garbled", "empty", "foreign", "another operator's"])
def test_a_damaged_located_record_is_located_again_and_rewritten(copied, tree_2_6, damage):
    copy, target = copied
    files = open_generated(copy)
    before = set((target / "located").glob("*.json"))  # the session's records, linked: another manifest's
    first = _located(files, tree_2_6.resolve())
    (record,) = set((target / "located").glob("*.json")) - before
    if damage == "garbled":
        record.write_bytes(record.read_bytes()[:1000] + b"\xff\x00")
    elif damage == "empty":
        record.write_bytes(b"")
    elif damage == "foreign":
        record.write_text(json.dumps({"kernelmap": "gen", "answer": [1, 2]}))
    else:  # a valid record of another operator under this operator's name
        other = GeneratedFiles(target, files.manifest, files.origin)
        _located(other, tree_2_6.resolve(), "aten::mul.Tensor")
        (mul,) = set((target / "located").glob("*.json")) - before - {record}
        kept = json.loads(mul.read_text())
        kept["key"] = json.loads(record.read_text())["key"]
        record.write_text(json.dumps(kept))
    assert _located(GeneratedFiles(target, files.manifest, files.origin), tree_2_6.resolve()) == first
    assert json.loads(record.read_text())["answer"] == first.to_json()  # rewritten whole
