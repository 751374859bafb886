"""`override`: route one operator's calls for one dispatch key to another
kernel (a Python callable or a custom operator) inside a `with` block, count
them, and put the dispatcher back exactly as it was.

    with override("aten::convolution", "kernelmap_ext::myconv", key="CPU") as o:
        model(x)
    o.calls      # how many calls the custom kernel got

The new kernel is registered with `torch.library.Library("aten", "IMPL")` for
`key`; the dispatcher keeps the original registration underneath and shows it
again when the library is destroyed on exit. The dispatcher's dump of the
operator is taken before and compared after: a difference is an error.

Note [override schemas]
A custom operator fits an override when it takes the original's arguments in
the same places with the same types (SymInt and int alike, alias annotations
ignored), keyword-only ones under the same names, and any further arguments
have defaults or are given in `extra_args`; and it returns what the original
returns. A Python callable fits when its signature binds the original's
arguments. Anything else is refused before registration.
"""

from __future__ import annotations

import contextlib
import inspect
import re
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from torchgen.model import FunctionSchema

from kernelmap.errors import BadInput, TorchUnavailable, UnknownName
from kernelmap.extend.errors import OverrideError, SchemaMismatch
from kernelmap.extend.schema import int_not_symint
from kernelmap.model import OperatorName

__all__ = ["Override", "override", "check_override_schema", "resolve_op"]


def _torch():
    try:
        import torch
    except ImportError as e:  # pragma: no cover - torch is installed wherever tests run
        raise TorchUnavailable(f"an override needs torch: {e}") from None
    return torch


def resolve_op(name: str):
    """The `OpOverload` of `ns::name[.overload]` (default overload when none is given)."""
    torch = _torch()
    try:
        opname = OperatorName.parse(name)
    except ValueError as e:
        raise BadInput(str(e)) from None
    namespace = getattr(torch.ops, opname.namespace)
    try:
        packet = getattr(namespace, opname.name)
        return getattr(packet, opname.overload or "default")
    except AttributeError:
        unknown = UnknownName(str(opname))
        if opname.namespace != "aten":  # the hint after the quoted name, not inside it
            unknown.args = (f"{unknown.args[0]} (is its library loaded? kernelmap verify --load DIR_OR_SO)",)
        raise unknown from None


# A string literal of a schema's defaults, as torch prints it (backslash escapes inside)
_STRING_LITERAL = re.compile(r'"(?:[^"\\]|\\.)*"' + r"|'(?:[^'\\]|\\.)*'")


def _parse(schema) -> tuple[str, FunctionSchema]:
    """("ns::name.overload", torchgen's FunctionSchema) of a torch schema.
    String defaults are read as empty: torchgen splits arguments at every
    comma and '=' (`str mode="a, b"`), and a fit depends on whether an
    argument has a default, never on its value."""
    text = _STRING_LITERAL.sub('""', str(schema))
    qualified, _, rest = text.partition("(")
    namespace, _, name = qualified.rpartition("::")
    try:
        return qualified, FunctionSchema.parse(f"{name}({rest}")
    except Exception as e:
        raise SchemaMismatch(f"cannot read the schema of {qualified}: {text}: {e}") from None


def _type(t) -> str:
    return str(int_not_symint(t))


def check_override_schema(original, target, extra_args: Mapping[str, Any] = ()) -> None:
    """Raise SchemaMismatch unless `target`'s schema fits `original`'s
    (Note [override schemas]); both are `torch._C.FunctionSchema`s."""
    extra_args = dict(extra_args)
    o_name, o = _parse(original)
    t_name, t = _parse(target)
    what = f"{t_name} cannot stand in for {o_name}"
    t_positional = list(t.arguments.flat_positional)
    t_all = t_positional + list(t.arguments.flat_kwarg_only)
    t_by_name = {a.name: a for a in t_all}
    used: set[str] = set()
    for i, a in enumerate(o.arguments.flat_positional):
        if i >= len(t_positional):
            raise SchemaMismatch(f"{what}: it takes {len(t_positional)} positional argument(s), the original {len(o.arguments.flat_positional)}")
        b = t_positional[i]
        if _type(a.type) != _type(b.type):
            raise SchemaMismatch(f"{what}: argument {i} {a.name!r} is {_type(a.type)} there but {b.name!r} is {_type(b.type)} here")
        used.add(b.name)
    for a in o.arguments.flat_kwarg_only:
        b = t_by_name.get(a.name)
        if b is None:
            raise SchemaMismatch(f"{what}: it takes no keyword argument {a.name!r} ({_type(a.type)})")
        if _type(a.type) != _type(b.type):
            raise SchemaMismatch(f"{what}: argument {a.name!r} is {_type(a.type)} there but {_type(b.type)} here")
        used.add(b.name)
    for b in t_all:
        if b.name not in used and b.name not in extra_args and b.default is None:
            raise SchemaMismatch(f"{what}: its argument {b.name!r} has no default and no value in extra_args")
    unknown = sorted(set(extra_args) - {b.name for b in t_all if b.name not in used})
    if unknown:
        raise SchemaMismatch(f"{what}: extra_args {', '.join(unknown)} are not extra arguments of {t_name}")
    o_ret, t_ret = [_type(r.type) for r in o.returns], [_type(r.type) for r in t.returns]
    if o_ret != t_ret:
        raise SchemaMismatch(f"{what}: it returns ({', '.join(t_ret)}), the original returns ({', '.join(o_ret)})")


