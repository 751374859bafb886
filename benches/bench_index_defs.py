"""Definitions the index misses or misnames in the kernel directories, per
file, against universal-ctags on the same files (issue 16, cause 4).

For every function definition ctags finds in aten/src/ATen/native/**,
aten/src/ATen/cuda and aten/src/ATen/cudnn, the extractor must hold a
definition with the same short name starting at most 3 lines above it
(a return type on its own line). A definition of another name there is a
misnamed one; none at all is a missed one. Prints the totals, the worst files
and the time of both, and writes every miss to --misses FILE.

    python benches/bench_index_defs.py [TREE] [--misses OUT.txt]
"""

from __future__ import annotations

import collections
import subprocess
import sys
import time
from pathlib import Path

from timing import option, tree_root

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
CTAGS = "/usr/bin/ctags"
DIRS = ("aten/src/ATen/native", "aten/src/ATen/cuda", "aten/src/ATen/cudnn")

MISSES = option("--misses")


def kernel_files(root: Path) -> list[str]:
    from kernelmap.source.extract import SOURCE_SUFFIXES

    files = []
    for d in DIRS:
        base = root / d
        recurse = d.endswith("native")
        for p in sorted(base.rglob("*") if recurse else base.glob("*")):
            if p.is_file() and p.suffix in SOURCE_SUFFIXES and p.suffix != ".mm":
                files.append(p.relative_to(root).as_posix())
    return files


def ctags_definitions(root: Path, files: list[str]) -> tuple[dict[str, list[tuple[int, str]]], float]:
    cmd = [CTAGS, "-f", "-", "--languages=C++,CUDA", "--kinds-C++=f", "--kinds-CUDA=f", "--fields=+n", "--extras=-F", "-L", "-"]
    t0 = time.perf_counter()
    out = subprocess.run(cmd, cwd=root, input="\n".join(files) + "\n", capture_output=True, text=True, check=True).stdout
    took = time.perf_counter() - t0
    found: dict[str, list[tuple[int, str]]] = collections.defaultdict(list)
    for line in out.splitlines():
        parts = line.split("\t")
        line_no = next((p[5:] for p in parts if p.startswith("line:")), None)
        if line_no is None:
            continue
        found[parts[1]].append((int(line_no), parts[0]))
    return found, took


_STRUCTURED = {"TORCH_IMPL_FUNC": "structured_impl", "TORCH_META_FUNC": "structured_meta", "TORCH_META_FUNC2": "structured_meta",
               "TORCH_PRECOMPUTE_META_FUNC": "structured_meta", "TORCH_PRECOMPUTE_META_FUNC2": "structured_meta"}


def main() -> None:
    from kernelmap.source.extract import Extractor
    from kernelmap.source.facts import read_operator_names

    root = tree_root()
    files = kernel_files(root)
    tags, ctags_s = ctags_definitions(root, files)
    ex = Extractor(read_operator_names(root / "aten/src/ATen/native/native_functions.yaml"))
    missed: dict[str, list[str]] = collections.defaultdict(list)
    misnamed: dict[str, list[str]] = collections.defaultdict(list)
    total = 0
    t0 = time.perf_counter()
    for path in files:
        facts = ex.extract(path, (root / path).read_bytes())
        starts: dict[int, set[str]] = collections.defaultdict(set)
        for d in facts.definitions:
            starts[d.line].add(d.short.replace(" ", ""))
            if d.kind.startswith("structured_"):
                starts[d.line].add(d.kind)
        for line, name in tags.get(path, ()):
            name = _STRUCTURED.get(name, name).replace(" ", "")
            if name.startswith("TORCH_LIBRARY") or not any(c.islower() for c in name) or name in ("alignas", "__align__", "__launch_bounds__"):
                # a TORCH_LIBRARY block registers, defines nothing; a macro call defines what its expansion
                # names; ctags reads `struct alignas(16) T` and `__launch_bounds__(n)` as functions
                continue
            if name == "operator":  # ctags' spelling of `operator ()`
                name = "operator()"
            total += 1
            near = [starts[n] for n in range(line - 3, line + 1) if n in starts]
            if any(name in s for s in near):
                continue
            if near:
                misnamed[path].append(f"{path}:{line} {name} (indexed as {', '.join(sorted(set().union(*near)))})")
            else:
                missed[path].append(f"{path}:{line} {name}")
    index_s = time.perf_counter() - t0
    n_missed = sum(map(len, missed.values()))
    n_misnamed = sum(map(len, misnamed.values()))
    print(f"files: {len(files)}  ctags definitions: {total}")
    print(f"missed: {n_missed} in {len(missed)} files   misnamed: {n_misnamed} in {len(misnamed)} files")
    print(f"found: {100 * (total - n_missed - n_misnamed) / max(total, 1):.2f}%")
    print(f"extractor {index_s:.1f} s, ctags {ctags_s:.1f} s  (ratio {index_s / ctags_s:.1f}x; single process)")
    worst = sorted(set(missed) | set(misnamed), key=lambda p: -(len(missed[p]) + len(misnamed[p])))[:10]
    for p in worst:
        print(f"  {len(missed[p]):4d} missed {len(misnamed[p]):4d} misnamed  {p}")
    if MISSES is not None:
        MISSES.write_text("\n".join(sorted(m for v in [*missed.values(), *misnamed.values()] for m in v)) + "\n")


if __name__ == "__main__":
    main()
