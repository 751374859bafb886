"""The extractor on tiny snippets: names, conditions, call kinds, registrations."""

from __future__ import annotations

import pytest

from kernelmap.source.extract import MAX_FILE_BYTES, Extractor
from kernelmap.source.facts import OperatorNames
from kernelmap.source.masking import mask_attributes

OPS = OperatorNames(frozenset({"add", "add_", "mul", "cudnn_convolution", "conv2d", "empty"}), frozenset({"add", "add_", "mul"}))


@pytest.fixture(scope="module")
def ex():
    return Extractor(OPS)


def facts(ex, text: str, path: str = "aten/src/ATen/native/X.cpp"):
    return ex.extract(path, text.encode())


def defs_by_name(f):
    return {d.name: d for d in f.definitions}


def test_qualified_names_with_namespaces_classes_and_anonymous_namespaces(ex):
    f = facts(
        ex,
        """
namespace at { namespace native {
namespace {
int helper(int x) { return x; }
struct Params { bool use_cudnn() const { return true; } };
}
Tensor Params2::run(const Tensor& t) { return t; }
}}
namespace at::cuda::blas {
template <> void gemm<double>(int a) { }
}
""",
    )
    names = defs_by_name(f)
    assert set(names) == {
        "at::native::(anonymous namespace)::helper",
        "at::native::(anonymous namespace)::Params::use_cudnn",
        "at::native::Params2::run",
        "at::cuda::blas::gemm",
    }
    assert names["at::native::(anonymous namespace)::helper"].lookup == "at::native::helper"
    assert names["at::native::(anonymous namespace)::Params::use_cudnn"].kind == "method"
    assert names["at::native::(anonymous namespace)::helper"].line == 4


def test_structured_kernel_macros_name_their_struct_and_op(ex):
    f = facts(
        ex,
        """
namespace at { namespace meta {
TORCH_META_FUNC2(add, Tensor) (const Tensor& self, const Tensor& other) { build(self); }
TORCH_META_FUNC(mul) (const Tensor& self) { }
}
namespace native {
TORCH_IMPL_FUNC(mul_out) (const Tensor& self, const Tensor& result) { mul_stub(device_type(), *this); }
}}
""",
    )
    names = defs_by_name(f)
    assert names["at::meta::structured_add_Tensor::meta"].kind == "structured_meta"
    assert names["at::meta::structured_add_Tensor::meta"].op == "add.Tensor"
    assert names["at::meta::structured_mul::meta"].op == "mul"
    impl = names["at::native::structured_mul_out::impl"]
    assert (impl.kind, impl.op, impl.line) == ("structured_impl", "mul_out", 7)


def test_preprocessor_conditions_of_definitions(ex):
    f = facts(
        ex,
        """
#ifndef AT_PER_OPERATOR_HEADERS_H
#define AT_PER_OPERATOR_HEADERS_H
#endif
#if AT_CUDNN_ENABLED()
void real() {}
#else
void placeholder() {}
#endif
#ifdef USE_ROCM
void rocm() {}
#elif CUDNN_VERSION >= 8000
void v8() {}
#endif
#ifndef C10_MOBILE
void not_mobile() {}
#endif
void always() {}
""",
    )
    cond = {d.name: d.condition for d in f.definitions}
    assert cond["real"] == "AT_CUDNN_ENABLED()"
    assert cond["placeholder"] == "!AT_CUDNN_ENABLED()"
    assert cond["rocm"] == "defined(USE_ROCM)"
    assert cond["v8"] == "!defined(USE_ROCM) && CUDNN_VERSION >= 8000"
    assert cond["not_mobile"] == "!defined(C10_MOBILE)"
    assert cond["always"] is None


