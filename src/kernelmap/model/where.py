"""The dispatcher's path of a call and the `where` answer.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kernelmap.model.documents import Answer, check_document, document
from kernelmap.model.locations import Location, location_from_json, location_json, Origin, OriginTable
from kernelmap.model.operators import Kernel, Op


@dataclass(frozen=True)
class DispatchStep:
    key: str
    kernel: Kernel | None
    # "falls through" (a fallthrough kernel: the next key is tried), "redispatches"
    # (does its part, then calls the keys below), "answers" (the call ends here,
    # a composite kernel decomposing into further calls), "from yaml" (a backend
    # this build lacks: answered from native_functions.yaml).
    action: str
    tag: str = ""


@dataclass(frozen=True)
class DispatchPath:
    """The dispatch keys one call passes through, and what each does (live)."""

    op: str
    device: str
    dtype: str
    requires_grad: bool
    autocast: bool
    inference_mode: bool
    keys: tuple[str, ...]  # the call's dispatch key set, highest priority first
    steps: tuple[DispatchStep, ...]
    live: bool  # False when this build lacks the device's backend
    note: str | None = None

    def __iter__(self):
        return iter(self.steps)

    def to_json(self, origins: OriginTable | None = None) -> dict[str, Any]:
        return {
            "op": self.op,
            "device": self.device,
            "dtype": self.dtype,
            "requires_grad": self.requires_grad,
            "autocast": self.autocast,
            "inference_mode": self.inference_mode,
            "live": self.live,
            "note": self.note,
            "keys": list(self.keys),
            "steps": [
                {"key": s.key, "action": s.action, "tag": s.tag, "kernel": s.kernel.to_json(origins) if s.kernel else None} for s in self.steps
            ],
        }

    @staticmethod
    def from_json(d: Mapping[str, Any], origins: OriginTable | None = None) -> DispatchPath:
        steps = tuple(
            DispatchStep(s["key"], Kernel.from_json(s["kernel"], origins) if s.get("kernel") else None, s["action"], s.get("tag", ""))
            for s in d.get("steps") or ()
        )
        return DispatchPath(
            d["op"], d["device"], d["dtype"], d["requires_grad"], d["autocast"], d["inference_mode"], tuple(d["keys"]), steps, d["live"], d.get("note")
        )


@dataclass(frozen=True)
class LiveAnswer:
    """What the live dispatcher of the installed torch says about one operator."""

    registrations: tuple[Kernel, ...]  # active registrations, alias keys included
    schema_location: Location | None
    path: DispatchPath


@dataclass(frozen=True)
class SourceStep:
    """One landmark of the operator's code on a device, from an indexed source tree."""

    role: str  # "entry kernel", "stub kernel", "leaf"
    name: str
    location: Location | None
    detail: str = ""  # the edge's condition, the vendor library


@dataclass(frozen=True)
class FunctionRef:
    """A Python function (or a name bound to one) at its line."""

    name: str
    location: Location

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "path": self.location.path, "line": self.location.line}


@dataclass(frozen=True)
class NativeOverride:
    """One DSL override of one operator at one dispatch key (`torch._native`),
    read by kernelmap.dispatch.native."""

    op: str  # "aten::bmm", "aten::scatter_add.out"
    dispatch_key: str
    dsl: str  # "triton", "cutedsl", "native" (the registry's DSL name)
    condition: FunctionRef
    condition_text: str | None  # the condition in words, where it is a simple expression
    implementation: FunctionRef
    registered_at: Location  # the register_op_override call
    kernels: tuple[FunctionRef, ...] = ()  # @triton.jit / @cute.kernel functions of the op's package
    registered: bool | None = None  # in this process's registry; None: not asked (static)
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def aten_runs_when(self) -> str:
        if self.registered is False:
            return "always in this process: the override is not registered here (its DSL runtime or device is unavailable)"
        return f"when {self.condition.name}(...) returns False for the call, and on any dispatch key but {self.dispatch_key}"

    def to_json(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "dispatch_key": self.dispatch_key,
            "dsl": self.dsl,
            "condition": self.condition.to_json() | {"text": self.condition_text},
            "implementation": self.implementation.to_json(),
            "registered_at": {"path": self.registered_at.path, "line": self.registered_at.line},
            "kernels": [k.to_json() for k in self.kernels],
            "registered": self.registered,
            "aten_runs_when": self.aten_runs_when,
            "notes": list(self.notes),
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any], origin: Origin | None = None) -> NativeOverride:
        def ref(d: dict[str, Any]) -> FunctionRef:
            return FunctionRef(d["name"], Location(d["path"], d["line"], origin=origin))

        reg = doc["registered_at"]
        return cls(
            doc["op"],
            doc["dispatch_key"],
            doc["dsl"],
            ref(doc["condition"]),
            doc["condition"].get("text"),
            ref(doc["implementation"]),
            Location(reg["path"], reg["line"], origin=origin),
            tuple(ref(k) for k in doc.get("kernels", ())),
            doc.get("registered"),
            tuple(doc.get("notes", ())),
        )


