"""One operator's generated code, checked against the generated files
themselves and against the catalog (native_functions.yaml, derivatives.yaml)."""

from __future__ import annotations

import re

import pytest

from kernelmap import env
from kernelmap.codegen import Layer, locate
from kernelmap.model import OriginKind
from tests.codegen.conftest import file_lines


def _assert_excerpt_is_the_file(generated, excerpt) -> None:
    loc = excerpt.location
    assert loc.origin is not None and loc.origin.kind is OriginKind.GENERATED
    assert excerpt.text == "\n".join(file_lines(generated, loc.path)[loc.line - 1 : loc.end_line])


@pytest.fixture(scope="module")
def conv2d(generated):
    return locate("aten::conv2d", files=generated)


@pytest.fixture(scope="module")
def add_out(generated):
    return locate("add.out", files=generated)


def test_locations_name_the_build_paths_and_the_torch_version(conv2d, generated):
    install = env.torch_install()
    assert conv2d.origin.kind is OriginKind.GENERATED
    assert (conv2d.origin.version, conv2d.origin.commit, conv2d.origin.root) == (install.version, install.commit, str(generated.root))
    paths = [b.definition.location.path for b in conv2d.bindings] + [r.block.path for r in conv2d.registrations]
    assert paths and all(p.startswith(("build/aten/src/ATen/", "torch/csrc/autograd/generated/")) for p in paths)
    assert all(r.block.url is None for r in conv2d.registrations)  # generated files exist in no repository


def test_conv2d_binding_shows_its_signatures_and_the_call_it_makes(conv2d, generated, catalog):
    (binding,) = conv2d.bindings
    assert binding.function == "THPVariable_conv2d"
    assert "torch.conv2d" in binding.python_names
    assert binding.definition.location.path.startswith("torch/csrc/autograd/generated/python_torch_functions_")
    # The signature strings are the PythonArgParser's, as written in the file.
    definition_lines = file_lines(generated, binding.definition.location.path)[
        binding.definition.location.line - 1 : binding.definition.location.end_line
    ]
    written = [m.group(1) for line in definition_lines if (m := re.match(r'\s*"(conv2d\(.*\))",$', line))]
    assert list(binding.signatures) == [s.replace('\\"', '"') for s in written] and len(written) >= 1
    assert binding.signature in binding.signatures
    # The case for aten::conv2d quotes its schema and calls at::conv2d_symint.
    assert binding.case.text.lstrip().startswith("// aten::conv2d(")
    assert "at::conv2d_symint" in binding.calls and "at::conv2d_symint(" in binding.case.text
    _assert_excerpt_is_the_file(generated, binding.definition)
    _assert_excerpt_is_the_file(generated, binding.case)
    for entry in binding.method_defs:
        assert '{"conv2d",' in entry.text and binding.function in entry.text


def test_conv2d_ops_entry_points_enter_the_dispatcher(conv2d, generated):
    symbols = {o.symbol: o for o in conv2d.ops}
    assert set(symbols) == {"at::_ops::conv2d::call", "at::_ops::conv2d::redispatch"}
    for o in conv2d.ops:
        assert o.definition.location.path.startswith("build/aten/src/ATen/Operators_")
        assert f"conv2d::{o.symbol.rsplit('::', 1)[1]}(" in o.definition.text.split("\n")[0]
        _assert_excerpt_is_the_file(generated, o.definition)


def test_conv2d_register_wrapper_calls_the_native_kernel_from_the_yaml(conv2d, generated, catalog):
    op = catalog.get("aten::conv2d")
    kernel = op.kernel_for("CompositeImplicitAutograd")
    reg = conv2d.registration("CompositeImplicitAutograd")
    assert reg is not None and reg.layer is Layer.REGISTER
    assert reg.block.path == "build/aten/src/ATen/RegisterCompositeImplicitAutograd_0.cpp"
    assert kernel.symbol in reg.calls  # at::native::conv2d_symint
    assert f"{kernel.symbol}(" in reg.definition.text
    assert reg.impl.text.lstrip().startswith('m.impl("conv2d"') and reg.symbol in reg.impl.text
    lines = file_lines(generated, reg.block.path)
    assert lines[reg.block.line - 1].startswith("TORCH_LIBRARY_IMPL(aten, CompositeImplicitAutograd, m)")
    _assert_excerpt_is_the_file(generated, reg.impl)
    _assert_excerpt_is_the_file(generated, reg.definition)


def test_conv2d_is_traced_and_has_no_autograd_kernel_of_its_own(conv2d):
    tracer = conv2d.registration("Tracer")
    assert tracer is not None and tracer.layer is Layer.AUTOGRAD
    assert "at::_ops::conv2d::redispatch" in tracer.calls
    assert conv2d.registration("Autograd") is None  # composite implicit: autograd comes from what it calls
    assert any("no generated autograd kernel" in n for n in conv2d.notes)


