"""`kernelmap scaffold`: the files it writes, without torch, and its refusals
(one line on stderr, exit status 2)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys

import pytest

from kernelmap.extend.project import MANIFEST


def test_scaffold_writes_a_project_and_never_imports_torch(tmp_path):
    out = tmp_path / "myadd"
    code = (
        "import sys\n"
        "from kernelmap.extend import scaffold\n"
        f"scaffold('aten::add.Tensor', 'myadd', out={str(out)!r}, extra=['float beta=1.0'], cuda=True)\n"
        "print('torch' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
    for rel in ("csrc/myadd.cpp", "csrc/myadd_kernel.cu", "csrc/myadd_cuda.cpp", "myadd/__init__.py", "myadd/_build.py",
                "myadd/cases.py", "setup.py", "tests/test_myadd.py", "bench_myadd.py", "README.md", MANIFEST):
        assert (out / rel).is_file(), rel
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest["custom_op"] == "kernelmap_ext::myadd"
    assert manifest["schema"] == "myadd(Tensor self, Tensor other, *, Scalar alpha=1, float beta=1.0) -> Tensor"
    cpp = (out / "csrc/myadd.cpp").read_text()
    assert f'm.def("{manifest["schema"]}");' in cpp
    assert "TORCH_LIBRARY_IMPL(kernelmap_ext, CPU, m)" in cpp
    cu = (out / "csrc/myadd_kernel.cu").read_text()
    assert "#include <torch" not in cu and "#include <ATen" not in cu and "#include <c10" not in cu
    init = (out / "myadd/__init__.py").read_text()
    assert "torch.library.register_fake(OP)" in init and "torch.library.register_autograd(OP" in init
    assert "BuildExtension" in (out / "setup.py").read_text()
    assert "cpp_extension.load(" in (out / "myadd/_build.py").read_text()


def test_without_cuda_no_cuda_files(tmp_path):
    from kernelmap.extend import scaffold

    result = scaffold("aten::relu", "plainrelu", out=tmp_path / "p")
    assert not any(str(f).endswith((".cu", "_cuda.cpp")) for f in result.files)
    assert result.family == "pointwise"


def test_families(tmp_path):
    from kernelmap.extend import scaffold

    assert scaffold("aten::convolution", "c", out=tmp_path / "c").family == "convolution"
    assert scaffold("aten::sum.dim_IntList", "r", out=tmp_path / "r").family == "reduction"
    assert scaffold("aten::prod.dim_int", "q", out=tmp_path / "q").family == "reduction"
    # var has a `correction` argument no reference loop reads: ATen does it
    assert scaffold("aten::var.correction", "v", out=tmp_path / "v").family == "aten"
    assert scaffold("aten::native_batch_norm", "b", out=tmp_path / "b").family == "batch_norm"
    assert scaffold("aten::erfinv", "e", out=tmp_path / "e").family == "aten"
    # add.Scalar's `other` is a Scalar: no pointwise formula over two tensors fits it
    assert scaffold("aten::add.Scalar", "s", out=tmp_path / "s").family == "aten"


def test_the_command_prints_the_schema_and_files(kernelmap_cli, tmp_path):
    done = kernelmap_cli("scaffold", "aten::relu", "--name", "myrelu", "--out", str(tmp_path / "r"))
    assert done.returncode == 0, done.stderr
    assert "kernelmap_ext::myrelu: myrelu(Tensor self) -> Tensor" in done.stdout
    assert "csrc/myrelu.cpp" in done.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["aten::not_an_op", "--name", "x"], "unknown name 'aten::not_an_op'"),
        (["torch.nn.Conv2d", "--name", "x"], "not an operator"),
        (["torch.nn.functional.relu", "--name", "x"], "not an operator with a schema; it reaches aten::relu"),
        (["aten::relu", "--name", "my-relu"], "NAME must be an identifier"),
        (["aten::relu", "--name", "numpy"], "the name of an installed module"),
        (["aten::relu", "--name", "r", "--extra", "float beta"], "needs a default"),
        (["aten::add_.Tensor", "--name", "r"], "in-place"),
    ],
)
def test_bad_input_is_one_line_and_status_2(kernelmap_cli, tmp_path, args, message):
    done = kernelmap_cli("scaffold", *args, "--out", str(tmp_path / "out"))
    assert done.returncode == 2, done.stderr
    assert message in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not (tmp_path / "out").exists()


def test_an_existing_folder_is_refused_unless_forced(kernelmap_cli, tmp_path):
    out = tmp_path / "myrelu"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    done = kernelmap_cli("scaffold", "aten::relu", "--name", "myrelu", "--out", str(out))
    assert done.returncode == 2
    assert "exists" in done.stderr and "--force" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert not (out / "csrc").exists()
    done = kernelmap_cli("scaffold", "aten::relu", "--name", "myrelu", "--out", str(out), "--force")
    assert done.returncode == 0, done.stderr
    assert (out / "csrc" / "myrelu.cpp").is_file()
    assert (out / "notes.txt").read_text() == "mine"  # --force rewrites the scaffold's files, nothing else


def test_the_readmes_force_example_runs_in_the_folder_it_wrote_into(tmp_path):
    """`python -m kernelmap` puts the current folder on the path, where the
    first scaffold's ./myrelu is a package: no installed module."""
    from tests.conftest import run_kernelmap

    first = run_kernelmap("scaffold", "aten::relu", "--name", "myrelu", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    again = run_kernelmap("scaffold", "aten::relu", "--name", "myrelu", "--namespace", "mylib", "--force", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert "mylib::myrelu" in again.stdout
    assert "TORCH_LIBRARY_IMPL(mylib, CPU, m)" in (tmp_path / "myrelu" / "csrc" / "myrelu.cpp").read_text()


def test_force_keeps_the_users_files_and_replaces_only_its_own(kernelmap_cli, tmp_path):
    out = tmp_path / "myrelu"
    first = kernelmap_cli("scaffold", "aten::relu", "--name", "myrelu", "--out", str(out))
    assert first.returncode == 0, first.stderr
    (out / "tests" / "test_important.py").write_text("def test_mine():\n    pass\n")
    (out / "build").mkdir()
    (out / "build" / "notes.txt").write_text("mine")
    (out / "README.md").write_text("stale")
    (out / "README.md").unlink()  # a file of the scaffold the user removed is written again
    again = kernelmap_cli("scaffold", "aten::relu", "--name", "myrelu", "--out", str(out), "--force")
    assert again.returncode == 0, again.stderr
    assert (out / "tests" / "test_important.py").read_text() == "def test_mine():\n    pass\n"
    assert (out / "build" / "notes.txt").read_text() == "mine"
    assert "TORCH_LIBRARY" in (out / "csrc" / "myrelu.cpp").read_text() and (out / "README.md").is_file()
    # a scaffold under another name removes the previous scaffold's files, and only those
    renamed = kernelmap_cli("scaffold", "aten::relu", "--name", "myrelu2", "--out", str(out), "--force")
    assert renamed.returncode == 0, renamed.stderr
    assert not (out / "csrc" / "myrelu.cpp").exists() and (out / "csrc" / "myrelu2.cpp").is_file()
    assert (out / "tests" / "test_important.py").is_file()
    manifest = json.loads((out / MANIFEST).read_text())
    assert sorted(manifest["files"]) == sorted(str(p.relative_to(out)) for p in out.rglob("*")
                                               if p.is_file() and p.parts[len(out.parts)] not in ("build",)
                                               and p.name != "test_important.py")
    assert not list(out.rglob("*.kernelmap-tmp"))


def test_force_refuses_a_file_it_did_not_write(kernelmap_cli, tmp_path):
    out = tmp_path / "p"
    (out / "tests").mkdir(parents=True)
    (out / "tests" / "conftest.py").write_text("# the user's conftest\n")
    done = kernelmap_cli("scaffold", "aten::relu", "--name", "myrelu", "--out", str(out), "--force")
    assert done.returncode == 2
    assert "not a file of a previous scaffold" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert (out / "tests" / "conftest.py").read_text() == "# the user's conftest\n"
    assert sorted(p.name for p in out.rglob("*")) == ["conftest.py", "tests"]  # nothing half-written


@pytest.mark.parametrize("link", ["tests", "tests/conftest.py"])
def test_force_refuses_symlinks(kernelmap_cli, tmp_path, link):
    out = tmp_path / "p"
    assert kernelmap_cli("scaffold", "aten::relu", "--name", "myrelu", "--out", str(out)).returncode == 0
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "conftest.py").write_text("outside\n")
    target = out / link
    if target.is_dir():
        import shutil

        shutil.rmtree(target)
        target.symlink_to(outside, target_is_directory=True)
    else:
        target.unlink()
        target.symlink_to(outside / "conftest.py")
    done = kernelmap_cli("scaffold", "aten::relu", "--name", "myrelu", "--out", str(out), "--force")
    assert done.returncode == 2, done.stderr
    assert "symbolic link" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert sorted(p.name for p in outside.iterdir()) == ["conftest.py"]
    assert (outside / "conftest.py").read_text() == "outside\n"


def _contents(root):
    return {str(p.relative_to(root)): (p.is_symlink(), p.read_text() if p.is_file() and not p.is_symlink() else None)
            for p in sorted(root.rglob("*"))}


def test_force_never_writes_through_a_link_left_at_the_aside_name(kernelmap_cli, tmp_path):
    out = tmp_path / "p"
    assert kernelmap_cli("scaffold", "aten::relu", "--name", "myrelu", "--out", str(out)).returncode == 0
    victim = tmp_path / "victim.txt"
    victim.write_text("victim\n")
    (out / "csrc" / ".myrelu.cpp.kernelmap-tmp").symlink_to(victim)
    done = kernelmap_cli("scaffold", "aten::relu", "--name", "myrelu", "--out", str(out), "--force")
    assert done.returncode == 0, done.stderr
    assert victim.read_text() == "victim\n"
    cpp = out / "csrc" / "myrelu.cpp"
    assert not cpp.is_symlink() and "myrelu" in cpp.read_text()
    assert not list(out.rglob("*.kernelmap-tmp"))


def test_force_that_fails_midway_changes_nothing_and_can_be_retried(kernelmap_cli, tmp_path):
    out = tmp_path / "p"
    assert kernelmap_cli("scaffold", "aten::relu", "--name", "myrelu", "--out", str(out)).returncode == 0
    obstacle = out / "tests" / ".test_myrelu2.py.kernelmap-tmp"
    obstacle.mkdir()  # the aside name of one file is taken by a folder: that write fails
    before = _contents(out)
    done = kernelmap_cli("scaffold", "aten::relu", "--name", "myrelu2", "--out", str(out), "--force")
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert _contents(out) == before  # no file written, no folder made
    obstacle.rmdir()
    again = kernelmap_cli("scaffold", "aten::relu", "--name", "myrelu2", "--out", str(out), "--force")
    assert again.returncode == 0, again.stderr
    assert json.loads((out / "kernelmap.json").read_text())["package"] == "myrelu2"


def test_a_new_project_folder_has_the_usual_mode(kernelmap_cli, tmp_path):
    out = tmp_path / "p"
    assert kernelmap_cli("scaffold", "aten::relu", "--name", "myrelu", "--out", str(out)).returncode == 0
    assert out.stat().st_mode & 0o777 == (out / "csrc").stat().st_mode & 0o777


def test_force_under_another_name_keeps_edited_files_and_removes_emptied_folders(kernelmap_cli, tmp_path):
    """Note [scaffold writes only its own files]: a previous scaffold's file is
    removed only if it holds what that scaffold wrote (the manifest's sha256)."""
    out = tmp_path / "p"
    assert kernelmap_cli("scaffold", "aten::relu", "--name", "myrelu", "--out", str(out)).returncode == 0
    manifest = json.loads((out / MANIFEST).read_text())
    assert all(manifest["sha256"][rel] == hashlib.sha256((out / rel).read_bytes()).hexdigest()
               for rel in manifest["files"] if rel != MANIFEST)
    (out / "csrc" / "myrelu.cpp").write_text("// my own kernel now\n")
    done = kernelmap_cli("scaffold", "aten::relu", "--name", "myrelu2", "--out", str(out), "--force")
    assert done.returncode == 0, done.stderr
    assert (out / "csrc" / "myrelu.cpp").read_text() == "// my own kernel now\n"  # edited: kept
    assert not (out / "tests" / "test_myrelu.py").exists()  # unedited: removed
    assert not (out / "myrelu").exists()  # the old package's folder, emptied, is gone too
    assert (out / "myrelu2" / "__init__.py").is_file()


def test_force_trusts_no_file_added_to_the_manifest_by_hand(kernelmap_cli, tmp_path):
    out = tmp_path / "p"
    assert kernelmap_cli("scaffold", "aten::relu", "--name", "myrelu", "--out", str(out)).returncode == 0
    (out / "notes.txt").write_text("mine\n")
    manifest = json.loads((out / MANIFEST).read_text())
    manifest["files"].append("notes.txt")  # listed, but scaffold never wrote it
    (out / MANIFEST).write_text(json.dumps(manifest))
    done = kernelmap_cli("scaffold", "aten::relu", "--name", "myrelu2", "--out", str(out), "--force")
    assert done.returncode == 0, done.stderr
    assert (out / "notes.txt").read_text() == "mine\n"  # not removed as a file of the previous scaffold
    # a file this scaffold writes, listed with no digest: refused, not overwritten
    (out / "tests" / "conftest.py").write_text("# the user's conftest\n")
    manifest = json.loads((out / MANIFEST).read_text())
    del manifest["sha256"]["tests/conftest.py"]
    (out / MANIFEST).write_text(json.dumps(manifest))
    before = _contents(out)
    done = kernelmap_cli("scaffold", "aten::relu", "--name", "myrelu2", "--out", str(out), "--force")
    assert done.returncode == 2 and "not a file of a previous scaffold" in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert _contents(out) == before


def test_out_that_is_a_symbolic_link_is_refused(kernelmap_cli, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("keep\n")
    link = tmp_path / "p"
    link.symlink_to(elsewhere, target_is_directory=True)
    for extra in ((), ("--force",)):
        done = kernelmap_cli("scaffold", "aten::relu", "--name", "myrelu", "--out", str(link), *extra)
        assert done.returncode == 2 and "symbolic link" in done.stderr, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1
    assert sorted(p.name for p in elsewhere.iterdir()) == ["keep.txt"]


def test_a_manifest_of_another_shape_is_refused(kernelmap_cli, tmp_path):
    out = tmp_path / "p"
    out.mkdir()
    (out / MANIFEST).write_text('["not", "a", "manifest"]')
    done = kernelmap_cli("scaffold", "aten::relu", "--name", "myrelu", "--out", str(out), "--force")
    assert done.returncode == 2 and "not a manifest written by kernelmap scaffold" in done.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["--name", "r" * 65], "at most 64"),
        (["--name", "r" * 300], "at most 64"),
        (["--name", "__init__"], "reserved in C++"),
        (["--name", "delete"], "C++ keyword"),
        (["--name", "9lives"], "must be an identifier"),
        (["--name", "r", "--namespace", "int"], "C++ keyword"),
        (["--name", "r", "--namespace", "template"], "C++ keyword"),
        (["--name", "r", "--namespace", "aten"], "PyTorch's own"),
        (["--name", "r", "--namespace", "a-b"], "must be an identifier"),
    ],
)
def test_names_that_cannot_compile_are_refused(kernelmap_cli, tmp_path, args, message):
    done = kernelmap_cli("scaffold", "aten::relu", *args, "--out", str(tmp_path / "out"))
    assert done.returncode == 2, done.stderr
    assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not (tmp_path / "out").exists()