def test_call_kinds_and_case_labels(ex):
    f = facts(
        ex,
        """
namespace at { namespace native {
static void add_stub(float* a, const float* b, int n) {}
Tensor f(const Tensor& t, ConvBackend backend) {
  switch (backend) {
    case ConvBackend::Cudnn:
      out = at::cudnn_convolution(t);
      break;
    default:
      out = at::_ops::add_Tensor::call(t, t);
  }
  if (t.is_cuda()) { cudnnConvolutionForward(handle); }
  auto y = t.add(1);
  auto s = t.size(0);
  auto v = static_cast<int>(std::move(s));
  TORCH_CHECK(s > 0, "positive");
  helper(t);
  mul_stub(kCPU, iter);
  add_stub(a, b, 3);
  gpu_kernel(iter, [] GPU_LAMBDA (float a) { return a; });
  cublasSgemm(handle);
  ideep::convolution_forward::compute(x);
  dnnl::matmul(p);
  cudnn_frontend::OperationBuilder(CUDNN_BACKEND_OPERATION);
  cudnn_convolution(t);
  my_kernel<float><<<grid, block, 0, stream>>>(x);
  return at::conv2d_symint(t);
}
}}
""",
    )
    calls = {c.callee: c for c in f.calls}
    assert calls["at::cudnn_convolution"].kind == "dispatcher"
    assert calls["at::cudnn_convolution"].condition == "case ConvBackend::Cudnn"
    assert calls["at::cudnn_convolution"].op == "cudnn_convolution"
    assert calls["at::_ops::add_Tensor::call"].kind == "dispatcher"
    assert calls["at::_ops::add_Tensor::call"].condition == "default"
    assert calls["at::conv2d_symint"].kind == "dispatcher" and calls["at::conv2d_symint"].op == "conv2d"
    assert calls[".add"].kind == "dispatcher"
    # Not recorded (Note [calls kept]): accessors, casts, std::, macros.
    assert not {".size", "static_cast", "std::move", "TORCH_CHECK"} & set(calls)
    assert calls["cudnnConvolutionForward"].kind == "vendor"
    assert calls["cudnnConvolutionForward"].library == "cudnn"
    assert calls["cudnnConvolutionForward"].condition == "if (t.is_cuda())"
    assert calls["cublasSgemm"].library == "cublas"
    assert calls["ideep::convolution_forward::compute"].library == "onednn"
    assert calls["dnnl::matmul"].library == "onednn"
    assert calls["cudnn_frontend::OperationBuilder"].library == "cudnn"
    assert calls["cudnn_convolution"].kind == "direct"  # an at::native function, not cuDNN's API
    assert calls["gpu_kernel"].kind == "launch"
    assert calls["my_kernel"].kind == "launch"
    assert calls["helper"].kind == "direct"
    # Stubs are decided once the tree's stubs are known (Note [stub calls]).
    assert calls["mul_stub"].kind == "direct"
    assert {c.definition for c in f.calls if c.callee != "add_stub"} == {1}


def test_a_call_keeps_the_conditions_around_its_innermost(ex):
    """Note [conditions around a call]: sort_kernel_impl's shape, and a switch
    inside an else; a call under one condition has none around it."""
    f = facts(
        ex,
        """
namespace at { namespace native {
void f(bool descending, bool stable, int k) {
  if (descending) {
    if (stable) {
      std::stable_sort(a, b);
    } else {
      plain_desc(a);
    }
  } else {
    switch (k) {
      case 1:
        if (stable) { one_stable(a); }
        break;
    }
    only_else(a);
  }
}
}}
""",
    )
    calls = {c.callee: c for c in f.calls}
    assert (calls["std::stable_sort"].condition, calls["std::stable_sort"].outer) == ("if (stable)", "if (descending)")
    assert (calls["plain_desc"].condition, calls["plain_desc"].outer) == ("else of if (stable)", "if (descending)")
    assert (calls["one_stable"].condition, calls["one_stable"].outer) == ("if (stable)", "else of if (descending)\ncase 1")
    assert (calls["only_else"].condition, calls["only_else"].outer) == ("else of if (descending)", None)


