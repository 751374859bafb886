"""What an edit costs: the translation units a change to one file, line,
symbol or operator's yaml entry makes a release build compile again, the
libraries they go into, the operators whose code they hold, an estimated
rebuild time, and a cheaper place for the same change when there is one.

    answer = impact("aten/src/ATen/native/cuda/Loops.cuh", device="cuda")
    answer.counts()          # {"cu": ..., "cpp": ...}
    impact("aten::add.Tensor")   # the files torchgen rewrites, and what includes them

The include graph comes from the tree's index (kernelmap.source.includes)
and the generated headers (kernelmap.codegen.headers), resolved and
evaluated per device by kernelmap.impact.graph; the units a release build
compiles by kernelmap.impact.units; the cost by kernelmap.impact.cost. The
graph, the units, their operators and their costs are built once per index
and device and kept in the cache; a question reads them back and walks the
graph from the edited files to every unit that includes them. Nothing here
imports torch.

Note [advice]
An edit of a header line may have a cheaper place. At a declaration whose
function is defined out of line, the change of its behaviour belongs to the
definition, in a .cpp that one unit compiles (or one per CPU capability).
At a stub's `DECLARE_DISPATCH`, what the stub does is in the kernels
`REGISTER_DISPATCH` names, in the native/cpu and native/cuda files. Inside
a body the header defines (inline, a template) the change is where it is:
every includer compiles that body, and the answer offers nothing. (An
operator's declarations live in its own generated headers already: a yaml
edit rewrites `ops/<op>*.h`, and only `TensorBody.h` for a method reaches
every unit.)
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from kernelmap.errors import BadInput, KernelmapError, SourceError, UnknownName
from kernelmap.impact.graph import GENERATED, TEMPLATE, THIRD_PARTY, IncludeGraph
from kernelmap.impact.model import Advice, EditedFile, Estimate, ImpactAnswer, RebuiltUnit
from kernelmap.impact.units import Unit
from kernelmap.model import Location

__all__ = ["ImpactAnswer", "ImpactData", "impact", "open_impact"]

NATIVE_YAML = "aten/src/ATen/native/native_functions.yaml"
DEVICES = ("cpu", "cuda", "rocm")
_SUFFIXES = (".cpp", ".cc", ".cu", ".h", ".hpp", ".cuh", ".mm", ".in", ".yaml", ".inc")
MAX_QUERY = 1000


@dataclass
class ImpactData:
    """What a question reads back from the cache for one tree and device."""

    graph: IncludeGraph
    units: tuple[Unit, ...]
    unit_ops: dict[str, tuple[str, ...]]  # source path -> operators (Note [operators of a unit])
    unit_seconds: dict[str, float]  # unit name -> estimated CPU seconds (Note [rebuild cost model])
    unit_bytes: dict[str, int]  # unit name -> bytes its closure reads
    closures: dict[str, dict[int, tuple[int, int]]]  # context -> unit's node -> its closure as bitsets (sure, maybe)
    headers_dir: str  # the regenerated headers' root (holds build/aten/src/ATen)
    sources_dir: str  # the regenerated sources' root
    extra: dict[str, tuple[int, int]] = field(default_factory=dict)  # files read from disk beyond the index -> (size, mtime_ns)


# ---------------------------------------------------------------------------
# Opening (and building) the data
# ---------------------------------------------------------------------------


def _generated(tree_root: Path, progress=None) -> tuple[Path, Path]:
    """The regenerated headers' and sources' roots (generated on first use)."""
    from kernelmap.codegen import generated_files
    from kernelmap.codegen.headers import generated_headers

    headers = generated_headers(tree_root, progress=progress)
    files = generated_files(tree_root, progress=progress)
    return headers.aten_dir.parents[3], files.root


def _generated_paths(headers_dir: Path, sources_dir: Path) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for base, tops in ((headers_dir, ("build",)), (sources_dir, ("build", "torch"))):
        for top in tops:
            for dirpath, _, filenames in os.walk(base / top):
                rel = os.path.relpath(dirpath, base).replace(os.sep, "/")
                for name in filenames:
                    if name.endswith((".h", ".cpp", ".cu", ".cuh", ".hpp")):
                        out[f"{rel}/{name}"] = Path(dirpath) / name
    return out


def _cache_key(tree, device: str, headers_dir: Path, sources_dir: Path) -> dict:
    from kernelmap.impact.cost import model_fingerprint
    from kernelmap.impact.graph import code_version
    from kernelmap.source.records import index_path, read_record

    def manifest(d: Path) -> object:
        try:
            return (d / "manifest.json").stat().st_mtime_ns, (d / "manifest.json").stat().st_size
        except OSError:
            return None

    return {"index": read_record(index_path(tree)), "root": str(tree.root), "device": device, "code": code_version(),
            "cost": model_fingerprint(), "headers": [str(headers_dir), manifest(headers_dir)], "sources": [str(sources_dir), manifest(sources_dir)]}


def open_impact(tree, index, device: str, *, progress=None) -> ImpactData:
    """The impact data of `tree` (whose open index is `index`) for `device`:
    read from the cache, else built and kept there. The cache's last key is
    kept beside it, so a warm question checks it without opening (or
    importing) the generated files' code."""
    from kernelmap import env
    from kernelmap.impact import graph as graphs

    pointer = env.cache_dir() / "impact" / f"{tree.name}.{device}.key.json"
    data = _warm(pointer, tree, device)
    if data is not None:
        return data
    headers_dir, sources_dir = _generated(tree.root, progress)
    key = _cache_key(tree, device, headers_dir, sources_dir)
    path = graphs.cache_path(env.cache_dir(), tree.name, device, key)
    data = graphs.load(path)
    if not (isinstance(data, ImpactData) and _extra_unchanged(tree.root, data.extra)):
        data = build_impact(tree, index, device, headers_dir, sources_dir)
        try:
            graphs.save(path, data)
        except OSError:
            return data  # a read-only cache: answer all the same
    try:
        _write_json(pointer, {"key": key, "graph": path.name})
    except OSError:
        pass
    return data


