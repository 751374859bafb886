"""How one operator's path changed between two source trees: its yaml entry
(kind, structured delegate, dispatch keys, ufunc loops, tags), its kernels
(matched by qualified name, else by body similarity, so a renamed kernel is
found as renamed), the stubs its call reaches and their registrations, the
generated wrappers (regenerated with each tree's own torchgen) and, on
request, every node of the call tree. Each location is pinned to its own
tree, so both sides can be opened.

    d = diff_op("aten::conv2d", "pytorch-1.13.1+dfsg", "pytorch-2.6.0+dfsg")
    [c for c in d.changes if c.section == "kernel"]

Note [matching kernels across versions]
A kernel is the same kernel when its qualified name is the same (then it is
`moved` if its file changed, `changed` if its body did, else `same`).
Kernels left over on both sides are paired greedily by the similarity of
their bodies (tokens, difflib's ratio; the name itself left out): a pair at
RENAME_SIMILARITY or above is `renamed` (at::native::conv2d ->
at::native::conv2d_symint when symbolic shapes arrived); the rest are
`removed` and `added`. Line numbers alone never match kernels: every edit
above a kernel shifts them.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from kernelmap.errors import BadInput, KernelmapError, SourceError
from kernelmap.model import (
    Answer,
    Location,
    NodeKind,
    Op,
    Origin,
    OriginKind,
    OriginTable,
    check_document,
    document,
    location_from_json,
    location_json,
)
from kernelmap.safefiles import NotRegularFile, read_text

DIFF_VERSION = 1
RENAME_SIMILARITY = 0.6

SECTIONS = ("yaml", "kernel", "stub", "wrapper", "node")
CHANGES = ("added", "removed", "changed", "moved", "renamed", "same")


@dataclass(frozen=True)
class Change:
    """One difference (or sameness) of one part of the path, on both sides."""

    section: str  # yaml | kernel | stub | wrapper | node (SECTIONS)
    change: str  # added | removed | changed | moved | renamed | same (CHANGES)
    name: str  # what changed: "dispatch CPU", "at::native::conv2d_symint", "add_stub CPU", "wrapper CPU"
    before: str | None = None  # the value on the --from side, as text
    after: str | None = None  # the value on the --to side
    old: Location | None = None  # where it is in the --from tree (or its generated files)
    new: Location | None = None  # where it is in the --to tree
    detail: str = ""  # "body 87% similar", "line 1701 -> 1023"

    def __post_init__(self) -> None:
        if self.section not in SECTIONS:
            raise ValueError(f"a change's section is one of {', '.join(SECTIONS)}, not {self.section!r}")
        if self.change not in CHANGES:
            raise ValueError(f"a change is one of {', '.join(CHANGES)}, not {self.change!r}")
        if self.change == "added" and self.old is not None or self.change == "removed" and self.new is not None:
            raise ValueError(f"{self.name}: an added part has no old location and a removed one no new location")

    def to_json(self, origins: OriginTable | None = None) -> dict[str, Any]:
        return {
            "section": self.section,
            "change": self.change,
            "name": self.name,
            "before": self.before,
            "after": self.after,
            "from": location_json(self.old, origins),
            "to": location_json(self.new, origins),
            "detail": self.detail,
        }

    @staticmethod
    def from_json(d: Mapping[str, Any], origins: OriginTable | None = None) -> Change:
        return Change(
            d["section"], d["change"], d["name"], d.get("before"), d.get("after"),
            location_from_json(d.get("from"), origins), location_from_json(d.get("to"), origins), d.get("detail", ""),
        )


@dataclass(frozen=True)
class OpDiff(Answer):
    """The `diff` answer: one operator's path in two trees."""

    query: str  # as asked: "aten::conv2d", "torch.relu"
    op: str  # the operator on the --to side, else the --from side: "aten::conv2d"
    before: Origin  # the --from tree
    after: Origin  # the --to tree
    device: str
    changes: tuple[Change, ...] = ()
    notes: tuple[str, ...] = ()

    DOCUMENT = "diff"

    def section(self, name: str) -> tuple[Change, ...]:
        return tuple(c for c in self.changes if c.section == name)

    def to_json(self) -> dict[str, Any]:
        """The diff/1 document (kernelmap.answers describes it)."""
        origins = OriginTable()
        changes = [c.to_json(origins) for c in self.changes]
        before, after = origins.key(self.before), origins.key(self.after)
        return document(
            self.DOCUMENT, DIFF_VERSION, query=self.query, op=self.op, device=self.device,
            **{"from": before, "to": after}, notes=list(self.notes), origins=origins.to_json(), changes=changes,
        )

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> OpDiff:
        d = check_document(d, cls.DOCUMENT, DIFF_VERSION)
        origins = OriginTable.from_json(d.get("origins"))
        before, after = origins.get(d["from"]), origins.get(d["to"])
        assert before is not None and after is not None, "a diff names both its trees"
        changes = tuple(Change.from_json(c, origins) for c in d.get("changes") or ())
        return cls(d["query"], d["op"], before, after, d.get("device", "cpu"), changes, tuple(d.get("notes") or ()))


