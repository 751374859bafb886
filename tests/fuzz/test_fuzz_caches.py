"""Property tests of the cache loaders: a catalog database, a codegen
manifest and files, a source index and the tree registry, each damaged at
random, must be rebuilt or refused with a one-line domain error, never give a
traceback or a silently wrong answer."""

from __future__ import annotations

import json
import shutil
import sqlite3
import warnings

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from kernelmap.errors import KernelmapError

flips = st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(1, 255)), min_size=1, max_size=12)


def _flip(path, where):
    data = bytearray(path.read_bytes())
    for fraction, mask in where:
        data[int(fraction * len(data))] ^= mask
    path.write_bytes(bytes(data))


# -- catalog ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def catalog_parts(session_cache):
    """The installed torch's catalog files and the extractor's real output, run once."""
    from kernelmap import env
    from kernelmap.catalog.store import CatalogFiles, _run_extractor

    install = env.torch_install()
    files = CatalogFiles(install.native_yaml, install.tags_yaml, install.derivatives_yaml, install.torch_dir / "nn/functional.py", None)
    return files, _run_extractor(files)


@given(where=flips)
@example(where=[(0.1774930510249204, 1)])  # found by `make fuzz`: an index entry no longer its row's, which quick_check passed
def test_a_damaged_catalog_is_rebuilt_or_refused(catalog_parts, tmp_path_factory, monkeypatch, where):
    from kernelmap.catalog import store

    files, extracted = catalog_parts
    cache = tmp_path_factory.mktemp("catalog")
    monkeypatch.setattr(store, "_run_extractor", lambda f: extracted)  # replays the real run
    store.open_catalog_db(files, cache).close()
    [path] = (cache / "catalog").glob("*.sqlite")
    _flip(path, where)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", store.CatalogWarning)
        try:
            db = store.open_catalog_db(files, cache)
        except KernelmapError:
            return
    try:
        rows = db.execute("SELECT qualified, record FROM ops WHERE qualified = 'add.Tensor'").fetchall()
        n = db.execute("SELECT count(*) FROM ops").fetchone()[0]
    except sqlite3.DatabaseError:
        pytest.fail("an opened catalog must be readable")
    finally:
        db.close()
    assert n == len(extracted["ops"])
    assert len(rows) == 1 and json.loads(rows[0][1])["name"] == "add"


# -- codegen ---------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


@given(key=st.sampled_from(["fingerprint", "sizes", "index_sha256", "files", None]), value=json_values)
def test_a_manifest_of_any_shape_is_accepted_only_when_right(generated, key, value):
    from kernelmap.codegen.build import CacheMismatch, check_manifest, installed_source

    original = json.loads((generated.root / "manifest.json").read_text())
    manifest = dict(original) if key is not None else value
    if key is not None:
        manifest[key] = value
    directory = generated.root.parent / f".fuzz-{generated.root.name}"
    shutil.rmtree(directory, ignore_errors=True)
    shutil.copytree(generated.root, directory)
    try:
        (directory / "manifest.json").write_text(json.dumps(manifest))
        try:
            got = check_manifest(directory, installed_source())
        except CacheMismatch as e:
            assert "\n" not in str(e)
            return
        # Accepted: only when what matters for verification is as generated.
        for k in ("fingerprint", "sizes", "index_sha256"):
            assert got[k] == original[k]
    finally:
        shutil.rmtree(directory, ignore_errors=True)


# -- source index and registry ------------------------------------------------------------


@given(where=flips)
def test_a_damaged_source_index_gives_the_answer_or_one_line_then_heals(tmp_path_factory, monkeypatch, where):
    from kernelmap.source import build_index, find, index_path, open_index

    from ..source.test_source_build import small

    root = tmp_path_factory.mktemp("idx")
    monkeypatch.setenv("KERNELMAP_CACHE_DIR", str(root / "cache"))
    tree = small(root / "t")
    build_index(tree, jobs=1)
    with open_index(tree) as ix:
        truth = find(ix, "neg_stub").to_json()
    _flip(index_path(tree), where)
    try:
        with open_index(tree) as ix:
            got = find(ix, "neg_stub").to_json()
    except KernelmapError as e:
        assert "\n" not in str(e)
    else:
        # Damage in a page no query reads, or in a value not shown: the answer may
        # stand only if it is the true one.
        if got != truth:
            report = build_index(tree, jobs=1)
            assert report.full, "a damaged index that answers wrongly must be rebuilt by `index`"
    build_index(tree, jobs=1)
    with open_index(tree) as ix:
        assert find(ix, "neg_stub").to_json() == truth


@given(entries=st.lists(json_values, max_size=5), version=st.sampled_from([1, 2, None, "1"]))
def test_a_registry_of_any_shape_never_crashes_tree_commands(tmp_path_factory, monkeypatch, entries, version):
    from kernelmap.source import list_trees
    from kernelmap.source.trees import RegistryWarning, registry_path

    root = tmp_path_factory.mktemp("reg")
    monkeypatch.setenv("KERNELMAP_CACHE_DIR", str(root))
    registry_path().write_text(json.dumps({"version": version, "trees": entries}))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RegistryWarning)
        trees = list_trees()
    assert all(isinstance(t.name, str) and t.name for t in trees)
