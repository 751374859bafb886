"""Benchmark `kernelmap trace`.

1. Tracing the ResNet-50 example's forward (batch 1, CPU) with full
   resolution and the summary printed, against the same run under a bare
   `torch.profiler.profile(with_stack=True)` with `key_averages().table()`
   printed. Goal: at most 1.5x.
2. Importing a synthesised GPU trace of about 100 MB (Kineto format:
   Python frames, nested aten ops, runtime launches, kernels joined by
   correlation ids and ac2g flows): seconds and peak memory, measured in a
   fresh process each, for the streaming reader alone, for the whole import
   (columns, resolution, summary), then for making the CallNode tree.
3. Scale (issue 18), each generated on the fly into a temporary folder:
   a synthetic trace of one million events (goal: at least 50 MB/s end to
   end, read + tree + resolution + summary, and at most 300 MB peak); a
   small .json.gz holding one 400 MB string; a 2 GB trace, summarised under a
   memory limit (the limit it needs is reported).

    python benches/bench_trace.py [--size-mb 100] [--repeat 5] [--skip-model] [--skip-import] [--scale]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import redirect_stdout
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------------------
# 1. ResNet-50 forward: kernelmap vs bare profiler
# ---------------------------------------------------------------------------


def bench_model(repeat: int) -> dict:
    import torch
    from torch.profiler import profile

    sys.path.insert(0, str(ROOT / "examples"))
    from resnet50 import example_input, resnet50

    from kernelmap.trace import trace

    torch.manual_seed(0)
    model = resnet50().eval()
    x = example_input()

    def forward():
        with torch.no_grad():
            return model(x)

    def bare() -> float:
        t = time.perf_counter()
        with profile(with_stack=True) as prof:
            forward()
        with redirect_stdout(io.StringIO()):
            print(prof.key_averages().table())
        return time.perf_counter() - t

    def kernelmap() -> float:
        t = time.perf_counter()
        result = trace(forward)
        with redirect_stdout(io.StringIO()):
            print(result.summary().to_text())
        return time.perf_counter() - t

    forward()
    bare(), kernelmap()  # warm: first profiler start, catalog cache, dispatcher tables
    b, k = [], []
    for _ in range(repeat):  # interleaved, so machine noise hits both
        b.append(bare())
        k.append(kernelmap())
    t = time.perf_counter()
    for _ in range(repeat):
        forward()
    plain = (time.perf_counter() - t) / repeat
    return {
        "forward_s": plain,
        "bare_profiler_s": statistics.median(b),
        "kernelmap_s": statistics.median(k),
        "ratio": statistics.median(k) / statistics.median(b),
        "ratio_of_minima": min(k) / min(b),  # the least disturbed run of each: a steadier figure on a busy machine
        "bare_all": b,
        "kernelmap_all": k,
    }


# ---------------------------------------------------------------------------
# 2. A large synthetic GPU trace
# ---------------------------------------------------------------------------

_KERNELS = [
    ("aten::cudnn_convolution", "sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x64x16_stage4_warpsize2x2x1_g1_tensor16x8x8"),
    ("aten::native_batch_norm", "void at::native::batch_norm_collect_statistics_kernel<at::native::InvStd, float, float, float, int>(at::GenericPackedTensorAccessor<float const, 3ul, at::RestrictPtrTraits, int>, float, float)"),
    ("aten::clamp_min_", "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::clamp_min_scalar_kernel_impl(at::TensorIteratorBase&, c10::Scalar)::{lambda()#1}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}, std::array<char*, 2ul> >(int, float, std::array<char*, 2ul>)"),
    ("aten::add_", "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul>)"),
    ("aten::addmm", "ampere_sgemm_128x64_tn"),
]


def synthesise(path: Path, size_mb: float | None = None, events: int | None = None) -> int:
    """Write a Kineto-format trace of about `size_mb` MB, or of about `events`
    events (whole steps of 2,386 events); returns its event count."""
    target = size_mb * 1024 * 1024 if size_mb is not None else float("inf")
    wanted = events if events is not None else float("inf")
    n = 0
    ts = 1_000_000.0
    gpu_ts = ts
    corr = 0
    ext = 0
    with open(path, "w") as f:
        f.write('{"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}],\n"traceEvents": [\n')
        first = True

        def emit(e: dict) -> None:
            nonlocal first, n
            if not first:
                f.write(",\n")
            first = False
            f.write(json.dumps(e))
            n += 1

        emit({"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "thread 1 (python)"}})
        step = 0
        while f.tell() < target and n < wanted:
            step_start = ts
            emit({"ph": "X", "cat": "python_function", "name": "train.py(40): step", "pid": 1, "tid": 1, "ts": ts, "dur": 53 * 5 * 60.0, "args": {"Python id": step}})
            for layer in range(53):
                for kind, (op, kernel) in enumerate(_KERNELS):
                    t0 = step_start + (layer * 5 + kind) * 60.0 + 1
                    ext += 1
                    corr += 1
                    mod = {"Conv2d": 0, "BatchNorm2d": 1, "ReLU": 2}.get(("Conv2d", "BatchNorm2d", "ReLU", "Add", "Linear")[kind], None)
                    emit({"ph": "X", "cat": "python_function", "name": f"nn.Module: {('Conv2d', 'BatchNorm2d', 'ReLU', 'Identity', 'Linear')[kind]}_{layer}", "pid": 1, "tid": 1, "ts": t0, "dur": 55.0, "args": {"Python module id": mod}})
                    emit({"ph": "X", "cat": "python_function", "name": "torch/nn/functional.py(2800): fn", "pid": 1, "tid": 1, "ts": t0 + 1, "dur": 52.0, "args": {}})
                    emit({"ph": "X", "cat": "cpu_op", "name": op, "pid": 1, "tid": 1, "ts": t0 + 2, "dur": 50.0,
                          "args": {"External id": ext, "Input Dims": [[32, 64, 56, 56], [64, 64, 3, 3]], "Input type": ["float", "float"],
                                   "Input Strides": [[200704, 3136, 56, 1], [576, 9, 3, 1]], "Concrete Inputs": ["", ""]}})
                    emit({"ph": "X", "cat": "cpu_op", "name": "aten::empty", "pid": 1, "tid": 1, "ts": t0 + 3, "dur": 2.0,
                          "args": {"External id": ext, "Input Dims": [[], [], [], [], [], []], "Input type": ["ScalarList", "Scalar", "Scalar", "", "", ""]}})
                    emit({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": t0 + 10, "dur": 5.0, "args": {"correlation": corr, "External id": ext}})
                    gpu_ts = max(gpu_ts, t0 + 12)
                    emit({"ph": "X", "cat": "kernel", "name": kernel, "pid": 0, "tid": 7, "ts": gpu_ts, "dur": 20.0,
                          "args": {"correlation": corr, "External id": ext, "device": 0, "stream": 7, "grid": [80, 1, 1], "block": [128, 1, 1]}})
                    emit({"ph": "s", "id": corr, "pid": 1, "tid": 1, "ts": t0 + 10, "cat": "ac2g", "name": "ac2g"})
                    emit({"ph": "f", "id": corr, "pid": 0, "tid": 7, "ts": gpu_ts, "cat": "ac2g", "name": "ac2g", "bp": "e"})
                    gpu_ts += 21
            ts = step_start + 53 * 5 * 60.0 + 100
            step += 1
        f.write('\n], "traceName": "synthetic"}\n')
    return n


_CHILD = r"""
import json, resource, sys, time
from pathlib import Path
mode, path = sys.argv[1], Path(sys.argv[2])
from kernelmap.trace import load
from kernelmap.trace.reader import read_batches
import kernelmap.catalog, kernelmap.dispatch, torch  # imports outside the measurement
if mode == "full":
    from kernelmap.catalog import load_catalog
    load_catalog()
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t = time.perf_counter()
if mode == "reader":
    n = sum(len(b) for b in read_batches(path))
    extra = {"events": n}
    elapsed = time.perf_counter() - t
