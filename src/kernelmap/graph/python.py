"""The Python layer of the static graph: what a Python function calls (module
-> forward -> functional -> builtin), the operators a builtin is, and the
hand-written bindings' C++.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

from kernelmap import env, pysource
from kernelmap.graph.context import GraphContext, _Kept
from kernelmap.graph.grow import Node
from kernelmap.graph.nodes import (
    _builtin_node,
    _called_at,
    _generated,
    _header_function,
    op_node,
    _ops_call,
    _python_location,
    _python_node,
    _tree_op,
)
from kernelmap.graph.rules import is_utility_op
from kernelmap.model import EdgeKind, Location, NodeKind, Op


# -- Python ------------------------------------------------------------------


def _python_children(definition: pysource.PyDef, ctx: GraphContext) -> list[Node]:
    """What a Python definition calls that reaches an operator: its `self.`
    methods, generated bindings (`torch.conv2d`, `Tensor.softmax` on a Tensor
    parameter; tensor utilities like `Tensor.dim` marked as such), hand-written
    ones that call an operator, and the Python functions it calls (functionals,
    the branches of a `boolean_dispatch`) that reach one. Each keeps the line
    that calls it (`call_site`). Read from the stored table while the files it
    read are unchanged (Note [Python read once])."""
    root = ctx.python_dir
    if root is None or not definition.path.is_relative_to(root):
        return [node for node, _ in _computed_children(definition, ctx)]  # not of the Python root: nothing to key it by
    key = ("children", definition.qualname, _relative(definition.path, root), definition.line,
           _entry_points_digest(ctx), _rebound_digest(root))
    found = remembered(root, key, lambda: _children_spec(definition, ctx), (definition.path,))
    children = []
    for spec, condition, line in found:
        if spec[0] == "builtin":
            node = _mark_tensor_utility(_builtin_node(spec[1], ctx, condition), spec[1], ctx)
        else:
            node = stored_node(spec, root, ctx, condition)
        if line is not None:  # the line that makes the call, beside the callee's definition
            node.attrs["call_site"] = _python_location(definition.path, line, None, ctx)
        children.append(node)
    return children


def _children_spec(definition: pysource.PyDef, ctx: GraphContext) -> list:
    """`_python_children` as JSON data: [spec, condition, call line] per child,
    a spec being `def_spec`'s or ["builtin", name]."""
    root = ctx.python_dir
    return [[["builtin", node.payload] if node.kind == "builtin" else def_spec(node.payload, root), node.condition, line]
            for node, line in _computed_children(definition, ctx)]


def _computed_children(definition: pysource.PyDef, ctx: GraphContext) -> list[tuple[Node, int | None]]:
    """`_python_children` worked out from the parsed files: (node, the line of its call)."""
    import ast

    root = ctx.python_dir
    if isinstance(definition.node, ast.ClassDef):
        forward = pysource.find_def(f"{definition.qualname}.forward", root)
        return [(_python_node(forward, ctx), None)] if forward else []
    entry_points = ctx.entry_catalog.entry_points()
    children: list[Node] = []
    found = []
    owner = definition.qualname.rsplit(".", 1)[0]
    for call in pysource.calls(definition, root):
        before = len(children)
        _python_call(definition, call, children, owner, entry_points, ctx)
        if len(children) > before:
            child = children[-1]
            child.attrs["call_site"] = _python_location(definition.path, call.line, None, ctx)
            found.append((child, call.line))
    return found