def test_a_call_in_a_checks_arguments_is_inside_the_check(ex):
    """Note [calls in checks]: Repeat.h's `TORCH_CHECK((repeats >= 0).all()...)`."""
    f = facts(
        ex,
        """
namespace at { namespace native {
void f(const Tensor& repeats, std::optional<int64_t> output_size) {
  if (output_size.has_value()) {
    total = output_size.value();
  } else {
    TORCH_CHECK(
        (repeats >= 0).all().item<uint8_t>(), "repeats can not be negative");
    work(repeats);
  }
  TORCH_INTERNAL_ASSERT(at::native::valid(repeats));
}
}}
""",
    )
    calls = {c.callee: c for c in f.calls}
    assert (calls[".all"].condition, calls[".all"].outer) == ("inside TORCH_CHECK", "else of if (output_size.has_value())")
    assert (calls["work"].condition, calls["work"].outer) == ("else of if (output_size.has_value())", None)
    assert calls["at::native::valid"].condition == "inside TORCH_INTERNAL_ASSERT"
    assert "TORCH_CHECK" not in calls  # the check itself is no call kept


def test_a_temporary_of_a_dependent_type_as_an_argument_keeps_its_call(ex):
    """ReduceMomentKernel.cu's `gpu_reduce_kernel<scalar_t, out_t, 2>(iter, ops,
    typename ops_t::acc_t{});` read as a function definition, and the call was lost."""
    f = facts(
        ex,
        """
namespace at { namespace native {
template <typename scalar_t, typename out_t=scalar_t>
void std_var_kernel_impl(TensorIterator& iter, double correction, bool take_sqrt) {
  ops_t ops(static_cast<accscalar_t>(correction), take_sqrt);
  gpu_reduce_kernel<scalar_t, out_t, 2>(iter, ops, typename ops_t::acc_t{});
}
}}
""",
    )
    assert [d.name for d in f.definitions] == ["at::native::std_var_kernel_impl"]
    assert [(c.callee, c.line, c.definition) for c in f.calls if c.short == "gpu_reduce_kernel"] == [("gpu_reduce_kernel", 6, 0)]


def test_calls_in_a_named_lambda_take_the_condition_of_its_first_call(ex):
    """Note [named lambdas]: index_select's shape. `outer_loop`'s body runs where
    `outer_loop(...)` is called, not where the lambda is written; a lambda only
    passed on keeps the condition around it; a case/if inside the body wins."""
    f = facts(
        ex,
        """
namespace at { namespace native {
void f(const Tensor& t, int64_t n, int64_t slice, int64_t grain) {
  if (t.dim() > 1) {
    auto outer_loop = [&](int64_t start, int64_t end) {
      copy_stub(kCPU, iter, false);
      if (t.is_neg()) { neg_helper(t); }
    };
    auto passed = [&](int64_t start, int64_t end) { passed_helper(t); };
    if (slice >= grain) {
      outer_loop(0, n);
    } else {
      at::parallel_for(0, n, grain / slice, outer_loop);
      at::parallel_for(0, n, grain / slice, passed);
      std::memcpy(dst, src, slice);
      std::move(t);
    }
  }
}
}}
""",
    )
    calls = {c.callee: c for c in f.calls}
    assert calls["copy_stub"].condition == "if (slice >= grain)"
    assert calls["neg_helper"].condition == "if (t.is_neg())"
    assert calls["passed_helper"].condition == "if (t.dim() > 1)"
    assert calls["at::parallel_for"].condition == "else of if (slice >= grain)"
    # the C library's block copy is a vendor call even spelled std::; other std:: calls are not kept
    assert calls["std::memcpy"].kind == "vendor" and calls["std::memcpy"].library == "libc"
    assert "std::move" not in calls


