"""kernelmap: what code runs when you call PyTorch, where it is, and how to change it.

The public API lives in `kernelmap.api`; its names are re-exported here lazily
so that `import kernelmap` stays cheap and never imports torch.
"""

from __future__ import annotations

import importlib

from kernelmap import model as _model

__version__ = "0.1.0"

# public name -> module that defines it ("" for a subpackage that is itself the API:
# `kernelmap.trace(fn, *args)` calls the package kernelmap.trace)
_API = {
    "where": "kernelmap.api",
    "load_catalog": "kernelmap.catalog",
    "trace": "",
    "override": "kernelmap.extend",
    "verify": "kernelmap.extend",
}


def __getattr__(name: str):
    if name not in _API:
        raise AttributeError(f"module 'kernelmap' has no attribute {name!r}")
    if not _API[name]:
        return importlib.import_module(f"kernelmap.{name}")
    return getattr(importlib.import_module(_API[name]), name)


def _notebook_view(answer) -> str:
    """An answer in a notebook: its HTML report (Note [notebook view] in kernelmap.model)."""
    from kernelmap.render.html import repr_html  # jinja2 and the report's assets only when a notebook shows one

    return repr_html(answer)


_model.show_in_notebooks(_notebook_view)
