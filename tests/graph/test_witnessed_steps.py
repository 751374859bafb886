"""Steps the binary runs that the static map left out (issue "Witness it",
the static map graded on the runtime golden set): each rule's ground truth is
read from the recorded native stacks of torch 2.13.0
(tests/golden/observed-cpu.jsonl.gz) and from the 2.6.0 tree's files, never
copied in."""

from __future__ import annotations

import re

from kernelmap import graph
from kernelmap.graph.sites import forwarder
from tests.golden.observed import load
from tests.graph.conftest import walk


def observed_below(op: str, function: str) -> set[str]:
    """The functions the recorded stacks of `op` show called right below
    `function` (graded frames: real code, outside set-up)."""
    golden = load()
    out: set[str] = set()
    for stack in golden.by_operator()[op]:
        frames, _ = golden.graded(stack)
        for caller, callee in zip(frames, frames[1:]):
            if caller.function == function:
                out.add(callee.function)
    return out


def subtree_names(node) -> set[str]:
    names, stack = set(), [node]
    while stack:
        n = stack.pop()
        names.add(n.name)
        stack.extend(n.children)
    return names


def subtree_nodes(node) -> list:
    out, stack = [], [node]
    while stack:
        n = stack.pop()
        out.append(n)
        stack.extend(n.children)
    return out


def first(tree, name: str):
    return next((n for n, _ in walk(tree) if n.name == name), None)


def definition(node, ctx):
    """The index's definition a node names."""
    return next(d for d in ctx.index.definitions(node.name) if (d.location.path, d.location.line) == (node.location.path, node.location.line))


def short(name: str) -> str:
    return name.rsplit("::", 1)[-1]


def test_a_stub_kernels_own_helpers_are_steps(context):
    """lu_factor_kernel (reached through lu_factor_stub) dispatches on the
    dtype to apply_lu_factor, which the binary inlines into it: the helpers
    it calls (batchCount, matrixStride in LinearAlgebraUtils.h) are frames
    right below lu_factor_kernel in the recorded stacks, and steps below it
    in the map."""
    seen = {f for f in observed_below("aten::linalg_lu_factor_ex", "at::native::lu_factor_kernel") if f.startswith("at::native::")}
    assert seen, "the recorded stacks show no helper of lu_factor_kernel"
    tree = graph.stack("aten::linalg_lu_factor_ex", context("cpu"), 40)
    kernel = next(n for n, path in walk(tree) if n.name.endswith("::lu_factor_kernel") and any(p.kind == "stub" for p in path))
    body = kernel.location.disk_path.read_text().splitlines()[kernel.location.line - 1 : kernel.location.end_line]
    assert any(re.search(r"AT_DISPATCH_\w+", line) for line in body) and forwarder(definition(kernel, context("cpu")), context("cpu"))
    named = {short(n) for n in subtree_names(kernel)}
    assert {short(f) for f in seen} <= named, sorted({short(f) for f in seen} - named)


def test_a_forwarder_uses_up_no_helper_level(context):
    """at::native::resize_output is one line, `return _resize_output(output,
    shape);` (read from Resize.cpp), and the binary folds _resize_output into
    it: below resize_output the recorded stacks show _resize_output_check,
    a helper two calls down in the source, which the map names."""
    seen = observed_below("aten::addbmm", "at::native::resize_output")
    assert "at::native::_resize_output_check" in seen
    tree = graph.stack("aten::addbmm", context("cpu"), 40)
    node = next((n for n, _ in walk(tree) if n.name == "at::native::resize_output" and not n.attrs.get("repeat")), None)
    assert node is not None
    text = "\n".join(node.location.disk_path.read_text().splitlines()[node.location.line - 1 : node.location.end_line])
    assert re.search(r"\{\s*return\s+_resize_output\(", text) and forwarder(definition(node, context("cpu")), context("cpu"))
    assert "at::native::_resize_output_check" in subtree_names(node)


