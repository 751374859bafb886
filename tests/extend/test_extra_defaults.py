"""`scaffold --extra`: a default torch's schema parser cannot read is refused
with one line, before a project is written whose m.def torch would reject;
the ground truth is torch._C.parse_schema itself."""

from __future__ import annotations

import pytest

from kernelmap.errors import BadInput
from kernelmap.extend.schema import parse_extra

EXTRAS = [
    "float s=abc", "float s=--1", "float s=1.0.0", "str s=x", "float s=nan", "Tensor s=1", "float s=1e999",
    "float s=1.5", "float s=-2e-3", "int k=2", "int k=-7", "bool b=False", "str m=\"mean\"", "int[2] p=1", "int[] q=[1, 2]",
    "float? f=None", "Scalar a=1", "Scalar a=0.5", "Tensor? t=None", "int? k=None",
]


@pytest.mark.parametrize("extra", EXTRAS)
def test_an_extra_default_is_accepted_exactly_when_torch_reads_it(extra):
    import torch

    try:
        torch._C.parse_schema(f"myop(Tensor self, *, {extra}) -> Tensor")
        torch_reads = True
    except (RuntimeError, IndexError):  # IndexError: `stod` out of range (1e999)
        torch_reads = False
    try:
        parse_extra([extra])
        accepted = True
    except BadInput:
        accepted = False
    assert accepted == torch_reads, (extra, torch_reads)
