"""A damaged codegen cache (an empty or garbled index, a manifest of the wrong
shape, a truncated or missing generated file) is detected on open and
regenerated with one warning line; it never gives a traceback or empty code."""

from __future__ import annotations

import json
import shutil
import warnings

import pytest

import kernelmap.codegen as codegen
from kernelmap.codegen import CacheDamaged, CacheWarning, Layer, generated_files, locate, open_generated
from kernelmap.codegen.build import _swap_into_place, cache_root, installed_source


def _garble(path):
    data = bytearray(path.read_bytes())
    for i in range(len(data) // 2, len(data), 1013):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))


def _truncate_a_register_file(directory):
    path = next(p for p in sorted((directory / "build/aten/src/ATen").glob("RegisterCPU_*.cpp")))
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 3])


DAMAGES = {
    "empty index": lambda d: (d / "index.sqlite").write_bytes(b""),
    "garbled index": lambda d: _garble(d / "index.sqlite"),
    "manifest a list": lambda d: (d / "manifest.json").write_text("[1, 2]"),
    "manifest fingerprint a string": lambda d: (d / "manifest.json").write_text(json.dumps({"fingerprint": "x"})),
    "manifest without sizes": lambda d: (d / "manifest.json").write_text(
        json.dumps({k: v for k, v in json.loads((d / "manifest.json").read_text()).items() if k != "sizes"})),
    "manifest counting no files": lambda d: (d / "manifest.json").write_text(
        json.dumps({**json.loads((d / "manifest.json").read_text()), "files": 0})),
    "truncated generated file": _truncate_a_register_file,
    "missing generated file": lambda d: next((d / "torch/csrc/autograd/generated").glob("python_torch_functions_*.cpp")).unlink(),
}


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_a_damaged_cache_is_detected_and_regenerated_with_one_warning(generated, tmp_path, monkeypatch, damage):
    monkeypatch.setenv("KERNELMAP_CACHE_DIR", str(tmp_path / "cache"))
    directory = cache_root() / installed_source().slug
    shutil.copytree(generated.root, directory)
    assert open_generated().root == directory  # the intact copy verifies
    DAMAGES[damage](directory)
    with pytest.raises(CacheDamaged):
        open_generated()

    regenerated = []

    def copy_generated(src, target, report=None):  # the torchgen run is the session's (copied)
        regenerated.append(target)
        tmp = target.with_name(f".{target.name}.tmp-test")
        shutil.copytree(generated.root, tmp)
        _swap_into_place(tmp, target)
        return json.loads((target / "manifest.json").read_text())

    monkeypatch.setattr(codegen, "generate", copy_generated)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        files = generated_files()
    assert regenerated == [directory]
    messages = [str(w.message) for w in caught if issubclass(w.category, CacheWarning)]
    assert len(messages) == 1 and messages[0].startswith("regenerating:") and "\n" not in messages[0]
    code = locate("add.Tensor", layers=[Layer.REGISTER], files=files)
    cpu = [r for r in code.registrations if r.key == "CPU"]
    assert cpu and all(r.impl.text.strip() and r.definition.text.strip() for r in cpu)


def test_a_generation_that_writes_no_sources_is_an_error_and_leaves_no_cache(tmp_path, monkeypatch):
    from kernelmap.codegen import build
    from kernelmap.errors import TorchgenError

    monkeypatch.setenv("KERNELMAP_CACHE_DIR", str(tmp_path / "cache"))
    source = installed_source()
    directory = cache_root() / source.slug
    monkeypatch.setattr(build, "_run_steps", lambda source, out, report: None)  # torchgen wrote nothing
    with pytest.raises(TorchgenError, match="wrote no C"):
        build.generate(source, directory)
    assert not directory.exists() and not list(directory.parent.iterdir())


def test_a_truncated_generated_header_is_regenerated_with_one_warning(generated, tmp_path, monkeypatch):
    """A header of the regenerated-headers cache truncated after the build: the
    read that meets it finds it by its recorded size, and the headers are
    generated again with one warning, not answered without their layer."""
    from kernelmap.catalog import load_catalog
    from kernelmap.codegen import headers as headers_module
    from kernelmap.codegen.headers import HeadersDamaged, generated_headers, regenerate_headers

    intact = cache_root() / f"{installed_source().slug}-headers"
    generated_headers()  # the session's cache holds them (generated once)
    monkeypatch.setenv("KERNELMAP_CACHE_DIR", str(tmp_path / "cache"))
    directory = cache_root() / f"{installed_source().slug}-headers"
    shutil.copytree(intact, directory)
    body = directory / "build/aten/src/ATen/core/TensorBody.h"
    body.write_bytes(body.read_bytes()[:100])
    relu = load_catalog().get("aten::relu")
    damaged = generated_headers()
    with pytest.raises(HeadersDamaged) as found:
        damaged.function(relu, "at::Tensor::relu")

    def copy_generated(source, target, progress=None):  # the torchgen run is the session's (copied)
        tmp = target.with_name(f".{target.name}.tmp-test")
        shutil.copytree(intact, tmp)
        headers_module._swap_into_place(tmp, target)

    monkeypatch.setattr(headers_module, "_generate", copy_generated)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fresh = regenerate_headers(None, found.value)
    assert [str(w.message).split(":")[0] for w in caught if issubclass(w.category, CacheWarning)] == ["regenerating"]
    function = fresh.function(relu, "at::Tensor::relu")
    assert function is not None and "relu(" in body.read_text().splitlines()[function.location.line - 1]
