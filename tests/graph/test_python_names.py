"""Python names that reach operators through more than generated builtins:
the implementation of an `@_overload`-ed functional (not its stubs), a method
called on a Tensor parameter (`input.softmax(dim)`), both branches of a
`boolean_dispatch`, and the hand-written C++ bindings (`Tensor.to`,
`torch.nonzero`). Ground truth is read from the real files (the installed
wheel, the 2.6.0 and 1.13.1 trees), never typed in."""

from __future__ import annotations

import ast
import sys
import textwrap
from pathlib import Path

import pytest

from kernelmap import bindings, env, pysource
from kernelmap.catalog import load_catalog
from kernelmap.errors import KernelmapError
from kernelmap.names import resolve_ops
from tests.conftest import run_kernelmap
from tests.graph.conftest import line_of, paths_to, walk

OVERLOADED = ("interpolate", "upsample", "upsample_bilinear", "upsample_nearest")


@pytest.fixture(scope="module", params=["wheel", "2.6.0", "1.13.1"])
def python_root(request) -> Path:
    """The directory whose `torch/` package is read: site-packages or a tree."""
    if request.param == "wheel":
        return env.torch_install().site_packages
    return request.getfixturevalue("tree_2_6" if request.param == "2.6.0" else "tree_1_13")


@pytest.fixture(scope="module")
def catalog_of(python_root):
    """The catalog matching `python_root`'s own yaml (Note [graph versions])."""
    if python_root == env.torch_install().site_packages:
        return load_catalog()
    return load_catalog(tree=python_root)


def _functional(root: Path) -> Path:
    return root / "torch/nn/functional.py"


def _is_stub(node: ast.FunctionDef) -> bool:
    """A body of only a docstring, `pass` or `...`: a declaration, no code."""
    return all(isinstance(s, ast.Pass) or (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant)) for s in node.body)


def _defs(path: Path, name: str) -> list[ast.FunctionDef]:
    return [n for n in ast.parse(path.read_text()).body if isinstance(n, ast.FunctionDef) and n.name == name]


def _implementation(path: Path, name: str) -> ast.FunctionDef:
    """The one top-level `def name` of `path` whose body is code; the file must declare it more than once."""
    defs = _defs(path, name)
    code = [d for d in defs if not _is_stub(d)]
    assert len(defs) > 1 and len(code) == 1, f"{path}: {name} is not overloaded as expected"
    return code[0]


def _ops(name: str, root: Path, catalog) -> list[str]:
    return [str(op.name) for op in resolve_ops(name, catalog, catalog, root)]


# -- @_overload stubs ------------------------------------------------------------


@pytest.mark.parametrize("name", OVERLOADED)
def test_an_overloaded_functional_is_its_implementation(python_root, name):
    path = _functional(python_root)
    implementation = _implementation(path, name)
    found = pysource.find_def(f"torch.nn.functional.{name}", python_root)
    assert found is not None and found.path == path
    assert found.line == implementation.lineno
    assert path.read_text().splitlines()[found.line - 1].startswith(f"def {name}(")


def test_interpolate_answers_the_operator_it_returns_not_a_size_helper(python_root, catalog_of):
    implementation = _implementation(_functional(python_root), "interpolate")
    returns = sorted(
        (n for n in ast.walk(implementation) if isinstance(n, ast.Return) and isinstance(n.value, ast.Call)
         and (_dotted(n.value.func) or "").startswith("torch._C._nn.")),
        key=lambda n: n.lineno,
    )
    assert returns
    ops = _ops("F.interpolate", python_root, catalog_of)
    assert ops[0] == "aten::" + _dotted(returns[0].value.func).rsplit(".", 1)[-1]  # upsample_nearest1d, not aten::floor
    # F.upsample calls interpolate: it reaches the same operators, not nothing
    assert _ops("F.upsample", python_root, catalog_of)[0] == ops[0]


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(parts)]) if isinstance(node, ast.Name) else None


