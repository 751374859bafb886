"""Record the runtime golden set: the native stacks that really run, on CPU,
for every operator of PyTorch's OpInfo database (the wheel's
torch.testing._internal.common_methods_invocations), with their own sample
inputs, under gdb (kernelmap.observe). Not run by `make test`; the tests and
benches/bench_observe_golden.py read what it writes.

    .venv/bin/python scripts/record_observed_golden.py                 # all OpInfos -> tests/golden/observed-cpu.jsonl.gz
    .venv/bin/python scripts/record_observed_golden.py --only add,mm --out /tmp/x.jsonl.gz

Each batch of OpInfos runs in one process, so gdb reads libtorch_cpu's
symbols once per batch. Every function that does work (Note [the functions
that do the work] in kernelmap.observe.symbols) gets a one-shot breakpoint,
re-armed before each OpInfo's samples run; each hit inside a call records its stack from the
Python binding (THPVariable_*) down. One thread (torch.set_num_threads(1)),
so `parallel_for` bodies run in the calling thread and every stack reaches
the operator's entry; grad mode on, no input requiring grad, as a user's
plain call; float32 where the OpInfo supports it, else its first CPU dtype;
the first SAMPLES sample inputs of each OpInfo.

Output: JSON Lines, gzip. Line 1 {"t": "header", torch, git_version,
capability, ...}; line 2 {"t": "frames", "frames": [[demangled name,
library, entry offset], ...]} (each frame once); then one {"t": "call",
opinfo, variant, dtype, samples, error?, stacks: [[frame id, ...], ...]} per
call, each stack outermost first (the binding) down to the function the
breakpoint named.
"""

from __future__ import annotations

import argparse
import bisect
import gzip
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = 2
BATCH = 120


def prepare(spec, torch):
    """In the debuggee: the calls of this batch, each (what, function)."""
    from torch.testing._internal.common_methods_invocations import op_db

    wanted = {tuple(x) for x in spec["ops"]}
    calls = []
    for op in op_db:
        if (op.name, op.variant_test_name) not in wanted:
            continue
        dtypes = op.supported_dtypes("cpu")
        dtype = torch.float32 if torch.float32 in dtypes else sorted(dtypes, key=str)[0]
        what = {"opinfo": op.name, "variant": op.variant_test_name, "dtype": str(dtype).replace("torch.", "")}
        try:
            samples = []
            for s in op.sample_inputs("cpu", dtype, requires_grad=False):
                samples.append(s)
                if len(samples) >= spec.get("samples", SAMPLES):
                    break
        except Exception as e:
            calls.append((dict(what, sample=-1, error=f"sample inputs: {type(e).__name__}"), lambda: None))
            continue
        what = dict(what, samples=len(samples))
        calls.append((what, _runs(op, samples, what)))
    return calls


def _runs(op, samples, what):
    """One call per OpInfo: its samples in turn; a sample that raises is counted, not fatal."""

    def run():
        failed = []
        for k, s in enumerate(samples):
            try:
                op.op(s.input, *s.args, **s.kwargs)
            except Exception as e:
                failed.append(f"sample {k}: {type(e).__name__}")
        if failed:
            what["error"] = "; ".join(failed)

    return run


def op_names():
    """(name, variant) of every OpInfo with a CPU dtype, in op_db's order (in a child: it imports torch)."""
    code = (
        "import json\nfrom torch.testing._internal.common_methods_invocations import op_db\n"
        "print(json.dumps([[o.name, o.variant_test_name] for o in op_db if o.supported_dtypes('cpu')]))"
    )
    return json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()[-1])


def ops_structs():
    """at::_ops struct name (`add_Tensor`) -> operator (`aten::add.Tensor`), from the installed torch's
    schemas (only aten's operators have at::_ops structs; prims::exp is no at::_ops::exp)."""
    code = (
        "import json, torch\nd={}\n"
        "for s in torch._C._jit_get_all_schemas():\n"
        "    ns, _, name = s.name.partition('::')\n"
        "    if ns != 'aten': continue\n"
        "    d.setdefault(name + ('_' + s.overload_name if s.overload_name else ''), s.name + ('.' + s.overload_name if s.overload_name else ''))\n"
        "print(json.dumps(d))"
    )
    return json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()[-1])


