"""The recorded runtime golden set: what it holds, and that joining its
stacks to the 2.6.0 tree gives locations that hold the functions named
(each read from the file)."""

from __future__ import annotations

import re
from pathlib import Path

from kernelmap import env
from kernelmap.model import NodeKind
from kernelmap.observe.capture import Capture, RawFrame, RawStack
from kernelmap.observe import source_map as open_source_map
from kernelmap.observe.frames import parse_frame
from kernelmap.observe.join import observed_tree

from tests.golden.observed import OBSERVED
from tests.observe.conftest import TREE_NAME, holds_function, walk


def test_it_is_the_installed_torch_and_small(golden):
    install = env.torch_install()
    assert golden.header["torch"] == install.version
    assert golden.header["git_version"] == install.commit
    assert golden.header["capability"] in ("DEFAULT", "AVX2", "AVX512")
    assert OBSERVED.stat().st_size < 8 * 1024 * 1024


def test_it_covers_at_least_300_operators(golden):
    ops = golden.by_operator()
    assert len(ops) >= 300
    assert {"aten::add.Tensor", "aten::mm", "aten::sort"} <= set(ops)


def test_every_stack_reaches_an_operator_entry(golden):
    for call in golden.calls:
        for stack in call.stacks:
            assert golden.entry(stack) is not None, call.opinfo


def _capture(golden, op: str) -> Capture:
    stacks = tuple(
        RawStack("break", 0, 1, tuple(RawFrame(name=golden.frames[i].name, lib=golden.frames[i].lib) for i in reversed(s)))
        for s in golden.by_operator()[op]
    )
    return Capture(stacks, {"capability": golden.header["capability"]})


def test_recorded_stacks_join_to_lines_that_hold_their_functions(golden, source_map):
    """Each located frame of add, mm and sort: its line in the tree (or the
    generated file) names the function (a structured kernel by its kernel name)."""
    checked = 0
    for op in ("aten::add.Tensor", "aten::mm", "aten::sort"):
        tree = observed_tree(_capture(golden, op), source_map, op)
        for node, _ in walk(tree):
            if node.location is None or node.kind is NodeKind.PYTHON:
                continue
            path = node.location.disk_path
            assert path is not None and path.exists(), node.location
            assert holds_function(node), (node.name, str(node.location))
            checked += 1
    assert checked >= 20


def test_the_capability_and_dtype_case_of_a_recorded_add(golden, source_map):
    tree = observed_tree(_capture(golden, "aten::add.Tensor"), source_map, "aten::add.Tensor")
    ran = [n.attrs["ran"] for n, _ in walk(tree) if "ran" in n.attrs]
    assert any("case ScalarType::Float" in r for r in ran)
    assert all(r.split(",")[0] in ("DEFAULT", "AVX2", "AVX512") or r.startswith("case") for r in ran)


def test_a_vendor_librarys_entry_is_graded_and_what_runs_inside_it_is_apart(golden, source_map):
    """Note [inside a vendor library] in tests/golden/observed.py: lu_factor's
    recorded stacks run LAPACK's `sgetrf_`, which the tree's lapackLu calls
    (read from its file), then MKL's own functions below it, none of which
    the tree defines. The grader keeps `sgetrf_` (the entry) and counts the
    functions below it apart."""
    stacks = [s for s in golden.by_operator()["aten::linalg_lu_factor_ex"] if any(golden.frames[i].function == "sgetrf_" for i in s)]
    assert stacks
    deeper = 0
    for stack in stacks:
        graded, above = golden.graded(stack)
        inside = golden.inside_vendor(stack)
        names = [f.function for f in graded[above:]]
        assert "sgetrf_" in names and "sgetrf_" not in {f.function for f in inside}
        caller = graded[names.index("sgetrf_") + above - 1]
        location, _ = source_map.definition(caller.parsed)
        assert location is not None and "sgetrf_(" in location.disk_path.read_text()
        frames = [golden.frames[i] for i in stack]
        below = [f for f in frames[[f.function for f in frames].index("sgetrf_") + 1 :] if f.is_real]
        assert below == inside, [f.function for f in below]
        deeper += bool(below)
        assert not {f.id for f in inside} & {f.id for f in graded}
        for f in inside:
            assert f.is_vendor and source_map.definition(parse_frame(f.name))[0] is None, f.function
    assert deeper, "no recorded stack goes below sgetrf_"


