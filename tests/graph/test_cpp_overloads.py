"""Note [the C++ overload a call reaches]: a dispatcher call is resolved to
the overload of its operator that C++ overload resolution picks for its
arguments (`at::empty(sizes, self.options())` is empty.memory_format, not
empty.names). The C++ signatures are checked against the generated headers
the installed wheel ships; the overloads the calls reach against the native
stacks the installed torch ran (tests/golden/observed-cpu.jsonl.gz)."""

from __future__ import annotations

import collections
import re
from types import SimpleNamespace

from kernelmap import graph
from kernelmap.graph.overloads import _cpp_signatures, _parameter_type, _type_kind
from kernelmap.graph.rules import is_utility_op
from tests.golden.observed import kernel_operator_calls, load
from tests.graph.conftest import walk

_INLINE = re.compile(r"^inline [^(]*?\b(\w+)\((.*)\) \{$")


def _top_items(text: str) -> list[str]:
    """A C++ parameter list's parameters (`::std::array<bool,3> output_mask` is one)."""
    items, depth, current = [], 0, []
    for ch in text:
        depth += (ch in "([{<") - (ch in ")]}>")
        if ch == "," and depth == 0:
            items.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
    items.append("".join(current).strip())
    return [i for i in items if i]


def test_the_cpp_signatures_are_the_ones_torchgen_wrote_in_the_headers(context):
    """Every inline `at::<op>` function of the wheel's ATen/ops headers (the
    TensorOptions one, the faithful one, `_symint`, `_out` and `_outf`) is one
    of the signatures read from its schema: parameter kinds, order and defaults."""
    from kernelmap.catalog import load_catalog
    from kernelmap.codegen.headers import wheel_headers

    catalog, headers = load_catalog(), wheel_headers()
    assert headers is not None
    checked, wrong = 0, []
    for op in catalog:
        lines = headers.lines(f"ops/{op.name.name}.h")
        comment = f"// aten::{op.name.unqualified}("
        start = next((i for i, text in enumerate(lines) if text.startswith(comment)), None)
        if start is None:
            continue
        for text in lines[start + 1 : start + 60]:
            if text.startswith("//"):
                break
            m = _INLINE.match(text)
            if m is None:
                continue
            function, params = m.groups()
            declared = [(_type_kind(_parameter_type(p)), "=" in p) for p in _top_items(params)]
            mine = _cpp_signatures(op, SimpleNamespace(callee=f"at::{function}", name=function))
            checked += 1
            if not any(len(s) == len(declared) and all(d == hd and hk in (None, k) for (k, d), (hk, hd) in zip(s, declared)) for s in mine):
                wrong.append((str(op.name), function, params))
    assert checked > 2000, checked
    assert not wrong, wrong[:5]
    # the case the kinds were made for (2.6.0 has named tensors, 2.13 none): empty.names takes the names
    # where empty.memory_format takes the options
    empty = {str(o.name): _cpp_signatures(o, SimpleNamespace(callee="at::empty", name="empty")) for o in context("cpu").catalog.overloads("empty")}
    assert empty["aten::empty.memory_format"][0][1] == ("TensorOptions", True)
    assert empty["aten::empty.names"][0][1] == ("Dimname[]?", False)


def _callers_of(golden, struct: str) -> dict[str, set[str]]:
    """Entry operator -> the ATen functions (not a utility's own kernel) that
    call `at::_ops::<struct>::call` directly in its recorded stacks."""
    callers = collections.defaultdict(set)
    for op, stacks in golden.by_operator().items():
        for stack in stacks:
            real = [golden.frames[i] for i in stack if golden.frames[i].is_real]
            for caller, callee in zip(real, real[1:]):
                if callee.function == f"at::_ops::{struct}::call" and caller.function.startswith("at::native::") \
                        and not is_utility_op(caller.function.rsplit("::", 1)[-1], False):
                    callers[op].add(caller.function)
    return callers


def test_a_kernels_empty_is_the_overload_the_binary_ran(context, indexed_tree):
    """`at::empty({0}, input.options())` in adaptive_avg_pool2d_cpu (and the
    kernels the recording shows calling at::_ops::empty_memory_format::call)
    is empty.memory_format in the map, not the first-declared empty.names."""
    golden = load()
    callers = _callers_of(golden, "empty_memory_format")
    assert callers
    ctx = context("cpu")
    checked, wrong = [], []
    for op in sorted(callers)[:16]:
        try:
            tree = graph.stack(op, ctx, 40)
        except Exception:  # noqa: BLE001 - an operator 2.13 added (the tree is 2.6.0)
            continue
        for caller in sorted(callers[op]):
            called = {c.name for n, _ in walk(tree) if n.name == caller for c in n.children if c.name.startswith("aten::empty.")}
            if called:
                (checked if "aten::empty.memory_format" in called else wrong).append((op, caller, sorted(called)))
    assert not wrong, wrong
    assert len(checked) >= 5, checked
    # and each is a call the tree writes as `at::empty(` (or `empty(` in namespace at) at the line the map names
    for op, caller, _ in checked[:3]:
        tree = graph.stack(op, ctx, 40)
        for n, _ in walk(tree):
            if n.name == caller:
                for c in n.children:
                    if c.name == "aten::empty.memory_format":
                        site = c.attrs["call_site"]
                        text = (indexed_tree.root / site.path).read_text().splitlines()[site.line - 1]
                        assert re.search(r"(?<![\w.])(?:at::)?empty\s*\(", text), (caller, str(site), text)


def _operators_called(node) -> set[str]:
    """The operators a kernel's calls reach: its children's, through the
    generated header and `at::_ops::<op>::call` steps between them."""
    found, stack = set(), list(node.children)
    while stack:
        n = stack.pop()
        if n.name.startswith("aten::"):
            found.add(n.name)
        elif n.name.startswith(("at::_ops::", "at::Tensor::")) or (n.name.startswith("at::") and n.name.count("::") == 1):
            stack.extend(n.children)
    return found


def test_each_call_of_an_overloaded_operator_is_the_overload_the_binary_ran(context):
    """Of the calls the recording shows a kernel making to an operator of
    several overloads (at::max(a, b * c) in linalg_pinv: max.other, not
    max.dim; count_nonzero's `IntArrayRef{*dim}`: count_nonzero.dim_IntList),
    each the map shows reaches the overload that ran."""
    golden = load()
    ctx = context("cpu")
    calls = collections.defaultdict(set)
    for op, caller, ran in kernel_operator_calls(golden):
        if "." in ran and not is_utility_op(caller.rsplit("::", 1)[-1], False):
            calls[op].add((caller, ran))
    chosen = [op for op in sorted(calls) if op.startswith(("aten::linalg_pinv", "aten::count_nonzero", "aten::rms_norm", "aten::cdist", "aten::logdet"))]
    assert len(chosen) >= 4, chosen
    checked, wrong = [], []
    for op in chosen:
        tree = graph.stack(op, ctx, 40)
        for caller, ran in sorted(calls[op]):
            base = ran.split("::", 1)[1].split(".")[0]
            named = {o for n, _ in walk(tree) if n.name == caller for o in _operators_called(n) if o.split("::", 1)[1].split(".")[0] == base}
            if named:
                (checked if ran in named else wrong).append((op, caller, ran, sorted(named)))
    assert not wrong, wrong
    assert len(checked) >= 4, checked
