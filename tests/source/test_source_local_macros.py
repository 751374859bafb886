"""Note [calls in function-local macros], and launches placed among the calls:
what the real 2.6.0 files write inside a `#define` in a function's body is
that function's, each call at the `#define` line that holds its name, under
the body's own conditions. Lines and conditions are read from the files."""

from __future__ import annotations

import re

import pytest

from kernelmap.source import extract, masking
from kernelmap.source.facts import read_operator_names


@pytest.fixture(scope="module")
def extractor(tree_2_6):
    return extract.Extractor(read_operator_names(tree_2_6 / "aten/src/ATen/native/native_functions.yaml"))


def _facts(extractor, root, path):
    return extractor.extract(path, (root / path).read_bytes()), (root / path).read_text().splitlines()


def _defined_in(facts, call):
    return facts.definitions[call.definition].name if call.definition >= 0 else None


def test_a_call_written_in_a_local_macro_is_its_functions_at_the_define_line(extractor, tree_2_6):
    facts, lines = _facts(extractor, tree_2_6, "aten/src/ATen/native/cuda/Sort.cu")
    define = next(i for i, line in enumerate(lines, 1) if line.startswith("#define HANDLE_SORT_CASE("))
    written = next(i for i in range(define, define + 3) if "sorter.template sort<A>(" in lines[i - 1])
    calls = [c for c in facts.calls if c.short == "sort" and c.line == written]
    assert len(calls) == 1 and _defined_in(facts, calls[0]) == "at::native::sortCommon"
    # MediumRadixSort::sort's HANDLE_CASE calls fixed_size_sort, at the line that names it
    fixed = [c for c in facts.calls if c.short == "fixed_size_sort"]
    assert fixed and all("fixed_size_sort<" in lines[c.line - 1] for c in fixed)
    assert {_defined_in(facts, c) for c in fixed} == {"at::native::MediumRadixSort::sort"}


def test_launches_in_a_local_macro_take_their_branch_of_its_body(extractor, tree_2_6):
    facts, lines = _facts(extractor, tree_2_6, "aten/src/ATen/native/cuda/Shape.cu")
    launches = {c.short: c for c in facts.calls if c.kind == "launch" and c.short.startswith("CatArrayBatchedCopy")}
    assert set(launches) == {"CatArrayBatchedCopy_aligned16_contig", "CatArrayBatchedCopy_contig", "CatArrayBatchedCopy"}
    for name, call in launches.items():
        assert re.search(rf"\b{name}<", lines[call.line - 1]) and _defined_in(facts, call).endswith("::parallel_cat")
    first = re.search(r"#define HANDLE_CASE\(DIMS\) \\\n\s*if \((.*)\) \{\\", "\n".join(lines)).group(1)
    assert launches["CatArrayBatchedCopy_aligned16_contig"].condition == f"if ({first})"
    assert launches["CatArrayBatchedCopy_contig"].condition == "if (isContig)"
    assert launches["CatArrayBatchedCopy"].condition == "else of if (isContig)"
    # the blanked `<<<\` kept its continuation: the directive did not end there and leave a function named `if`
    assert not any(d.short == "if" for d in facts.definitions)


def test_a_launch_keeps_the_if_directive_around_it(extractor, tree_2_6):
    facts, lines = _facts(extractor, tree_2_6, "aten/src/ATen/native/cuda/EmbeddingBackwardKernel.cu")
    (call,) = [c for c in facts.calls if c.kind == "launch" and c.short == "write_num_of_segments_for_legacy_thrust_path"]
    opened = max(i for i in range(1, call.line) if lines[i - 1].startswith("#if"))
    assert lines[opened - 1].split(None, 1)[1].strip() == call.preproc == "!CUB_SUPPORTS_UNIQUE_BY_KEY()"
    assert not any(lines[i - 1].startswith("#endif") for i in range(opened, call.line))


def test_blanking_keeps_line_continuations():
    text = b"#define LAUNCH(k) \\\n  k<<<\\\n    grid, block>>>(x)\nint y;\n"
    masked = masking.mask_attributes(text)
    assert len(masked) == len(text) and masked.count(b"\\\n") == text.count(b"\\\n") == 2
    assert b"grid" not in masked and masked.endswith(b"int y;\n")


def test_a_call_of_a_macros_own_parameter_names_nothing(extractor):
    """`#define M(fn, y) fn(y); helper(y)`: `fn` is whatever each use passes."""
    text = b"void g() {\n#define M(fn, y) fn(y); helper(y)\n  M(a, b);\n}\n"
    assert [(c.callee, c.line) for c in extractor.extract("x.cpp", text).calls] == [("helper", 2)]


def test_many_local_macros_with_launches_stay_within_budget(extractor):
    """Launches in thousands of local macros: each launch is looked up among the
    macro bodies by bisection, and at most _MAX_LOCAL_MACROS_READ bodies are
    parsed on their own; the rest keep their launches from the function's text."""
    n = 4000
    # each macro used by the function (a macro it never uses launches nothing of its own)
    body = b"".join(b"#define L%d(x) k%d<<<1, 1>>>(x)\n" % (i, i) for i in range(n)) + b"".join(b"  k%d<<<1, 1>>>(y);\n" % i for i in range(n)) \
        + b"".join(b"  L%d(y);\n" % i for i in range(n))
    f = extractor.extract("x.cu", b"void g() {\n" + body + b"}\n")
    assert f.skipped is None
    launches = [c for c in f.calls if c.kind == "launch"]
    assert len(launches) == 2 * n and {c.short for c in launches} == {f"k{i}" for i in range(n)}
