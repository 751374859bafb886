"""Every answer's JSON document round-trips on real answers, and a saved
tree re-renders with other options."""

from __future__ import annotations

import json

import pytest

from kernelmap import answers, api
from kernelmap.model import CallNode, CallTree, DocumentError, NodeKind
from kernelmap.render import render
from tests.conftest import run_kernelmap

TREE = "debian-2.6.0"


def _round_trip(answer):
    doc = json.loads(render(answer, "json"))
    assert doc == answer.to_json(), "the JSON text is the document"
    again = answers.load(doc)
    assert type(again) is type(answer)
    assert again.to_json() == doc
    return again


def test_undeclared_facts_and_kinds_are_refused():
    with pytest.raises(ValueError, match="undeclared node facts"):
        CallNode("x", NodeKind.KERNEL, attrs={"vendor": "cuDNN"})
    with pytest.raises(ValueError):
        CallNode("x", "not-a-kind")


def test_documents_refuse_other_answers_and_versions():
    with pytest.raises(DocumentError, match="not a calltree/2 document"):
        CallTree.from_json({"kernelmap": "calltree/1", "root": {}})
    with pytest.raises(DocumentError, match="unknown answer document"):
        answers.load({"kernelmap": "nothing/1"})
    with pytest.raises(DocumentError):
        answers.load([1, 2])


def test_stack_and_callers_round_trip_exactly(context):
    ctx = context("cuda")
    from kernelmap import graph

    tree = graph.stack("torch.nn.Conv2d", ctx)
    assert _round_trip(tree) == tree
    up = graph.callers("cudnnConvolutionForward", ctx)
    assert _round_trip(up) == up
    locations = [n.location for _, n in tree.walk() if n.location is not None]
    loaded = answers.load(tree.to_json())
    assert [n.location for _, n in loaded.walk() if n.location is not None] == locations
    assert all(a.origin == b.origin for a, b in zip(locations, [n.location for _, n in loaded.walk() if n.location]))


def test_where_find_gen_explain_round_trip(context, indexed_tree, generated):
    from kernelmap.codegen import locate
    from kernelmap.graph.explain import explain
    from kernelmap.source import find, open_index

    where = api.where("torch.add", requires_grad=True)
    assert _round_trip(where) == where
    static = api.where("conv2d", static=True)
    assert _round_trip(static) == static
    with open_index(indexed_tree) as ix:
        found = find(ix, "mul_stub")
    assert _round_trip(found).to_json() == found.to_json()
    code = locate("aten::add.out", files=generated)
    assert _round_trip(code) == code
    steps = explain("aten::add.Tensor", context("cpu"))
    assert _round_trip(steps) == steps


def test_trace_of_resnet50_round_trips(tmp_path):
    import kernelmap
    from kernelmap.trace.summary import TraceReport

    out = run_kernelmap("trace", "-c", "import torch; torch.nn.Conv2d(3, 8, 3)(torch.randn(1, 3, 32, 32)).relu()", "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    report = answers.load(doc)
    assert isinstance(report, TraceReport) and report.to_json() == doc
    assert kernelmap  # the package imports lazily


def test_saved_tree_renders_again_with_other_options(tmp_path, indexed_tree, generated):
    out = run_kernelmap("stack", "torch.nn.Conv2d", "--device", "cuda", "--source", TREE, "--json")
    assert out.returncode == 0, out.stderr
    saved = tmp_path / "conv.json"
    saved.write_text(out.stdout)
    full = run_kernelmap("render", str(saved), "--width", "200")
    cut = run_kernelmap("render", str(saved), "--depth", "3", "--width", "200")
    assert full.returncode == 0 and cut.returncode == 0, cut.stderr
    assert len(cut.stdout.splitlines()) < len(full.stdout.splitlines())
    assert "(cut: depth 3 reached)" in cut.stdout
    hidden = run_kernelmap("render", str(saved), "--hide-below", "at::native::_convolution", "--json")
    doc = json.loads(hidden.stdout)
    tree = CallTree.from_json(doc)
    node = next(n for _, n in tree.walk() if n.name == "at::native::_convolution")
    assert node.children == () and node.attrs["hidden"] > 0
    bad = run_kernelmap("render", str(tmp_path / "missing.json"))
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
    typo = run_kernelmap("render", str(saved), "--hide-below", "at::native::_convolutoin")
    assert typo.returncode == 2 and typo.stderr == "kernelmap: error: --hide-below 'at::native::_convolutoin': no node of the tree is named so\n"


def test_tree_options_on_a_document_without_a_tree_are_refused(tmp_path):
    """A where/find/sources document has no call tree to cut or prune: the
    options are refused, not ignored."""
    out = run_kernelmap("where", "conv2d", "--static", "--json")
    assert out.returncode == 0, out.stderr
    saved = tmp_path / "where.json"
    saved.write_text(out.stdout)
    for options in (["--depth", "1"], ["--prune", "--min-us", "5"], ["--collapse-branches"], ["--hide-below", "x"]):
        r = run_kernelmap("render", str(saved), *options)
        assert r.returncode == 2 and r.stderr.startswith(f"kernelmap: error: {options[0]}") and "holds none (a where document)" in r.stderr, r.stderr
        assert r.stderr.count("\n") == 1
    assert run_kernelmap("render", str(saved)).returncode == 0


def test_html_is_one_more_format_for_every_answer(tmp_path):
    from kernelmap.render.html import document_of

    out = tmp_path / "where.html"
    done = run_kernelmap("where", "conv2d", "--static", "--html", str(out))
    assert done.returncode == 0, done.stderr
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>") or page.lstrip().lower().startswith("<!doctype html>")
    answer = api.where("conv2d", static=True)
    assert document_of(answer) == answer.to_json()
    assert "<iframe" in answer._repr_html_()
    bad = run_kernelmap("where", "conv2d", "--static", "--html", str(tmp_path / "missing" / "x.html"))
    assert bad.returncode == 2 and bad.stderr.startswith("kernelmap: error: cannot write")
