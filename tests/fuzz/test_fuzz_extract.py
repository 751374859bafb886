"""Property tests of the C++ extractor: any text (C++-like token soup,
arbitrary bytes, mutations of real files) gives facts or a skip reason, never
an exception, and every fact it gives points inside the file at a line that
holds its name."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernelmap.source import extract, masking
from kernelmap.source.facts import OperatorNames

TOKENS = [
    "namespace", "at", "native", "{", "}", "(", ")", "<", ">", ";", "::", "template", "typename", "class", "struct",
    "void", "Tensor", "f", "g", "x", "=", "return", "if", "else", "switch", "case", "1", ":", "#if X\n", "#else\n",
    "#endif\n", "\n", " ", ",", "&", "*", "DEFINE_DISPATCH(s_stub);", "REGISTER_DISPATCH(s_stub, &k);",
    "TORCH_IMPL_FUNC(add_out)", "at::add(x, x)", "k<<<1, 2>>>(x)", "cudnnConvolutionForward(h)", '"', "'", "/*", "*/", "//",
    "\\\n", "AT_DISPATCH_FLOATING_TYPES(t, \"n\", [&] {", "TORCH_LIBRARY_IMPL(aten, CPU, m) {", "m.impl(\"add\", k);",
]


@pytest.fixture(scope="module")
def extractor():
    return extract.Extractor(OperatorNames(frozenset({"add"}), frozenset()), budget=5.0)


def _check(facts, data: bytes) -> None:
    lines = data.split(b"\n")
    n = len(lines)
    for d in facts.definitions:
        assert 1 <= d.line <= d.end_line <= n, d
        text = b"\n".join(lines[d.line - 1 : d.end_line])
        # A name pasted from a macro's argument (`op##_kernel`) is at that argument's line.
        pasted = any(len(w) > 1 and w in d.short.encode() for w in re.findall(rb"\w+", text))
        assert d.short.encode() in text or d.kind.startswith("structured") or pasted, d
    for c in facts.calls:
        assert 1 <= c.line <= n, c
        assert -1 <= c.definition < len(facts.definitions)
    for r in facts.registrations:
        assert 1 <= r.line <= n, r
    for s in facts.stubs:
        assert 1 <= s.line <= n, s


@given(st.lists(st.sampled_from(TOKENS), max_size=300))
def test_token_soup(extractor, tokens):
    data = " ".join(tokens).encode()
    _check(extractor.extract("aten/src/ATen/native/Fuzz.cpp", data), data)


@given(st.binary(max_size=2000))
def test_arbitrary_bytes(extractor, data):
    facts = extractor.extract("aten/src/ATen/native/cuda/Fuzz.cu", data)
    if facts.skipped is None:
        _check(facts, data)


def mutated(real: bytes, data) -> bytes:
    """`real` with up to 8 spans cut and replaced by random bytes, drawn from `data`."""
    cuts = data.draw(st.lists(st.tuples(st.integers(0, len(real)), st.integers(0, 200), st.binary(max_size=20)), max_size=8))
    out = bytearray(real)
    for at, drop, insert in cuts:
        at = min(at, len(out))
        out[at : at + drop] = insert
    return bytes(out)


@given(st.data())
def test_mutations_of_a_real_file(extractor, tree_2_6, data):
    blob = mutated((Path(tree_2_6) / "aten/src/ATen/native/BinaryOps.cpp").read_bytes(), data)
    facts = extractor.extract("aten/src/ATen/native/BinaryOps.cpp", blob)
    if facts.skipped is None:
        _check(facts, blob)


LIST_PIECES = [",", "(", "=", "\n", "\r\n", " ", "\t", "#", "# ", "if", "ifdef X", "else", "endif", "x", "{", "}", ";", "a(b,"]


@given(pieces=st.lists(st.sampled_from(LIST_PIECES), max_size=40))
def test_the_list_branch_prefilter_never_hides_a_match(pieces):
    """Masking skips the list-branch regex where the cheap test says no `#if`
    can start one: wherever the regex matches, the test says yes."""
    data = "".join(pieces).encode()
    if masking._LIST_BRANCH.search(data):
        assert masking._may_have_list_branch(data)


@given(before=st.sampled_from(["f(a,", "g(", "x =", "v = {1,"]), pad=st.sampled_from(["", " ", "\t "]),
       directive=st.sampled_from(["#if A", "# if A", "#ifdef A", "#  ifndef A"]), items=st.lists(st.sampled_from(["b,", "c)", "d;"]), min_size=1, max_size=3),
       other=st.booleans())
def test_the_list_branch_prefilter_sees_every_list_branch(before, pad, directive, items, other):
    text = f"{before}{pad}\n{pad}{directive}\n" + "".join(f"  {i}\n" for i in items) + ("#else\n  e,\n" if other else "") + "#endif\n"
    data = text.encode()
    assert masking._LIST_BRANCH.search(data)  # the case the regex is for
    assert masking._may_have_list_branch(data)