def trim(frames):
    """The part of a stack (innermost first) from the binding down, outermost
    first; None when it holds no operator entry (a call outside an operator)."""
    names = [f.name or "" for f in frames]
    entry = max((i for i, n in enumerate(names) if n.startswith("at::_ops::")), default=None)
    if entry is None:
        return None
    top = max((i for i, f in enumerate(frames) if f.lib == "libtorch_python.so"), default=entry)
    return list(reversed(frames[: max(top, entry) + 1]))


def record_batch(ops, offsets, timeout, samples):
    from kernelmap.observe.capture import capture
    from kernelmap.observe.symbols import HOT

    spec = {"mode": "batch", "prepare": "record_observed_golden:prepare", "path": [str(ROOT / "scripts")], "ops": ops, "threads": 1, "samples": samples}
    return capture(
        spec,
        offsets={"libtorch_cpu.so": offsets},
        hot=HOT,
        one_shot=True,
        windows=True,
        python=False,
        cut_at_python=True,
        need=("at::_ops::",),
        timeout=timeout,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(ROOT / "tests/golden/observed-cpu.jsonl.gz"))
    parser.add_argument("--only", help="comma-separated OpInfo names")
    parser.add_argument("--batch", type=int, default=BATCH)
    parser.add_argument("--samples", type=int, default=SAMPLES)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=3000)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "src"))
    from concurrent.futures import ThreadPoolExecutor

    import torch

    from kernelmap.observe.symbols import read_symbols, work_offsets

    library = Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"
    symbols = read_symbols(library)
    offsets = work_offsets(symbols)
    starts = [s.offset for s in symbols]

    def entry(f):
        """The entry offset of a libtorch_cpu frame's function."""
        if f.lib != library.name or f.off is None:
            return None
        return starts[bisect.bisect_right(starts, f.off) - 1]

    print(f"{len(offsets)} functions to break on in {library.name}", file=sys.stderr)
    ops = op_names()
    if args.only:
        keep = set(args.only.split(","))
        ops = [o for o in ops if o[0] in keep]
    batches = [ops[i : i + args.batch] for i in range(0, len(ops), args.batch)]
    started = time.monotonic()

    def one(batch):
        t = time.monotonic()
        cap = record_batch(batch, offsets, args.timeout, args.samples)
        print(f"batch of {len(batch)}: {len(cap.stacks)} stacks in {time.monotonic() - t:.0f}s", file=sys.stderr, flush=True)
        return cap

    with ThreadPoolExecutor(args.jobs) as pool:
        captures = list(pool.map(one, batches))
    structs = ops_structs()
    frames: dict[tuple, int] = {}
    calls = []
    for cap in captures:
        windows = cap.info.get("windows") or []
        per_window: dict[int, list] = {}
        for st in cap.stacks:
            part = trim(st.frames)
            if part is None:
                continue
            ids = [frames.setdefault((f.name, f.lib, entry(f)), len(frames)) for f in part]
            per_window.setdefault(st.window, [])
            if ids not in per_window[st.window]:
                per_window[st.window].append(ids)
        for i, what in enumerate(windows):
            calls.append(dict(what, t="call", stacks=per_window.get(i, [])))
    info = captures[0].info if captures else {}
    table = [list(k) for k, _ in sorted(frames.items(), key=lambda kv: kv[1])]
    gdb_version = subprocess.run(["gdb", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    header = {
        "t": "header",
        "kernelmap": "observed-golden/1",
        "torch": info.get("torch"),
        "git_version": info.get("git_version"),
        "capability": info.get("capability"),
        "threads": 1,
        "samples_per_opinfo": args.samples,
        "recorded_with": gdb_version,
        "ops_structs": {k: v for k, v in structs.items() if any(f"at::_ops::{k}::" in (n or "") for n, _, _ in table)},
        "how": "one-shot breakpoints on the functions that do the work (kernelmap.observe.symbols), re-armed per call",
    }
    out = Path(args.out)
    tmp = out.with_suffix(".tmp")
    with gzip.open(tmp, "wt") as f:
        f.write(json.dumps(header) + "\n")
        f.write(json.dumps({"t": "frames", "frames": table}) + "\n")
        for c in calls:
            f.write(json.dumps(c) + "\n")
    os.replace(tmp, out)
    entries = {structs.get(n.split("::")[2]) for n, _, _ in table if n and n.startswith("at::_ops::")}
    print(f"{len(calls)} calls, {len(table)} frames, {len(entries)} operators, {out.stat().st_size // 1024} KiB in {time.monotonic() - started:.0f}s -> {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
