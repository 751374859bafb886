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
3. Scale (--scale): the real traces of tests/trace/data, 1M synthetic
   events, and with --big 10M, with --two-gb a 2 GB trace built from copies
   of the largest real one (each generated into a temporary folder): for
   every view as a user runs it (summary, text tree, --html, --json,
   --json --full-tree, --export-tree), wall and CPU seconds, MB of JSON per
   CPU second and peak RSS, each in a fresh process; the store's import,
   re-open, and the text tree, --html and --json re-opened (the summary
   twice: the first read of a trace resolves its distinct names, once, into
   the cache); a typed msgspec decode of the same file keeping only the fields
   kernelmap reads (the parse floor); and HTA 0.5.0 loading the same file
   (--hta FOLDER holding it).

    python benches/bench_trace.py [--size-mb 100] [--repeat 5] [--skip-model] [--skip-import]
    python benches/bench_trace.py --scale [--big] [--two-gb] [--hta FOLDER]
    python benches/bench_trace.py --scale --synthetic-only --events 1000000 --events 4000000 \
        --view summary --view "text tree" --view=--html --view=--json --reference OTHER/src
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
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
# 3. Scale: real traces, a 2 GB trace built from them, 1M and 10M events
# ---------------------------------------------------------------------------

DATA = ROOT / "tests" / "trace" / "data"
REAL = [*sorted(DATA.glob("hta-*.json.gz")), ROOT / "tests" / "trace" / "cuda" / "resnet50_train_fp32_bench.json.gz"]

# Each view as a user runs it, in a fresh process: the import (read, columns,
# resolution) and what the view adds. `--no-store`: the JSON is read each time.
VIEWS = {
    "summary": ["--no-tree", "--no-store"],
    "text tree": ["--no-store"],
    "--html": ["--no-store", "--no-tree", "--no-summary", "--html", "{out}.html"],
    "--json": ["--no-store", "--json"],
    "--json --full-tree": ["--no-store", "--json", "--full-tree"],
    "--export-tree": ["--no-store", "--no-tree", "--no-summary", "--export-tree", "{out}.parquet"],
}

_FLOOR = r"""
import sys, time, gzip, msgspec
t = time.process_time()
class Args(msgspec.Struct, rename={"external_id": "External id", "input_dims": "Input Dims", "input_type": "Input type"}):
    correlation: int | str | None = None
    external_id: int | str | None = None
    device: int | str | None = None
    stream: int | str | None = None
    grid: msgspec.Raw = None
    block: msgspec.Raw = None
    input_dims: msgspec.Raw = None
    input_type: msgspec.Raw = None
class Event(msgspec.Struct):
    ph: str | None = None
    cat: str | None = None
    name: object = None
    pid: int | str | None = None
    tid: int | str | None = None
    ts: float | None = None
    dur: float | None = None
    id: object = None
    args: Args | None = None
class Trace(msgspec.Struct):
    traceEvents: list[Event]
path = sys.argv[1]
data = gzip.open(path).read() if path.endswith(".gz") else open(path, "rb").read()
n = len(msgspec.json.decode(data, type=Trace).traceEvents)
print(n, time.process_time() - t)  # CPU seconds of the read and the decode, not the interpreter's start
"""

_HTA = r"""
import sys, logging
logging.disable(logging.CRITICAL)
from hta.trace_analysis import TraceAnalysis
TraceAnalysis(trace_dir=sys.argv[1])
"""

_REOPEN = r"""
import sys, time, json
from kernelmap.trace import load
t = time.perf_counter()
tr = load(sys.argv[1], store=True)
opened = time.perf_counter() - t
s = tr.summary()
print(json.dumps({"open_s": opened, "summary_s": time.perf_counter() - t - opened, "stored": tr.stored is not None}))
"""