def test_directives_inside_lists_and_alternative_function_heads(ex):
    """cudnn/RNN.cpp's shapes: a parameter under `#ifndef` in a list, two ends of
    one expression, two argument lists closing one call, and two function heads
    over several lines sharing one body. None leaves an error region, the
    namespace holds every later definition, and both heads are definitions."""
    f = facts(
        ex,
        """
namespace at { namespace native {
int64_t get_num_weights(
    cudnnHandle_t handle,
#ifndef V8
    const TensorDescriptor& x_desc,
#endif
    cudnnDataType_t datatype) {
  auto n =
#ifndef V8
      count_v7(handle, x_desc);
#else
      count_v8(handle);
#endif
  auto [p, q] = get_parameters(
#ifndef V8
      handle, x_desc, n);
#else
      handle, n);
#endif
  return n;
}
struct Params {
#ifndef V8
  void set(
      int64_t mode,
      int64_t hidden){
#else
  void set(
      int64_t mode,
      bool packed,
      int64_t hidden) {
#endif
    set_mode(mode);
  }
};
Tensor after(const Tensor& t) { return t; }
}}
""",
    )
    assert f.errors == 0
    defs = defs_by_name(f)
    assert "at::native::after" in defs and "at::native::get_num_weights" in defs
    sets = sorted(d.line for d in f.definitions if d.name == "at::native::Params::set")
    assert len(sets) == 2  # each head at its own line; the body is the second's
    calls = {c.callee: c for c in f.calls}
    assert {"count_v7", "count_v8", "get_parameters", "set_mode"} <= set(calls)  # both whole statements are read
    assert calls["set_mode"].definition == next(i for i, d in enumerate(f.definitions) if d.line == sets[1])


def test_registrations_and_stub_declarations(ex):
    text = """
namespace at { namespace native {
DECLARE_DISPATCH(binary_fn, mul_stub);
DEFINE_DISPATCH(mul_stub);
REGISTER_DISPATCH(mul_stub, &mul_kernel);
REGISTER_ARCH_DISPATCH(mul_stub, DEFAULT, &mul_kernel_default);
REGISTER_AVX512_DISPATCH(mul_stub, &mul_kernel_avx512);
REGISTER_NO_CPU_DISPATCH(cudnn_stub);
TORCH_LIBRARY_IMPL(aten, CPU, m) {
  m.impl("add.Tensor", TORCH_FN(wrapper_CPU_add));
  m.impl(TORCH_SELECTIVE_NAME("aten::mul.Tensor"), TORCH_FN(wrapper_CPU_mul));
}
TORCH_LIBRARY(myops, m) {
  m.def("myadd(Tensor self, Tensor other) -> Tensor");
  m.def(TORCH_SELECTIVE_SCHEMA("myops::mymul(Tensor self) -> Tensor"), {at::Tag::pt2_compliant_tag});
}
void k(TensorIterator& iter) {
  AT_DISPATCH_FLOATING_TYPES_AND2(kHalf, kBFloat16, iter.dtype(), "mul_cpu", [&] { cpu_kernel(iter, f); });
  AT_DISPATCH_V2(iter.dtype(), "add_cpu", AT_WRAP([&] {}), AT_EXPAND(AT_ALL_TYPES), kBool);
}
}}
"""
    f = facts(ex, text, "aten/src/ATen/native/cpu/BinaryOpsKernel.cpp")
    assert [(s.kind, s.name) for s in f.stubs] == [("declare", "mul_stub"), ("define", "mul_stub")]
    regs = [(r.kind, r.name, r.target, r.key, r.detail) for r in f.registrations]
    assert ("register_dispatch", "mul_stub", "mul_kernel", "CPU", "each CPU capability") in regs
    assert ("register_dispatch", "mul_stub", "mul_kernel_default", "CPU", "DEFAULT") in regs
    assert ("register_dispatch", "mul_stub", "mul_kernel_avx512", "CPU", "AVX512") in regs
    assert ("register_dispatch", "cudnn_stub", None, "CPU", "none") in regs
    assert ("library_impl", "add.Tensor", "wrapper_CPU_add", "CPU", "aten") in regs
    assert ("library_impl", "mul.Tensor", "wrapper_CPU_mul", "CPU", "aten") in regs
    assert ("library_def", "myadd", None, None, "myops") in regs
    assert ("library_def", "mymul", None, None, "myops") in regs
    assert ("at_dispatch", "mul_cpu", "kHalf, kBFloat16", "AT_DISPATCH_FLOATING_TYPES_AND2", None) in regs
    assert ("at_dispatch", "add_cpu", "AT_ALL_TYPES, kBool", "AT_DISPATCH_V2", None) in regs
    assert "TORCH_LIBRARY_IMPL" not in {d.name for d in f.definitions}
    # The dtype dispatch sites belong to k.
    k = [i for i, d in enumerate(f.definitions) if d.name == "at::native::k"][0]
    assert {r.definition for r in f.registrations if r.kind == "at_dispatch"} == {k}


