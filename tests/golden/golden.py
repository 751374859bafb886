"""The golden chains (chains.yaml) as data, and how a call tree is graded
against them: which steps it holds, in order along one path from its root,
and the first step it misses. Shared by tests/golden and benches/bench_accuracy.py.

A node answers a step when it names the same function (its last name part,
`structured_mm_out_cuda::impl` read as `mm_out_cuda`) and points at the step's
line: its definition's range holds the line, or (for a vendor call or a launch)
its call site is on it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
CHAINS = HERE / "chains.yaml"
HOW = ("dispatcher", "direct", "stub", "launch", "vendor")


@dataclass(frozen=True)
class Step:
    symbol: str
    file: str
    line: int
    how: str

    @property
    def short(self) -> str:
        return short_name(self.symbol)

    def __str__(self) -> str:
        return f"{self.symbol} ({self.file}:{self.line}, {self.how})"


@dataclass(frozen=True)
class Chain:
    id: str
    start: str
    device: str
    condition: str
    steps: tuple[Step, ...]


@dataclass(frozen=True)
class Landmarks:
    """What `where OP --device D` must name: the entry kernel and the stub kernel (or none)."""

    op: str
    device: str
    entry: Step
    stub: Step | None


def short_name(symbol: str) -> str:
    """The function's own name: no namespace, no template arguments, a
    structured kernel by its kernel name (`structured_mm_out_cuda::impl` -> `mm_out_cuda`)."""
    text = re.sub(r"<[^<>]*>", "", symbol)
    text = re.sub(r"::(impl|meta)$", "", text)
    if text.endswith("::operator()"):
        return "operator()"
    last = text.rsplit("::", 1)[-1]
    return last.removeprefix("structured_")


def _step(row: list, how: str | None = None) -> Step:
    symbol, file, line, *rest = row
    return Step(str(symbol), str(file), int(line), str(rest[0]) if rest else (how or "dispatcher"))


def load(path: Path = CHAINS) -> tuple[tuple[Chain, ...], tuple[Landmarks, ...]]:
    data = yaml.safe_load(path.read_text())
    chains = tuple(
        Chain(c["id"], c["start"], c["device"], c.get("condition", ""), tuple(_step(s) for s in c["steps"])) for c in data["chains"]
    )
    landmarks = tuple(
        Landmarks(op, device, _step(entry["entry"]), _step(entry["stub"], "stub") if entry.get("stub") else None)
        for op, devices in data["operators"].items()
        for device, entry in devices.items()
    )
    return chains, landmarks


# -- grading a tree -----------------------------------------------------------


def node_short(name: str) -> str:
    """A node's function name; a node may carry arguments or a launch's `<<<...>>>` after it."""
    name = name.replace("(anonymous namespace)::", "")
    return short_name(name if name.endswith("operator()") else name.split("(")[0].split("<<<")[0])


def answers(node, step: Step) -> bool:
    """Whether a call-tree node is this step (see the module's docstring)."""
    if node_short(node.name) != step.short:
        return False
    for location in (node.location, node.attrs.get("call_site")):
        if location is None or not hasattr(location, "path") or location.path != step.file:
            continue
        end = location.end_line or location.line
        if location.line <= step.line <= end:
            return True
    return False


@dataclass(frozen=True)
class Grade:
    chain: Chain
    present: tuple[bool, ...]  # each step somewhere in the tree
    in_order: int  # the most steps found in order along one path from the root
    first_missing: Step | None  # the first step the best path lacks


def grade(chain: Chain, tree) -> Grade:
    """How much of `chain` the call tree holds (explicit stack, no recursion)."""
    steps = chain.steps
    present = [False] * len(steps)
    best, best_next = 0, 0
    stack = [(tree.root, 0)]  # node, how many steps matched in order above it
    while stack:
        node, matched = stack.pop()
        for i, step in enumerate(steps):
            if not present[i] and answers(node, step):
                present[i] = True
        if matched < len(steps) and answers(node, steps[matched]):
            matched += 1
        if matched > best:
            best = matched
        stack.extend((c, matched) for c in node.children)
    best_next = best
    return Grade(chain, tuple(present), best, steps[best_next] if best_next < len(steps) else None)
