"""Which operators' code lives in which file, and which generated files a
yaml edit of one operator rewrites: the facts an impact answer names, read
in bulk from the tree's index, its catalog and the generated files.

Note [operators of a unit]
A unit holds an operator's code when it defines one of the operator's
kernels (an `at::native::` function its yaml entry names, or the structured
kernel `TORCH_IMPL_FUNC(x)` / `TORCH_META_FUNC(x)` of it or of its
structured delegate), registers it (`m.impl` / `m.def` in a
`TORCH_LIBRARY*` block, the generated `Register<Key>` files, the autograd
and tracing wrappers), binds it to Python (the generated `python_*`
bindings), or registers a stub kernel (`REGISTER_DISPATCH`) for a stub one
of its kernels calls (the native/cpu and native/cuda files).

Note [files a yaml edit rewrites]
torchgen runs again after any edit of native_functions.yaml, and writes a
file only when its text changes. An edit of one operator's entry changes
the per-operator headers of its base name (`ops/<name>.h`, `_ops.h`,
`_native.h`, `_meta.h`, `_<key>_dispatch.h`) and every generated file whose
text spells its schema: the `// aten::<schema>` comments torchgen writes
above each declaration (TensorBody.h for a method, RedispatchFunctions.h,
RegistrationDeclarations.h...), the schema strings of `Operators_N.cpp`,
the `m.impl("<op>", ...)` registrations and the Python bindings' dispatch
cases. Files that only `#include` a per-operator header do not change.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

_OPS_HEADER = re.compile(r"^build/aten/src/ATen/ops/(\w+?)(_ops|_native|_meta|_[a-z]+_dispatch)?\.h$")
_SCHEMA = re.compile(rb"(?:aten::|\")([A-Za-z_]\w*(?:\.\w+)?)\(")
_IMPL = re.compile(rb"m\.(?:impl|def)\(\s*\"(?:aten::)?([A-Za-z_]\w*(?:\.\w+)?)\"")
_OPS_STRUCT = re.compile(rb"\b(?:at::_ops::)?(\w+)::(?:call|redispatch)\(")


def kernel_short(symbol: str) -> str:
    """`at::native::structured_mul_out::impl` -> `mul_out`; `at::native::add_sparse` -> `add_sparse`."""
    name = symbol.removeprefix("at::native::")
    name = name.removesuffix("::impl").removesuffix("::meta")
    return name.removeprefix("structured_")


def unit_operators(index, catalog, generated: Iterable[tuple[str, Path]]) -> dict[str, set[str]]:
    """File (repository path) -> the operators whose code lives in it (Note [operators of a unit])."""
    by_kernel: dict[str, set[str]] = {}  # kernel short name -> operators
    delegates: dict[str, set[str]] = {}  # "add.out" -> {"aten::add.Tensor", "aten::add_.Tensor"}
    by_struct: dict[str, str] = {}  # "add_Tensor" -> "aten::add.Tensor"
    known: set[str] = set()
    for op in catalog:
        name = str(op.name)
        known.add(name)
        by_struct[op.name.unqualified.replace(".", "_")] = name
        for kernel in op.dispatch:
            by_kernel.setdefault(kernel_short(kernel.symbol), set()).add(name)
        if op.structured_delegate:
            delegates.setdefault(op.structured_delegate, set()).add(name)

    def with_delegated(ops: set[str]) -> set[str]:
        out = set(ops)
        for op in ops:
            out |= delegates.get(op.removeprefix("aten::"), set())
        return out

    def named(op_text: str) -> set[str]:
        """A structured kernel macro's op: `add.Tensor` (a meta function) or `add_out` (a kernel)."""
        full = op_text if "::" in op_text else f"aten::{op_text}"
        if full in known:
            return {full}
        return by_kernel.get(op_text, set())

    out: dict[str, set[str]] = {}
    kernel_ops: dict[str, set[str]] = {}  # definition lookup name -> operators
    for path, lookup, op_text in index.native_definitions():
        ops = named(op_text) if op_text else by_kernel.get(lookup.removeprefix("at::native::"), set())
        ops = with_delegated(ops)
        if ops:
            out.setdefault(path, set()).update(ops)
            kernel_ops.setdefault(lookup, set()).update(ops)
    stub_ops: dict[str, set[str]] = {}
    for stub, caller, op_text in index.stub_callers():
        ops = kernel_ops.get(caller, set()) | (with_delegated(named(op_text)) if op_text else set())
        if ops:
            stub_ops.setdefault(stub, set()).update(ops)
    for path, kind, name, detail in index.registration_sites():
        if kind == "register_dispatch":
            ops = stub_ops.get(name, set())
        else:
            full = name if "::" in name else f"{detail or 'aten'}::{name}"
            ops = {full}
        if ops:
            out.setdefault(path, set()).update(ops)
    for path, disk in generated:
        if not path.endswith((".cpp", ".cu")):
            continue
        try:
            data = disk.read_bytes()
        except OSError:
            continue
        found = {f"aten::{m.decode()}" for m in _IMPL.findall(data)}
        found |= {by_struct[m.decode()] for m in _OPS_STRUCT.findall(data) if m.decode() in by_struct}
        if "/python_" in path:
            found |= {f"aten::{m.decode()}" for m in _SCHEMA.findall(data)}
        found &= known
        if found:
            out.setdefault(path, set()).update(found)
    return out


def rewritten_files(op_names: Iterable[str], generated: Iterable[tuple[str, Path]]) -> dict[str, set[str]]:
    """Operator ("aten::add.Tensor") -> the generated files (repository
    paths) an edit of its yaml entry rewrites (Note [files a yaml edit rewrites])."""
    wanted = {name.removeprefix("aten::"): name for name in op_names}
    bases: dict[str, set[str]] = {}
    for short, name in wanted.items():
        bases.setdefault(short.split(".", 1)[0], set()).add(name)
    out: dict[str, set[str]] = {name: set() for name in wanted.values()}
    for path, disk in generated:
        m = _OPS_HEADER.match(path)
        if m and m.group(1) in bases:
            for name in bases[m.group(1)]:
                out[name].add(path)
            continue
        if m:  # another operator's own header
            continue
        try:
            data = disk.read_bytes()
        except OSError:
            continue
        mentioned = {s.decode() for s in _SCHEMA.findall(data)} | {s.decode() for s in _IMPL.findall(data)}
        for short in mentioned:
            name = wanted.get(short)
            if name is not None:
                out[name].add(path)
    return out