else:
    tr = load(path)
    t_load = time.perf_counter() - t
    s = tr.summary()
    s.to_text()
    elapsed = time.perf_counter() - t
    t = time.perf_counter()
    nodes = sum(1 for _ in tr.tree.walk())  # the CallNode tree, made on demand
    extra = {"load_s": t_load, "nodes": nodes, "ops": len(s.ops), "tree_s": time.perf_counter() - t}
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"seconds": elapsed, "peak_rss_mb": peak / 1024, "baseline_rss_mb": base / 1024,
                  "added_rss_mb": (peak - base) / 1024, **extra}))
"""


def bench_import(size_mb: int) -> dict:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "big.json"
        t = time.perf_counter()
        events = synthesise(path, size_mb)
        made = time.perf_counter() - t
        size = path.stat().st_size
        results = {"file_mb": size / 2**20, "events": events, "synthesis_s": made}
        for mode in ("reader", "full"):
            out = subprocess.run([sys.executable, "-c", _CHILD, mode, str(path)], capture_output=True, text=True, env=dict(os.environ))
            if out.returncode != 0:
                raise SystemExit(f"{mode} import failed:\n{out.stderr}")
            results[mode] = json.loads(out.stdout.strip().splitlines()[-1])
        return results


# ---------------------------------------------------------------------------
# 3. Scale: a million events, one 400 MB string, 2 GB
# ---------------------------------------------------------------------------

_SCALE_CHILD = r"""
import json, resource, sys, time
t_process = time.perf_counter()
from pathlib import Path
path, limit_mb = Path(sys.argv[1]), int(sys.argv[2])
if limit_mb:
    resource.setrlimit(resource.RLIMIT_AS, (limit_mb << 20, limit_mb << 20))