def test_add_out_on_cpu_shows_the_ufunc_generated_kernel(add_out, generated, catalog):
    op = catalog.get("add.out")
    cpu = add_out.registration("CPU")
    assert cpu is not None and cpu.block.path.startswith("build/aten/src/ATen/RegisterCPU_")
    # The CPU wrapper runs the structured class whose base is the yaml's CPU kernel.
    native = op.kernel_for("CPU").symbol  # at::native::ufunc_add_CPU
    bases = {s.base for s in cpu.structured}
    assert native.replace("at::native::", "at::native::structured_") in bases
    for s in cpu.structured:
        _assert_excerpt_is_the_file(generated, s.definition)
    files = {u.definition.location.path for u in add_out.ufunc}
    assert {
        "build/aten/src/ATen/UfuncCPU_add.cpp",
        "build/aten/src/ATen/UfuncCPUKernel_add.cpp",
        "build/aten/src/ATen/UfuncCUDA_add.cu",
    } <= files
    names = {u.name for u in add_out.ufunc if u.key == "CPU"}
    assert f"structured_{native.rsplit('::', 1)[1]}::impl" in names  # TORCH_IMPL_FUNC(ufunc_add_CPU)
    kernel = next(u for u in add_out.ufunc if u.definition.location.path.endswith("UfuncCPUKernel_add.cpp") and u.name.endswith("_kernel"))
    assert "cpu_kernel" in kernel.definition.text  # the vectorised CPU loop generated from ufunc_inner_loop
    for u in add_out.ufunc:
        _assert_excerpt_is_the_file(generated, u.definition)


def test_a_delegating_operator_finds_its_delegates_ufunc_kernels(generated):
    code = locate("aten::add.Tensor", layers=["ufunc"], files=generated)
    assert {u.definition.location.path for u in code.ufunc} >= {"build/aten/src/ATen/UfuncCPUKernel_add.cpp"}
    assert code.bindings == () and code.registrations == ()  # only the layers asked for


def test_the_autograd_wrapper_names_the_backward_node_of_derivatives_yaml(generated, catalog):
    code = locate("aten::add.Tensor", layers=["autograd"], files=generated)
    autograd = code.registration("Autograd")
    node = catalog.get("add.Tensor").autograd.backward_node  # AddBackward0
    assert autograd.symbol.startswith("VariableType::") and autograd.backward_node == node
    assert f"<{node}> grad_fn;" in autograd.definition.text
    assert code.backward is not None and code.backward.location.path == "torch/csrc/autograd/generated/Functions.cpp"
    assert f"{node}::apply(" in code.backward.text.split("\n")[0]
    _assert_excerpt_is_the_file(generated, code.backward)


def test_an_inplace_operator_has_its_ad_inplace_or_view_wrapper(generated):
    code = locate("add_.Tensor", layers=["autograd"], files=generated)
    adi = code.registration("ADInplaceOrView")
    assert adi is not None and adi.block.path.startswith("torch/csrc/autograd/generated/ADInplaceOrViewType_")
    assert "increment_version" in adi.definition.text


def test_an_operator_with_no_generated_autograd_wrapper_says_so(generated):
    """copy_'s autograd, tracing and ADInplaceOrView kernels are written by
    hand: no generated file registers one (searched here), and the layer's
    answer says so in a note instead of an empty section."""
    import pathlib

    root = pathlib.Path(generated.root)
    for pattern in ("VariableType_*.cpp", "TraceType_*.cpp", "ADInplaceOrViewType_*.cpp"):
        paths = list((root / "torch/csrc/autograd/generated").glob(pattern))
        assert paths and any('m.impl("add_.Tensor",' in p.read_text() for p in paths)  # how they register
        assert not any(re.search(r'm\.impl\("copy_",', p.read_text()) for p in paths)
    code = locate("aten::copy_", layers=["autograd"], files=generated)
    assert code.registrations == ()
    assert any(n.startswith("aten::copy_ has no generated autograd, tracing or ADInplaceOrView wrapper") for n in code.notes)


def test_to_json_carries_locations_and_text(add_out):
    data = add_out.to_json()
    assert data["op"] == "aten::add.out"
    reg = next(r for r in data["registrations"] if r["key"] == "CPU")
    assert reg["block"]["path"].startswith("build/aten/src/ATen/RegisterCPU_")
    assert reg["impl"]["text"] == add_out.registration("CPU").impl.text


def test_every_registered_wrapper_has_its_definition_in_the_same_file(generated):
    """Each `m.impl(name, TORCH_FN(wrapper))` in the generated files names a
    function the index found in that file; only kernels made in place
    (fallthroughs, autogradNotImplementedFallback(), static_cast<...>(at::native::f))
    have none."""
    defs = set(generated.db.execute("SELECT file, name FROM defs WHERE kind = 'function'"))
    rows = generated.db.execute("SELECT file, op, key, symbol FROM impls").fetchall()
    missing = []
    in_place = 0
    for file, op, key, symbol in rows:
        if symbol == "fallthrough" or "(" in symbol:
            in_place += 1
            continue
        if (file, symbol) not in defs and (file, symbol.rsplit("::", 1)[-1]) not in defs:
            missing.append(f"{op} {key}: {symbol}")
    assert len(rows) > in_place > 0
    assert missing == []
