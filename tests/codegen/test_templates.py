"""Generated locations name the file in the cache (absolute, shown by `gen`
and in JSON) and the torchgen template that writes it, pinned to the
generating version's commit: every generated file's template exists among
the templates that version ships (the wheel's torchgen/packaged, or the
tree's own aten/src/ATen/templates and tools/autograd/templates)."""

from __future__ import annotations

import json
import os

from kernelmap import env
from kernelmap.model import Location, generated_template
from tests.conftest import run_kernelmap


def _generated_paths(files) -> list[str]:
    return [p.relative_to(files.root).as_posix() for p in files.root.rglob("*") if p.suffix in (".cpp", ".cu", ".h") and p.is_file()]


def test_every_file_the_installed_torchgen_writes_has_its_packaged_template(generated):
    packaged = env.torch_install().torchgen_dir / "packaged"
    remap = {"aten/src/ATen/templates/": packaged / "ATen/templates", "tools/autograd/templates/": packaged / "autograd/templates"}
    paths = _generated_paths(generated)
    assert len(paths) > 50
    for path in paths:
        template = generated_template(path)
        assert template is not None, path
        prefix = next(p for p in remap if template.startswith(p))
        assert (remap[prefix] / template[len(prefix) :]).is_file(), (path, template)


def test_every_file_a_trees_torchgen_writes_has_its_template_in_the_tree(tree_2_6, session_cache):
    from kernelmap.codegen import generated_files

    files = generated_files(tree=tree_2_6)
    paths = _generated_paths(files)
    assert len(paths) > 50
    for path in paths:
        template = generated_template(path)
        assert template is not None and (tree_2_6 / template).is_file(), (path, template)


def test_generated_locations_carry_the_cache_file_and_a_pinned_template_link(generated, wheel_only_cache):  # the wheel answers
    out = run_kernelmap("gen", "aten::add.Tensor", "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    found = []
    stack = [doc]
    while stack:  # every location object in the document
        item = stack.pop()
        if isinstance(item, dict):
            if {"path", "line", "file"} <= item.keys():
                found.append(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    assert found
    commit = generated.origin.commit
    for loc in found:
        assert os.path.realpath(loc["file"]).startswith(str(generated.root.resolve())) and loc["file"].endswith(loc["path"])
        lines = open(loc["file"]).read().splitlines()
        assert loc["text"].splitlines()[0] == lines[loc["line"] - 1] if "text" in loc else len(lines) >= loc["line"]
        assert loc["template"] == generated_template(loc["path"])
        assert loc["template_url"] == f"https://github.com/pytorch/pytorch/blob/{commit}/{loc['template']}"
    text = run_kernelmap("gen", "aten::add.Tensor", "--layer", "ops")
    assert f"files in {wheel_only_cache / 'codegen' / generated.root.name}" in text.stdout


def test_source_locations_have_no_template():
    assert "template" not in Location("aten/src/ATen/native/BinaryOps.cpp", 10).to_json()


def test_every_header_a_trees_torchgen_writes_has_its_template_in_the_tree(tree_2_6, session_cache):
    from kernelmap.codegen.headers import ATEN, generated_headers

    headers = generated_headers(tree_2_6)
    rels = [p.relative_to(headers.aten_dir).as_posix() for p in headers.aten_dir.rglob("*.h")]
    assert len(rels) > 5000
    missing = [rel for rel in rels if not (tree_2_6 / (generated_template(ATEN + rel) or "none")).is_file()]
    # the one header torchgen writes from code, not from a template
    assert missing == ["VmapGeneratedPlumbing.h"] and generated_template(ATEN + missing[0]) is None
