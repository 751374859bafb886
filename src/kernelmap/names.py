"""One resolver for the names every command accepts: operators
(`conv2d`, `aten::add.Tensor`, `add.out`), Python entry points (`torch.add`,
`torch.Tensor.add_`, `F.relu`, `torch.nn.functional.conv2d`) and Python code
that reaches them (`torch.nn.Conv2d`: its forward, read from the wheel's
source, calls `F.conv2d`, which calls `torch.conv2d`). Reads source; never
imports torch."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from kernelmap import pysource
from kernelmap.errors import HandWrittenBinding, KernelmapError, UnknownName
from kernelmap.model import Op

if TYPE_CHECKING:
    from kernelmap.catalog import Catalog

_MAX_DEFS = 40  # Python definitions read while looking for the operators a name reaches


def resolve_ops(name: str, catalog: Catalog, wheel_catalog: Catalog | None = None, site_packages: Path | None = None) -> tuple[Op, ...]:
    """Every operator `name` reaches, most likely first; UnknownName otherwise.
    Operators and entry points are the catalog's; other Python names are
    followed through their source to the entry points they call, and names of
    hand-written bindings through their C++ (`Tensor.to` -> aten::to). A
    Python function that reaches several operators (`F.interpolate`) lists
    first those named like it, then those it returns, over helpers that
    compute sizes (`torch.floor`). Operators found through the installed
    torch's Python (`wheel_catalog`) are looked up again in `catalog` (a
    selected tree's), by name."""
    from kernelmap.catalog import expand_python_name

    entry_catalog = wheel_catalog or catalog
    text = expand_python_name(name.strip()) if isinstance(name, str) else name
    alias = pysource.tensor_method_alias(text, site_packages) if site_packages is not None else None
    if alias is not None and alias != text:  # torch/_tensor.py's `__neg__ = _C.TensorBase.neg`
        return resolve_ops(alias, catalog, wheel_catalog, site_packages)
    if site_packages is not None and pysource.shadowed_binding(text, site_packages):
        # `torch.norm` runs torch/functional.py's norm, not the binding of its name (Note [bindings Python hides])
        found = _entry_points_reached(text, site_packages, entry_catalog.entry_points())
        if found:
            return _in_catalog(_entry_ops(found, entry_catalog), catalog)
    try:
        ops = catalog.resolve(name)
    except UnknownName as unknown:
        if not text.startswith("torch.") or site_packages is None:
            raise
        entry_points = entry_catalog.entry_points()
        found = _entry_points_reached(text, site_packages, entry_points)
        if found:
            return _in_catalog(_entry_ops(found, entry_catalog), catalog)
        if pysource.find_def(text, site_packages) is not None:
            raise unknown from None
        found_binding = hand_written(text, entry_catalog, site_packages)
        if found_binding is None:
            raise unknown from None
        return _in_catalog(found_binding[1], catalog)
    if site_packages is not None and len({op.name.name for op in ops}) > 1 and text.startswith("torch.") and text not in _generated_names(entry_catalog):
        # a Python function reaching several operators: in the order its source gives
        found = _entry_points_reached(text, site_packages, entry_catalog.entry_points())
        ordered = _in_catalog(_entry_ops(found, entry_catalog), catalog) if found else ()
        ops = tuple({str(op.name): op for op in (*ordered, *ops)}.values())
    return ops


_FUNCTIONAL = "torch.nn.functional."


def _generated_names(catalog: Catalog) -> set[str]:
    """The entry points that are generated bindings themselves (`torch.add`), not Python functions."""
    return {e for e in catalog.entry_points() if not e.startswith(_FUNCTIONAL)}


def _entry_ops(entries: list[str], entry_catalog: Catalog) -> tuple[Op, ...]:
    ops: dict[str, Op] = {}
    for entry in entries:
        for op in entry_catalog.resolve(entry):
            ops.setdefault(str(op.name), op)
    return tuple(ops.values())


def _in_catalog(ops: tuple[Op, ...], catalog: Catalog) -> tuple[Op, ...]:
    """The same operators as `catalog` (a selected tree's) has them, by name."""
    found: dict[str, Op] = {}
    for op in ops:
        try:
            op = catalog.get(str(op.name))
        except KernelmapError:
            pass
        found.setdefault(str(op.name), op)
    return tuple(found.values())


def hand_written_ops(binding: pysource.ManualBinding, catalog: Catalog, root: Path) -> tuple[Op, ...]:
    """The operators a hand-written binding calls (Note [hand-written bindings]):
    a table entry pointing at a generated binding is that binding's name
    (`__add__` -> THPVariable_add -> `Tensor.add`); a function defined by hand
    reaches the operators its code calls as a C++ build compiles them:
    `self.to(...)` is a generated Tensor method (an operator with a method
    variant, not `manual_cpp_binding`, or a hand-written one that calls
    `__dispatch_<name>`), `at::nonzero_out(...)` a generated function (an
    operator with a function variant; `_out` names its out= overloads).
    Operators named like the Python name first."""
    namespace, _, short = binding.python_name.rpartition(".")
    if not binding.defined:
        generated = binding.function.removeprefix("THPVariable_")
        if generated == binding.function:
            return ()
        try:
            return catalog.resolve(f"{namespace}.{generated}")
        except UnknownName:
            return ()
    dispatching = pysource.dispatching_tensor_methods(root)
    found: dict[str, tuple[int, Op]] = {}
    for call in binding.calls:
        base, want_out = call.name, False
        candidates = catalog.overloads(base)
        if not candidates and not call.is_method and base.endswith("_out"):
            base, want_out = base.removesuffix("_out"), True
            candidates = tuple(op for op in catalog.overloads(base) if op.is_out)
        for op in candidates:
            variant = "method" if call.is_method else "function"
            if variant not in op.variants or (want_out and not op.is_out):
                continue
            if op.manual_cpp_binding and not (call.is_method and base in dispatching):
                continue
            found.setdefault(str(op.name), (len(found), op))
    ranked = sorted(found.values(), key=lambda pair: (pair[1].name.name != short, pair[1].is_out, pair[0]))
    return tuple(op for _, op in ranked)


