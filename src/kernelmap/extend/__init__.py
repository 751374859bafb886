"""Change a kernel: scaffold a custom operator from an ATen one, build it, swap
it into an unmodified model for one dispatch key, and verify the model still
computes what it did.

    kernelmap.extend.scaffold("aten::relu", "myrelu")           # no torch needed
    with kernelmap.extend.override("aten::convolution", "mylib::myconv", key="CPU") as o:
        model(x)
    o.calls                                                      # calls routed to it
    kernelmap.extend.verify("model.py", {"aten::convolution": "mylib::myconv"}, load=["myconv"])

Names are imported on first use, so `scaffold` never imports torch.
"""

from __future__ import annotations

import importlib

_API = {
    "scaffold": "kernelmap.extend.project",
    "Scaffold": "kernelmap.extend.project",
    "custom_op_spec": "kernelmap.extend.schema",
    "override": "kernelmap.extend.overrides",
    "Override": "kernelmap.extend.overrides",
    "check_override_schema": "kernelmap.extend.overrides",
    "load_extension": "kernelmap.extend.build",
    "verify": "kernelmap.extend.compare",
    "VerifyReport": "kernelmap.extend.compare",
    "BuildError": "kernelmap.extend.errors",
    "OutputExists": "kernelmap.extend.errors",
    "SchemaMismatch": "kernelmap.extend.errors",
    "OverrideError": "kernelmap.extend.errors",
}

__all__ = sorted(_API)


def __getattr__(name: str):
    module = _API.get(name)
    if module is None:
        raise AttributeError(f"module 'kernelmap.extend' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
