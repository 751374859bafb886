"""The impact answer's text at a fixed width, and its JSON document loading
back into the same answer, on an answer made here (no producer runs)."""

from __future__ import annotations

import json

import pytest

from kernelmap import answers
from kernelmap.impact.model import Advice, EditedFile, Estimate, ImpactAnswer, RebuiltUnit
from kernelmap.model import Location, Origin, OriginKind
from kernelmap.render import render

TREE = Origin(OriginKind.TREE, "2.6.0a0", None, "/src/pytorch", label="tree debian-2.6.0")


def answer() -> ImpactAnswer:
    units = (
        RebuiltUnit("aten/src/ATen/native/cpu/BinaryOpsKernel.cpp", "capability", "libtorch_cpu.so", 12.25, "AVX2"),
        RebuiltUnit("aten/src/ATen/native/cpu/BinaryOpsKernel.cpp", "capability", "libtorch_cpu.so", 12.0, "DEFAULT"),
        RebuiltUnit("aten/src/ATen/native/BinaryOps.cpp", "cpp", "libtorch_cpu.so", 3.5),
        RebuiltUnit("aten/src/ATen/native/cuda/BinaryMulKernel.cu", "cu", "libtorch_cuda.so", 30.0, maybe=True),
    )
    return ImpactAnswer(
        "aten/src/ATen/native/BinaryOps.h:70", "line", "cuda", TREE,
        (EditedFile("aten/src/ATen/native/BinaryOps.h", "line 70", Location("aten/src/ATen/native/BinaryOps.h", 70, origin=TREE)),),
        units, ("aten::add.Tensor", "aten::mul.Tensor"),
        Estimate(57.75, 30.0, 2, "CPU seconds per unit = cpp: 1.00 s + 2.00 s per MB of source read", "cpp: median error 20%"),
        (Advice("at::native::f is defined out of line: change its definition in aten/src/ATen/native/BinaryOps.cpp instead",
                "aten/src/ATen/native/BinaryOps.cpp", Location("aten/src/ATen/native/BinaryOps.cpp", 12, origin=TREE), 1, 3.5),),
        ("1 of the units include it only under #if conditions kernelmap cannot decide (marked maybe)",),
        ("sleef.h",),
    )


def test_text_at_a_fixed_width():
    assert render(answer(), "text", width=100, color=False) == """\
impact of aten/src/ATen/native/BinaryOps.h:70 on cuda (tree debian-2.6.0, 2.6.0a0)
  edits aten/src/ATen/native/BinaryOps.h:70  (line 70)

rebuilds 4 units: 1 .cpp, 1 .cu, 2 CPU-capability copies (AVX2 1, DEFAULT 1); 1 maybe
libraries: libtorch_cpu.so 3, libtorch_cuda.so 1
estimated: 58 CPU-seconds, about 30 s on 2 parallel jobs
  model: CPU seconds per unit = cpp: 1.00 s + 2.00 s per MB of source read
  error: cpp: median error 20%

cheaper:
  at::native::f is defined out of line: change its definition in aten/src/ATen/native/BinaryOps.cpp instead
    aten/src/ATen/native/BinaryOps.cpp:12: 1 unit, 4 CPU-seconds

operators whose code they hold: 2
  aten::add.Tensor, aten::mul.Tensor

units:
    30.0 s  aten/src/ATen/native/cuda/BinaryMulKernel.cu  [.cu, libtorch_cuda.so, maybe]
    12.2 s  aten/src/ATen/native/cpu/BinaryOpsKernel.cpp  [AVX2, libtorch_cpu.so]
    12.0 s  aten/src/ATen/native/cpu/BinaryOpsKernel.cpp  [DEFAULT, libtorch_cpu.so]
     3.5 s  aten/src/ATen/native/BinaryOps.cpp  [.cpp, libtorch_cpu.so]

third-party headers it includes (named, not followed): sleef.h
note: 1 of the units include it only under #if conditions kernelmap cannot decide (marked maybe)
"""


def test_a_location_is_never_cut_at_a_narrow_width():
    text = render(answer(), "text", width=40, color=False)
    assert "    30.0 s  aten/src/ATen/native/cuda/BinaryMulKernel.cu\n           [.cu, libtorch_cuda.so, maybe]" in text


def test_json_document_loads_back():
    a = answer()
    doc = json.loads(render(a, "json"))
    assert doc["kernelmap"] == "impact/1"
    assert doc["counts"] == {"capability": 2, "cpp": 1, "cu": 1, "capability AVX2": 1, "capability DEFAULT": 1}
    assert doc["libraries"] == {"libtorch_cpu.so": 3, "libtorch_cuda.so": 1} and doc["maybe"] == 1
    again = answers.load(doc)
    assert again == a
    assert render(again, "text", width=100) == render(a, "text", width=100)


def test_html_report_embeds_the_document():
    from kernelmap.render import html

    page = render(answer(), "html")
    assert "kernelmap impact: aten/src/ATen/native/BinaryOps.h:70 (cuda)" in page
    data = html.view_data(answer().to_json())
    assert data["view"] == "impact"


def test_a_unit_states_its_capability_only_when_it_is_a_copy():
    with pytest.raises(ValueError, match="capability"):
        RebuiltUnit("a.cpp", "cpp", "libtorch_cpu.so", 1.0, "AVX2")
    with pytest.raises(ValueError, match="kind"):
        RebuiltUnit("a.cpp", "c", "libtorch_cpu.so", 1.0)
