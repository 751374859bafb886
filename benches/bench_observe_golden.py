"""How much of what really runs the static map names, graded against the
runtime golden set (tests/golden/observed-cpu.jsonl.gz: the native stacks
torch 2.13.0's CPU build ran for every OpInfo's sample inputs, recorded under
gdb by scripts/record_observed_golden.py), and how fast `observe` is.

    python benches/bench_observe_golden.py [--cache DIR] [--ops N] [--callers N] [--speed-only] [--no-speed]

Figures, over the distinct (operator, frame) pairs of the set:

  top-down recall   observed real-code frames (Note [real code] in tests/golden/observed.py)
                    below `at::_ops::<op>::call` that `stack OP --device cpu` names
  bottom-up recall  frames of a stack, up to the THPVariable_* binding, that `callers LEAF`
                    reaches from the stack's innermost frame (a sample of --callers leaves)
  leaf recall       observed innermost functions (a stack's last real-code frame) that `stack` names
                    (a stack recorded inside set-up, below its last graded frame, gives none)
  leaf precision    leaves `where OP --device cpu` names that ran for the sample inputs
                    (only names the set can see: functions the recording broke on, and loop
                    templates, inlined always, judged by the loop machinery they expand into)

Each stack is graded against the map of its call's dtype (`stack --dtype`; float32 where the
map has no case for it). Frames matched on their function's last two scope parts (kernelmap.observe.mark.name_key),
or on the last alone where no other observed function has that name (not `call`, `impl`, `operator()`).
A frame whose function the 2.6.0 tree does not define at all (renamed or new in 2.13) is a
version difference, counted apart and left out of the recalls. A frame inside a vendor library
below the library's entry (MKL's `mkl_lapack_slamch` below `sgetrf_`: no source in the tree;
Note [inside a vendor library] in tests/golden/observed.py) is counted apart too; the entry
stays graded, and a stack that ends inside a library gives the entry as its leaf.

Speed: `observe` of one operator against running the same call plainly plus gdb's own
start-up on the same interpreter (loading torch's symbols), each the median of --runs.
Goal (issue "Witness it"): recalls >= 97%, leaf recall >= 99%, leaf precision >= 98%, observe
at most 5x.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

TREE_NAME = "debian-2.6.0"


def _prepare(cache: Path | None) -> None:
    if cache is not None:
        os.environ["KERNELMAP_CACHE_DIR"] = str(cache)
    from kernelmap.errors import KernelmapError
    from kernelmap.source import add_tree, build_index, select_tree

    tree_path = subprocess.run([str(ROOT / "scripts/fetch-test-tree")], capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
    try:
        tree = select_tree(TREE_NAME)
    except KernelmapError:
        tree = add_tree(Path(tree_path), TREE_NAME)
    build_index(tree, jobs=min(2, os.cpu_count() or 1))


def _keys(tree) -> tuple[set[str], set[str]]:
    from kernelmap.model import NodeKind
    from kernelmap.observe.mark import name_key

    keys = {name_key(n.name) for _, n in tree.walk()}
    # an operator's node is its call: the binary's `at::_ops::<name>_<overload>::call`
    keys |= {n.name.split("::", 1)[-1].replace(".", "_") + "::call" for _, n in tree.walk() if n.kind is NodeKind.OPERATOR}
    return keys, {k.split("::")[-1] for k in keys}


_AMBIGUOUS: set[str] = set()  # bare names the set's frames share between functions (`call`, `impl`, `operator()`)


def _ambiguous_names(golden) -> set[str]:
    """Bare names that stand for more than one observed function: a frame is
    matched on its bare name only where that name is its function's alone."""
    from kernelmap.observe.mark import name_key

    keys_of: dict[str, set[str]] = {}
    for f in golden.frames:
        if f.parsed is not None:
            key = name_key(f.function)
            keys_of.setdefault(key.split("::")[-1], set()).add(key)
    return {short for short, keys in keys_of.items() if len(keys) > 1}


def _named(frame, keys: set[str], shorts: set[str]) -> bool:
    from kernelmap.observe.mark import name_key

    key = name_key(frame.function)
    short = key.split("::")[-1]
    return key in keys or (short in shorts and short not in _AMBIGUOUS)


