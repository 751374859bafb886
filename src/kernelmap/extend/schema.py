"""An operator's schema turned into the schema of a custom operator: renamed,
put in its own namespace, with the user's extra arguments appended, and spelled
in the three languages the scaffold writes (schema text for `TORCH_LIBRARY`,
C++ parameter types, Python parameters).

torchgen parses and types everything (it imports without torch). A custom
operator takes `int` where ATen takes `SymInt`: its kernels are plain C++ over
concrete sizes, and the dispatcher passes Python ints to both alike.

Note [extra arguments are keyword-only]
Extra arguments go after a `*`, and each needs a default. The custom operator
then accepts every call the original accepts, positionally as before, so an
override can forward the original's arguments untouched and pass extras by
name (`override(..., extra_args={"beta": 0.5})`).
"""

from __future__ import annotations

import keyword
import re
from dataclasses import dataclass

from torchgen.api import cpp
from torchgen.model import Argument, BaseTy, BaseType, FunctionSchema, ListType, OptionalType, SchemaKind, Type

from kernelmap.errors import BadInput
from kernelmap.printable import printable_line
from kernelmap.extend.errors import NotScaffoldable

__all__ = ["Param", "CustomOpSpec", "custom_op_spec", "parse_extra", "check_identifier", "check_namespace", "int_not_symint"]

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

# Schema defaults that are names, as torch's schema parser reads them, in Python.
_PY_DEFAULTS = {
    "Mean": "1",  # at::Reduction::Mean
    "Sum": "2",
    "contiguous_format": "torch.contiguous_format",
    "strided": "torch.strided",
    "long": "torch.long",
    "float": "torch.float",
    "complex": "torch.complex64",  # torch's parser: at::kComplexFloat
}
# Names of dtypes a ScalarType default may be (torch's parser reads the
# Python names of every dtype: c10::getStringToDtypeMap); torch.NAME in Python.
_DTYPE_NAMES = frozenset("""
float16 half bfloat16 float32 float64 double complex32 chalf complex64 cfloat complex128 cdouble
uint8 int8 int16 short int32 int int64 bool
""".split())


# C++20 keywords and alternative tokens: a name the scaffold writes into C++
# (a function, a namespace) cannot be one of these and compile.
CPP_KEYWORDS = frozenset("""
alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t char16_t char32_t class
compl concept const consteval constexpr constinit const_cast continue co_await co_return co_yield decltype
default delete do double dynamic_cast else enum explicit export extern false float for friend goto if inline
int long mutable namespace new noexcept not not_eq nullptr operator or or_eq private protected public register
reinterpret_cast requires return short signed sizeof static static_assert static_cast struct switch template
this thread_local throw true try typedef typeid typename union unsigned using virtual void volatile wchar_t
while xor xor_eq
""".split())

# Namespaces PyTorch defines itself: a custom operator there would collide with its own.
RESERVED_NAMESPACES = frozenset({"aten", "prim", "prims", "c10", "at", "torch", "std", "_ops", "_c10d_functional"})

# A name becomes file names such as `bench_NAME.py` and `NAME_kernel.cu`, and
# build folders append more; well under the 255 bytes a file name may have.
MAX_NAME = 64


def check_identifier(text: str, what: str) -> str:
    """`text` if it can name a C++ function or namespace, a Python module and an operator."""
    if not _IDENT.fullmatch(text or "") or keyword.iskeyword(text):
        raise BadInput(f"{what} must be an identifier (letters, digits, '_', not starting with a digit): {text!r}")
    if len(text) > MAX_NAME:
        raise BadInput(f"{what} is {len(text)} characters long; at most {MAX_NAME}")
    if text in CPP_KEYWORDS:
        raise BadInput(f"{what} {text!r} is a C++ keyword; the generated C++ would not compile")
    # C++ reserves names with a double underscore, or an underscore and a capital, for the implementation;
    # a dunder like `__init__` would also shadow Python's own module machinery
    if "__" in text or re.match(r"_[A-Z]", text):
        raise BadInput(f"{what} {text!r} is reserved in C++ (a double underscore, or '_' then a capital)")
    return text


def check_namespace(text: str) -> str:
    """`text` if it can be a custom operator's namespace (an identifier PyTorch does not use itself)."""
    check_identifier(text, "the namespace")
    if text in RESERVED_NAMESPACES:
        raise BadInput(f"the namespace {text!r} is PyTorch's own; choose another (default kernelmap_ext)")
    return text