from kernelmap.trace import load
t_imported = time.perf_counter()
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t = time.perf_counter()
tr = load(path)
s = tr.summary()
s.to_text()
elapsed = time.perf_counter() - t
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"seconds": elapsed, "process_s": time.perf_counter() - t_process, "import_s": t_imported - t_process,
                  "peak_rss_mb": peak / 1024, "baseline_rss_mb": base / 1024, "ops": len(s.ops)}))
"""


def _scale_run(path: Path, limit_mb: int = 0) -> dict:
    out = subprocess.run([sys.executable, "-c", _SCALE_CHILD, str(path), str(limit_mb)], capture_output=True, text=True)
    if out.returncode != 0:
        tail = (out.stderr.strip().splitlines() or ["?"])[-1]
        return {"failed": tail[:200]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def _one_big_string(path: Path, size_mb: int) -> None:
    """A .json.gz whose one kernel event has a name of `size_mb` MB (the file itself stays small)."""
    import gzip

    with gzip.open(path, "wt", compresslevel=6) as f:
        f.write('{"schemaVersion": 1, "traceEvents": [\n')
        f.write(json.dumps({"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 0, "dur": 10}) + ",\n")
        f.write('{"ph": "X", "cat": "kernel", "pid": 0, "tid": 7, "ts": 5, "dur": 2, "name": "')
        chunk = "k" * (1 << 20)
        for _ in range(size_mb):
            f.write(chunk)
        f.write('"}\n]}\n')


def bench_scale(two_gb: bool, limit_mb: int) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "million.json"
        events = synthesise(path, events=1_000_000)
        mb = path.stat().st_size / 1e6
        r = _scale_run(path)
        print(f"1. {events:,} events, {mb:.0f} MB")
        if "failed" in r:
            print(f"   failed: {r['failed']}")
        else:
            print(f"   read + tree + resolve + summary  {r['seconds']:7.2f} s = {mb / r['seconds']:6.1f} MB/s  (goal >= 50 MB/s: "
                  f"{mb / r['seconds'] / 50:.2f}x of it)")
            print(f"   whole process                    {r['process_s']:7.2f} s   (imports {r['import_s']:.2f} s)")
            print(f"   peak RSS                         {r['peak_rss_mb']:7.0f} MB  (before the load {r['baseline_rss_mb']:.0f} MB; "
                  f"goal <= 300 MB: {r['peak_rss_mb'] / 300:.2f}x of it)")
        path.unlink()

        path = Path(d) / "string.json.gz"
        _one_big_string(path, 400)
        r = _scale_run(path)
        print(f"2. one 400 MB string in a {path.stat().st_size / 1e3:.0f} KB .json.gz")
        if "failed" in r:
            print(f"   failed: {r['failed']}")
        else:
            print(f"   load + summary                   {r['seconds']:7.2f} s   peak RSS {r['peak_rss_mb']:.0f} MB "
                  f"({r['peak_rss_mb'] / 400:.2f}x the string)")
        path.unlink()

        if two_gb:
            path = Path(d) / "two-gb.json"
            t = time.perf_counter()
            events = synthesise(path, size_mb=2048)
            mb = path.stat().st_size / 1e6
            print(f"3. {mb:.0f} MB, {events:,} events (written in {time.perf_counter() - t:.0f} s), address space limited to {limit_mb} MB")
            r = _scale_run(path, limit_mb)
            if "failed" in r:
                print(f"   failed under the limit: {r['failed']}")
            else:
                print(f"   read + tree + resolve + summary  {r['seconds']:7.2f} s = {mb / r['seconds']:6.1f} MB/s   peak RSS {r['peak_rss_mb']:.0f} MB")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mb", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--skip-model", action="store_true")
    ap.add_argument("--skip-import", action="store_true")
    ap.add_argument("--scale", action="store_true", help="the scale benches (a million events, a 400 MB string)")
    ap.add_argument("--two-gb", action="store_true", help="with --scale, also a 2 GB trace (needs 2 GB of disk)")
    ap.add_argument("--limit-mb", type=int, default=8192, help="address-space limit of the 2 GB run")
    args = ap.parse_args()
    if args.scale:
        bench_scale(args.two_gb, args.limit_mb)
        return
    if not args.skip_model:
        m = bench_model(args.repeat)
        print("ResNet-50 forward, batch 1, CPU (median of %d)" % args.repeat)
        print(f"  plain forward                          {m['forward_s'] * 1000:8.1f} ms")
        print(f"  profile(with_stack) + key_averages     {m['bare_profiler_s'] * 1000:8.1f} ms")
        print(f"  kernelmap trace + resolve + summary    {m['kernelmap_s'] * 1000:8.1f} ms")
        print(f"  ratio                                  {m['ratio']:8.2f}x  (goal <= 1.5x)")
        print(f"  ratio of the fastest runs              {m['ratio_of_minima']:8.2f}x  "
              f"({min(m['kernelmap_all']) * 1000:.0f} / {min(m['bare_all']) * 1000:.0f} ms)")
    if not args.skip_import:
        r = bench_import(args.size_mb)
        print(f"Import of a synthetic GPU trace: {r['file_mb']:.1f} MB, {r['events']} events (written in {r['synthesis_s']:.1f} s)")
        rd, full = r["reader"], r["full"]
        print(f"  streaming reader only                  {rd['seconds']:8.2f} s   peak RSS +{rd['added_rss_mb']:.0f} MB")
        print(f"  load (columns + resolve) + summary     {full['seconds']:8.2f} s   (load {full['load_s']:.2f} s)")
        print(f"  then the CallNode tree, on demand      {full['tree_s']:8.2f} s   ({full['nodes']} nodes); peak RSS of all"
              f" {full['peak_rss_mb']:.0f} MB (+{full['added_rss_mb']:.0f} MB over torch and the catalog)")


if __name__ == "__main__":
    main()