def _python_call(definition: pysource.PyDef, call, children: list[Node], owner: str, entry_points, ctx: GraphContext) -> None:
    """The node one call of a Python definition adds to `children`, if any (see _python_children)."""
    import ast

    from kernelmap.errors import HandWrittenBinding
    from kernelmap.names import hand_written

    root = ctx.python_dir
    if call.target.startswith("self."):
        method = pysource.find_def(f"{owner}.{call.target[5:]}", root)
        if method is not None and _reaches_torch(method, root, entry_points):
            children.append(_python_node(method, ctx, call.condition))
        return
    builtin = pysource.entry_name(call.target)
    if builtin and builtin in entry_points and not pysource.shadowed_binding(call.target, root):
        children.append(_mark_tensor_utility(_builtin_node(builtin, ctx, call.condition), builtin, ctx))
        return
    if call.target.startswith("torch.nn.functional.") and call.target in entry_points:
        found = pysource.find_def(call.target, root)
        if found is not None:
            children.append(_python_node(found, ctx, call.condition))
        return
    if not call.target.startswith("torch."):
        return
    found = pysource.find_def(call.target, root)
    if found is not None:
        if not isinstance(found.node, ast.ClassDef) and _reaches_torch(found, root, entry_points):
            children.append(_python_node(found, ctx, call.condition))
    elif builtin:
        _READING_UNKNOWN[:] = [True] * len(_READING_UNKNOWN)  # C++ tables read: not stored (Note [Python read once])
        try:
            reached = hand_written(builtin, ctx.entry_catalog, root)
        except HandWrittenBinding:  # calls no operator: a helper, like one that reaches nothing
            reached = None
        if reached is not None:
            children.append(_mark_tensor_utility(_builtin_node(builtin, ctx, call.condition), builtin, ctx))


def _is_tensor_utility(name: str) -> bool:
    return name.startswith("torch.Tensor.") and is_utility_op(name.rsplit(".", 1)[-1], False)


def _mark_tensor_utility(node: Node, name: str, ctx: GraphContext) -> Node:
    """A call of a tensor utility (`Tensor.size`, `Tensor.contiguous`) is plumbing:
    marked, and not expanded unless all calls are shown (as for operators)."""
    if _is_tensor_utility(name):
        node.attrs["utility"] = True
        if not ctx.all_calls:
            node.leaf()
    return node


def _reaches_torch(definition: pysource.PyDef, root: Path, entry_points: set[str], depth: int = 3) -> bool:
    """Whether a method or function calls a builtin, a functional, another
    method, or (through at most `depth` Python functions it calls: the
    branches of a `boolean_dispatch`) one that does."""
    level, seen = [definition], {definition.qualname}
    for _ in range(depth + 1):
        following = []
        for current in level:
            for call in pysource.calls(current, root):
                builtin = pysource.entry_name(call.target)
                if builtin and _is_tensor_utility(builtin):  # `input.view(...)` is plumbing, no reason to show a helper
                    continue
                if call.target.startswith("self.") or call.target in entry_points or (builtin and builtin in entry_points):
                    return True  # (a Tensor method torch/_tensor.py defines reaches a builtin too)
                if call.target.startswith("torch."):
                    found = pysource.find_def(call.target, root)
                    if found is not None and found.qualname not in seen:
                        seen.add(found.qualname)
                        following.append(found)
        level = following
    return False


def _builtin_children(name: str, ctx: GraphContext) -> list[Node]:
    if name not in ctx.entry_catalog.entry_points():
        return _hand_written_children(name, ctx)
    ops = ctx.entry_catalog.resolve(name)
    pairs = [(_tree_op(op, ctx), None) for op in ops]
    if ctx.generated is None:
        return [op_node(op, ctx, EdgeKind.BINDING, cond) for op, cond in pairs]
    from kernelmap.codegen import Layer

    bindings = {}
    for op in ops:
        code = _generated(str(op.name), ctx, (Layer.BINDING,))
        for b in code.bindings if code else ():
            if name in b.python_names:
                bindings.setdefault(b.function, (b, []))[1].append((_tree_op(op, ctx), b.signature, b.calls))
    if not bindings:
        return [op_node(op, ctx, EdgeKind.BINDING, cond) for op, cond in pairs]
    nodes = []
    for function, (binding, reached) in bindings.items():
        attrs = {"signatures": tuple(binding.signatures), "calls": tuple(binding.calls)}
        nodes.append(Node(function, "binding", binding.definition.location, EdgeKind.BINDING, None, attrs, payload=reached, identity=("binding", function)))
    return nodes