def test_an_unwritable_out_is_one_line(kernelmap_cli, tmp_path):
    import os

    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        if os.access(locked, os.W_OK):
            pytest.skip("running as a user who can write anywhere")
        done = kernelmap_cli("scaffold", "aten::relu", "--name", "myrelu", "--out", str(locked / "p"))
        assert done.returncode == 2, done.stderr
        assert "cannot write the project" in done.stderr and len(done.stderr.strip().splitlines()) == 1
        assert list(locked.iterdir()) == []
    finally:
        locked.chmod(0o700)


@pytest.mark.parametrize("where", ["under_a_file", "name_too_long"])
def test_an_impossible_out_is_one_line(kernelmap_cli, tmp_path, where):
    (tmp_path / "afile").write_text("x")
    out = tmp_path / "afile" / "p" if where == "under_a_file" else tmp_path / ("p" * 300) / "q"
    done = kernelmap_cli("scaffold", "aten::relu", "--name", "myrelu", "--out", str(out))
    assert done.returncode == 2, done.stderr
    assert "kernelmap: error:" in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


def test_the_convolution_takes_its_flags_from_the_users_settings(tmp_path, tree_2_6):
    """aten::convolution passes the global context's cuDNN flags to at::_convolution; so does the scaffold,
    on both routes, and never a constant."""
    import re

    from kernelmap.extend import scaffold

    native = (tree_2_6 / "aten/src/ATen/native/Convolution.cpp").read_text()
    body = native[native.index("at::Tensor convolution("):]
    body = body[:body.index("\n}\n")]
    getters = set(re.findall(r"ctx\.(\w+)\(\)", body))
    assert {"benchmarkCuDNN", "deterministicCuDNN", "userEnabledCuDNN", "allowTF32CuDNN"} <= getters
    out = tmp_path / "c"
    scaffold("aten::convolution", "flagconv", out=out, cuda=True)
    for rel in ("csrc/flagconv.cpp", "csrc/flagconv_cuda.cpp"):
        text = (out / rel).read_text()
        call = text[text.index("at::_convolution("):]
        call = call[:call.index(";")]
        for getter in getters:
            assert f"at::globalContext().{getter}()" in call, (rel, getter)
        assert not re.search(r"=\*/\s*(true|false)", call), call


