"""Record, on a CUDA build with a GPU, the host stack of every kernel launch
of a few common calls, and the profiler's record of the same launches: the
recorded half of `kernelmap.observe.cuda` (Note [joining launches to
kernels]). Not run by `make test`; tests/observe/test_cuda.py reads what it
writes.

    python scripts/record_cuda_launches.py --out tests/observe/data/cuda-launches.jsonl.gz --gdb cuda-gdb

Each call is warmed up first (cuDNN's and cuBLAS's heuristics, lazy module
loading), outside any window; then it runs once inside a window, under
torch.profiler, while the debugger stops at each launch function (the
runtime's cudaLaunchKernel and the driver's cuLaunchKernel, where cuDNN's
and cuBLAS's own static runtimes end) and walks the host stack there. The
profiler's trace of that window is cut to what the join reads: its launch
events (cuda_runtime and cuda_driver), the GPU kernels they ran, and the
cpu_op events around them.

Output: JSON Lines, gzip. Line 1 {"t": "header", torch, git_version, cuda,
gpu, recorded_with, plain_s, observed_s}; line 2 {"t": "frames", "frames":
[[demangled name, library], ...]}; then one {"t": "call", what, stacks:
[{"brk", "frames": [frame id, ...]}], trace: {launches, kernels, ops}} per
call, each stack outermost first down to the launch function, in the order
the launches ran.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BREAKS = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx")
LAUNCH_EVENTS = {"cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx", "cudaLaunchCooperativeKernel"}


def calls(torch, dev="cuda"):
    """(name, function) of each recorded call, on the GPU, float32 unless named."""
    F = torch.nn.functional
    g = torch.Generator(device=dev).manual_seed(0)

    def r(*shape, dtype=torch.float32):
        return torch.randn(*shape, device=dev, generator=g, dtype=dtype)

    conv = torch.nn.Conv2d(3, 16, 3, padding=1).to(dev)
    linear = torch.nn.Linear(256, 128).to(dev)
    x4, a, b, v = r(8, 3, 32, 32), r(256, 256), r(256, 256), r(4096)
    q = r(2, 4, 128, 64, dtype=torch.float16)
    emb = torch.nn.Embedding(1000, 64).to(dev)
    idx = torch.randint(0, 1000, (32,), device=dev)
    return [
        ("torch.nn.Conv2d", lambda: conv(x4)),
        ("torch.mm", lambda: torch.mm(a, b)),
        ("torch.nn.Linear", lambda: linear(a)),
        ("torch.bmm", lambda: torch.bmm(a.view(4, 64, 256), b.view(4, 256, 64))),
        ("torch.matmul float16", lambda: torch.matmul(a.half(), b.half())),
        ("torch.add", lambda: torch.add(v, v)),
        ("torch.relu", lambda: torch.relu(v)),
        ("torch.sum", lambda: torch.sum(a, dim=1)),
        ("torch.softmax", lambda: torch.softmax(a, dim=-1)),
        ("torch.nn.functional.layer_norm", lambda: F.layer_norm(a, (256,))),
        ("torch.sort", lambda: torch.sort(v)),
        ("torch.cumsum", lambda: torch.cumsum(v, 0)),
        ("torch.nn.Embedding", lambda: emb(idx)),
        ("torch.nn.functional.scaled_dot_product_attention float16", lambda: F.scaled_dot_product_attention(q, q, q)),
    ]


def prepare(spec, torch):
    """In the debuggee: each call warmed up, then wrapped to run under the profiler."""
    out = Path(spec["traces"])
    device = spec.get("device", "cuda")
    prepared = []
    only = spec.get("only")
    for name, fn in calls(torch, device):
        if only and name not in only:
            continue
        try:
            for _ in range(2):
                fn()
        except Exception as e:  # not on this GPU or build: said in the record, not recorded
            print(f"{name}: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}", file=sys.stderr)
            continue
        if device == "cuda":
            torch.cuda.synchronize()
        prepared.append(({"call": name}, _profiled(torch, fn, out / f"trace-{len(prepared)}.json", device)))
    return prepared


def _profiled(torch, fn, path, device):
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])

    def run():
        with profile(activities=activities) as prof:
            fn()
            if device == "cuda":
                torch.cuda.synchronize()
        prof.export_chrome_trace(str(path))

    return run


def cut_trace(path: Path) -> dict:
    """The part of a window's Kineto trace the join reads."""
    data = json.loads(path.read_text())
    events = data["traceEvents"] if isinstance(data, dict) else data
    launches, kernels, ops = [], [], []
    for e in events:
        cat, args = e.get("cat"), e.get("args") or {}
        if cat in ("cuda_runtime", "cuda_driver") and e.get("name") in LAUNCH_EVENTS:
            launches.append({"name": e["name"], "cat": cat, "ts": e["ts"], "dur": e.get("dur", 0), "tid": e.get("tid"), "correlation": args.get("correlation")})
        elif cat == "kernel":
            kernels.append({"name": e["name"], "ts": e["ts"], "dur": e.get("dur", 0), "correlation": args.get("correlation"), "stream": args.get("stream"),
                            "grid": args.get("grid"), "block": args.get("block")})
        elif cat == "cpu_op" and e.get("ph") == "X":
            ops.append({"name": e["name"], "ts": e["ts"], "dur": e.get("dur", 0), "tid": e.get("tid")})
    launches.sort(key=lambda e: e["ts"])
    return {"launches": launches, "kernels": kernels, "ops": ops}


