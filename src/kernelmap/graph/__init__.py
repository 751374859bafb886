"""The cross-layer call graph: one `CallTree` that joins Python source, the
generated binding, the operator and its dispatch, generated wrappers, native
kernels, stubs, device loops and vendor calls, for one device.

    context = open_context("cuda")
    stack("torch.nn.Conv2d", context)              # top-down (graph.down)
    callers("cudnnConvolutionForward", context)    # bottom-up (graph.up)
    call_ends(tree)                                # where the call ends, ranked (graph.ends)

Each layer comes from its own producer: Python from the installed wheel's
source (`pysource`), bindings and wrappers from the regenerated files
(`codegen`), operators from the catalog, C++ from a source tree's index
(`source`). Layers whose producer is missing are reported, not guessed.
The package is split by job: `context` opens the producers, `rules` holds
the expansion rules, `grow` expands and freezes, `code` reads the C++ text
the rules need and `resolve` the definitions a direct call reaches,
`overloads` and `values` which definition a call reaches and what it passes,
`down` (by layer: `python`, `operators`, `sites`, `kernel_loops`, `stubs`,
with the nodes of `nodes`) and `up` are the two directions, `ends` ranks where a call ends (used by
`where` and `explain`). Imports point one way, to these lower jobs, never
back up to a direction (tests/test_import_circles.py).
Each rule that decides what a call runs has a Note where it is applied; the
rules are listed, with an example on its line of a tree and the test that
holds it, in docs/graph-rules.md.
"""

from __future__ import annotations

from collections.abc import Callable

from kernelmap.graph.context import GraphContext, open_context
from kernelmap.graph.rules import DEFAULT_DEPTH, DEVICE_KEYS, MAX_NODES
from kernelmap.model import CallTree


def processors_for(context: GraphContext) -> Callable[[CallTree], CallTree]:
    """The processors a stack's options ask for: branches for other devices
    collapsed unless all branches are shown; plumbing pruned unless all calls
    are. (The autograd wrappers that never run are never grown: Note [the
    autograd layer] in graph.operators.)"""
    from kernelmap import processors

    def apply(tree: CallTree) -> CallTree:
        if not context.all_branches:
            tree = processors.collapse_branches(tree)
        if not context.all_calls:
            tree = processors.prune_plumbing(tree)
        return tree

    return apply


# The directions and the ranking are imported on first use: `where --static`
# only opens what `kernelmap.graph.context` needs.
_LAZY = {"file_lines": "code", "stack": "down", "End": "ends", "call_ends": "ends", "stub_kernel": "ends", "callers": "up"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(f"kernelmap.graph.{_LAZY[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["DEFAULT_DEPTH", "DEVICE_KEYS", "MAX_NODES", "End", "GraphContext", "call_ends", "callers", "file_lines", "open_context", "processors_for", "stack", "stub_kernel"]