def test_a_call_or_registration_spelled_over_lines_is_at_the_line_of_its_name(ex):
    text = """namespace at { namespace native {
DECLARE_DISPATCH(
    binary_fn,
    mul_stub);
REGISTER_DISPATCH(
    mul_stub,
    &mul_kernel);
TORCH_LIBRARY(myops, m) {
  m.def(torch::schema(
      "myops::mymul(Tensor self) -> Tensor",
      c10::AliasAnalysisKind::FROM_SCHEMA));
}
void k(TensorIterator& iter, const Tensor& t) {
  auto it = TensorIteratorConfig()
      .check_all_same_dtype(false)
      .build();
  AT_DISPATCH_FLOATING_TYPES(iter.dtype(),
      "mul_cpu", [&] { at::native::
          cpu_kernel(iter, f); });
  auto p = t.template data_ptr<float>();
  auto q = ALayout::template load<4>(p);
  auto r = c10::
      // NOLINTNEXTLINE(some-check)
      unsafe_reclaim(p);
}
}}
"""
    lines = text.splitlines()
    f = facts(ex, text)
    named = [(c.short, c.line) for c in f.calls] + [(s.name, s.line) for s in f.stubs]
    named += [(r.key if r.kind == "at_dispatch" else r.name, r.line) for r in f.registrations]  # a dtype switch: its macro
    assert {name for name, _ in named} >= {"check_all_same_dtype", "build", "cpu_kernel", "load", "unsafe_reclaim", "mul_stub", "mymul",
                                           "AT_DISPATCH_FLOATING_TYPES"}
    for name, line in named:  # each on the line holding its name, read from the text
        assert name in lines[line - 1], (name, line, lines[line - 1])
    shorts = [c.short for c in f.calls]  # no `template` keyword or comment in a name; data_ptr is no call of interest
    assert "data_ptr" not in shorts and not any("template" in c.callee or "/" in c.callee for c in f.calls)
    assert "ALayout::load" in [c.callee for c in f.calls]


def test_a_function_object_built_to_be_called_at_once_is_a_call_of_its_operator(ex):
    f = facts(ex, """namespace at { namespace native {
void k(const Tensor& self) {
  cpu_scatter_gather_base_kernel<>()(self, 0, "scatter_add_", reduce_add);
  cuda_scatter_gather_base_kernel</*is_scatter_like=*/true, /*cast_to_opaque=*/false>()(self, 1);
  ReduceAdd()(self);
  get_fn(self)(1);
  make_thing()(2);
}
}}
""")
    calls = {c.callee: c for c in f.calls}
    assert {"cpu_scatter_gather_base_kernel::operator()", "cuda_scatter_gather_base_kernel::operator()", "ReduceAdd::operator()"} <= set(calls)
    assert not any(c.callee.startswith(("get_fn::", "make_thing::")) for c in f.calls)  # a call's result, no class built in place
    assert calls["cuda_scatter_gather_base_kernel::operator()"].line == 4 and calls["ReduceAdd::operator()"].short == "operator()"