def test_force_never_overwrites_a_file_the_user_edited(kernelmap_cli, tmp_path):
    """The manifest's sha256 of each file as written tells an edit: an edited
    file is kept (and said so), again on the next --force; the unedited ones
    are written anew."""
    out = tmp_path / "p"
    assert kernelmap_cli("scaffold", "aten::relu", "--name", "myrelu", "--out", str(out)).returncode == 0
    cpp, test = out / "csrc" / "myrelu.cpp", out / "tests" / "test_myrelu.py"
    written = json.loads((out / MANIFEST).read_text())["sha256"]["csrc/myrelu.cpp"]
    cpp.write_text(cpp.read_text().replace("TORCH_LIBRARY", "// my kernel\nTORCH_LIBRARY", 1))
    edited = cpp.read_text()
    for namespace in ("mylib", "otherlib"):  # a new namespace changes every file
        done = kernelmap_cli("scaffold", "aten::relu", "--name", "myrelu", "--namespace", namespace, "--out", str(out),
                             "--force", "--json")
        assert done.returncode == 0, done.stderr
        answer = json.loads(done.stdout)
        assert answer["kept"] == ["csrc/myrelu.cpp"] and "csrc/myrelu.cpp" in answer["files"]
        assert cpp.read_text() == edited
        assert f"{namespace}::myrelu" in test.read_text()  # not edited: written anew
        manifest = json.loads((out / MANIFEST).read_text())
        assert manifest["sha256"]["csrc/myrelu.cpp"] == written  # still what scaffold wrote there
        assert manifest["custom_op"] == f"{namespace}::myrelu"
    done = kernelmap_cli("scaffold", "aten::relu", "--name", "myrelu", "--out", str(out), "--force")
    assert done.returncode == 0, done.stderr
    assert f"  {out / 'csrc' / 'myrelu.cpp'}  (kept: edited since scaffold wrote it)" in done.stdout.splitlines()
    assert "kept 1 file(s) you edited" in done.stdout
    cpp.unlink()  # moved away: the next --force writes the new version
    done = kernelmap_cli("scaffold", "aten::relu", "--name", "myrelu", "--out", str(out), "--force", "--json")
    assert json.loads(done.stdout)["kept"] == [] and "// my kernel" not in cpp.read_text()
    assert json.loads((out / MANIFEST).read_text())["sha256"]["csrc/myrelu.cpp"] == hashlib.sha256(cpp.read_bytes()).hexdigest()


