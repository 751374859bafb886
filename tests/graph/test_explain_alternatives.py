"""`explain` and `where` show alternatives as alternatives (Note [alternatives
of a step]): one way down as steps, what the code does instead at a step
under it, with the condition that picks each. `explain aten::add.Tensor
--device cuda` listed vectorized_elementwise_kernel (case 4),
unrolled_elementwise_kernel (case 1), launch_legacy_kernel (a non-contiguous
input) and the dynamic-casting branch float32 never reaches as one sequence
of steps. Every location is checked against the file it names."""

from __future__ import annotations

import json
import re

from kernelmap.graph.explain import explain
from kernelmap.model import Explanation
from tests.conftest import run_kernelmap
from tests.graph.conftest import TREE_NAME

ALTERNATIVE_LAUNCHES = ("unrolled_elementwise_kernel", "launch_legacy_kernel", "launch_unrolled_kernel")


def line_at(location, context) -> str:
    from kernelmap.graph.code import location_lines

    return location_lines(location, context)[location.line - 1]


def step_naming(result, name):
    return next(s for s in result.steps if s.summary.split(" ")[0].rsplit("::", 1)[-1] == name)


def test_add_on_cuda_follows_one_way_and_folds_the_others(context):
    ctx = context("cuda")
    result = explain("aten::add.Tensor", ctx)
    summaries = " ".join(s.summary for s in result.steps)
    for name in ALTERNATIVE_LAUNCHES:  # none is a step of its own
        assert not any(s.summary.split(" ")[0].rsplit("::", 1)[-1] == name for s in result.steps), name
    assert "vectorized_elementwise_kernel" in summaries

    launch = step_naming(result, "vectorized_elementwise_kernel")
    assert "[case 4]" in launch.summary
    assert {(a.name, a.condition) for a in launch.alternatives} >= {("unrolled_elementwise_kernel", "case 1")}

    vectorized = step_naming(result, "launch_vectorized_kernel")
    legacy = next(a for a in vectorized.alternatives if a.name.endswith("launch_legacy_kernel"))
    assert legacy.condition == "else of if (contiguous)"  # after `if (contiguous) return launch_vectorized_kernel(...)`: no `else` written

    nocast = step_naming(result, "gpu_kernel_impl_nocast")
    casting = [a for a in nocast.alternatives if "needs_dynamic_casting" in (a.condition or "")]
    assert {a.name.rsplit("::", 1)[-1] for a in casting} == {"launch_unrolled_kernel", "launch_legacy_kernel"}
    assert all(a.condition.startswith("else of if (!needs_dynamic_casting") and a.note.startswith("never for float32") for a in casting)

    for step in result.steps:
        for a in step.alternatives:  # each where it is called
            short = a.name.rsplit("::", 1)[-1]
            assert short in line_at(a.location, ctx), (a, line_at(a.location, ctx))


def test_add_on_cpu_folds_the_threaded_and_scalar_ways(context):
    ctx = context("cpu")
    result = explain("aten::add.Tensor", ctx)
    serial = step_naming(result, "serial_for_each")
    assert "numel < grain_size" in serial.summary
    threads = next(a for a in serial.alternatives if a.name.endswith("parallel_for"))
    assert threads.condition.startswith("else of if (numel < grain_size")
    loop = step_naming(result, "vectorized_loop")
    assert any(a.name.endswith("basic_loop") and a.condition == "else of if (idx)" for a in loop.alternatives)
    assert not any(s.summary.split(" ")[0].endswith(("parallel_for", "basic_loop")) for s in result.steps)


def test_alternatives_round_trip_and_print_under_their_step(context, indexed_tree):
    result = explain("aten::add.Tensor", context("cuda"))
    again = Explanation.from_json(json.loads(json.dumps(result.to_json())))
    assert again.steps == result.steps
    done = run_kernelmap("explain", "aten::add.Tensor", "--device", "cuda", "--source", TREE_NAME, "--width", "300")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if "vectorized_elementwise_kernel (defined at" in line)
    assert lines[at + 1].lstrip().startswith("+ or unrolled_elementwise_kernel") or lines[at + 2].lstrip().startswith("+ or unrolled")
    assert any(re.match(r"\s+\+ or launch_legacy_kernel \[else of if \(contiguous\)\]", line) for line in lines)
    numbered = [line for line in lines if re.match(r"\s*\d+\. ", line)]
    assert not any(name in line for line in numbered for name in ALTERNATIVE_LAUNCHES)


def test_where_shows_each_other_leaf_with_what_picks_it(indexed_tree):
    done = run_kernelmap("where", "aten::add.Tensor", "--device", "cuda", "--static", "--source", TREE_NAME, "--width", "300")
    assert done.returncode == 0, done.stderr
    leaf = next(line for line in done.stdout.splitlines() if line.startswith("leaf"))
    assert "vectorized_elementwise_kernel" in leaf and "case 4" in leaf
    others = [line for line in done.stdout.splitlines() if line.startswith("  + or")]
    assert any("unrolled_elementwise_kernel" in line and "case 1" in line for line in others)
    assert any("elementwise_kernel" in line and "instead when else of if (contiguous)" in line for line in others)