def test_a_function_object_brace_initialised_to_be_called_at_once_is_a_call_of_its_operator(ex):
    f = facts(ex, """namespace at { namespace native {
void k(TensorIterator& iter) {
  sum_functor<scalar_t>{}(iter);
  at::native::VarTransform{}(var, eps);
  std::hash<c10::Stream>{}(s);
  decltype(op){}(1);
}
}}
""")
    calls = {c.callee: c for c in f.calls}
    assert {"sum_functor::operator()", "at::native::VarTransform::operator()"} <= set(calls), sorted(calls)
    assert calls["sum_functor::operator()"].line == 3 and calls["at::native::VarTransform::operator()"].short == "operator()"
    assert not any(c.callee.startswith(("std::", "decltype")) for c in f.calls)  # the standard library's, and no named class


def test_only_calls_of_registration_macros_and_library_methods_register(ex):
    """Note [registrations among calls]: registrations are read from the calls
    the query finds, by the callee's spelling and shape."""
    text = """
namespace at { namespace native {
REGISTER_FOO(mul_stub, &mul_kernel);
DECLARE_DISPATCHER(binary_fn, add_stub);
register_dispatch(add_stub, &add_kernel);
TORCH_LIBRARY_IMPL(aten, CPU, m) {
  lib->impl("sub.Tensor", TORCH_FN(wrapper_CPU_sub));
  m.impl();
  m.get().impl("div.Tensor", TORCH_FN(wrapper_CPU_div));
  m.implement("neg", TORCH_FN(wrapper_CPU_neg));
  f(REGISTER_DISPATCH(abs_stub, &abs_kernel));
}
}}
"""
    f = facts(ex, text, "aten/src/ATen/native/cpu/K.cpp")
    regs = [(r.kind, r.name, r.target) for r in f.registrations]
    assert regs == [("library_impl", "sub.Tensor", "wrapper_CPU_sub"), ("register_dispatch", "abs_stub", "abs_kernel")]
    assert f.stubs == ()
    # The member calls are calls all the same.
    assert {".impl", ".implement"} <= {c.callee for c in f.calls}


def test_the_folder_implies_the_stub_device(ex):
    text = "namespace at::native { REGISTER_DISPATCH(mul_stub, &mul_kernel_cuda); }"
    for path, device in (("aten/src/ATen/native/cuda/Mul.cu", "CUDA"), ("aten/src/ATen/native/mps/Mul.mm", "MPS"),
                         ("aten/src/ATen/native/Mul.cpp", "CPU")):
        [r] = facts(ex, text, path).registrations
        assert r.key == device, path


def test_global_kernels(ex):
    f = facts(ex, "namespace at { __global__ void C10_LAUNCH_BOUNDS_1(128) fill(float* p) { p[0] = 0; } }", "aten/src/ATen/native/cuda/F.cu")
    assert [(d.name, d.kind) for d in f.definitions] == [("at::fill", "global_kernel")]


def test_a_namespace_closed_early_by_unbalanced_preprocessor_branches_is_recovered(ex):
    f = facts(
        ex,
        """
namespace at::cuda::blas {
void a() {
#ifdef USE_ROCM
  if (x) { call(); }
  }
#else
  call();
#endif
}
void b() {}
} // namespace at::cuda::blas
""",
    )
    assert f.errors > 0
    assert {d.name for d in f.definitions} >= {"at::cuda::blas::b"}