# ---------------------------------------------------------------------------
# One side: what a tree says about the operator
# ---------------------------------------------------------------------------


@dataclass
class _Side:
    tree: Any  # kernelmap.source.trees.Tree
    catalog: Any
    index: Any
    ops: tuple[Op, ...]  # the operator and its structured delegate, if any
    generated: Any = None  # kernelmap.codegen.GeneratedCode, None when its torchgen failed
    call: Any = None  # the CallTree of a call on the device

    @property
    def op(self) -> Op | None:
        return self.ops[0] if self.ops else None


def diff_op(target: str, before: str, after: str, *, device: str = "cpu", nodes: bool = False) -> OpDiff:
    """How the path of `target` (an operator or a Python name) changed from the
    tree `before` to the tree `after` (registered names or directories), for a
    call on `device`. Both trees must be indexed and hold their own torchgen/."""
    from kernelmap.source import select_tree

    if not before or not after:
        raise BadInput("diff needs two trees: --from TREE --to TREE")
    old_tree, new_tree = select_tree(before), select_tree(after)
    if old_tree.root == new_tree.root:
        raise BadInput(f"--from and --to name the same tree ({old_tree.name}); a diff needs two trees")
    for t in (old_tree, new_tree):
        if not (t.root / "torchgen").is_dir():
            raise SourceError(f"tree {t.name} ({t.root}) has no torchgen/: diff reads each tree's yaml with its own torchgen")
    notes: list[str] = []
    old = _side(target, old_tree, device, notes)
    try:
        new = _side(target, new_tree, device, notes)
        try:
            if old.op is None and new.op is None:
                from kernelmap.errors import UnknownName

                raise UnknownName(target)
            changes: list[Change] = []
            changes += _yaml_changes(old, new)
            if old.op is None or new.op is None:
                # what one tree's operator reaches (cpublas_gemm_impl, mul_kernel) is mostly still in the
                # other tree, reached by other operators: not "removed" with the operator
                there, absent = (old, new) if new.op is None else (new, old)
                notes.append(f"kernels, stubs and wrappers not compared: what {there.tree.name}'s operator reaches may still be "
                             f"in {absent.tree.name}, where other operators reach it")
            else:
                changes += _kernel_changes(old, new)
                changes += _stub_changes(old, new)
                changes += _wrapper_changes(old, new)
                if nodes:
                    changes += _node_changes(old, new)
        finally:
            new.index.close()
    finally:
        old.index.close()
    op = str((new.op or old.op).name)
    return OpDiff(target, op, old_tree.origin, new_tree.origin, device, tuple(changes), tuple(notes))


def _side(target: str, tree, device: str, notes: list[str]) -> _Side:
    from kernelmap import graph
    from kernelmap.catalog import load_catalog
    from kernelmap.errors import UnknownName
    from kernelmap.names import resolve_ops
    from kernelmap.source import open_index

    catalog = load_catalog(tree=tree.root, origin=tree.origin)
    index = open_index(tree)
    try:
        from kernelmap import env

        found = resolve_ops(target, catalog, load_catalog(), env.torch_install().site_packages)
    except UnknownName:
        notes.append(f"{target} is not in tree {tree.name} ({tree.version})")
        return _Side(tree, catalog, index, ())
    op = found[0]
    delegate = catalog.delegate(op)
    side = _Side(tree, catalog, index, (op,) + ((delegate,) if delegate is not None else ()))
    side.generated = _generated(str(op.name), tree, notes)
    context = graph.open_context(device, source=tree.name if _registered(tree) else str(tree.root))
    side.call = graph.stack(str(op.name), context)
    return side


