"""How exact the call graph is, graded against the hand-verified golden chains
of the 2.6.0 tree (tests/golden/chains.yaml): per chain, the steps `stack`
shows and how many of them lie in order along one path from its root, and the
first step missing; per operator and device, whether `where` names the golden
entry kernel and stub kernel at their lines. Ends with the percentages.

Goal (issue "An exact call graph"): at least 98% of golden steps present in
order, and `where` exact for at least 98% of the entry and stub kernels.

    python benches/bench_accuracy.py [--cache DIR] [--chain ID ...] [--depth N] [--verbose]

Runs through the library (kernelmap.graph.stack, kernelmap.api.where with
`static=True`), never importing torch. Without --cache the real test tree
(scripts/fetch-test-tree) is indexed into a fresh private cache first (minutes).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.golden.golden import answers, grade, load  # noqa: E402

TREE_NAME = "debian-2.6.0"


def _prepare(cache: Path) -> None:
    os.environ["KERNELMAP_CACHE_DIR"] = str(cache)
    from kernelmap.errors import KernelmapError
    from kernelmap.source import add_tree, build_index, select_tree

    tree_path = subprocess.run([str(ROOT / "scripts/fetch-test-tree")], capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
    try:
        tree = select_tree(TREE_NAME)
    except KernelmapError:
        tree = add_tree(Path(tree_path), TREE_NAME)
    build_index(tree, jobs=min(2, os.cpu_count() or 1))


def _where_role(answer, role: str):
    return next((s for s in answer.source if s.role == role), None)


def _exact(found, step) -> bool:
    """`where`'s landmark names the golden step: same function, its range holding the line."""
    if step is None:
        return found is None
    if found is None or found.location is None:
        return False

    class _Node:  # `answers` reads a node's name, location and facts
        name = found.name
        location = found.location
        attrs: dict = {}

    return answers(_Node, step)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, help="a kernelmap cache directory that may already hold the indexed tree")
    parser.add_argument("--chain", action="append", help="grade only these chain ids")
    parser.add_argument("--depth", type=int, default=None, help="stack depth (default: kernelmap's)")
    parser.add_argument("--verbose", action="store_true", help="list every step with its mark")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as scratch:
        _prepare(args.cache or Path(scratch))
        from kernelmap import api, graph
        from kernelmap.errors import KernelmapError

        chains, landmarks = load()
        if args.chain:
            chains = tuple(c for c in chains if c.id in args.chain)
            landmarks = ()
        contexts = {}
        total = present_total = ordered_total = 0
        started = time.perf_counter()
        print(f"{'chain':28} {'steps':>5} {'present':>7} {'in order':>8}  first missing step")
        for chain in chains:
            context = contexts.get(chain.device) or contexts.setdefault(chain.device, graph.open_context(chain.device, source=TREE_NAME))
            try:
                tree = graph.stack(chain.start, context, *([args.depth] if args.depth is not None else []))
            except KernelmapError as e:
                print(f"{chain.id:28} {len(chain.steps):5} {'-':>7} {'-':>8}  error: {e}")
                total += len(chain.steps)
                continue
            g = grade(chain, tree)
            total += len(chain.steps)
            present_total += sum(g.present)
            ordered_total += g.in_order
            missing = str(g.first_missing) if g.first_missing else "-"
            print(f"{chain.id:28} {len(chain.steps):5} {sum(g.present):7} {g.in_order:8}  {missing}")
            if args.verbose:
                for i, (step, here) in enumerate(zip(chain.steps, g.present)):
                    mark = "in order" if i < g.in_order else ("present" if here else "MISSING")
                    print(f"    {mark:8}  {step}")
        graph_seconds = time.perf_counter() - started

        exact = checked = 0
        if landmarks:
            print()
            print(f"{'operator':36} {'device':6} {'entry':6} {'stub':6}  where names (entry | stub)")
        for marks in landmarks:
            try:
                answer = api.where(marks.op, device=marks.device, static=True, source=TREE_NAME, with_source=True)
            except KernelmapError as e:
                print(f"{marks.op:36} {marks.device:6} error: {e}")
                checked += 2
                continue
            entry, stub = _where_role(answer, "entry kernel"), _where_role(answer, "stub kernel")
            ok_entry, ok_stub = _exact(entry, marks.entry), _exact(stub, marks.stub)
            exact += ok_entry + ok_stub
            checked += 2
            named = " | ".join(f"{s.name} {s.location}" if s else "-" for s in (entry, stub))
            print(f"{marks.op:36} {marks.device:6} {'ok' if ok_entry else 'WRONG':6} {'ok' if ok_stub else 'WRONG':6}  {named}")

        print()
        print(f"golden steps present:       {present_total}/{total} = {100 * present_total / max(total, 1):5.1f}% (goal >= 98%)")
        print(f"golden steps in order:      {ordered_total}/{total} = {100 * ordered_total / max(total, 1):5.1f}% (goal >= 98%)")
        if checked:
            print(f"where exact (entry + stub): {exact}/{checked} = {100 * exact / checked:5.1f}% (goal >= 98%)")
        print(f"({len(chains)} chains graded in {graph_seconds:.1f} s)")


if __name__ == "__main__":
    main()
