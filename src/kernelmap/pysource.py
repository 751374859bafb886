"""Read PyTorch's Python source as text, never importing it: find where a
dotted name (`torch.nn.Conv2d`, `torch.nn.functional.relu`) is defined by
following the package's own imports, list what a function calls, and read
the hand-written method tables of the C++ bindings (`Tensor.to`,
`torch.nonzero`) for what their functions call.

Used by the catalog (which builtins each `torch.nn.functional` function calls)
and by the call graph (module -> forward -> functional -> builtin).

Note [implementation, not overloads]
A function declared several times in a module (`@overload` / `@_overload`
stubs for TorchScript or type checkers, then the real `def`) is its one
definition that no `overload` or `_overload` decorator marks: the stubs hold
no code (`pass`, `...`) and their lines are not what runs.
"""

from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass
from pathlib import Path

# Modules whose functions are generated bindings, and the public module each
# stands for: `_VF.dropout` is `torch.dropout`, `torch._C._nn.gelu` stays itself.
BINDING_MODULES = {
    "torch": "torch",
    "torch._VF": "torch",
    "torch._C._VariableFunctions": "torch",
    "torch._C._nn": "torch._C._nn",
    "torch._C._linalg": "torch._C._linalg",
    "torch._C._fft": "torch._C._fft",
    "torch._C._special": "torch._C._special",
}


@dataclass(frozen=True)
class PyDef:
    """A class or function found in the source of a package."""

    qualname: str  # "torch.nn.modules.conv.Conv2d"
    module: str  # "torch.nn.modules.conv"
    path: Path  # the file on disk
    line: int
    end_line: int
    node: ast.AST  # ClassDef / FunctionDef / Assign (for `x = _add_docstr(builtin, ...)`)


@dataclass(frozen=True)
class PyCall:
    """A call inside a function: to a method of self, a module function, or a builtin."""

    target: str  # "self._conv_forward", "torch.nn.functional.conv2d", "torch.conv2d", "torch.Tensor.softmax"
    line: int
    condition: str | None = None  # the innermost enclosing `if` test: "self.padding_mode != 'zeros'"
    returned: bool = False  # the function returns this call's result (`return torch.relu(x)`), not a helper value


@functools.lru_cache(maxsize=256)
def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def module_file(module: str, root: Path) -> Path | None:
    """The file of a dotted module under `root` (site-packages or a tree)."""
    base = root.joinpath(*module.split("."))
    try:
        if (base / "__init__.py").is_file():
            return base / "__init__.py"
        if base.with_suffix(".py").is_file():
            return base.with_suffix(".py")
    except (OSError, ValueError):  # a name too long for the OS is no module
        return None
    return None


def _absolute(module: str, is_package: bool, level: int, name: str | None) -> str:
    if level == 0:
        return name or ""
    parts = module.split(".")
    if not is_package:
        parts = parts[:-1]
    parts = parts[: len(parts) - (level - 1)] if level > 1 else parts
    return ".".join(parts + ([name] if name else []))


def import_names(module: str, root: Path) -> dict[str, str]:
    """Local name -> dotted name it was imported as, for one module's top-level imports."""
    path = module_file(module, root)
    if path is None:
        return {}
    is_package = path.name == "__init__.py"
    names: dict[str, str] = {}
    for node in _parse(path).body:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    names[alias.asname] = alias.name
                else:
                    names[alias.name.split(".")[0]] = alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(module, is_package, node.level, node.module)
            for alias in node.names:
                if alias.name != "*":
                    names[alias.asname or alias.name] = f"{base}.{alias.name}"
    return names


def find_def(dotted: str, root: Path, _depth: int = 0) -> PyDef | None:
    """Where `dotted` is defined under `root`, following `from x import y` and
    `from x import *` re-exports the way the package itself does."""
    if _depth > 12:
        return None
    parts = dotted.split(".")
    for i in range(len(parts) - 1, 0, -1):
        module = ".".join(parts[:i])
        path = module_file(module, root)
        if path is None:
            continue
        found = _find_in_module(module, path, parts[i], root, _depth)
        if found is None:
            return None
        for attr in parts[i + 1 :]:  # Conv2d.forward
            found = _member(found, attr, root, _depth)
            if found is None:
                return None
        return found
    return None


