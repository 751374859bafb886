"""The `impact` answer: what one edit (a file, a line, a symbol, an
operator's yaml entry) makes a release build recompile, and what it costs.
Its JSON document is `impact/1` (kernelmap.answers describes it)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kernelmap.model import Answer, Location, Origin, OriginTable, check_document, document, location_from_json, location_json

IMPACT_VERSION = 1
KINDS = ("cpp", "cu", "capability")


@dataclass(frozen=True)
class EditedFile:
    """A file the edit changes, and why it is one."""

    path: str  # repository path; generated files under build/ or */generated/
    reason: str  # "the file named", "defines at::native::add_out", "rewritten by torchgen for aten::add.Tensor"
    location: Location | None = None  # the line named, the definition, or the yaml entry

    def to_json(self, origins: OriginTable) -> dict[str, Any]:
        return {"path": self.path, "reason": self.reason, "location": location_json(self.location, origins)}

    @staticmethod
    def from_json(d: Mapping[str, Any], origins: OriginTable) -> EditedFile:
        return EditedFile(d["path"], d["reason"], location_from_json(d.get("location"), origins))


@dataclass(frozen=True)
class RebuiltUnit:
    """One compilation the edit makes a build run again."""

    path: str  # the source file
    kind: str  # cpp | cu | capability
    library: str  # libtorch_cpu.so, ...
    seconds: float  # estimated CPU seconds to compile it (the cost model's)
    capability: str | None = None  # DEFAULT, AVX2, AVX512 for kind "capability"
    maybe: bool = False  # reached only through an #if the model cannot decide
    via: str | None = None  # the edited file it reaches (when the edit touches several)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"a unit's kind is one of {', '.join(KINDS)}, not {self.kind!r}")
        if (self.kind == "capability") != (self.capability is not None):
            raise ValueError(f"{self.path}: a capability unit names its CPU capability, and only it does")

    @property
    def name(self) -> str:
        return f"{self.path}.{self.capability}.cpp" if self.capability else self.path

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "kind": self.kind, "capability": self.capability, "library": self.library,
                "seconds": self.seconds, "maybe": self.maybe, "via": self.via}

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> RebuiltUnit:
        return RebuiltUnit(d["path"], d["kind"], d["library"], float(d["seconds"]), d.get("capability"), bool(d.get("maybe")), d.get("via"))


@dataclass(frozen=True)
class Estimate:
    """The rebuild's estimated time, with the model that gives it and how good it is."""

    cpu_seconds: float  # the units' compile times, summed
    wall_seconds: float  # on `jobs` parallel compiles: the sum shared out, or the longest unit
    jobs: int
    model: str  # the formula, in words
    error: str  # how far the model was from measured compiles, in words
    measured: bool = True  # False when the model was never calibrated for some units' kind

    def to_json(self) -> dict[str, Any]:
        return {"cpu_seconds": self.cpu_seconds, "wall_seconds": self.wall_seconds, "jobs": self.jobs,
                "model": self.model, "error": self.error, "measured": self.measured}

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> Estimate:
        return Estimate(float(d["cpu_seconds"]), float(d["wall_seconds"]), int(d["jobs"]), d["model"], d["error"], bool(d.get("measured", True)))


@dataclass(frozen=True)
class Advice:
    """A cheaper place for the same change, with its own cost."""

    summary: str  # "edit its definition in aten/src/ATen/native/BinaryOps.cpp instead"
    path: str
    location: Location | None
    units: int  # units an edit there rebuilds
    cpu_seconds: float

    def to_json(self, origins: OriginTable) -> dict[str, Any]:
        return {"summary": self.summary, "path": self.path, "location": location_json(self.location, origins), "units": self.units,
                "cpu_seconds": self.cpu_seconds}

    @staticmethod
    def from_json(d: Mapping[str, Any], origins: OriginTable) -> Advice:
        return Advice(d["summary"], d["path"], location_from_json(d.get("location"), origins), int(d["units"]), float(d["cpu_seconds"]))


@dataclass(frozen=True)
class ImpactAnswer(Answer):
    """The `impact` answer."""

    query: str  # as asked: "aten/src/ATen/native/cuda/Loops.cuh", "aten::add.Tensor"
    target: str  # what it was read as: file | line | symbol | operator
    device: str
    tree: Origin
    edited: tuple[EditedFile, ...]
    units: tuple[RebuiltUnit, ...]
    operators: tuple[str, ...]  # whose kernels, registrations or bindings the units hold
    estimate: Estimate
    advice: tuple[Advice, ...] = ()
    notes: tuple[str, ...] = ()
    third_party: tuple[str, ...] = ()  # third-party headers the edited files include (named, not followed)

    DOCUMENT = "impact"

    def counts(self) -> dict[str, int]:
        """Units by kind; capability copies also by capability (`capability AVX2`)."""
        out: Counter[str] = Counter(u.kind for u in self.units)
        out.update(f"capability {u.capability}" for u in self.units if u.capability)
        return dict(out)

    def libraries(self) -> dict[str, int]:
        return dict(Counter(u.library for u in self.units).most_common())

    @property
    def maybe(self) -> int:
        return sum(1 for u in self.units if u.maybe)

    def to_json(self) -> dict[str, Any]:
        """The impact/1 document (kernelmap.answers describes it)."""
        origins = OriginTable()
        edited = [e.to_json(origins) for e in self.edited]
        advice = [a.to_json(origins) for a in self.advice]
        return document(
            self.DOCUMENT, IMPACT_VERSION, query=self.query, target=self.target, device=self.device, tree=origins.key(self.tree),
            notes=list(self.notes), edited=edited, counts=self.counts(), libraries=self.libraries(), maybe=self.maybe,
            estimate=self.estimate.to_json(), advice=advice, operators=list(self.operators), third_party=list(self.third_party),
            units=[u.to_json() for u in self.units], origins=origins.to_json(),
        )

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ImpactAnswer:
        d = check_document(d, cls.DOCUMENT, IMPACT_VERSION)
        origins = OriginTable.from_json(d.get("origins"))
        tree = origins.get(d["tree"])
        assert tree is not None, "an impact answer names its tree"
        return cls(
            d["query"], d["target"], d["device"], tree,
            tuple(EditedFile.from_json(e, origins) for e in d.get("edited") or ()),
            tuple(RebuiltUnit.from_json(u) for u in d.get("units") or ()),
            tuple(d.get("operators") or ()),
            Estimate.from_json(d["estimate"]),
            tuple(Advice.from_json(a, origins) for a in d.get("advice") or ()),
            tuple(d.get("notes") or ()),
            tuple(d.get("third_party") or ()),
        )
