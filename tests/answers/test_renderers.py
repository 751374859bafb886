"""A text renderer per answer type, compared exactly at a fixed width with no
colour, on small answers built by hand; and producers import no terminal library."""

from __future__ import annotations

import subprocess
import sys

from kernelmap.model import (
    EdgeKind,
    Explanation,
    Location,
    Origin,
    OriginKind,
    ScaffoldAnswer,
    SourceEntry,
    SourceList,
    Step,
    Symbol,
)
from kernelmap.render import render

TREE = Origin(OriginKind.TREE, "2.6.0a0", None, "/nowhere", label="tree t")


def test_sources_text():
    answer = SourceList((SourceEntry("t", "/src/t", "2.6.0a0", "0123456789abcdef", "local", True), SourceEntry("u", "/src/u", "1.13.0a0", None, "fetched", False)))
    assert render(answer, "text", width=80, color=False) == (
        "t\t2.6.0a0\t0123456789ab\tlocal\tindexed\t/src/t\nu\t1.13.0a0\t-\tfetched\tnot indexed\t/src/u\n"
    )
    assert render(SourceList(()), "text").startswith("no source trees; add one")


def test_find_text():
    from kernelmap.source.index import CallSite, Definition, Findings, StubRegistration

    sym = Symbol("at::native::mul_kernel", Location("aten/src/ATen/native/cpu/BinaryOpsKernel.cpp", 10, 20, TREE))
    caller = Symbol("at::native::mul_out", Location("aten/src/ATen/native/BinaryOps.cpp", 5, 9, TREE))
    found = Findings(
        "mul_kernel",
        (Definition(sym, "at::native::mul_kernel"),),
        (CallSite(caller, "mul_kernel", "mul_kernel", EdgeKind.DIRECT, Location("aten/src/ATen/native/BinaryOps.cpp", 7, None, TREE), "if (x)"),),
        (StubRegistration("mul_stub", "mul_kernel", "CPU", None, Location("aten/src/ATen/native/cpu/BinaryOpsKernel.cpp", 30, None, TREE)),),
        more_references=2,
    )
    assert render(found, "text", width=100, color=False) == (
        "aten/src/ATen/native/cpu/BinaryOpsKernel.cpp:10-20  function at::native::mul_kernel\n"
        "aten/src/ATen/native/cpu/BinaryOpsKernel.cpp:30  registers mul_stub -> mul_kernel for CPU\n"
        "aten/src/ATen/native/BinaryOps.cpp:7  direct call from at::native::mul_out: mul_kernel  [if (x)]\n"
        "... 2 more references (--limit)\n"
    )


def test_explain_text():
    answer = Explanation("aten::add.Tensor", "cpu", (Step("stub", "add_stub dispatches", Location("a.cpp", 3, None, TREE), "add_stub(kCPU, iter);"),), ("a note",))
    assert render(answer, "text", width=80, color=False, full=True) == (
        "note: a note\naten::add.Tensor on cpu, float32\n\n1. stub  add_stub dispatches\n   a.cpp:3\n   add_stub(kCPU, iter);\n"
    )
    assert render(answer, "text", width=80, color=False) == (  # the steps without their code
        "note: a note\naten::add.Tensor on cpu, float32\n1. stub  a.cpp:3\n   add_stub dispatches\n(--all shows each step's code)\n"
    )


def test_scaffold_text():
    answer = ScaffoldAnswer("/p/myrelu", "kernelmap_ext::myrelu", "myrelu(Tensor self) -> Tensor", "aten::relu", "pointwise", ("csrc/myrelu.cpp",), False)
    assert render(answer, "text", width=80, color=False) == (
        "kernelmap_ext::myrelu: myrelu(Tensor self) -> Tensor\n  starts as aten::relu (pointwise reference kernel)\n"
        "  /p/myrelu/csrc/myrelu.cpp\n"
        "build just in time:  cd /p/myrelu && python -m pytest tests   (cpp_extension.load)\n"
        "build ahead of time: cd /p/myrelu && pip install --no-build-isolation -e .   (setup.py)\n"
    )


def test_control_characters_never_reach_the_terminal():
    from kernelmap.model import CallNode, CallTree

    tree = CallTree(CallNode("evil\x1b]0;title\x07name", "op"), ("note \x1b[2J",))
    text = render(tree, "text", width=200, color=False)
    assert "\x1b" not in text and "\\x1b" in text


def test_producers_import_no_terminal_library():
    probe = (
        "import sys\n"
        "import kernelmap.catalog, kernelmap.codegen, kernelmap.source, kernelmap.graph, kernelmap.graph.explain, kernelmap.trace, kernelmap.vendors, kernelmap.processors\n"
        "print(sorted(m for m in sys.modules if m == 'rich' or m.startswith('rich.')))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
