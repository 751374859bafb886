"""`kernelmap explain` on the real 2.6.0 tree and the regenerated files:
each step's location holds the code the step names."""

from __future__ import annotations

import json
import re

from kernelmap import graph
from kernelmap.graph.explain import explain
from tests.conftest import run_kernelmap
from tests.graph.conftest import TREE_NAME, no_tree_cache


def by_title(result):
    return {s.title: s for s in result.steps}


def text_at(step, generated):
    path = step.location.disk_path
    if path is None or not path.exists():
        path = generated.root / step.location.path
    return path.read_text(errors="replace").splitlines()[step.location.line - 1]


def test_add_cpu_anatomy(context, generated):
    steps = by_title(explain("aten::add.Tensor", context("cpu")))
    assert "PythonArgParser" in steps["Python argument parsing"].summary
    assert "AddBackward0" in steps["autograd"].summary
    meta = steps["output allocation (structured meta)"]
    assert "TORCH_META_FUNC2(add, Tensor)" in text_at(meta, generated)
    assert "TORCH_IMPL_FUNC(ufunc_add_CPU)" in text_at(steps["native kernel"], generated)
    assert "add_stub" in steps["stub"].summary
    dtype = steps["dtype switch"]
    assert "Float" in dtype.summary and "AT_DISPATCH_CASE(at::ScalarType::Float" in text_at(dtype, generated)
    loop = steps["device loop / launch"]
    assert loop.location.path.endswith("UfuncCPUKernel_add.cpp")
    assert re.search(r"\badd\(", steps["inner loop"].excerpt)


def test_conv2d_cuda_anatomy_shows_backend_selection_and_cudnn(context, generated):
    result = explain("aten::conv2d", context("cuda"))
    steps = by_title(result)
    assert "aten::cudnn_convolution" in steps["decomposition"].summary
    selection = steps["backend selection"]
    assert re.search(r"select_conv_backend|ConvBackend|use_cudnn", text_at(selection, generated))
    assert "ConvBackend::Cudnn" in steps["branch taken"].summary
    vendor = steps["vendor call"]
    assert "closed source" in vendor.summary and "cudnn" in vendor.summary
    assert vendor.summary.split()[0] in text_at(vendor, generated)