def _warm(pointer: Path, tree, device: str) -> ImpactData | None:
    """The cached data when the key recorded beside it is still the key."""
    import json

    from kernelmap.impact import graph as graphs

    try:
        recorded = json.loads(pointer.read_text())
        key = recorded["key"]
        headers_dir, sources_dir = Path(key["headers"][0]), Path(key["sources"][0])
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return None
    if json.dumps(_cache_key(tree, device, headers_dir, sources_dir), sort_keys=True, default=str) != json.dumps(key, sort_keys=True, default=str):
        return None
    data = graphs.load(pointer.parent / str(recorded.get("graph")))
    if isinstance(data, ImpactData) and _extra_unchanged(tree.root, data.extra):
        return data
    return None


def _write_json(path: Path, value) -> None:
    import json

    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(value, default=str))
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _extra_unchanged(root: Path, extra: dict[str, tuple[int, int]]) -> bool:
    for rel, (size, mtime) in extra.items():
        try:
            st = os.stat(root / rel)
        except OSError:
            return False
        if (st.st_size, st.st_mtime_ns) != (size, mtime):
            return False
    return True


def build_impact(tree, index, device: str, headers_dir: Path, sources_dir: Path) -> ImpactData:
    """Build the graph, the units, their operators and costs (Note [rebuild cost model])."""
    from kernelmap.catalog import load_catalog
    from kernelmap.impact.cost import cost_model
    from kernelmap.impact.graph import Sources, build_graph
    from kernelmap.impact.ops import unit_operators
    from kernelmap.impact.units import translation_units

    tree_files = {f.path: f.size for f in index.files()}
    generated = _generated_paths(headers_dir, sources_dir)
    graph = build_graph(Sources(tree.root, tree_files, index.include_directives(), index.macro_definitions(), generated), device)
    extra = {}
    for node, (p, origin) in enumerate(zip(graph.paths, graph.origin)):
        if origin != GENERATED and p not in tree_files:
            try:
                st = os.stat(tree.root / p)
                extra[p] = (st.st_size, st.st_mtime_ns)
            except OSError:
                pass
    units = translation_units(tree.root, frozenset(tree_files), frozenset(generated), device)
    catalog = load_catalog(tree=tree.root, origin=tree.origin)
    ops = unit_operators(index, catalog, ((p, d) for p, d in generated.items()))
    model = cost_model()
    wanted: dict[str, list[int]] = {}
    for u in units:
        node = graph.node(u.path)
        if node is not None:
            wanted.setdefault(u.context, []).append(node)
    closures = graph.unit_closures(wanted)
    unit_bytes, unit_seconds = {}, {}
    for u in units:
        node = graph.node(u.path)
        nbytes = graph.bytes_of(closures[u.context][node][1])[1] if node is not None else 0
        unit_bytes[u.name] = nbytes
        unit_seconds[u.name] = model.predict(u.kind, nbytes, graph.sizes[node] if node is not None else 0)
    unit_ops = {p: tuple(sorted(v)) for p, v in ops.items()}
    return ImpactData(graph, units, unit_ops, unit_seconds, unit_bytes, closures, str(headers_dir), str(sources_dir), extra)


