"""Documents of any depth render under a memory bound: what `render` holds
while it reads a saved call tree and draws it as text, JSON or HTML grows
with the document, never with the square of its depth (a 5 MB document of a
100,000-deep tree took ~24 GB: every line's guides grew with its depth)."""

from __future__ import annotations

import tracemalloc

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from kernelmap import answers
from kernelmap.render import render
from kernelmap.render.json import loads

# bytes held at the peak, per byte of the document, and a fixed allowance:
# measured at 12 (text), 63 (JSON, indented) and 25 (HTML) per byte, alike
# at depths 500 to 20,000
PER_BYTE = 100
FIXED = 4 << 20


def document(depth: int, fan: list[int], names: str) -> str:
    """A calltree/2 document: a chain `depth` deep, with `fan[i]` leaves beside level i."""
    parts = ['{"kernelmap":"calltree/2","kind":"stack","notes":[],"meta":{"kind":"stack"},"origins":{},"root":']
    closing = []
    for i in range(depth):
        leaves = "".join(f'{{"name":"{names}{i}.{j}","kind":"kernel","facts":{{}},"children":[]}},' for j in range(fan[i % len(fan)]))
        parts.append(f'{{"name":"{names}{i}","kind":"kernel","location":{{"path":"aten/src/f{i}.cpp","line":{i + 1}}},"facts":{{}},"children":[{leaves}')
        closing.append("]}")
    parts.append("".join(closing))
    parts.append("}")
    return "".join(parts).replace(",]", "]")


def peak_of(text: str, fmt: str) -> tuple[int, int]:
    tracemalloc.start()
    try:
        answer = answers.load(loads(text))
        out = render(answer, fmt, width=None, color=False)
        return tracemalloc.get_traced_memory()[1], len(out)
    finally:
        tracemalloc.stop()


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(depth=st.integers(1, 2500), fan=st.lists(st.integers(0, 3), min_size=1, max_size=5),
       names=st.sampled_from(["at::native::k", "n", "a\\nb"]), fmt=st.sampled_from(["text", "json"]))
@example(depth=4000, fan=[0], names="at::native::k", fmt="text")
@example(depth=4000, fan=[1], names="n", fmt="json")
def test_a_document_of_any_depth_renders_under_a_memory_bound(depth, fan, names, fmt):
    text = document(depth, fan, names)
    peak, size = peak_of(text, fmt)
    assert peak <= PER_BYTE * len(text) + FIXED, (depth, fmt, peak, len(text))
    assert size <= 200 * len(text) + 10_000  # what is written grows with the document too


def test_a_deep_document_s_html_is_bounded_too():
    text = document(3000, [1], "at::native::k")
    peak, _ = peak_of(text, "html")
    assert peak <= PER_BYTE * len(text) + FIXED


def test_deep_levels_say_their_level_instead_of_drawing_it():
    out = render(answers.load(loads(document(200, [0], "n"))), "text", width=None, color=False)
    lines = out.splitlines()
    deepest = next(line for line in lines if "n199" in line)
    assert "[level 199] n199" in deepest and len(deepest) < 400
    assert all(len(line) < 400 for line in lines)