def _operator_entries(missed: Counter, catalog) -> Counter:
    """Missed entries of other operators (`at::_ops::<name>_<overload>::call`),
    and how many of them are of the utilities and views `stack` prunes."""
    from kernelmap.graph.rules import is_utility_op

    ops = {str(op.name).split("::", 1)[-1].replace(".", "_"): op for op in catalog}
    counts = Counter()
    for fn, k in missed.items():
        m = re.fullmatch(r"at::_ops::(\w+)::(?:call|redispatch)", fn)
        if m:
            counts["all"] += k
            op = ops.get(m.group(1))
            counts["utility"] += k if op is not None and is_utility_op(op.name.name, op.is_view) else 0
    return counts


class Versions:
    """Whether the tree defines a frame's function at all (Note: version differences)."""

    def __init__(self, context):
        from kernelmap.observe.join import SourceMap

        self.map = SourceMap(context.index, context.generated)

    def differs(self, frame) -> bool:
        if frame.is_vendor or frame.parsed is None:
            return False
        from kernelmap.observe.frames import parse_frame

        target = parse_frame(frame.function + "()") if frame.parsed.runs else frame.parsed
        location, _ = self.map.definition(target)
        return location is None


def grade(golden, ops_limit: int | None, callers_limit: int, verbose: bool) -> dict:
    from kernelmap import api, graph
    from kernelmap.errors import KernelmapError
    from tests.golden.observed import always_inline, inlined_into_ran

    global _STACK
    context = graph.open_context("cpu", source=TREE_NAME)
    contexts = {"float32": context}
    _AMBIGUOUS.update(_ambiguous_names(golden))
    versions = Versions(context)
    if _STACK is None:  # `where`'s leaves (api._source_steps) and their ends share one tree per operator
        _STACK = graph.stack
        graph.stack = lambda target, ctx, *depth: _STACK(target, ctx, *depth) if depth else _last_stack(target, ctx)
    by_op = golden.by_operator()
    dtype_of = {s: c.dtype for c in golden.calls for s in c.stacks}  # each stack's call's dtype
    ops = sorted(by_op)[: ops_limit or None]
    td = Counter()
    leaf = Counter()
    prec = Counter()
    missed: Counter = Counter()
    missed_by_op: dict[str, list[str]] = {}
    leaf_missed: Counter = Counter()
    never_ran: Counter = Counter()
    failed: list[str] = []
    t0 = time.monotonic()
    leaves_for_callers: dict[str, tuple] = {}
    frames_of: dict[str, object] = {}  # a missed function's frame, for its class
    for n, op in enumerate(ops):
        try:
            tree = graph.stack(op, context, 40)
        except KernelmapError as e:
            failed.append(f"{op}: {str(e).splitlines()[0][:100]}")
            continue
        # each frame is graded against the map of its call's dtype (a bool call's loop is bool's), float32's by default
        names = {"float32": _keys(tree)}
        frames_seen: dict[str, object] = {}
        leaves_seen: dict[str, object] = {}
        dtypes_of: dict[str, set[str]] = {}
        inside_seen: set[str] = set()  # Note [inside a vendor library] in tests/golden/observed.py
        inner_leaves: set[str] = set()
        for stack in by_op[op]:
            graded, above = golden.graded(stack, versions.map)
            below = graded[above:]
            inside = golden.inside_vendor(stack)
            if below:
                inside_seen.update(f.function for f in inside)
                deepest = next((golden.frames[i] for i in reversed(stack) if golden.frames[i].is_real), None)
                if deepest is not None and inside and deepest.id == inside[-1].id:
                    inner_leaves.add(deepest.function)
            dtype = _dtype(dtype_of.get(stack, "float32"), op, contexts, names, graph, KernelmapError)
            for f in below:
                frames_seen.setdefault(f.function, f)
                dtypes_of.setdefault(f.function, set()).add(dtype)
            if below and not _cut_at_setup(golden, stack, below[-1]):
                leaves_seen.setdefault(below[-1].function, below[-1])
                leaves_for_callers.setdefault(below[-1].function, stack)

        td["inside"] += len(inside_seen - set(frames_seen))
        leaf["inside"] += len(inner_leaves - set(leaves_seen))

        def named(fn, f):
            return any(_named(f, *names[d]) for d in dtypes_of[fn])

        for fn, f in frames_seen.items():
            frames_of.setdefault(fn, f)
            if versions.differs(f):
                td["version"] += 1
                continue
            td["total"] += 1
            if named(fn, f):
                td["named"] += 1
            else:
                missed[fn] += 1
                missed_by_op.setdefault(op, []).append(fn)
        for fn, f in leaves_seen.items():
            if versions.differs(f):
                leaf["version"] += 1
                continue
            leaf["total"] += 1
            if named(fn, f):
                leaf["named"] += 1
            else:
                leaf_missed[fn] += 1
        # leaf precision: where's leaves that the set can see (work functions) and that never ran
        try:
            notes: list[str] = []
            steps = api._source_steps(op, "cpu", notes, TREE_NAME, context=context)
            ends = graph.call_ends(_last_stack(op, context))
        except (KernelmapError, Exception):
            steps, ends = (), ()
        everything = [golden.frames[i] for stack in by_op[op] for i in stack]
        ran = {name_key_of(f.function) for f in everything} | {name_key_of(f.function).split("::")[-1] for f in everything}
        looped = any(any(m in (f.name or "") for m in _LOOP_FRAMES) for f in everything)
        for s in steps:
            if s.role != "leaf":
                continue
            k = name_key_of(s.name)
            short = k.split("::")[-1]
            inlined = short in _LOOP_TEMPLATES or always_inline(s.location)  # Note [leaves that are never frames] in tests/golden/observed.py
            if inlined:  # never a frame: it ran when its loop machinery, or the function it is inlined into, ran
                hit = (short in _LOOP_TEMPLATES and looped) or inlined_into_ran(s.name, ends, ran)
                prec["total"] += 1
                prec["ran"] += hit
                if not hit:
                    never_ran[f"{op}: {s.name}"] += 1
                continue
            if k not in ran and short not in ran and not (does_work(s.name) or s.name.startswith(("ideep::", "dnnl"))):
                prec["unseen"] += 1  # a function the recording did not break on: the set cannot say it never ran
                continue
            prec["total"] += 1
            if k in ran or short in ran:
                prec["ran"] += 1
            else:
                never_ran[f"{op}: {s.name}"] += 1
        if verbose and n % 25 == 0:
            print(f"  {n}/{len(ops)} operators, {time.monotonic() - t0:.0f}s", file=sys.stderr)
    # bottom-up: callers of a sample of leaves, up to the binding
    bu = Counter()
    bu_missed: Counter = Counter()
    import random

    sample = sorted(leaves_for_callers.items())
    random.Random(0).shuffle(sample)
    for fn, stack in sample[:callers_limit]:
        frames, _ = golden.graded(stack, versions.map)
        inner = [k for k, f in enumerate(frames) if not f.is_vendor and not versions.differs(f)]
        if not inner:
            continue
        deepest = frames[inner[-1]]
        name = deepest.parsed.runs + "::operator()" if deepest.parsed.runs else deepest.parsed.lookup
        try:
            up = graph.callers(name, context, 40)
        except KernelmapError:
            bu["no callers answer"] += 1
            continue
        keys, shorts = _keys(up)
        for f in frames[: inner[-1]]:
            if versions.differs(f):
                bu["version"] += 1
                continue
            bu["total"] += 1
            if _named(f, keys, shorts):
                bu["named"] += 1
            else:
                bu_missed[f.function] += 1
                frames_of.setdefault(f.function, f)
    entries = _operator_entries(missed, context.catalog)
    return {"ops": len(ops), "failed": failed, "entries": entries, "frames": frames_of, "td": td, "leaf": leaf, "prec": prec, "bu": bu, "missed": missed,
            "leaf_missed": leaf_missed, "never_ran": never_ran, "bu_missed": bu_missed, "missed_by_op": missed_by_op, "seconds": time.monotonic() - t0}


