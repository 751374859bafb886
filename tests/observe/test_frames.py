"""Reading a native frame's name: function, capability, dtype case. On the
demangled names of the recorded golden set (real frames of torch's binary)
and on names whose parts the assertions spell out."""

from __future__ import annotations

import re

from kernelmap.observe.frames import CAPABILITIES, parse_frame, split_scope
from kernelmap.observe.mark import name_key
from kernelmap.observe.symbols import does_work, strip_return_type


def test_return_types_are_stripped():
    assert strip_return_type("void at::native::AVX2::vectorized_loop<int>(char**, long)") == "at::native::AVX2::vectorized_loop<int>(char**, long)"
    assert strip_return_type("unsigned long at::native::f<int>(long)") == "at::native::f<int>(long)"
    assert strip_return_type("at::native::(anonymous namespace)::add_kernel(at::TensorIteratorBase&, c10::Scalar const&)").startswith("at::native::(anonymous")


def test_every_recorded_frame_with_a_capability_namespace_reads_it(golden):
    seen = 0
    for f in golden.frames:
        if not f.name:
            continue
        m = re.search(r"at::native::(DEFAULT|AVX2|AVX512)::", f.name)
        if m:
            seen += 1
            assert f.parsed.capability in CAPABILITIES, f.name[:200]
    assert seen > 50


def test_a_loop_names_the_dtype_its_dispatch_case_took(golden):
    """add's loop on float32 inputs: a function_ref callback running a
    VectorizedLoop2d over add_kernel's lambdas of float."""
    loops = [f for f in golden.frames if f.name and "callback_fn" in f.name and "add_kernel" in f.name and "(float, float)" in f.name]
    assert loops
    for f in loops:
        assert f.parsed.dtype == "float32"
        assert f.parsed.dtype_case == "ScalarType::Float"
        assert f.parsed.runs and f.parsed.runs.endswith("VectorizedLoop2d")
        assert f.parsed.capability in CAPABILITIES


def test_functions_lambdas_and_clones():
    f = parse_frame("at::native::(anonymous namespace)::add_kernel(at::TensorIteratorBase&, c10::Scalar const&)::{lambda()#1}::operator()() const [clone .isra.0]")
    assert f.function == "at::native::(anonymous namespace)::add_kernel"
    assert f.lookup == "at::native::add_kernel"
    assert f.lambda_path == ("{lambda()#1}",)
    assert f.clone == ".isra.0"
    s = parse_frame("at::native::structured_mm_out_cpu::impl(at::Tensor const&, at::Tensor const&, at::Tensor const&)")
    assert s.short == "structured_mm_out_cpu::impl"
    assert split_scope("a::b<c::d>::e(f::g)") == ["a", "b<c::d>", "e(f::g)"]


def test_name_keys_match_static_and_observed_spellings():
    assert name_key("at::native::CPU_CAPABILITY::VectorizedLoop2d::operator()") == name_key("at::native::VectorizedLoop2d::operator()")
    assert name_key("at::native::(anonymous namespace)::add_kernel") == name_key("at::native::add_kernel")


def test_the_work_functions():
    assert does_work("void at::native::AVX2::vectorized_loop<int>(char**, long)")
    assert does_work("sgemm_") and does_work("cblas_sgemm_batch") and does_work("Sleef_expf8_u10")
    assert not does_work("c10::TensorImpl::sizes() const")
    assert not does_work("at::native::foo() [clone .cold]")
