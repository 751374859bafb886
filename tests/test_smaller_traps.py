"""The smaller traps: an unknown name given to `path` is a mistake (exit 2),
not a missing route (exit 1); a tree without torch/nn/functional.py still
answers; a killed catalog build leaves nothing behind; `gen --json` writes
its layers in one order; `kernel --extension /` is bounded; a newline in a
file or kernel name never reaches the terminal raw."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import run_kernelmap


def one_line_error(done, *words):
    lines = done.stderr.strip().splitlines()
    return (done.returncode == 2 and len(lines) == 1 and lines[0].startswith("kernelmap: error:") and "Traceback" not in done.stderr
            and all(w in lines[0] for w in words))


# -- exits ------------------------------------------------------------------------------------


@pytest.mark.parametrize("target", ["torch.zzz", "torch.nn.functional.zzz", "torch.Tensor.zzz"])
def test_path_to_an_unknown_python_name_is_exit_2(target):
    done = run_kernelmap("path", "torch.add", target)
    assert one_line_error(done, f"unknown name {target!r}"), done.stderr


def test_path_to_a_known_name_it_does_not_reach_is_exit_1():
    done = run_kernelmap("path", "torch.add", "torch.nn.functional.conv2d")
    assert done.returncode == 1 and "no route" in done.stdout, done.stderr


def linked_tree_without(root: Path, into: Path, missing: str) -> Path:
    """`into` as the tree at `root` (each entry a link) without the file `missing`."""
    into.mkdir()
    here, there = root, into
    parts = Path(missing).parts
    for i, part in enumerate(parts):
        for entry in here.iterdir():
            if entry.name != part:
                (there / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())
        if i < len(parts) - 1:
            (there / part).mkdir()
            here, there = here / part, there / part
    return into


def test_a_tree_without_functional_py_answers(tmp_path, tree_2_6):
    tree = linked_tree_without(tree_2_6.resolve(), tmp_path / "tree", "torch/nn/functional.py")
    assert not (tree / "torch/nn/functional.py").exists() and (tree / "torch/nn/modules").is_dir()
    done = run_kernelmap("where", "aten::relu", "--static", "--source", str(tree))
    assert done.returncode == 0, done.stderr
    assert "aten::relu" in done.stdout and "No such file" not in done.stdout + done.stderr


# -- a killed catalog build ------------------------------------------------------------------


def test_a_killed_catalog_build_leaves_nothing_behind(tmp_path):
    from kernelmap.catalog.store import clean_stale_builds

    catalog = tmp_path / "catalog"
    catalog.mkdir()
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    dead, alive = child.pid, os.getpid()
    left = [catalog / f".0123abcd-{dead}-x1y2z3.tmp", catalog / f".0123abcd-{dead}-x1y2z3.tmp-journal"]
    running = catalog / f".0123abcd-{alive}-a1b2c3.tmp"
    kept = catalog / "0123abcd.sqlite"
    for path in (*left, running, kept):
        path.write_text("")
    assert sorted(clean_stale_builds(catalog)) == sorted(left)
    assert sorted(p.name for p in catalog.iterdir()) == sorted([running.name, kept.name])


def test_the_catalog_s_temporary_file_names_its_process(tmp_path, monkeypatch):
    """A build writes `.<key>-<pid>-*.tmp`, which `clean_stale_builds` recognises."""
    import tempfile

    from kernelmap.catalog import store

    made = []
    real = tempfile.mkstemp

    def spy(*args, **kwargs):
        fd, name = real(*args, **kwargs)
        made.append(name)
        return fd, name

    monkeypatch.setattr(tempfile, "mkstemp", spy)  # imported where it is used
    monkeypatch.setenv("KERNELMAP_CACHE_DIR", str(tmp_path))
    files = store.CatalogFiles(*(Path(p) for p in _wheel_inputs()), torchgen_root=None)
    store.open_catalog_db(files, tmp_path).close()
    assert made and all(store._BUILDING.fullmatch(Path(m).name) and f"-{os.getpid()}-" in m for m in made)
    assert not list((tmp_path / "catalog").glob(".*.tmp*"))


def _wheel_inputs():
    from kernelmap import env

    install = env.torch_install()
    return install.native_yaml, install.tags_yaml, install.derivatives_yaml, install.torch_dir / "nn/functional.py"


# -- one order -----------------------------------------------------------------------------


def test_gen_json_writes_its_layers_in_one_order():
    seen = set()
    for seed in ("1", "2", "3"):
        done = subprocess.run([sys.executable, "-m", "kernelmap", "gen", "aten::relu", "--json"], capture_output=True, text=True,
                              env={**os.environ, "PYTHONHASHSEED": seed})
        assert done.returncode == 0, done.stderr
        seen.add(tuple(json.loads(done.stdout)["layers"]))
    assert seen == {("binding", "ops", "autograd", "register", "ufunc")}


# -- bounded ------------------------------------------------------------------------------


def test_kernel_extension_of_the_root_folder_is_bounded():
    from kernelmap.kernels.resolve import EXTENSION_FOLDERS, extension_search

    table, cut = extension_search(Path("/"))
    assert cut == f"the search stopped after {EXTENSION_FOLDERS} folders under /"
    done = run_kernelmap("kernel", "void kernelmap_ext::nowhere_kernel<float>(float*)", "--extension", "/")
    assert done.returncode == 0 and f"stopped after {EXTENSION_FOLDERS} folders" in done.stderr, done.stderr


def test_an_extension_s_fifo_is_skipped_not_waited_on(tmp_path):
    from kernelmap.kernels.resolve import extension_search

    (tmp_path / "csrc").mkdir()
    (tmp_path / "csrc" / "k.cu").write_text("__global__ void my_kernel(float* x) {}\n")
    os.mkfifo(tmp_path / "csrc" / "pipe.cu")
    table, cut = extension_search(tmp_path)
    assert table == {"my_kernel": ("csrc/k.cu", 1)} and cut is None


# -- control characters in every text renderer ---------------------------------------------


def test_a_newline_in_a_name_never_breaks_a_line(tmp_path, where_doc_with_newlines):
    for doc in where_doc_with_newlines:
        done = run_kernelmap("render", str(doc))
        assert done.returncode == 0, done.stderr
        assert "evil\\x0aline" in done.stdout and "\nline" not in done.stdout and "\x1b" not in done.stdout


@pytest.fixture
def where_doc_with_newlines(tmp_path):
    """Saved answers of several kinds whose names and paths hold a newline and an escape."""
    out = []
    where = json.loads(run_kernelmap("where", "aten::relu", "--static", "--json").stdout)
    where["operator"]["location"]["path"] = "aten/evil\nline\x1b[2J.yaml"
    where["operator"]["python_entry_points"] = ["torch.evil\nline"]
    tree = {"kernelmap": "calltree/2", "kind": "stack", "notes": ["evil\nline"], "meta": {}, "origins": {},
            "root": {"name": "evil\nline\x1b[31m", "kind": "kernel", "facts": {}, "children": [
                {"name": "child", "kind": "kernel", "location": {"path": "aten/evil\nline.cpp", "line": 3}, "facts": {}, "children": []}]}}
    path = {"kernelmap": "path/1", "source": "torch.add", "target": "evil\nline", "device": "cpu", "notes": [], "searched": {}, "origins": {},
            "routes": [{"conditions": [], "steps": [{"name": "evil\nline", "kind": "kernel", "location": {"path": "a/evil\nline.cpp", "line": 2},
                                                      "via": None, "condition": "if (evil\nline)", "facts": {}}]}]}
    kernel = {"kernelmap": "kernel/1", "name": "evil\nline", "demangled": "evil\nline", "symbol": "evil\nline", "truncated": False,
              "library": "cuDNN", "closed": True, "repository": None, "kernel": None, "functor": None, "launches": [], "tree": None}
    for i, doc in enumerate((where, tree, path, kernel)):
        p = tmp_path / f"doc{i}.json"
        p.write_text(json.dumps(doc))
        out.append(p)
    return out