def test_bad_bytes(ex):
    f = ex.extract("aten/src/ATen/Bad.cpp", b"namespace at { void f\xff\xfe() { g(); } void ok() {} }")
    assert "at::ok" in {d.name for d in f.definitions}
    nul = ex.extract("aten/src/ATen/Nul.cpp", b"void f() {}\0\0")
    assert nul.skipped == "binary (NUL bytes)" and nul.definitions == ()
    big = ex.extract("aten/src/ATen/Big.cpp", b"int x;\n" * (MAX_FILE_BYTES // 7 + 1))
    assert big.skipped is not None and "larger than" in big.skipped


def test_conversion_operators_keep_their_type_in_the_name(ex):
    f = facts(ex, "namespace at { struct A { operator bool() const { return 1; } explicit operator int*() { return 0; } };\n"
                  "template <typename T> B<T>::operator const std::string &() const { return s; } }")
    assert [(d.name, d.short, d.kind) for d in f.definitions] == [
        ("at::A::operator bool", "operator bool", "method"),
        ("at::A::operator int*", "operator int*", "method"),
        ("at::B::operator const std::string &", "operator const std::string &", "method"),
    ]


def test_grammar_failures_that_lost_definitions(ex):
    """Each snippet made the grammar drop the definition after it; masking keeps
    every line (the definitions' lines are checked)."""
    f = facts(
        ex,
        """#define DEVICE_INLINE __device__ C10_ALWAYS_INLINE
#define CONSTANT(Name, Val) static const float c_##Name[2] = { Val, Val }
#define CALL_OF(x) helper(x)
CONSTANT(1  , 1.0f);
namespace at {

DEVICE_INLINE int div_up(int a, int b) { return (a + b - 1) / b; }
void empty() {};
bool fast(ArrayRef<TensorList> lists, ArrayRef<Scalar> scalars = {}, bool promote = false) { return g(lists); }
void check_only() {
  TORCH_CHECK(false, "not supported (yet)")
}
void pool(int w) {
#ifdef CPU_CAPABILITY_AVX2
  if (w == 8) {
#else
  if (w == 16) {
#endif
    kernel(w);
  }
}
}
""",
    )
    assert f.errors == 0
    assert [(d.name, d.line) for d in f.definitions] == [
        ("at::div_up", 7), ("at::empty", 8), ("at::fast", 9), ("at::check_only", 10), ("at::pool", 13)]
    assert {(c.callee, c.line, c.condition) for c in f.calls} == {("g", 9, None), ("kernel", 19, "if (w == 8)")}


def test_masking_leaves_calls_in_check_macros_and_directives_alone(ex):
    f = facts(
        ex,
        """#define FLAG
#define _mm_pause()
namespace at {
#if defined(X) && \\
    defined(FLAG)
void spin() {
  _mm_pause();
  TORCH_CHECK(ok(), "x")
}
#endif
void run(F f) { f.template operator()<int>(1); }
}
""",
    )
    spin = [d for d in f.definitions if d.short == "spin"]
    assert spin and "defined(FLAG)" in spin[0].condition
    assert {(c.callee, c.line) for c in f.calls} >= {("_mm_pause", 7), ("ok", 8)}


@pytest.mark.parametrize(
    "text, objc",
    [
        (b")}" * 300_000, False),  # a `)` before a `}` for every check-macro look-back
        (b"".join(b"#define A%d\n" % i for i in range(20_000)) + b"".join(b"A%d void f%d() {}\n" % (i, i) for i in range(20_000)), False),
        (b"".join(b"#define F%d(x) int x\n" % i for i in range(20_000)) + b"".join(b"F%d(y);\n" % i for i in range(20_000)), False),
        # an attribute on each of 40,000 continued lines of one directive; 200,000 on one line
        (b"#define X \\\n" + b"__device__ \\\n" * 40_000 + b"\n", False),
        (b"__device__ " * 200_000, False),
        # 200,000 `#` on one line that is no directive, then an attribute: directives are looked for per line
        (b'const char* s = "' + b"#" * 200_000 + b'";\n__device__ void f() {}\n', False),
        # Objective-C: nested messages, declarations never ended, literals in literals
        (b"[x y:" * 20_000 + b"z" + b"]" * 20_000, True),
        (b"@interface " * 50_000, True),
        (b"@implementation X " * 50_000, True),
        (b"@[" * 50_000 + b"]" * 50_000, True),
    ],
)
def test_masking_stays_linear_on_hostile_text(text, objc):
    import gc
    import time


    # the time of masking only: a full collection of what earlier tests left in
    # this process (indexes, catalogs) took more than the masking itself in CI
    gc.collect()
    gc.disable()
    try:
        started = time.process_time()
        masked = mask_attributes(text, objc)
        elapsed = time.process_time() - started
    finally:
        gc.enable()
    # linear, each input masks in under a second here (0.6 to 1.1 s of CPU for the
    # nested Objective-C messages, from run to run of one machine); a quadratic
    # look-back would take minutes, so the bound leaves room for that noise
    assert elapsed < 2.5
    assert len(masked) == len(text) and masked.count(b"\n") == text.count(b"\n")


def _table(rows: int) -> str:
    return ",\n".join("  {" + ", ".join(str(7 * r + c) for c in range(8)) + "}" for r in range(rows))


def test_data_tables_are_emptied_in_place(ex):
    """Note [data tables]: a large initializer of numbers is blanked inside
    its braces and made a comment, offsets and lines kept; what follows is
    read as before."""
    text = f"namespace at {{\nstatic const int64_t table[][8] = {{\n{_table(200)}\n}};\nvoid after() {{ helper(1); }}\n}}\n"
    masked = mask_attributes(text.encode())
    assert len(masked) == len(text.encode()) and masked.count(b"\n") == text.count("\n")
    inside = masked[masked.index(b"= {") + 3 : masked.index(b"};")]
    assert len(inside) > 4096 and inside.count(b"\n") == text[text.index("= {") + 3 : text.index("};")].count("\n")
    comment = inside.strip()
    assert comment.startswith(b"/*") and comment.endswith(b"*/") and comment[2:-2].strip() == b""
    tree = ex.parser.parse(masked)  # an empty initializer list: the comment is all it holds
    table = tree.root_node.descendant_for_byte_range(masked.index(b"= {") + 2, masked.index(b"};") + 1)
    assert table.type == "initializer_list" and [c.type for c in table.named_children] == ["comment"]
    f = facts(ex, text)
    line = text.split("\n").index("void after() { helper(1); }") + 1
    assert [(d.name, d.line) for d in f.definitions] == [("at::after", line)]
    assert [(c.callee, c.line) for c in f.calls] == [("helper", line)]


@pytest.mark.parametrize("inside", [
    pytest.param("{{1, 2}}, {{f(3), 4}}", id="a call inside"),
    pytest.param("1, 2 }} {{ 3", id="unbalanced"),
])
def test_tables_holding_more_than_numbers_are_kept(inside):
    text = f"int t[] = {{ {_table(100)}, {inside} }};\n".encode()
    assert mask_attributes(text) == text


def test_small_tables_are_kept():
    text = f"int t[][8] = {{ {_table(10)} }};\n".encode()
    assert len(text) < 4096 and mask_attributes(text) == text


def test_a_definition_is_at_its_names_line_past_a_returned_reference_or_pointer(ex, tree_2_6):
    """The reference declarator of `Tensor&\\n_scaled_mm_out_cuda(` starts at the
    `&`, a line before the name (cuda/Blas.cpp, read here)."""
    f = facts(ex, "namespace at {\nTensor&\nfoo(Tensor& t) { return t; }\nint *\n  *bar() { return nullptr; }\n}\n")
    assert {(d.name, d.line) for d in f.definitions} == {("at::foo", 3), ("at::bar", 5)}
    path = "aten/src/ATen/native/cuda/Blas.cpp"
    lines = (tree_2_6 / path).read_text().splitlines()
    real = ex.extract(path, (tree_2_6 / path).read_bytes())
    (d,) = [d for d in real.definitions if d.short == "_scaled_mm_out_cuda"]
    assert lines[d.line - 1].startswith("_scaled_mm_out_cuda(") and lines[d.line - 2] == "Tensor&"