def _registered(tree) -> bool:
    from kernelmap.source import list_trees

    return any(t.name == tree.name and t.root == tree.root for t in list_trees())


def _generated(op: str, tree, notes: list[str]):
    """The tree's generated code for `op`, made with its own torchgen; None
    (and a note naming what failed) when that torchgen cannot run here."""
    from kernelmap.codegen import locate

    try:
        return locate(op, tree=tree.root)
    except KernelmapError as e:
        notes.append(f"generated wrappers of tree {tree.name} not compared: {e}")
        return None


# ---------------------------------------------------------------------------
# yaml
# ---------------------------------------------------------------------------


def _yaml_changes(old: _Side, new: _Side) -> list[Change]:
    changes: list[Change] = []
    a, b = old.op, new.op
    if a is None or b is None:
        kind = "added" if a is None else "removed"
        return [Change("yaml", kind, "entry", None if a is None else a.schema, None if b is None else b.schema,
                       None if a is None else a.location, None if b is None else b.location)]
    changes.append(_compare("yaml", "entry", a.schema, b.schema, a.location, b.location))
    changes.append(_compare("yaml", "kind", a.kind.value, b.kind.value, a.location, b.location))
    changes.append(_compare("yaml", "structured_delegate", a.structured_delegate, b.structured_delegate, a.location, b.location))
    changes.append(_compare("yaml", "tags", ", ".join(sorted(a.tags)) or None, ", ".join(sorted(b.tags)) or None, a.location, b.location))
    # the delegate (add.out for add.Tensor) carries the structured kernel and the ufunc loops
    old_by = {str(op.name): op for op in old.ops}
    new_by = {str(op.name): op for op in new.ops}
    for name in _ordered(old_by, new_by):
        x, y = old_by.get(name), new_by.get(name)
        prefix = "" if x is a or y is b else f"{name.removeprefix('aten::')} "
        if prefix and (x is None or y is None):
            changes.append(Change("yaml", "added" if x is None else "removed", f"{prefix}entry",
                                  x.schema if x else None, y.schema if y else None, x.location if x else None, y.location if y else None))
            continue
        if prefix:
            changes.append(_compare("yaml", f"{prefix}entry", x.schema, y.schema, x.location, y.location))
            changes.append(_compare("yaml", f"{prefix}kind", x.kind.value, y.kind.value, x.location, y.location))
        ufunc_x = "; ".join(f"{k}: {v}" for k, v in x.ufunc_inner_loop) or None
        ufunc_y = "; ".join(f"{k}: {v}" for k, v in y.ufunc_inner_loop) or None
        if ufunc_x or ufunc_y:
            changes.append(_compare("yaml", f"{prefix}ufunc_inner_loop", ufunc_x, ufunc_y, x.location, y.location))
        kx = {k.key: k.symbol for k in x.dispatch}
        ky = {k.key: k.symbol for k in y.dispatch}
        for key in _ordered(kx, ky):
            changes.append(_compare("yaml", f"{prefix}dispatch {key}", kx.get(key), ky.get(key), x.location, y.location))
    return changes


def _compare(section: str, name: str, before: str | None, after: str | None, old: Location | None, new: Location | None) -> Change:
    if before is None and after is None:
        return Change(section, "same", name, None, None, old, new)
    if before is None:
        return Change(section, "added", name, None, after, None, new)
    if after is None:
        return Change(section, "removed", name, before, None, old, None)
    return Change(section, "same" if before == after else "changed", name, before, after, old, new)


def _ordered(*maps: Iterable[str]) -> list[str]:
    seen: dict[str, None] = {}
    for m in maps:
        for k in m:
            seen.setdefault(k, None)
    return list(seen)


# ---------------------------------------------------------------------------
# kernels (Note [matching kernels across versions])
# ---------------------------------------------------------------------------