@dataclass(frozen=True)
class Param:
    """One argument of the custom operator."""

    name: str
    type: str  # schema spelling: "Tensor", "Tensor?", "int[]", "Scalar", "float"
    cpp_type: str  # "const at::Tensor &", "at::IntArrayRef", "double"
    default: str | None  # schema spelling of the default, if any
    kwarg_only: bool
    extra: bool  # added by the user; not an argument of the original operator
    annotation: str | None = None  # alias annotation: "a!" for an argument the kernel writes (Note [mutated arguments])

    @property
    def is_tensor(self) -> bool:
        return self.type == "Tensor"

    @property
    def is_optional_tensor(self) -> bool:
        return self.type == "Tensor?"

    @property
    def py_default(self) -> str | None:
        """The default as Python source: a literal or a torch constant, never
        the schema's text pasted in (Note [defaults are values])."""
        if self.default is None:
            return None
        literal = py_literal(self.type, self.default)
        if literal is None:  # an original's default kernelmap has no spelling for: its yaml is trusted, not the user
            assert not self.extra, f"an extra argument's default {self.default!r} was checked by parse_extra"
            return _PY_DEFAULTS.get(self.default, self.default)
        return literal

    @property
    def is_mutated(self) -> bool:
        return self.annotation is not None and self.annotation.endswith("!")

    @property
    def schema_type(self) -> str:
        """The type as a schema spells it, with its annotation: `Tensor(a!)?`."""
        if self.annotation is None:
            return self.type
        base, optional = (self.type[:-1], "?") if self.type.endswith("?") else (self.type, "")
        return f"{base}({self.annotation}){optional}"

    @property
    def schema_text(self) -> str:
        return f"{self.schema_type} {self.name}" + (f"={self.default}" if self.default is not None else "")

    @property
    def py_param(self) -> str:
        return self.name + (f"={self.py_default}" if self.default is not None else "")


@dataclass(frozen=True)
class CustomOpSpec:
    """The custom operator a scaffold defines, next to the operator it starts from."""

    op: str  # "aten::add.Tensor"
    op_schema: str  # the original's schema text
    namespace: str  # "kernelmap_ext"
    name: str  # "myadd"
    params: tuple[Param, ...]
    returns: tuple[str, ...]  # schema types of the results: ("Tensor",)
    cpp_return: str  # "at::Tensor", "::std::tuple<at::Tensor,at::Tensor>"

    def __post_init__(self) -> None:
        names = [p.name for p in self.params]
        if len(set(names)) != len(names):
            raise ValueError(f"{self.name}: argument names are unique, got {names}")

    @property
    def qualified(self) -> str:
        return f"{self.namespace}::{self.name}"

    @property
    def schema(self) -> str:
        """The `TORCH_LIBRARY` definition: `myadd(Tensor self, ..., *, float beta=1.0) -> Tensor`."""
        parts: list[str] = []
        star = False
        for p in self.params:
            if p.kwarg_only and not star:
                parts.append("*")
                star = True
            parts.append(p.schema_text)
        ret = self.returns[0] if len(self.returns) == 1 else "(" + ", ".join(self.returns) + ")"
        return f"{self.name}({', '.join(parts)}) -> {ret}"

    @property
    def positional(self) -> tuple[Param, ...]:
        return tuple(p for p in self.params if not p.kwarg_only)

    @property
    def kwarg_only(self) -> tuple[Param, ...]:
        return tuple(p for p in self.params if p.kwarg_only)

    @property
    def extras(self) -> tuple[Param, ...]:
        return tuple(p for p in self.params if p.extra)

    @property
    def originals(self) -> tuple[Param, ...]:
        return tuple(p for p in self.params if not p.extra)

    @property
    def tensor_params(self) -> tuple[Param, ...]:
        return tuple(p for p in self.params if p.is_tensor or p.is_optional_tensor)

    @property
    def num_returns(self) -> int:
        return len(self.returns)

    @property
    def aten_python(self) -> str:
        """`torch.ops.aten.add.Tensor`: the original, as Python calls it."""
        base, _, overload = self.op.split("::", 1)[1].partition(".")
        return f"torch.ops.aten.{base}.{overload or 'default'}"

    def py_signature(self) -> str:
        """Python parameters of the custom operator: `self, other, *, alpha=1, beta=1.0`."""
        parts = [p.py_param for p in self.positional]
        if self.kwarg_only:
            parts.append("*")
            parts.extend(p.py_param for p in self.kwarg_only)
        return ", ".join(parts)

    def aten_call_args(self) -> str:
        """The original's arguments taken from same-named Python variables:
        `self, other, alpha=alpha` (extras left out)."""
        return ", ".join(p.name if not p.kwarg_only else f"{p.name}={p.name}" for p in self.originals)

    def custom_call_args(self) -> str:
        """All arguments of the custom operator from same-named variables."""
        return ", ".join(p.name if not p.kwarg_only else f"{p.name}={p.name}" for p in self.params)

    def cpp_params(self) -> str:
        return ", ".join(f"{p.cpp_type} {p.name}" for p in self.params)

    def cpp_args(self) -> str:
        return ", ".join(p.name for p in self.params)


