"""The `compile/1` answer: frozen dataclasses for what Inductor generated in
one run, and their JSON form (`to_json` / `from_json` round-trip)."""

from __future__ import annotations

from kernelmap.model import Answer

from dataclasses import dataclass, field
from typing import Any

from kernelmap.errors import BadInput

SCHEMA = "compile/1"


@dataclass(frozen=True)
class FileLine:
    """A line of a file outside any PyTorch tree: the user's code, Inductor's
    output, the installed torch's decompositions (absolute paths)."""

    path: str
    line: int

    def __post_init__(self) -> None:
        if self.line < 1:
            raise ValueError(f"lines count from 1; got {self.line} for {self.path}")

    def __str__(self) -> str:
        return f"{self.path}:{self.line}"

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "line": self.line}

    @classmethod
    def from_json(cls, d: dict[str, Any] | None) -> FileLine | None:
        return None if d is None else cls(d["path"], d["line"])


@dataclass(frozen=True)
class Decomposition:
    """The function that decomposed an aten op into the ones Inductor fused."""

    op: str  # the op decomposed: "aten::_native_batch_norm_legit_no_training"
    function: str  # "torch._decomp.decompositions._native_batch_norm_legit_no_training"
    location: FileLine

    def to_json(self) -> dict[str, Any]:
        return {"op": self.op, "function": self.function, "location": self.location.to_json()}

    @classmethod
    def from_json(cls, d: dict[str, Any] | None) -> Decomposition | None:
        return None if d is None else cls(d["op"], d["function"], FileLine.from_json(d["location"]))  # type: ignore[arg-type]


@dataclass(frozen=True)
class FusedOp:
    """One post-grad graph node a kernel computes."""

    node: str  # the node's name in the post-grad graph ("mul_1")
    op: str  # "aten::mul.Tensor"
    original: str | None  # the aten op the user's code called, when a decomposition produced this one
    user: FileLine | None  # the user's line
    code: str | None  # that line's text, as Inductor recorded it
    decomposition: Decomposition | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "op": self.op,
            "original": self.original,
            "user": self.user.to_json() if self.user else None,
            "code": self.code,
            "decomposition": self.decomposition.to_json() if self.decomposition else None,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> FusedOp:
        return cls(d["node"], d["op"], d.get("original"), FileLine.from_json(d.get("user")), d.get("code"), Decomposition.from_json(d.get("decomposition")))


@dataclass(frozen=True)
class GeneratedKernel:
    """A kernel Inductor generated (`generated`), or an ATen kernel it calls
    instead (extern kernel / fallback)."""

    name: str  # "cpp_fused_relu_sum_0", "extern_kernels.convolution"
    generated: bool
    definition: FileLine | None  # the kernel's definition in the output code
    call: FileLine | None  # where the output code calls it
    ops: tuple[FusedOp, ...]
    # total over the run, with the profiler on; for an ATen kernel, its aten
    # op's total in the whole run (compiled code or not)
    time_us: float | None = None
    calls: int = 0

    @property
    def aten_ops(self) -> tuple[str, ...]:
        """The distinct aten ops, in graph order."""
        return tuple(dict.fromkeys(o.op for o in self.ops))

    @property
    def user_lines(self) -> tuple[FileLine, ...]:
        return tuple(dict.fromkeys(o.user for o in self.ops if o.user))

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "generated": self.generated,
            "definition": self.definition.to_json() if self.definition else None,
            "call": self.call.to_json() if self.call else None,
            "ops": [o.to_json() for o in self.ops],
            "time_us": self.time_us,
            "calls": self.calls,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> GeneratedKernel:
        return cls(
            d["name"],
            d["generated"],
            FileLine.from_json(d.get("definition")),
            FileLine.from_json(d.get("call")),
            tuple(FusedOp.from_json(o) for o in d["ops"]),
            d.get("time_us"),
            d.get("calls", 0),
        )


@dataclass(frozen=True)
class Graph:
    """One graph Inductor compiled, with its output code."""

    name: str  # Inductor's debug folder name: "model__0_inference_0.0"
    output_code: str
    kernels: tuple[GeneratedKernel, ...]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "output_code": self.output_code, "kernels": [k.to_json() for k in self.kernels]}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Graph:
        return cls(d["name"], d["output_code"], tuple(GeneratedKernel.from_json(k) for k in d["kernels"]))


@dataclass(frozen=True)
class GraphBreak:
    reason: str  # the first line of Dynamo's reason
    user: FileLine
    detail: str = ""  # Dynamo's full text

    def to_json(self) -> dict[str, Any]:
        return {"reason": self.reason, "user": self.user.to_json(), "detail": self.detail}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> GraphBreak:
        return cls(d["reason"], FileLine.from_json(d["user"]), d.get("detail", ""))  # type: ignore[arg-type]


@dataclass(frozen=True)
class CompileAnswer(Answer):
    """The answer of `kernelmap compile`: each graph's generated kernels mapped to ops, lines and time."""

    DOCUMENT = "compile"

    workdir: str  # the run's Inductor output folder (debug trace, output code)
    torch_version: str
    graphs: tuple[Graph, ...]
    graph_breaks: tuple[GraphBreak, ...] = ()
    profiled: bool = False
    error: str | None = None  # what the user's code raised, as "Type: message"
    exception: BaseException | None = field(default=None, compare=False, repr=False)  # the live exception, not serialised
    kept: bool = True  # whether `workdir` was kept (--output-dir); a temporary one is removed, its paths name files gone
    notes: tuple[str, ...] = ()  # why no graph was compiled, when none was

    @property
    def kernels(self) -> tuple[GeneratedKernel, ...]:
        return tuple(k for g in self.graphs for k in g.kernels)

    def group_times(self) -> dict[tuple[str, ...], float]:
        """Time per fused op group (the set of aten ops of a generated kernel),
        summed over the kernels that fuse the same group."""
        out: dict[tuple[str, ...], float] = {}
        for k in self.kernels:
            if k.generated and k.time_us is not None:
                out[k.aten_ops] = out.get(k.aten_ops, 0.0) + k.time_us
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "kernelmap": SCHEMA,
            "workdir": self.workdir,
            "torch_version": self.torch_version,
            "graphs": [g.to_json() for g in self.graphs],
            "graph_breaks": [b.to_json() for b in self.graph_breaks],
            "profiled": self.profiled,
            "error": self.error,
            "kept": self.kept,
            "notes": list(self.notes),
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> CompileAnswer:
        if doc.get("kernelmap") != SCHEMA:
            raise BadInput(f"not a {SCHEMA} document (kernelmap: {doc.get('kernelmap')!r})")
        return cls(
            doc["workdir"],
            doc["torch_version"],
            tuple(Graph.from_json(g) for g in doc["graphs"]),
            tuple(GraphBreak.from_json(b) for b in doc.get("graph_breaks", ())),
            doc.get("profiled", False),
            doc.get("error"),
            kept=doc.get("kept", True),
            notes=tuple(doc.get("notes", ())),
        )
