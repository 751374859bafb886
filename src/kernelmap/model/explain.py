"""The `explain` answer: a call's steps, each with the alternatives it did not
take (Note [alternatives of a step]).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kernelmap.model.documents import Answer, check_document, document
from kernelmap.model.locations import Location, location_from_json, location_json, OriginTable


@dataclass(frozen=True)
class Alternative:
    """Another way one step of a call can go, and the condition that picks it
    (Note [alternatives of a step])."""

    name: str  # what runs instead: "unrolled_elementwise_kernel"
    condition: str | None  # the code's condition for it: "case 1", "else of if (contiguous)"
    location: Location | None = None  # where it is called
    note: str = ""  # why the selected call never takes it, when known: "not for float32 alone: ..."

    def to_json(self, origins: OriginTable | None = None) -> dict[str, Any]:
        return {"name": self.name, "condition": self.condition, "location": location_json(self.location, origins), "note": self.note}

    @staticmethod
    def from_json(d: Mapping[str, Any], origins: OriginTable | None = None) -> Alternative:
        return Alternative(d["name"], d.get("condition"), location_from_json(d.get("location"), origins), d.get("note") or "")


# Note [alternatives of a step]
# A step of a call is one of several ways the code can go at that point: a
# switch's case 4 launches vectorized_elementwise_kernel, its case 1
# unrolled_elementwise_kernel; a non-contiguous input takes launch_legacy_kernel.
# The explanation follows one way (the main path: Note [the main path] in
# kernelmap.processors) as its steps; the others are the step's
# alternatives, each with the condition that picks it, never steps of their
# own. Renderers show them folded under their step.


@dataclass(frozen=True)
class Step:
    """One step of a call: what happens, where, and the code that does it."""

    title: str  # "Python argument parsing", "dtype switch", ...
    summary: str
    location: Location | None = None
    excerpt: str = ""  # source lines starting at location.line
    language: str = "cpp"
    alternatives: tuple[Alternative, ...] = ()  # what runs instead of this step, and when (Note [alternatives of a step])


EXPLAIN_VERSION = 2


@dataclass(frozen=True)
class Explanation(Answer):
    """The anatomy of one operator call on one device, step by step."""

    op: str
    device: str
    steps: tuple[Step, ...]
    notes: tuple[str, ...] = ()
    dtype: str = "float32"
    torch_version: str | None = None  # the installed torch's (Note [versions on locations])

    DOCUMENT = "explain"

    def to_json(self) -> dict[str, Any]:
        origins = OriginTable()
        steps = [
            {"title": s.title, "summary": s.summary, "location": location_json(s.location, origins), "excerpt": s.excerpt, "language": s.language,
             "alternatives": [a.to_json(origins) for a in s.alternatives]}
            for s in self.steps
        ]
        return document(self.DOCUMENT, EXPLAIN_VERSION, op=self.op, device=self.device, dtype=self.dtype, torch=self.torch_version,
                        notes=list(self.notes), origins=origins.to_json(), steps=steps)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Explanation:
        d = check_document(d, cls.DOCUMENT, EXPLAIN_VERSION)
        origins = OriginTable.from_json(d.get("origins"))
        steps = tuple(
            Step(s["title"], s["summary"], location_from_json(s.get("location"), origins), s.get("excerpt", ""), s.get("language", "cpp"),
                 tuple(Alternative.from_json(a, origins) for a in s.get("alternatives") or ()))
            for s in d.get("steps") or ()
        )
        return cls(d["op"], d["device"], steps, tuple(d.get("notes") or ()), d.get("dtype", "float32"), d.get("torch"))