# ---------------------------------------------------------------------------
# Questions
# ---------------------------------------------------------------------------


def impact(target: str, *, device: str = "cpu", source: str | None = None, progress=None, jobs: int | None = None) -> ImpactAnswer:
    """What editing `target` costs a release build for `device`.

    `target` is a repository path (`aten/src/ATen/native/cuda/Loops.cuh`),
    a path and line (`...:120`; a line of native_functions.yaml is that
    operator's entry), a C++ symbol (`at::native::add_out`) or an operator
    (`aten::add.Tensor`)."""
    from kernelmap.source import open_index, select_tree

    target = (target or "").strip()
    if not target:
        raise BadInput("impact needs a path, a symbol or an operator")
    if len(target) > MAX_QUERY or "\0" in target:
        raise BadInput("that is too long for a path, symbol or operator")
    if device not in DEVICES:
        raise BadInput(f"unknown device {device!r} for impact; choose one of {', '.join(DEVICES)}")
    tree = select_tree(source)
    index = open_index(tree)
    try:
        data = open_impact(tree, index, device, progress=progress)
        return _answer(target, device, tree, index, data, jobs or os.cpu_count() or 1)
    finally:
        index.close()


def _looks_like_path(target: str) -> bool:
    base = target.rsplit(":", 1)[0] if re.search(r":\d+$", target) else target
    return "/" in base or base.endswith(_SUFFIXES)


def _answer(target: str, device: str, tree, index, data: ImpactData, jobs: int) -> ImpactAnswer:
    notes: list[str] = []
    advice: list[Advice] = []
    graph = data.graph
    if _looks_like_path(target):
        kind, edited = _path_target(target, tree, index, data, notes)
    elif target.startswith("aten::") or (re.fullmatch(r"[A-Za-z_]\w*\.\w+", target) is not None):
        kind, edited = _op_target(target, tree, data, notes)
    else:
        kind, edited = _symbol_target(target, tree, index, data, notes)
    nodes = [(e, graph.node(e.path)) for e in edited]
    rebuilt = _rebuilt(data, [(e.path, n) for e, n in nodes if n is not None])
    units = tuple(sorted(rebuilt.values(), key=lambda u: (u.library, u.path, u.capability or "")))
    operators = sorted({op for u in units for op in data.unit_ops.get(u.path, ())})
    if kind == "line":
        advice.extend(_line_advice(edited[0], tree, index, data))
    third_party = sorted({name for _, n in nodes if n is not None for name, leaf, _, c in graph.leaves.get(n, ())
                          if leaf == THIRD_PARTY and graph.maybe[c]})
    estimate = _estimate(data, units, jobs)
    from kernelmap.impact.cost import cost_model

    model = cost_model()
    if not model.fit.samples:
        notes.append("the cost model was never calibrated (run benches/bench_impact.py --calibrate): the times are a rough guess")
    if any(u.kind == "cu" for u in units) and not model.calibrated("cu"):
        notes.append("no .cu compile was measured on this machine: a .cu unit is costed as host C++ of the same size; "
                     "nvcc compiles its device code again for each GPU architecture of the build, on top")
    maybe = sum(1 for u in units if u.maybe)
    if maybe:
        notes.append(f"{maybe} of the units include it only under #if conditions kernelmap cannot decide (marked maybe)")
    if not units and all(n is not None for _, n in nodes) and edited:
        notes.append(f"no unit a release build for {device} compiles includes {'it' if len(edited) == 1 else 'them'}")
    stale = index.stale_note()
    if stale:
        notes.append(stale)
    return ImpactAnswer(target, kind, device, tree.origin, tuple(edited), units, tuple(operators), estimate, tuple(advice), tuple(notes),
                        tuple(third_party))


