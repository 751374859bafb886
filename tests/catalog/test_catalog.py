"""The operator catalog against the real packaged yaml of the installed torch
and the real 2.6.0 tree: every fact is checked against the files themselves."""

from __future__ import annotations

import re
import sqlite3
import warnings

import pytest
import yaml

from kernelmap import env
from kernelmap.catalog import CatalogWarning, load_catalog
from kernelmap.catalog.functional import functional_builtins
from kernelmap.errors import BadInput, SourceError, UnknownName
from kernelmap.model import OpKind


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


@pytest.fixture(scope="module")
def yaml_lines():
    return env.torch_install().native_yaml.read_text().splitlines()


@pytest.fixture(scope="module")
def yaml_entries():
    """func name (with overload) -> the yaml entry, read with plain PyYAML."""
    entries = yaml.load(env.torch_install().native_yaml.read_text(), Loader=yaml.CSafeLoader)
    return {e["func"].split("(")[0]: e for e in entries}


def test_conv2d_is_composite_implicit_at_its_real_yaml_line(catalog, yaml_lines, yaml_entries):
    op = catalog.get("aten::conv2d")
    assert op.kind is OpKind.COMPOSITE_IMPLICIT
    kernel = op.kernel_for("CompositeImplicitAutograd")
    assert kernel.symbol == "at::native::" + yaml_entries["conv2d"]["dispatch"]["CompositeImplicitAutograd"]
    assert kernel.symbol.endswith("conv2d_symint")
    assert op.location.path == "aten/src/ATen/native/native_functions.yaml"
    assert yaml_lines[op.location.line - 1].startswith("- func: conv2d(")
    assert op.location.disk_path == env.torch_install().native_yaml


def test_every_operator_points_at_its_own_func_line(catalog, yaml_lines):
    declared = 0
    for op in catalog:
        line = yaml_lines[op.location.line - 1]
        if "generated" in op.tags:  # torchgen-made variants point at the entry they come from
            assert line.startswith("- func: ")
            continue
        assert line.startswith(f"- func: {op.name.unqualified}("), (op.name, line)
        declared += 1
    assert declared == sum(1 for line in yaml_lines if line.startswith("- func: "))


def test_add_tensor_is_structured_with_ufunc_delegate(catalog, yaml_entries):
    op = catalog.get("aten::add.Tensor")
    assert op.kind is OpKind.STRUCTURED
    assert op.structured_delegate == yaml_entries["add.Tensor"]["structured_delegate"] == "add.out"
    delegate = catalog.delegate(op)
    assert delegate.kind is OpKind.UFUNC
    assert dict(delegate.ufunc_inner_loop).keys() == yaml_entries["add.out"]["ufunc_inner_loop"].keys()
    for key in ("CPU", "CUDA"):
        kernel = catalog.effective_kernel(op, key)
        assert kernel.structured
        assert kernel.symbol == f"at::native::ufunc_add_{key}"  # torchgen names ufunc kernels ufunc_<loop>_<key>
        assert "ufunc" in yaml_entries["add.out"]["dispatch"].get(key, "ufunc")


def test_convolution_backward_has_its_own_backend_kernels(catalog, yaml_entries):
    # In this yaml the entry reads `CompositeExplicitAutograd, CUDA: convolution_backward`:
    # CUDA has its own entry, CPU runs the CompositeExplicitAutograd kernel.
    op = catalog.get("aten::convolution_backward")
    assert op.kind is OpKind.DISPATCH
    declared = yaml_entries["convolution_backward"]["dispatch"]
    expected = {key.strip(): symbol for keys, symbol in declared.items() for key in keys.split(",")}
    assert {k.key for k in op.dispatch} == set(expected)
    for key, symbol in expected.items():
        assert op.kernel_for(key).symbol == f"at::native::{symbol}"
    for key in ("CPU", "CUDA"):
        fallback = "CompositeExplicitAutograd"
        assert catalog.effective_kernel(op, key).symbol == f"at::native::{expected.get(key, expected[fallback])}"


