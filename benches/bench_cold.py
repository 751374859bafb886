"""What a person or an agent waits for at a prompt: the CPU time of one cold
`kernelmap` process per question (`where --static`, `stack`, `path`,
`callers`) against `python -c "import torch"`, as a user has it (bytecode
compiled, caches warm). The runs are interleaved (a round is `import torch`,
then each command once), so that a busy machine slows the reference and the
commands alike; each ratio is the median over rounds of the command's CPU
over that round's `import torch`.

Goals: `where --static` at most 0.08x, `stack`, `path` and `callers` at most
0.3x. With `--against SRC` (another checkout's `src`), each command also runs
with that code in the same rounds: the two columns are before and after a
change, measured together.

    python benches/bench_cold.py [--runs N] [--cache DIR] [--against SRC] [--same]

With `--same` (and `--against`), no timing: each question of SAME is asked
of both checkouts, this one twice (its results kept on disk are written by
the first ask, read by the second), and every output must be byte-identical
to the other checkout's: a change made for speed changes no answer.

Needs the 2.6.0 test tree registered and indexed and the generated files
in the cache (`--cache`, else $KERNELMAP_CACHE_DIR, else the user cache).
"""

from __future__ import annotations

import argparse
import difflib
import os
import resource
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

COMMANDS = {  # label -> (arguments, goal as a ratio to import torch)
    "where aten::conv2d --static": (["where", "aten::conv2d", "--static"], 0.08),
    "where torch.nn.Conv2d --static --json": (["where", "torch.nn.Conv2d", "--static", "--json"], 0.08),
    "stack torch.nn.Conv2d --device cuda": (["stack", "torch.nn.Conv2d", "--device", "cuda"], 0.3),
    "stack torch.add --device cpu": (["stack", "torch.add", "--device", "cpu"], 0.3),
    "path torch.nn.Conv2d cudnnConvolutionForward": (["path", "torch.nn.Conv2d", "cudnnConvolutionForward", "--device", "cuda"], 0.3),
    "callers cpublas_gemm_impl": (["callers", "cpublas_gemm_impl"], 0.3),
    "callers cudnnConvolutionForward": (["callers", "cudnnConvolutionForward"], 0.3),
}

# What `--same` compares: each command's answer for operators of many kinds (structured, composite, stubs,
# vendor libraries, Python modules), on both devices.
_STACKED = ["torch.nn.Conv2d", "torch.add", "torch.nn.Linear", "aten::mul.Tensor", "torch.relu", "torch.sigmoid", "aten::sum.dim_IntList",
            "torch.matmul", "aten::sort", "torch.cat", "torch.nn.functional.softmax", "aten::index_select", "torch.nn.functional.gelu",
            "aten::addmm", "torch.where", "torch.exp", "aten::layer_norm", "torch.pow", "aten::clamp", "torch.nn.functional.dropout"]
SAME = [
    *(["stack", name, "--device", device] for name in _STACKED for device in ("cpu", "cuda")),
    ["path", "torch.nn.Conv2d", "cudnnConvolutionForward", "--device", "cuda"], ["path", "torch.mm", "sgemm_", "--device", "cpu"],
    ["path", "torch.add", "ufunc::add", "--device", "cpu"], ["path", "torch.nn.Linear", "cublasSgemm", "--device", "cuda"],
    ["path", "aten::mul.Tensor", "at::native::mul_kernel", "--device", "cpu"], ["path", "torch.bmm", "at::native::cpublas::gemm", "--device", "cpu"],
    *(["callers", symbol] for symbol in ("cudnnConvolutionForward", "at::native::mul_kernel", "cpublas_gemm_impl", "sgemm_",
                                         "raw_cudnn_convolution_forward_out", "cublasSgemm")),
    *(["where", name, "--static"] for name in ("aten::conv2d", "torch.add", "torch.nn.Linear", "aten::sum.dim_IntList", "torch.sigmoid", "aten::sort")),
    ["where", "torch.nn.Conv2d", "--static", "--json"],
    *(["explain", op] for op in ("aten::add.Tensor", "aten::mul.Tensor", "aten::sigmoid")),
]