def _rebuilt(data: ImpactData, edited: list[tuple[str, int]]) -> dict[str, RebuiltUnit]:
    """The units whose closure holds one of the `edited` (path, node)s: a bit test each."""
    graph = data.graph
    out: dict[str, RebuiltUnit] = {}
    for path, node in edited:
        for u in data.units:
            n = graph.node(u.path)
            if n is None:
                continue
            sure, maybe = data.closures[u.context][n]
            if not (maybe >> node) & 1:
                continue
            is_sure = bool((sure >> node) & 1)
            old = out.get(u.name)
            if old is not None and (not old.maybe or not is_sure):
                continue
            out[u.name] = RebuiltUnit(u.path, u.kind, u.library, data.unit_seconds.get(u.name, 0.0), u.capability, not is_sure,
                                      path if len(edited) > 1 else None)
    return out


def _estimate(data: ImpactData, units: tuple[RebuiltUnit, ...], jobs: int) -> Estimate:
    from kernelmap.impact.cost import cost_model

    model = cost_model()
    total = sum(u.seconds for u in units)
    longest = max((u.seconds for u in units), default=0.0)
    text, error = model.describe()
    measured = bool(model.fit.samples) and all(model.calibrated(u.kind) or u.kind != "cu" for u in units)
    return Estimate(round(total, 1), round(max(total / jobs, longest), 1), jobs, text, error, measured)


# -- targets -------------------------------------------------------------------


def _path_target(target: str, tree, index, data: ImpactData, notes: list[str]):
    from kernelmap.model import generated_template

    m = re.fullmatch(r"(.+?)(?::(\d+))?", target)
    path, line_text = m.group(1), m.group(2)
    path = path.removeprefix("./")
    if path.startswith("/"):
        try:
            path = str(Path(path).resolve().relative_to(tree.root.resolve()))
        except ValueError:
            raise BadInput(f"{path} is not inside the tree {tree.name} ({tree.root}); give a path relative to its root") from None
    if ".." in path.split("/") or "\\" in path:
        raise BadInput(f"{path!r}: give a path inside the tree, relative to its root")
    line = int(line_text) if line_text else None
    graph = data.graph
    if path == NATIVE_YAML:
        if line is None:
            raise BadInput(f"name the entry edited: {NATIVE_YAML}:LINE, or the operator (aten::add.Tensor)")
        return _op_target(_op_at_line(tree, line), tree, data, notes, yaml_line=line)
    node = graph.node(path)
    if node is None:
        templated = sorted(p for p, o in zip(graph.paths, graph.origin) if o == GENERATED and generated_template(p) == path)
        if templated:
            notes.append(f"{path} is a torchgen template: a build regenerates the {len(templated)} files written from it, "
                         "and recompiles what includes them")
            return "file", [EditedFile(p, f"written from the template {path}") for p in templated]
        if (tree.root / path).is_file():
            raise BadInput(f"{path} is not C++ a release build reads (no unit includes or compiles it)")
        close = _close_paths(path, graph)
        hint = f"; closest: {', '.join(close)}" if close else ""
        raise BadInput(f"no file {path} in the tree {tree.name} or its generated files{hint}")
    origin = graph.origin[node]
    location = None
    if line is not None:
        count = _line_count(tree, data, path)
        if not 1 <= line <= max(count, 1):
            raise BadInput(f"{path} has {count} lines; line {line} is not one of them")
        location = Location(path, line, origin=tree.origin if origin != GENERATED else None)
    if origin == GENERATED:
        template = generated_template(path)
        notes.append(f"{path} is generated: torchgen rewrites it from {template or 'its code'}, so an edit there is lost at the next build"
                     + (f"; edit {template} (or native_functions.yaml for one operator)" if template else ""))
    elif origin == TEMPLATE:
        notes.append(f"{path} is a template cmake configures into {path.removesuffix('.in').rsplit('/', 1)[-1]}: "
                     "what includes that header rebuilds")
    reason = "the file named" if line is None else f"line {line}"
    return ("line" if line is not None else "file"), [EditedFile(path, reason, location)]


