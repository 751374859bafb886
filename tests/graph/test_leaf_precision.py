"""The leaves `where` names are ones that run (issue "Witness it", leaf
precision): graded against the stacks torch 2.13's CPU build really ran
(tests/golden/observed-cpu.jsonl.gz) and the real 2.6.0 tree. Which build of
a kernel runs is read from the tree's registration lines, which name a
library routine has from the wheel's own symbol table (`nm`), never copied
from output."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

from kernelmap import api
from tests.golden.observed import load

VEC_HEADERS = {"AVX512": "aten/src/ATen/cpu/vec/vec512/vec512_float.h", "AVX2": "aten/src/ATen/cpu/vec/vec256/vec256_float.h"}


@pytest.fixture(scope="session")
def sleef_addresses() -> dict[str, int]:
    """Each SLEEF symbol libtorch_cpu.so defines, and its address."""
    from kernelmap import env

    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("nm (binutils) is not installed")
    library = env.torch_install().torch_dir / "lib/libtorch_cpu.so"
    out = subprocess.run([nm, "--defined-only", str(library)], capture_output=True, text=True, check=True).stdout
    return {parts[2]: int(parts[0], 16) for parts in (line.split(" ", 2) for line in out.splitlines() if "Sleef" in line) if len(parts) == 3}


def test_a_recorded_sleef_frame_is_named_as_the_tree_calls_it(tree_2_6, sleef_addresses):
    """gdb shows SLEEF's functions by their vector-ABI names
    (`_ZGVeN16v_Sleef_expf_u10`); the wheel defines the name ATen's
    Vectorized methods call at the same address, and that is the frame's
    function: called so in the tree's vector headers."""
    golden = load()
    vec = "\n".join((tree_2_6 / path).read_text() for path in VEC_HEADERS.values())
    vec += (tree_2_6 / "aten/src/ATen/cpu/vec/vec512/vec512_double.h").read_text()
    recorded = {f.name for f in golden.frames if f.name and "Sleef" in f.name}
    assert len(recorded) >= 5
    for raw in recorded:
        frame = next(f for f in golden.frames if f.name == raw)
        name = frame.function
        assert name.startswith("Sleef_") and frame.is_vendor, raw
        assert sleef_addresses[name] == sleef_addresses[raw.split(" ", 1)[0]], raw  # one function, two names
        assert re.search(rf"\b{name}\(", vec), name


@pytest.fixture
def on_a_cpu(monkeypatch):
    """Answers as on a CPU whose best capability is the one named, named as
    torch reads it (ATEN_CPU_CAPABILITY)."""
    from kernelmap.graph.ends import host_cpu_capability

    def on(capability: str) -> None:
        monkeypatch.setenv("ATEN_CPU_CAPABILITY", capability)
        host_cpu_capability.cache_clear()

    yield on
    monkeypatch.undo()
    host_cpu_capability.cache_clear()


def test_the_capability_is_the_one_torch_picks_here():
    """kernelmap reads this machine's CPU capability as torch's
    compute_cpu_capability does, without importing torch: the same as the
    installed torch reports."""
    from kernelmap.graph.ends import host_cpu_capability

    if "ATEN_CPU_CAPABILITY" in os.environ:
        pytest.skip("ATEN_CPU_CAPABILITY is set for this run")
    host_cpu_capability.cache_clear()
    code = "import torch; print(torch.backends.cpu.get_cpu_capability())"
    torch_says = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert host_cpu_capability() == torch_says


def _leaves(op: str, indexed_tree) -> list:
    answer = api.where(op, device="cpu", static=True, with_source=True, source=indexed_tree.name)
    return [s for s in answer.source if s.role == "leaf"]


def _capability(tree_2_6, path: str, stub: str) -> str:
    """The build of a stub's kernel an AVX512 CPU runs, read off its registration:
    REGISTER_DISPATCH leaves the AVX512 slot nullptr (DispatchStub.h)."""
    text = (tree_2_6 / path).read_text()
    m = re.search(rf"^(\w+)\(\s*{stub}\s*,", text, re.M)
    assert m is not None, stub
    header = (tree_2_6 / "aten/src/ATen/native/DispatchStub.h").read_text()
    assert "REGISTER_DISPATCH now dispatches an AVX512 kernel to nullptr" in header
    return "AVX512" if m.group(1) == "ALSO_REGISTER_AVX512_DISPATCH" else "AVX2"


@pytest.mark.parametrize(("op", "path", "stub"), [("aten::sinh", "aten/src/ATen/native/cpu/UnaryOpsKernel.cpp", "sinh_stub"),
                                                  ("aten::atanh", "aten/src/ATen/native/cpu/UnaryOpsKernel.cpp", "atanh_stub"),
                                                  ("aten::fmod.Tensor", "aten/src/ATen/native/cpu/BinaryOpsKernel.cpp", "fmod_stub")])
def test_where_names_the_sleef_routine_of_the_build_that_runs(op, path, stub, tree_2_6, indexed_tree, on_a_cpu):
    """A kernel of native/cpu is compiled once per CPU capability and its
    Vectorized method calls SLEEF once per capability (vec512_float.h's
    Sleef_sinhf16_u10, vec256_float.h's Sleef_sinhf8_u10): `where` names the
    routine of the build the stub runs on an AVX512 CPU, not both."""
    on_a_cpu("avx512")
    capability = _capability(tree_2_6, path, stub)
    sleef = [leaf for leaf in _leaves(op, indexed_tree) if leaf.name.startswith("Sleef_")]
    assert [leaf.location.path for leaf in sleef] == [VEC_HEADERS[capability]]
    leaf = sleef[0]
    assert f"{leaf.name}(" in (tree_2_6 / leaf.location.path).read_text().splitlines()[leaf.location.line - 1]


