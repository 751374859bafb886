"""Property test of the sweep (Note [regions]): on random nestings of
namespaces, functions, if/else, switch cases and #if/#ifdef/#else, every
call's definition, case/if condition and preprocessor condition are those
found by climbing the syntax tree from the call itself, an independent
reading. The sweep reuses a point's context for the next points while its
stack is unchanged; this checks that reuse against the climb."""

from __future__ import annotations

import itertools

import pytest
import tree_sitter
import tree_sitter_cpp
from hypothesis import given
from hypothesis import strategies as st

from kernelmap.source import extract
from kernelmap.source.facts import OperatorNames
from kernelmap.source.regions import _context_of, _negate, _preproc_of, _sweep

PARSER = tree_sitter.Parser(tree_sitter.Language(tree_sitter_cpp.language()))
CONDITIONS = ["A", "B > 1", "defined(C)"]
MACROS = ["USE_X", "USE_Y"]


@pytest.fixture(scope="module")
def extractor():
    return extract.Extractor(OperatorNames(frozenset(), frozenset()), budget=5.0)


@st.composite
def statements(draw, names, depth: int) -> str:
    out = []
    for _ in range(draw(st.integers(0 if depth else 1, 4))):
        kind = draw(st.sampled_from(["call", "call", "if", "switch", "pp"] if depth < 4 else ["call"]))
        if kind == "call":
            out.append(f"g{next(names)}(x);")
        elif kind == "if":
            cond = draw(st.sampled_from(["x", "n > 2", "ok(y)"]))
            then = draw(statements(names, depth + 1))
            other = draw(st.none() | statements(names, depth + 1))
            out.append(f"if ({cond}) {{\n{then}\n}}" + (f" else {{\n{other}\n}}" if other is not None else ""))
        elif kind == "switch":
            cases = [f"case {k}: {{\n{draw(statements(names, depth + 1))}\n}} break;" for k in range(draw(st.integers(1, 3)))]
            if draw(st.booleans()):
                cases.append(f"default:\n{draw(statements(names, depth + 1))}")
            out.append("switch (k) {\n" + "\n".join(cases) + "\n}")
        else:
            out.append(_directive(draw, lambda: draw(statements(names, depth + 1))))
    return "\n".join(out)


def _directive(draw, body) -> str:
    opening = draw(st.sampled_from([f"#if {c}" for c in CONDITIONS] + [f"#ifdef {m}" for m in MACROS] + [f"#ifndef {m}" for m in MACROS]))
    text = f"{opening}\n{body()}\n"
    if draw(st.booleans()):
        text += f"#else\n{body()}\n"
    return text + "#endif"


@st.composite
def files(draw) -> str:
    names = itertools.count()
    functions = itertools.count()

    def items(depth: int) -> str:
        out = []
        for _ in range(draw(st.integers(1, 3))):
            kind = draw(st.sampled_from(["function", "function", "namespace", "pp"] if depth < 3 else ["function"]))
            if kind == "function":
                out.append(f"void f{next(functions)}(int x) {{\n{draw(statements(names, 0))}\n}}")
            elif kind == "namespace":
                out.append(f"namespace n{depth} {{\n{items(depth + 1)}\n}}")
            else:
                out.append(_directive(draw, lambda: items(depth + 1)))
        return "\n".join(out)

    return items(0) + "\n"


def _label(text: bytes) -> str:
    return " ".join(text.decode().split())