def test_explain_cli_json(indexed_tree, generated):
    out = run_kernelmap("explain", "aten::mul.Tensor", "--device", "cpu", "--source", TREE_NAME, "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["kernelmap"] == "explain/2"
    titles = [s["title"] for s in doc["steps"]]
    assert titles[0] == "Python argument parsing" and "dtype switch" in titles
    bad = run_kernelmap("explain", "aten::no_such_op", "--source", TREE_NAME)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr


def test_explain_without_a_tree_says_which_steps_are_missing(tmp_path, monkeypatch, generated):
    monkeypatch.setenv("KERNELMAP_CACHE_DIR", str(no_tree_cache(tmp_path, generated)))
    monkeypatch.delenv("KERNELMAP_SOURCE", raising=False)
    result = explain("aten::relu", graph.open_context("cpu"))
    assert any("need a source tree" in n for n in result.notes)
    assert all(s.title not in ("native kernel", "dtype switch") for s in result.steps)


# -- dtype-aware anatomy (issue 16, Deliver 5) ---------------------------------


def _lines(location):
    return location.disk_path.read_text(errors="replace").splitlines()


def _first(lines, pattern, after=0):
    """The 1-based number of the first line after `after` that matches `pattern`."""
    return next(n for n, text in enumerate(lines, 1) if n > after and re.search(pattern, text))


def _specialisation(tree, operation, cpp):
    """Where the AVX2 build's Vectorized<cpp> spells `operation`, read from the vec256 headers."""
    pattern = re.compile(rf"Vectorized<{re.escape(cpp)}>\s+inline\s+{re.escape(operation)}\s*\(")
    for path in sorted((tree / "aten/src/ATen/cpu/vec/vec256").glob("*.h")):
        for number, text in enumerate(path.read_text().splitlines(), 1):
            if pattern.search(text):
                return path.relative_to(tree).as_posix(), number
    raise AssertionError(f"no Vectorized<{cpp}> {operation} in vec256")


def test_add_cpu_dtype_picks_its_case_specialisation_and_loop(context, tree_2_6):
    """float32 and bfloat16 run different AT_DISPATCH_CASEs of the generated
    add_kernel, each calling cpu_kernel_vec from its own line, and the
    vectorized lambda's ufunc::add reaches vec::fmadd of Vectorized<float> or
    Vectorized<BFloat16>: each step at the line the files hold."""
    loops = (tree_2_6 / "aten/src/ATen/native/cpu/Loops.h").read_text().splitlines()
    add_h = (tree_2_6 / "aten/src/ATen/native/ufunc/add.h").read_text().splitlines()
    vectorized_overload = _first(add_h, r"Vectorized<T>\s+add\s*\(")
    fmadd = re.search(r"vec::(\w+)\(", "\n".join(add_h[vectorized_overload - 1 : vectorized_overload + 3])).group(1)
    seen = {}
    for dtype, scalar, cpp in (("float32", "Float", "float"), ("bfloat16", "BFloat16", "BFloat16")):
        result = explain("aten::add.Tensor", context("cpu", dtype=dtype))
        steps = by_title(result)
        case, loop = steps["dtype switch"], steps["device loop / launch"]
        kernel = _lines(case.location)
        case_line = _first(kernel, rf"AT_DISPATCH_CASE\(at::ScalarType::{scalar},")
        assert case.location.line == case_line and f"scalar_t = {cpp}" in case.summary
        assert loop.location.path == case.location.path and loop.location.line == _first(kernel, r"\bcpu_kernel_vec\(", after=case_line)
        special = steps["template specialisation"]
        assert (special.location.path, special.location.line) == _specialisation(tree_2_6, fmadd, cpp)
        # the tree's location says its version, the installed torch being another (Note [versions on locations])
        assert f"ufunc::add (Vectorized overload, aten/src/ATen/native/ufunc/add.h:{vectorized_overload} ({special.location.origin.version}))" in special.summary
        inner = steps["vectorized inner loop"]
        assert inner.location.path.endswith("cpu/Loops.h")
        assert inner.location.line == _first(loops, r"vectorized_loop\(data\.data\(\), size0, 0, op, vop\)")
        assert f"Loops.h:{_first(loops, r'^vectorized_loop[(]')}" in inner.summary
        stub = steps["stub"]  # at the generated impl's line that calls the stub
        assert re.match(r"\s*add_stub\(device_type\(\)", _lines(stub.location)[stub.location.line - 1])
        capability = steps["CPU capability"]  # REGISTER_DISPATCH leaves the AVX512 slot empty: AVX2's kernel runs there too
        assert "!AVX512" in _lines(capability.location)[capability.location.line - 1] and "nullptr" in capability.summary
        assert "an AVX512 CPU runs too" in special.summary
        iteration = next(s for s in result.steps if s.title == "TensorIterator iteration")  # the first: for_each
        assert "for_each" in iteration.summary and "iter.for_each(make_vectorized_loop2d(" in _lines(iteration.location)[iteration.location.line - 1]
        assert "VectorizedLoop2d::operator()" in steps["loop object"].summary
        assert f"scalar_t = {cpp}" in steps["per-element operation"].summary
        seen[dtype] = (case.location.line, loop.location.line, special.location)
    assert seen["float32"][0] != seen["bfloat16"][0] and seen["float32"][1] != seen["bfloat16"][1]
    assert seen["float32"][2] != seen["bfloat16"][2]


def test_mul_float32_shows_only_the_branch_it_takes(context, tree_2_6):
    """mul_kernel tests the dtype before dispatching (Bool, ComplexHalf, a
    reduced floating type with a CPU scalar): float32 takes the last branch,
    _AT_DISPATCH_MUL_TYPES and its cpu_kernel_vec; bfloat16 may take the
    reduced-float one, which computes in Vectorized<opmath_t> (float)."""
    source = (tree_2_6 / "aten/src/ATen/native/cpu/BinaryOpsKernel.cpp").read_text().splitlines()
    start = _first(source, r"^void mul_kernel\(")
    bool_branch = _first(source, r"if \(dtype == ScalarType::Bool\)", after=start)
    reduced = _first(source, r"AT_DISPATCH_REDUCED_FLOATING_TYPES\(dtype, \"mul_cpu_reduced_float\"", after=start)
    plain = _first(source, r"_AT_DISPATCH_MUL_TYPES\(dtype, \"mul_cpu\"", after=start)
    result = explain("aten::mul.Tensor", context("cpu"))
    steps = by_title(result)
    assert steps["dtype switch"].location.line == plain and "mul_cpu" in steps["dtype switch"].summary
    assert steps["device loop / launch"].location.line == _first(source, r"cpu_kernel_vec\(", after=plain)
    in_kernel = [s for s in result.steps if s.location is not None and s.location.path.endswith("BinaryOpsKernel.cpp")]
    assert all(not (bool_branch <= s.location.line < plain) for s in in_kernel), [(s.title, s.location) for s in in_kernel]
    assert not any("reduced_float" in s.summary or "Bool" in s.summary for s in result.steps)
    assert (steps["template specialisation"].location.path, steps["template specialisation"].location.line) == _specialisation(tree_2_6, "operator*", "float")

    bf16 = by_title(explain("aten::mul.Tensor", context("cpu", dtype="bfloat16")))
    assert bf16["dtype switch"].location.line == reduced
    special = bf16["template specialisation"]
    assert "opmath_t = float" in special.summary
    assert (special.location.path, special.location.line) == _specialisation(tree_2_6, "operator*", "float")


def test_add_cuda_steps_reach_the_kernel_templates(context, tree_2_6):
    """On CUDA the generated add_kernel's gpu_kernel is followed through
    CUDALoops.cuh to the kernel templates a profiler names, each at the line
    that launches it: the one the steps follow, the others its alternatives
    (Note [alternatives of a step])."""
    result = explain("aten::add.Tensor", context("cuda"))
    launches = {s.summary.split()[0]: s for s in result.steps if s.title == "kernel launch"}
    assert set(launches) == {"vectorized_elementwise_kernel"}
    cuda_loops = (tree_2_6 / "aten/src/ATen/native/cuda/CUDALoops.cuh").read_text().splitlines()
    for name, step in launches.items():
        assert step.location.path == "aten/src/ATen/native/cuda/CUDALoops.cuh"
        assert re.search(rf"\b{name}\b", cuda_loops[step.location.line - 1]), (name, step.location)
        defined = _first(cuda_loops, r"__global__ void " + name + r"\(")
        assert f"(defined at aten/src/ATen/native/cuda/CUDALoops.cuh:{defined} ({step.location.origin.version}))" in step.summary
    others = {a.name.rsplit("::", 1)[-1]: a for s in result.steps for a in s.alternatives}
    assert {"unrolled_elementwise_kernel", "launch_legacy_kernel"} <= set(others)
    for name, alternative in others.items():
        called = (tree_2_6 / alternative.location.path).read_text().splitlines()[alternative.location.line - 1]
        assert re.search(rf"\b{name}\b", called), (name, alternative.location)
    steps = by_title(result)
    assert "Float case" in steps["dtype switch"].summary


def test_the_dtype_switch_is_the_macro_around_the_loop_and_says_whether_it_has_the_case(context, tree_2_6):
    """The dispatch macro is the one whose lambda holds the call on the way to
    the device loop, read at its line; a macro without the dtype's case says so."""
    compare = (tree_2_6 / "aten/src/ATen/native/cpu/TensorCompareKernel.cpp").read_text().splitlines()
    relu = by_title(explain("aten::relu", context("cpu")))["dtype switch"]
    assert relu.location.path.endswith("cpu/TensorCompareKernel.cpp")
    assert relu.location.line == _first(compare, r'AT_DISPATCH\w+\(.*"clamp_min_scalar_cpu"')
    assert "the Float case runs for float32" in relu.summary
    gelu_source = (tree_2_6 / "aten/src/ATen/native/cuda/ActivationGeluKernel.cu").read_text().splitlines()
    macro = _first(gelu_source, r"AT_DISPATCH_FLOATING_TYPES_AND2\(")
    assert "BFloat16" in gelu_source[macro - 1] + gelu_source[macro]
    as_bf16 = by_title(explain("aten::gelu", context("cuda", dtype="bfloat16")))["dtype switch"]
    as_long = by_title(explain("aten::gelu", context("cuda", dtype="int64")))["dtype switch"]
    assert as_bf16.location.line == as_long.location.line == macro
    assert "the BFloat16 case runs" in as_bf16.summary and "no Long case" in as_long.summary


def test_the_cuda_add_ends_at_the_kernel_a_real_trace_records_for_float_add(context):
    """Below one device loop the launches rank in the order CUDALoops.cuh
    writes them, so add's best end is the vectorized kernel, the template a
    real trace (tests/trace/data, MIT-licensed HTA test data) records most for
    `CUDAFunctor_add<float>`."""
    import gzip
    import json
    from collections import Counter
    from pathlib import Path

    trace = Path(__file__).resolve().parents[1] / "trace" / "data" / "hta-trace_diff-control-control.json.gz"
    with gzip.open(trace) as f:
        events = json.load(f)["traceEvents"]
    launchers = Counter(m.group(1) for e in events if e.get("cat") == "kernel" and "CUDAFunctor_add<float>" in e.get("name", "")
                        for m in [re.match(r"void at::native::(\w+)<", e["name"])] if m)
    recorded = launchers.most_common(1)[0][0]
    ends = graph.call_ends(graph.stack("aten::add.Tensor", context("cuda")))
    assert ends[0].node.name == recorded == "vectorized_elementwise_kernel"
    assert ends[0].node.location.path.endswith("cuda/CUDALoops.cuh")


def _line(tree_root, path: str, pattern: str, start: int = 1) -> int:
    """The first line at or after `start` matching `pattern`, read from the file."""
    for number, text in enumerate((tree_root / path).read_text(errors="replace").splitlines(), 1):
        if number >= start and re.search(pattern, text):
            return number
    raise AssertionError(f"{path}: nothing matches {pattern!r}")


def test_a_cpu_reduction_is_explained_down_to_the_work_its_stub_kernel_calls(context, tree_2_6):
    """sum's CPU kernel hands its work to cascade_sum, which runs its own
    `iter.parallel_reduce(...)`, not cpu_kernel_vec: explain follows the stub
    to sum_kernel_impl, names the AT_DISPATCH with a float case (not the
    integral one sum_kernel_impl tests first) and the reduction's loop at
    its call in cascade_sum, each at its line."""
    steps = by_title(explain("aten::sum.dim_IntList", context("cpu")))
    ops, kernel = "aten/src/ATen/native/ReduceOps.cpp", "aten/src/ATen/native/cpu/SumKernel.cpp"
    assert steps["native kernel"].location.line == _line(tree_2_6, ops, r"^TORCH_IMPL_FUNC\(sum_out\)")
    assert steps["stub"].location.line == _line(tree_2_6, ops, r"^\s*sum_stub\(", steps["native kernel"].location.line)
    body = _line(tree_2_6, kernel, r"^void sum_kernel_impl\(")
    integral = _line(tree_2_6, kernel, r"AT_DISPATCH_INTEGRAL_TYPES", body)
    floating = _line(tree_2_6, kernel, r"AT_DISPATCH_FLOATING_AND_COMPLEX_TYPES", body)
    assert integral < floating  # the case float32 takes is not the first macro of the kernel
    dtype = steps["dtype switch"]
    assert (dtype.location.path, dtype.location.line) == (kernel, floating) and "Float case runs" in dtype.summary
    loop = steps["device loop / launch"]
    cascade = _line(tree_2_6, kernel, r"^void cascade_sum\(")
    assert (loop.location.path, loop.location.line) == (kernel, _line(tree_2_6, kernel, r"^\s*iter\.parallel_reduce\(", cascade))
    assert loop.summary.startswith("at::TensorIteratorBase::parallel_reduce runs the per-element loop")


def test_a_cuda_reduction_shows_its_machinery_and_the_branch_float32_takes(context, tree_2_6):
    """mean_kernel_cuda tests a Half and a BFloat16 input with a float output
    first: for float32 (every tensor float) both are false, so the AT_DISPATCH
    in the last else runs; then Reduce.cuh's gpu_reduce_kernel and
    launch_reduce_kernel, and the reduce_kernel launch."""
    result = explain("aten::mean.dim", context("cuda"))
    steps = by_title(result)
    assert "dtype(1) == kHalf" not in steps["branch taken"].summary.replace("else of ", "ELSE")
    assert all(part.startswith("else of ") for part in steps["branch taken"].summary.split("; ") if "dtype(1)" in part)
    moment, reduce = "aten/src/ATen/native/cuda/ReduceMomentKernel.cu", "aten/src/ATen/native/cuda/Reduce.cuh"
    machinery = [s for s in result.steps if s.title == "reduction machinery"]
    assert [(s.location.path, s.location.line) for s in machinery] == [
        (moment, _line(tree_2_6, moment, r"^\s*gpu_reduce_kernel<", _line(tree_2_6, moment, r"^void mean_kernel_impl\("))),
        (reduce, _line(tree_2_6, reduce, r"^\s*launch_reduce_kernel<")),
    ]
    launch = steps["device loop / launch"]
    assert (launch.location.path, launch.location.line) == (reduce, _line(tree_2_6, reduce, r"^\s*reduce_kernel<.*<<<"))


def test_explain_never_takes_a_path_the_dtype_cannot_take(context, tree_2_6):
    """copy_kernel's copy_same_dtype calls neg_conj_kernel, whose loop runs
    inside AT_DISPATCH_COMPLEX_TYPES (cpu/CopyKernel.cpp, read here): a
    float32 copy never reaches it, so explain does not walk that path and
    never says a float32 copy fails."""
    text = (tree_2_6 / "aten/src/ATen/native/cpu/CopyKernel.cpp").read_text()
    body = text[text.index("static void neg_conj_kernel("):]
    assert "AT_DISPATCH_COMPLEX_TYPES(" in body[: body.index("\n}\n")]
    steps = explain("aten::copy_", context("cpu")).steps
    dtype = [s for s in steps if s.title == "dtype switch"]
    assert dtype and not any("fails here" in s.summary for s in steps), [s.summary for s in dtype]
    assert "neg_conj_kernel" not in dtype[0].summary