def test_a_view_spelled_otherwise_is_followed_to_the_view_it_calls(context):
    """mT is a view with a CompositeImplicitAutograd kernel (native_functions.yaml);
    cholesky's cloneBatchedColumnMajor calls it, and the recorded stacks
    run at::native::mT and its _adjoint below `at::_ops::mT::call`: the map
    follows it there (the transpose it calls stays a utility)."""
    ctx = context("cpu")
    op = ctx.catalog.resolve("aten::mT")[0]
    assert op.is_view and op.kind.value == "composite implicit"
    seen = observed_below("aten::cholesky", "at::_ops::mT::call") | observed_below("aten::cholesky", "at::native::mT")
    assert {"at::native::mT", "at::native::_adjoint"} <= seen
    tree = graph.stack("aten::cholesky", ctx, 40)
    node = first(tree, "aten::mT")
    assert node is not None and not node.attrs.get("utility")
    names = {short(n) for n in subtree_names(node)}
    assert {"mT", "_adjoint"} <= names


def test_a_views_copy_runs_its_generated_kernel(context):
    """t_copy's kernel is torchgen's (CompositeViewCopyKernels.cpp, read from
    the generated files): it calls the view through `at::_ops::t::call` and
    clones what it shows. The recorded stacks run at::native::t_copy and
    below it t's entry and kernel; the map names the generated kernel at its
    line and follows the operators its body calls."""
    ctx = context("cpu")
    path = "build/aten/src/ATen/CompositeViewCopyKernels.cpp"
    lines = (ctx.generated.root / path).read_text().splitlines()
    start = next(i for i, t in enumerate(lines) if re.match(r"at::Tensor t_copy\(", t))
    body = "\n".join(lines[start : start + 4])
    called = set(re.findall(r"at::_ops::(\w+)::call", body))
    assert called == {"t"} and ".clone(" in body
    assert {"at::native::t_copy"} <= observed_below("aten::t_copy", "at::_ops::t_copy::redispatch")
    assert "at::_ops::t::call" in observed_below("aten::t_copy", "at::native::t_copy")
    tree = graph.stack("aten::t_copy", ctx, 40)
    kernel = first(tree, "at::native::t_copy")
    assert kernel is not None and kernel.location.path == path and kernel.location.line == start + 1
    names = subtree_names(kernel)
    assert {"at::_ops::t::call", "aten::t", "at::native::t", "aten::clone", "at::native::clone"} <= names


def test_an_out_calls_meta_function_resizes_the_given_output(context):
    """linalg_det's kernel calls linalg_lu_factor_ex.out; its CPU wrapper
    instantiates a generated structured class whose set_output_raw_strided
    calls resize_out, which calls at::native::resize_output (both read from
    RegisterCPU.cpp). The recorded stacks show resize_output right below the
    meta function; the map names it there, at resize_out's line."""
    ctx = context("cpu")
    seen = observed_below("aten::linalg_det", "at::meta::structured_linalg_lu_factor_ex::meta")
    assert "at::native::resize_output" in seen
    tree = graph.stack("aten::linalg_det", ctx, 40)
    meta = first(tree, "at::meta::structured_linalg_lu_factor_ex::meta")
    step = next(c for c in meta.children if c.name == "at::native::resize_output")
    site = step.attrs["call_site"]
    lines = (ctx.generated.root / site.path).read_text().splitlines()
    assert "at::native::resize_output(" in lines[site.line - 1]
    head = max(i for i in range(site.line) if re.match(r"void resize_out\(", lines[i]))
    assert site.line - head < 10
    assert re.search(r"struct (structured_linalg_lu_factor_ex_out_out) final", "\n".join(lines))
    assert "_resize_output_check" in {short(n) for n in subtree_names(step)}


def test_a_tensor_method_spelled_symint_is_its_operators_call(context):
    """tile_symint calls `self.repeat_symint(reps)` (read from its file), the
    Tensor method of aten::repeat; the recorded stacks run
    `at::_ops::repeat::call` right below it, and the map follows it there."""
    assert "at::_ops::repeat::call" in observed_below("aten::tile", "at::native::tile_symint")
    tree = graph.stack("aten::tile", context("cpu"), 40)
    kernel = first(tree, "at::native::tile_symint")
    lines = kernel.location.disk_path.read_text().splitlines()[kernel.location.line - 1 : kernel.location.end_line]
    assert any("self.repeat_symint(" in line for line in lines)
    names = subtree_names(kernel)
    assert {"at::_ops::repeat::call", "aten::repeat", "at::native::repeat"} <= names