def is_overload(node: ast.AST) -> bool:
    """Whether a `def` is an `@overload` / `@_overload` stub (typing's or
    torch._jit_internal's), not an implementation (Note [implementation, not overloads])."""
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    for decorator in node.decorator_list:
        name = _dotted(decorator.func if isinstance(decorator, ast.Call) else decorator)
        if name is not None and name.rsplit(".", 1)[-1] in ("overload", "_overload"):
            return True
    return False


def _implementation(nodes: list[ast.AST]) -> ast.AST | None:
    """The first of a name's definitions that is no overload stub; the first
    stub when there are only stubs (a .pyi-like module)."""
    return next((n for n in nodes if not is_overload(n)), nodes[0] if nodes else None)


def _find_in_module(module: str, path: Path, name: str, root: Path, depth: int) -> PyDef | None:
    tree = _parse(path)
    is_package = path.name == "__init__.py"
    defined = [
        node
        for node in tree.body
        if (isinstance(node, (ast.ClassDef, ast.FunctionDef)) and node.name == name)
        or (isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets))
    ]
    node = _implementation(defined)
    if node is not None:
        return PyDef(f"{module}.{name}", module, path, node.lineno, node.end_lineno or node.lineno, node)
    for node in tree.body:  # re-exports
        if isinstance(node, ast.ImportFrom):
            base = _absolute(module, is_package, node.level, node.module)
            for alias in node.names:
                if alias.name == "*" or (alias.asname or alias.name) == name:
                    target = f"{base}.{name if alias.name == '*' else alias.name}"
                    found = find_def(target, root, depth + 1)
                    if found is not None:
                        return found
    return None


def _member(owner: PyDef, attr: str, root: Path, depth: int) -> PyDef | None:
    """A method of a class, looked up through its bases like Python's MRO (depth-first)."""
    if not isinstance(owner.node, ast.ClassDef):
        return None
    node = _implementation([n for n in owner.node.body if isinstance(n, ast.FunctionDef) and n.name == attr])
    if node is not None:
        return PyDef(f"{owner.qualname}.{attr}", owner.module, owner.path, node.lineno, node.end_lineno or node.lineno, node)
    imports = import_names(owner.module, root)
    for base in owner.node.bases:
        name = _dotted(base)
        if name is None:
            continue
        head, _, rest = name.partition(".")
        target = imports.get(head, f"{owner.module}.{head}") + (f".{rest}" if rest else "")
        base_def = find_def(target, root, depth + 1)
        if base_def is not None:
            found = _member(base_def, attr, root, depth + 1)
            if found is not None:
                return found
    return None


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def builtin_name(dotted: str) -> str | None:
    """`torch.conv2d` -> `torch.conv2d`; `torch._VF.dropout` -> `torch.dropout`; else None."""
    module, _, name = dotted.rpartition(".")
    public = BINDING_MODULES.get(module)
    if public is None or not name or name.startswith("__"):
        return None
    return f"{public}.{name}"


def entry_name(target: str) -> str | None:
    """The generated name a call target stands for: a builtin (`builtin_name`)
    or a method of a Tensor (`torch.Tensor.softmax`, what `calls` writes for
    `input.softmax(dim)` on a Tensor parameter); else None."""
    module, _, name = target.rpartition(".")
    if module == "torch.Tensor" and name and not name.startswith("__"):
        return target
    return builtin_name(target)


def is_python_tensor_method(name: str, root: Path) -> bool:
    """Whether `torch.Tensor.<method>` is defined in Python (torch/_tensor.py's
    `class Tensor(torch._C.TensorBase)`), which a call runs instead of the C binding."""
    return name.startswith("torch.Tensor.") and find_def(name, root) is not None


# How a function is called whose body is chosen by a boolean argument:
# `max_pool2d = boolean_dispatch(arg_name="return_indices", default=False,
# if_true=max_pool2d_with_indices, if_false=_max_pool2d, ...)` (torch._jit_internal).
_BOOLEAN_DISPATCH_ARGS = ("arg_name", "arg_index", "default", "if_true", "if_false", "module_name", "func_name")


