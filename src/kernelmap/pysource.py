"""Read PyTorch's Python source as text, never importing it: find where a
dotted name (`torch.nn.Conv2d`, `torch.nn.functional.relu`) is defined by
following the package's own imports, and list what a function calls.

Used by the catalog (which builtins each `torch.nn.functional` function calls)
and by the call graph (module -> forward -> functional -> builtin).
"""

from __future__ import annotations

import ast
import functools
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

    target: str  # "self._conv_forward", "torch.nn.functional.conv2d", "torch.conv2d"
    line: int
    condition: str | None = None  # the innermost enclosing `if` test: "self.padding_mode != 'zeros'"


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


def _find_in_module(module: str, path: Path, name: str, root: Path, depth: int) -> PyDef | None:
    tree = _parse(path)
    is_package = path.name == "__init__.py"
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and node.name == name:
            return PyDef(f"{module}.{name}", module, path, node.lineno, node.end_lineno or node.lineno, node)
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
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
    for node in owner.node.body:
        if isinstance(node, ast.FunctionDef) and node.name == attr:
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


def calls(definition: PyDef, root: Path) -> tuple[PyCall, ...]:
    """What a function (or `x = _add_docstr(builtin, ...)`) calls, in source order,
    with names made absolute through the module's imports."""
    imports = import_names(definition.module, root)
    node = definition.node
    if isinstance(node, ast.Assign):
        value = node.value
        if isinstance(value, ast.Call) and _dotted(value.func) in ("_add_docstr", "torch._C._add_docstr") and value.args:
            target = _dotted(value.args[0])
            if target:
                return (PyCall(_absolute_name(target, imports, definition.module), node.lineno),)
        return ()
    found: dict[str, PyCall] = {}
    # explicit stack of (node, innermost enclosing if-test): no recursion
    stack: list[tuple[ast.AST, str | None]] = [(child, None) for child in ast.iter_child_nodes(node)]
    while stack:
        inner, condition = stack.pop()
        if isinstance(inner, ast.Call):
            name = _dotted(inner.func)
            if name:
                target = name if name.startswith("self.") else _absolute_name(name, imports, definition.module)
                found.setdefault(target, PyCall(target, inner.lineno, condition))
        if isinstance(inner, (ast.If, ast.IfExp)):
            test = ast.unparse(inner.test)
            stack.append((inner.test, condition))
            stack.extend((child, test) for child in (inner.body if isinstance(inner.body, list) else [inner.body]))
            orelse = inner.orelse if isinstance(inner.orelse, list) else [inner.orelse]
            stack.extend((child, f"not ({test})") for child in orelse)
            continue
        stack.extend((child, condition) for child in ast.iter_child_nodes(inner))
    return tuple(sorted(found.values(), key=lambda c: (c.line, c.target)))


def _absolute_name(name: str, imports: dict[str, str], module: str) -> str:
    head, _, rest = name.partition(".")
    if head in imports:
        return imports[head] + (f".{rest}" if rest else "")
    return name