def test_a_template_parameter_the_caller_binds_picks_the_overload(context):
    """resize_ passes its `IntArrayRef size` to `template <typename T> _resize_(...,
    ArrayRef<T> size, ...)`, which calls `_resize_impl_<T>`, whose `T
    storage_size` goes to `_maybe_resize_storage`, declared once for int64_t
    and once for c10::SymInt (all read from Resize.cpp; IntArrayRef is
    `ArrayRef<int64_t>` in c10/util/ArrayRef.h). T is int64_t: the recorded
    stacks run maybe_resize_storage_cpu below _resize_impl_ (the int64_t
    overload forwards to it), and the map names that overload and follows it
    there, not two overloads left undecided."""
    ctx = context("cpu")
    seen = observed_below("aten::resize_", "at::native::_resize_impl_")
    assert "at::native::maybe_resize_storage_cpu" in seen
    assert "at::native::_resize_impl_" in observed_below("aten::resize_", "at::native::resize_")
    root = ctx.index.tree.root
    assert re.search(r"^using IntArrayRef = ArrayRef<int64_t>;", (root / "c10/util/ArrayRef.h").read_text(), re.M)
    overloads = {d.location.line: d for d in ctx.index.definitions("at::native::_maybe_resize_storage")}
    lines = (root / "aten/src/ATen/native/Resize.cpp").read_text().splitlines()
    by_type = {re.search(r"_maybe_resize_storage\(TensorImpl\* self, (.+) new_size_bytes\)", lines[n - 1]).group(1): n for n in overloads}
    assert set(by_type) == {"int64_t", "c10::SymInt"}
    tree = graph.stack("aten::resize_", ctx, 40)
    impl = first(tree, "at::native::_resize_impl_")
    assert impl is not None
    picked = [n for n in subtree_nodes(impl) if n.name == "at::native::_maybe_resize_storage"]
    assert [n.location.line for n in picked] == [by_type["int64_t"]]
    assert {"maybe_resize_storage_cpu", "resize_bytes_cpu"} <= {short(n) for n in subtree_names(impl)}


def test_an_alias_and_its_instantiation_are_one_type(context):
    """histc's _resize_output<T> (called by resize_output with an `IntArrayRef shape`)
    passes its `ArrayRef<T> shape` to native_resize_, declared once for
    IntArrayRef and once for SymIntArrayRef (read from Resize.cpp). With T =
    int64_t, `ArrayRef<int64_t>` is c10's IntArrayRef: the recorded stacks run
    native::resize_ below resize_output (the IntArrayRef native_resize_ forwards
    to it), and the map picks that overload."""
    ctx = context("cpu")
    assert "at::native::resize_" in observed_below("aten::histc", "at::native::resize_output")
    lines = (ctx.index.tree.root / "aten/src/ATen/native/Resize.cpp").read_text().splitlines()
    by_type = {}
    for d in ctx.index.definitions("at::native::native_resize_"):
        m = re.search(r"native_resize_\(const Tensor& output, (\w+) shape\)", lines[d.location.line - 1])
        body = lines[d.location.line]
        by_type[m.group(1)] = (d.location.line, body)
    assert set(by_type) == {"IntArrayRef", "SymIntArrayRef"} and "native::resize_(" in by_type["IntArrayRef"][1]
    tree = graph.stack("aten::histc", ctx, 40)
    helper = first(tree, "at::native::_resize_output")
    assert helper is not None
    picked = [n for n in subtree_nodes(helper) if n.name == "at::native::native_resize_"]
    assert picked and {n.location.line for n in picked} == {by_type["IntArrayRef"][0]}


