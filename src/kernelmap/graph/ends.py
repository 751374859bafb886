"""Where a call ends: the places in a stack tree where the work leaves
PyTorch's plumbing (a vendor call, a kernel launch, a device loop, an inner
loop), ranked once for every answer that names them (`where`'s leaves,
`explain`'s main path).

Note [ranking a call's ends]
Closed or external vendor code is where a call really ends, then a launch of
device code, then the loop machinery, then the inner loop. Among ends of one
kind, calls that do the work (cudnnConvolutionForward, cudnnBackendExecute, a
gemm, a *_kernel) come before setup (cudnnSetStream, descriptor builders),
then the shallower before the deeper, then the first in the tree's order;
the launches below one device loop count as deep as the loop, so the order
the loop headers write them in decides (the vectorized kernel first).
Branches collapsed for another device never count. A device loop is an end
and is followed too: the kernel templates it launches (CUDALoops.cuh's
vectorized_elementwise_kernel) are ends below it. A stub's kernel is named on
the path to the best ends only, never the first stub met.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kernelmap.model import CallNode, CallTree, NodeKind

_KIND_RANK = {NodeKind.VENDOR: 0, NodeKind.LAUNCH: 1, NodeKind.DEVICE_LOOP: 2, NodeKind.INNER_LOOP: 3}
_WORK = re.compile(r"(Execute|Forward|Backward|gemm|Gemm|compute|_kernel$|kernel_vec$|kernel$)")


@dataclass(frozen=True)
class End:
    """One end of a call and the path to it from the tree's root."""

    node: CallNode
    path: tuple[CallNode, ...]
    rank: tuple[int, bool, int, int]


def call_ends(tree: CallTree) -> tuple[End, ...]:
    """Every end of the call in `tree`, best first (Note [ranking a call's ends])."""
    ends: list[End] = []
    order = 0
    # (node, path, depth of the outermost device loop on the path: 0 when none)
    stack: list[tuple[CallNode, tuple[CallNode, ...], int]] = [(tree.root, (tree.root,), 0)]
    while stack:
        node, path, loop_depth = stack.pop()
        if node.attrs.get("collapsed") or node.attrs.get("branch"):
            continue
        if node.kind in _KIND_RANK:
            works = bool(_WORK.search(node.name))
            # inside a device loop's machinery, every launch is as deep as the loop: the
            # source's own order decides (CUDALoops.cuh writes the vectorized fast path first)
            depth = loop_depth + 1 if loop_depth else len(path)
            ends.append(End(node, path, (_KIND_RANK[node.kind], not works, depth, order)))
            order += 1
            if node.kind is not NodeKind.DEVICE_LOOP:
                continue  # a device loop is followed into the kernels it launches
            loop_depth = loop_depth or len(path)
        stack.extend((c, path + (c,), loop_depth) for c in reversed(node.children))
    return tuple(sorted(ends, key=lambda e: e.rank))


def stub_kernel(tree: CallTree, ends: tuple[End, ...] | None = None) -> CallNode | None:
    """The kernel a DispatchStub runs on the way to the call's ends: the
    deepest stub-reached kernel on the path to the best end that passes one
    (Note [ranking a call's ends]). Not the first stub met breadth first: a
    convolution's bias add reaches `add_stub` before the convolution's own
    work, and is not where the inputs go. None when no end's path passes a stub."""
    from kernelmap.model import EdgeKind

    def reached(n: CallNode) -> bool:
        return n.via is EdgeKind.STUB and n.kind in (NodeKind.KERNEL, NodeKind.GENERATED) and n.location is not None

    ends = ends if ends is not None else call_ends(tree)
    if not ends:  # nothing ends the call (a reduction's loop is not modelled): the first stub met
        return next((n for _, n in tree.walk() if reached(n) and not n.attrs.get("collapsed")), None)
    for end in ends:
        if end.rank[:2] != ends[0].rank[:2]:
            break  # only the ends as good as the best: a bias add's loop is not where a gemm call goes
        on_path = [n for n in end.path if reached(n)]
        if on_path:
            return on_path[-1]
    return None