def hand_written(name: str, catalog: Catalog, root: Path) -> tuple[pysource.ManualBinding, tuple[Op, ...]] | None:
    """The hand-written binding of `name` under `root` and the operators it
    calls; None when no method table lists it and no type stub declares it.
    HandWrittenBinding when it calls none, or when only the stubs say it exists."""
    binding = pysource.manual_binding(name, root)
    if binding is None:
        stub = pysource.stub_declaration(name, root)
        if stub is None:
            return None
        raise HandWrittenBinding(name, f"{stub} declares it, and its C++ method table is not under {root} "
                                       "(only a source tree holds it: select one with --source)")
    ops = hand_written_ops(binding, catalog, root)
    if not ops:
        raise _calls_no_operator(binding)
    return binding, ops


def _calls_no_operator(binding: pysource.ManualBinding) -> HandWrittenBinding:
    where = f"{binding.function}, {binding.repo_path}:{binding.line}"
    if binding.defined:
        return HandWrittenBinding(binding.python_name, f"its code ({where}) calls no operator directly; kernelmap does not follow it further")
    return HandWrittenBinding(binding.python_name, f"its table entry ({where}) names a function of another file; kernelmap does not follow it")


def _entry_points_reached(name: str, root: Path, entry_points: set[str]) -> list[str]:
    """The entry points (`torch.conv2d`, `torch.nn.functional.conv2d`,
    `torch.Tensor.softmax`) a Python definition calls, breadth first through
    `self.` methods, `forward` of a class, and the Python functions it calls
    (a `boolean_dispatch`'s two branches too); every one the first level that
    reaches any reaches, those named like `name` first, then those a function
    returns, then in source order."""
    definition = pysource.find_def(name, root)
    if definition is None:
        return []
    level = [definition]
    seen = {definition.qualname}
    read = 0
    wanted = name.rsplit(".", 1)[-1].lower()
    if wanted in ("forward", "__call__") and "." in definition.qualname:
        wanted = definition.qualname.rsplit(".", 2)[-2].lower()  # nn.Conv2d.forward: named like its module, as nn.Conv2d is
    # Python that hides a binding calls the binding of its own name only on some paths (torch.norm: _VF.norm
    # for tensors that are not strided): what it returns, in source order, tells more than names
    hides = _hides_binding(name, definition, root)
    while level and read < _MAX_DEFS:
        reached: dict[str, tuple[bool, int]] = {}
        following: list[pysource.PyDef] = []
        for current in level:
            if read >= _MAX_DEFS:
                break
            read += 1
            owner = current.qualname.rsplit(".", 1)[0]
            if current.node.__class__.__name__ == "ClassDef":
                targets = [f"{current.qualname}.forward"]
            else:
                targets = []
                for call in pysource.calls(current, root):
                    if call.target.startswith("self."):
                        entry = f"torch.Tensor.{call.target[5:]}"
                        # a Tensor method of torch/_tensor.py calling a C one (`__rdiv__`: `self.reciprocal() * other`)
                        if owner != "torch._tensor.Tensor" or entry not in entry_points or pysource.shadowed_binding(entry, root):
                            targets.append(f"{owner}.{call.target[5:]}")
                            continue
                    else:
                        entry = pysource.entry_name(call.target) or call.target  # torch.linalg.vector_norm is itself one
                        # a generated binding ends the search; a functional (even one the catalog lists) is Python to read
                        entry = entry if entry in entry_points and not entry.startswith(_FUNCTIONAL) else None
                        if entry is not None and pysource.shadowed_binding(call.target, root):
                            entry = None  # `input.norm(...)` runs torch/_tensor.py's Tensor.norm: Python to read
                    if entry is not None:
                        returned, order = reached.get(entry, (False, len(reached)))
                        reached[entry] = (returned or call.returned, order)
                    elif call.target.startswith("torch."):
                        targets.append(call.target)
            for target in targets:
                found = pysource.find_def(target, root)
                if found is not None and found.qualname not in seen:
                    seen.add(found.qualname)
                    following.append(found)
        if reached:
            # the entry point named like the queried name first (nn.Conv2d: torch.conv2d before F.pad),
            # then what the function returns (F.interpolate: upsample_nearest1d before torch.floor)
            # (F.upsample_bilinear: upsample_bilinear2d, a name it begins, before upsample_nearest1d)
            return sorted(reached, key=lambda e: (0 if hides else _likeness(e, wanted), not reached[e][0], reached[e][1]))
        level = following
    return []


def _hides_binding(name: str, definition: pysource.PyDef, root: Path) -> bool:
    """Whether `name` (`torch.norm`, or `torch.functional.norm` itself) is
    Python that hides a generated binding (Note [bindings Python hides])."""
    if pysource.shadowed_binding(name, root):
        return True
    public = f"torch.{definition.qualname.rsplit('.', 1)[-1]}"
    if public not in pysource.rebound_builtins(root):
        return False
    found = pysource.find_def(public, root)
    return found is not None and found.qualname == definition.qualname


def _likeness(entry: str, wanted: str) -> int:
    """0: the entry point is named `wanted`; 1: its name begins with it; 2: neither."""
    short = entry.rsplit(".", 1)[-1].lower()
    return 0 if short == wanted else 1 if short.startswith(wanted) else 2
