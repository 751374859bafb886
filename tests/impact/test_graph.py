"""The include graph, the units and the cost model on tiny inputs: include
roots searched in a release build's order, a configured header read as its
template, third-party and system headers, #if conditions evaluated in each
compile context (host C++, nvcc, a CPU capability), macros the tree's
headers define, and a straight line fitted to compile times."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelmap.impact.cost import fit, least_squares
from kernelmap.impact.graph import LEAF_KINDS, TEMPLATE, Sources, build_graph
from kernelmap.impact.units import cpu_capabilities, torch_source_lists, translation_units
from kernelmap.source.includes import read

FILES = {
    "aten/src/ATen/native/Kernel.cpp": '#include <ATen/native/Loops.h>\n#include "Local.h"\n#include <ATen/Config.h>\n#include <vector>\n#include <fmt/format.h>\n'
                                       '#include <torch/version.h>\n',
    "torch/csrc/api/include/torch/version.h.in": "#pragma once\n#define TORCH_VERSION_MAJOR @TORCH_VERSION_MAJOR@\n",
    "aten/src/ATen/native/Local.h": "#pragma once\n",
    "aten/src/ATen/native/Loops.h": """#pragma once
#include <ATen/native/Flags.h>
#if defined(CPU_CAPABILITY_AVX512)
#include <ATen/vec512.h>
#else
#include <ATen/vec256.h>
#endif
#ifdef __CUDACC__
#include <ATen/native/cuda/Device.cuh>
#endif
#if MY_FEATURE
#include <ATen/feature.h>
#endif
#if defined(USE_CUDA)
#include <c10/cuda/CUDAStream.h>
#endif
#include <ATen/ops/add.h>
""",
    "aten/src/ATen/native/Flags.h": "#pragma once\n#define MY_FEATURE 1\n",
    "aten/src/ATen/vec512.h": "#pragma once\n",
    "aten/src/ATen/vec256.h": "#pragma once\n",
    "aten/src/ATen/feature.h": "#pragma once\n",
    "aten/src/ATen/native/cuda/Device.cuh": "#pragma once\n",
    "aten/src/ATen/native/cuda/Kernel.cu": "#include <ATen/native/Loops.h>\n",
    "aten/src/ATen/native/cpu/Vec.cpp": "#include <ATen/native/Loops.h>\n",
    "aten/src/ATen/Config.h.in": "#pragma once\n#define AT_MKL_ENABLED() @AT_MKL_ENABLED@\n",
    "c10/cuda/CUDAStream.h": "#pragma once\n",
    "c10/util/Thing.cpp": "#include <c10/util/Thing.h>\n",
    "c10/util/Thing.h": "#pragma once\n",
}
GENERATED = {"build/aten/src/ATen/ops/add.h": "#pragma once\n#include <ATen/ops/add_ops.h>\n", "build/aten/src/ATen/ops/add_ops.h": "#pragma once\n"}


@pytest.fixture
def sources(tmp_path) -> Sources:
    root = tmp_path / "tree"
    for rel, text in FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    (root / "version.txt").write_text("2.6.0a0\n")
    generated = {}
    for rel, text in GENERATED.items():
        disk = tmp_path / "gen" / rel
        disk.parent.mkdir(parents=True, exist_ok=True)
        disk.write_text(text)
        generated[rel] = disk
    indexed = {rel: len(text) for rel, text in FILES.items() if not rel.endswith(".in")}
    includes, defines = [], []
    for rel in indexed:
        found, defined = read(FILES[rel].encode())
        includes += [(rel, i.line, i.name, i.angled, i.condition) for i in found]
        defines += [(rel, d.line, d.name, d.value, d.condition) for d in defined]
    return Sources(root, indexed, includes, defines, generated)


def closure(graph, path: str, context: str) -> set[str]:
    return {graph.paths[n] for n in graph.closure(graph.node(path), context)}


def test_roots_templates_and_leaves(sources):
    graph = build_graph(sources, "cpu")
    got = closure(graph, "aten/src/ATen/native/Kernel.cpp", "cpp")
    assert got == {"aten/src/ATen/native/Kernel.cpp", "aten/src/ATen/native/Loops.h", "aten/src/ATen/native/Local.h",
                   "aten/src/ATen/native/Flags.h", "aten/src/ATen/vec256.h", "aten/src/ATen/feature.h", "aten/src/ATen/Config.h.in",
                   "build/aten/src/ATen/ops/add.h", "build/aten/src/ATen/ops/add_ops.h", "torch/csrc/api/include/torch/version.h.in"}
    assert graph.origin[graph.node("aten/src/ATen/Config.h.in")] == TEMPLATE
    leaves = {(name, LEAF_KINDS[kind]) for name, kind, _, _ in graph.leaves[graph.node("aten/src/ATen/native/Kernel.cpp")]}
    assert leaves == {("fmt/format.h", "third-party")}  # <vector> is a system header: no edge, no leaf


def test_conditions_per_context_and_device(sources):
    cpu = build_graph(sources, "cpu")
    loops = "aten/src/ATen/native/Loops.h"
    assert "aten/src/ATen/vec512.h" in closure(cpu, loops, "AVX512") and "aten/src/ATen/vec256.h" not in closure(cpu, loops, "AVX512")
    assert "aten/src/ATen/vec256.h" in closure(cpu, loops, "AVX2")
    assert "c10/cuda/CUDAStream.h" not in closure(cpu, loops, "cpp")
    cuda = build_graph(sources, "cuda")
    assert "aten/src/ATen/native/cuda/Device.cuh" in closure(cuda, loops, "cu")
    assert "aten/src/ATen/native/cuda/Device.cuh" not in closure(cuda, loops, "cpp")
    assert "c10/cuda/CUDAStream.h" in closure(cuda, loops, "cpp")
    assert cpu.built["undecided_conditions"] == 0  # MY_FEATURE is defined by a header: 1


def test_units_per_device_with_capability_copies(sources):
    tree = sources.tree_root
    files = frozenset(sources.tree_files)
    cpu = translation_units(tree, files, frozenset(GENERATED), "cpu")
    assert {(u.path, u.kind, u.capability, u.library) for u in cpu} == {
        ("aten/src/ATen/native/Kernel.cpp", "cpp", None, "libtorch_cpu.so"),
        ("c10/util/Thing.cpp", "cpp", None, "libc10.so"),
        *(("aten/src/ATen/native/cpu/Vec.cpp", "capability", c, "libtorch_cpu.so") for c in cpu_capabilities(tree)),
    }
    cuda = translation_units(tree, files, frozenset(GENERATED), "cuda")
    assert ("aten/src/ATen/native/cuda/Kernel.cu", "cu", "libtorch_cuda.so") in {(u.path, u.kind, u.library) for u in cuda}
    rocm = translation_units(tree, files, frozenset(GENERATED), "rocm")
    assert ("aten/src/ATen/native/cuda/Kernel.cu", "libtorch_hip.so") in {(u.path, u.library) for u in rocm}


def test_build_variables_are_read_as_data_never_run(tmp_path):
    (tmp_path / "build_variables.bzl").write_text(
        'a = ["x.cpp", "y.cpp"]\nb = sorted(a + ["w.cpp"])\nc = a + undefined_name\nd = __import__("os").system("false")\n'
        'def f():\n    return ["z.cpp"]\n'
    )
    assert torch_source_lists(tmp_path) == {"a": ("x.cpp", "y.cpp"), "b": ("w.cpp", "x.cpp", "y.cpp")}


def test_the_cost_model_and_its_leave_one_out_error():
    import math

    assert least_squares([[1, 0], [1, 1], [1, 2]], [1.0, 3.0, 5.0]) == pytest.approx([1.0, 2.0])
    # seconds = 3 * closure^0.5 * own^0.25, exactly: the fit finds it and errs by nothing
    samples = [("cpp", int(cb * 1e6), int(ob * 1e6), 3 * (cb + 0.01) ** 0.5 * (ob + 0.01) ** 0.25)
               for cb, ob in ((0.5, 0.01), (1, 0.1), (2, 0.05), (4, 0.2), (8, 0.02), (3, 0.5), (6, 1.0))]
    model = fit(samples, machine="here", compiler="g++")
    f = model.fit
    assert (math.exp(f.a), f.b, f.c, f.smear) == pytest.approx((3.0, 0.5, 0.25, 1.0))
    assert f.median_error == pytest.approx(0.0, abs=1e-9) and f.within_50 == 1.0 and f.total_error == pytest.approx(0.0, abs=1e-9)
    assert model.predict("cpp", 4_000_000, 1_000_000) == pytest.approx(round(3 * 4.01 ** 0.5 * 1.01 ** 0.25, 2))
    assert model.calibrated("cpp") and not model.calibrated("cu")
    text, error = model.describe()
    assert "x (MB its closure reads)^0.50 x (MB of its own file)^0.25" in text and "median error 0%" in error
    with pytest.raises(ValueError, match="too few"):
        fit(samples[:3], machine="here", compiler="g++")


def test_macros_that_name_each_other_end():
    from kernelmap.impact.graph import MacroEnvironment

    defines = [("a.h", "A", "B", None), ("b.h", "B", "A", None), ("c.h", "C", "C", None), ("d.h", "D", "2", "!defined(D)"), ("e.h", "E", "D", None)]
    env = MacroEnvironment(Path("/nonexistent"), "cpu", defines)
    assert env.evaluate("A", "cpp") is False and env.evaluate("C", "cpp") is False  # a name left unexpanded: 0
    assert env.evaluate("defined(A) && defined(C)", "cpp") is True
    assert env.evaluate("E == 2", "cpp") is True  # `#ifndef D` around D's own definition