def calls(definition: PyDef, root: Path) -> tuple[PyCall, ...]:
    """What a function (or `x = _add_docstr(builtin, ...)`, or
    `x = boolean_dispatch(...)`) calls, in source order, with names made
    absolute through the module's imports and its own top-level definitions;
    a method called on a parameter annotated `Tensor` is `torch.Tensor.<method>`."""
    imports = import_names(definition.module, root)
    node = definition.node
    if isinstance(node, ast.Assign):
        value = node.value
        if isinstance(value, ast.Call) and _dotted(value.func) in ("_add_docstr", "torch._C._add_docstr") and value.args:
            target = _dotted(value.args[0])
            if target:
                return (PyCall(_absolute_name(target, imports, definition.module), node.lineno),)
        if isinstance(value, ast.Call) and (_dotted(value.func) or "").rsplit(".", 1)[-1] == "boolean_dispatch":
            return _boolean_dispatch_calls(value, definition, imports, root)
        return ()
    local = _local_names(node)
    tensors = _tensor_parameters(node, {**imports, **_top_level_aliases(definition.module, root)})
    module_names = _top_level_names(definition.module, root)
    found: dict[str, PyCall] = {}
    paths: dict[str, list[str | None]] = {}  # the condition of each call of a target
    # explicit stack of (node, innermost enclosing if-test, whether the function returns its value): no recursion
    stack: list[tuple[ast.AST, str | None, bool]] = [(child, None, False) for child in ast.iter_child_nodes(node)]
    while stack:
        inner, condition, returned = stack.pop()
        if isinstance(inner, ast.Call):
            name = _dotted(inner.func)
            if name is None and isinstance(inner.func, ast.Attribute) and _is_tensor_expression(inner.func.value, tensors):
                name = f"torch.Tensor.{inner.func.attr}"  # `(-input).softmax(dim)`
            if name:
                target = _call_target(name, imports, definition.module, local, tensors, module_names)
                seen = found.get(target)
                if seen is None:
                    found[target] = PyCall(target, inner.lineno, condition, returned)
                    paths[target] = [condition]
                else:  # called on several paths: at its first line, under any path's condition
                    found[target] = PyCall(target, min(seen.line, inner.lineno), None, seen.returned or returned)
                    paths[target].append(condition)
        if isinstance(inner, ast.Return) and inner.value is not None:
            stack.append((inner.value, condition, True))
            continue
        if isinstance(inner, (ast.If, ast.IfExp)):
            test = ast.unparse(inner.test)
            stack.append((inner.test, condition, False))
            # `return a if c else b` returns both arms
            arm_returned = returned and isinstance(inner, ast.IfExp)
            stack.extend((child, test, arm_returned) for child in (inner.body if isinstance(inner.body, list) else [inner.body]))
            orelse = inner.orelse if isinstance(inner.orelse, list) else [inner.orelse]
            stack.extend((child, f"not ({test})", arm_returned) for child in orelse)
            continue
        stack.extend((child, condition, False) for child in ast.iter_child_nodes(inner))
    merged = (PyCall(c.target, c.line, _any_of(paths[c.target]), c.returned) for c in found.values())
    return tuple(sorted(merged, key=lambda c: (c.line, c.target)))


def _any_of(conditions: list[str | None]) -> str | None:
    """The condition under which a call made under each of `conditions` runs:
    none when one is unconditional or two are each other's negation (the two
    arms of one `if`); else each once, joined by `or`."""
    unique = list(dict.fromkeys(conditions))
    if None in unique or any(f"not ({c})" in unique for c in unique):
        return None
    return unique[0] if len(unique) == 1 else " or ".join(f"({c})" for c in unique)


def _call_target(name: str, imports: dict[str, str], module: str, local: frozenset[str],
                 tensors: frozenset[str], module_names: frozenset[str]) -> str:
    """The absolute name a call's dotted callee stands for."""
    if name.startswith("self."):
        return name
    head, _, rest = name.partition(".")
    if head in tensors and rest and "." not in rest:
        return f"torch.Tensor.{rest}"
    if head in local:
        return name  # a parameter or local variable shadows any module-level name
    if head not in imports and head in module_names:
        return f"{module}.{name}"
    return _absolute_name(name, imports, module)