def int_not_symint(t: Type) -> Type:
    """The same type with SymInt spelled int (a custom kernel gets concrete sizes)."""
    if isinstance(t, BaseType):
        return BaseType(BaseTy.int) if t.name is BaseTy.SymInt else t
    if isinstance(t, OptionalType):
        return OptionalType(int_not_symint(t.elem))
    if isinstance(t, ListType):
        return ListType(int_not_symint(t.elem), t.size)
    return t


def _param(arg: Argument, kwarg_only: bool, extra: bool, annotation: str | None = None) -> Param:
    typ = int_not_symint(arg.type)
    plain = Argument(arg.name, typ, arg.default, None)
    return Param(
        name=arg.name,
        type=str(typ),
        cpp_type=cpp.argument_type(plain, binds=arg.name, symint=False).cpp_type(),
        default=arg.default,
        kwarg_only=kwarg_only,
        extra=extra,
        annotation=annotation or (str(arg.annotation) if arg.annotation is not None else None),
    )


# Note [mutated arguments]
# A custom operator's schema keeps the alias annotations of the original's
# arguments (`Tensor(a!) running_mean` in _native_batch_norm_legit): the
# dispatcher, functionalization, torch.compile and opcheck's schema test all
# trust them. Some originals write an argument their schema does not mark:
# native_batch_norm, cudnn_batch_norm and miopen_batch_norm update
# running_mean and running_var in place when training, yet their yaml (2.6 and
# 2.13) declares both as plain `Tensor?` (ATen's functionalization special-cases
# batch norm instead). The custom operator is not special-cased anywhere, so
# `extra_mutated` adds the annotations its kernel needs to tell the truth.


def _split_top_level(text: str) -> list[str]:
    """Split at commas outside brackets and quotes: "int[2] k=[1,1], str m='a,b'" -> two parts."""
    parts, depth, current, quote = [], 0, [], ""
    for ch in text:
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        if ch == "," and depth == 0 and not quote:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return [p.strip() for p in parts if p.strip()]


def parse_extra(texts: list[str] | tuple[str, ...]) -> tuple[Argument, ...]:
    """Extra arguments in schema syntax: ["float beta=1.0", "int k=2, bool flag=False"]."""
    out: list[Argument] = []
    for text in texts:
        if not text.strip():
            raise BadInput("an extra argument is empty: write it as in a schema, with a default ('float beta=1.0')")
        for part in _split_top_level(text):
            try:
                arg = Argument.parse(part)
            except Exception as e:  # torchgen raises AssertionError / RuntimeError on bad text
                # torchgen's message quotes the text as it is: one line, whatever it holds
                raise BadInput(f"not a schema argument: {part!r} (write it as in a schema: 'float beta=1.0'): "
                               f"{printable_line(str(e))}") from None
            if arg.annotation is not None:
                raise BadInput(f"an extra argument cannot alias or be written: {part!r}")
            if arg.default is None:
                raise BadInput(
                    f"an extra argument needs a default, so the custom op still accepts every call "
                    f"of the original: {part!r} (e.g. 'float beta=1.0')"
                )
            check_identifier(arg.name, "an extra argument's name")
            if not _default_fits(str(arg.type), arg.default):
                raise BadInput(f"the default of an extra argument is not a {arg.type} torch can read: {part!r}")
            if py_literal(str(int_not_symint(arg.type)), arg.default) is None:
                raise BadInput(f"the default of an extra argument is not one scaffold can write: {part!r} (a number, "
                               f"True, False, None, a string of printable characters, a list of numbers, or a dtype name)")
            out.append(arg)
    return tuple(out)


# Note [defaults are values]
# A default the user types ends up in three languages: the schema (a C++
# string literal in TORCH_LIBRARY's m.def, and a Python string), and Python
# signatures. None of them receives the default's text pasted in: a default is
# read into what it means (a number, a bool, None, a string's characters, a
# list of those, a dtype or layout by name) and written back with Python's
# repr() or as a torch constant; the schema text goes through repr() in Python
# and an escaped C++ string literal (templates' `py` and `cpp` filters). A
# string default holds printable characters, no backslash, and no quote of
# its own kind (what torch's schema parser reads back as the same characters);
# anything scaffold cannot spell is refused.
_STRING = re.compile(r"\"([^\"\\]*)\"|'([^'\\]*)'")


