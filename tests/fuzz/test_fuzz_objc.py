"""Property tests of the Objective-C++ rewriting: any text keeps its length and
its newlines (so every line the index names is the file's), and the extractor
given it as an .mm file returns facts or a skip reason, never an exception."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from kernelmap.source import objc

from .test_fuzz_extract import _check, extractor, mutated  # noqa: F401 (a fixture)

TOKENS = [
    "[", "]", "(", ")", "{", "}", "@", "@[", "@{", "@(", '@"s"', "@1", "@-", "@autoreleasepool", "@interface", "@protocol",
    "@implementation", "@end", "@class", "@selector(", "@available(", "^", "^(", "^T*", "(^", "- (void)", "+ (id)", "x", "sel:",
    "sel", ":", "::", ",", ";", "=", "return", "for (id x in xs)", "__bridge", "API_AVAILABLE(ios(1))", "\n", " ", '"', "'",
    "//", "/*", "*/", "<", ">", "namespace at {", "void f() {", "g(x)", "\\\n", "#if X\n", "#endif\n",
]


def _same_shape(before: bytes, after: bytes) -> None:
    assert len(after) == len(before)
    assert [i for i, b in enumerate(after) if b == 10] == [i for i, b in enumerate(before) if b == 10]


@given(st.lists(st.sampled_from(TOKENS), max_size=200))
def test_token_soup_keeps_its_shape_and_gives_facts(extractor, tokens):  # noqa: F811
    data = " ".join(tokens).encode()
    _same_shape(data, objc.rewrite(data))
    _check(extractor.extract("aten/src/ATen/native/mps/Fuzz.mm", data), data)


@given(st.binary(max_size=2000))
def test_arbitrary_bytes_keep_their_shape(data):
    _same_shape(data, objc.rewrite(data))


@given(st.data())
def test_mutations_of_a_real_mps_file(extractor, tree_2_6, data):  # noqa: F811
    blob = mutated((Path(tree_2_6) / "aten/src/ATen/native/mps/operations/BinaryOps.mm").read_bytes(), data)
    _same_shape(blob, objc.rewrite(blob))
    facts = extractor.extract("aten/src/ATen/native/mps/operations/BinaryOps.mm", blob)
    if facts.skipped is None:
        _check(facts, blob)