def _below(golden, op: str, caller: str, callee: str) -> list[tuple[tuple[int, ...], int]]:
    """(stack, position of `callee`) where the recorded stacks of `op` run `callee` right below `caller`."""
    return [(s, k) for s in golden.by_operator()[op] for k in range(1, len(s))
            if golden.frames[s[k]].function == callee and golden.frames[s[k - 1]].function == caller]


def test_a_containers_block_copy_is_not_graded_and_the_trees_own_is(golden, source_map):
    """Note [whose block copy] in tests/golden/observed.py: eq's recorded
    stacks run memcpy right below loop_2d_from_1d, whose definition
    (TensorIterator.h, read from the tree) writes no copy but builds a
    PtrVector (a c10::SmallVector) of the data pointers, whose copy was inlined: a
    container's, not graded. embedding's memcpy below index_select_out_cpu_,
    whose definition writes `memcpy(`, is the tree's, graded, and named by
    the map."""
    from kernelmap import graph

    loop = "at::TensorIteratorBase::loop_2d_from_1d"
    inlined = _below(golden, "aten::eq.Tensor", loop, "memcpy")
    assert inlined
    frame = golden.frames[inlined[0][0][inlined[0][1] - 1]]
    location, _ = source_map.definition(parse_frame(frame.function + "()"), frame.lib)
    body = "\n".join(location.disk_path.read_text().splitlines()[location.line - 1 : location.end_line])
    header = location.disk_path.read_text()
    assert re.search(r"using PtrVector = (?:c10::)?SmallVector<char\*, \d+>;", header)
    assert "PtrVector data(base, base + ntensor);" in body and not re.search(r"\b(memcpy|memmove|std::copy)\s*\(", body)
    for stack, k in inlined:
        assert golden.container_copy(stack, k, source_map)
        assert golden.frames[stack[k]] not in golden.graded(stack, source_map)[0]
    own = _below(golden, "aten::embedding", "at::native::index_select_out_cpu_", "memcpy")
    assert own
    for stack, k in own:
        assert not golden.container_copy(stack, k, source_map)
        assert golden.frames[stack[k]] in golden.graded(stack, source_map)[0]
    caller = golden.frames[own[0][0][own[0][1] - 1]]
    location, _ = source_map.definition(caller.parsed, caller.lib)
    body = "\n".join(location.disk_path.read_text().splitlines()[location.line - 1 : location.end_line])
    assert re.search(r"\bmemcpy\(", body)
    _, context = open_source_map(TREE_NAME)
    tree = graph.stack("aten::embedding", context, 40)
    assert any(node.name == "memcpy" for node, _ in walk(tree))


def test_a_utility_kernel_called_directly_is_graded_as_its_operators_entry(golden, source_map):
    """Note [a utility's kernel called directly] in tests/golden/observed.py:
    Resize.cpp's native_resize_ calls `native::resize_(output, shape)`, the CPU
    kernel native_functions.yaml names for aten::resize_ (both read from the
    tree). argwhere's recorded stacks run at::native::resize_ below
    resize_output, not through `at::_ops::resize_::call`, then _resize_impl_
    below it: the kernel is graded, as a utility operator's entry is, and what
    runs below it is not."""
    root = source_map.index.tree.root
    resize = (root / "aten/src/ATen/native/Resize.cpp").read_text()
    assert re.search(r"static void native_resize_\(const Tensor& output, IntArrayRef shape\) \{\s*native::resize_\(output, shape\);", resize)
    yaml = (root / "aten/src/ATen/native/native_functions.yaml").read_text()
    assert re.search(r"^- func: resize_\((?:.*\n)+?\s+CPU: resize_\n", yaml, re.M)
    stacks = [s for s in golden.by_operator()["aten::argwhere"] if any(golden.frames[i].function == "at::native::_resize_impl_" for i in s)]
    assert stacks
    for stack in stacks:
        names = [golden.frames[i].function for i in stack]
        at = names.index("at::native::resize_")
        assert not names[at - 1].startswith("at::_ops::resize_")
        graded, _ = golden.graded(stack, source_map)
        assert graded[-1].function == "at::native::resize_"
        assert "at::native::_resize_impl_" not in {f.function for f in graded}
