"""Tensor utilities a kernel calls are steps of the default answer (issue
"Witness it", Note [utilities as steps] in kernelmap.processors): the binary
enters their `at::_ops::<op>::call`, so `stack` keeps each call, unexpanded,
and the text view folds them into one line. The ground truth is read from
the recorded native stacks of torch 2.13.0 (tests/golden/observed-cpu.jsonl.gz)."""

from __future__ import annotations

from kernelmap import api, graph
from kernelmap.graph.rules import is_utility_op
from kernelmap.render.tree import render
from tests.golden.observed import load
from tests.graph.conftest import walk


def observed_utilities(op: str) -> set[tuple[str, str]]:
    """(caller, utility operator) for each utility entry `at::_ops::<op>::call`
    the recorded stacks of `op` show called right below a function."""
    golden = load()
    out: set[tuple[str, str]] = set()
    for stack in golden.by_operator()[op]:
        frames, _ = golden.graded(stack)
        for caller, callee in zip(frames, frames[1:]):
            name = callee.function
            called = golden.structs.get(name.split("::")[2], "") if name.startswith("at::_ops::") and name.endswith("::call") else ""
            if called and is_utility_op(called.split("::", 1)[-1].split(".", 1)[0], False):
                out.add((caller.function, called))
    return out


def test_a_utility_a_kernel_calls_is_an_unexpanded_step(context):
    """torch.matmul of two vectors runs at::native::dot, whose recorded
    stacks enter fill_.Scalar's operator below it: the default answer has
    that call under dot, with no subtree (what fill_ runs is --all-calls'),
    marked a utility, at the line dot calls it; the text view folds dot's
    utilities into one `+ N utilities:` line naming it. The call is no end:
    `where`'s leaves and the main path never stop at a utility."""
    assert ("at::native::dot", "aten::fill_.Scalar") in observed_utilities("aten::matmul")
    ctx = context("cpu")
    tree = graph.stack("aten::matmul", ctx)
    dots = [n for n, _ in walk(tree) if n.name == "at::native::dot"]
    steps = [c for d in dots for c in d.children if c.name == "aten::fill_.Scalar"]
    assert steps and all(s.attrs.get("utility") and not s.children for s in steps)
    site = steps[0].attrs["call_site"]
    assert "fill_" in site.disk_path.read_text().splitlines()[site.line - 1]
    expanded = [n for n, path in walk(graph.stack("aten::matmul", context("cpu", all_calls=True)))
                if n.name == "aten::fill_.Scalar" and any(p.name == "at::native::dot" for p in path)]
    # (a fill_ in an arm for another dtype, as empty_cpu's fill_empty_deterministic_ has, stays collapsed)
    assert expanded and all(n.children or n.attrs.get("repeat") or n.attrs.get("branch") for n in expanded), "--all-calls expands the utility"

    marked = api.with_main_path(tree)
    main = [n for n, _ in walk(marked) if n.attrs.get("main")]
    assert any(n.name == "at::native::dot" for n in main) and not any(n.attrs.get("utility") for n in main)
    text = render(marked, color=False).splitlines()
    at = next(i for i, line in enumerate(text) if "at::native::dot  [kernel]" in line)
    folded = [line for line in text[at + 1 :] if line.lstrip().startswith("+ ")][:3]
    assert any(line.lstrip().startswith("+ ") and " utilities: " in line and "fill_.Scalar" in line for line in folded), folded
    assert not any(line.lstrip()[:1].isdigit() and "fill_" in line for line in text), "a utility is never a numbered step"
    # the whole tree (--all) folds each run of sibling utilities the same way
    whole = render(marked, color=False, full=True).splitlines()
    runs = [line for line in whole if "+ " in line and " utilities: " in line]
    assert runs, "a run of sibling utilities is one line"