def same(env: dict[str, str], sources: dict[str, Path]) -> int:
    """How many questions of SAME this checkout answers otherwise than the
    other (each difference printed)."""
    km = [sys.executable, "-m", "kernelmap"]
    differ = 0
    for argv in SAME:
        expected = subprocess.run(km + argv, capture_output=True, env=with_source(env, sources["against"]))
        for ask in ("first", "again"):
            got = subprocess.run(km + argv, capture_output=True, env=with_source(env, sources["this"]))
            if (got.returncode, got.stdout, got.stderr) != (expected.returncode, expected.stdout, expected.stderr):
                differ += 1
                print(f"DIFFERS ({ask} ask): kernelmap {' '.join(argv)} (exit {expected.returncode} -> {got.returncode})")
                for stream in ("stdout", "stderr"):  # the first lines that differ, to see why
                    a, b = getattr(expected, stream).decode(errors="replace"), getattr(got, stream).decode(errors="replace")
                    print("".join(list(difflib.unified_diff(a.splitlines(True), b.splitlines(True), stream, stream, n=1))[:12]), end="")
                break
    print(f"{len(SAME) - differ} of {len(SAME)} answers byte-identical to {sources['against']}")
    return differ


def cpu(cmd: list[str], env: dict[str, str]) -> float:
    """CPU time (user + system) of one run of `cmd` and what it waited for."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def with_source(env: dict[str, str], src: Path) -> dict[str, str]:
    return {**env, "PYTHONPATH": os.pathsep.join([str(src), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="rounds (each command once per round)")
    parser.add_argument("--cache", type=Path, help="the kernelmap cache to read (default: $KERNELMAP_CACHE_DIR or the user cache)")
    parser.add_argument("--against", type=Path, help="another checkout's src directory, measured in the same rounds")
    parser.add_argument("--only", help="run only the commands whose label contains this")
    parser.add_argument("--same", action="store_true", help="compare answers with --against's (byte for byte) instead of timing")
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # as a user has it: bytecode compiled
    if args.cache is not None:
        env["KERNELMAP_CACHE_DIR"] = str(args.cache)
    sources = {"this": ROOT / "src"}
    if args.against is not None:
        sources = {"against": args.against.resolve(), **sources}
    if args.same:
        if args.against is None:
            parser.error("--same compares with --against SRC")
        sys.exit(1 if same(env, sources) else 0)
    commands = {label: spec for label, spec in COMMANDS.items() if args.only is None or args.only in label}
    km = [sys.executable, "-m", "kernelmap"]
    for name, src in sources.items():
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(src)], check=True, env=env, stdout=subprocess.DEVNULL)
        for argv, _ in commands.values():  # warm: caches built, bytecode written
            subprocess.run(km + argv, check=False, env=with_source(env, src), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    reference: list[float] = []
    ratios: dict[tuple[str, str], list[float]] = {(label, name): [] for label in commands for name in sources}
    times: dict[tuple[str, str], list[float]] = {key: [] for key in ratios}
    for _ in range(args.runs):
        torch_cpu = cpu([sys.executable, "-c", "import torch"], env)
        reference.append(torch_cpu)
        for label, (argv, _) in commands.items():
            for name, src in sources.items():
                spent = cpu(km + argv, with_source(env, src))
                times[label, name].append(spent)
                ratios[label, name].append(spent / torch_cpu)
    print(f"import torch: CPU median {statistics.median(reference) * 1000:.0f} ms over {args.runs} rounds")
    header = "  ".join(f"{name:>16}" for name in sources)
    print(f"{'kernelmap':48} {header}   goal")
    for label, (_, goal) in commands.items():
        cells = []
        for name in sources:
            ratio = statistics.median(ratios[label, name])
            cells.append(f"{ratio:5.2f}x {statistics.median(times[label, name]) * 1000:6.0f} ms")
        verdict = "ok" if statistics.median(ratios[label, "this"]) <= goal else "MISSED"
        print(f"{label:48} {'  '.join(f'{c:>16}' for c in cells)}   <= {goal:.2f}x {verdict}")


if __name__ == "__main__":
    main()
