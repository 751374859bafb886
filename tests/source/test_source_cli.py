"""`kernelmap source ...`, `kernelmap index`, `kernelmap find` as a user runs them."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from kernelmap.cli import cli

from .conftest import line_of, make_tree


def run(*args, **kw):
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False, **kw)
    return result


def assert_one_line_error(result, pattern):
    assert result.exit_code == 2, result.output
    err = result.stderr.strip()
    assert "\n" not in err and "Traceback" not in err
    assert err.startswith("kernelmap: error:")
    assert pattern in err, err


@pytest.fixture
def tree_dir(tmp_path):
    return make_tree(
        tmp_path / "pytorch",
        {
            "aten/src/ATen/native/Neg.cpp": "namespace at { namespace native {\nDEFINE_DISPATCH(neg_stub);\n"
            "Tensor neg(const Tensor& self) {\n  neg_stub(kCPU, self);\n  return self;\n}\n}}\n",
            "aten/src/ATen/native/cpu/NegKernel.cpp": "namespace at::native {\nvoid neg_kernel(TensorIteratorBase& it) {}\n"
            "REGISTER_DISPATCH(neg_stub, &neg_kernel);\n}\n",
        },
    )


def test_add_list_index_find_remove(tree_dir, cache):
    r = run("source", "add", str(tree_dir))
    assert r.exit_code == 0 and r.output.startswith("added pytorch: 2.6.0a0")
    assert "no c10, torch/csrc" in r.output
    r = run("source", "list")
    assert r.exit_code == 0 and r.output.split("\t")[:2] == ["pytorch", "2.6.0a0"] and "not indexed" in r.output
    r = run("find", "neg")
    assert_one_line_error(r, "not indexed yet")

    r = run("index", "--source", "pytorch")
    assert r.exit_code == 0, r.output
    assert r.output.startswith("indexed pytorch: 2 files, 2 parsed") and "missing from the tree: c10, torch/csrc" in r.output
    assert json.loads(run("source", "list", "--json").output)["trees"][0]["indexed"] is True

    r = run("find", "at::native::neg")
    assert r.exit_code == 0
    [line] = r.output.splitlines()
    loc = line.split()[0]
    path, span = loc.rsplit(":", 1)
    first = int(span.split("-")[0])
    assert "Tensor neg(" in line_of(tree_dir, path, first)

    r = run("find", "neg_stub")
    assert r.exit_code == 0
    assert "registers neg_stub -> neg_kernel for CPU each CPU capability" in r.output
    assert "aten/src/ATen/native/Neg.cpp:2  defines stub neg_stub" in r.output
    assert "stub call from at::native::neg: neg_stub" in r.output

    r = run("find", "neg_stub", "--json")
    doc = json.loads(r.output)
    assert doc["kernelmap"] == "find/2"
    [call] = doc["references"]
    assert (call["kind"], call["caller"]["name"]) == ("stub", "at::native::neg")
    assert "neg_stub(" in line_of(tree_dir, call["location"]["path"], call["location"]["line"])
    [reg] = doc["stub_registrations"]
    assert "REGISTER_DISPATCH(neg_stub" in line_of(tree_dir, reg["location"]["path"], reg["location"]["line"])

    r = run("find", "nothing_like_this")
    assert_one_line_error(r, "unknown name 'nothing_like_this'")
    r = run("find", "neg_kernl")
    assert_one_line_error(r, "unknown name")

    r = run("source", "remove", "pytorch")
    assert r.exit_code == 0 and r.output.strip() == "removed pytorch"
    assert "no source trees" in run("source", "list").output


@pytest.mark.parametrize(
    "args, message",
    [
        (("source", "add", "{tmp}"), "not a PyTorch source tree"),
        (("source", "remove", "nope"), "no source tree named 'nope'"),
        (("index", "--source", "nope"), "no source tree named 'nope'"),
        (("find", "x", "--source", "nope"), "no source tree named 'nope'"),
        (("index",), "no source tree selected"),
        (("source", "fetch", "--commit", "not-a-sha"), "hex digits"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, cache, monkeypatch, args, message):
    from kernelmap import env

    monkeypatch.setattr(env, "torch_install", lambda: env.TorchInstall("2.13.0", None, None, tmp_path))
    r = run(*[a.format(tmp=tmp_path) for a in args])
    assert_one_line_error(r, message)


def test_fetch_without_a_recorded_commit(tmp_path, cache, monkeypatch):
    from kernelmap import env

    monkeypatch.setattr(env, "torch_install", lambda: env.TorchInstall("2.13.0", None, None, tmp_path))
    assert_one_line_error(run("source", "fetch"), "does not record its git commit")


def test_find_on_the_real_tree(real_index, real_tree):
    r = run("find", "at::native::cudnn_convolution", "--source", real_tree.name)
    assert r.exit_code == 0
    lines = r.output.splitlines()
    assert len(lines) == 2 and all("function at::native::cudnn_convolution" in ln for ln in lines)
    assert any("[#if AT_CUDNN_ENABLED()]" in ln for ln in lines) and any("[#if !AT_CUDNN_ENABLED()]" in ln for ln in lines)
    r = run("find", "cudnn_convolution", "--source", real_tree.name, "--json")
    doc = json.loads(r.output)
    calls = [c for c in doc["references"] if c["caller"] and c["caller"]["name"] == "at::native::_convolution"]
    assert any(c["kind"] == "dispatcher" and c["condition"] == "case ConvBackend::Cudnn" for c in calls)
    r = run("find", "TORCH_IMPL_FUNC(mul_out)", "--source", real_tree.name)
    assert r.exit_code == 0 and "structured_impl at::native::structured_mul_out::impl" in r.output


def test_static_commands_import_no_trace_reader_numpy_or_torch(tree_dir, cache):
    """Static questions read the index only: the trace reader (msgspec),
    numpy and torch stay unloaded; so does the trace package, whose
    printable-text helper moved to kernelmap.printable."""
    import os
    import subprocess
    import sys

    assert run("source", "add", str(tree_dir), "--name", "tiny").exit_code == 0
    assert run("index", "--source", "tiny").exit_code == 0
    for args in (["find", "neg_stub", "--source", "tiny"], ["source", "list"]):
        probe = (
            "import runpy, sys\n"
            f"sys.argv = ['kernelmap', *{args!r}]\n"
            "try:\n    runpy.run_module('kernelmap', run_name='__main__')\nexcept SystemExit as e:\n    assert e.code in (0, None), e.code\n"
            "print(sorted(m for m in ('torch', 'numpy', 'msgspec', 'kernelmap.trace') if m in sys.modules))\n"
        )
        out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env={**os.environ, "KERNELMAP_CACHE_DIR": str(cache)})
        assert out.returncode == 0, out.stderr
        assert out.stdout.rstrip().endswith("[]"), (args, out.stdout[-300:])


def test_find_shows_an_operators_registrations_only_under_its_namespace(real_index, real_tree):
    """`find c10::DispatchKeySet::add` is a C++ method: the registrations of
    operators named `add` (aten::add.Scalar's fallthroughs, quantized::add's
    impls, read from their files here) are not it; `find quantized::add`
    shows quantized::add's and no aten::add's."""
    text = (real_tree.root / "aten/src/ATen/native/quantized/cpu/BinaryOps.cpp").read_text()
    assert 'm.impl(TORCH_SELECTIVE_NAME("quantized::add"),' in text
    assert "DispatchKeySet add(DispatchKey t) const {" in (real_tree.root / "c10/core/DispatchKeySet.h").read_text()
    r = run("find", "c10::DispatchKeySet::add", "--source", real_tree.name, "--json", "--limit", "500")
    doc = json.loads(r.output)
    assert doc["definitions"] and doc["library_registrations"] == []
    # a bare `add(...)` calls the method only inside its class (basic.cpp's TestAdd calls at::add)
    assert "add(" in (real_tree.root / "aten/src/ATen/test/basic.cpp").read_text()
    refs = doc["references"]
    assert refs and all("::" in c["callee"] or (c["caller"] or {}).get("name", "").startswith("c10::DispatchKeySet::") for c in refs)
    inside = [c for c in refs if "::" not in c["callee"]]
    assert inside and all("add(" in line_of(real_tree.root, c["location"]["path"], c["location"]["line"]) for c in inside)
    assert not any(c["location"]["path"].endswith("test/basic.cpp") for c in refs)
    r = run("find", "quantized::add", "--source", real_tree.name, "--json")
    regs = json.loads(r.output)["library_registrations"]
    assert regs and {g["namespace"] for g in regs} == {"quantized"}
    assert any(g["op"] == "add" and g["location"]["path"].endswith("quantized/cpu/BinaryOps.cpp") for g in regs)
    r = run("find", "add", "--source", real_tree.name, "--json")
    assert {"aten", "quantized"} <= {g["namespace"] for g in json.loads(r.output)["library_registrations"]}
