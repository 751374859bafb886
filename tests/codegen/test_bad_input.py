"""What kernelmap says when an operator has no piece in some layer, when
torchgen fails, and when the cache holds another version's files."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from kernelmap import env
from kernelmap.codegen import CacheMismatch, Layer, generated_files, locate, open_generated
from kernelmap.codegen.build import cache_root, installed_source
from kernelmap.errors import BadInput, TorchgenError, UnknownName


def _python_binding_comments(generated) -> set[str]:
    """Every operator some generated binding quotes as `// aten::<op>(`, read from the files."""
    found = set()
    for path in generated.paths():
        if Path(path).name.startswith("python_"):
            found |= set(re.findall(r"^\s*// aten::([\w.]+)\(", (generated.root / path).read_text(), re.M))
    return found


def test_internal_operators_have_no_binding_and_say_so(generated, catalog):
    quoted = _python_binding_comments(generated)
    internal = [op for op in catalog if not op.python_entry_points and not op.manual_cpp_binding][:25]
    assert internal
    for op in internal:
        code = locate(str(op.name), layers=["binding", "register"], files=generated)
        assert code.bindings == ()
        assert op.name.unqualified not in quoted  # the files agree: no binding quotes it
        assert any("no generated Python binding" in note for note in code.notes), code.notes


def test_an_operator_with_only_cuda_kernels(generated, catalog):
    cuda_only = [op for op in catalog if {k.key for k in op.dispatch} == {"CUDA"}]
    assert cuda_only
    op = cuda_only[0]
    code = locate(str(op.name), layers=["register"], files=generated)
    keys = {r.key for r in code.registrations}
    assert keys == {"CUDA"}, keys
    reg = code.registration("CUDA")
    assert reg.block.path.startswith("build/aten/src/ATen/RegisterCUDA_")
    assert op.kernel_for("CUDA").symbol in reg.calls
    if env.torch_install().cuda is None:
        assert any("CPU build" in note for note in code.notes), code.notes


def test_unknown_and_malformed_names():
    with pytest.raises(UnknownName) as e:
        locate("aten::conv2dd")
    assert "conv2d" in e.value.suggestions
    with pytest.raises(BadInput):
        locate("not an op!")
    with pytest.raises(ValueError):
        locate("conv2d", layers=["bogus"])


def _fake_tree(root: Path, version: str) -> Path:
    """A tree whose torchgen fails the way an incompatible one does."""
    (root / "torchgen").mkdir(parents=True)
    (root / "torchgen/__init__.py").write_text("raise AssertionError('unrecognized type Dimname')\n")
    (root / "torchgen/gen.py").write_text("")
    (root / "tools/autograd").mkdir(parents=True)
    (root / "tools/__init__.py").write_text("")
    (root / "tools/autograd/__init__.py").write_text("")
    (root / "tools/autograd/gen_autograd.py").write_text("raise AssertionError('unrecognized type Dimname')\n")
    (root / "aten/src/ATen/native").mkdir(parents=True)
    (root / "aten/src/ATen/native/native_functions.yaml").write_text("- func: foo(Dimname x) -> Tensor\n")
    (root / "version.txt").write_text(version + "\n")
    return root


def test_a_failing_torchgen_is_named_with_its_version_and_leaves_no_half_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELMAP_CACHE_DIR", str(tmp_path / "cache"))
    tree = _fake_tree(tmp_path / "pytorch", "9.9.9a0")
    with pytest.raises(TorchgenError) as e:
        generated_files(tree=tree)
    message = str(e.value)
    assert "9.9.9a0" in message and "unrecognized type Dimname" in message
    assert "\n" not in message
    leftovers = [p.name for p in (tmp_path / "cache/codegen").iterdir() if not p.name.endswith(".lock")]
    assert leftovers == []


def test_a_cache_filled_by_another_torch_is_detected_and_replaced(generated, tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELMAP_CACHE_DIR", str(tmp_path / "cache"))
    source = installed_source()
    directory = cache_root() / source.slug
    shutil.copytree(generated.root, directory)
    manifest = json.loads((directory / "manifest.json").read_text())
    manifest["fingerprint"]["version"] = "2.0.0"
    manifest["fingerprint"]["commit"] = "0" * 40
    (directory / "manifest.json").write_text(json.dumps(manifest))

    with pytest.raises(CacheMismatch) as e:
        open_generated()
    assert "2.0.0" in str(e.value) and source.origin.version in str(e.value)

    # generated_files() regenerates; the torchgen run itself is the session's
    # (copied), so this checks the detection and the swap into place.
    import kernelmap.codegen as codegen

    def copy_generated(src, target, report=None):
        tmp = target.with_name(f".{target.name}.tmp-test")
        shutil.copytree(generated.root, tmp)
        from kernelmap.codegen.build import _swap_into_place

        _swap_into_place(tmp, target)
        return json.loads((target / "manifest.json").read_text())

    monkeypatch.setattr(codegen, "generate", copy_generated)
    files = generated_files()
    assert files.manifest["fingerprint"]["version"] == source.origin.version
    assert open_generated().root == directory
    assert [p.name for p in directory.parent.iterdir() if p.name.startswith(f".{source.slug}.")] in ([], [f".{source.slug}.lock"])
    assert locate("conv2d", layers=[Layer.OPS], files=files).ops
