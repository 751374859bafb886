"""The public Python API. The CLI is a thin layer over these functions; each
returns plain model data that any renderer can show.

    from kernelmap import where
    answer = where("torch.nn.functional.conv2d", device="cuda")
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from kernelmap import env
from kernelmap.model import Kernel, Location, Op
from kernelmap.dispatch.native import NativeOverride


@dataclass(frozen=True)
class LiveAnswer:
    """What the live dispatcher of the installed torch says about one operator."""

    registrations: tuple[Kernel, ...]  # active registrations, alias keys included
    schema_location: Location | None
    path: object  # kernelmap.dispatch.DispatchPath (typed loosely: dispatch imports torch)


@dataclass(frozen=True)
class SourceStep:
    """One landmark of the operator's code on a device, from an indexed source tree."""

    role: str  # "entry kernel", "stub kernel", "leaf"
    name: str
    location: Location | None
    detail: str = ""  # the edge's condition, the vendor library


@dataclass(frozen=True)
class WhereAnswer:
    query: str
    ops: tuple[Op, ...]  # every operator the name reaches, most likely first
    torch_version: str
    torch_commit: str | None
    delegate: Op | None = None  # the structured delegate of ops[0], when it has one
    live: LiveAnswer | None = None  # None with static=True
    notes: tuple[str, ...] = field(default_factory=tuple)
    source: tuple[SourceStep, ...] = ()  # with an indexed tree: entry kernel, stub kernel, leaf
    overrides: tuple[NativeOverride, ...] = ()  # torch._native DSL kernels registered in front of ATen's

    @property
    def op(self) -> Op:
        return self.ops[0]


def where(
    name: str,
    device: str = "cpu",
    dtype: str = "float32",
    requires_grad: bool = False,
    autocast: bool = False,
    inference_mode: bool = False,
    static: bool = False,
    tree: Path | None = None,
    with_source: bool = False,
) -> WhereAnswer:
    """Where the operator behind `name` is declared, which kernels it has per
    dispatch key, and (unless `static`) what the live dispatcher runs for a call
    on `device`; `with_source` adds, when a source tree is indexed, the entry
    kernel, stub kernel and leaves on `device`. Static answers never import torch."""
    from kernelmap.catalog import load_catalog

    catalog = load_catalog(tree)
    ops = catalog.resolve(name)
    install = env.torch_install()
    delegate = catalog.delegate(ops[0])
    live = None
    notes: list[str] = []
    if not static:
        from kernelmap import dispatch

        if tree is not None:
            # the live dispatcher is the installed torch's; the yaml is the tree's
            notes.append(f"live answers come from torch {install.version}, the operator from {catalog.origin.label}")
        live_catalog = catalog if tree is None else load_catalog()
        qualified = str(ops[0].name)
        path = dispatch.dispatch_path(
            qualified,
            device=device,
            dtype=dtype,
            requires_grad=requires_grad,
            autocast=autocast,
            inference_mode=inference_mode,
            catalog=live_catalog,
        )
        live = LiveAnswer(_with_python_sources(qualified, dispatch.live_registrations(qualified)), dispatch.schema_location(qualified), path)
        if path.note:
            notes.append(path.note)
    source = _source_steps(str(ops[0].name), device, notes) if with_source else ()
    from kernelmap.dispatch.native import overrides as native_overrides

    found = native_overrides(str(ops[0].name), static=static, tree=tree)
    return WhereAnswer(name, ops, install.version, install.commit, delegate, live, tuple(notes), source, found)


def _with_python_sources(op: str, kernels: tuple[Kernel, ...]) -> tuple[Kernel, ...]:
    """Python-registered kernels as the function that runs (`torch._refs.add` at
    its own line), not the line of the `Library` that registered them."""
    from kernelmap import dispatch

    resolved = []
    for k in kernels:
        found = dispatch.python_kernel_source(op, k.key) if k.kind == "python" else None
        resolved.append(Kernel(k.key, found[0], found[1], "python") if found else k)
    return tuple(resolved)


def _source_steps(op: str, device: str, notes: list[str]) -> tuple[SourceStep, ...]:
    """The entry kernel's definition, the first stub kernel and the leaves of
    `op` on `device`, read off the call graph when a source tree is indexed."""
    from kernelmap import graph
    from kernelmap.errors import KernelmapError

    if device not in graph.DEVICE_KEYS:
        return ()
    try:
        context = graph.open_context(device)
    except KernelmapError as e:
        notes.append(str(e))
        return ()
    if context.index is None:
        return ()
    tree = graph.stack(op, context)
    roles: dict[str, SourceStep] = {}
    leaves: dict[str, tuple[int, SourceStep]] = {}
    rank = {"vendor": 0, "loop": 1, "launch": 2}  # closed vendor code is where a call really ends
    for _, node in tree.walk():
        if "entry kernel" not in roles and node.kind in ("kernel", "generated") and node.location is not None:
            roles["entry kernel"] = SourceStep("entry kernel", node.name, node.location, node.condition or "")
        elif "stub kernel" not in roles and node.via is not None and node.via.value == "stub" and node.kind in ("kernel", "generated"):
            roles["stub kernel"] = SourceStep("stub kernel", node.name, node.location, node.condition or "")
        elif node.kind in rank and not node.attrs.get("collapsed") and node.name not in leaves:
            detail = node.attrs.get("library") or node.condition or ""
            leaves[node.name] = (rank[node.kind], SourceStep("leaf", node.name, node.location, str(detail)))
    best = [step for _, step in sorted(leaves.values(), key=lambda x: x[0])[:3]]
    return tuple(roles.values()) + tuple(best)