def _is_tensor_expression(node: ast.AST, tensors: frozenset[str]) -> bool:
    """Whether an expression is a Tensor by the parameters' annotations:
    a Tensor parameter, its negation, or arithmetic with one (`-input`, `input * 2`)."""
    if isinstance(node, ast.Name):
        return node.id in tensors
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd, ast.Invert)):
        return _is_tensor_expression(node.operand, tensors)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.Pow, ast.MatMult)):
        return _is_tensor_expression(node.left, tensors) or _is_tensor_expression(node.right, tensors)
    return False


def _boolean_dispatch_calls(value: ast.Call, definition: PyDef, imports: dict[str, str], root: Path) -> tuple[PyCall, ...]:
    """The two functions a `boolean_dispatch(...)` chooses between, the one its
    `default` picks first, each under the value of the argument that picks it."""
    args = dict(zip(_BOOLEAN_DISPATCH_ARGS, value.args))
    args.update({k.arg: k.value for k in value.keywords if k.arg})
    arg_name = args.get("arg_name")
    arg = arg_name.value if isinstance(arg_name, ast.Constant) and isinstance(arg_name.value, str) else "the argument"
    default = args.get("default")
    default_true = isinstance(default, ast.Constant) and default.value is True
    module_names = _top_level_names(definition.module, root)
    branches = []
    for key, flag in (("if_true", True), ("if_false", False)):
        name = _dotted(args[key]) if key in args else None
        if name is None:
            continue
        target = _call_target(name, imports, definition.module, frozenset(), frozenset(), module_names)
        default_note = " (the default)" if flag == default_true else ""
        branches.append((flag != default_true, PyCall(target, args[key].lineno, f"{arg}={flag}{default_note}", returned=True)))
    return tuple(call for _, call in sorted(branches, key=lambda b: b[0]))


def _local_names(node: ast.AST) -> frozenset[str]:
    """The parameters of a function and the names its body binds."""
    names: set[str] = set()
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        a = node.args
        names.update(arg.arg for arg in (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg) if arg is not None)
    for inner in ast.walk(node):
        if isinstance(inner, ast.Name) and isinstance(inner.ctx, ast.Store):
            names.add(inner.id)
        elif isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and inner is not node:
            names.add(inner.name)
    return frozenset(names)


_TENSOR_TYPES = frozenset({"torch.Tensor", "torch._tensor.Tensor"})


def _tensor_parameters(node: ast.AST, imports: dict[str, str]) -> frozenset[str]:
    """Parameters annotated `Tensor` (or `Optional[Tensor]`, `Tensor | None`):
    a method called on one is the Tensor's method."""
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return frozenset()
    a = node.args
    found = set()
    for arg in (*a.posonlyargs, *a.args, *a.kwonlyargs):
        if arg.annotation is not None and _is_tensor_annotation(arg.annotation, imports):
            found.add(arg.arg)
    return frozenset(found)


def _is_tensor_annotation(annotation: ast.AST, imports: dict[str, str]) -> bool:
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):  # "Tensor"
        try:
            annotation = ast.parse(annotation.value, mode="eval").body
        except SyntaxError:
            return False
    if isinstance(annotation, ast.Subscript) and (_dotted(annotation.value) or "").rsplit(".", 1)[-1] == "Optional":
        annotation = annotation.slice
    if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
        sides = [annotation.left, annotation.right]
        if not any(isinstance(s, ast.Constant) and s.value is None for s in sides):
            return False
        annotation = next(s for s in sides if not (isinstance(s, ast.Constant) and s.value is None))
    name = _dotted(annotation)
    return name is not None and _absolute_name(name, imports, "") in _TENSOR_TYPES


@functools.lru_cache(maxsize=256)
def _top_level_aliases(module: str, root: Path) -> dict[str, str]:
    """Names a module binds to another name at its top level (`Tensor = torch.Tensor`), made absolute."""
    path = module_file(module, root)
    if path is None:
        return {}
    imports = import_names(module, root)
    aliases = {}
    for node in _parse(path).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            value = _dotted(node.value)
            if value is not None:
                aliases[node.targets[0].id] = _absolute_name(value, imports, module)
    return aliases


@functools.lru_cache(maxsize=256)
def _top_level_names(module: str, root: Path) -> frozenset[str]:
    """The names a module defines itself (def, class, assignment) at its top level."""
    path = module_file(module, root)
    if path is None:
        return frozenset()
    names = set()
    for node in _parse(path).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return frozenset(names)


