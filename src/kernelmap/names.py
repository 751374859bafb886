"""One resolver for the names every command accepts: operators
(`conv2d`, `aten::add.Tensor`, `add.out`), Python entry points (`torch.add`,
`torch.Tensor.add_`, `F.relu`, `torch.nn.functional.conv2d`) and Python code
that reaches them (`torch.nn.Conv2d`: its forward, read from the wheel's
source, calls `F.conv2d`, which calls `torch.conv2d`). Reads source; never
imports torch."""

from __future__ import annotations

from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING

from kernelmap import pysource
from kernelmap.errors import KernelmapError, UnknownName
from kernelmap.model import Op

if TYPE_CHECKING:
    from kernelmap.catalog import Catalog

_MAX_DEFS = 40  # Python definitions read while looking for the operators a name reaches


def resolve_ops(name: str, catalog: Catalog, wheel_catalog: Catalog | None = None, site_packages: Path | None = None) -> tuple[Op, ...]:
    """Every operator `name` reaches, most likely first; UnknownName otherwise.
    Operators and entry points are the catalog's; other Python names are
    followed through their source to the entry points they call. Operators
    found through the installed torch's Python (`wheel_catalog`) are looked up
    again in `catalog` (a selected tree's), by name."""
    from kernelmap.catalog import expand_python_name

    try:
        return catalog.resolve(name)
    except UnknownName as unknown:
        text = expand_python_name(name.strip())
        if not text.startswith("torch.") or site_packages is None:
            raise
        entry_catalog = wheel_catalog or catalog
        entry_points = entry_catalog.entry_points()
        found = _entry_points_reached(text, site_packages, entry_points)
        if not found:
            raise unknown from None
        ops: dict[str, Op] = {}
        for entry in found:
            for op in entry_catalog.resolve(entry):
                try:
                    op = catalog.get(str(op.name))
                except KernelmapError:
                    pass
                ops.setdefault(str(op.name), op)
        return tuple(ops.values())


def _entry_points_reached(name: str, root: Path, entry_points: set[str]) -> list[str]:
    """The entry points (`torch.conv2d`, `torch.nn.functional.conv2d`) a Python
    definition calls, breadth first through `self.` methods, `forward` of a
    class, and functionals; the first level that reaches any."""
    definition = pysource.find_def(name, root)
    if definition is None:
        return []
    queue = deque([definition])
    seen = {definition.qualname}
    read = 0
    while queue and read < _MAX_DEFS:
        current = queue.popleft()
        read += 1
        owner = current.qualname.rsplit(".", 1)[0]
        targets = [f"{current.qualname}.forward"] if current.node.__class__.__name__ == "ClassDef" else []
        reached: list[str] = []
        for call in pysource.calls(current, root) if not targets else ():
            if call.target.startswith("self."):
                targets.append(f"{owner}.{call.target[5:]}")
                continue
            builtin = pysource.builtin_name(call.target)
            if builtin and builtin in entry_points:
                reached.append(builtin)
            elif call.target in entry_points:
                reached.append(call.target)
        if reached:
            # the entry point named like the queried name first (nn.Conv2d: torch.conv2d before F.pad)
            wanted = name.rsplit(".", 1)[-1].lower()
            return sorted(dict.fromkeys(reached), key=lambda e: e.rsplit(".", 1)[-1].lower() != wanted)
        for target in targets:
            found = pysource.find_def(target, root)
            if found is not None and found.qualname not in seen:
                seen.add(found.qualname)
                queue.append(found)
    return []
