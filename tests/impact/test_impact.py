"""`impact` over the real 2.6.0 tree: the include closure checked against
the compiler's own dependency output (`g++ -MM -MG` on a sample of units of
aten, c10, torch/csrc and the generated files; `nvcc -M` on .cu units), the
units the issue's examples name counted against the compiler, a .cpp that is
one unit, an operator's yaml edit, the advice, and the cache."""

from __future__ import annotations

import re
import shutil

import pytest

from kernelmap.impact.check import area_of, check_unit, compiler_dependencies, explain, sample_units

pytestmark = pytest.mark.slow

VEC256_FLOAT = "aten/src/ATen/cpu/vec/vec256/vec256_float.h"
LOOPS_CUH = "aten/src/ATen/native/cuda/Loops.cuh"


def test_the_index_holds_every_include_with_its_condition(indexed_tree):
    from kernelmap.source import open_index

    with open_index(indexed_tree) as index:
        rows = index.include_directives()
        defines = index.macro_definitions()
    assert len(rows) > 25_000 and len(defines) > 1_000
    by_file = {}
    for path, line, name, angled, cond in rows:
        by_file.setdefault(path, []).append((line, name, cond))
    # each row is a real directive at its line
    text = (indexed_tree.root / "aten/src/ATen/cpu/vec/vec256/vec256.h").read_text().splitlines()
    for line, name, cond in by_file["aten/src/ATen/cpu/vec/vec256/vec256.h"]:
        assert re.match(rf"\s*#\s*include\s*[<\"]{re.escape(name)}[>\"]", text[line - 1]), (line, name)
    conds = {name: cond for _, name, cond in by_file["aten/src/ATen/cpu/vec/vec256/vec256.h"]}
    assert conds["ATen/cpu/vec/vec256/vec256_float.h"] == "!(defined(__VSX__) || defined(CPU_CAPABILITY_VSX) || defined(CPU_CAPABILITY_ZVECTOR))"
    assert "defined(CPU_CAPABILITY_SVE256)" in conds["ATen/cpu/vec/sve/vec_common_sve.h"]


def test_closure_agrees_with_gxx_on_a_sample_of_units(impact_data, layout):
    """At least 98% of each unit's dependencies agree with `g++ -MM -MG`, and
    every disagreement has its explanation (Note [include roots])."""
    data = impact_data("cpu")
    units = sample_units(data.units, 12, seed=5, kinds=("cpp", "capability"))
    assert {area_of(u.path) for u in units} == {"aten", "c10", "torch/csrc", "generated"}
    assert any(u.kind == "capability" for u in units)
    for unit in units:
        result = check_unit(data.graph, layout("cpu"), unit)
        assert len(result.theirs) > 0, unit.name
        assert result.agreement >= 0.98, (unit.name, result.only_ours[:5], result.only_theirs[:5])
        why = explain(result, layout("cpu"))
        assert "other" not in why, (unit.name, why)


def _compiler_says(layout, unit, header: str) -> bool:
    deps, _, _ = compiler_dependencies(layout, unit)
    return header in deps