def py_literal(kind: str, default: str) -> str | None:
    """Python source for the schema default `default` of type `kind`
    (schema spelling: "float", "str", "int[2]", "ScalarType?"), or None when
    it is nothing scaffold can spell (Note [defaults are values])."""
    base = kind.removesuffix("?")
    if default in ("None", "True", "False"):
        return default
    string = _STRING.fullmatch(default)
    if string is not None:
        value = string.group(1) if string.group(1) is not None else string.group(2)
        return repr(value) if value.isprintable() else None
    if re.fullmatch(_INT, default):
        return str(int(default))  # "007" is 7 to torch and a syntax error to Python
    if re.fullmatch(_FLOAT, default):
        value = float(default)
        return repr(value) if value == value and abs(value) != float("inf") else None
    if default.startswith("[") and default.endswith("]"):
        item = re.sub(r"\[\d*\]$", "", base)
        items = [i.strip() for i in default[1:-1].split(",")]
        if items == [""]:
            return "[]"
        spelled = [py_literal(item, i) for i in items]
        return None if any(x is None or x.startswith("[") for x in spelled) else "[" + ", ".join(spelled) + "]"  # type: ignore[operator]
    if default in _PY_DEFAULTS:
        return _PY_DEFAULTS[default]
    if base == "ScalarType" and default in _DTYPE_NAMES:
        return f"torch.{default}"
    return None


_INT = r"-?\d+"
_FLOAT = r"-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_DEFAULTS = {
    "int": _INT, "SymInt": _INT, "float": _FLOAT, "bool": r"True|False", "str": r"\"[^\"\\]*\"|'[^'\\]*'",
    "Scalar": rf"{_FLOAT}|True|False", "Tensor": r"(?!)",
}


def _default_fits(kind: str, default: str) -> bool:
    """Whether a schema default is one torch's schema parser reads for `kind`
    (`float s=abc`, `float s=1e999` and `Tensor s=1` are not); types not
    listed (ScalarType, Layout, ...) are left to it."""
    if kind.endswith("?") and default == "None":
        return True
    kind = kind.removesuffix("?")
    list_of = re.fullmatch(r"(\w+)\[(\d*)\]", kind)
    if list_of:
        item = _DEFAULTS.get(list_of.group(1))
        if item is None:
            return True
        items = default[1:-1].split(",") if default.startswith("[") and default.endswith("]") else ([default] if list_of.group(2) else None)
        return items is not None and all(_default_fits(list_of.group(1), i.strip()) for i in items if i.strip())
    pattern = _DEFAULTS.get(kind)
    if pattern is None:
        return True
    if not re.fullmatch(pattern, default):
        return False
    return kind not in ("float", "Scalar") or default in ("True", "False") or abs(float(default)) != float("inf")


def custom_op_spec(op: str, op_schema: str, name: str, namespace: str = "kernelmap_ext", extra: tuple[str, ...] = (),
                   extra_mutated: dict[str, str] | None = None) -> CustomOpSpec:
    """The custom operator `namespace::name` whose schema is `op_schema`'s plus
    `extra`, with the original's alias annotations and `extra_mutated`
    ({argument: "a!"}) added (Note [mutated arguments])."""
    check_identifier(name, "NAME")
    check_namespace(namespace)
    try:
        fs = FunctionSchema.parse(op_schema)
    except Exception as e:
        raise BadInput(f"{op}: its schema does not parse: {op_schema!r}: {e}") from None
    kind = fs.kind()
    # functional, or mutating some arguments without returning them (SchemaKind.mutable); never in-place, out= or views
    if kind not in (SchemaKind.functional, SchemaKind.mutable) or any(r.annotation is not None for r in fs.returns):
        what = {SchemaKind.inplace: "is in-place", SchemaKind.out: "writes an out= argument"}.get(kind, "mutates or returns a view of its input")
        raise NotScaffoldable(f"{op} {what}; scaffold starts from functional operators (e.g. the one without '_' or '.out')")
    args = fs.arguments
    mutated = dict(extra_mutated or {})
    params = [_param(a, False, False, mutated.get(a.name)) for a in args.flat_positional]
    params += [_param(a, True, False, mutated.get(a.name)) for a in args.flat_kwarg_only]
    taken = {p.name for p in params}
    for a in parse_extra(extra):
        if a.name in taken:
            raise BadInput(f"extra argument {a.name!r} has the name of an argument {op} already takes")
        taken.add(a.name)
        params.append(_param(a, True, True))
    returns = tuple(str(int_not_symint(r.type)) for r in fs.returns)
    if not returns:
        raise NotScaffoldable(f"{op} returns nothing; scaffold starts from operators that return tensors")
    plain_returns = tuple(type(r)(None, int_not_symint(r.type), None) for r in fs.returns)
    return CustomOpSpec(
        op=op,
        op_schema=op_schema,
        namespace=namespace,
        name=name,
        params=tuple(params),
        returns=returns,
        cpp_return=cpp.returns_type(plain_returns, symint=False).cpp_type(),
    )
