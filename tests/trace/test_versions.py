"""A trace resolved against the registered 2.6.0 tree mixes versions: kernel
sources are the tree's lines, the catalog entries and registrations the
installed wheel's (issue "Traps", point 5). Each location the summary prints
says its version, and holds, in the file of that version, what it is printed
beside; the source files table names the symbol defined on each line (a GPU
kernel's functor, where the line is the functor's). Ground truth is read from
the files: the tree's, and the wheel's own native_functions.yaml."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

TRACE = Path(__file__).resolve().parent / "cuda" / "resnet50_fwd_fp32_bench.json.gz"
YAML = "aten/src/ATen/native/native_functions.yaml"


@pytest.fixture(scope="session")
def indexed_tree(tree_2_6, session_cache):
    from kernelmap.source import add_tree, build_index

    tree = add_tree(tree_2_6, "debian-2.6.0")
    build_index(tree, jobs=min(2, os.cpu_count() or 1))
    return tree


@pytest.fixture(scope="module")
def summary(indexed_tree):
    from kernelmap.trace import load

    return load(TRACE, source_tree=indexed_tree.name).summary()


def _line(indexed_tree, versions, path: str, line: int, version: str) -> str:
    """Line `line` of `path` in the files of `version`: the tree's, or the installed wheel's yaml."""
    if version == versions["tree"]:
        file = indexed_tree.root / path
    else:
        import torchgen

        assert version == versions["installed"] and path == YAML, (path, version)
        file = Path(torchgen.__file__).parent / "packaged" / "ATen" / "native" / "native_functions.yaml"
    return file.read_text(errors="replace").splitlines()[line - 1]


def test_every_operator_location_says_its_version_and_holds_the_operator(summary, indexed_tree):
    from kernelmap import env

    versions = {"tree": indexed_tree.version, "installed": env.torch_install().version}
    text = summary.to_text(top=len(summary.ops), width=400)
    said = set()
    for r in summary.ops:
        if not r.source:
            continue
        path, line = r.source.rsplit(":", 1)
        version = versions["installed" if path == YAML else "tree"]
        row = next(t for t in text.splitlines() if t.startswith(r.name + " "))
        assert f":{line} ({version})" in row, row  # the table says the version on the location
        held = _line(indexed_tree, versions, path, int(line), version)
        if path == YAML:  # the catalog entry of the installed wheel
            assert held.startswith(f"- func: {r.op.split('::', 1)[1]}("), (r.name, r.source, r.source_version, held)
        else:
            short = r.kernel.rsplit("::", 1)[-1]
            assert short.removesuffix("_symint") in held or f"TORCH_IMPL_FUNC({short}" in held, (r.name, r.source, held)
        said.add(version)
    assert said == set(versions.values())  # this answer mixes the two: aten::add_'s entry is the wheel's, the kernels the tree's
    assert summary.versions == versions and summary.to_json()["versions"] == versions


def test_source_files_name_the_symbol_on_each_line(summary, indexed_tree):
    from kernelmap import env

    versions = {"tree": indexed_tree.version, "installed": env.torch_install().version}
    checked = 0
    for r in summary.files:
        for what, line in r.lines.items():
            held = _line(indexed_tree, versions, r.name, line, versions["installed" if r.name == YAML else "tree"])
            if what.startswith("aten::"):
                if r.name == YAML:  # a registration the wheel's dispatcher names, in its yaml
                    assert re.search(rf"\b{re.escape(what.split('::', 1)[1].rstrip('_'))}\w*\b", held), (r.name, what, line, held)
                continue
            # a GPU kernel, or the functor it runs: the named symbol is defined on that line
            name = [part for part in what.split("::") if not part.startswith("{")][-1]
            assert name in held, (r.name, what, line, held)
            checked += 1
    assert checked >= 3
    text = summary.to_text(top=len(summary.files), width=400)
    for r in summary.files:  # each file says the version it is of: the yaml the wheel's, the rest the tree's
        assert r.version == versions["installed" if r.name == YAML else "tree"], (r.name, r.version)
        assert f"{r.name} ({r.version})" in text


def test_the_call_tree_says_the_trees_version_beside_each_kernel_source(indexed_tree):
    """The tree's text lines too: a kernel source is the tree's line, and says
    so where the trace mixes versions; the line holds the kernel it names."""
    from kernelmap.render import render
    from kernelmap.trace import load

    trace = load(TRACE, source_tree=indexed_tree.name)
    text = render(trace.tree, "text", width=400, color=False, full=True)
    sources = [(m.group(1), m.group(2), int(m.group(3))) for m in re.finditer(r": ([\w:]+)  @ (\S+):(\d+) \(\S+\)$", text, re.M)]
    rows = [line for line in text.splitlines() if "@ aten/" in line]
    assert rows and all(line.endswith(f"({indexed_tree.version})") for line in rows), [r for r in rows if not r.endswith(f"({indexed_tree.version})")][:3]
    assert sources
    for kernel, path, line in sources:
        assert kernel.rsplit("::", 1)[-1] in (indexed_tree.root / path).read_text(errors="replace").splitlines()[line - 1], (kernel, path, line)
