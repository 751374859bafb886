"""The scanners of the index on tiny pieces of generated code."""

from __future__ import annotations

from kernelmap.codegen.index import scan_definitions, scan_methods, scan_pycalls, scan_registrations
from kernelmap.codegen.locate import _calls, definition_end

REGISTER = """\
at::Tensor wrapper_CPU_add_Tensor(const at::Tensor & self) {
structured_ufunc_add_CPU_functional op;
return std::move(op.outputs_[0]);
}
TORCH_LIBRARY_IMPL(aten, CPU, m) {
    m.impl("add.Tensor", TORCH_FN(wrapper_CPU_add_Tensor));
m.impl("add_.Tensor",
       TORCH_FN(wrapper_CPU_add__Tensor)
);
}
TORCH_LIBRARY_IMPL(aten, BackendSelect, m) {
  m.impl("aten::arange", TORCH_FN(arange));
  m.impl("detach", torch::CppFunction::makeFallthrough());
  m.impl("_assert_scalar", torch::autograd::autogradNotImplementedFallback());
}
TORCH_LIBRARY(aten, m) {
  m.def("add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor", tags_7);
}
"""


def test_registrations_carry_their_block_line_and_their_own_lines():
    found = [(what, r.op, r.key, r.block_line, r.line, r.end_line, r.symbol) for what, r in scan_registrations(REGISTER)]
    assert found == [
        ("impl", "add.Tensor", "CPU", 5, 6, 6, "wrapper_CPU_add_Tensor"),
        ("impl", "add_.Tensor", "CPU", 5, 7, 9, "wrapper_CPU_add__Tensor"),
        ("impl", "arange", "BackendSelect", 11, 12, 12, "arange"),
        ("impl", "detach", "BackendSelect", 11, 13, 13, "fallthrough"),
        ("impl", "_assert_scalar", "BackendSelect", 11, 14, 14, "torch::autograd::autogradNotImplementedFallback()"),
        ("def", "add.Tensor", "", 16, 17, 17, ""),
    ]


DEFS = """\
namespace at {
struct structured_ufunc_add_CPU_functional final : public at::native::structured_ufunc_add_CPU {
    void set_output_strided() override {
    }
};
static PyObject * THPVariable_add(PyObject* self_, PyObject* args, PyObject* kwargs)
{
  if (x) {
  }
}
::std::tuple<at::Tensor,at::Tensor> _foo(const at::Tensor & self) {
return at::_ops::foo::call(self);
}
at::Tensor conv2d::call(const at::Tensor & input) {
}
TORCH_IMPL_FUNC(ufunc_add_CPU)(const at::Tensor & self) {
}
static C10_NOINLINE c10::TypedOperatorHandle<conv2d::schema> create_conv2d_typed_handle();
if (cond) {
}
namespace functionalization {
    at::Tensor _fw_primal(c10::DispatchKeySet dispatchKeySet, const at::Tensor & self, int64_t level) {
      if (x) {
      }
      auto f = [&](int a) {
      };
    }
}
"""


def test_definitions_are_functions_and_structs_at_namespace_level():
    found = [(name, kind, line, base) for name, kind, line, base in scan_definitions(DEFS)]
    assert found == [
        ("structured_ufunc_add_CPU_functional", "struct", 2, "at::native::structured_ufunc_add_CPU"),
        ("set_output_strided", "function", 3, None),  # one indent deep: a struct's methods too
        ("THPVariable_add", "function", 6, None),
        ("_foo", "function", 11, None),
        ("conv2d::call", "function", 14, None),
        ("structured_ufunc_add_CPU::impl", "function", 16, None),
        ("_fw_primal", "function", 22, None),
    ]


def test_a_definition_ends_where_its_braces_balance():
    lines = DEFS.split("\n")
    assert definition_end(lines, 2) == 5  # the struct, past its method's braces
    assert definition_end(lines, 6) == 10  # body opening on the next line
    assert definition_end(lines, 22) == 27  # indented inside a namespace
    tricky = ['void f() {', '  auto s = "}";  // }', "  char c = '{';", "}"]
    assert definition_end(tricky, 1) == 4


def test_bindings_are_found_by_the_schema_they_quote_and_their_method_table_entries():
    text = """\
  {"add", castPyCFunctionWithKeywords(THPVariable_add), METH_VARARGS | METH_KEYWORDS | METH_STATIC, nullptr},
  {"__radd__", castPyCFunctionWithKeywords(TypeError_to_NotImplemented_<THPVariable_add>), METH_VARARGS, nullptr},
      // aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor
        // [deprecated] aten::add(Tensor self, Scalar alpha, Tensor other) -> Tensor
  x = 1; // aten::not_a_case(
"""
    assert list(scan_methods(text)) == [("add", "THPVariable_add", 1), ("__radd__", "THPVariable_add", 2)]
    assert list(scan_pycalls(text)) == [("add.Tensor", 3)]


def test_calls_are_the_operator_level_ones():
    text = "return at::native::conv2d_symint(input, c10::fromIntArrayRefSlow(x), at::Tensor());\nself.add(other);"
    assert _calls(text) == ("at::native::conv2d_symint",)
    assert _calls(text, methods=True) == ("at::native::conv2d_symint", "at::Tensor::add")