def _cut_at_setup(golden, stack: tuple[int, ...], last) -> bool:
    """Whether a stack goes on below its last graded frame into set-up (Note
    [real code] in tests/golden/observed.py: TensorIterator's build, the
    dispatcher's first lookup of a handle): recorded there, it has no
    innermost function of the call's work, so it gives no leaf."""
    from tests.golden.observed import _is_setup

    at = len(stack) - 1 - stack[::-1].index(last.id)
    return any(golden.frames[i].parsed is not None and _is_setup(golden.frames[i].function) for i in stack[at + 1 :])


def _dtype(dtype: str, op: str, contexts: dict, names: dict, graph, error) -> str:
    """The dtype whose map grades a call's frames: the call's own, where the
    static map can be asked for it (names[dtype] filled with that map's
    names), else float32."""
    if dtype in names:
        return dtype
    try:
        if dtype not in contexts:
            contexts[dtype] = graph.open_context("cpu", source=TREE_NAME, dtype=dtype)
        if contexts[dtype] is None:
            return "float32"
        names[dtype] = _keys(graph.stack(op, contexts[dtype], 40))
    except error:
        contexts.setdefault(dtype, None)
        return "float32"
    return dtype


# Loop templates `where` names as leaves are always inlined into the kernel that calls them, so
# they are never frames: they ran when the loop machinery they expand into ran, or when the
# function they are inlined into ran (Note [leaves that are never frames] in tests/golden/observed.py).
_LOOP_TEMPLATES = {"cpu_kernel", "cpu_kernel_vec", "cpu_serial_kernel", "cpu_serial_kernel_vec", "binary_kernel_reduce",
                   "binary_kernel_reduce_vec", "binary_kernel_reduce_lastdim", "parallel_for", "parallel_reduce"}
