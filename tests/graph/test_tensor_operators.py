"""Note [operators written as C++ operators] in graph.sites: `x * scale`,
`a + b`, `t == 1`, `x + EPSILON` and `.item<T>()` on a Tensor are operator
calls, each the overload the definition in the tree's TensorOperators.h (or
TensorBody.h) reaches. The table is checked against the headers' text; the
calls against the native stacks the installed torch ran
(tests/golden/observed-cpu.jsonl.gz): where a kernel's recorded stack calls
`at::_ops::<op>::call` from a line that writes the operator as a C++
operator, the map shows that overload under the kernel, at that line."""

from __future__ import annotations

import collections
import re

from kernelmap import graph
from kernelmap.graph import sites
from kernelmap.graph.code import tree_lines
from tests.golden.observed import kernel_operator_calls, load
from tests.graph.conftest import walk

# what a C++ operator on a Tensor, or `.item`, is written as, by the method its definition calls
_SPELLED = {"add": r"\+(?!=)", "sub": r"-(?![=>])", "mul": r"\*(?!=)", "div": r"/(?!=)", "eq": "==", "ne": "!=", "gt": r">(?!=)",
            "lt": r"<(?!=)", "ge": ">=", "le": "<=", "item": r"\.\s*item\s*(?:<[^<>]*>)?\s*\(\s*\)"}


def test_the_operator_table_is_the_one_the_headers_define(indexed_tree):
    """Each `_(op, x.method(y), reverse)` entry of TensorOperators.h, and each
    compound assignment TensorBody.h defines, is in the table as written."""
    root = indexed_tree.root
    header = (root / "aten/src/ATen/TensorOperators.h").read_text()
    binary, compound = sites._operator_table(str(root))
    block = " ".join(header.split("#define AT_FORALL_BINARY_OPS(_)")[1].split("#define DEFINE_OPERATOR")[0].replace("\\\n", " ").split())
    entries = re.findall(r"_\((\S+?), x\.(\w+)\(y\), (.*?)\)(?= _\(|$)", block)
    assert len(entries) >= 14, entries
    for operator, method, reverse in entries:
        assert binary[operator][0] == (method, "y"), operator
        assert [name for name, _ in binary[operator][1]] == re.findall(r"(?:::|\.)(\w+)\(", reverse + ")"), operator
    assert binary["-"][1] == (("empty_like", "y"), ("fill_", "x"), ("sub_", "y"))  # `1 - x`
    body = (root / "aten/src/ATen/templates/TensorBody.h").read_text()
    written = re.findall(r"Tensor& operator([-+*/&|^]=)\(const (Tensor|Scalar) & other\) \{\s*return (\w+)\(other\);", body)
    assert len(written) >= 10, written
    assert compound == {(o, kind): method for o, kind, method in written}


def _operator_calls(golden) -> dict[str, set[tuple[str, str]]]:
    """Entry operator -> (ATen kernel, overload) of the recorded direct calls
    of a kernel to an overload whose method a C++ operator calls (or to item)."""
    calls = collections.defaultdict(set)
    for op, caller, ran in kernel_operator_calls(golden):
        if ran.split("::", 1)[1].split(".")[0] in _SPELLED:
            calls[op].add((caller, ran))
    return calls