def test_a_leaf_compiled_into_its_caller_ran_when_its_caller_ran(context):
    """Loop templates and C10_ALWAYS_INLINE functions are compiled into their
    caller, so the recording never stops in them (Note [leaves that are never
    frames] in tests/golden/observed.py): avg_pool2d's at::parallel_for ran
    inside avg_pool2d_kernel_impl, a frame of its recorded stacks, with no
    thread pool frame; conj_physical of a real tensor returns it, so its
    conj_kernel never ran and `where` names no loop of it; ufunc/add.h's
    `add` is declared C10_ALWAYS_INLINE on its line of the tree."""
    from kernelmap import api
    from kernelmap.observe.mark import name_key
    from tests.golden.observed import always_inline, inlined_into_ran

    golden, ctx = load(), context("cpu")

    def judged(op):
        steps = [s for s in api._source_steps(op, "cpu", [], "debian-2.6.0", context=ctx) if s.role == "leaf"]
        ends = graph.call_ends(graph.stack(op, ctx))
        frames = [golden.frames[i] for stack in golden.by_operator()[op] for i in stack]
        ran = {name_key(f.function) for f in frames} | {name_key(f.function).rsplit("::", 1)[-1] for f in frames}
        return {s.name: (s, inlined_into_ran(s.name, ends, ran)) for s in steps}, {f.function for f in frames}

    leaves, ran = judged("aten::avg_pool2d")
    assert "at::parallel_for" in leaves and not any("invoke_parallel" in f or "parallel_for" in f for f in ran)
    assert any(f.endswith("::avg_pool2d_kernel_impl") for f in ran) and leaves["at::parallel_for"][1]
    leaves, ran = judged("aten::conj_physical")  # it returns a real input first: its loop is no leaf (Note [returns before a call])
    assert "cpu_kernel_vec" not in leaves and not any(f.endswith("::conj_kernel") for f in ran)
    leaves, ran = judged("aten::add.Tensor")
    step, judged_ran = leaves["at::native::ufunc::add"]
    text = step.location.disk_path.read_text().splitlines()[step.location.line - 1]
    assert "C10_ALWAYS_INLINE" in text and always_inline(step.location) and judged_ran
    assert not any(f.endswith("ufunc::add") for f in ran)  # never a frame


def callers_miss(op: str, leaf: str, ctx) -> tuple[list, list[str]]:
    """(the graded frames of a recorded stack of `op` down to `leaf`, those
    above it that `callers LEAF` does not name): the bench's bottom-up grading."""
    from kernelmap.observe.mark import name_key

    golden = load()
    graded = (golden.graded(s)[0] for s in golden.by_operator()[op])
    frames = next(f[: [g.function for g in f].index(leaf) + 1] for f in graded if leaf in [g.function for g in f])
    tree = graph.callers(frames[-1].parsed.lookup, ctx, 40)
    keys = {name_key(n.name) for n, _ in walk(tree)}
    shorts = {k.rsplit("::", 1)[-1] for k in keys}
    return frames, [f.function for f in frames[:-1] if name_key(f.function) not in keys and name_key(f.function).rsplit("::", 1)[-1] not in shorts]


def test_callers_of_an_operators_entry_go_up_from_the_operator(context):
    """Note [callers of an operator's entry] in graph.up: at::native::cholesky
    calls `raw_cholesky_output.triu_()` or `.tril_()` (read from
    BatchLinearAlgebra.cpp), which the recorded stacks of cholesky show
    entering at::_ops::tril_::call; `callers at::_ops::tril_::call` names every
    frame above it, up to THPVariable_cholesky."""
    ctx = context("cpu")
    tree_text = ctx.index.tree.root.joinpath("aten/src/ATen/native/BatchLinearAlgebra.cpp").read_text()
    assert "raw_cholesky_output.tril_()" in tree_text
    assert "at::_ops::tril_::call" in observed_below("aten::cholesky", "at::native::cholesky")
    frames, missed = callers_miss("aten::cholesky", "at::_ops::tril_::call", ctx)
    assert frames[0].function.endswith("THPVariable_cholesky") and not missed, missed


def test_callers_of_a_structured_kernel_reach_its_in_place_delegate(context):
    """tril_ delegates to tril.out (native_functions.yaml): the in-place
    operator's wrapper runs structured_tril_cpu::impl, and cholesky's call of
    `tril_()` is among the callers of the kernel below it."""
    ctx = context("cpu")
    delegate = ctx.catalog.get("aten::tril_")
    assert delegate.structured_delegate == "tril.out"
    tree = graph.callers("at::native::structured_tril_cpu::impl", ctx, 12)
    names = {n.name for n, _ in walk(tree)}
    assert "aten::tril_" in names and "at::native::cholesky" in names


def test_callers_of_a_meta_function_are_its_groups_wrappers(context):
    """Note [callers of a meta function] in graph.up: the recorded stacks of
    atanh run at::meta::structured_atanh::meta from the generated CPU wrapper
    of atanh, below its binding; `callers` of the meta function names each of
    those frames."""
    frames, missed = callers_miss("aten::atanh", "at::meta::structured_atanh::meta", context("cpu"))
    assert any("wrapper_CPU_atanh" in f.function for f in frames) and frames[0].function.endswith("THPVariable_atanh")
    assert not missed, missed


