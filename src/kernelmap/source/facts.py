"""The facts the extractor gives for one file (plain tuples, cheap to send
between processes: `store` turns them into rows) and the operator names it
classifies calls by, read from native_functions.yaml."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple


# Note [inline namespaces]
# `inline namespace CPU_CAPABILITY { void exp_kernel(...) }` in at::native (each
# cpu/ kernel file, built once per capability) declares members of at::native
# too: `vml::vexp` written in at::native::CPU_CAPABILITY means
# at::vml::CPU_CAPABILITY::vexp. A definition's name keeps its inline
# namespaces; its lookup name, which calls are matched against, drops them,
# as it drops anonymous namespaces.
class InlineNamespace(str):
    """The name of an inline namespace, as a scope's payload."""


class Definition(NamedTuple):
    name: str  # "at::native::(anonymous namespace)::helper", "at::native::structured_mul_out::impl"
    lookup: str  # the name without anonymous and inline namespaces: "at::native::helper"
    short: str  # the last component: "helper", "impl"
    kind: str  # function | method | structured_impl | structured_meta | global_kernel
    line: int
    end_line: int
    condition: str | None  # enclosing preprocessor conditions joined by " && "
    op: str | None  # structured kernels: the op as the macro names it, "add.Tensor", "mul_out"


class Call(NamedTuple):
    definition: int  # index into FileFacts.definitions; -1 at file scope
    callee: str  # as written, without template arguments: "at::cudnn_convolution", ".add"
    short: str  # the called name: "cudnn_convolution", "add"
    kind: str  # dispatcher | stub | direct | launch | vendor | argument (Note [stubs passed on])
    library: str | None  # vendor calls: cudnn, cublas, onednn, ...
    op: str | None  # dispatcher calls: the operator's base name (or name_overload for _ops)
    line: int
    condition: str | None  # innermost `case X` or `if (...)` in the definition
    preproc: str | None
    outer: str | None = None  # the `case`/`if` conditions around `condition` in the definition, outermost first, a line each


class Registration(NamedTuple):
    definition: int  # enclosing definition, -1 at file scope
    kind: str  # register_dispatch | library_impl | library_def | at_dispatch
    name: str  # stub name, operator name, or the dispatch site's name string
    target: str | None  # kernel function, or dtype groups for at_dispatch
    key: str | None  # device (stubs), dispatch key (library), macro (at_dispatch)
    detail: str | None  # CPU capability (stubs), namespace (library)
    line: int
    preproc: str | None


class StubDecl(NamedTuple):
    kind: str  # declare | define
    name: str
    detail: str | None  # DECLARE_DISPATCH's function type
    line: int
    preproc: str | None


class FileFacts(NamedTuple):
    path: str  # repository-relative
    size: int
    sha1: str
    errors: int  # ERROR nodes: regions the grammar could not parse
    skipped: str | None  # why the file was not parsed, if it was not
    definitions: tuple[Definition, ...]
    calls: tuple[Call, ...]
    registrations: tuple[Registration, ...]
    stubs: tuple[StubDecl, ...]
    # Read by kernelmap.source.includes (the build adds them), not by the extractor:
    includes: tuple = ()  # includes.Include
    defines: tuple = ()  # includes.Define


# How ATen's C++ API spells an operator's function besides its name: `add_out`, `conv2d_symint`.
FUNCTION_SUFFIXES = ("_symint", "_outf", "_out", "_symint_out", "_symint_outf")


@dataclass(frozen=True)
class OperatorNames:
    """Operator names of a tree's native_functions.yaml, for telling
    dispatcher calls from direct ones."""

    functions: frozenset[str]  # base names: "add", "add_", "cudnn_convolution"
    methods: frozenset[str]  # base names with a Tensor method variant

    def is_function(self, name: str) -> str | None:
        """The op base name behind a C++ API function name (`add_out`, `conv2d_symint`)."""
        if name in self.functions:
            return name
        for suffix in FUNCTION_SUFFIXES:
            if name.endswith(suffix) and name[: -len(suffix)] in self.functions:
                return name[: -len(suffix)]
        return None


_YAML_FUNC = re.compile(r"^- func: ([A-Za-z0-9_]+)(?:\.[A-Za-z0-9_]+)?\(", re.M)
_YAML_VARIANTS = re.compile(r"^\s+variants:\s*(.*)$")

# TensorBase accessors are inline methods, not operators, though some share an op's name.
_NOT_DISPATCHED_METHODS = frozenset(
    "size sizes sym_size sym_sizes stride strides sym_stride sym_strides dim numel sym_numel data_ptr "
    "const_data_ptr mutable_data_ptr scalar_type dtype device options layout is_contiguous storage_offset "
    "defined is_cuda is_cpu is_mps is_sparse is_mkldnn is_quantized is_complex is_floating_point "
    "item element_size nbytes itemsize".split()
)


# Note [calls kept]: member calls never recorded.
_SKIPPED_METHODS = _NOT_DISPATCHED_METHODS | frozenset(
    "end begin cbegin cend rbegin rend get value value_or has_value push_back emplace_back emplace at data front back "
    "reserve resize clear insert erase find count empty c_str str append def release reset".split()
)
_SKIPPED_FUNCTIONS = frozenset(("static_cast", "reinterpret_cast", "const_cast", "dynamic_cast", "c10::irange", "irange"))


def read_operator_names(yaml_path: Path) -> OperatorNames:
    """Operator base names and method variants from native_functions.yaml, by
    pattern (the file's entry shape is stable; torchgen is not needed here)."""
    try:
        text = yaml_path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return OperatorNames(frozenset(), frozenset())
    functions: set[str] = set()
    methods: set[str] = set()
    current: str | None = None
    for line in text.splitlines():
        m = _YAML_FUNC.match(line)
        if m:
            current = m.group(1)
            functions.add(current)
            continue
        v = _YAML_VARIANTS.match(line)
        if v and current and "method" in v.group(1):
            methods.add(current)
    return OperatorNames(frozenset(functions), frozenset(methods - _NOT_DISPATCHED_METHODS))