def _check_callable(fn: Callable, schema, extra_args: Mapping[str, Any]) -> None:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return  # a builtin without a signature: trust it
    positional = [object() for a in schema.arguments if not a.kwarg_only]
    keyword = {a.name: object() for a in schema.arguments if a.kwarg_only}
    try:
        sig.bind(*positional, **keyword, **dict(extra_args))
    except TypeError as e:
        raise SchemaMismatch(f"{getattr(fn, '__qualname__', fn)!s}{sig} cannot take the arguments of {schema}: {e}") from None


@dataclass
class Override:
    """One active override, and what it saw."""

    op: str  # "aten::convolution"
    target: str  # "kernelmap_ext::myconv", or a Python qualname
    key: str  # dispatch key: "CPU", "CUDA", ...
    extra_args: Mapping[str, Any] = field(default_factory=dict)
    calls: int = 0  # calls routed to the target
    record: int = 0  # keep the arguments and results of up to this many further calls in `samples`
    samples: list = field(default_factory=list, repr=False)  # (args, kwargs, result), tensors detached and cloned
    _local: threading.local = field(default_factory=threading.local, repr=False)

    def to_json(self) -> dict[str, Any]:
        return {"op": self.op, "target": self.target, "key": self.key, "extra_args": dict(self.extra_args), "calls": self.calls}


def _detached(value):
    """`value` with every tensor in it detached and cloned (lists, tuples and dicts walked)."""
    torch = _torch()
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, (list, tuple)):
        return type(value)(_detached(v) for v in value)
    if isinstance(value, dict):
        return {k: _detached(v) for k, v in value.items()}
    return value


def _dump(qualified: str) -> str:
    torch = _torch()
    return torch._C._dispatch_dump(qualified) + torch._C._dispatch_dump_table(qualified)


@contextlib.contextmanager
def override(
    op: str,
    fn: Callable | str,
    *,
    key: str = "CPU",
    extra_args: Mapping[str, Any] | None = None,
    warn_unused: bool = True,
) -> Iterator[Override]:
    """Within the block, calls of aten operator `op` that reach dispatch key `key`
    run `fn`: a Python callable taking the operator's arguments, or the name of
    a custom operator (`"mylib::myconv"`) whose schema fits (Note [override
    schemas]); `extra_args` are passed to it by name on every call. A block
    that ends normally with no call routed warns (`warn_unused`): the code ran
    other operators, say `aten::native_batch_norm` where `aten::cudnn_batch_norm`
    was overridden; `kernelmap verify` names them."""
    torch = _torch()
    original = resolve_op(op)
    opname = OperatorName.parse(op)
    if opname.namespace != "aten":
        raise BadInput(f"override replaces ATen operators (aten::...), not {op}")
    qualified = f"aten::{original._schema.name.split('::')[-1]}"
    unqualified = original._schema.name.split("::")[-1] + (f".{original._schema.overload_name}" if original._schema.overload_name else "")
    extra = dict(extra_args or {})
    if isinstance(fn, str):
        target_op = resolve_op(fn)
        check_override_schema(original._schema, target_op._schema, extra)
        target: Callable = target_op
        target_name = str(OperatorName.parse(fn))
    elif callable(fn):
        _check_callable(fn, original._schema, extra)
        target = fn
        target_name = getattr(fn, "__qualname__", repr(fn))
    else:
        raise BadInput(f"an override is a callable or a custom operator name, not {fn!r}")
    try:
        parsed = torch._C._parse_dispatch_key(key)
    except RuntimeError:
        parsed = None
    if parsed is None:
        raise BadInput(f"not a dispatch key: {key!r} (e.g. CPU, CUDA)")
    state = Override(f"aten::{unqualified}", target_name, key, extra)

    def kernel(*args, **kwargs):
        if getattr(state._local, "inside", False):
            raise OverrideError(
                f"{state.target} calls {state.op}, the operator it overrides for {key}: that would call itself; "
                f"make it call something below {state.op}"
            )
        state.calls += 1
        state._local.inside = True
        try:
            keep = len(state.samples) < state.record
            if keep:  # cloned before the call: an in-place kernel must not change what is kept
                kept = (_detached(args), _detached(kwargs))
            result = target(*args, **kwargs, **extra)
            if keep:
                state.samples.append((*kept, _detached(result)))
            return result
        finally:
            state._local.inside = False

    before = _dump(qualified)
    lib = torch.library.Library("aten", "IMPL")
    try:
        with warnings.catch_warnings():
            # "Overriding a previously registered kernel": that is the point
            warnings.simplefilter("ignore", UserWarning)
            lib.impl(unqualified, kernel, key)
        yield state
        if warn_unused and state.calls == 0:
            warnings.warn(f"the override of {state.op} for {key} received no calls: the block ran other operators "
                          f"(kernelmap verify names those of its kind that ran)", UserWarning, stacklevel=3)
    finally:
        lib._destroy()
        after = _dump(qualified)
        if after != before:
            raise OverrideError(f"the dispatcher's registrations of {qualified} differ after the override of {key}")