def test_an_avx2_cpu_runs_every_stub_s_avx2_build(indexed_tree, on_a_cpu):
    """On a CPU without AVX512 the stub picks the AVX2 build whatever the
    registration does with the AVX512 slot: sinh's kernel fills it, yet the
    leaf is vec256_float.h's routine."""
    on_a_cpu("avx2")
    sleef = [leaf for leaf in _leaves("aten::sinh", indexed_tree) if leaf.name.startswith("Sleef_")]
    assert [leaf.location.path for leaf in sleef] == [VEC_HEADERS["AVX2"]]


@pytest.mark.parametrize("op", ["aten::sinh", "aten::atanh"])
def test_the_sleef_leaf_is_the_one_the_binary_ran(op, indexed_tree, on_a_cpu):
    """The recorded run of the operator (an AVX512 CPU) called the SLEEF
    routine `where` names for such a CPU."""
    on_a_cpu("avx512")
    golden = load()
    assert golden.header["capability"] == "AVX512"
    ran = {golden.frames[i].function for s in golden.by_operator()[op] for i in s}
    sleef = [leaf.name for leaf in _leaves(op, indexed_tree) if leaf.name.startswith("Sleef_")]
    assert sleef and all(name in ran for name in sleef)


def _below_entry(golden, op: str) -> set[str]:
    """The functions the recorded runs of `op` ran below its entry kernel's frame."""
    out: set[str] = set()
    for stack in golden.by_operator()[op]:
        frames = [golden.frames[i] for i in stack]
        at = next((k for k, f in enumerate(frames) if f.function == f"at::native::{op.split('::')[1]}"), None)
        if at is not None:
            out |= {f.function for f in frames[at + 1 :] if f.is_real}
    return out


def test_a_call_after_a_return_taken_for_the_dtype_cannot_run(tree_2_6, context, indexed_tree):
    """UnaryOps.cpp's conj_physical returns its input first for a real one
    (read here): for float32 its call of at::_conj_physical is a branch that
    cannot run, and `where` names no leaf (conj_kernel's loop never runs: the
    recorded runs show nothing below the kernel); for complex64 it runs."""
    from kernelmap import graph
    from tests.graph.conftest import walk

    text = (tree_2_6 / "aten/src/ATen/native/UnaryOps.cpp").read_text()
    body = text[text.index("Tensor conj_physical(const Tensor& self) {"):]
    assert body.splitlines()[1].strip() == "if (!self.is_complex()) return self;"
    assert not _below_entry(load(), "aten::conj_physical")
    for dtype, runs in (("float32", False), ("complex64", True)):
        tree = graph.stack("aten::conj_physical", context("cpu", dtype=dtype))
        call = next(n for n, _ in walk(tree) if n.name in ("aten::_conj_physical", "at::_conj_physical"))
        assert bool(call.attrs.get("branch")) is not runs, dtype
        if not runs:
            assert "returns before it" in call.attrs["branch"] and "is_complex" in call.attrs["branch"]
    assert _leaves("aten::conj_physical", indexed_tree) == []


def test_a_real_tensor_has_no_conjugate_bit(tree_2_6, indexed_tree):
    """resolve_conj returns a tensor whose conjugate bit is not set (read
    here), and a real tensor's never is: no copy runs for float32, as the
    recorded runs show, and `where` names no leaf."""
    text = (tree_2_6 / "aten/src/ATen/native/UnaryOps.cpp").read_text()
    body = text[text.index("Tensor resolve_conj(const Tensor& self) {"):]
    assert re.match(r"\s*if \(!self\.is_conj\(\)\) \{\s*return self;", body[body.index("{") + 1 :])
    assert not _below_entry(load(), "aten::resolve_conj")
    assert _leaves("aten::resolve_conj", indexed_tree) == []


def test_a_loop_for_bit_types_is_no_leaf_of_a_float_copy(tree_2_6, context):
    """CopyKernel.cpp's direct_copy_kernel runs cpu_kernel only `if
    (isBitsType(dtype))` (read here): no float dtype is one, so that loop is a
    branch of a float32 copy, and the cpu_kernel_vec of its `else` is not."""
    from kernelmap import graph
    from tests.graph.conftest import walk

    text = (tree_2_6 / "aten/src/ATen/native/cpu/CopyKernel.cpp").read_text()
    body = text[text.index("void direct_copy_kernel("):]
    assert "} else if (isBitsType(dtype)) {" in body[: body.index("\n}\n")]
    tree = graph.stack("aten::copy_", context("cpu"))
    copy = next(n for n, _ in walk(tree) if n.name.endswith("::direct_copy_kernel") and n.children)
    loops = {n.name: n for n in copy.children if n.name in ("cpu_kernel", "cpu_kernel_vec")}
    assert "bit" not in str(loops["cpu_kernel_vec"].attrs.get("branch") or "")
    assert not loops["cpu_kernel_vec"].attrs.get("branch")
    assert "isBitsType" in (loops["cpu_kernel"].condition or "") and loops["cpu_kernel"].attrs.get("branch")