def test_upsample_stack_goes_through_interpolates_implementation(context, tree_2_6):
    from kernelmap import graph

    tree = graph.stack("torch.nn.Upsample", context("cpu"), depth=8)
    nodes = [n for n, _ in walk(tree) if n.name == "torch.nn.functional.interpolate"]
    assert nodes
    implementation = _implementation(_functional(tree_2_6), "interpolate")
    for node in nodes:
        assert node.location.line == implementation.lineno
        assert line_of(node).startswith("def interpolate(")
    assert paths_to(tree, lambda n: n.kind.value == "op" and n.name.startswith("aten::upsample_nearest"))


# -- a method called on a Tensor parameter ---------------------------------------


@pytest.mark.parametrize("name", ["softmax", "log_softmax", "softmin"])
def test_a_functional_calling_a_tensor_method_reaches_its_operator(python_root, catalog_of, name):
    implementation = _defs(_functional(python_root), name)[-1]
    tensors = {a.arg for a in implementation.args.args if a.annotation is not None and "Tensor" in ast.unparse(a.annotation)}
    methods = {
        n.func.attr
        for n in ast.walk(implementation)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
        and {x.id for x in ast.walk(n.func.value) if isinstance(x, ast.Name)} & tensors
    }
    computing = {m for m in methods if "softmax" in m}  # not `input.dim()`, asked for the default dim
    assert len(computing) == 1, methods  # softmin: (-input).softmax(dim)
    assert _ops(f"F.{name}", python_root, catalog_of)[0] == f"aten::{computing.pop()}.int"


def test_softmax_module_stack_reaches_the_operator(context):
    from kernelmap import graph

    tree = graph.stack("torch.nn.Softmax", context("cpu"))
    paths = paths_to(tree, lambda n: n.name == "aten::softmax.int")
    assert paths
    names = [n.name for n in paths[0]]
    assert names[:4] == ["torch.nn.modules.activation.Softmax", "torch.nn.modules.activation.Softmax.forward",
                         "torch.nn.functional.softmax", "torch.Tensor.softmax"]
    # called on both arms of `if dtype is None`: no condition
    assert paths[0][3].condition is None


# -- boolean_dispatch --------------------------------------------------------------


def _boolean_dispatch(path: Path, name: str) -> dict[str, str]:
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            assert isinstance(node.value, ast.Call) and _dotted(node.value.func) == "boolean_dispatch"
            return {k.arg: k.value for k in node.value.keywords}
    raise AssertionError(f"{path}: no {name} = boolean_dispatch(...)")


def _returned_builtin(path: Path, function: str) -> str:
    """The operator name of the builtin a branch function returns (`torch.max_pool2d(...)`)."""
    node = _defs(path, function)[-1]
    calls = [_dotted(n.value.func) for n in ast.walk(node) if isinstance(n, ast.Return) and isinstance(n.value, ast.Call)]
    builtins = [c for c in calls if c and c.startswith("torch.")]
    assert builtins, f"{function} returns no builtin"
    return builtins[0].rsplit(".", 1)[-1]


@pytest.mark.parametrize("name", ["max_pool1d", "max_pool2d"])
def test_boolean_dispatch_reaches_both_branches_default_first(python_root, catalog_of, name):
    path = _functional(python_root)
    args = _boolean_dispatch(path, name)
    assert args["default"].value is False
    expected = [_returned_builtin(path, args["if_false"].id), _returned_builtin(path, args["if_true"].id)]
    ops = _ops(f"F.{name}", python_root, catalog_of)
    bases = [op.removeprefix("aten::").split(".")[0] for op in ops]
    assert bases[0] == expected[0] == name
    assert set(expected) <= set(bases)


