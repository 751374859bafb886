"""kernelmap: what code runs when you call PyTorch, where it is, and how to change it.

The public API lives in `kernelmap.api`; its names are re-exported here lazily
so that `import kernelmap` stays cheap and never imports torch.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

# public name -> module that defines it
_API = {
    "where": "kernelmap.api",
    "load_catalog": "kernelmap.catalog",
    "trace": "kernelmap.trace",
    "override": "kernelmap.extend",
}


def __getattr__(name: str):
    module = _API.get(name)
    if module is None:
        raise AttributeError(f"module 'kernelmap' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