def test_vec256_float_units_counted_against_gxx(answer, impact_data, layout):
    """The units `impact vec256_float.h` names include it by g++'s own
    account, and units it leaves out (an AVX512 copy of the same file, which
    reads vec512 instead) do not."""
    found = answer(VEC256_FLOAT)
    named = {(u.path, u.capability) for u in found.units}
    counts = found.counts()
    assert counts.get("capability DEFAULT") and counts.get("capability AVX2") and not counts.get("capability AVX512")
    data = impact_data("cpu")
    by_key = {(u.path, u.capability): u for u in data.units}
    inside = sorted(named)
    picks = [by_key[k] for k in (inside[0], inside[len(inside) // 2], inside[-1])]
    avx512 = next(by_key[(p, "AVX512")] for p, c in inside if c == "AVX2" and (p, "AVX512") in by_key)
    outside = next(u for u in data.units if u.kind == "cpp" and u.path.startswith("c10/util/"))
    for unit in picks:
        assert _compiler_says(layout("cpu"), unit, VEC256_FLOAT), unit.name
    for unit in (avx512, outside):
        assert (unit.path, unit.capability) not in named
        assert not _compiler_says(layout("cpu"), unit, VEC256_FLOAT), unit.name


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_loops_cuh_units_counted_against_nvcc(answer, impact_data, layout):
    """`impact Loops.cuh --device cuda` names .cu units only, which nvcc -M
    says include it; a .cu unit it leaves out does not."""
    found = answer(LOOPS_CUH, "cuda")
    assert found.counts().get("cu", 0) > 50 and set(found.libraries()) == {"libtorch_cuda.so"}
    named = {u.path for u in found.units}
    data = impact_data("cuda")
    cu = sorted(u.path for u in data.units if u.kind == "cu")
    inside = next(u for u in data.units if u.path == sorted(named)[0])
    outside = next(u for u in data.units if u.kind == "cu" and u.path not in named and u.path.startswith("aten/src/ATen/native/cuda/"))
    assert len(cu) > len(named)
    assert _compiler_says(layout("cuda"), inside, LOOPS_CUH)
    assert not _compiler_says(layout("cuda"), outside, LOOPS_CUH)


def test_a_cpp_file_is_one_unit_holding_its_operators(answer, indexed_tree):
    found = answer("aten/src/ATen/native/BinaryOps.cpp")
    assert [(u.path, u.kind, u.library) for u in found.units] == [("aten/src/ATen/native/BinaryOps.cpp", "cpp", "libtorch_cpu.so")]
    text = (indexed_tree.root / "aten/src/ATen/native/BinaryOps.cpp").read_text()
    kernel = re.search(r"TORCH_IMPL_FUNC\((\w+)\)", text).group(1)  # sub_out
    assert f"aten::{kernel.removesuffix('_out')}.out" in found.operators
    assert f"aten::{kernel.removesuffix('_out')}.Tensor" in found.operators  # its structured delegate's functional form
    assert found.estimate.cpu_seconds > 0 and found.estimate.model and found.estimate.error


def test_an_operators_yaml_edit_names_what_torchgen_rewrites(answer, impact_data, indexed_tree):
    found = answer("aten::add.Tensor")
    assert found.target == "operator"
    yaml = found.edited[0]
    assert yaml.path == "aten/src/ATen/native/native_functions.yaml"
    line = (indexed_tree.root / yaml.path).read_text().splitlines()[yaml.location.line - 1]
    assert line.startswith("- func: add.Tensor(")
    rewritten = {e.path for e in found.edited[1:]}
    for path in ("build/aten/src/ATen/ops/add.h", "build/aten/src/ATen/ops/add_ops.h", "build/aten/src/ATen/ops/add_native.h",
                 "build/aten/src/ATen/core/TensorBody.h"):
        assert path in rewritten, path
    assert "build/aten/src/ATen/ops/addmm.h" not in rewritten
    data = impact_data("cpu")
    for path in rewritten:  # each names the operator, or is one of its own headers
        if re.match(r"build/aten/src/ATen/ops/add(_\w+)?\.h$", path):
            continue
        text = _generated_text(data, path)
        assert "add.Tensor(" in text or '"add.Tensor"' in text, path
    assert len(found.units) > 500 and "aten::add.Tensor" in found.operators
    # the same edit named by its yaml line
    again = answer(f"aten/src/ATen/native/native_functions.yaml:{yaml.location.line + 2}")
    assert {e.path for e in again.edited[1:]} == rewritten


def _generated_text(data, path: str) -> str:
    from pathlib import Path

    for base in (data.headers_dir, data.sources_dir):
        p = Path(base) / path
        if p.exists():
            return p.read_text(errors="replace")
    raise AssertionError(f"{path} is in neither generated folder")


def test_a_header_declaration_is_cheaper_to_change_in_its_definition(answer, indexed_tree):
    path = "aten/src/ATen/ExpandUtils.h"
    lines = (indexed_tree.root / path).read_text().splitlines()
    line = next(i for i, text in enumerate(lines, 1) if "infer_size(IntArrayRef a, IntArrayRef b);" in text)
    found = answer(f"{path}:{line}")
    assert found.target == "line" and len(found.units) > 100
    advice = [a for a in found.advice if a.path == "aten/src/ATen/ExpandUtils.cpp"]
    assert advice and advice[0].units == 1 and advice[0].cpu_seconds < found.estimate.cpu_seconds
    definition = (indexed_tree.root / advice[0].path).read_text().splitlines()[advice[0].location.line - 1]
    assert "infer_size(" in definition


def test_a_stub_declaration_is_cheaper_to_change_in_its_registered_kernels(answer, indexed_tree):
    from kernelmap.impact.units import cpu_capabilities

    path = "aten/src/ATen/native/UnaryOps.h"
    lines = (indexed_tree.root / path).read_text().splitlines()
    line, stub = next((i, m.group(1)) for i, t in enumerate(lines, 1) if (m := re.match(r"DECLARE_DISPATCH\(\w+, (\w+)\)", t)))
    found = answer(f"{path}:{line}")
    assert found.advice and all(a.units < len(found.units) for a in found.advice)
    kernels = [a for a in found.advice if a.path.startswith("aten/src/ATen/native/cpu/")]
    assert kernels and kernels[0].units == len(cpu_capabilities(indexed_tree.root))  # one copy per CPU capability
    registered = (indexed_tree.root / kernels[0].path).read_text().splitlines()[kernels[0].location.line - 1]
    assert stub in registered


def test_a_generated_file_says_where_it_comes_from(answer):
    found = answer("build/aten/src/ATen/NativeFunctions.h")
    assert len(found.units) > 100
    assert any("generated" in n and "NativeFunctions.h" in n for n in found.notes)


def test_a_configured_header_is_its_template(answer, impact_data, indexed_tree):
    found = answer("aten/src/ATen/Config.h.in")
    assert any("configures" in n for n in found.notes)
    named = {u.path for u in found.units}
    direct = [u.path for u in impact_data("cpu").units if u.kind == "cpp" and u.path.startswith("aten/")
              and "#include <ATen/Config.h>" in (indexed_tree.root / u.path).read_text(errors="replace")]
    assert direct and set(direct) <= named and len(named) > 100


def test_the_second_question_reads_the_cache(indexed_tree, impact_data):
    from kernelmap import env
    from kernelmap.impact import _warm

    impact_data("cpu")
    pointer = env.cache_dir() / "impact" / f"{indexed_tree.name}.cpu.key.json"
    assert pointer.exists()
    assert _warm(pointer, indexed_tree, "cpu") is not None
