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

Recorded on a GPU (scripts/record_cuda_launches.py, an H200 with torch
2.11.0+cu130, under cuda-gdb): the launch functions' host stacks, from the
binding through the dispatcher and the CUDA kernel to the vendor entry
(cudnnBackendExecute, cublasSgemm_v2 -> cublasLtSSSMatmul) and the launch
(cudaLaunchKernel in libcudart, cuLaunchKernel/cuLaunchKernelEx in libcuda,
where cuDNN's and cuBLAS's static runtimes end). In the debugged run the
profiler's traces held no launch and no kernel (CUPTI, it seems, records
nothing while cuda-gdb holds CUDA's debug interface), so the kernel names
come from a plain run of the same, warmed-up call: its i-th launch is the
debugged run's i-th.

Note [one launch, one stop]
A runtime launch (cudaLaunchKernel) calls the driver's (cuLaunchKernel):
one launch stops twice. The driver's stop, whose stack holds the runtime's
launch frame below its top, is the same launch and is dropped; the profiler
records the outer call alone (cuda_runtime), or the driver's (cuda_driver)
when a library launched through the driver directly.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from pathlib import Path

from kernelmap.model import CallNode, CallTree, NodeKind
from kernelmap.observe.capture import Capture, RawFrame, RawStack

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


# ---------------------------------------------------------------------------
# recorded launches (scripts/record_cuda_launches.py)


@dataclass(frozen=True)
class RecordedCall:
    """One call's launches as a CUDA build ran them: each launch's host
    stack (innermost first) and, from the profiler, the kernel it ran."""

    call: str
    stacks: tuple[RawStack, ...]
    kernels: tuple[GpuKernel | None, ...]  # per stack, by launch order; None where the trace has none
    trace_launches: int  # launches the profiler recorded for the call (0: no trace, or no GPU activity)


def _is_launch(name: str | None) -> bool:
    return bool(name) and name.split("(", 1)[0] in LAUNCHES


def one_launch_per_stop(stacks: list[RawStack]) -> list[RawStack]:
    """The stops that are launches of their own (Note [one launch, one stop])."""
    return [s for s in stacks if not any(_is_launch(f.name) for f in s.frames[1:])]


def read_recorded(path: Path) -> tuple[dict, list[RecordedCall]]:
    """The header and calls of a recording, each launch joined by order to the
    kernel the plain run's profiler saw it run."""
    with gzip.open(path, "rt") as f:
        lines = [json.loads(line) for line in f if line.strip()]
    header = next(r for r in lines if r.get("t") == "header")
    table = next(r for r in lines if r.get("t") == "frames")["frames"]
    calls = []
    for i, r in enumerate(x for x in lines if x.get("t") == "call"):
        stacks = [RawStack("break", i, 0, tuple(RawFrame(name=table[k][0], lib=table[k][1]) for k in reversed(s["frames"])), s.get("brk"))
                  for s in r["stacks"]]
        stacks = one_launch_per_stop(stacks)
        trace = r.get("trace") or {}
        by_correlation = {k["correlation"]: k for k in trace.get("kernels") or ()}
        ordered = [by_correlation.get(launch["correlation"]) for launch in trace.get("launches") or ()]
        kernels = tuple(
            GpuKernel(k["name"], int(k["correlation"]), float(k.get("dur") or 0.0), k.get("stream")) if k else None
            for k in (ordered[j] if j < len(ordered) else None for j in range(len(stacks)))
        )
        calls.append(RecordedCall(r.get("call", f"call {i}"), tuple(stacks), kernels, len(ordered)))
    return header, calls


def launch_tree(header: dict, calls: RecordedCall | list[RecordedCall], sources, *, wheel=None, target: str | None = None) -> CallTree:
    """Recorded calls' launches as one observed tree: each host frame joined
    to the source map, the launch at the bottom, and under it the kernel the
    profiler saw it run (Note [joining launches to kernels])."""
    from kernelmap.observe.join import observed_tree

    calls = [calls] if isinstance(calls, RecordedCall) else list(calls)
    stacks = [st for c in calls for st in c.stacks]
    kernels = [k for c in calls for k in c.kernels]
    capture = Capture(tuple(stacks), {"torch": header.get("torch"), "git_version": header.get("git_version")})
    below = [[CallNode(k.name, NodeKind.GPU_KERNEL, attrs={"duration_us": round(k.duration_us, 3), "linked_by": "launch order"})] if k else []
             for k in kernels]
    notes = [f"observed on {header.get('gpu')}, torch {header.get('torch')} ({(header.get('git_version') or '')[:12]}), CUDA {header.get('cuda')}, "
             f"{header.get('recorded_with', 'a debugger')}"]
    for c in calls:
        if c.trace_launches != len(c.stacks):
            notes.append(f"{c.call}: {len(c.stacks)} launches stopped at, {c.trace_launches} in the profiler's trace of the plain run: "
                         + ("no kernel names" if not c.trace_launches else "joined by order as far as both go"))
    meta = {"torch": header.get("torch"), "git_version": header.get("git_version"), "device": "cuda", "stacks": len(stacks)}
    label = target or (calls[0].call if len(calls) == 1 else f"launches recorded on {header.get('gpu')}")
    return observed_tree(capture, sources, label, wheel=wheel, notes=tuple(notes), meta=meta, below=below)


def recorded_tree(path: str, call: str | None = None, *, source: str | None = None) -> CallTree:
    """`observe --launches FILE [CALL]`: a recording's launches joined to the
    selected tree; one line (BadInput) for a file that is not a recording."""
    from kernelmap.errors import BadInput
    from kernelmap.observe import source_map, version_note

    file = Path(path)
    if not file.is_file():
        raise BadInput(f"no such recording: {path}")
    try:
        header, calls = read_recorded(file)
    except (OSError, EOFError, ValueError, KeyError, IndexError, TypeError, StopIteration) as e:
        raise BadInput(f"{path} is not a recording of CUDA launches (scripts/record_cuda_launches.py): {type(e).__name__}") from None
    if call is not None:
        picked = [c for c in calls if c.call == call]
        if not picked:
            raise BadInput(f"{path} holds no call {call!r}; it holds: {', '.join(c.call for c in calls)}")
        calls = picked
    notes: list[str] = []
    sources, context = source_map(source, notes)
    tree = launch_tree(header, calls, sources)
    notes.extend(version_note(header.get("torch"), context))
    return CallTree(tree.root, tree.notes + tuple(notes), tree.meta)
