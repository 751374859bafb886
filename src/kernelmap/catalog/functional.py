"""Map each public function of `torch/nn/functional.py` to the builtins it
calls, reading the file as text (never importing torch): `conv2d` is
`_add_docstr(torch.conv2d, ...)`, `relu` calls `torch.relu_` or `torch.relu`.

The result links `torch.nn.functional.X` to operators through the builtin
names the generated bindings expose (`torch.X`, `torch._C._nn.X`).
"""

from __future__ import annotations

import ast
from pathlib import Path

from kernelmap import pysource

MODULE = "torch.nn.functional"


def functional_builtins(path: Path) -> dict[str, tuple[tuple[str, int], ...]]:
    """Public function name -> ((builtin, line of the call), ...) in source order.

    `path` is `torch/nn/functional.py` under a site-packages or a source tree.
    Functions that call no builtin are omitted; so are private names.
    """
    root = path.parents[2]
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    result: dict[str, tuple[tuple[str, int], ...]] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            names = [node.name]
        elif isinstance(node, ast.Assign):
            names = [t.id for t in node.targets if isinstance(t, ast.Name)]
        else:
            continue
        for name in names:
            if name.startswith("_"):
                continue
            definition = pysource.PyDef(f"{MODULE}.{name}", MODULE, path, node.lineno, node.end_lineno or node.lineno, node)
            builtins = {}
            for call in pysource.calls(definition, root):
                builtin = pysource.builtin_name(call.target)
                if builtin:
                    builtins.setdefault(builtin, call.line)
            if builtins:
                result[name] = tuple(builtins.items())
    return result