def test_maxpool_stack_shows_each_branch_under_its_condition(context, tree_2_6):
    from kernelmap import graph

    path = _functional(tree_2_6)
    args = _boolean_dispatch(path, "max_pool2d")
    tree = graph.stack("torch.nn.MaxPool2d", context("cpu"), depth=5)
    dispatch = next(n for n, _ in walk(tree) if n.name == "torch.nn.functional.max_pool2d")
    assert line_of(dispatch).startswith("max_pool2d = boolean_dispatch(")
    branches = {c.name.rsplit(".", 1)[-1]: c for c in dispatch.children}
    assert list(branches) == [args["if_false"].id, args["if_true"].id]
    for function, node in branches.items():
        assert line_of(node).startswith(f"def {function}(")
        assert node.condition.startswith("return_indices=")
    assert branches[args["if_false"].id].condition == "return_indices=False (the default)"


def test_torch_unique_follows_its_boolean_dispatch_to_the_operator(python_root, catalog_of):
    text = (python_root / "torch/functional.py").read_text()
    assert "unique = boolean_dispatch(" in text and "torch._unique2(" in text
    assert "aten::_unique2" in _ops("torch.unique", python_root, catalog_of)


# -- Python that hides a generated binding (Note [bindings Python hides]) ---------


def _first_returned_call(path: Path, name: str) -> str:
    """The callee of the first `return f(...)` of `def name` in `path`, in source order."""
    definition = next(d for d in _defs(path, name) if not _is_stub(d))
    returns = sorted((n for n in ast.walk(definition) if isinstance(n, ast.Return) and isinstance(n.value, ast.Call)),
                     key=lambda n: n.lineno)
    callees = [_dotted(r.value.func) for r in returns]
    return next(c for c in callees if c and "torch_function" not in c)


def _operator_of(callee: str, root: Path) -> str:
    """The operator a call of `torch.linalg.X` / `_VF.X` stands for, read from the module that binds it."""
    module, _, short = callee.rpartition(".")
    if module.endswith("linalg"):  # `vector_norm = _add_docstr(_linalg.linalg_vector_norm, ...)`
        docstr = next(n for n in ast.parse((root / "torch/linalg/__init__.py").read_text()).body
                      if isinstance(n, ast.Assign) and [t.id for t in n.targets if isinstance(t, ast.Name)] == [short])
        return _dotted(docstr.value.args[0]).rsplit(".", 1)[-1]
    return short


def test_torch_norm_is_the_python_function_that_hides_its_binding(python_root, catalog_of):
    """torch/__init__.py binds `from torch.functional import *` after copying the
    generated functions: `torch.norm` is torch/functional.py's norm, whose first
    return (a strided tensor's, in 2.x) names the operator it runs."""
    assert "torch.norm" in pysource.rebound_builtins(python_root)
    expected = _operator_of(_first_returned_call(python_root / "torch/functional.py", "norm"), python_root)
    for name in ("torch.norm", "torch.functional.norm", "torch.Tensor.norm"):  # Tensor.norm calls torch.norm
        assert _ops(name, python_root, catalog_of)[0].split(".")[0] == f"aten::{expected}", name
    # the binding itself still answers for the name `_VF.norm` stands for, as an operator
    assert _ops("aten::norm", python_root, catalog_of)[0].startswith("aten::norm")


def test_the_names_python_hides_are_those_torch_rebinds():
    """Live: `torch.X` is not the generated `_VariableFunctions.X` exactly for the names found hidden."""
    import torch

    functions = torch._C._VariableFunctions
    public = {n for n in dir(functions) if not n.startswith("_") and hasattr(torch, n)}
    replaced = {f"torch.{n}" for n in public if getattr(torch, n) is not getattr(functions, n)}
    found = pysource.rebound_builtins(env.torch_install().site_packages)
    assert replaced and replaced == found & {f"torch.{n}" for n in public}


def test_torch_norm_answers_the_operator_it_runs():
    """Live: the first operator the profiler sees for `torch.norm(x)` is the first one kernelmap answers."""
    import torch

    site = env.torch_install().site_packages
    catalog = load_catalog()
    for call, name in ((lambda x: torch.norm(x), "torch.norm"), (lambda x: x.norm(), "torch.Tensor.norm"),
                       (lambda x: torch.split(x, 2), "torch.split")):
        x = torch.ones(4)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
            call(x)
        ran = next(e.name for e in sorted(profile.events(), key=lambda e: e.time_range.start) if e.name.startswith("aten::"))
        answered = _ops(name, site, catalog)[0]
        assert answered.split(".")[0] == ran, (name, answered, ran)