def _absolute_name(name: str, imports: dict[str, str], module: str) -> str:
    head, _, rest = name.partition(".")
    if head in imports:
        return imports[head] + (f".{rest}" if rest else "")
    return name


# -- hand-written bindings ------------------------------------------------------
#
# Note [hand-written bindings]
# torchgen skips some operators (gen_python_functions' SKIP_PYTHON_BINDINGS:
# `to`, `contiguous`, `copy_`, `nonzero`, `item`...): their Python names are
# entries of method tables written by hand, `{"to", castPyCFunctionWithKeywords(
# THPVariable_to), ...}`. A table entry names a C++ function; when the file
# defines it, its body (and the static helpers of the same file it calls,
# matched by argument count: `dispatch_to(self_, dtype, ...)`) calls the
# operators as `self.to(...)` or `at::nonzero_out(...)`; when the file does not,
# it is a generated binding (`__add__` is `THPVariable_add`, the binding of
# `Tensor.add`). Which of those calls are operators the catalog says.

# Python namespace -> the repository paths of its hand-written tables, newest layout first.
_MANUAL_TABLES = {
    "torch.Tensor": (
        "tools/autograd/templates/python_variable_methods.cpp",
        "torch/csrc/autograd/python_variable_methods.cpp",
        "torch/csrc/autograd/python_variable.cpp",  # the mapping slots: __getitem__, __setitem__
    ),
    "torch": ("torch/csrc/autograd/python_torch_functions_manual.cpp",),
}
# Where the installed wheel ships a repository path (its torchgen's packaged templates).
_WHEEL_PREFIXES = (("tools/autograd/", "torchgen/packaged/autograd/"),)


@dataclass(frozen=True)
class CppCall:
    """A call in the body of a hand-written binding: `self.to(...)` (a method)
    or `at::nonzero_out(...)` (a function)."""

    name: str  # "to", "nonzero_out"
    is_method: bool
    line: int


@dataclass(frozen=True)
class ManualBinding:
    """A Python name served by an entry of a hand-written method table."""

    python_name: str  # "torch.Tensor.to"
    function: str  # "THPVariable_to"
    repo_path: str  # "tools/autograd/templates/python_variable_methods.cpp"
    path: Path  # the file on disk
    line: int  # of the function's definition, or of its name in the table when the file does not define it
    defined: bool  # False: the file does not define it: a generated binding (`__add__` -> THPVariable_add) or another file's
    calls: tuple[CppCall, ...]  # in the body and the static helpers it calls, in order


def manual_binding(dotted: str, root: Path) -> ManualBinding | None:
    """The hand-written binding of `torch.X` / `torch.Tensor.X` under `root`
    (a tree, or site-packages), read from its method table (Note [hand-written bindings])."""
    namespace, _, name = dotted.rpartition(".")
    for repo_path in _MANUAL_TABLES.get(namespace, ()):
        path = _manual_file(repo_path, root)
        if path is None:
            continue
        raw, text = _cpp_text(path)
        entry = _table_entries(raw, text).get(name)
        if entry is None:
            continue
        function, entry_offset = entry
        bodies = _cpp_definitions(text)
        if function not in bodies:
            return ManualBinding(dotted, function, repo_path, path, _line_at(text, entry_offset), False, ())
        start = bodies[function][0][0]
        return ManualBinding(dotted, function, repo_path, path, _line_at(text, start), True, _body_calls(text, function, bodies))
    return None


def _manual_file(repo_path: str, root: Path) -> Path | None:
    candidates = [root / repo_path]
    candidates += [root / (wheel + repo_path[len(repo) :]) for repo, wheel in _WHEEL_PREFIXES if repo_path.startswith(repo)]
    return next((p for p in candidates if p.is_file()), None)


@functools.lru_cache(maxsize=8)
def _cpp_text(path: Path) -> tuple[str, str]:
    """The file's text, and the same text with comments and the contents of
    string literals blanked (same offsets, same lines): braces and calls in
    those are no code."""
    text = path.read_text(encoding="utf-8", errors="replace")

    def blank(m: re.Match) -> str:
        found = m.group(0)
        if found[0] in "\"'":
            return found[0] + re.sub(r"[^\n]", " ", found[1:-1]) + found[-1]
        return re.sub(r"[^\n]", " ", found)

    return text, _CPP_NOISE.sub(blank, text)