def _climb(call) -> tuple[str | None, str | None, str | None]:
    """(enclosing function's name, innermost case/if inside it, #if conditions
    outer to inner) of a call node, read from its ancestors."""
    condition = None
    preproc: list[str] = []
    function = None
    node = call
    while node.parent is not None:
        parent = node.parent
        if function is None and condition is None:
            if parent.type == "case_statement":
                value = parent.child_by_field_name("value")
                condition = f"case {_label(value.text)}" if value is not None else "default"
            elif parent.type == "if_statement" and node == parent.child_by_field_name("consequence"):
                condition = f"if {_label(parent.child_by_field_name('condition').text)}"
            elif node.type == "else_clause" and parent.type == "if_statement":
                condition = f"else of if {_label(parent.child_by_field_name('condition').text)}"
        if parent.type == "function_definition" and function is None:
            function = parent.child_by_field_name("declarator").child_by_field_name("declarator").text.decode()
        if parent.type in ("preproc_if", "preproc_ifdef"):
            if parent.type == "preproc_if":
                cond = _label(parent.child_by_field_name("condition").text)
            else:
                name = parent.child_by_field_name("name").text.decode()
                cond = f"!defined({name})" if parent.child(0).type == "#ifndef" else f"defined({name})"
            preproc.append(_negate(cond) if node == parent.child_by_field_name("alternative") else cond)
        node = parent
    return function, condition, " && ".join(reversed(preproc)) or None


def _calls_of(node, out):
    if node.type == "call_expression":
        function = node.child_by_field_name("function")
        if function is not None and function.text.startswith(b"g"):
            out[function.text.decode()] = node
    for child in node.children:
        _calls_of(child, out)
    return out


@given(files())
def test_each_call_has_the_context_its_ancestors_give(extractor, text):
    data = text.encode()
    tree = PARSER.parse(data)
    if tree.root_node.has_error:  # the oracle reads a clean tree only
        return
    facts = extractor.extract("aten/src/ATen/native/X.cpp", data)
    found = {c.callee: c for c in facts.calls if c.callee.startswith("g")}
    expected = _calls_of(tree.root_node, {})
    assert set(found) == set(expected)
    for name, node in expected.items():
        call = found[name]
        function, condition, preproc = _climb(node)
        assert (facts.definitions[call.definition].short if call.definition >= 0 else None) == function, (name, text)
        assert call.condition == condition, (name, text)
        assert call.preproc == preproc, (name, text)


@st.composite
def regions_and_points(draw):
    """Regions that nest, as syntax does, and preprocessor-like ones that may
    cross them; points anywhere."""
    regions = []

    def nest(start: int, end: int, depth: int) -> None:
        # up to three regions side by side, each nesting its own: trees of
        # every tag five deep, with points in each (see `places`)
        count = draw(st.integers(0, 3)) if depth < 5 else 0
        width = (end - start) // max(count, 1)
        for k in range(count):
            s = start + k * width + draw(st.integers(0, 1))
            e = start + (k + 1) * width - draw(st.integers(0, 1))
            if e - s < 1:
                break
            tag = draw(st.sampled_from(("scope", "class", "cond", "def", "lambda", "lib", "pp")))
            regions.append((s, e, tag, f"c{len(regions)}" if tag == "pp" else len(regions)))
            nest(s, e, depth + 1)
    nest(0, 200, 0)
    for _ in range(draw(st.integers(0, 6))):  # crossing
        s = draw(st.integers(0, 199))
        regions.append((s, draw(st.integers(s + 1, 200)), "pp", f"c{len(regions)}"))
    # every place, so that each region holds points, and drawn ones (repeats, kinds)
    places = [*range(200), *draw(st.lists(st.integers(0, 199), max_size=60))]
    points = [(at, draw(st.integers(0, 1)), None) for at in places]
    return regions, points


@given(regions_and_points())
def test_the_sweep_gives_each_point_exactly_the_regions_around_it(case):
    regions, points = case
    order = sorted(regions, key=lambda r: (r[0], -r[1]))
    previous = None
    for at, _, _, context in _sweep(list(regions), list(points)):
        live = context[0]
        assert live == [r for r in order if r[0] <= at < r[1]], at
        # what the context says, built region by region, is what reading all of them says
        def_index, cond, lib, lam, around = _context_of(live)
        assert context[1:] == (min((r[1] for r in live), default=float("inf")), _preproc_of(live), def_index, cond, lib, lam,
                               tuple(around)), at
        if previous is not None and context is previous[1]:
            assert previous[0] <= at  # a context is reused only for points in order
        previous = (at, context)
