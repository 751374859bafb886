"""`kernelmap impact` on the real PyTorch 2.6.0 tree: its speed, its include
closure against the compiler's own dependency output, and the rebuild cost
model against real compiles.

  --speed        warm `kernelmap impact HEADER` for several headers against
                 `python -c "import torch"` in the same run (median wall time;
                 goal: each at most 0.3x)
  --check N      the include closure of N units spread over aten, c10,
                 torch/csrc and the generated files (default 120) against
                 `g++ -MM -MG` (`nvcc -M` for .cu units, with --device cuda):
                 the share of each unit's dependencies both name (goal: every
                 unit at least 98%), the disagreements by cause
  --calibrate N  compile N sampled units for real (g++ -O2, the wheel's
                 torch/include for the third-party headers the Debian tree
                 lacks), CPU time of the compiler (the machine is shared:
                 wall time follows the neighbours' load), fit the cost model
                 (kernelmap.impact.cost) and print its leave-one-out error;
                 --write stores it in src/kernelmap/impact/cost_model.json;
                 --measured RECORD fits to the compiles of an earlier
                 --record file instead of compiling again

    python benches/bench_impact.py [--speed] [--check N] [--calibrate N [--write] [--measured RECORD]] [--device cpu|cuda]
                                   [--tree 2.6|1.13] [--cache DIR] [--runs N] [--record FILE]

--cache reuses a kernelmap cache that already holds the indexed tree and its
generated files; without it a fresh one is built first (minutes).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from timing import wall

ROOT = Path(__file__).resolve().parents[1]
TREE = "debian-2.6.0"
HEADERS = (
    "c10/macros/Macros.h",
    "aten/src/ATen/cpu/vec/vec256/vec256_float.h",
    "aten/src/ATen/native/cpu/Loops.h",
    "aten/src/ATen/native/cuda/Loops.cuh",
    "aten/src/ATen/core/TensorBase.h",
    "aten/src/ATen/templates/TensorBody.h",
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--speed", action="store_true")
    parser.add_argument("--check", type=int, nargs="?", const=120, default=None)
    parser.add_argument("--calibrate", type=int, nargs="?", const=40, default=None)
    parser.add_argument("--write", action="store_true", help="with --calibrate: store the fitted model")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cache", type=Path, help="a kernelmap cache to reuse (it may already hold the indexed tree)")
    parser.add_argument("--tree", default="2.6", choices=("2.6", "1.13"), help="the test tree: Debian's 2.6.0 (default) or 1.13.1")
    parser.add_argument("--record", type=Path, help="with --check / --calibrate: write each unit's result here (JSON lines)")
    parser.add_argument("--kinds", default="cpp,capability", help="with --calibrate: the kinds of unit to compile")
    parser.add_argument("--measured", type=Path, help="with --calibrate: fit to the compiles a --record file holds instead of compiling")
    args = parser.parse_args()
    if not (args.speed or args.check or args.calibrate):
        args.speed = True
    global TREE
    TREE = "debian-2.6.0" if args.tree == "2.6" else "debian-1.13.1"
    fetch = [str(ROOT / "scripts/fetch-test-tree")] + ([] if args.tree == "2.6" else ["1.13"])
    tree = subprocess.run(fetch, capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
    with tempfile.TemporaryDirectory(prefix="kernelmap-bench-") as scratch:
        cache = str(args.cache or Path(scratch) / "cache")
        env = {**os.environ, "KERNELMAP_CACHE_DIR": cache, "KERNELMAP_SOURCE": TREE}
        env.pop("PYTHONDONTWRITEBYTECODE", None)  # both sides run from their compiled modules, as a user's do
        os.environ.update(KERNELMAP_CACHE_DIR=cache, KERNELMAP_SOURCE=TREE)
        km = [sys.executable, "-m", "kernelmap"]
        subprocess.run(km + ["source", "add", tree, "--name", TREE], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # kept from an earlier run
        subprocess.run(km + ["index"], check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        status = 0
        if args.speed:
            status |= speed(km, env, args.runs)
        if args.check:
            status |= check(args.check, args.device, args.seed, Path(scratch), args.record)
        if args.calibrate:
            status |= calibrate(args.calibrate, args.seed, Path(scratch), args.write, args.record, args.measured, tuple(args.kinds.split(",")))
        return status


def _data(device: str):
    from kernelmap.impact import open_impact
    from kernelmap.source import get_tree, open_index

    tree = get_tree(TREE)
    with open_index(tree) as index:
        return tree, open_impact(tree, index, device)


def _layout(tree, data, work: Path, device: str):
    from kernelmap import env
    from kernelmap.impact.check import CompileLayout

    return CompileLayout.create(tree.root, Path(data.headers_dir), Path(data.sources_dir), work, device, env.torch_install().torch_dir / "include")


def speed(km: list[str], env: dict[str, str], runs: int) -> int:
    commands = [(h, km + ["impact", h] + (["--device", "cuda"] if "cuda" in h else [])) for h in HEADERS]
    for _, cmd in commands:  # warm: the graph is built once per device, then read back
        subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
    reference, reference_cpu = wall([sys.executable, "-c", "import torch"], runs, env)
    print(f"import torch{'':52} {reference * 1000:8.1f} ms (median of {runs}; CPU {reference_cpu * 1000:.0f} ms)")
    missed = 0
    for header, cmd in commands:
        ours, ours_cpu = wall(cmd, runs, env)
        ratio = ours / reference
        missed += ratio > 0.3
        print(f"kernelmap impact {header:47} {ours * 1000:8.1f} ms  ratio {ratio:.2f}x (goal <= 0.30x): {'ok' if ratio <= 0.3 else 'MISSED'}"
              f"  (CPU time ratio {ours_cpu / reference_cpu:.2f}x; load average {os.getloadavg()[0]:.1f})")
    return int(missed > 0)


def check(n: int, device: str, seed: int, work: Path, record: Path | None) -> int:
    from kernelmap.impact.check import area_of, check_unit, explain, sample_units

    tree, data = _data(device)
    layout = _layout(tree, data, work, device)
    kinds = ("cpp", "capability", "cu") if device != "cpu" else ("cpp", "capability")
    units = sample_units(data.units, n, seed, kinds)
    print(f"include closure against the compiler: {len(units)} units of {len(data.units)} a {device} build compiles "
          f"({', '.join(f'{a} {sum(area_of(u.path) == a for u in units)}' for a in ('aten', 'c10', 'torch/csrc', 'generated'))}; "
          f"{', '.join(f'{k} {sum(u.kind == k for u in units)}' for k in kinds)})")
    results, causes = [], {}
    t0 = time.perf_counter()
    out = record.open("a") if record else None
    for unit in units:
        r = check_unit(data.graph, layout, unit)
        why = explain(r, layout)
        results.append(r)
        for cause, paths in why.items():
            causes.setdefault(cause, []).append((r.unit, paths))
        line = f"  {r.agreement:6.1%}  {len(r.theirs):5d} deps  {r.compiler:8}  {r.unit}"
        if r.agreement < 1:
            line += "  (" + "; ".join(f"{c}: {len(p)}" for c, p in why.items()) + ")"
        if r.error:
            line += f"  [the compiler said: {r.error[:100]}]"
        print(line, flush=True)
        if out:
            out.write(json.dumps({"unit": r.unit, "agreement": r.agreement, "ours": len(r.ours), "theirs": len(r.theirs),
                                  "only_ours": r.only_ours, "only_theirs": r.only_theirs, "causes": why, "error": r.error}) + "\n")
    if out:
        out.close()
    agreements = [r.agreement for r in results]
    low = [r for r in results if r.agreement < 0.98]
    print(f"{len(results)} units in {time.perf_counter() - t0:.0f} s: agreement per unit min {min(agreements):.2%}, "
          f"median {statistics.median(agreements):.2%}; {sum(a == 1 for a in agreements)} identical; "
          f"{len(results) - len(low)} of {len(results)} at 98% or more (goal: all): {'ok' if not low else 'MISSED'}")
    pooled = sum(r.common for r in results) / max(1, sum(len(r.ours | r.theirs) for r in results))
    print(f"dependencies pooled over the units: {pooled:.3%} named by both")
    for cause, items in sorted(causes.items()):
        files = sorted({p for _, ps in items for p in ps})
        print(f"  {cause}: {len(items)} units, {len(files)} distinct files, e.g. {', '.join(files[:4])}")
    wheel = sorted({p for r in results for p in r.wheel_only})
    if wheel:
        print(f"  left out on the compiler's side: {', '.join(wheel)} (the wheel's newer configuration headers include them; the tree has no such file)")
    return int(bool(low))


def calibrate(n: int, seed: int, work: Path, write: bool, record: Path | None, measured: Path | None, kinds: tuple[str, ...]) -> int:
    from kernelmap import env
    from kernelmap.impact.check import compile_seconds, sample_units
    from kernelmap.impact.cost import MODEL_FILE, fit

    tree, data = _data("cpu")
    graph = data.graph
    by_name = {u.name: u for u in data.units}
    samples = []
    if measured is not None:  # refit from compiles measured before (a --record file), compiling nothing
        rows = [json.loads(line) for line in measured.read_text().splitlines() if line.strip()]
        print(f"fitting to the {len(rows)} compiles recorded in {measured}")
        for row in rows:
            unit = by_name.get(row["unit"])
            if unit is not None and row.get("error") is None:
                samples.append((unit.kind, data.unit_bytes[unit.name], graph.sizes[graph.node(unit.path)], row["seconds"]))
    else:
        import sysconfig

        layout = _layout(tree, data, work, "cpu")
        third_party = [env.torch_install().torch_dir / "include", Path(sysconfig.get_paths()["include"])]
        units = sample_units(data.units, n, seed + 1, kinds)
        out = record.open("a") if record else None
        print(f"compiling {len(units)} units for real (g++ -O2, CPU time of the compiler; load average {os.getloadavg()[0]:.1f})")
        for unit in units:
            seconds, error = compile_seconds(layout, unit, work, third_party)
            nbytes, own = data.unit_bytes[unit.name], graph.sizes[graph.node(unit.path)]
            print(f"  {seconds:6.1f} s  {nbytes / 1e6:6.2f} MB read, {own / 1e6:5.2f} MB its own  {unit.name}"
                  + (f"  [failed: {error[:100]}]" if error else ""), flush=True)
            if out:
                out.write(json.dumps({"unit": unit.name, "kind": unit.kind, "bytes": nbytes, "own": own, "seconds": seconds, "error": error}) + "\n")
            if error is None:
                samples.append((unit.kind, nbytes, own, seconds))
        if out:
            out.close()
    compiler = subprocess.run(["g++", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    model = fit(samples, machine=f"{platform.machine()}, {os.cpu_count()} cores, shared", compiler=compiler)
    text, error = model.describe()
    print(f"{len(samples)} units measured; model: {text}")
    print(f"error: {error}")
    for kind in sorted({k for k, _, _, _ in samples}):
        mine = [(b, o, s) for k, b, o, s in samples if k == kind]
        errors = sorted(abs(model.predict(kind, b, o) - s) / s for b, o, s in mine)
        print(f"  {kind}: {len(mine)} units, median error of the full fit {statistics.median(errors):.0%}")
    if write:
        MODEL_FILE.write_text(json.dumps(model.to_json(), indent=1) + "\n")
        print(f"wrote {MODEL_FILE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