def test_torch_norm_stack_starts_at_its_python(context, tree_2_6):
    from kernelmap import graph

    tree = graph.stack("torch.norm", context("cpu"), depth=6)
    assert tree.root.name == "torch.functional.norm" and tree.root.kind.value == "python"
    assert tree.root.location.disk_path.is_relative_to(tree_2_6)
    assert line_of(tree.root).startswith("def norm(")
    expected = _operator_of(_first_returned_call(tree_2_6 / "torch/functional.py", "norm"), tree_2_6)
    assert paths_to(tree, lambda n: n.kind.value == "op" and n.name == f"aten::{expected}")


# -- hand-written bindings ---------------------------------------------------------


def _table_line(binding) -> str:
    return binding.path.read_text().splitlines()[binding.line - 1]


@pytest.mark.parametrize(
    "name, method",
    [("Tensor.to", "to"), ("Tensor.float", "to"), ("Tensor.contiguous", "contiguous"), ("Tensor.copy_", "copy_"),
     ("Tensor.item", "item"), ("Tensor.__add__", "add"), ("Tensor.__matmul__", "matmul")],
)
def test_hand_written_tensor_methods_reach_the_operator_their_code_calls(python_root, catalog_of, name, method):
    ops = _ops(name, python_root, catalog_of)
    assert ops[0].removeprefix("aten::").split(".")[0] == method
    binding = bindings.manual_binding(f"torch.{name}", python_root)
    assert binding is not None
    assert binding.function in _table_line(binding)
    if binding.defined:  # the C++ function's own code calls `self.<method>(...)`, maybe through a helper
        assert any(c.name == method and c.is_method for c in binding.calls)
        assert f"{binding.function}(" in _table_line(binding)


def test_hand_written_torch_function_in_a_tree(tree_2_6):
    catalog = load_catalog(tree=tree_2_6)
    assert _ops("torch.nonzero", tree_2_6, catalog)[0] == "aten::nonzero"
    with pytest.raises(KernelmapError) as e:
        resolve_ops("torch.tensor", catalog, catalog, tree_2_6)
    message = str(e.value)
    assert "hand-written binding" in message
    path, line = message.split("(THPVariable_tensor, ")[1].split(")")[0].rsplit(":", 1)
    assert "THPVariable_tensor(" in (tree_2_6 / path).read_text().splitlines()[int(line) - 1]


def test_hand_written_name_without_a_tree_says_why():
    site = env.torch_install().site_packages
    catalog = load_catalog()
    with pytest.raises(KernelmapError) as e:
        resolve_ops("torch.nonzero", catalog, catalog, site)
    message = str(e.value)
    assert "hand-written binding" in message and "--source" in message
    rel, line = message.split(" declares it")[0].rsplit(" ", 1)[-1].rsplit(":", 1)
    assert (site / rel).read_text().splitlines()[int(line) - 1].startswith("def nonzero(")


def test_hand_written_binding_stack(context, tree_2_6):
    from kernelmap import graph

    tree = graph.stack("torch.Tensor.to", context("cpu"), depth=3)
    binding = tree.root.children[0]
    assert binding.name == "THPVariable_to" and binding.kind.value == "binding"
    assert "THPVariable_to(" in line_of(binding)
    assert binding.location.disk_path.is_relative_to(tree_2_6)
    assert {c.name.split(".")[0] for c in binding.children} == {"aten::to"}


