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
import bisect
import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kernelmap.errors import SourceError

if TYPE_CHECKING:
    from tree_sitter import Node, Query

    from kernelmap.source.extract import Extractor
    from kernelmap.source.facts import Definition, FileFacts

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


_READ: list[list[Path]] = []  # the files each remembered computation reads (`_on_disk`)


def _parse(path: Path) -> ast.Module:
    for files in _READ:
        files.append(path)
    return _parse_file(path)


@functools.lru_cache(maxsize=256)
def _parse_file(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _on_disk(kind: str, root: Path, compute):
    """`compute()` (JSON data) remembered in the cache directory with the size
    and mtime of every file it parsed: a process that asks once (a CLI run)
    does not parse torch/__init__.py again while those files are unchanged."""
    import hashlib
    import json
    import os

    from kernelmap import env
    from kernelmap.safefiles import NotRegularFile, read_text

    cache = env.cache_dir() / "python" / f"{kind}-{hashlib.sha1(str(root).encode()).hexdigest()[:16]}.json"
    try:
        kept = json.loads(read_text(cache, "a cache file"))  # a FIFO there is refused, not waited on
        if kept.get("version") == 1 and kept.get("root") == str(root) and all(
                [(st := os.stat(p)).st_size, st.st_mtime_ns] == stamp for p, stamp in kept["files"].items()):
            return kept["value"]
    except (OSError, ValueError, TypeError, KeyError, AttributeError, RecursionError, NotRegularFile):
        pass
    files: list[Path] = []
    _READ.append(files)
    try:
        value = compute()
    finally:
        _READ.remove(files)
    try:
        stamps = {str(p): [(st := os.stat(p)).st_size, st.st_mtime_ns] for p in files}
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_name(f".{cache.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"version": 1, "root": str(root), "files": stamps, "value": value}))
        os.replace(tmp, cache)
    except OSError:  # a cache that cannot be written: computed each time
        pass
    return value


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


@functools.lru_cache(maxsize=8192)
def find_def(dotted: str, root: Path, _depth: int = 0) -> PyDef | None:
    """Where `dotted` is defined under `root`, following `from x import y` and
    `from x import *` re-exports the way the package itself does. Remembered
    like the parsed modules it reads (`_parse`): a long-lived process (a
    server) asks for the same names again and again."""
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


_TENSOR_BASE_METHOD = re.compile(r"(?:torch\.)?_C\._?TensorBase\.(\w+)")


def tensor_method_alias(name: str, root: Path) -> str | None:
    """The Tensor method a name of torch/_tensor.py's Tensor class is bound to
    at class level (`__neg__ = _C.TensorBase.neg` -> `torch.Tensor.neg`); else None."""
    attr = name.removeprefix("torch.Tensor.")
    if attr == name or "." in attr:
        return None
    tensor = find_def("torch.Tensor", root)
    if tensor is None or not isinstance(tensor.node, ast.ClassDef):
        return None
    assigned = {t.id: n.value for n in tensor.node.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    bound, seen = assigned.get(attr), {attr}
    while isinstance(bound, ast.Name) and bound.id not in seen:  # `__rtruediv__ = __rdiv__`
        seen.add(bound.id)
        if bound.id not in assigned:
            return f"torch.Tensor.{bound.id}"  # a method the class defines
        bound = assigned[bound.id]
    m = _TENSOR_BASE_METHOD.fullmatch(_dotted(bound) or "") if bound is not None else None
    return f"torch.Tensor.{m.group(1)}" if m else None


def is_python_tensor_method(name: str, root: Path) -> bool:
    """Whether `torch.Tensor.<method>` is defined in Python (torch/_tensor.py's
    `class Tensor(torch._C.TensorBase)`), which a call runs instead of the C binding."""
    return name.startswith("torch.Tensor.") and find_def(name, root) is not None


def shadowed_binding(target: str, root: Path) -> bool:
    """Whether a call of `target` runs Python that hides the generated binding
    of its name (Note [bindings Python hides]): a Tensor method torch/_tensor.py
    defines (`torch.Tensor.norm`), or a `torch.` function torch/__init__.py
    rebinds after the bindings (`torch.norm`). `torch._VF.norm` is never hidden."""
    if target.startswith("torch.Tensor."):
        return is_python_tensor_method(target, root)
    return target in rebound_builtins(root)


# Note [bindings Python hides]
# torch/__init__.py copies every generated function of `torch._C._VariableFunctions`
# into `torch` by a loop over `dir(_C._VariableFunctions)`, and after it runs
# `from torch.functional import *`: the names in torch/functional.py's `__all__`
# that are also generated (`norm`, `einsum`, `split`, `stft`, `unique_consecutive`...)
# are its Python functions, which call the bindings through `_VF` (or other
# operators: `torch.norm` of a strided tensor is `linalg.vector_norm`). Whatever
# the module's top level binds after the loop hides the binding of that name.


@functools.lru_cache(maxsize=8)
def rebound_builtins(root: Path) -> frozenset[str]:
    """The `torch.<name>`s that torch/__init__.py under `root` binds after
    copying the generated functions into `torch` (Note [bindings Python hides]),
    remembered on disk while the files read are unchanged."""
    return frozenset(_on_disk("rebound", root, lambda: sorted(_rebound_builtins(root))))


def _rebound_builtins(root: Path) -> frozenset[str]:
    path = module_file("torch", root)
    if path is None:
        return frozenset()
    body = _parse(path).body
    loop = next((i for i, node in enumerate(body) if isinstance(node, ast.For) and _copies_bindings(node)), None)
    if loop is None:
        return frozenset()
    names: set[str] = set()
    for node in body[loop + 1 :]:
        if isinstance(node, ast.ImportFrom):
            base = _absolute("torch", True, node.level, node.module)
            for alias in node.names:
                names.update(_star_rebinds(base, root) if alias.name == "*" else (alias.asname or alias.name,))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return frozenset(f"torch.{name}" for name in names)


def _copies_bindings(loop: ast.For) -> bool:
    """`for name in dir(_C._VariableFunctions):`"""
    iterated = loop.iter
    return (isinstance(iterated, ast.Call) and _dotted(iterated.func) == "dir" and len(iterated.args) == 1
            and (_dotted(iterated.args[0]) or "").endswith("_VariableFunctions"))


def _star_rebinds(module: str, root: Path) -> set[str]:
    """What `from module import *` binds (the literal `__all__`, else the public
    top-level names), less the bindings it only documents: torch/functional.py's
    `istft = _add_docstr(torch.istft, ...)` is the generated function itself."""
    path = module_file(module, root)
    if path is None:
        return set()
    body = _parse(path).body
    exported = next((node.value for node in body if isinstance(node, ast.Assign) and isinstance(node.value, (ast.List, ast.Tuple))
                     and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)), None)
    if exported is None:
        names = {name for name in _top_level_names(module, root) if not name.startswith("_")}
    else:
        names = {e.value for e in exported.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
    for node in body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.Call) and _dotted(node.value.func) in _ADD_DOCSTR and node.value.args
                and (_dotted(node.value.args[0]) or "").rsplit(".", 1)[-1] == node.targets[0].id):
            names.discard(node.targets[0].id)
    return names


# How a module documents a function it does not define: `x = _add_docstr(builtin, "...")`.
_ADD_DOCSTR = ("_add_docstr", "torch._C._add_docstr")

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
        if isinstance(value, ast.Call) and _dotted(value.func) in _ADD_DOCSTR and value.args:
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
# defines it, its body (and the functions of the same file it calls, an
# overload chosen by its argument count: `dispatch_to(self_, dtype, ...)`)
# calls the operators as `self.to(...)` or `at::nonzero_out(...)`; when the
# file does not, it is a generated binding (`__add__` is `THPVariable_add`, the
# binding of `Tensor.add`). Which of those calls are operators the catalog says.
#
# Note [binding calls]
# The file of a table is read by the source index's Extractor: the functions
# it defines (those a macro of the file writes included), their lines, and
# the calls in each. The Extractor keeps only calls that can be edges of the
# index (Note [calls kept]): it drops accessor methods (`self_.item()`,
# `.device()`), names a method called on a call's result after that call
# (`THPVariable_Unpack(self).detach_()` reads as `THPVariable_Unpack::detach_`),
# and counts no arguments. So a query of this module's own, on a parse of the
# same text, adds every method call (to the function whose lines hold it),
# the argument count of each call of a plain name, the parameter count of each
# function, and the tables' entries.

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
    calls: tuple[CppCall, ...]  # in the body and the functions of the file it calls, in order


def manual_binding(dotted: str, root: Path) -> ManualBinding | None:
    """The hand-written binding of `torch.X` / `torch.Tensor.X` under `root`
    (a tree, or site-packages), read from its method table (Note [hand-written bindings])."""
    namespace, _, name = dotted.rpartition(".")
    for repo_path in _MANUAL_TABLES.get(namespace, ()):
        path = _manual_file(repo_path, root)
        if path is None:
            continue
        table_file = _table_file(path, repo_path)
        entry = table_file.entries.get(name)
        if entry is None:
            continue
        function, entry_line = entry
        if function not in table_file.functions:
            return ManualBinding(dotted, function, repo_path, path, entry_line, False, ())
        definition = table_file.functions[function][0]
        return ManualBinding(dotted, function, repo_path, path, definition.line, True, _reached_calls(definition, table_file.functions))
    return None


def _manual_file(repo_path: str, root: Path) -> Path | None:
    candidates = [root / repo_path]
    candidates += [root / (wheel + repo_path[len(repo) :]) for repo, wheel in _WHEEL_PREFIXES if repo_path.startswith(repo)]
    return next((p for p in candidates if p.is_file()), None)


@dataclass(frozen=True)
class _CppFunction:
    """A function the file of a method table defines outside any other definition."""

    name: str  # "dispatch_to"
    line: int
    parameters: int | None  # None where no parameter list was read (a brace-initialised declaration, a macro's expansion)
    calls: frozenset[CppCall]  # its method and `at::` calls
    callees: frozenset[tuple[str, int | None]]  # (name, argument count) of its calls of plain names: ("dispatch_to", 5)


@dataclass(frozen=True)
class _TableFile:
    """What a file of hand-written method tables says (Note [binding calls])."""

    entries: dict[str, tuple[str, int]]  # Python name -> (C++ function, line of its name in the table)
    functions: dict[str, tuple[_CppFunction, ...]]  # name -> its overloads, in the file's order


def _reached_calls(binding: _CppFunction, functions: dict[str, tuple[_CppFunction, ...]]) -> tuple[CppCall, ...]:
    """The calls of `binding` and of the functions of the same file it calls
    (the overloads taking as many parameters as the call passes arguments, or
    all of them when none does), in order of lines."""
    found: set[CppCall] = set()
    seen: set[tuple[str, int]] = set()
    work = [binding]
    while work:
        function = work.pop(0)
        if (function.name, function.line) in seen:
            continue
        seen.add((function.name, function.line))
        found.update(function.calls)
        for name, count in function.callees:
            if name not in functions or (function is binding and name == binding.name):
                continue
            overloads = functions[name]
            work.extend([f for f in overloads if count is not None and f.parameters == count] or overloads)
    return tuple(sorted(found, key=lambda c: (c.line, c.name, c.is_method)))


# Note [binding calls]: what the Extractor does not say.
_BINDING_QUERY = """
(call_expression function: (field_expression field: (_) @method) arguments: (argument_list))
(call_expression function: [(identifier) @callee (template_function name: (identifier) @callee)] arguments: (argument_list) @arguments)
(function_definition declarator: (_) @declarator) @definition
(declaration type: (type_identifier) @table.type declarator: (init_declarator value: (initializer_list) @table))
"""
# `static PyMappingMethods THPVariable_as_mapping = {len, getitem, setitem};`: CPython's slot order.
_MAPPING_SLOTS = ("__len__", "__getitem__", "__setitem__")


@functools.cache
def _extractor() -> Extractor:
    # Imported here: the index's Extractor and tree-sitter are needed only by
    # hand-written bindings, and every command imports this module.
    from kernelmap.source.extract import extractor
    from kernelmap.source.facts import OperatorNames

    # Only names are read: which calls are operators the catalog says.
    return extractor(OperatorNames(frozenset(), frozenset()))


@functools.cache
def _binding_query() -> Query:
    import tree_sitter

    return tree_sitter.Query(_extractor().language, _BINDING_QUERY)


def _cpp_facts(path: Path, repo_path: str, data: bytes) -> FileFacts:
    """The Extractor's facts of one file; SourceError when it could not read it."""
    facts = _extractor().extract(repo_path, data)
    if facts.skipped:
        raise SourceError(f"{path} could not be read: {facts.skipped}")
    return facts


@functools.lru_cache(maxsize=8)
def _table_file(path: Path, repo_path: str) -> _TableFile:
    """The tables and top-level functions of one file, read once (Note [binding calls])."""
    from kernelmap.source.masking import mask_attributes

    data = path.read_bytes()  # the Extractor's masking blanks HANDLE_TH_ERRORS (Note [masked attributes])
    facts = _cpp_facts(path, repo_path, data)
    tree = _extractor().parser.parse(mask_attributes(data))  # the text the Extractor parsed
    methods, arguments, parameters, tables = _queried(tree.root_node)
    definitions = facts.definitions
    outer = _outermost(definitions)
    tops = sorted({outer[i] for i in range(len(definitions))}, key=lambda i: definitions[i].line)
    calls: dict[int, set[CppCall]] = {i: set() for i in tops}
    callees: dict[int, set[tuple[str, int | None]]] = {i: set() for i in tops}
    for c in facts.calls:
        if c.definition < 0:
            continue
        i = outer[c.definition]
        if c.callee == "." + c.short:
            calls[i].add(CppCall(c.short, True, c.line))
        elif c.callee == "at::" + c.short:
            calls[i].add(CppCall(c.short, False, c.line))
        elif c.callee == c.short:  # a function of the file, maybe: its argument counts are the query's (None: a macro's expansion)
            callees[i].update((c.short, n) for n in arguments.get((c.line, c.short), (None,)))
    starts = [definitions[i].line for i in tops]
    for call in methods:  # what the Extractor drops or renames: by the definition whose lines hold it
        k = bisect.bisect_right(starts, call.line) - 1
        if k >= 0 and call.line <= definitions[tops[k]].end_line:
            calls[tops[k]].add(call)

    functions: dict[str, list[_CppFunction]] = {}
    for i in tops:
        d = definitions[i]
        if d.kind == "function":
            found = _CppFunction(d.short, d.line, parameters.get((d.short, d.end_line)), frozenset(calls[i]), frozenset(callees[i]))
            functions.setdefault(d.short, []).append(found)
    return _TableFile(_table_entries(tables), {name: tuple(overloads) for name, overloads in functions.items()})


def _queried(root: Node) -> tuple[list[CppCall], dict[tuple[int, str], set[int]], dict[tuple[str, int], int], list[tuple[bool, Node]]]:
    """What _BINDING_QUERY finds: every method call; (line, name) of each call
    of a plain name -> its argument counts; (name, end line) of each function
    -> its parameter count; the tables (is a `PyMappingMethods`, its initializer list)."""
    import tree_sitter

    methods: list[CppCall] = []
    arguments: dict[tuple[int, str], set[int]] = {}
    parameters: dict[tuple[str, int], int] = {}
    tables: list[tuple[bool, Node]] = []
    for _, cap in tree_sitter.QueryCursor(_binding_query()).matches(root):
        if "method" in cap:
            name = _method_name(cap["method"][0])
            if name is not None:
                methods.append(CppCall(name, True, cap["method"][0].start_point[0] + 1))
        elif "callee" in cap:
            callee = cap["callee"][0]
            arguments.setdefault((callee.start_point[0] + 1, callee.text.decode()), set()).add(_item_count(cap["arguments"][0]))
        elif "definition" in cap:
            declared = _function_declarator(cap["declarator"][0])
            if declared is not None:
                parameters[(declared[0], cap["definition"][0].end_point[0] + 1)] = _item_count(declared[1])
        elif cap["table.type"][0].text in (b"PyMethodDef", b"PyMappingMethods"):
            tables.append((cap["table.type"][0].text == b"PyMappingMethods", cap["table"][0]))
    return methods, arguments, parameters, tables


def _outermost(definitions: tuple[Definition, ...]) -> list[int]:
    """For each definition, the index of the outermost one whose lines hold it (its own when none does)."""
    outer = list(range(len(definitions)))
    current = None
    for i in sorted(outer, key=lambda i: (definitions[i].line, -definitions[i].end_line)):
        if current is not None and definitions[i].end_line <= definitions[current].end_line:
            outer[i] = current
        else:
            current = i
    return outer


def _method_name(field: Node) -> str | None:
    """The method a member call calls: `x.to`, `x.template data_ptr<T>`; None for an operator or destructor."""
    while field.type in ("dependent_name", "template_method") and field.named_children:
        field = field.named_children[0]
    return field.text.decode() if field.type == "field_identifier" else None


def _function_declarator(declarator: Node) -> tuple[str, Node] | None:
    """(name, parameter list) of a function definition's declarator, under
    its `*` and `&`, where the name is a plain one (not `A::f`, not `operator()`)."""
    while declarator.type in ("pointer_declarator", "reference_declarator") and declarator.named_children:
        declarator = declarator.named_children[-1]
    if declarator.type != "function_declarator":
        return None
    name = declarator.child_by_field_name("declarator")
    params = declarator.child_by_field_name("parameters")
    if name is None or name.type != "identifier" or params is None:
        return None
    return name.text.decode(), params


def _item_count(items: Node) -> int:
    """How many parameters or arguments a list holds (`(void)` holds none)."""
    found = [c for c in items.children if c.type not in ("(", ")", ",", "comment")]
    return 0 if len(found) == 1 and found[0].text == b"void" else len(found)


def _table_entries(tables: list[tuple[bool, Node]]) -> dict[str, tuple[str, int]]:
    """Python name -> (C++ function, line of its name) of every entry of the
    `PyMethodDef x[] = {...}` tables (the function is the last name of the
    entry's second field: `castPyCFunctionWithKeywords(TypeError_to_NotImplemented_<THPVariable_add>)`)
    and of the slots of the `PyMappingMethods` ones; `tables` is (is a mapping, its initializer list)."""
    entries: dict[str, tuple[str, int]] = {}
    for is_mapping, table in sorted(tables, key=lambda t: (t[0], t[1].start_byte)):
        fields = [c for c in table.named_children if c.type != "comment"]
        if is_mapping:
            named = [(slot, _last_name(f)) for slot, f in zip(_MAPPING_SLOTS, fields)]
            for slot, name in named:
                if name is not None and name.text not in (b"nullptr", b"NULL"):
                    entries.setdefault(slot, (name.text.decode(), name.start_point[0] + 1))
            continue
        for entry in fields:
            parts = [c for c in entry.named_children if c.type != "comment"] if entry.type == "initializer_list" else []
            if len(parts) < 2 or parts[0].type != "string_literal":
                continue
            name = _last_name(parts[1])
            if name is not None:
                python_name = "".join(c.text.decode() for c in parts[0].named_children if c.type == "string_content")
                entries.setdefault(python_name, (name.text.decode(), name.start_point[0] + 1))
    return entries


def _last_name(node: Node) -> Node | None:
    """The last leaf of `node` spelled as a name, outside string literals
    (`THPVariable_add` in `castPyCFunctionWithKeywords(TypeError_to_NotImplemented_<THPVariable_add>)`)."""
    names = []
    stack = [node]
    while stack:
        current = stack.pop()
        if current.type in _LITERALS:
            continue
        if current.child_count:
            stack.extend(current.children)
        elif current.text.decode("utf-8", "replace").isidentifier():
            names.append(current)
    return max(names, key=lambda n: n.start_byte, default=None)


_LITERALS = frozenset(("string_literal", "raw_string_literal", "char_literal", "concatenated_string"))


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
            facts = _cpp_facts(path, rel, path.read_bytes())
            return frozenset(c.short.removeprefix("__dispatch_") for c in facts.calls if c.short.startswith("__dispatch_"))
    return frozenset()


def _line_at(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


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
