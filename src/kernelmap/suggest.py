"""Closest names for a name kernelmap does not know, whichever command was
given it: Python names by their module's own names (a case slip,
`torch.nn.Conv2D`, or a typo), C++ symbols, stubs, kernels and vendor calls
by the index's names (`mul_stubb`, `cudnnConvolutionForwrd`), which a
substring search alone does not find.

    with closest_names(python_root=root, index=index):
        graph.stack(target, context)     # UnknownName now says `closest: ...`

Nothing here imports torch: Python modules are read with `ast`.
"""

from __future__ import annotations

import ast
import difflib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from kernelmap.errors import UnknownName

_MAX = 5


@contextmanager
def closest_names(*, python_root: Path | None = None, index=None) -> Iterator[None]:
    """Re-raise an UnknownName with the closest names found here: a case
    slip first, then the names it gave, else those found here."""
    try:
        yield
    except UnknownName as e:
        from kernelmap.catalog import expand_python_name

        found = closest(e.name, python_root=python_root, index=index)
        slips = tuple(f for f in found if f.lower() == expand_python_name(e.name.strip()).lower())
        if e.suggestions and not slips:
            raise
        merged = slips + tuple(s for s in (e.suggestions or found) if s not in slips)
        if not merged:
            raise
        raise UnknownName(e.name, merged[:_MAX]) from None


def closest(name: str, *, python_root: Path | None = None, index=None) -> tuple[str, ...]:
    """The known names closest to `name`: a Python name's among its module's
    names, a C++ name's among the index's; case slips first."""
    from kernelmap.catalog import expand_python_name

    text = expand_python_name(name.strip())
    if python_root is not None and text.startswith("torch.") and "::" not in text:
        found = _closest_python(text, python_root)
        if found:
            return found
    if index is not None and len(text.rsplit("::", 1)[-1]) >= 3:
        return _closest_cpp(text, index)
    return ()


def _closest_python(text: str, root: Path) -> tuple[str, ...]:
    parent, _, last = text.rpartition(".")
    names = module_names(parent, root)
    same = [n for n in names if n.lower() == last.lower() and n != last]
    found = same or difflib.get_close_matches(last, sorted(names), _MAX, 0.75)
    return tuple(f"{parent}.{n}" for n in found)


def module_names(module: str, root: Path, depth: int = 3) -> set[str]:
    """The names a Python module binds at its top level: definitions,
    assignments, imports, and the names of the modules it star-imports."""
    from kernelmap import pysource

    path = pysource.module_file(module, root)
    if path is None:
        return set()
    try:
        tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
    except (OSError, SyntaxError, ValueError):
        return set()
    names: set[str] = set()
    package = path.name == "__init__.py"
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.Import):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if alias.name == "*":
                    if depth > 0:
                        base = module if package else module.rpartition(".")[0]
                        for _ in range(max(node.level - 1, 0)):
                            base = base.rpartition(".")[0]
                        star = f"{base}.{node.module}" if node.level and node.module else (node.module or base)
                        names |= {n for n in module_names(star, root, depth - 1) if not n.startswith("_")}
                else:
                    names.add(alias.asname or alias.name)
    return names


def _closest_cpp(text: str, index) -> tuple[str, ...]:
    """Names of the index (definitions and callees) close to `text`'s last
    part: those that hold it (`mul_stub` for `mul_stu`), else among those
    sharing its first letters, by similarity (`mul_stub` for `mul_stubb`)."""
    bare = text.rsplit("::", 1)[-1]
    held = index.search(bare, limit=_MAX)
    if held:
        return tuple(held)
    for size in (len(bare) // 2, 4, 3):
        if size < 3:
            continue
        pool = index.names_like(bare[:size], limit=20_000)
        by_last = {}
        for full in pool:
            by_last.setdefault(full.rsplit("::", 1)[-1], full)
        found = difflib.get_close_matches(bare, list(by_last), _MAX, 0.75)
        if not found:  # a case slip: cudnnconvolutionforward
            found = [n for n in by_last if n.lower() == bare.lower()][:_MAX]
        if found:
            return tuple(by_last[n] for n in found)
    return ()