def test_cli_where_answers_common_names_statically_without_torch(wheel_only_cache):
    script = textwrap.dedent(
        """
        import sys
        from click.testing import CliRunner
        from kernelmap.cli import cli
        for name in ["F.softmax", "F.max_pool2d", "F.interpolate", "Tensor.to", "Tensor.__add__", "torch.nn.MaxPool2d"]:
            result = CliRunner().invoke(cli, ["where", name, "--static"])
            assert result.exit_code == 0, (name, result.output)
            print(result.output.splitlines()[0].split()[0])
        print("torch" in sys.modules)
        """
    )
    import subprocess

    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.split()
    assert lines[-1] == "False"
    assert lines[0] == "aten::softmax.int" and lines[1] == "aten::max_pool2d" and lines[2] != "aten::floor"
    assert lines[3].startswith("aten::to.") and lines[4] == "aten::add.Tensor" and lines[5] == "aten::max_pool2d"


def test_cli_hand_written_binding_without_operator_is_one_line_error(wheel_only_cache):
    out = run_kernelmap("where", "torch.tensor", "--static")
    assert out.returncode == 2
    assert out.stdout == ""
    assert len(out.stderr.strip().splitlines()) == 1
    assert out.stderr.startswith("kernelmap: error: torch.tensor is a hand-written binding")


# -- tiny sources --------------------------------------------------------------------


SNIPPET = '''
from typing import Optional, overload
from torch import Tensor
from torch._jit_internal import boolean_dispatch


@overload
def f(x: int) -> int: ...
def f(x):
    return g(x)


def g(x):
    pass


def h(input: Tensor, dim: Optional[int], other: Optional[Tensor] = None):
    if dim is None:
        ret = input.softmax(0)
    else:
        ret = input.softmax(dim)
    dim.bit_length()
    return (-input).exp() if other is None else other.add(ret)


m = boolean_dispatch(arg_name="flag", arg_index=1, default=False, if_true=g, if_false=f, module_name=__name__, func_name="m")
'''


@pytest.fixture
def snippet(tmp_path) -> Path:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg/__init__.py").write_text("")
    (tmp_path / "pkg/mod.py").write_text(SNIPPET)
    return tmp_path


def test_snippet_overload_stub_is_skipped(snippet):
    found = pysource.find_def("pkg.mod.f", snippet)
    assert SNIPPET.splitlines()[found.line - 1] == "def f(x):"
    assert [c.target for c in pysource.calls(found, snippet)] == ["pkg.mod.g"]  # a module-level function, made absolute


def test_snippet_tensor_methods_and_conditions(snippet):
    calls = {c.target: c for c in pysource.calls(pysource.find_def("pkg.mod.h", snippet), snippet)}
    assert set(calls) == {"torch.Tensor.softmax", "dim.bit_length", "torch.Tensor.exp", "torch.Tensor.add"}
    assert calls["torch.Tensor.softmax"].condition is None  # on both arms of one `if`
    assert calls["torch.Tensor.exp"].returned and calls["torch.Tensor.exp"].condition == "other is None"
    assert pysource.entry_name("torch.Tensor.softmax") == "torch.Tensor.softmax"
    assert pysource.entry_name("dim.bit_length") is None


def test_snippet_boolean_dispatch_default_first(snippet):
    calls = pysource.calls(pysource.find_def("pkg.mod.m", snippet), snippet)
    assert [(c.target, c.condition) for c in calls] == [("pkg.mod.f", "flag=False (the default)"), ("pkg.mod.g", "flag=True")]


