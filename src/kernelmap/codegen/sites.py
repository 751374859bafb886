"""The pieces of generated code that one operator passes through, as frozen
types: the Python binding, the `at::_ops` entry points, each generated wrapper
registered to a dispatch key, and the ufunc kernels. Each carries a
`Location` as a build directory names it (`build/aten/src/ATen/RegisterCPU_0.cpp`,
`torch/csrc/autograd/generated/python_torch_functions_1.cpp`) and the text it
points at, so renderers and the call graph need not reopen files.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from kernelmap.model import Answer, Location, OperatorName, Origin, OriginTable, check_document, document


class Layer(str, enum.Enum):
    """Which part of a call a generated piece belongs to (`kernelmap gen --layer`)."""

    BINDING = "binding"  # THPVariable_<name>: Python argument parsing -> at:: call
    OPS = "ops"  # at::_ops::<op>::call / ::redispatch: the entry into the dispatcher
    AUTOGRAD = "autograd"  # VariableType, TraceType, ADInplaceOrView wrappers; the backward node
    REGISTER = "register"  # Register<Key>_N.cpp wrappers -> at::native kernels; structured classes
    UFUNC = "ufunc"  # UfuncCPU_<op>.cpp, UfuncCPUKernel_<op>.cpp, UfuncCUDA_<op>.cu


@dataclass(frozen=True)
class Excerpt:
    """Lines `location.line`..`location.end_line` of one generated file, and their text."""

    location: Location
    text: str

    def __post_init__(self) -> None:
        if self.location.end_line is None:
            raise ValueError(f"an excerpt spans known lines: {self.location} has no end_line")
        if self.text.count("\n") + 1 != self.location.end_line - self.location.line + 1:
            raise ValueError(f"an excerpt's text has one line per line of its location: {self.location}")

    def to_json(self, origins: OriginTable | None = None) -> dict[str, Any]:
        return {**self.location.to_json(origins), "text": self.text}

    @staticmethod
    def from_json(d: dict[str, Any], origins: OriginTable | None = None) -> Excerpt:
        return Excerpt(Location.from_json(d, origins), d["text"])


@dataclass(frozen=True)
class Binding:
    """A generated Python binding and the dispatch case in it that reaches one operator."""

    function: str  # THPVariable_add
    python_names: tuple[str, ...]  # torch.add; torch.Tensor.add, torch.Tensor.__add__
    signatures: tuple[str, ...]  # every PythonArgParser signature string of the function, as written
    signature: str | None  # the one whose case calls this operator
    definition: Excerpt  # the whole function
    case: Excerpt | None  # from `// aten::add.out(...)` to the call
    calls: tuple[str, ...]  # what the case calls: at::conv2d_symint, at::Tensor::add, at::add_out
    method_defs: tuple[Excerpt, ...]  # the method-table entries that install the function

    def to_json(self, origins: OriginTable | None = None) -> dict[str, Any]:
        return {
            "function": self.function,
            "python_names": list(self.python_names),
            "signatures": list(self.signatures),
            "signature": self.signature,
            "definition": self.definition.to_json(origins),
            "case": self.case.to_json(origins) if self.case else None,
            "calls": list(self.calls),
            "method_defs": [m.to_json(origins) for m in self.method_defs],
        }

    @staticmethod
    def from_json(d: dict[str, Any], origins: OriginTable | None = None) -> Binding:
        return Binding(
            d["function"], tuple(d["python_names"]), tuple(d["signatures"]), d.get("signature"), Excerpt.from_json(d["definition"], origins),
            Excerpt.from_json(d["case"], origins) if d.get("case") else None, tuple(d.get("calls") or ()),
            tuple(Excerpt.from_json(m, origins) for m in d.get("method_defs") or ()),
        )


@dataclass(frozen=True)
class OpsFunction:
    """`at::_ops::<op>::call` (enter the dispatcher) or `::redispatch` (re-enter below a key)."""

    symbol: str  # at::_ops::conv2d::call
    definition: Excerpt

    def to_json(self, origins: OriginTable | None = None) -> dict[str, Any]:
        return {"symbol": self.symbol, "definition": self.definition.to_json(origins)}

    @staticmethod
    def from_json(d: dict[str, Any], origins: OriginTable | None = None) -> OpsFunction:
        return OpsFunction(d["symbol"], Excerpt.from_json(d["definition"], origins))


@dataclass(frozen=True)
class StructuredClass:
    """A structured kernel class a wrapper instantiates (`structured_ufunc_add_CPU_functional`)."""

    name: str
    base: str | None  # at::native::structured_ufunc_add_CPU: the class with meta()/impl()
    definition: Excerpt

    def to_json(self, origins: OriginTable | None = None) -> dict[str, Any]:
        return {"name": self.name, "base": self.base, "definition": self.definition.to_json(origins)}

    @staticmethod
    def from_json(d: dict[str, Any], origins: OriginTable | None = None) -> StructuredClass:
        return StructuredClass(d["name"], d.get("base"), Excerpt.from_json(d["definition"], origins))


@dataclass(frozen=True)
class Registration:
    """One `m.impl` of the operator in a generated file, and the wrapper it registers."""

    key: str  # dispatch key of the TORCH_LIBRARY_IMPL block: CPU, Autograd, Tracer, ...
    layer: Layer
    symbol: str  # as the file names it: wrapper_CPU_add_Tensor, VariableType::add_Tensor, "fallthrough"
    block: Location  # the TORCH_LIBRARY_IMPL line, which is what the live dispatcher reports
    impl: Excerpt  # the m.impl(...) statement
    definition: Excerpt | None  # the wrapper function; None for a fallthrough
    calls: tuple[str, ...] = ()  # at::native::conv2d_symint, at::redispatch::add, ...
    backward_node: str | None = None  # VariableType: the grad_fn node it creates (AddBackward0)
    structured: tuple[StructuredClass, ...] = ()

    def to_json(self, origins: OriginTable | None = None) -> dict[str, Any]:
        return {
            "key": self.key,
            "layer": self.layer.value,
            "symbol": self.symbol,
            "block": self.block.to_json(origins),
            "impl": self.impl.to_json(origins),
            "definition": self.definition.to_json(origins) if self.definition else None,
            "calls": list(self.calls),
            "backward_node": self.backward_node,
            "structured": [s.to_json(origins) for s in self.structured],
        }

    @staticmethod
    def from_json(d: dict[str, Any], origins: OriginTable | None = None) -> Registration:
        return Registration(
            d["key"], Layer(d["layer"]), d["symbol"], Location.from_json(d["block"], origins), Excerpt.from_json(d["impl"], origins),
            Excerpt.from_json(d["definition"], origins) if d.get("definition") else None, tuple(d.get("calls") or ()), d.get("backward_node"),
            tuple(StructuredClass.from_json(c, origins) for c in d.get("structured") or ()),
        )


@dataclass(frozen=True)
class UfuncKernel:
    """A definition in a ufunc file generated from `ufunc_inner_loop`."""

    key: str  # CPU | CUDA
    name: str  # add_kernel, structured_ufunc_add_CPU::impl, REGISTER_DISPATCH(add_stub, &add_kernel)
    definition: Excerpt

    def to_json(self, origins: OriginTable | None = None) -> dict[str, Any]:
        return {"key": self.key, "name": self.name, "definition": self.definition.to_json(origins)}

    @staticmethod
    def from_json(d: dict[str, Any], origins: OriginTable | None = None) -> UfuncKernel:
        return UfuncKernel(d["key"], d["name"], Excerpt.from_json(d["definition"], origins))


GEN_VERSION = 2


@dataclass(frozen=True)
class GeneratedCode(Answer):
    """Everything generated for one operator, per layer."""

    op: OperatorName
    origin: Origin  # kind GENERATED: which torch version or tree the files were generated from
    schema: Excerpt | None  # m.def in RegisterSchema.cpp
    bindings: tuple[Binding, ...] = ()
    ops: tuple[OpsFunction, ...] = ()
    registrations: tuple[Registration, ...] = ()
    backward: Excerpt | None = None  # <Node>::apply in Functions.cpp
    ufunc: tuple[UfuncKernel, ...] = ()
    notes: tuple[str, ...] = ()  # what is absent and why
    layers: tuple[Layer, ...] = tuple(Layer)  # the layers asked for (the pieces above hold only those)

    def registration(self, key: str) -> Registration | None:
        return next((r for r in self.registrations if r.key == key), None)

    DOCUMENT = "gen"

    def to_json(self, origins: OriginTable | None = None) -> dict[str, Any]:
        """The gen/2 document (kernelmap.answers describes it)."""
        origins = OriginTable()
        body = {
            "op": str(self.op),
            "origin": origins.key(self.origin),
            "schema": self.schema.to_json(origins) if self.schema else None,
            "bindings": [b.to_json(origins) for b in self.bindings],
            "ops": [o.to_json(origins) for o in self.ops],
            "registrations": [r.to_json(origins) for r in self.registrations],
            "backward": self.backward.to_json(origins) if self.backward else None,
            "ufunc": [u.to_json(origins) for u in self.ufunc],
            "notes": list(self.notes),
            "layers": [layer.value for layer in self.layers],
        }
        return document(self.DOCUMENT, GEN_VERSION, origins=origins.to_json(), **body)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> GeneratedCode:
        d = check_document(d, cls.DOCUMENT, GEN_VERSION)
        origins = OriginTable.from_json(d.get("origins"))
        origin = origins.get(d["origin"])
        assert origin is not None
        return cls(
            OperatorName.parse(d["op"]), origin, Excerpt.from_json(d["schema"], origins) if d.get("schema") else None,
            tuple(Binding.from_json(b, origins) for b in d.get("bindings") or ()),
            tuple(OpsFunction.from_json(o, origins) for o in d.get("ops") or ()),
            tuple(Registration.from_json(r, origins) for r in d.get("registrations") or ()),
            Excerpt.from_json(d["backward"], origins) if d.get("backward") else None,
            tuple(UfuncKernel.from_json(u, origins) for u in d.get("ufunc") or ()),
            tuple(d.get("notes") or ()),
            tuple(Layer(x) for x in d.get("layers") or ()),
        )