def _kernels(side: _Side) -> tuple[dict[str, Location], set[str], set[str]]:
    """Qualified name -> definition of every kernel the yaml names for the
    operator (and its delegate), its structured meta/impl functions, and the
    kernels its stubs run, where the tree defines them; and the names the
    yaml gives, and those of them the index finds no definition of (a macro
    may define them, or a file the parser could not read)."""
    found: dict[str, Location] = {}
    named = {k.symbol for op in side.ops for k in op.dispatch}
    unseen: set[str] = set()
    for name in sorted(named):
        defs = side.index.definitions(name)
        if defs:
            found.setdefault(defs[0].name, defs[0].location)
        else:
            unseen.add(name)
    for op in side.ops:
        for d in side.index.structured_kernels(op.name.unqualified) + side.index.structured_kernels(_impl_name(op)):
            found.setdefault(d.name, d.location)
    for _, registration in _stub_registrations(side):
        if registration.kernel:
            defs = side.index.definitions(registration.kernel)
            if defs:
                found.setdefault(defs[0].name, defs[0].location)
    return found, named, unseen


def _impl_name(op: Op) -> str:
    """How TORCH_IMPL_FUNC names a structured out= kernel: `add_out` for add.out."""
    return f"{op.name.name}_out" if op.name.overload == "out" else op.name.unqualified


def _body(location: Location) -> list[str]:
    """The definition's tokens without the identifiers of its own name line."""
    path = location.disk_path
    if path is None:
        return []
    try:
        lines = read_text(path, errors="replace").splitlines()
    except (OSError, NotRegularFile):
        return []
    text = "\n".join(lines[location.line : (location.end_line or location.line)])
    return re.findall(r"\w+|\S", text)


def similarity(a: Location, b: Location) -> float:
    """How alike two definitions' bodies are, 0..1."""
    x, y = _body(a), _body(b)
    if not x and not y:
        return 1.0
    return difflib.SequenceMatcher(None, x, y, autojunk=False).ratio()


def _kernel_changes(old: _Side, new: _Side) -> list[Change]:
    (a, named_a, unseen_a), (b, named_b, unseen_b) = _kernels(old), _kernels(new)
    changes: list[Change] = []
    for name in [n for n in a if n in b]:
        x, y = a[name], b[name]
        ratio = similarity(x, y)
        where = f"line {x.line} -> {y.line}" if x.line != y.line else ""
        if x.path != y.path:
            changes.append(Change("kernel", "moved", name, str(x), str(y), x, y, f"body {ratio:.0%} similar"))
        elif ratio < 1.0:
            changes.append(Change("kernel", "changed", name, str(x), str(y), x, y, ", ".join(filter(None, [f"body {ratio:.0%} similar", where]))))
        else:
            changes.append(Change("kernel", "same", name, str(x), str(y), x, y, where))
    gone = [n for n in a if n not in b]
    came = [n for n in b if n not in a]
    scored = sorted(((similarity(a[g], b[c]), g, c) for g in gone for c in came), reverse=True)
    paired: set[str] = set()
    for ratio, g, c in scored:
        if ratio < RENAME_SIMILARITY:
            break
        if g in paired or c in paired:
            continue
        paired |= {g, c}
        moved = "" if a[g].path == b[c].path else f", moved {a[g].path} -> {b[c].path}"
        changes.append(Change("kernel", "renamed", f"{g} -> {c}", g, c, a[g], b[c], f"body {ratio:.0%} similar{moved}"))
    for g in (g for g in gone if g not in paired):
        if g in named_b:  # still the kernel, defined where the index cannot see (a macro)
            changes.append(Change("kernel", "changed", g, str(a[g]), None, a[g], None, f"{new.tree.name} names it in its yaml but the index finds no plain definition (a macro may define it)"))
        else:
            changes.append(Change("kernel", "removed", g, str(a[g]), None, a[g], None))
    for c in (c for c in came if c not in paired):
        if c in named_a:
            changes.append(Change("kernel", "changed", c, None, str(b[c]), None, b[c], f"{old.tree.name} names it in its yaml but the index finds no plain definition (a macro may define it)"))
        else:
            changes.append(Change("kernel", "added", c, None, str(b[c]), None, b[c]))
    # named by a yaml, defined nowhere the index sees: said, never dropped
    for name in sorted((unseen_a | unseen_b) - a.keys() - b.keys()):
        sides = [t.tree.name for t, unseen in ((old, unseen_a), (new, unseen_b)) if name in unseen]
        change = "same" if name in named_a and name in named_b else "removed" if name in named_a else "added"
        changes.append(Change("kernel", change, name, name if name in named_a else None, name if name in named_b else None, None, None,
                              f"no definition found in the index of {' and '.join(sides)}"))
    return changes


