"""The `path` answer: routes from one name to another.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kernelmap.model.calltree import CallNode, EdgeKind, _fact_from_json, _node_json, NodeKind, _plain
from kernelmap.model.documents import Answer, check_document, document
from kernelmap.model.locations import Location, OriginTable


PATH_VERSION = 1


@dataclass(frozen=True)
class Route:
    """One way a call of the answer's source reaches its target: the steps in
    call order, each a childless CallNode (its edge `via`, `condition` and facts
    as the call graph has them), source first, target last."""

    steps: tuple[CallNode, ...]

    def __post_init__(self) -> None:
        if not self.steps:
            raise ValueError("a route has at least one step")
        if any(s.children for s in self.steps):
            raise ValueError("a route's steps carry no children: the route itself is the order")

    @property
    def conditions(self) -> tuple[str, ...]:
        """The conditions on the route's edges and the preprocessor conditions of
        its definitions, in call order, each once: what a call must meet to take it."""
        found: dict[str, None] = {}
        for s in self.steps:
            for text in (s.condition, f"#if {s.attrs['preprocessor']}" if s.attrs.get("preprocessor") else None):
                if text:
                    found.setdefault(text, None)
        return tuple(found)


@dataclass(frozen=True)
class PathAnswer(Answer):
    """The routes from one name (Python, operator, C++ symbol) to another
    symbol or vendor call on one device, shortest first. No route is an answer too."""

    source: str
    target: str
    device: str
    routes: tuple[Route, ...]
    notes: tuple[str, ...] = ()
    searched: Mapping[str, Any] = field(default_factory=dict)  # nodes, depth, cut (a limit was reached), more (routes not shown)
    torch_version: str | None = None  # the installed torch's (Note [versions on locations])

    DOCUMENT = "path"

    def to_json(self) -> dict[str, Any]:
        origins = OriginTable()
        routes = [{"conditions": list(r.conditions), "steps": [_node_json(s, origins) for s in r.steps]} for r in self.routes]
        for r in routes:
            for s in r["steps"]:
                del s["children"]
        return document(self.DOCUMENT, PATH_VERSION, source=self.source, target=self.target, device=self.device, torch=self.torch_version,
                        notes=list(self.notes),
                        searched=_plain(dict(self.searched), origins), origins=origins.to_json(), routes=routes)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> PathAnswer:
        d = check_document(d, cls.DOCUMENT, PATH_VERSION)
        origins = OriginTable.from_json(d.get("origins"))
        routes = tuple(
            Route(tuple(
                CallNode(
                    s["name"],
                    NodeKind(s["kind"]),
                    Location.from_json(s["location"], origins) if s.get("location") else None,
                    EdgeKind(s["via"]) if s.get("via") else None,
                    s.get("condition"),
                    (),
                    {k: _fact_from_json(k, v, origins) for k, v in (s.get("facts") or {}).items()},
                )
                for s in r["steps"]
            ))
            for r in d.get("routes") or ()
        )
        return cls(d["source"], d["target"], d["device"], routes, tuple(d.get("notes") or ()), dict(d.get("searched") or {}), d.get("torch"))
