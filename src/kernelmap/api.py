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


@dataclass(frozen=True)
class LiveAnswer:
    """What the live dispatcher of the installed torch says about one operator."""

    registrations: tuple[Kernel, ...]  # active registrations, alias keys included
    schema_location: Location | None
    path: object  # kernelmap.dispatch.DispatchPath (typed loosely: dispatch imports torch)


@dataclass(frozen=True)
class WhereAnswer:
    query: str
    ops: tuple[Op, ...]  # every operator the name reaches, most likely first
    torch_version: str
    torch_commit: str | None
    delegate: Op | None = None  # the structured delegate of ops[0], when it has one
    live: LiveAnswer | None = None  # None with static=True
    notes: tuple[str, ...] = field(default_factory=tuple)

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
) -> WhereAnswer:
    """Where the operator behind `name` is declared, which kernels it has per
    dispatch key, and (unless `static`) what the live dispatcher runs for a call
    on `device`. Static answers never import torch."""
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
        live = LiveAnswer(dispatch.live_registrations(qualified), dispatch.schema_location(qualified), path)
        if path.note:
            notes.append(path.note)
    return WhereAnswer(name, ops, install.version, install.commit, delegate, live, tuple(notes))