def test_callers_of_a_kernel_a_macro_registers(context):
    """UnaryOpsKernel.cpp defines and registers asin_kernel with one macro,
    `STATIC_IMPLEMENT_COMPLEX_KERNEL_WITH_AVX512(asin)`, whose registration
    names `CPU_CAPABILITY::asin_kernel`: its callers go up through asin_stub to
    every frame the recorded stacks of asin show above it."""
    ctx = context("cpu")
    definition = next(d for d in ctx.index.definitions("at::native::asin_kernel"))
    line = ctx.index.tree.root.joinpath(definition.location.path).read_text().splitlines()[definition.location.line - 1]
    assert "STATIC_IMPLEMENT_COMPLEX_KERNEL_WITH_AVX512(asin)" in line
    frames, missed = callers_miss("aten::asin", "at::native::asin_kernel", ctx)
    assert len(frames) >= 5 and not missed, missed


def test_callers_of_a_definition_named_like_a_vendor_call(context):
    """at::native::mkl_gemm_batched is the tree's own wrapper of MKL
    (mkl/LinearAlgebra.cpp), though its name reads as a vendor call's: the
    recorded stacks of bmm reach it from gemm_batched_mkl_impl, and its
    callers name every frame above it."""
    ctx = context("cpu")
    assert any(d.location.path == "aten/src/ATen/native/mkl/LinearAlgebra.cpp" for d in ctx.index.definitions("at::native::mkl_gemm_batched"))
    frames, missed = callers_miss("aten::bmm", "at::native::mkl_gemm_batched", ctx)
    assert frames[0].function.endswith("THPVariable_bmm") and not missed, missed


def test_a_comparison_branches_on_its_bool_output(context):
    """eq_kernel tests `iter.dtype()`, the output's dtype (read from
    BinaryOpsKernel.cpp): `cpu_kernel` with a `-> bool` lambda for a bool
    output, `cpu_kernel_vec` otherwise. eq's meta function builds its
    iterator with build_borrowing_comparison_op, whose comparison_op_config
    declares a bool output when none is given (TensorIterator.cpp). The
    recorded stacks of eq.Tensor on float32 inputs run cpu_kernel's
    loop_2d_from_1d, not the vectorized loop; the map follows the bool arm
    and collapses the other (Note [a comparison's output dtype])."""
    ctx = context("cpu")
    golden = load()
    calls = [c for c in golden.calls if c.dtype == "float32" and any(golden.entry(s) == "aten::eq.Tensor" for s in c.stacks)]
    assert calls
    below = {f.function for c in calls for s in c.stacks for f in golden.graded(s)[0]}
    assert "at::TensorIteratorBase::loop_2d_from_1d" in below and not any("VectorizedLoop2d" in f for f in below)
    root = ctx.index.tree.root
    config = (root / "aten/src/ATen/TensorIterator.cpp").read_text()
    assert re.search(r"if \(!out\.defined\(\)\) \{\s*config\.declare_static_dtype\(kBool\);", config)
    tree = graph.stack("aten::eq.Tensor", ctx, 40)
    meta = first(tree, "at::meta::structured_eq_Tensor::meta")
    assert meta is not None and any(s.name == "build_borrowing_comparison_op" for s in ctx.index.calls_from(definition(meta, ctx)))
    kernel = next(n for n, _ in walk(tree) if short(n.name) == "eq_kernel")
    body = kernel.location.disk_path.read_text().splitlines()[kernel.location.line - 1 : kernel.location.end_line]
    assert any("if (iter.dtype() == ScalarType::Bool)" in line for line in body)
    loops = {c.name: c for c in kernel.children}
    assert not loops["cpu_kernel"].attrs.get("branch") and loops["cpu_kernel_vec"].attrs.get("branch")
    assert "at::TensorIteratorBase::loop_2d_from_1d" in subtree_names(loops["cpu_kernel"])
    out = graph.stack("aten::eq.Tensor_out", ctx, 40)  # an out= call leaves the output's dtype to the tensor given
    kernel = next(n for n, _ in walk(out) if short(n.name) == "eq_kernel")
    assert not {c.name: c for c in kernel.children}["cpu_kernel_vec"].attrs.get("branch")
