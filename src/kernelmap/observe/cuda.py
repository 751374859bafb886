"""The CUDA half of observation, prepared on recorded stacks: a CUDA build's
host stack down to the vendor call (cudnn*, cublas*, cublasLt*) and the
kernel launch (cudaLaunchKernel, cuLaunchKernel), joined with the kernel
names the profiler recorded for the same launches.

Note [joining launches to kernels]
A launch's host stack is captured at a breakpoint on the runtime's launch
function; the profiler (Kineto) names the kernel each launch ran and gives
launch and kernel one correlation id. A stack that carries the correlation
(one read from a trace's own nesting of cpu_op and cuda_runtime events)
joins on it; a stack captured under gdb, which cannot read Kineto's counter,
joins by launch order: the i-th launch stop of a run is the i-th
cudaLaunchKernel of that run's trace, when the run is profiled in the same
process and every launch is stopped at (no other thread launching).

What is left to record on a GPU: the CUDA wheel's libtorch_cuda.so and
libcudnn/libcublas keep their dynamic symbols (cudnnConvolutionForward,
cublasSgemm_v2 are exported), so `observe --break cudaLaunchKernel` with
`torch.profiler` around the same call gives both halves; the stacks and the
trace of one Conv2d forward and one mm, kept as a fixture, would test this
module on real host frames instead of the trace's operator nesting.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from pathlib import Path

from kernelmap.model import CallNode, CallTree, NodeKind

LAUNCHES = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx", "cudaLaunchCooperativeKernel")
VENDOR_PREFIXES = ("cudnn", "cublasLt", "cublas", "cufft", "curand", "cusparse", "cusolver", "nccl")
# host functions `observe` breaks on in a CUDA build: the launches and the vendor entries torch calls most
CUDA_BREAKS = LAUNCHES[:3] + ("cudnnConvolutionForward", "cudnnBackendExecute", "cublasSgemm_v2", "cublasGemmEx", "cublasLtMatmul")


@dataclass(frozen=True)
class HostStack:
    """One launch's host stack, outermost first, and its correlation id when known."""

    frames: tuple[str, ...]
    correlation: int | None = None


@dataclass(frozen=True)
class GpuKernel:
    name: str
    correlation: int
    duration_us: float
    stream: int | None = None


def host_kind(name: str) -> NodeKind:
    bare = name.split("(", 1)[0]
    if bare.startswith(LAUNCHES) or bare.startswith(("cuda", "cu")) and "::" not in bare and not bare.startswith(VENDOR_PREFIXES):
        return NodeKind.RUNTIME
    if bare.startswith(VENDOR_PREFIXES):
        return NodeKind.VENDOR
    if bare.startswith("aten::"):
        return NodeKind.OPERATOR
    return NodeKind.KERNEL


def read_kineto(path: Path) -> tuple[list[GpuKernel], list[HostStack]]:
    """A Kineto trace's GPU kernels, and each launch's host stack as the trace
    nests it (the cpu_op events around the cuda_runtime launch, on its thread)."""
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as f:
        data = json.load(f)
    events = data["traceEvents"] if isinstance(data, dict) else data
    kernels = [
        GpuKernel(e["name"], int(e["args"]["correlation"]), float(e.get("dur", 0.0)), e["args"].get("stream"))
        for e in events
        if e.get("cat") == "kernel" and "correlation" in (e.get("args") or {})
    ]
    ops: dict[tuple, list[dict]] = {}
    for e in events:
        if e.get("cat") == "cpu_op" and e.get("ph") == "X":
            ops.setdefault((e.get("pid"), e.get("tid")), []).append(e)
    for lst in ops.values():
        lst.sort(key=lambda e: (e["ts"], -e.get("dur", 0)))
    stacks = []
    for e in events:
        if e.get("cat") != "cuda_runtime" or e.get("name") not in LAUNCHES:
            continue
        t = e["ts"]
        around = [o for o in ops.get((e.get("pid"), e.get("tid")), ()) if o["ts"] <= t and t + e.get("dur", 0) <= o["ts"] + o.get("dur", 0)]
        stacks.append(HostStack(tuple(o["name"] for o in around) + (e["name"],), int(e["args"]["correlation"])))
    return kernels, stacks


def join_launches(stacks: list[HostStack], kernels: list[GpuKernel], target: str = "launches") -> CallTree:
    """Each launch's host stack with the kernel it ran below it (Note [joining launches to kernels])."""
    by_correlation = {k.correlation: k for k in kernels}
    ordered = sorted(kernels, key=lambda k: k.correlation)
    unmatched = 0
    root_children: dict = {}
    for i, stack in enumerate(stacks):
        kernel = by_correlation.get(stack.correlation) if stack.correlation is not None else (ordered[i] if i < len(ordered) else None)
        level = root_children
        node = None
        for name in stack.frames:
            node = level.setdefault(name, {"kind": host_kind(name), "children": {}, "kernels": {}})
            level = node["children"]
        if node is None:
            continue
        if kernel is None:
            unmatched += 1
            continue
        entry = node["kernels"].setdefault(kernel.name, [0, 0.0, stack.correlation])
        entry[0] += 1
        entry[1] += kernel.duration_us

    def freeze(name: str, d: dict) -> CallNode:
        kids = [freeze(n, c) for n, c in d["children"].items()]
        kids += [CallNode(k, NodeKind.GPU_KERNEL, attrs={"duration_us": round(v[1], 3), "hits": v[0], "linked_by": "correlation" if v[2] is not None else "launch order"})
                 for k, v in d["kernels"].items()]
        return CallNode(name, d["kind"], children=tuple(kids), attrs={"observed": "observed"})

    root = CallNode(target, NodeKind.TRACE, children=tuple(freeze(n, c) for n, c in root_children.items()))
    notes = (f"{unmatched} launches found no kernel in the trace",) if unmatched else ()
    return CallTree(root, notes, {"kind": "observe", "target": target, "device": "cuda"})