def _close_paths(path: str, graph: IncludeGraph) -> list[str]:
    import difflib

    name = path.rsplit("/", 1)[-1]
    same = [p for p in graph.paths if p.rsplit("/", 1)[-1] == name]
    if same:
        return same[:3]
    return difflib.get_close_matches(path, graph.paths, n=3, cutoff=0.8)


def _line_count(tree, data: ImpactData, path: str) -> int:
    disk = _disk_path(tree, data, path)
    try:
        with open(disk, "rb") as f:
            return f.read().count(b"\n") + 1
    except OSError:
        return 0


def _disk_path(tree, data: ImpactData, path: str) -> Path:
    origin = data.graph.origin[data.graph.node(path)] if data.graph.node(path) is not None else None
    if origin == GENERATED:
        headers = Path(data.headers_dir) / path
        return headers if headers.exists() else Path(data.sources_dir) / path
    return tree.root / path


def _op_at_line(tree, line: int) -> str:
    """The operator whose native_functions.yaml entry holds `line`."""
    try:
        lines = (tree.root / NATIVE_YAML).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError as e:
        raise SourceError(f"cannot read {NATIVE_YAML} of {tree.name}: {e.strerror}") from None
    if not 1 <= line <= len(lines):
        raise BadInput(f"{NATIVE_YAML} has {len(lines)} lines; line {line} is not one of them")
    for i in range(line - 1, -1, -1):
        m = re.match(r"- func: ([\w.]+)\(", lines[i])
        if m:
            return f"aten::{m.group(1)}"
    raise BadInput(f"{NATIVE_YAML}:{line} is above the first operator's entry")


def _op_target(name: str, tree, data: ImpactData, notes: list[str], yaml_line: int | None = None):
    from kernelmap.catalog import load_catalog
    from kernelmap.impact.ops import rewritten_files

    catalog = load_catalog(tree=tree.root, origin=tree.origin)
    ops = catalog.resolve(name)
    op = ops[0]
    if len(ops) > 1:
        notes.append(f"{name} names {len(ops)} overloads; this is the edit of {op.name}'s entry "
                     f"(others: {', '.join(str(o.name) for o in ops[1:4])}{'...' if len(ops) > 4 else ''})")
    graph = data.graph
    generated = ((p, _disk_path(tree, data, p)) for p, o in zip(graph.paths, graph.origin) if o == GENERATED)
    files = sorted(rewritten_files([str(op.name)], generated)[str(op.name)])
    yaml_location = op.location if yaml_line is None else Location(NATIVE_YAML, yaml_line, origin=tree.origin)
    edited = [EditedFile(NATIVE_YAML, f"the entry of {op.name}", yaml_location)]
    edited += [EditedFile(p, f"rewritten by torchgen for {op.name}") for p in files]
    notes.append("torchgen runs again after any edit of native_functions.yaml and rewrites only the files whose text changes: "
                 "those that spell the operator's schema or registrations (an edit that renames or adds an operator changes more)")
    if "method" in op.variants:
        notes.append(f"{op.name} is a Tensor method: its declaration in ATen/core/TensorBody.h is rewritten too, and nearly every unit includes it")
    return "operator", edited