def test_a_kernels_cpp_operators_are_the_overloads_the_binary_ran(context, indexed_tree):
    """`x1 - x2 + eps` in pairwise_distance (sub.Tensor, then add.Scalar),
    `atol + (rtol * other).abs()` in isclose (a Scalar on the left: y.add(x)
    and y.mul(x), the .Scalar overloads), `(input1 * input1).sum(dim) +
    EPSILON` in cosine_embedding_loss, `self.abs() == infinity()` in isinf,
    `sign == -1.` of `auto [sign, logabsdet] = at::linalg_slogdet(A)` in
    logdet, `counts == 0` of `auto counts = include_self ? at::ones_like(r)
    : ...` in index_reduce, `self.reshape_symint(...) * vec2` in outer,
    `pivots.gt(0).all().item<bool>()` in lu_solve_kernel: each recorded call
    is named under its kernel, as the overload that ran, at a line that
    writes it as the C++ operator (or `.item`)."""
    golden = load()
    calls = _operator_calls(golden)
    kernels_of = {"aten::pairwise_distance": "pairwise_distance", "aten::isclose": "isclose", "aten::cosine_embedding_loss": "cosine_embedding_loss",
                  "aten::isinf": "isinf", "aten::special_ndtr": "calc_ndtr", "aten::allclose": "allclose", "aten::lu_solve": "lu_solve_kernel",
                  "aten::logdet": "logdet", "aten::index_reduce": "index_reduce_func_impl", "aten::outer": "outer"}
    chosen = [op for op in sorted(calls) if op in kernels_of]
    assert len(chosen) >= 9, chosen
    ctx = context("cpu")
    found, missing = [], []
    for op in chosen:
        tree = graph.stack(op, ctx, 40)
        for caller, ran in sorted(calls[op]):
            if caller != f"at::native::{kernels_of[op]}":
                continue  # at::native::add's own at::add(self, wrapped_scalar_tensor(other)): no C++ operator
            kernels = [n for n, _ in walk(tree) if n.name == caller]
            if not kernels:
                continue
            method = ran.split("::", 1)[1].split(".")[0]
            at = [(c.attrs["call_site"], c.name) for n in kernels for c in n.children if c.attrs.get("call_site") is not None
                  and (c.name == ran or c.name.startswith(("at::Tensor::", "at::_ops::")) and any(g.name == ran for g, _ in walk_node(c)))]
            spelled = [site for site, _ in at if re.search(_SPELLED[method], (indexed_tree.root / site.path).read_text().splitlines()[site.line - 1])]
            (found if spelled else missing).append((op, caller, ran))
    assert not missing, missing
    assert len(found) >= 15, found
    assert any(ran.endswith(".Scalar") for _, _, ran in found) and any(ran.endswith(".Tensor") for _, _, ran in found), found
    assert any(ran == "aten::item" for _, _, ran in found), found


def walk_node(node):
    stack = [(node, ())]
    while stack:
        n, path = stack.pop()
        yield n, path
        stack.extend((c, ()) for c in n.children)


def test_numbers_written_with_operators_are_no_calls(context, indexed_tree):
    """`output_dim - 1` of `auto output_dim = x1_dim > x2_dim ? ...` (ints)
    in pairwise_distance is no call: only the line that subtracts the
    Tensors is read, with one call per operator on it."""
    ctx = context("cpu")
    definition = ctx.index.definitions("at::native::pairwise_distance")[0]
    lines = tree_lines(ctx, definition.location.path)
    found = sites._operator_sites(definition, ctx.index.calls_from(definition), None, ctx)
    body = range(definition.location.line, definition.location.end_line + 1)
    arithmetic = [n for n in body if re.search(r"\w\s*[-+>]\s*\w", lines[n - 1]) and "Tensor" not in lines[n - 1]]
    assert len(arithmetic) >= 2, arithmetic  # the ints' lines are there to be misread
    assert [(s.location.line, s.op) for s in found] == [(n, op) for n in body if "x1 - x2 + eps" in lines[n - 1]
                                                       for op in ("sub.Tensor", "add.Scalar")]


def test_operators_on_vectorized_values_are_no_calls(context, indexed_tree):
    """elu_kernel's Vectorized lambda writes `((a * negiptcoef_vec).exp() -
    one_vec) * negcoef_vec` on a `Vec a`: Vectorized's operators, no Tensor's,
    though the index reads `.exp()` as a method named like an operator. The
    recorded elu stacks call no operator below the kernel, and the map names
    none there."""
    golden = load()
    ran = {golden.frames[i].function for stack in golden.by_operator()["aten::elu"] for i in stack}
    called = {f.split("::")[2] for f in ran if re.fullmatch(r"at::_ops::\w+::(call|redispatch)", f)}
    assert called == {"elu"}, sorted(ran)
    ctx = context("cpu")
    kernel = next(d for d in ctx.index.definitions("elu_kernel") if d.location.path.endswith("native/cpu/Activation.cpp"))
    lines = tree_lines(ctx, kernel.location.path)
    assert any("(a * negiptcoef_vec).exp() - one_vec" in lines[n - 1] for n in range(kernel.location.line, kernel.location.end_line + 1))
    assert sites._operator_sites(kernel, ctx.index.calls_from(kernel), None, ctx) == []
    tree = graph.stack("aten::elu", ctx, 40)
    methods = {m for forward, reverse in sites._operator_table(str(indexed_tree.root))[0].values() for m, _ in (forward, *reverse)}
    below = sorted(n.name for n, _ in walk(tree) if n.name.startswith("aten::") and n.name.split("::")[1].split(".")[0] in methods)
    assert not below, below