# ---------------------------------------------------------------------------
# stubs and their registrations
# ---------------------------------------------------------------------------


def _stubs(side: _Side) -> list[str]:
    if side.call is None:
        return []
    return list(dict.fromkeys(node.name for _, node in side.call.walk() if node.kind is NodeKind.STUB))


def _stub_registrations(side: _Side):
    for stub in _stubs(side):
        for r in side.index.stub_registrations(stub):
            yield stub, r


def _stub_changes(old: _Side, new: _Side) -> list[Change]:
    def table(side: _Side) -> dict[str, tuple[str | None, Location]]:
        out: dict[str, tuple[str | None, Location]] = {}
        for stub, r in _stub_registrations(side):
            key = f"{stub} {r.device}" + (f" {r.capability}" if r.capability and r.capability != "each CPU capability" else "")
            out.setdefault(key, (r.kernel, r.location))
        for stub in _stubs(side):
            if not any(k.split(" ")[0] == stub for k in out):  # declared, registered nowhere in the tree
                out[stub] = (None, _declaration(side, stub))
        return out

    a, b = table(old), table(new)
    changes = []
    for key in _ordered(a, b):
        x, y = a.get(key), b.get(key)
        if x is None or y is None:
            changes.append(_compare("stub", key, x and (x[0] or "declared only"), y and (y[0] or "declared only"), x and x[1], y and y[1]))
        elif x[0] != y[0]:
            changes.append(Change("stub", "changed", key, x[0], y[0], x[1], y[1]))
        else:
            changes.append(Change("stub", "moved" if x[1].path != y[1].path else "same", key, x[0], y[0], x[1], y[1]))
    return [c for c in changes if c.old is not None or c.new is not None]


def _declaration(side: _Side, stub: str) -> Location | None:
    found = side.index.stub_declarations(stub)
    return found[0].location if found else None


# ---------------------------------------------------------------------------
# generated wrappers
# ---------------------------------------------------------------------------


def _wrapper_changes(old: _Side, new: _Side) -> list[Change]:
    if old.generated is None or new.generated is None:
        return []

    def table(side: _Side) -> dict[str, Any]:
        return {f"{r.layer.value} {r.key}": r for r in side.generated.registrations}

    a, b = table(old), table(new)
    changes = []
    for key in _ordered(a, b):
        x, y = a.get(key), b.get(key)
        lx = x.definition.location if x is not None and x.definition else (x.impl.location if x else None)
        ly = y.definition.location if y is not None and y.definition else (y.impl.location if y else None)
        vx = f"{x.symbol} (calls {', '.join(x.calls)})" if x is not None and x.calls else (x.symbol if x else None)
        vy = f"{y.symbol} (calls {', '.join(y.calls)})" if y is not None and y.calls else (y.symbol if y else None)
        change = _compare("wrapper", key, vx, vy, lx, ly)
        if change.change == "same" and lx is not None and ly is not None and lx.path != ly.path:
            change = replace(change, change="moved")
        changes.append(change)
    return changes


# ---------------------------------------------------------------------------
# the call tree's nodes
# ---------------------------------------------------------------------------


def _node_changes(old: _Side, new: _Side) -> list[Change]:
    """Nodes read from each tree (Python and generated layers of the installed
    torch are the same on both sides and left out)."""

    def table(side: _Side) -> dict[str, Location]:
        out: dict[str, Location] = {}
        if side.call is None:
            return out
        for _, node in side.call.walk():
            loc = node.location
            if loc is None or loc.origin is None or loc.origin.kind is not OriginKind.TREE or node.attrs.get("collapsed"):
                continue
            out.setdefault(f"{node.kind.value} {node.name}", loc)
        return out

    a, b = table(old), table(new)
    changes = []
    for key in _ordered(a, b):
        x, y = a.get(key), b.get(key)
        if x is not None and y is not None:
            changes.append(Change("node", "moved" if x.path != y.path else "same", key, str(x), str(y), x, y))
        else:
            changes.append(_compare("node", key, x and str(x), y and str(y), x, y))
    return changes
