"""A catalog's key is read from the record of keys while its inputs are the
files hashed (Note [catalog keys by stamp] in kernelmap.catalog.store), and
hashed again after any write to one, even one that puts its size and mtime back."""

from __future__ import annotations

import json
import os

import pytest

from kernelmap.catalog.store import CatalogFiles


@pytest.fixture
def files(tmp_path):
    for name, text in (("native_functions.yaml", "- func: add(Tensor a) -> Tensor\n"), ("tags.yaml", "- tag: core\n"),
                       ("derivatives.yaml", "- name: add\n")):
        (tmp_path / name).write_text(text)
    return CatalogFiles(tmp_path / "native_functions.yaml", tmp_path / "tags.yaml", tmp_path / "derivatives.yaml", None, None)


def _stored(files, cache):
    """The key as `open_catalog_db` has it, recorded as it records it once the catalog is stored."""
    (cache / "catalog").mkdir(parents=True, exist_ok=True)
    key, unrecorded = files.stamped_key(cache)
    files.record_key(cache, unrecorded, key)
    return key


def test_the_key_is_read_back_while_the_inputs_are_unchanged(files, tmp_path, monkeypatch):
    import kernelmap.verified

    cache = tmp_path / "cache"
    assert _stored(files, cache) == files.key()
    assert not (cache / "catalog" / "keys.json").exists(), "inputs written just now were recorded (Note [racy checks])"
    monkeypatch.setattr(kernelmap.verified, "MARGIN_NS", 0)
    key = _stored(files, cache)
    assert key == files.key() and len(json.loads((cache / "catalog" / "keys.json").read_text())) == 1
    monkeypatch.setattr(CatalogFiles, "key", lambda self: pytest.fail("hashed again"))
    assert files.stamped_key(cache) == (key, None)


def test_a_write_to_an_input_is_hashed_again(files, tmp_path, monkeypatch):
    import kernelmap.verified

    monkeypatch.setattr(kernelmap.verified, "MARGIN_NS", 0)
    cache = tmp_path / "cache"
    before = _stored(files, cache)
    yaml = files.native_yaml
    st = yaml.stat()
    yaml.write_text(yaml.read_text().replace("add", "sub"))  # the same size
    os.utime(yaml, ns=(st.st_atime_ns, st.st_mtime_ns))  # and the same mtime: the ctime moved
    after = _stored(files, cache)
    assert after == files.key() != before


def test_a_damaged_record_is_hashed_again_and_rewritten(files, tmp_path, monkeypatch):
    import kernelmap.verified

    monkeypatch.setattr(kernelmap.verified, "MARGIN_NS", 0)
    cache = tmp_path / "cache"
    (cache / "catalog").mkdir(parents=True)
    (cache / "catalog" / "keys.json").write_text("[not a record")
    assert _stored(files, cache) == files.key()
    assert list(json.loads((cache / "catalog" / "keys.json").read_text()).values()) == [files.key()]
    assert sorted(p.name for p in (cache / "catalog").iterdir()) == ["keys.json"]  # nothing left aside