WHERE_VERSION = 2


@dataclass(frozen=True)
class WhereAnswer(Answer):
    """The operator behind a name: its yaml entry and kernels, what the live
    dispatcher holds and runs, and (with a tree) where the code is."""

    query: str
    ops: tuple[Op, ...]  # every operator the name reaches, most likely first
    torch_version: str
    torch_commit: str | None
    delegate: Op | None = None  # the structured delegate of ops[0], when it has one
    live: LiveAnswer | None = None  # None for a static answer
    notes: tuple[str, ...] = ()
    source: tuple[SourceStep, ...] = ()  # with an indexed tree: entry kernel, stub kernel, leaves
    overrides: tuple[NativeOverride, ...] = ()  # DSL overrides registered over the operator (torch._native)

    DOCUMENT = "where"

    @property
    def op(self) -> Op:
        return self.ops[0]

    def locations(self) -> Iterable[Location | None]:
        """Every location the answer shows (Note [versions on locations])."""
        for op in (*self.ops, *((self.delegate,) if self.delegate else ())):
            yield op.location
            yield from (k.location for k in op.dispatch)
            if op.autograd is not None:
                yield op.autograd.location
        if self.live is not None:
            yield self.live.schema_location
            yield from (k.location for k in self.live.registrations)
            yield from (s.kernel.location for s in self.live.path.steps if s.kernel is not None)
        yield from (s.location for s in self.source)
        for o in self.overrides:
            for site in (getattr(o, "condition", None), getattr(o, "implementation", None), *getattr(o, "kernels", ())):
                yield getattr(site, "location", None)

    def to_json(self) -> dict[str, Any]:
        origins = OriginTable()
        live = None
        if self.live is not None:
            live = {
                "schema_registered_at": location_json(self.live.schema_location, origins),
                "registrations": [k.to_json(origins) for k in self.live.registrations],
                "dispatch_path": self.live.path.to_json(origins),
            }
        body = {
            "query": self.query,
            "torch": {"version": self.torch_version, "commit": self.torch_commit},
            "notes": list(self.notes),
            "operator": self.op.to_json(origins),
            "also": [op.to_json(origins) for op in self.ops[1:]],
            "structured_delegate": self.delegate.to_json(origins) if self.delegate else None,
            "live": live,
            "source": [{"role": s.role, "name": s.name, "location": location_json(s.location, origins), "detail": s.detail} for s in self.source],
            "overrides": [o.to_json() for o in self.overrides],
        }
        return document(self.DOCUMENT, WHERE_VERSION, origins=origins.to_json(), **body)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> WhereAnswer:
        d = check_document(d, cls.DOCUMENT, WHERE_VERSION)
        origins = OriginTable.from_json(d.get("origins"))
        ops = (Op.from_json(d["operator"], origins), *(Op.from_json(o, origins) for o in d.get("also") or ()))
        live = None
        if d.get("live"):
            lv = d["live"]
            live = LiveAnswer(
                tuple(Kernel.from_json(k, origins) for k in lv.get("registrations") or ()),
                location_from_json(lv.get("schema_registered_at"), origins),
                DispatchPath.from_json(lv["dispatch_path"], origins),
            )
        source = tuple(SourceStep(s["role"], s["name"], location_from_json(s.get("location"), origins), s.get("detail", "")) for s in d.get("source") or ())
        overrides = tuple(NativeOverride.from_json(o) for o in d.get("overrides") or ())
        return cls(
            d["query"],
            ops,
            d["torch"]["version"],
            d["torch"].get("commit"),
            Op.from_json(d["structured_delegate"], origins) if d.get("structured_delegate") else None,
            live,
            tuple(d.get("notes") or ()),
            source,
            overrides,
        )
