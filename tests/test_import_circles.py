"""No import circle in the package: the vocabulary at the bottom (errors,
model) depends on nothing above it, and no module reaches back up to one that
imports it.

The imports are read from the source with `ast`, never executed. An arrow is
every `import` / `from ... import` of a kernelmap module, at the top of a
module or inside a function: an import deferred into a function still makes
the module depend on the one it names, so it counts the same. Only imports
under `if TYPE_CHECKING:` do not count (annotations, never run). The arrow
goes to the module named: `from kernelmap.graph import loops` to
kernelmap.graph.loops, `from kernelmap.graph import GraphContext` to
kernelmap.graph (its package), and a package is not taken to import its
children. Modules a package loads by name (`importlib.import_module` in the
renderer table and the lazy re-exports) are not arrows.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def _modules(src: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package under `src`."""
    found = {}
    for path in sorted((src / "kernelmap").rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.Module):
    """Every import statement of a module, outside `if TYPE_CHECKING:` blocks."""
    pending: list[ast.AST] = [tree]
    while pending:
        node = pending.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                pending.extend(child.orelse)
            elif isinstance(child, (ast.Import, ast.ImportFrom)):
                yield child
            else:
                pending.append(child)


def import_arrows(src: Path = SRC) -> dict[str, dict[str, int]]:
    """module -> {kernelmap module it imports -> the line of the first such import}."""
    modules = _modules(src)
    arrows: dict[str, dict[str, int]] = {}
    for name, path in modules.items():
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        for node in _imports(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
            for target in targets:
                while target and target not in modules:  # `import kernelmap.a.b as x` names a module; an attribute's owner is the module
                    target = target.rpartition(".")[0]
                if target and target != name:
                    known = arrows.setdefault(name, {})
                    known[target] = min(known.get(target, node.lineno), node.lineno)
    return arrows


def circles(arrows: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's,
    with an explicit stack), each sorted, in sorted order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(arrows):
        if root in index:
            continue
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        work = [(root, iter(sorted(arrows.get(root, ()))))]
        while work:
            node, targets = work[-1]
            for target in targets:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(arrows.get(target, ())))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return sorted(found)


def _described(component: list[str], arrows: dict[str, dict[str, int]]) -> str:
    members = set(component)
    lines = [f"{a} -> {b} (line {line})" for a in component for b, line in sorted(arrows.get(a, {}).items()) if b in members]
    return "\n  ".join([" <-> ".join(component), *lines])


def test_no_import_circle():
    arrows = import_arrows()
    assert len(arrows) > 100 and "kernelmap.model" in arrows["kernelmap.graph.down"]  # the walk sees the package
    found = circles(arrows)
    assert found == [], "import circles (a lower module imports a higher one):\n" + "\n".join(_described(c, arrows) for c in found)


def test_the_walk_finds_a_circle(tmp_path):
    """The check itself: a circle made only of imports inside functions, one
    through a relative import, and one hidden under TYPE_CHECKING (not a circle)."""
    package = tmp_path / "kernelmap"
    (package / "low").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "low" / "__init__.py").write_text("")
    (package / "model.py").write_text("def f():\n    from kernelmap.render import html\n")
    (package / "render.py").write_text("from kernelmap import model\n")
    (package / "low" / "a.py").write_text("from . import b\n")
    (package / "low" / "b.py").write_text("def g():\n    from .a import x\n")
    (package / "top.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from kernelmap.low import a\n")
    (package / "low" / "c.py").write_text("import kernelmap.top\n")
    arrows = import_arrows(tmp_path)
    assert arrows["kernelmap.model"] == {"kernelmap.render": 2}
    assert "kernelmap.top" not in arrows
    assert circles(arrows) == [["kernelmap.low.a", "kernelmap.low.b"], ["kernelmap.model", "kernelmap.render"]]