_LOOP_FRAMES = ("TensorIteratorBase::for_each", "serial_for_each", "loop_2d_from_1d", "VectorizedLoop2d", "basic_loop",
                "parallel_reduce", "invoke_parallel", "lambda(long, long)")


_STACKS: dict = {}


def _last_stack(op: str, context):
    """graph.stack(op, context) at its default depth, grown once for `where`'s leaves and their ends."""
    key = (op, id(context))
    if key not in _STACKS:
        _STACKS.clear()
        _STACKS[key] = _STACK(op, context)
    return _STACKS[key]


_STACK = None


def does_work(name: str) -> bool:
    from kernelmap.observe.symbols import does_work as work

    return work(name)


def name_key_of(name: str) -> str:
    from kernelmap.observe.mark import name_key

    return name_key(name)


def klass(function: str, frame=None) -> str:
    """A missed frame's class: its library for a vendor frame, else its namespace (the scope
    parts above the function, templates and anonymous namespaces folded)."""
    vendor = f"vendor {Path(frame.lib or '?').name}: " if frame is not None and frame.is_vendor else ""
    name = function.split("(", 1)[0]
    depth, out, part = 0, [], ""
    for ch in name:  # split on :: outside template arguments
        depth += ch == "<"
        depth -= ch == ">"
        part += ch
        if depth == 0 and part.endswith("::"):
            out.append(part[:-2])
            part = ""
    scopes = [re.sub(r"<.*", "<>", p) for p in out if p not in ("(anonymous namespace)", "{lambda()#1}")]
    return vendor + ("::".join(scopes[:3]) or "(global)")


def by_class(c: Counter, frames: dict) -> Counter:
    out: Counter = Counter()
    for name, k in c.items():
        fn = name.split(": ", 1)[-1] if ": " in name and not name.startswith(("at::", "c10::")) else name
        out[klass(fn, frames.get(fn))] += k
    return out


def pct(c: Counter, hit: str) -> str:
    return f"{100 * c[hit] / c['total']:.1f}% ({c[hit]}/{c['total']})" if c["total"] else "n/a"