# A method table's file in miniature: what the C++ reader must get right
# (Note [hand-written bindings], Note [binding calls]).
CPP_SNIPPET = """
namespace torch::autograd {

static Tensor dispatch_to(const Tensor & self, Device device) {
  return self.to(device);
}

static Tensor dispatch_to(const Tensor & self, Device device, ScalarType dtype) {
  return self.contiguous().to(device, dtype);
}

template<typename T>
static T dispatch_item(const Tensor & self) {
  return self.template item<T>();
}

static PyObject * THPVariable_to(PyObject* self, PyObject* args)
{
  HANDLE_TH_ERRORS
  auto& self_ = THPVariable_Unpack(self);
  if (self_.is_floating_point()) {
    return wrap(dispatch_item<c10::complex<double>>(self_));
  }
  THPVariable_Unpack(self).detach_();
  return THPVariable_Wrap(dispatch_to(self_, r.device(0)));
  END_HANDLE_TH_ERRORS
}

static PyObject * THPVariable_nonzero(PyObject* self, PyObject* args)
{
  HANDLE_TH_ERRORS
  // self.not_called(x);
  return wrap(at::nonzero_out(out, self_));
  END_HANDLE_TH_ERRORS
}

PyMethodDef variable_methods[] = {
  // {"commented", THPVariable_commented, METH_NOARGS, nullptr},
  {"to", castPyCFunctionWithKeywords(THPVariable_to), METH_VARARGS | METH_KEYWORDS, nullptr},
  {"nonzero", THPVariable_nonzero, METH_NOARGS, nullptr},
  {"__add__", castPyCFunctionWithKeywords(TypeError_to_NotImplemented_<THPVariable_add>), METH_VARARGS, nullptr},
  {nullptr}
};

} // namespace torch::autograd
"""


@pytest.fixture
def cpp_snippet(tmp_path) -> Path:
    path = tmp_path / "torch/csrc/autograd/python_variable_methods.cpp"
    path.parent.mkdir(parents=True)
    path.write_text(CPP_SNIPPET)
    return tmp_path


def _cpp_line(text: str) -> int:
    return next(i for i, line in enumerate(CPP_SNIPPET.splitlines(), 1) if text in line)


def test_cpp_snippet_binding_calls_through_the_overload_its_arguments_choose(cpp_snippet):
    binding = bindings.manual_binding("torch.Tensor.to", cpp_snippet)
    assert binding.defined and binding.line == _cpp_line("THPVariable_to(PyObject")
    calls = {(c.name, c.is_method, c.line) for c in binding.calls}
    assert ("to", True, _cpp_line("return self.to(device);")) in calls  # the overload of two parameters
    assert not any(c.line == _cpp_line("self.contiguous().to(device, dtype)") for c in binding.calls)  # not the one of three
    # accessors and a method of a call's result, which the source index leaves out
    assert {("item", True, _cpp_line("item<T>()")), ("is_floating_point", True, _cpp_line("is_floating_point()")),
            ("detach_", True, _cpp_line("detach_()"))} <= calls
    assert [c.line for c in binding.calls] == sorted(c.line for c in binding.calls)


def test_cpp_snippet_table_entries_and_function_calls(cpp_snippet):
    nonzero = bindings.manual_binding("torch.Tensor.nonzero", cpp_snippet)
    assert [(c.name, c.is_method) for c in nonzero.calls] == [("nonzero_out", False)]  # not the call in a comment
    add = bindings.manual_binding("torch.Tensor.__add__", cpp_snippet)
    assert (add.function, add.defined, add.line) == ("THPVariable_add", False, _cpp_line('{"__add__"'))
    assert bindings.manual_binding("torch.Tensor.commented", cpp_snippet) is None


def test_where_says_when_python_hides_the_operators_binding(indexed_tree, tree_2_6):
    """`where aten::norm` lists torch.norm among its Python names; the answer
    says once that torch.norm runs torch/functional.py's norm first, at its line."""
    from kernelmap import api

    answer = api.where("aten::norm.ScalarOpt_dtype", static=True, source=indexed_tree.name)
    [note] = [n for n in answer.notes if "runs Python first" in n]
    assert "torch.norm" in note and "torch.functional.norm" in note and indexed_tree.origin.label in note
    rel, line = note.split("torch.functional.norm (")[1].split(")")[0].rsplit(":", 1)
    assert (tree_2_6 / rel).read_text().splitlines()[int(line) - 1].startswith("def norm(")
    plain = api.where("aten::add.Tensor", static=True, source=indexed_tree.name)
    assert not any("runs Python first" in n for n in plain.notes)
