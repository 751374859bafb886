"""kernelmap: what code runs when you call PyTorch, where it is, and how to change it.

The public API lives in `kernelmap.api`; names are re-exported here lazily so
that `import kernelmap` stays cheap and never imports torch.
"""

from __future__ import annotations

__version__ = "0.1.0"


def __getattr__(name: str):
    from kernelmap import api

    try:
        return getattr(api, name)
    except AttributeError:
        raise AttributeError(f"module 'kernelmap' has no attribute {name!r}") from None