def test_force_over_a_manifest_without_digests_keeps_every_file_that_differs(kernelmap_cli, tmp_path):
    """An older kernelmap recorded no sha256: whether a file was edited is
    unknown, so a file that differs from the new text is kept."""
    out = tmp_path / "p"
    assert kernelmap_cli("scaffold", "aten::relu", "--name", "myrelu", "--out", str(out)).returncode == 0
    manifest = json.loads((out / MANIFEST).read_text())
    del manifest["sha256"]
    (out / MANIFEST).write_text(json.dumps(manifest))
    (out / "csrc" / "myrelu.cpp").write_text("// mine\n")
    done = kernelmap_cli("scaffold", "aten::relu", "--name", "myrelu", "--out", str(out), "--force", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["kept"] == ["csrc/myrelu.cpp"]
    assert (out / "csrc" / "myrelu.cpp").read_text() == "// mine\n"


@pytest.mark.parametrize("extra", ['str mode="fast"', """str mode='");import os;os.getcwd("'"""])
def test_a_string_extra_gives_python_that_compiles_and_holds_it(kernelmap_cli, tmp_path, extra):
    out = tmp_path / "p"
    done = kernelmap_cli("scaffold", "aten::relu", "--name", "myrelu", "--out", str(out), "--extra", extra)
    assert done.returncode == 0, done.stderr
    value = extra.split("=", 1)[1][1:-1]
    for path in out.rglob("*.py"):
        compile(path.read_text(), str(path), "exec")  # every Python file parses
    import ast

    tree = ast.parse((out / "myrelu" / "__init__.py").read_text())
    assert not [n for n in ast.walk(tree) if isinstance(n, ast.Import) and any(a.name == "os" for a in n.names)]
    fake = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "_fake")
    assert [ast.literal_eval(d) for d in fake.args.kw_defaults] == [value]


@pytest.mark.parametrize("extra, message", [
    ("str mode=\"a\tb\"", "not one scaffold can write"),
    ("ScalarType d=os", "not one scaffold can write"),
    ("str mode=\"a\\\"b\"", "not a str torch can read"),
])
def test_a_default_scaffold_cannot_write_is_one_line_and_status_2(kernelmap_cli, tmp_path, extra, message):
    done = kernelmap_cli("scaffold", "aten::relu", "--name", "myrelu", "--out", str(tmp_path / "p"), "--extra", extra)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not (tmp_path / "p").exists()