def run_measured(cmd: list[str], env: dict | None = None, capture: bool = False) -> dict:
    """Wall and CPU seconds (user + system) and peak RSS (MB) of one command, in a fresh process."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE if capture else subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env={**os.environ, **(env or {})})
    out = proc.stdout.read() if capture and proc.stdout else b""
    err = proc.stderr.read() if proc.stderr else b""
    _, status, usage = os.wait4(proc.pid, 0)
    rc = os.waitstatus_to_exitcode(status)
    return {"wall_s": time.perf_counter() - start, "cpu_s": usage.ru_utime + usage.ru_stime, "peak_mb": usage.ru_maxrss / 1024,
            "rc": rc, "out": out.decode(errors="replace"), "err": err.decode(errors="replace")[-300:]}


def json_mb(path: Path) -> float:
    """MB of JSON text (decompressed for .gz)."""
    if path.name.endswith(".gz"):
        import gzip

        with gzip.open(path) as f:
            n = 0
            while chunk := f.read(1 << 24):
                n += len(chunk)
        return n / 1e6
    return path.stat().st_size / 1e6


def build_from_real(path: Path, size_mb: int, source: Path = DATA / "hta-trace_diff-control-control.json.gz") -> int:
    """A trace of about `size_mb` MB made of copies of a real one, each copy
    shifted after the last in time, its ids (correlation, external id, flow
    id) moved apart so that no two copies join. Returns the events."""
    import gzip

    with gzip.open(source) as f:
        doc = json.load(f)
    events = doc.pop("traceEvents")
    xs = [e for e in events if isinstance(e.get("ts"), (int, float))]
    span = max(e["ts"] + (e.get("dur") or 0) for e in xs) - min(e["ts"] for e in xs) + 1000
    texts = []  # per event: a template with the shifted fields put in per copy
    for e in events:
        texts.append(e)
    n = 0
    with open(path, "w") as out:
        head = {k: v for k, v in doc.items()}
        out.write("{" + ", ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in head.items()) + (", " if head else "") + '"traceEvents": [\n')
        copy = 0
        while out.tell() < size_mb * 1e6:
            shift = copy * span
            for e in texts:
                if e.get("ph") == "M" and copy:
                    continue
                f = dict(e)
                if isinstance(f.get("ts"), (int, float)):
                    f["ts"] = f["ts"] + shift
                if isinstance(f.get("id"), int):
                    f["id"] = f["id"] + copy * 10_000_000
                a = f.get("args")
                if isinstance(a, dict):
                    a = dict(a)
                    for k in ("correlation", "External id"):
                        if isinstance(a.get(k), int):
                            a[k] = a[k] + copy * 10_000_000
                    f["args"] = a
                out.write(("" if n == 0 else ",\n") + json.dumps(f))
                n += 1
            copy += 1
        out.write("\n]}\n")
    return n


# A trace above this size is imported twice (the summary without the store,
# then into the store) and its other views are measured re-opened from the
# store only (those of every trace are too): each import of one takes minutes.
LARGE_MB = 1000
STORED_VIEWS = ("text tree", "--html", "--json")


def bench_scale(two_gb: bool, big: bool, hta_path: str | None, full_tree_max: int, small: bool = True,
                given: tuple[Path, ...] = (), reference: str | None = None, events: tuple[int, ...] = (),
                views: tuple[str, ...] = (), real: bool = True) -> None:
    """Every view of every input: MB/s of JSON per core (CPU time), wall time,
    peak RSS; the parse floor and HTA on the same inputs. With `reference`
    (another checkout's `src`), each view is run with it too, right after,
    and the ratios printed (`ref` rows); `events`: the synthetic sizes
    (default 1M, and 10M with `big`); `views`: only these views."""
    from kernelmap import env

    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        cache = d / "cache"
        cache.mkdir()
        for kept in env.cache_dir().iterdir() if env.cache_dir().is_dir() else ():
            if kept.name != "trace":  # the catalog and generated files are reused; the store starts empty
                os.symlink(kept, cache / kept.name)
        environ = {"KERNELMAP_CACHE_DIR": str(cache), "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
        km = [sys.executable, "-m", "kernelmap", "trace", "--from"]
        run_measured([*km, str(REAL[0]), "--no-tree", "--no-store"], environ)  # fills the dispatcher's cache once
        inputs: list[tuple[str, Path, int | None]] = [(p.name.split(".")[0][:40], p, None) for p in REAL] if small and real else []
        sizes = events or ((1_000_000,) if small else ()) + ((10_000_000,) if big else ())
        synthetic = [(f"{n / 1e6:g}M synthetic events", n) for n in sizes]
        ref_environ = {**environ, "PYTHONPATH": os.pathsep.join([reference, os.environ.get("PYTHONPATH", "")])} if reference else None
        if ref_environ:
            run_measured([*km, str(REAL[0]), "--no-tree", "--no-store"], ref_environ)
        for label, events in synthetic:
            p = d / f"{events}.json"
            n = synthesise(p, events=events)
            inputs.append((label, p, n))
        if two_gb:
            p = d / "two-gb.json"
            n = build_from_real(p, 2048)
            inputs.append(("2 GB built from the real traces", p, n))
        inputs += [(p.name[:40], p, None) for p in given]
        print(f"{'input':42} {'MB':>7} {'view':22} {'wall s':>8} {'cpu s':>8} {'MB/s/core':>9} {'peak MB':>8}", flush=True)
        for label, path, n in inputs:
            mb = json_mb(path)
            large = mb > LARGE_MB

            def line(view: str, r: dict, extra: str = "") -> None:
                status = "" if r["rc"] == 0 else f"  FAILED: {r['err'].strip().splitlines()[-1] if r['err'].strip() else r['rc']}"
                rate = f"{mb / r['cpu_s']:9.1f}" if extra == "" else f"{'':>9}"
                print(f"{label:42} {mb:7.1f} {view:22} {r['wall_s']:8.2f} {r['cpu_s']:8.2f} {rate} {r['peak_mb']:8.0f}{status}{extra}", flush=True)

            for view, args in VIEWS.items():
                if view == "--json --full-tree" and (n or 0) > full_tree_max:
                    continue
                if large and view != "summary":
                    continue
                if views and view not in views:
                    continue
                args = [a.replace("{out}", str(d / "out")) for a in args]
                new = run_measured([*km, str(path), *args], environ)
                line(view, new)
                if view == "summary":  # the first read resolved the trace's names into the cache: the import alone now
                    new = run_measured([*km, str(path), *args], environ)
                    line("summary (names cached)", new)
                if ref_environ:
                    if view == "summary":
                        run_measured([*km, str(path), *args], ref_environ)  # its names cached too
                    ref = run_measured([*km, str(path), *args], ref_environ)
                    line(f"{view} (ref)", ref, f"   ref/new: cpu {ref['cpu_s'] / new['cpu_s']:.2f}x, peak {ref['peak_mb'] / new['peak_mb']:.2f}x"
                         f" ({mb / ref['cpu_s']:.1f} MB/s/core)")
            if views:
                floor = run_measured([sys.executable, "-c", _FLOOR, str(path)], environ, capture=True)
                if floor["rc"] == 0:
                    count, secs = floor["out"].split()
                    print(f"{label:42} {mb:7.1f} {'parse floor (msgspec)':22} {floor['wall_s']:8.2f} {float(secs):8.2f} {mb / float(secs):9.1f} {floor['peak_mb']:8.0f}", flush=True)
                if path.parent == d:
                    path.unlink()
                continue
            # the store: import once, then re-open
            line("import into store", run_measured([*km, str(path), "--no-tree"], environ))
            reopen = run_measured([sys.executable, "-c", _REOPEN, str(path)], environ, capture=True)
            ro = json.loads(reopen["out"].strip().splitlines()[-1]) if reopen["rc"] == 0 else {}
            if ro:
                line("re-open + summary", reopen, f"   (open {ro['open_s']:.3f} s, summary {ro['summary_s']:.2f} s, wall)")
            for view in STORED_VIEWS:  # the views, each re-opened from the store
                args = [a.replace("{out}", str(d / "out")) for a in VIEWS[view] if a != "--no-store"]
                line(f"{view} (stored)", run_measured([*km, str(path), *args], environ), " ")
            floor = run_measured([sys.executable, "-c", _FLOOR, str(path)], environ, capture=True)
            if floor["rc"] == 0:
                count, secs = floor["out"].split()
                print(f"{label:42} {mb:7.1f} {'parse floor (msgspec)':22} {floor['wall_s']:8.2f} {float(secs):8.2f} {mb / float(secs):9.1f} {floor['peak_mb']:8.0f}", flush=True)
            if hta_path is not None and mb < 400:  # HTA holds every event in pandas: not run on the largest
                hd = d / "hta"
                hd.mkdir(exist_ok=True)
                for old in hd.iterdir():
                    old.unlink()
                os.symlink(path, hd / path.name)
                h = run_measured([sys.executable, "-c", _HTA, str(hd)], {"PYTHONPATH": hta_path})
                if h["rc"] == 0:
                    print(f"{label:42} {mb:7.1f} {'HTA 0.5.0 load':22} {h['wall_s']:8.2f} {h['cpu_s']:8.2f} {mb / h['cpu_s']:9.1f} {h['peak_mb']:8.0f}", flush=True)
                else:
                    print(f"{label:42} {mb:7.1f} {'HTA 0.5.0 load':22} failed: {h['err'].strip().splitlines()[-1] if h['err'].strip() else h['rc']}")
            if path.parent == d:
                path.unlink()  # the inputs made here are large: one on disk at a time
            shutil.rmtree(cache / "trace" / "store", ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mb", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--skip-model", action="store_true")
    ap.add_argument("--skip-import", action="store_true")
    ap.add_argument("--scale", action="store_true", help="every view of the real traces, 1M synthetic events (and --big, --two-gb)")
    ap.add_argument("--big", action="store_true", help="with --scale, also 10M synthetic events (about 2 GB)")
    ap.add_argument("--two-gb", action="store_true", help="with --scale, also a 2 GB trace built from the real ones (needs 2 GB of disk)")
    ap.add_argument("--hta", default=None, help="with --scale, a folder holding HolisticTraceAnalysis==0.5.0 (PYTHONPATH for it)")
    ap.add_argument("--large-only", action="store_true", help="with --scale, only --big and --two-gb (not the real traces and 1M events)")
    ap.add_argument("--input", action="append", default=[], help="with --scale, also this trace file (kept)")
    ap.add_argument("--full-tree-max", type=int, default=1_500_000, help="events above which --json --full-tree is not run")
    ap.add_argument("--reference", default=None, help="with --scale, another checkout's src folder: each view run with it too, ratios printed")
    ap.add_argument("--events", type=int, action="append", default=[], help="with --scale, synthetic events (repeatable; default 1M)")
    ap.add_argument("--view", action="append", default=[], choices=list(VIEWS), help="with --scale, only this view (repeatable; no store rows)")
    ap.add_argument("--synthetic-only", action="store_true", help="with --scale, not the real traces")
    args = ap.parse_args()
    if args.scale:
        bench_scale(args.two_gb, args.big, args.hta, args.full_tree_max, small=not args.large_only, given=tuple(Path(p) for p in args.input),
                    reference=args.reference, events=tuple(args.events), views=tuple(args.view), real=not (args.large_only or args.synthetic_only))
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