def plain_seconds(spec_path: Path) -> float:
    """The same calls run without a debugger (the runner's markers are plain libc calls)."""
    started = time.monotonic()
    subprocess.run([sys.executable, str(ROOT / "src/kernelmap/observe/runner.py"), str(spec_path)], check=True,
                   env=dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "scripts"), str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])))
    return time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(ROOT / "tests/observe/data/cuda-launches.jsonl.gz"))
    parser.add_argument("--gdb", default="cuda-gdb", help="the debugger (cuda-gdb or gdb; it must have Python)")
    parser.add_argument("--timeout", type=float, default=420)
    parser.add_argument("--keep-traces", help="a folder to copy the whole traces of the first two windows to")
    parser.add_argument("--only", help="comma-separated names of the calls to record")
    parser.add_argument("--device", default="cuda", help="cuda; cpu only to try the recording itself where no GPU is")
    parser.add_argument("--breaks", default=",".join(BREAKS), help="comma-separated functions to stop at")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "src"))
    from kernelmap.observe.capture import capture

    os.environ["KERNELMAP_GDB"] = args.gdb
    tmp = Path(tempfile.mkdtemp(prefix="cuda-launches-"))
    spec = {"mode": "batch", "prepare": "record_cuda_launches:prepare", "path": [str(ROOT / "scripts")], "traces": str(tmp), "device": args.device, "only": args.only.split(",") if args.only else None}
    (tmp / "plain").mkdir()
    spec_path = tmp / "plain-spec.json"
    spec_path.write_text(json.dumps(dict(spec, traces=str(tmp / "plain"))))
    plain = plain_seconds(spec_path)
    print(f"plain run: {plain:.1f}s", file=sys.stderr, flush=True)
    started = time.monotonic()
    breaks = tuple(args.breaks.split(","))
    cap = capture(spec, breaks=breaks, max_hits=None, one_shot=False, windows=True, python=False, cut_at_python=True, timeout=args.timeout)
    observed = time.monotonic() - started
    print(f"under {args.gdb}: {len(cap.stacks)} stacks in {observed:.1f}s; unplaced {list(cap.unplaced)}; notes {list(cap.notes)[:3]}", file=sys.stderr, flush=True)
    frames: dict[tuple, int] = {}
    per_window: dict[int, list] = {}
    for st in cap.stacks:
        ids = [frames.setdefault((f.name, f.lib), len(frames)) for f in reversed(st.frames)]
        per_window.setdefault(st.window, []).append({"brk": st.brk, "frames": ids})
    records = []
    for i, what in enumerate(cap.info.get("windows") or []):
        trace = tmp / f"trace-{i}.json"
        # the debugged run's traces held no GPU activity (CUPTI under cuda-gdb, on an H200): the
        # launches are joined to the plain run's trace of the same call, by launch order
        plain_trace = tmp / "plain" / f"trace-{i}.json"
        records.append(dict(what, t="call", stacks=per_window.get(i, []), trace=cut_trace(plain_trace) if plain_trace.exists() else None,
                            trace_under_debugger=cut_trace(trace) if trace.exists() else None))
        trace = plain_trace
        if args.keep_traces and trace.exists() and i < 2:
            with open(trace, "rb") as src, gzip.open(Path(args.keep_traces, f"trace-{i}.json.gz"), "wb") as dst:
                shutil.copyfileobj(src, dst)
    import torch

    version = [line for line in subprocess.run([args.gdb, "--version"], capture_output=True, text=True).stdout.splitlines() if "gdb" in line and not line.startswith("exec")]
    header = {
        "t": "header",
        "kernelmap": "cuda-launches/1",
        "torch": cap.info.get("torch"),
        "git_version": cap.info.get("git_version"),
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if args.device == "cuda" else None,
        "gpu": torch.cuda.get_device_name(0) if args.device == "cuda" else None,
        "recorded_with": version[0] if version else args.gdb,
        "plain_s": round(plain, 2),
        "observed_s": round(observed, 2),
        "breaks": list(breaks),
        "how": "each call warmed up, then once in a window under torch.profiler, the debugger stopping at every launch function",
    }
    table = [list(k) for k, _ in sorted(frames.items(), key=lambda kv: kv[1])]
    out = Path(args.out)
    part = out.with_name(out.name + ".part")
    with gzip.open(part, "wt") as f:
        for r in [header, {"t": "frames", "frames": table}, *records]:
            f.write(json.dumps(r) + "\n")
    os.replace(part, out)
    shutil.rmtree(tmp, ignore_errors=True)
    print(f"{len(records)} calls, {sum(len(r['stacks']) for r in records)} stacks, {len(table)} frames -> {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