_CPP_NOISE = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)


def _line_at(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


_TABLE = re.compile(r"\bPyMethodDef\s+\w+\s*\[\s*\]\s*=\s*\{")
# `static PyMappingMethods THPVariable_as_mapping = {len, getitem, setitem};`: CPython's slot order.
_MAPPING = re.compile(r"\bPyMappingMethods\s+\w+\s*=\s*\{")
_MAPPING_SLOTS = ("__len__", "__getitem__", "__setitem__")
_ENTRY = re.compile(r'\{\s*"([^"\n]*)"\s*,\s*([^,{}]*?)\s*,')


def _table_entries(raw: str, text: str) -> dict[str, tuple[str, int]]:
    """Python name -> (C++ function, offset of its name) of every entry of a
    `PyMethodDef x[] = {...}` (the function is the last identifier of the
    entry's second field: `castPyCFunctionWithKeywords(TypeError_to_NotImplemented_<THPVariable_add>)`)
    and of the slots of a `PyMappingMethods`."""
    entries: dict[str, tuple[str, int]] = {}
    for table in _TABLE.finditer(text):
        end = _matching(text, table.end() - 1)
        for m in _ENTRY.finditer(text, table.end(), end):  # code only: no entry in a comment
            names = list(re.finditer(r"[A-Za-z_]\w*", m.group(2)))
            if names:
                entries.setdefault(raw[m.start(1) : m.end(1)], (names[-1].group(0), m.start(2) + names[-1].start()))
    for table in _MAPPING.finditer(text):
        end = _matching(text, table.end() - 1)
        offset = table.end()
        for slot, field in zip(_MAPPING_SLOTS, text[table.end() : end].split(",")):
            names = list(re.finditer(r"[A-Za-z_]\w*", field))
            if names and names[-1].group(0) not in ("nullptr", "NULL"):
                entries.setdefault(slot, (names[-1].group(0), offset + names[-1].start()))
            offset += len(field) + 1
    return entries


def _matching(text: str, open_at: int) -> int:
    """The offset of the bracket closing the one at `open_at`."""
    pairs = {"{": "}", "(": ")"}
    opening, closing = text[open_at], pairs[text[open_at]]
    depth = 0
    for i in range(open_at, len(text)):
        c = text[i]
        if c == opening:
            depth += 1
        elif c == closing:
            depth -= 1
            if depth == 0:
                return i
    return len(text)


_DEFINITION_HEAD = re.compile(r"(?<![\w.>:])([A-Za-z_]\w*)\s*\(")


@functools.lru_cache(maxsize=8)
def _cpp_definitions(text: str) -> dict[str, tuple[tuple[int, int, int], ...]]:
    """Function name -> (start, end of body, parameter count) of each function
    the file defines outside any function body (overloads are several)."""
    found: dict[str, list[tuple[int, int, int]]] = {}
    depth_at = _code_depths(text)
    for m in _DEFINITION_HEAD.finditer(text):
        if depth_at[m.start()] != 0:
            continue
        close = _matching(text, m.end() - 1)
        rest = re.match(r"\s*(?:const\s*)?(?:noexcept\s*)?(?:->\s*[\w:<>, ]+?\s*)?\{", text[close + 1 :])
        if rest is None:
            continue
        body_open = close + 1 + rest.end() - 1
        params = _arguments(text[m.end() : close])
        found.setdefault(m.group(1), []).append((m.start(), _matching(text, body_open), len(params)))
    return {k: tuple(v) for k, v in found.items()}


def _code_depths(text: str) -> list[int]:
    """For each offset, how many braces other than a namespace's
    (`namespace torch::autograd {`) are open there."""
    depths: list[int] = []
    opened: list[bool] = []  # per open brace: is it a namespace's
    inside = 0
    for i, c in enumerate(text):
        depths.append(inside)
        if c == "{":
            is_namespace = bool(re.search(r"\bnamespace\b[\w:\s]*$", text[max(0, i - 200) : i]))
            opened.append(is_namespace)
            inside += 0 if is_namespace else 1
        elif c == "}" and opened:
            inside -= 0 if opened.pop() else 1
    return depths


def _arguments(text: str) -> list[str]:
    """The top-level comma-separated pieces of a parameter or argument list."""
    pieces, depth, current = [], 0, []
    for c in text:
        if c in "([{<":
            depth += 1
        elif c in ")]}>":
            depth = max(0, depth - 1)
        if c == "," and depth == 0:
            pieces.append("".join(current))
            current = []
        else:
            current.append(c)
    pieces.append("".join(current))
    return [p for p in pieces if p.strip() and p.strip() != "void"]


_METHOD_CALL = re.compile(r"(?:\.|->)\s*(?:template\s+)?([A-Za-z_]\w*)\s*(?:<[^<>();]*>)?\s*\(")
_AT_CALL = re.compile(r"(?<![\w:])at::([A-Za-z_]\w*)\s*\(")
_PLAIN_CALL = re.compile(r"(?<![\w.>:])([A-Za-z_]\w*)\s*(?:<[^<>();]*>)?\s*\(")


def _body_calls(text: str, function: str, bodies: dict[str, tuple[tuple[int, int, int], ...]]) -> tuple[CppCall, ...]:
    """The method and `at::` calls of `function`'s body, and of the functions
    of the same file it calls (an overload chosen by its argument count), in order."""
    found: list[CppCall] = []
    seen: set[tuple[int, int]] = set()
    start, end, _ = bodies[function][0]
    work = [(start, end)]
    while work:
        start, end = work.pop(0)
        if (start, end) in seen:
            continue
        seen.add((start, end))
        body = text[start:end]
        for m in _METHOD_CALL.finditer(body):
            found.append(CppCall(m.group(1), True, _line_at(text, start + m.start())))
        for m in _AT_CALL.finditer(body):
            found.append(CppCall(m.group(1), False, _line_at(text, start + m.start())))
        for m in _PLAIN_CALL.finditer(body):
            helper = m.group(1)
            if helper not in bodies or helper == function and start == bodies[function][0][0]:
                continue
            close = _matching(body, m.end() - 1)
            count = len(_arguments(body[m.end() : close]))
            overloads = [d for d in bodies[helper] if d[2] == count] or list(bodies[helper])
            work.extend((s, e) for s, e, _ in overloads)
    return tuple(sorted(set(found), key=lambda c: (c.line, c.name)))


# Where ATen's hand-written Tensor methods live: a tree's source, or the wheel's headers.
_TENSOR_BASE = ("aten/src/ATen/core/TensorBase.h", "torch/include/ATen/core/TensorBase.h")


@functools.lru_cache(maxsize=8)
def dispatching_tensor_methods(root: Path) -> frozenset[str]:
    """The hand-written C++ Tensor methods (operators marked
    `manual_cpp_binding`) that enter the dispatcher: `contiguous` calls
    `__dispatch_contiguous`; `numel`, `dim` read the TensorImpl and dispatch nothing."""
    for rel in _TENSOR_BASE:
        path = root / rel
        if path.is_file():
            _, text = _cpp_text(path)
            return frozenset(re.findall(r"\b__dispatch_(\w+)\s*\(", text))
    return frozenset()


# The wheel's type stubs of the C++ bindings: every function of torch._C._VariableFunctions
# (what `torch.X` binds) and every method of torch._C.TensorBase, generated or written by hand.
_STUBS = {"torch": ("torch/_C/_VariableFunctions.pyi", None), "torch.Tensor": ("torch/_C/__init__.pyi", "TensorBase")}


def stub_declaration(dotted: str, root: Path) -> str | None:
    """`path:line` of the type stub under `root` (site-packages) that declares
    `torch.X` or `torch.Tensor.X` as a C++ binding; None when none does."""
    namespace, _, name = dotted.rpartition(".")
    if namespace not in _STUBS or not name.isidentifier():
        return None
    rel, cls = _STUBS[namespace]
    path = root / rel
    if not path.is_file():
        return None
    text = path.read_text(encoding="utf-8", errors="replace")
    start, end = 0, len(text)
    if cls is not None:
        head = re.search(rf"^class {cls}\b.*$", text, re.M)
        if head is None:
            return None
        start = head.end()
        following = re.search(r"^\S", text[start:], re.M)
        end = start + following.start() if following else end
    indent = "    " if cls is not None else ""
    found = re.compile(rf"^{indent}def {re.escape(name)}\(", re.M).search(text, start, end)
    return f"{rel}:{_line_at(text, found.start())}" if found else None
