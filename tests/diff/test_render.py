"""The diff answer's text and document, on a small answer built by hand."""

from __future__ import annotations

import pytest

from kernelmap.answers import load
from kernelmap.diff import Change, OpDiff
from kernelmap.model import Location, Origin, OriginKind
from kernelmap.render import render

OLD = Origin(OriginKind.TREE, "1.13.0a0", None, "/t/old", label="tree old")
NEW = Origin(OriginKind.TREE, "2.6.0a0", None, "/t/new", label="tree new")
YAML = "aten/src/ATen/native/native_functions.yaml"


def answer() -> OpDiff:
    return OpDiff("torch.prelu", "aten::prelu", OLD, NEW, "cpu", (
        Change("yaml", "same", "entry", "prelu(Tensor self, Tensor weight) -> Tensor", "prelu(Tensor self, Tensor weight) -> Tensor",
               Location(YAML, 10, None, OLD), Location(YAML, 20, None, NEW)),
        Change("yaml", "changed", "kind", "dispatch", "composite implicit", Location(YAML, 10, None, OLD), Location(YAML, 20, None, NEW)),
        Change("yaml", "removed", "dispatch CPU", "at::native::prelu_cpu", None, Location(YAML, 10, None, OLD), None),
        Change("kernel", "renamed", "at::native::a -> at::native::b", "at::native::a", "at::native::b",
               Location("aten/src/ATen/native/A.cpp", 5, 9, OLD), Location("aten/src/ATen/native/B.cpp", 7, 11, NEW), "body 90% similar"),
    ), ("a note",))


def test_text_lists_changes_and_counts_the_same():
    assert render(answer(), "text", width=200, color=False) == (
        "aten::prelu: tree old (1.13.0a0) -> tree new (2.6.0a0), device cpu\n"
        "note: a note\n"
        "\n"
        "yaml entry  (1 unchanged)\n"
        "~ changed  kind: dispatch  =>  composite implicit\n"
        f"    {YAML}:10  =>  {YAML}:20\n"
        "- removed  dispatch CPU: at::native::prelu_cpu\n"
        f"    {YAML}:10  =>  -\n"
        "\n"
        "kernels\n"
        "~ renamed  at::native::a -> at::native::b\n"
        "    aten/src/ATen/native/A.cpp:5  =>  aten/src/ATen/native/B.cpp:7  (body 90% similar)\n"
    )


def test_document_round_trips_with_both_origins():
    doc = answer().to_json()
    assert doc["kernelmap"] == "diff/1" and doc["from"] == "tree old" and doc["to"] == "tree new"
    renamed = doc["changes"][3]
    assert renamed["from"]["origin"] == "tree old" and renamed["to"]["origin"] == "tree new"
    assert renamed["from"]["file"] == "/t/old/aten/src/ATen/native/A.cpp"
    again = load(doc)
    assert again == answer() and again.to_json() == doc


def test_a_change_states_its_rules():
    with pytest.raises(ValueError, match="section"):
        Change("nothing", "added", "x")
    with pytest.raises(ValueError, match="added part has no old location"):
        Change("kernel", "added", "x", None, "x", Location("a.cpp", 1, None, OLD), None)