def test_relu_underscore_is_in_place_and_relu_out_is_out(catalog):
    assert catalog.get("relu_").is_inplace
    assert not catalog.get("relu").is_inplace
    assert catalog.get("relu.out").is_out


def test_views_are_flagged(catalog, yaml_entries):
    for name in ("view", "transpose.int", "select.int"):
        assert catalog.get(name).is_view, name
    assert not catalog.get("add.Tensor").is_view


def test_autograd_entry_and_backward_node(catalog):
    derivatives = env.torch_install().derivatives_yaml.read_text().splitlines()
    op = catalog.get("aten::convolution")
    assert op.autograd.backward_node == "ConvolutionBackward0"
    assert derivatives[op.autograd.location.line - 1].startswith("- name: convolution(")
    inputs = [f.inputs for f in op.autograd.formulas]
    assert ("input", "weight", "bias") in inputs
    # in-place ops reuse their functional formula (derivatives.yaml has no add_ entry)
    inplace = catalog.get("add_.Tensor")
    assert inplace.autograd.signature == "add.Tensor"
    assert derivatives[inplace.autograd.location.line - 1].startswith("- name: add.Tensor(")


def test_python_entry_points(catalog):
    functional = functional_builtins(env.torch_install().torch_dir / "nn/functional.py")
    assert ("torch.conv2d", functional["conv2d"][0][1]) == functional["conv2d"][0]
    conv2d = catalog.get("conv2d")
    assert {"torch.conv2d", "torch.nn.functional.conv2d"} <= set(conv2d.python_entry_points)
    assert {"torch.add", "torch.Tensor.add"} <= set(catalog.get("add.Tensor").python_entry_points)
    assert "torch._C._nn.gelu" in catalog.get("gelu").python_entry_points
    assert "torch.linalg.norm" in catalog.get("linalg_norm").python_entry_points


@pytest.mark.parametrize(
    "name, expected",
    [
        ("conv2d", "aten::conv2d"),
        ("aten::conv2d", "aten::conv2d"),
        ("aten::add.Tensor", "aten::add.Tensor"),
        ("torch.add", "aten::add.Tensor"),
        ("torch.Tensor.add_", "aten::add_.Tensor"),
        ("torch.nn.functional.conv2d", "aten::conv2d"),
        ("F.relu", "aten::relu"),
        ("Tensor.relu_", "aten::relu_"),
        ("torch.linalg.norm", "aten::linalg_norm"),
    ],
)
def test_resolve_accepts_every_spelling(catalog, name, expected):
    assert str(catalog.resolve(name)[0].name) == expected


def test_f_relu_reaches_both_relu_and_relu_(catalog):
    names = {str(op.name) for op in catalog.resolve("F.relu")}
    assert {"aten::relu", "aten::relu_"} <= names


def test_unknown_names_get_suggestions(catalog):
    with pytest.raises(UnknownName) as e:
        catalog.resolve("conv2")
    assert "conv2d" in e.value.suggestions and "conv1d" in e.value.suggestions
    with pytest.raises(UnknownName) as e:
        catalog.resolve("torch.nn.functional.conv22d")
    assert "torch.nn.functional.conv2d" in e.value.suggestions


@pytest.mark.parametrize("name", ["", "   ", "conv 2d", "conv2d; rm -rf /", "$(reboot)", "a|b", "torch..add", "aten::"])
def test_malformed_names_are_refused(catalog, name):
    with pytest.raises(BadInput):
        catalog.resolve(name)


def test_warm_lookup_reads_the_cache_without_torchgen(session_cache):
    load_catalog()  # built by now
    files = list((session_cache / "catalog").glob("*.sqlite"))
    assert files
    db = sqlite3.connect(files[0])
    assert db.execute("SELECT value FROM meta WHERE key='complete'").fetchone() == ("1",)