def _hand_written_children(name: str, ctx: GraphContext) -> list[Node]:
    """The hand-written binding of `name` (Note [hand-written bindings]), at
    its line in the table's file, and the operators its code calls."""
    from kernelmap.names import hand_written

    found = hand_written(name, ctx.entry_catalog, ctx.python_dir)
    if found is None:
        return []
    binding, ops = found
    location = Location(binding.repo_path, binding.line, origin=ctx.python_origin or env.torch_install().origin)
    if not binding.defined:  # the table points at a generated binding: `__add__` is THPVariable_add, Tensor.add's
        generated = f"{name.rpartition('.')[0]}.{binding.function.removeprefix('THPVariable_')}"
        return [_builtin_node(generated, ctx)]
    reached = [(_tree_op(op, ctx), None, ()) for op in ops]
    attrs = {"calls": tuple(dict.fromkeys(c.name for c in binding.calls))}
    return [Node(binding.function, "binding", location, EdgeKind.BINDING, None, attrs, payload=reached, identity=("binding", binding.function))]


def _entry_node(op: Op, condition: str | None, calls: tuple[str, ...], ctx: GraphContext) -> Node:
    """What a binding's case calls on the way to the dispatcher, as a build
    compiles it: the inline `at::<op>` (ops/<op>.h) or `Tensor::<op>`
    (TensorBody.h), then `at::_ops::<op>::call` (Operators_N.cpp), which
    enters the dispatcher for the operator."""
    call = next((c for c in calls if re.fullmatch(r"at::(Tensor::)?\w+", c)), None)
    function = _header_function(op, call, ctx) if call is not None else None
    if function is None:
        return op_node(op, ctx, EdgeKind.BINDING, condition)
    header = Node(function.symbol, NodeKind.HEADER, function.location, EdgeKind.BINDING, condition, {"calls": (function.calls,)})
    entry = _ops_call(op, function.calls, ctx)
    if entry is None:
        header.children = [op_node(op, ctx, EdgeKind.DISPATCHER)]
        return header
    ops_entry = Node(entry.symbol, NodeKind.OPS_ENTRY, entry.definition.location, EdgeKind.DIRECT)
    _called_at(ops_entry, function.location, entry.symbol)
    ops_entry.children = [op_node(op, ctx, EdgeKind.DISPATCHER, "the dispatcher picks the kernel for the tensors' dispatch keys")]
    header.children = [ops_entry]
    return header


# -- the Python layer read once ------------------------------------------------

# Note [Python read once]
# Parsing torch's Python (torch/nn/functional.py, torch/overrides.py,
# torch/_jit_internal.py: hundreds of kilobytes) is most of what a cold
# question spends in this layer. What the graph takes from it (a definition's
# children, a function's Python callers) is JSON data: where each definition
# is and what it calls. So it is kept on disk, one table per Python root and
# kernelmap code (`results/python-*.json` in the cache), each entry with the
# SHA-1 of the content of every file its computing read: an entry is used
# only while each of those files holds the same bytes, whatever their mtime.
# An entry is computed with `pysource.find_def` (and the other memoized
# readers it calls) given a memory of its own, so that every file a lookup
# walks through (a chain of re-exports) is read, and recorded, again, while
# what the process remembered stays for the questions that follow. An entry whose computing read what is not recorded (the C++ tables
# of a hand-written binding) is not stored. Each key also holds what it reads
# that is not a file (a digest of the catalog's entry points, of the names
# torch/__init__.py rebinds). A definition taken from the table is a
# `StoredDef`, whose AST node is parsed only if something asks for it. The
# table is written back (temp file, then rename) when the process ends, if it
# gained entries; at most _STORED entries are kept, the oldest dropped, and
# the newest _TABLE_FILES tables.
_STORE_VERSION = 1
_STORED = 4096
_TABLE_FILES = 8  # tables kept on disk, the newest written
_READING_UNKNOWN: list[bool] = []  # per entry being computed: whether it read what is not recorded