def speed(runs: int) -> None:
    """observe of one operator against a plain run plus gdb's start-up (same interpreter, same call)."""
    code = "import torch; x = torch.randn(64, 64); torch.add(x, x)"
    env = dict(os.environ)

    def timed(cmd):
        t = time.monotonic()
        subprocess.run(cmd, capture_output=True, env=env, check=True)
        return time.monotonic() - t

    plain = [timed([sys.executable, "-c", code]) for _ in range(runs)]
    # gdb's start-up: the same run under gdb with nothing to stop at (it reads every library's symbols)
    startup = [timed(["gdb", "-nx", "-batch", "-q", "-iex", "set auto-load python-scripts off", "-ex", "run", "--args", sys.executable, "-c", code]) - p
               for p in plain]
    tool = [timed([sys.executable, "-m", "kernelmap", "observe", "-c", code, "--source", TREE_NAME, "--json"]) for _ in range(runs)]
    ref = statistics.median(plain) + statistics.median(startup)
    print(f"speed: plain run {statistics.median(plain):.2f}s + gdb start-up {statistics.median(startup):.2f}s = {ref:.2f}s; "
          f"observe {statistics.median(tool):.2f}s -> {statistics.median(tool) / ref:.2f}x (goal <= 5x)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", type=Path, default=None)
    parser.add_argument("--ops", type=int, default=None, help="grade only the first N operators")
    parser.add_argument("--callers", type=int, default=150, help="leaves whose callers are asked (bottom-up recall)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--speed-only", action="store_true")
    parser.add_argument("--no-speed", action="store_true")
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--misses", type=int, default=25)
    parser.add_argument("--dump", type=Path, default=None, help="write every figure and miss to this JSON file")
    args = parser.parse_args()
    _prepare(args.cache)
    if not args.no_speed:
        speed(args.runs)
    if args.speed_only:
        return 0
    from tests.golden.observed import load

    golden = load()
    # answers for the CPU the set was recorded on (Note [the CPU capability that runs] in graph/ends.py)
    os.environ["ATEN_CPU_CAPABILITY"] = golden.header["capability"].lower()
    print(f"golden set: torch {golden.header['torch']} ({golden.header['git_version'][:12]}), {golden.header['capability']}, "
          f"{len(golden.calls)} OpInfo calls, {len(golden.by_operator())} entry operators, {len(golden.frames)} distinct frames")
    r = grade(golden, args.ops, args.callers, args.verbose)
    print(f"graded {r['ops']} operators in {r['seconds']:.0f}s ({len(r['failed'])} without a stack answer)")
    print(f"top-down recall:  {pct(r['td'], 'named')}   version differences apart: {r['td']['version']}; "
          f"inside a vendor library, below its entry: {r['td']['inside']}")
    print(f"  of its misses, calls of other operators (at::_ops::<op>::call, ::redispatch): {r['entries']['all']}, of which "
          f"{r['entries']['utility']} are of tensor utilities and views (called from helpers `stack` drops as plumbing, or under another overload)")
    print(f"bottom-up recall: {pct(r['bu'], 'named')}   version differences apart: {r['bu']['version']}")
    print(f"leaf recall:      {pct(r['leaf'], 'named')}   version differences apart: {r['leaf']['version']}; "
          f"inside a vendor library, below its entry (graded at the entry): {r['leaf']['inside']}")
    print(f"leaf precision:   {pct(r['prec'], 'ran')}   leaves the set cannot see apart (no breakpoint on them): {r['prec']['unseen']}")
    for title, c in (("missed below the entry", r["missed"]), ("leaves missed", r["leaf_missed"]), ("where leaves that never ran", r["never_ran"]),
                     ("missed by callers", r["bu_missed"])):
        print(f"most {title}, by class:")
        for name, k in by_class(c, r["frames"]).most_common(10):
            print(f"  {k:4d}  {name[:150]}")
        print(f"most {title}:")
        for name, k in c.most_common(args.misses):
            print(f"  {k:4d}  {name[:150]}")
    for f in r["failed"][:10]:
        print(f"  no stack: {f}")
    if args.dump:
        keep = ("td", "leaf", "prec", "bu", "missed", "leaf_missed", "never_ran", "bu_missed")
        args.dump.write_text(json.dumps({"ops": r["ops"], "failed": r["failed"], **{k: dict(r[k]) for k in keep},
                                         "missed_by_op": r["missed_by_op"]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
