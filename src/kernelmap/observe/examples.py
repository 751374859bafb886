"""Example inputs for a name (runs in the observed process, beside torch):
an operator or a Python function is called on the first sample input of
its OpInfo (torch.testing._internal.common_methods_invocations, in the
wheel), an nn.Module class is built and called as its ModuleInfo
(torch.testing._internal.common_modules) first describes it.

    what, call = example_call("torch.add", torch, {"dtype": "float32"})
"""

from __future__ import annotations

import importlib


class NoExample(Exception):
    """No OpInfo or ModuleInfo describes the name: kernelmap cannot make its inputs."""


def resolve_python(name: str):
    """The object a dotted Python name (`torch.nn.functional.conv2d`, `F.relu`) names, or None."""
    aliases = {"F": "torch.nn.functional", "nn": "torch.nn"}
    head, _, rest = name.partition(".")
    name = f"{aliases[head]}.{rest}" if head in aliases and rest else name
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        try:
            for p in parts[i:]:
                obj = getattr(obj, p)
            return obj
        except AttributeError:
            return None
    return None


def _module_call(cls, torch, dtype):
    from torch.testing._internal.common_modules import module_db

    for info in module_db:
        if info.module_cls is cls:
            inputs = info.module_inputs_func(info, device="cpu", dtype=dtype, requires_grad=False, training=False)
            if not inputs:
                break
            first = inputs[0]
            c, f = first.constructor_input, first.forward_input
            module = cls(*c.args, **c.kwargs).to(dtype)
            module.eval()
            return {"module": f"{cls.__module__}.{cls.__qualname__}", "dtype": str(dtype).replace("torch.", "")}, lambda: module(*f.args, **f.kwargs)
    raise NoExample(f"no ModuleInfo describes {cls.__qualname__}, so kernelmap cannot make its inputs; observe a script that calls it instead")


def _op_call(name, obj, torch, dtype):
    from torch.testing._internal.common_methods_invocations import op_db

    bare = name.split("::", 1)[-1].split(".", 1)[0] if "::" in name else None
    chosen = None
    for op in op_db:
        if obj is not None and (op.op is obj or getattr(op, "method_variant", None) is obj or getattr(op, "inplace_variant", None) is obj):
            chosen = op
            break
        if bare is not None and (op.aten_name == bare or op.name == bare) and not op.variant_test_name:
            chosen = op
            break
        if obj is None and bare is None and op.name == name and not op.variant_test_name:
            chosen = op
            break
    if chosen is None:
        raise NoExample(f"no OpInfo describes {name}, so kernelmap cannot make its inputs; observe a script or -c code that calls it")
    dtypes = chosen.supported_dtypes("cpu")
    use = dtype if dtype in dtypes else sorted(dtypes, key=str)[0]
    sample = next(iter(chosen.sample_inputs("cpu", use, requires_grad=False)))
    fn = chosen.op
    if obj is not None and obj is getattr(chosen, "inplace_variant", None):
        fn = obj
    what = {"opinfo": chosen.name, "dtype": str(use).replace("torch.", ""), "input": _describe(sample.input)}
    return what, lambda: fn(sample.input, *sample.args, **sample.kwargs)


def _describe(x) -> str:
    shape = getattr(x, "shape", None)
    return f"{str(x.dtype).replace('torch.', '')}{list(shape)}" if shape is not None else type(x).__name__


def example_call(target: str, torch, spec: dict):
    """(what, a call of `target` on example inputs)."""
    dtype = getattr(torch, spec.get("dtype") or "float32")
    obj = None if "::" in target else resolve_python(target)
    if isinstance(obj, type) and issubclass(obj, torch.nn.Module):
        return _module_call(obj, torch, dtype)
    return _op_call(target, obj, torch, dtype)
