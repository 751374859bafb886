"""Read `torch/nn/functional.py` as text (with `ast`, never importing torch) and
map each public function to the builtins it calls: `conv2d` is
`_add_docstr(torch.conv2d, ...)`, `relu` calls `torch.relu_` or `torch.relu`.

The result links `torch.nn.functional.X` to operators through the builtin
names the generated bindings expose (`torch.X`, `torch._C._nn.X`, `Tensor.X`).
"""

from __future__ import annotations

import ast
from pathlib import Path

# How functional.py refers to the modules that hold generated bindings.
_BINDING_PREFIXES = {
    "torch": "torch",
    "_VF": "torch",  # torch._VF re-exports torch._C._VariableFunctions
    "torch._C._nn": "torch._C._nn",
    "torch._C._VariableFunctions": "torch",
    "_C._nn": "torch._C._nn",
    "torch._C._linalg": "torch._C._linalg",
}


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def _as_builtin(dotted: str) -> str | None:
    """`torch.conv2d` -> `torch.conv2d`; `_VF.dropout` -> `torch.dropout`; else None."""
    module, _, name = dotted.rpartition(".")
    target = _BINDING_PREFIXES.get(module)
    if target is None or name.startswith("__"):
        return None
    return f"{target}.{name}"


def functional_builtins(path: Path) -> dict[str, tuple[tuple[str, int], ...]]:
    """Public function name -> ((builtin, line), ...) in the order they appear.

    `line` is where the function (or the `_add_docstr` assignment) starts.
    Functions that call no builtin are omitted; so are private names.
    """
    tree = ast.parse(path.read_text(), filename=str(path))
    result: dict[str, tuple[tuple[str, int], ...]] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
            seen: dict[str, int] = {}
            for inner in ast.walk(node):
                if isinstance(inner, ast.Call):
                    dotted = _dotted(inner.func)
                    builtin = _as_builtin(dotted) if dotted else None
                    if builtin:
                        seen.setdefault(builtin, node.lineno)
            if seen:
                result[node.name] = tuple(seen.items())
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            # conv2d = _add_docstr(torch.conv2d, r"""...""")
            call = node.value
            if _dotted(call.func) in ("_add_docstr", "torch._C._add_docstr") and call.args:
                dotted = _dotted(call.args[0])
                builtin = _as_builtin(dotted) if dotted else None
                for target in node.targets:
                    if builtin and isinstance(target, ast.Name) and not target.id.startswith("_"):
                        result[target.id] = ((builtin, node.lineno),)
    return result