def test_corrupted_cache_is_rebuilt_with_a_warning(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELMAP_CACHE_DIR", str(tmp_path))
    load_catalog()
    (path,) = (tmp_path / "catalog").glob("*.sqlite")
    data = path.read_bytes()
    path.write_bytes(b"this is not a database" + data[100:2000])  # corrupted and truncated
    with pytest.warns(CatalogWarning, match="rebuilding"):
        catalog = load_catalog()
    assert catalog.get("conv2d").kind is OpKind.COMPOSITE_IMPLICIT
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert load_catalog().get("conv2d")  # rebuilt for good: no second warning


def test_truncated_cache_is_rebuilt(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELMAP_CACHE_DIR", str(tmp_path))
    load_catalog()
    (path,) = (tmp_path / "catalog").glob("*.sqlite")
    path.write_bytes(path.read_bytes()[:4096])
    with pytest.warns(CatalogWarning):
        assert len(load_catalog()) > 0


def test_a_full_disk_works_uncached_and_leaves_nothing(tmp_path, monkeypatch):
    """The database cannot be written to the end (SQLite's "database or disk is
    full"): the answer comes from memory, with one warning, and no temporary
    file or journal stays in the cache."""
    from kernelmap.catalog import store

    monkeypatch.setenv("KERNELMAP_CACHE_DIR", str(tmp_path))
    real = store._write

    def full(db, files, extracted):
        if db.execute("PRAGMA database_list").fetchone()[2]:  # a file, not :memory:
            real(db, files, extracted)
            raise sqlite3.OperationalError("database or disk is full")
        real(db, files, extracted)

    monkeypatch.setattr(store, "_write", full)
    with pytest.warns(CatalogWarning, match="cannot hold the catalog"):
        catalog = load_catalog()
    assert catalog.get("aten::conv2d").kind is OpKind.COMPOSITE_IMPLICIT
    assert list((tmp_path / "catalog").iterdir()) == []


def test_read_only_cache_directory_works_uncached(tmp_path, monkeypatch):
    cache = tmp_path / "ro"
    cache.mkdir()
    cache.chmod(0o500)
    monkeypatch.setenv("KERNELMAP_CACHE_DIR", str(cache))
    try:
        if env.is_writable_dir(cache):  # root ignores permissions; make the directory a file instead
            cache.chmod(0o700)
            cache.rmdir()
            cache.write_text("")
        with pytest.warns(CatalogWarning, match="not writable"):
            catalog = load_catalog()
        assert catalog.get("aten::conv2d").kind is OpKind.COMPOSITE_IMPLICIT
    finally:
        if cache.is_dir():
            cache.chmod(0o700)


def test_links_pin_the_installed_commit(catalog):
    install = env.torch_install()
    op = catalog.get("conv2d")
    assert op.location.url == (
        f"https://github.com/pytorch/pytorch/blob/{install.commit}/"
        f"aten/src/ATen/native/native_functions.yaml#L{op.location.line}"
    )


# -- a source tree's own yaml, read with its own torchgen -----------------------


@pytest.fixture(scope="module")
def tree_catalog(tree_2_6):
    return load_catalog(tree=tree_2_6)


def test_tree_catalog_uses_the_trees_yaml_and_torchgen(tree_2_6, tree_catalog):
    lines = (tree_2_6 / "aten/src/ATen/native/native_functions.yaml").read_text().splitlines()
    op = tree_catalog.get("conv2d")
    assert lines[op.location.line - 1].startswith("- func: conv2d(")
    assert tree_catalog.origin.version == (tree_2_6 / "version.txt").read_text().strip()
    assert op.location.disk_path == tree_2_6 / "aten/src/ATen/native/native_functions.yaml"
    declared = sum(1 for line in lines if line.startswith("- func: "))
    assert sum(1 for op in tree_catalog if "generated" not in op.tags) == declared


def test_tree_and_wheel_differ_where_their_yaml_differs(tree_catalog, catalog):
    tree_names, wheel_names = tree_catalog.qualified_names(), catalog.qualified_names()
    tree_yaml = tree_catalog.origin.disk_path("aten/src/ATen/native/native_functions.yaml").read_text()
    for name in sorted(wheel_names - tree_names)[:20]:
        assert not re.search(rf"^- func: {re.escape(name)}\(", tree_yaml, re.M)


def test_not_a_tree_is_refused(tmp_path):
    with pytest.raises(SourceError, match="not a PyTorch source tree"):
        load_catalog(tree=tmp_path)


def _check_kernels_at_their_dispatch_lines(catalog, yaml_path) -> int:
    """Each kernel the yaml names under `dispatch:` points at the line that
    names it; one it does not name (a default composite kernel) at the
    `- func:` line. Ground truth: the entries read with plain PyYAML, the
    lines read from the file. Returns how many kernels were checked at their
    dispatch lines."""
    text = yaml_path.read_text()
    lines = text.splitlines()
    written = {}  # (func name, key) -> kernel, as the yaml writes it
    for entry in yaml.load(text, Loader=yaml.CSafeLoader):
        for keys, kernel in (entry.get("dispatch") or {}).items():
            for key in keys.split(","):
                written[(entry["func"].split("(")[0], key.strip())] = kernel.rsplit("::", 1)[-1]
    at_dispatch = ufunc = 0
    for op in catalog:
        if "generated" in op.tags:
            continue
        for kernel in op.dispatch:
            line = lines[(kernel.location or op.location).line - 1]
            named = written.get((str(op.name).removeprefix("aten::"), kernel.key))
            if named is not None and kernel.symbol.rsplit("::", 1)[-1] == named:
                keys, _, value = line.partition(":")
                assert kernel.key in {k.strip() for k in keys.split(",")}, (op.name, kernel, line)
                assert value.split("#")[0].strip().rsplit("::", 1)[-1] == named, (op.name, kernel, line)
                at_dispatch += 1
            elif op.ufunc_inner_loop and kernel.key in ("CPU", "CUDA"):  # torchgen writes a ufunc's kernels: ufunc_<loop>_<key>
                loop = re.match(r"\s+\w+:\s*(\w+)\s*\(", line)
                assert loop and kernel.symbol.rsplit("::", 1)[-1] == f"ufunc_{loop.group(1)}_{kernel.key}", (op.name, kernel, line)
                assert lines[kernel.location.line - 2].strip() == "ufunc_inner_loop:" or re.match(r"\s+\w+:\s*\w+\s*\(", lines[kernel.location.line - 2])
                ufunc += 1
            else:  # a default composite kernel: its `- func:` line, of its own operator
                assert kernel.location == op.location, (op.name, kernel)
    for op in catalog:  # torchgen's own kernels of the operators it generates are named in no yaml line
        if "generated" in op.tags:
            assert all(k.location is None for k in op.dispatch if (str(op.name).removeprefix("aten::"), k.key) not in written), op.name
    assert ufunc > 0
    return at_dispatch


def test_each_yaml_kernel_points_at_the_line_naming_it(catalog):
    checked = _check_kernels_at_their_dispatch_lines(catalog, env.torch_install().native_yaml)
    assert checked > 2000, checked
    op = catalog.get("aten::native_batch_norm")
    cuda = op.kernel_for("CUDA")
    assert cuda.location.line > op.location.line
    assert env.torch_install().native_yaml.read_text().splitlines()[cuda.location.line - 1].split() == ["CUDA:", "batch_norm_cuda"]


def test_each_tree_yaml_kernel_points_at_the_line_naming_it(tree_2_6, tree_catalog):
    checked = _check_kernels_at_their_dispatch_lines(tree_catalog, tree_2_6 / "aten/src/ATen/native/native_functions.yaml")
    assert checked > 2000, checked