class StoredDef(pysource.PyDef):
    """A PyDef taken from the stored table (Note [Python read once]): its
    fields as recorded, its `node` found in the file when first asked for."""

    def __init__(self, qualname: str, module: str, path: Path, line: int, end_line: int, is_class: bool):
        for name, value in (("qualname", qualname), ("module", module), ("path", path), ("line", line),
                            ("end_line", end_line), ("is_class", is_class)):
            object.__setattr__(self, name, value)

    @functools.cached_property
    def node(self):
        return _node_at(self.path, self.line, self.qualname.rsplit(".", 1)[-1], self.is_class)


def _node_at(path: Path, line: int, name: str, is_class: bool):
    """The definition of `name` at `line` of the module at `path` (top level or in a class body)."""
    import ast

    def named(node) -> bool:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            return node.name == name and isinstance(node, ast.ClassDef) == is_class
        return isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)

    for node in pysource._parse(path).body:
        if node.lineno == line and named(node):
            return node
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if item.lineno == line and named(item):
                    return item
    raise LookupError(f"no definition of {name} at line {line} of {path}")


def def_spec(definition: pysource.PyDef, root: Path) -> list:
    """A definition as JSON data: ["def", qualname, module, path under `root`, line, end line, is a class]."""
    import ast

    is_class = definition.is_class if isinstance(definition, StoredDef) else isinstance(definition.node, ast.ClassDef)
    return ["def", definition.qualname, definition.module, _relative(definition.path, root), definition.line, definition.end_line, is_class]


def stored_def(spec: list, root: Path) -> StoredDef:
    _, qualname, module, path, line, end_line, is_class = spec
    return StoredDef(qualname, module, root / path, line, end_line, is_class)


def stored_node(spec: list, root: Path, ctx: GraphContext, condition: str | None) -> Node:
    """`nodes._python_node` of a stored definition, without parsing its file."""
    definition = stored_def(spec, root)
    location = _python_location(definition.path, definition.line, definition.end_line, ctx)
    return Node(definition.qualname, "module" if definition.is_class else "python", location, EdgeKind.PYTHON, condition,
                payload=definition, identity=("py", definition.qualname))


def _relative(path: Path, root: Path) -> str:
    return path.relative_to(root).as_posix()


def _entry_points_digest(ctx: GraphContext) -> str:
    from kernelmap.graph.context import kept_results

    table = kept_results(ctx, "_entry_points_digest")
    found = table.get("")
    if found is None:
        found = table[""] = hashlib.sha1("\n".join(sorted(ctx.entry_catalog.entry_points())).encode()).hexdigest()
    return found


def _rebound_digest(root: Path) -> str:
    return hashlib.sha1("\n".join(sorted(pysource.rebound_builtins(root))).encode()).hexdigest()


_CONTENT: dict[tuple, str] = {}  # (path, inode, size, mtime, ctime) -> SHA-1 of its bytes


