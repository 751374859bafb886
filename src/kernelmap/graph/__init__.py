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
the expansion rules, `grow` expands and freezes, `down` and `up` are the two
directions, `ends` ranks where a call ends (used by `where` and `explain`).
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
    autograd layer] in graph.down.)"""
    from kernelmap import processors

    def apply(tree: CallTree) -> CallTree:
        if not context.all_branches:
            tree = processors.collapse_branches(tree)
        if not context.all_calls:
            tree = processors.prune_plumbing(tree)
        return tree

    return apply


from kernelmap.graph.down import file_lines, stack  # noqa: E402  (down imports processors_for)
from kernelmap.graph.ends import End, call_ends, stub_kernel  # noqa: E402
from kernelmap.graph.up import callers  # noqa: E402

__all__ = ["DEFAULT_DEPTH", "DEVICE_KEYS", "MAX_NODES", "End", "GraphContext", "call_ends", "callers", "file_lines", "open_context", "processors_for", "stack", "stub_kernel"]