def _symbol_target(name: str, tree, index, data: ImpactData, notes: list[str]):
    found = index.definitions(name)
    if not found:
        from kernelmap.catalog import load_catalog

        try:
            load_catalog(tree=tree.root, origin=tree.origin).resolve(name)
        except KernelmapError:
            suggestions = tuple(index.search(name.rsplit("::", 1)[-1], limit=5)) if len(name.rsplit("::", 1)[-1]) >= 3 else ()
            raise UnknownName(name, suggestions) from None
        return _op_target(name, tree, data, notes)
    seen: dict[str, EditedFile] = {}
    for d in found:
        seen.setdefault(d.location.path, EditedFile(d.location.path, f"defines {d.name}", d.location))
    if len(found) > 1:
        notes.append(f"{name} has {len(found)} definitions in {len(seen)} files; an edit of each is counted")
    return "symbol", list(seen.values())


# -- advice --------------------------------------------------------------------

_HEADER = (".h", ".hpp", ".cuh")
_DECLARED = re.compile(r"([A-Za-z_]\w*)\s*\((?![^()]*\)\s*\{)")
_DECLARED_STUB = re.compile(r"\bDECLARE_DISPATCH\s*\([^;]*?,\s*(\w+)\s*\)")
_NOT_NAMES = frozenset(("if", "for", "while", "switch", "return", "sizeof", "decltype", "alignas", "static_assert", "TORCH_API", "C10_API"))


def _line_advice(edit: EditedFile, tree, index, data: ImpactData) -> list[Advice]:
    """A cheaper place for the change at `edit`'s line (Note [advice])."""
    path, line = edit.path, edit.location.line if edit.location else None
    if line is None or not path.endswith(_HEADER):
        return []
    try:
        text = _disk_path(tree, data, path).read_text(encoding="utf-8", errors="replace").splitlines()[line - 1]
    except (OSError, IndexError):
        return []
    out: list[Advice] = []
    stub = _DECLARED_STUB.search(text)
    if stub:  # a stub's declaration: what it does is in the kernels registered for it
        by_file: dict[str, list] = {}
        for r in index.stub_registrations(stub.group(1)):
            by_file.setdefault(r.location.path, []).append(r)
        for where, regs in by_file.items():
            units, seconds = _cost_of(data, [where])
            if units:
                out.append(Advice(f"{stub.group(1)}'s {regs[0].device} kernel {regs[0].kernel or ''} is registered in {where}: change it there".replace("  ", " "),
                                  where, regs[0].location, units, seconds))
        return sorted(out, key=lambda a: (a.cpu_seconds, a.path))[:5]
    if index.definition_at(path, line) is not None:  # the body is in the header: every includer compiles it
        return []
    declared = [n for n in _DECLARED.findall(text) if n not in _NOT_NAMES]
    if not declared:
        return []
    for d in index.definitions(declared[-1]):
        where = d.location.path
        if where.endswith(_HEADER) or where == path:
            continue
        units, seconds = _cost_of(data, [where])
        if units:
            out.append(Advice(f"{d.name} is defined out of line: change its definition in {where} instead", where, d.location, units, seconds))
    return sorted(out, key=lambda a: (a.cpu_seconds, a.path))[:5]


def _cost_of(data: ImpactData, paths: list[str]) -> tuple[int, float]:
    nodes = [(p, data.graph.node(p)) for p in paths if data.graph.node(p) is not None]
    rebuilt = _rebuilt(data, nodes)
    return len(rebuilt), round(sum(u.seconds for u in rebuilt.values()), 1)