def content_digest(path: Path) -> str | None:
    """The SHA-1 of a file's bytes (read once per stamp); None when it cannot be read."""
    from kernelmap.safefiles import NotRegularFile, read_bytes

    try:
        st = os.stat(path)
        stamp = (str(path), st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        found = _CONTENT.get(stamp)
        if found is None:
            found = _CONTENT[stamp] = hashlib.sha1(read_bytes(path, "a Python file")).hexdigest()
        return found
    except (OSError, NotRegularFile):
        return None


class _Table:
    """One Python root's stored entries (Note [Python read once])."""

    def __init__(self, root: Path):
        from kernelmap import env
        from kernelmap.graph.context import _code_stamp

        self.root = root
        self.described = repr((_STORE_VERSION, _code_stamp(), str(root)))
        name = hashlib.sha256(self.described.encode()).hexdigest()[:24]
        self.path = env.cache_dir() / "results" / f"python-{name}.json"
        self.entries: dict[str, dict] = {}
        self.added = 0
        self._read()

    def _read(self) -> None:
        from kernelmap.safefiles import NotRegularFile, read_text

        try:
            kept = json.loads(read_text(self.path, "a cache file"))  # a FIFO there is refused, not waited on
            if isinstance(kept, dict) and kept.get("key") == self.described and isinstance(kept.get("entries"), dict):
                self.entries = kept["entries"]
        except (OSError, NotRegularFile, ValueError, RecursionError):
            pass

    def get(self, key: str):
        entry = self.entries.get(key)
        if not isinstance(entry, dict) or not isinstance(entry.get("files"), dict):
            return None
        if all(content_digest(self.root / path) == digest for path, digest in entry["files"].items()):
            return entry
        return None

    def put(self, key: str, value, files: set[Path]) -> None:
        recorded = {}
        for path in files:
            digest = content_digest(path)
            try:
                rel = _relative(path, self.root)
            except ValueError:
                return  # read outside the root: not stored
            if digest is None:
                return
            recorded[rel] = digest
        self.entries.pop(key, None)
        self.entries[key] = {"files": recorded, "value": value}
        while len(self.entries) > _STORED:
            del self.entries[next(iter(self.entries))]
        self.added += 1

    def write(self) -> None:
        if not self.added:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
            try:
                tmp.write_text(json.dumps({"key": self.described, "entries": self.entries}))
                os.replace(tmp, self.path)
            finally:
                tmp.unlink(missing_ok=True)
            self.added = 0
            kept = sorted(self.path.parent.glob("python-*.json"), key=lambda p: p.stat().st_mtime_ns, reverse=True)
            for old in kept[_TABLE_FILES:]:  # the tables of other roots and older code
                old.unlink(missing_ok=True)
        except OSError:
            pass  # a cache that cannot be written: computed again next time


_TABLES: dict[Path, _Table] = {}
# What this process already took from a table or computed: asked again, it is
# answered as the memoized readers it stands for answer (`pysource.find_def`,
# `up._calls_in`: for the life of the process), without checking each file again.
_SEEN: dict[tuple[Path, str], Any] = _Kept(_STORED)


def _table(root: Path) -> _Table:
    found = _TABLES.get(root)
    if found is None:
        found = _TABLES[root] = _Table(root)
    return found


def remembered(root: Path, key: tuple, compute, reads: tuple[Path, ...] = (), fresh: tuple = ()):
    """`compute()` (JSON data), from the stored table of `root` while the files
    it read (and `reads`) hold the same bytes; computed and stored otherwise
    (Note [Python read once]). `fresh`: more (module, name) of memoized
    functions it calls whose results depend on files read."""
    text = json.dumps(key)
    seen = _SEEN.get((root, text))
    if seen is not None:
        return seen
    table = _table(root)
    entry = table.get(text)
    if entry is not None:
        _SEEN[root, text] = entry["value"]
        return entry["value"]
    files: list[Path] = list(reads)
    pysource._READ.append(files)
    _READING_UNKNOWN.append(False)
    try:
        with _fresh(((pysource, "find_def"), (pysource, "_top_level_aliases"), (pysource, "_top_level_names"), *fresh)):
            value = json.loads(json.dumps(compute()))  # as it will be read back: lists, not tuples
    finally:
        pysource._READ.remove(files)
        unknown = _READING_UNKNOWN.pop()
    if not unknown:
        table.put(text, value, set(files))
    _SEEN[root, text] = value
    return value


@contextlib.contextmanager
def _fresh(functions):
    """Each memoized function (module, name) replaced by one with a memory of
    its own while the block runs: every file a lookup walks through is read
    again, and recorded, and what the process remembered is left as it was."""
    saved = [(module, name, getattr(module, name)) for module, name in functions]
    for module, name, kept in saved:
        setattr(module, name, functools.lru_cache(maxsize=kept.cache_info().maxsize)(kept.__wrapped__))
    try:
        yield
    finally:
        for module, name, kept in saved:
            setattr(module, name, kept)


@atexit.register
def write_tables() -> None:
    """Each table that gained entries, written back (Note [Python read once])."""
    for table in list(_TABLES.values()):
        table.write()
