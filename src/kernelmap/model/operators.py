"""Operators as the catalog reads them from native_functions.yaml: names,
kinds, kernels per dispatch key, autograd formulas.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kernelmap.model.documents import DocumentError
from kernelmap.model.locations import Location, location_from_json, location_json, OriginTable


_OP_NAME = re.compile(r"(?:(?P<ns>[A-Za-z_][A-Za-z0-9_]*)::)?(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:\.(?P<overload>[A-Za-z_][A-Za-z0-9_]*))?")


@dataclass(frozen=True, order=True)
class OperatorName:
    """`aten::add.Tensor`: namespace, base name and overload ("" for the default)."""

    name: str
    overload: str = ""
    namespace: str = "aten"

    @staticmethod
    def parse(text: str) -> OperatorName:
        m = _OP_NAME.fullmatch(text.strip())
        if m is None:
            raise ValueError(f"not an operator name: {text!r} (expected [ns::]name[.overload])")
        return OperatorName(m["name"], m["overload"] or "", m["ns"] or "aten")

    def __str__(self) -> str:
        return f"{self.namespace}::{self.unqualified}"

    @property
    def unqualified(self) -> str:
        """The name as native_functions.yaml writes it: `add.Tensor`."""
        return f"{self.name}.{self.overload}" if self.overload else self.name


class OpKind(str, enum.Enum):
    """How an operator gets its kernels (Note [operator kinds] in catalog)."""

    COMPOSITE_IMPLICIT = "composite implicit"
    COMPOSITE_EXPLICIT = "composite explicit"
    COMPOSITE_EXPLICIT_NON_FUNCTIONAL = "composite explicit non-functional"
    STRUCTURED = "structured"  # a functional/inplace op whose kernel is its structured_delegate's
    STRUCTURED_OUT = "structured out"  # the out= op that carries the structured kernel
    UFUNC = "ufunc"  # a structured out= op whose CPU/CUDA kernels are generated from ufunc_inner_loop
    DISPATCH = "dispatch"  # plain per-backend kernels named in `dispatch:`
    NONE = "no kernel"  # declared without any kernel (e.g. only registered from C++ elsewhere)


@dataclass(frozen=True)
class Kernel:
    """The kernel one dispatch key runs for an operator."""

    key: str  # dispatch key or alias key: "CPU", "CompositeImplicitAutograd"
    symbol: str  # "at::native::conv2d_symint", or a Python qualname for Python kernels
    location: Location | None = None
    # "native" (yaml dispatch entry), "cpp" (a C++ registration the dispatcher
    # reports), "python" (registered from Python), "fallthrough", "alias" (the key
    # runs the kernel of an alias key), "fallback" (a backend fallback).
    kind: str = "native"
    structured: bool = False

    def to_json(self, origins: OriginTable | None = None) -> dict[str, Any]:
        return {"key": self.key, "symbol": self.symbol, "kind": self.kind, "structured": self.structured, "location": location_json(self.location, origins)}

    @staticmethod
    def from_json(d: Mapping[str, Any], origins: OriginTable | None = None) -> Kernel:
        return Kernel(d["key"], d["symbol"], location_from_json(d.get("location"), origins), d.get("kind", "native"), bool(d.get("structured")))


@dataclass(frozen=True)
class DerivativeFormula:
    inputs: tuple[str, ...]  # "self", "other", or several ("self, other")
    formula: str


@dataclass(frozen=True)
class Autograd:
    """An operator's derivatives.yaml entry and the backward node it generates."""

    backward_node: str | None  # "ConvolutionBackward0"; None when not differentiable
    location: Location | None
    formulas: tuple[DerivativeFormula, ...] = ()
    signature: str = ""  # the `- name:` line it came from

    def to_json(self, origins: OriginTable | None = None) -> dict[str, Any]:
        return {
            "backward_node": self.backward_node,
            "location": location_json(self.location, origins),
            "signature": self.signature,
            "formulas": [{"inputs": list(f.inputs), "formula": f.formula} for f in self.formulas],
        }

    @staticmethod
    def from_json(d: Mapping[str, Any], origins: OriginTable | None = None) -> Autograd:
        formulas = tuple(DerivativeFormula(tuple(f["inputs"]), f["formula"]) for f in d.get("formulas") or ())
        return Autograd(d.get("backward_node"), location_from_json(d.get("location"), origins), formulas, d.get("signature", ""))


@dataclass(frozen=True)
class Op:
    """One entry of native_functions.yaml, as torchgen reads it."""

    name: OperatorName
    schema: str  # "add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor"
    location: Location  # the `- func:` line
    kind: OpKind
    variants: tuple[str, ...] = ("function",)
    python_module: str | None = None  # "nn", "linalg", "special", "fft", ...
    tags: tuple[str, ...] = ()
    dispatch: tuple[Kernel, ...] = ()  # from the yaml, key order as written
    structured_delegate: str | None = None  # "add.out"
    ufunc_inner_loop: tuple[tuple[str, str], ...] = ()  # (key, "add (AllAndComplex, BFloat16, Half, ComplexHalf)")
    autograd: Autograd | None = None
    python_entry_points: tuple[str, ...] = ()  # "torch.add", "torch.Tensor.add"
    is_view: bool = False
    is_inplace: bool = False
    is_out: bool = False
    manual_cpp_binding: bool = False

    def __post_init__(self) -> None:
        if self.kind is OpKind.STRUCTURED and not self.structured_delegate:
            raise ValueError(f"{self.name}: a structured (delegating) operator names its structured_delegate")

    def kernel_for(self, key: str) -> Kernel | None:
        for k in self.dispatch:
            if k.key == key:
                return k
        return None

    def to_json(self, origins: OriginTable | None = None) -> dict[str, Any]:
        return {
            "name": str(self.name),
            "schema": self.schema,
            "kind": self.kind.value,
            "location": location_json(self.location, origins),
            "variants": list(self.variants),
            "python_module": self.python_module,
            "tags": list(self.tags),
            "is_view": self.is_view,
            "is_inplace": self.is_inplace,
            "is_out": self.is_out,
            "manual_cpp_binding": self.manual_cpp_binding,
            "structured_delegate": self.structured_delegate,
            "ufunc_inner_loop": [list(pair) for pair in self.ufunc_inner_loop],
            "dispatch": [k.to_json(origins) for k in self.dispatch],
            "python_entry_points": list(self.python_entry_points),
            "autograd": self.autograd.to_json(origins) if self.autograd else None,
        }

    @staticmethod
    def from_json(d: Mapping[str, Any], origins: OriginTable | None = None) -> Op:
        location = location_from_json(d["location"], origins)
        if location is None:
            raise DocumentError(f"operator {str(d.get('name'))[:100]} has no location: an operator has its yaml line")
        return Op(
            OperatorName.parse(d["name"]),
            d["schema"],
            location,
            OpKind(d["kind"]),
            tuple(d.get("variants") or ()),
            d.get("python_module"),
            tuple(d.get("tags") or ()),
            tuple(Kernel.from_json(k, origins) for k in d.get("dispatch") or ()),
            d.get("structured_delegate"),
            tuple((a, b) for a, b in d.get("ufunc_inner_loop") or ()),
            Autograd.from_json(d["autograd"], origins) if d.get("autograd") else None,
            tuple(d.get("python_entry_points") or ()),
            bool(d.get("is_view")),
            bool(d.get("is_inplace")),
            bool(d.get("is_out")),
            bool(d.get("manual_cpp_binding")),
        )
