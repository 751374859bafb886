"""Read a source tree's index: definitions, call sites, stub and library
registrations and dtype dispatch sites, as frozen dataclasses whose
locations carry the tree's origin (so links are pinned to its commit).

    index = open_index(select_tree())
    [conv] = index.definitions("at::native::_convolution")[:1]
    for site in index.calls_from(conv): print(site.kind, site.callee, site.condition)
    index.stub_registrations("mul_stub")      # CPU and CUDA kernels
    index.library_impls("add.Tensor")         # TORCH_LIBRARY_IMPL m.impl(...) entries

Names are looked up in three forms: a qualified name (`at::native::foo`,
anonymous namespaces left out), a qualified suffix (`native::foo`), or a bare
name (`foo`). `TORCH_IMPL_FUNC(mul_out)` and `TORCH_META_FUNC2(add, Tensor)`
name structured kernels as the macros write them.
"""

from __future__ import annotations

import os
import re
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from kernelmap.connections import PerThread
from kernelmap.errors import SourceError
from kernelmap.model import Answer, Edge, EdgeKind, Location, Origin, OriginTable, Symbol, check_document, document
from kernelmap.safefiles import check_regular, connect
from kernelmap.source.records import as_indexed, file_record, index_path, read_record
from kernelmap.source.schema import CALL_KINDS, SCHEMA_VERSION, expected_table_definitions, one_line, table_definitions
from kernelmap.source.trees import Tree


class IndexMissing(SourceError):
    """A tree that has not been indexed (or whose index is unreadable)."""


class IndexDamaged(IndexMissing):
    """An index found damaged while it was read (a page SQLite cannot read, a
    dangling id). Every later read of it raises this again, and an answer
    grown from it is refused (`Index.check_intact`): the parts read before
    the damage showed would make it silently short."""


# A stub passed as an argument is a stub edge; a name passed that is no stub, none (Note [stubs passed on] in extract).
_ARGUMENT = CALL_KINDS.index("argument")
_EDGE_KINDS = {i: EdgeKind("stub" if kind == "stub_argument" else kind) for i, kind in enumerate(CALL_KINDS) if kind != "argument"}


@dataclass(frozen=True)
class Definition:
    """A definition in the tree, with what the index knows beyond `Symbol`."""

    symbol: Symbol  # qualified name (anonymous namespaces spelled out), location, kind, #if condition
    lookup: str  # the qualified name without anonymous and inline namespaces
    op: str | None = None  # structured kernels: the op their macro names ("mul_out", "add.Tensor")
    id: int = 0  # row id, stable only within one build

    @property
    def name(self) -> str:
        return self.symbol.qualified_name

    @property
    def location(self) -> Location:
        return self.symbol.location


@dataclass(frozen=True)
class CallSite:
    """One call inside a definition."""

    caller: Symbol | None  # None for calls at file scope
    callee: str  # as written, template arguments removed: "at::cudnn_convolution", ".add"
    name: str  # the called name: "cudnn_convolution"
    kind: EdgeKind  # DISPATCHER, STUB, DIRECT, LAUNCH or VENDOR
    location: Location
    condition: str | None = None  # innermost "case ConvBackend::Cudnn" / "if (...)"
    preproc: str | None = None  # enclosing preprocessor condition
    library: str | None = None  # vendor calls: cudnn, cublas, cublasLt, onednn, mkl, blas, ...
    op: str | None = None  # dispatcher calls: the operator
    outer: tuple[str, ...] = ()  # the case/if conditions around `condition`, outermost first

    @property
    def edge(self) -> Edge:
        cond = " && ".join(c for c in (self.condition, f"#if {self.preproc}" if self.preproc else None) if c)
        return Edge(self.caller.qualified_name if self.caller else "", self.callee, self.kind, cond or None, self.location)


@dataclass(frozen=True)
class StubDeclaration:
    stub: str
    kind: str  # declare | define
    location: Location
    function_type: str | None = None  # DECLARE_DISPATCH's first argument


@dataclass(frozen=True)
class StubRegistration:
    """`REGISTER_DISPATCH(stub, &kernel)` and its variants."""

    stub: str
    kernel: str | None  # None for REGISTER_NO_CPU_DISPATCH
    device: str  # CPU, CUDA, MPS, HIP, ... (from the macro, else the folder)
    capability: str | None  # CPU capability: "each CPU capability" (native/cpu/ files), AVX2, AVX512, "none"
    location: Location
    condition: str | None = None


@dataclass(frozen=True)
class LibraryRegistration:
    """`m.impl("op", kernel)` or `m.def("schema")` in a TORCH_LIBRARY* block."""

    op: str  # as written without namespace: "add.Tensor"
    namespace: str | None  # "aten", "quantized"
    key: str | None  # TORCH_LIBRARY_IMPL's dispatch key; None for m.def and blocks without one
    kernel: str | None
    kind: str  # impl | def
    location: Location
    condition: str | None = None


@dataclass(frozen=True)
class DtypeDispatch:
    """An `AT_DISPATCH_*` site."""

    name: str  # the site's name string: "add_cpu"
    macro: str  # AT_DISPATCH_FLOATING_TYPES_AND2, AT_DISPATCH_V2
    dtypes: str | None  # extra scalar types and AT_EXPAND groups: "kHalf, kBFloat16"
    enclosing: str | None  # the definition it is in
    location: Location


@dataclass(frozen=True)
class FileInfo:
    path: str
    size: int
    errors: int  # ERROR nodes the grammar produced
    skipped: str | None


# Longer names are no C++ name anyone wrote; refusing them keeps the search
# for suggestions cheap.
MAX_NAME = 1024

_MACRO_NAME = re.compile(r"(TORCH_IMPL_FUNC|TORCH_META_FUNC2?|TORCH_PRECOMPUTE_META_FUNC2?)\(\s*(\w+)\s*(?:,\s*(\w+)\s*)?\)")


def open_index(tree: Tree) -> Index:
    """The index of `tree`; IndexMissing when it was never built or is unusable."""
    path = index_path(tree)
    if check_regular(path, f"the index of {tree.name!r}") is None:  # a FIFO there is refused, not waited on
        raise IndexMissing(f"the tree {tree.name!r} is not indexed yet; run `kernelmap index --source {tree.name}`")
    try:
        db = connect(path, f"the index of {tree.name!r}", check_same_thread=False)
        meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
        tables = table_definitions(db)
    except (sqlite3.DatabaseError, ValueError) as e:  # ValueError: a damaged text (UnicodeDecodeError)
        raise IndexMissing(f"the index of {tree.name!r} is unreadable ({one_line(e)}); run `kernelmap index --source {tree.name}` to rebuild it") from None
    if meta.get("schema_version") != str(SCHEMA_VERSION) or meta.get("complete") != "1":
        db.close()
        raise IndexMissing(f"the index of {tree.name!r} has another schema; run `kernelmap index --source {tree.name}` to rebuild it")
    if meta.get("root") != str(tree.root):  # a name reused for another directory: that index is not this tree's
        db.close()
        raise IndexMissing(f"the index of {tree.name!r} was built for another directory ({str(meta.get('root'))[:200]}); "
                           f"run `kernelmap index --source {tree.name}` to rebuild it")
    if tables != expected_table_definitions():
        db.close()
        raise IndexMissing(f"the index of {tree.name!r} is damaged (its tables are not those of the schema); "
                           f"run `kernelmap index --source {tree.name}` to rebuild it")
    if not _as_built(path):
        db.close()
        raise IndexMissing(f"the index of {tree.name!r} changed since it was built (damaged or replaced); "
                           f"run `kernelmap index --source {tree.name}` to rebuild it")
    return Index(_CheckedDb(PerThread(db), tree.name), tree, path)


def _as_built(path: Path) -> bool:
    """The database's size and mtime are those recorded when it was built (a
    stat, not a hash: `index` checks the hash). A build renames the database
    and then writes its record, so a mismatch is looked at twice."""
    for attempt in range(2):
        record = read_record(path)
        try:
            if record is not None and file_record(path, digest=False) == {k: record.get(k) for k in ("size", "mtime_ns")}:
                return True
        except OSError:
            pass
        if attempt == 0:
            time.sleep(0.25)
    return False


class _Rows(list):
    def fetchone(self):
        return self[0] if self else None

    def fetchall(self):
        return list(self)


class _CheckedDb:
    """The index's connection, turning SQLite's errors about a damaged file
    (which can show on any page a query reads) into IndexMissing."""

    def __init__(self, db: PerThread, tree: str):
        self._db, self._tree = db, tree
        self.damaged: str | None = None  # what was found, once it was

    def execute(self, sql: str, args: tuple = ()) -> _Rows:
        if self.damaged is not None:
            raise IndexDamaged(self.damaged)
        try:
            return _Rows(self._db.execute(sql, args).fetchall())
        except sqlite3.DatabaseError as e:
            raise self.found_damage(one_line(e)) from None

    def found_damage(self, what: str) -> IndexDamaged:
        """Remember that the index is damaged (`what` was found); the error to raise."""
        self.damaged = f"the index of {self._tree!r} is damaged ({what}); run `kernelmap index --source {self._tree}` to rebuild it"
        return IndexDamaged(self.damaged)

    def close(self) -> None:
        self._db.close()


class Index:
    """Queries over one tree's index. Every answer is a list of frozen dataclasses."""

    def __init__(self, db: sqlite3.Connection, tree: Tree, path: Path):
        self._db = db
        self.tree = tree
        self.path = path
        self.origin: Origin = tree.origin
        self._strings: dict[int, str] = {}
        # The database is opened read-only and never changes under an open
        # Index, so answers to repeated look-ups are kept for its lifetime.
        self._ids: dict[str, int | None] = {}
        self._found: dict[tuple[str, tuple], tuple[Definition, ...]] = {}
        self._by_row: dict[int, Definition] = {}
        self._sites: dict[tuple[str, tuple], tuple[CallSite, ...]] = {}

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Index:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def changed_files(self) -> list[str]:
        """The indexed files whose size or modification time on disk is no
        longer what the index recorded, or that are gone: their lines may
        have moved since. A query answers from the index as built; the
        commands that print its locations say, in one note, that some may
        have moved (`kernelmap index` updates the changed files)."""
        changed = []
        root = self.tree.root
        prefix = f"{root}{os.sep}"  # a string, not a Path per file: this runs on every question, over ~4,000 files
        for path, sha1, size, mtime_ns in self._db.execute("SELECT path, sha1, size, mtime_ns FROM files ORDER BY path"):
            try:
                st = os.stat(prefix + path)
            except OSError:
                changed.append(path)
                continue
            if (st.st_size, st.st_mtime_ns) != (size, mtime_ns) and not as_indexed(root / path, st.st_size, st.st_mtime_ns, (sha1, size, mtime_ns)):
                changed.append(path)  # as `index` judges it
        return changed

    def stale_note(self, changed: list[str] | None = None) -> str | None:
        """One line saying which files changed since the tree was indexed
        (`changed`, when the caller has them: `changed_files`), or None."""
        changed = self.changed_files() if changed is None else changed
        if not changed:
            return None
        shown = ", ".join(changed[:3]) + (f" and {len(changed) - 3} more" if len(changed) > 3 else "")
        many = len(changed) > 1
        return (f"{len(changed)} file{'s' if many else ''} of {self.tree.name} changed since it was indexed ({shown}): "
                f"{'their' if many else 'its'} lines may have moved; run `kernelmap index --source {self.tree.name}`")

    def check_intact(self) -> None:
        """Raise IndexDamaged if a read of this index found it damaged: an
        answer grown from it may lack what the damaged pages held, although
        the code that met the damage went on without it."""
        damaged = getattr(self._db, "damaged", None)
        if damaged is not None:
            raise IndexDamaged(damaged)

    # -- helpers -----------------------------------------------------------

    def _text(self, i: int | None) -> str | None:
        if i is None:
            return None
        s = self._strings.get(i)
        if s is None:
            row = self._db.execute("SELECT text FROM strings WHERE id = ?", (i,)).fetchone()
            if row is None:  # a dangling id: the file was damaged after it was built
                raise self._db.found_damage(f"string {i} is missing")
            s = self._strings[i] = row[0]
        return s

    def _read_texts(self, ids) -> None:
        """The strings of `ids` not read yet, read in one query each few
        hundred (a call site names up to seven): `_text` then finds them kept."""
        unread = sorted({i for i in ids if i is not None and i not in self._strings})
        for start in range(0, len(unread), 500):
            chunk = unread[start : start + 500]
            rows = self._db.execute(f"SELECT id, text FROM strings WHERE id IN ({','.join('?' * len(chunk))})", tuple(chunk))
            self._strings.update(rows)

    def _id(self, text: str) -> int | None:
        if text in self._ids:
            return self._ids[text]
        row = self._db.execute("SELECT id FROM strings WHERE text = ?", (text,)).fetchone()
        i = self._ids[text] = row[0] if row else None
        return i

    def _loc(self, path: str, line: int, end_line: int | None = None) -> Location:
        return Location(path, line, end_line, self.origin)

    _SYMBOL_COLUMNS = "s.id, f.path, s.name_id, s.lookup_id, s.kind, s.line, s.end_line, s.cond_id, s.op_id"

    def _definitions(self, where: str, args: tuple) -> list[Definition]:
        key = (where, args)
        found = self._found.get(key)
        if found is None:
            rows = self._db.execute(
                f"SELECT {self._SYMBOL_COLUMNS} FROM symbols s JOIN files f ON f.id = s.file_id WHERE {where} ORDER BY f.path, s.line",
                args,
            ).fetchall()
            self._read_texts(i for r in rows for i in (r[2], r[3], r[7], r[8]))
            found = self._found[key] = tuple(self._definition(r) for r in rows)
        return list(found)

    def _definition(self, r) -> Definition:
        sid, path, name_id, lookup_id, kind, line, end_line, cond_id, op_id = r
        d = self._by_row.get(sid)
        if d is None:
            sym = Symbol(self._text(name_id), self._loc(path, line, end_line), kind, self._text(cond_id))
            d = self._by_row[sid] = Definition(sym, self._text(lookup_id), self._text(op_id), sid)
        return d

    # -- definitions -------------------------------------------------------

    def definitions(self, name: str, *, kind: str | None = None) -> list[Definition]:
        """Definitions of `name`: qualified, qualified suffix, bare, or a
        structured kernel macro (`TORCH_IMPL_FUNC(mul_out)`)."""
        name = name.strip()
        m = _MACRO_NAME.fullmatch(name)
        if m:
            macro, op, overload = m.groups()
            want = "structured_impl" if macro == "TORCH_IMPL_FUNC" else "structured_meta"
            op_text = f"{op}.{overload}" if overload else op
            return self.structured_kernels(op_text, kind=want)
        name = name.removeprefix("::")
        short = name.rsplit("::", 1)[-1]
        short_id = self._id(short)
        if short_id is None:
            return []
        found = self._definitions("s.short_id = ?", (short_id,))
        if "::" in name:
            found = [d for d in found if _qualified_match(name, d)]
        if kind:
            found = [d for d in found if d.symbol.kind == kind]
        return found

    def structured_kernels(self, op: str, *, kind: str | None = None) -> list[Definition]:
        """TORCH_META_FUNC / TORCH_IMPL_FUNC definitions of `op` ("mul_out", "add.Tensor")."""
        op_id = self._id(op)
        if op_id is None:
            return []
        found = self._definitions("s.op_id = ?", (op_id,))
        return [d for d in found if kind is None or d.symbol.kind == kind]

    def definitions_in(self, path: str) -> list[Definition]:
        """Every definition in one file, by line."""
        return self._definitions("f.path = ?", (path,))

    def definition_at(self, path: str, line: int) -> Definition | None:
        """The innermost definition spanning `path:line`."""
        found = self._definitions("f.path = ? AND s.line <= ? AND s.end_line >= ?", (path, line, line))
        return max(found, key=lambda d: d.location.line, default=None)

    def search(self, text: str, *, limit: int = 50) -> list[str]:
        """Qualified names containing `text` (three characters or more), shortest first."""
        text = text.strip()
        if len(text) < 3:
            raise SourceError("search for at least three characters")
        # A scan of every string: about 15 ms for PyTorch's 100,000, fast
        # enough for suggestions and the web app's search box, where a trigram
        # index of the names cost a twentieth of the build.
        rows = self._db.execute(
            "SELECT s.text FROM strings s WHERE instr(lower(s.text), lower(?)) > 0"
            " AND EXISTS (SELECT 1 FROM symbols WHERE lookup_id = s.id) ORDER BY length(s.text) LIMIT ?",
            (text, limit),
        ).fetchall()
        return [r[0] for r in rows]

    def names_like(self, text: str, *, limit: int = 20_000) -> list[str]:
        """Short names of definitions, callees (vendor calls included) and
        stubs that contain `text`, any case: the pool closest names are
        drawn from (kernelmap.suggest)."""
        rows = self._db.execute(
            "SELECT s.text FROM strings s WHERE instr(lower(s.text), lower(?)) > 0 AND (EXISTS (SELECT 1 FROM symbols WHERE short_id = s.id)"
            " OR EXISTS (SELECT 1 FROM calls WHERE short_id = s.id) OR EXISTS (SELECT 1 FROM stubs WHERE name_id = s.id)) LIMIT ?",
            (text, limit),
        ).fetchall()
        return [r[0] for r in rows]

    # -- calls ---------------------------------------------------------------

    _CALL_COLUMNS = "c.symbol_id, f.path, c.callee_id, c.short_id, c.kind, c.lib_id, c.op_id, c.line, c.cond_id, c.pp_id, c.outer_id"

    def _calls(self, where: str, args: tuple, callers: dict[int, Symbol] | None = None) -> list[CallSite]:
        key = (where, args)
        found = self._sites.get(key)
        if found is None:  # a warm process (kernelmap mcp, serve) asks for the same calls from many questions
            found = self._sites[key] = tuple(self._read_calls(where, args, callers))
        return list(found)

    def _read_calls(self, where: str, args: tuple, callers: dict[int, Symbol] | None) -> list[CallSite]:
        rows = self._db.execute(
            f"SELECT {self._CALL_COLUMNS} FROM calls c JOIN files f ON f.id = c.file_id WHERE ({where}) AND c.kind != {_ARGUMENT}"
            " ORDER BY f.path, c.line",
            args,
        ).fetchall()
        callers = dict(callers or {})
        self._read_texts(i for r in rows for i in (r[2], r[3], r[5], r[6], r[8], r[9], r[10]))
        out = []
        for sid, path, callee_id, short_id, kind, lib_id, op_id, line, cond_id, pp_id, outer_id in rows:
            caller = None
            if sid is not None:
                caller = callers.get(sid)
                if caller is None:
                    caller = callers[sid] = self._definitions("s.id = ?", (sid,))[0].symbol
            out.append(
                CallSite(caller, self._text(callee_id), self._text(short_id), _EDGE_KINDS[kind], self._loc(path, line),
                         self._text(cond_id), self._text(pp_id), self._text(lib_id), self._text(op_id),
                         tuple(self._text(outer_id).split("\n")) if outer_id else ())
            )
        return out

    def calls_from(self, definition: Definition | Symbol) -> list[CallSite]:
        """The call sites inside one definition, by line."""
        d = self._resolve(definition)
        return self._calls("c.symbol_id = ?", (d.id,), {d.id: d.symbol})

    def callers_of(self, name: str) -> list[CallSite]:
        """Call sites whose callee is `name` (bare, or qualified: then the call
        as written must agree with it, e.g. `at::cudnn_convolution`)."""
        name = name.strip().removeprefix("::")
        short = name.rsplit("::", 1)[-1]
        short_id = self._id(short)
        if short_id is None:
            return []
        sites = self._calls("c.short_id = ?", (short_id,))
        if "::" in name:
            sites = [s for s in sites if name.endswith(s.callee) or s.callee.endswith(name)]
        return sites

    def vendor_calls(self, library: str | None = None) -> list[CallSite]:
        """Every call into a vendor library (or one of them: "cudnn", "cublas", ...)."""
        if library is None:
            return self._calls("c.kind = ?", (CALL_KINDS.index("vendor"),))
        lib_id = self._id(library)
        return [] if lib_id is None else self._calls("c.lib_id = ?", (lib_id,))

    # -- registrations -------------------------------------------------------

    def stub_declarations(self, stub: str) -> list[StubDeclaration]:
        """DECLARE_DISPATCH / DEFINE_DISPATCH of `stub`."""
        sid = self._id(stub)
        if sid is None:
            return []
        rows = self._db.execute(
            "SELECT f.path, st.kind, st.line, st.detail_id FROM stubs st JOIN files f ON f.id = st.file_id WHERE st.name_id = ? ORDER BY f.path, st.line",
            (sid,),
        ).fetchall()
        return [StubDeclaration(stub, kind, self._loc(path, line), self._text(detail)) for path, kind, line, detail in rows]

    def is_stub(self, name: str) -> bool:
        return bool(self.stub_declarations(name))

    def _registrations(self, kind: str, column: str, value: str):
        vid = self._id(value)
        if vid is None:
            return []
        return self._db.execute(
            "SELECT f.path, r.line, r.name_id, r.target_id, r.key_id, r.detail_id, r.pp_id, r.symbol_id FROM registrations r"
            f" JOIN files f ON f.id = r.file_id WHERE r.{column} = ? AND r.kind = ? ORDER BY f.path, r.line",
            (vid, kind),
        ).fetchall()

    def stub_registrations(self, stub: str) -> list[StubRegistration]:
        """The kernels registered for `stub`, per device and CPU capability."""
        return [
            StubRegistration(self._text(n), self._text(t), self._text(k) or "CPU", self._text(d), self._loc(p, line), self._text(pp))
            for p, line, n, t, k, d, pp, _ in self._registrations("register_dispatch", "name_id", stub)
        ]

    def stubs_of_kernel(self, kernel: str) -> list[StubRegistration]:
        """The registrations that name `kernel` as a stub's kernel."""
        return [
            StubRegistration(self._text(n), self._text(t), self._text(k) or "CPU", self._text(d), self._loc(p, line), self._text(pp))
            for p, line, n, t, k, d, pp, _ in self._registrations("register_dispatch", "target_id", kernel)
        ]

    def library_impls(self, op: str) -> list[LibraryRegistration]:
        """`m.impl` entries for `op` ("add.Tensor"; a base name "add" takes every
        overload; "quantized::add" only those of that namespace)."""
        return self._library("library_impl", op)

    def library_defs(self, op: str) -> list[LibraryRegistration]:
        """`m.def` entries for `op`."""
        return self._library("library_def", op)

    def _library(self, kind: str, op: str) -> list[LibraryRegistration]:
        namespace, _, op = op.rpartition("::")
        names = [op]
        if "." not in op:
            # Every overload "op.*": the name is matched literally, so `%`, `_`
            # and the escape character itself are escaped.
            pattern = re.sub(r"([\\%_])", r"\\\1", op) + ".%"
            like = self._db.execute("SELECT text FROM strings WHERE text LIKE ? ESCAPE '\\'", (pattern,)).fetchall()
            names += [r[0] for r in like]
        out = []
        for n in names:
            for p, line, name_id, t, k, d, pp, _ in self._registrations(kind, "name_id", n):
                if namespace and self._text(d) != namespace:
                    continue
                out.append(LibraryRegistration(self._text(name_id), self._text(d), self._text(k), self._text(t), kind.removeprefix("library_"),
                                               self._loc(p, line), self._text(pp)))
        return sorted(out, key=lambda r: (r.location.path, r.location.line))

    def dtype_dispatches(self, definition: Definition | Symbol) -> list[DtypeDispatch]:
        """The AT_DISPATCH_* sites inside one definition."""
        d = self._resolve(definition)
        rows = self._db.execute(
            "SELECT f.path, r.line, r.name_id, r.target_id, r.key_id FROM registrations r JOIN files f ON f.id = r.file_id"
            " WHERE r.symbol_id = ? AND r.kind = 'at_dispatch' ORDER BY r.line",
            (d.id,),
        ).fetchall()
        return [DtypeDispatch(self._text(n), self._text(k), self._text(t), d.name, self._loc(p, line)) for p, line, n, t, k in rows]

    def global_kernels(self, name: str | None = None) -> list[Definition]:
        """`__global__` kernels (all, or those named `name`)."""
        if name:
            return self.definitions(name, kind="global_kernel")
        return self._definitions("s.kind = 'global_kernel'", ())

    # -- files -----------------------------------------------------------------

    def files(self) -> Iterator[FileInfo]:
        for path, size, errors, skipped in self._db.execute("SELECT path, size, errors, skipped FROM files ORDER BY path"):
            yield FileInfo(path, size, errors, skipped)

    def worst_files(self, limit: int = 10) -> list[FileInfo]:
        """Files with the most regions the grammar could not parse."""
        rows = self._db.execute("SELECT path, size, errors, skipped FROM files WHERE errors > 0 ORDER BY errors DESC, path LIMIT ?", (limit,))
        return [FileInfo(*r) for r in rows]

    # -- preprocessor directives (kernelmap.source.includes) ---------------------

    def include_directives(self) -> list[tuple[str, int, str, int, str | None]]:
        """(path, line, name as written, angled, #if condition) of every
        `#include` of the tree, by path and line."""
        return list(self._db.execute(
            "SELECT f.path, i.line, n.text, i.angled, c.text FROM includes i JOIN files f ON f.id = i.file_id"
            " JOIN strings n ON n.id = i.name_id LEFT JOIN strings c ON c.id = i.cond_id ORDER BY f.path, i.line"
        ))

    def macro_definitions(self) -> list[tuple[str, int, str, str | None, str | None]]:
        """(path, line, name, value, #if condition) of every `#define` of a
        macro without parameters (value None: an `#undef`), by path and line."""
        return list(self._db.execute(
            "SELECT f.path, d.line, n.text, v.text, c.text FROM defines d JOIN files f ON f.id = d.file_id"
            " JOIN strings n ON n.id = d.name_id LEFT JOIN strings v ON v.id = d.value_id LEFT JOIN strings c ON c.id = d.cond_id"
            " ORDER BY f.path, d.line"
        ))

    def native_definitions(self) -> list[tuple[str, str, str | None]]:
        """(path, lookup name, structured kernel's op) of every definition in
        at::native, and of every structured kernel, in bulk (kernelmap.impact
        maps files to the operators whose kernels they hold)."""
        return list(self._db.execute(
            "SELECT f.path, l.text, o.text FROM symbols s JOIN files f ON f.id = s.file_id JOIN strings l ON l.id = s.lookup_id"
            " LEFT JOIN strings o ON o.id = s.op_id WHERE s.op_id IS NOT NULL OR l.text LIKE 'at::native::%'"
        ))

    def registration_sites(self) -> list[tuple[str, str, str, str | None]]:
        """(path, kind, name, namespace or CPU capability) of every stub and
        library registration (`register_dispatch`, `library_impl`, `library_def`), in bulk."""
        return list(self._db.execute(
            "SELECT f.path, r.kind, n.text, d.text FROM registrations r JOIN files f ON f.id = r.file_id JOIN strings n ON n.id = r.name_id"
            " LEFT JOIN strings d ON d.id = r.detail_id WHERE r.kind != 'at_dispatch'"
        ))

    def stub_callers(self) -> list[tuple[str, str, str | None]]:
        """(stub, calling definition's lookup name, its structured kernel's op) of every stub call, in bulk."""
        stub = CALL_KINDS.index("stub")
        return list(self._db.execute(
            "SELECT n.text, l.text, o.text FROM calls c JOIN symbols s ON s.id = c.symbol_id JOIN strings n ON n.id = c.short_id"
            f" JOIN strings l ON l.id = s.lookup_id LEFT JOIN strings o ON o.id = s.op_id WHERE c.kind = {stub}"
        ))

    def stats(self) -> dict[str, int]:
        q = lambda sql: self._db.execute(sql).fetchone()[0]  # noqa: E731
        return {
            "files": q("SELECT count(*) FROM files"),
            "files_with_errors": q("SELECT count(*) FROM files WHERE errors > 0"),
            "files_skipped": q("SELECT count(*) FROM files WHERE skipped IS NOT NULL"),
            "definitions": q("SELECT count(*) FROM symbols"),
            "calls": q(f"SELECT count(*) FROM calls WHERE kind != {_ARGUMENT}"),
            "registrations": q("SELECT count(*) FROM registrations"),
            "stubs": q("SELECT count(DISTINCT name_id) FROM stubs"),
        }

    @property
    def meta(self) -> dict[str, str]:
        return dict(self._db.execute("SELECT key, value FROM meta").fetchall())

    def _resolve(self, definition: Definition | Symbol) -> Definition:
        if isinstance(definition, Definition):
            return definition
        loc = definition.location
        for d in self._definitions("f.path = ? AND s.line = ?", (loc.path, loc.line)):
            if d.name == definition.qualified_name:
                return d
        raise SourceError(f"{definition.qualified_name} at {loc} is not in the index of {self.tree.name!r}")


def _qualified_match(name: str, d: Definition) -> bool:
    """`name` names `d` whole or as a suffix of whole components."""
    for full in (d.lookup, d.name):
        if full == name or full.endswith("::" + name):
            return True
    return False



FIND_VERSION = 2


@dataclass(frozen=True)
class Findings(Answer):
    """What `find` knows about one name: where it is defined, and where it is
    called or registered."""

    name: str
    definitions: tuple[Definition, ...]
    references: tuple[CallSite, ...]
    stub_registrations: tuple[StubRegistration, ...] = ()
    library_registrations: tuple[LibraryRegistration, ...] = ()
    more_references: int = 0  # references left out by the limit
    stub_declarations: tuple[StubDeclaration, ...] = ()

    DOCUMENT = "find"

    def to_json(self) -> dict:
        """The find/2 document (kernelmap.answers describes it)."""
        o = OriginTable()

        def symbol(sym: Symbol | None) -> dict | None:
            if sym is None:
                return None
            return {"name": sym.qualified_name, "kind": sym.kind, "condition": sym.condition, "location": sym.location.to_json(o)}

        body = {
            "name": self.name,
            "definitions": [{**symbol(d.symbol), "lookup": d.lookup, "op": d.op} for d in self.definitions],
            "references": [
                {"caller": symbol(c.caller), "callee": c.callee, "called": c.name, "kind": c.kind.value, "condition": c.condition,
                 "preproc": c.preproc, "outer": list(c.outer), "library": c.library, "op": c.op, "location": c.location.to_json(o)}
                for c in self.references
            ],
            "stub_registrations": [
                {"stub": r.stub, "kernel": r.kernel, "device": r.device, "capability": r.capability, "condition": r.condition,
                 "location": r.location.to_json(o)}
                for r in self.stub_registrations
            ],
            "library_registrations": [
                {"op": r.op, "namespace": r.namespace, "key": r.key, "kernel": r.kernel, "kind": r.kind, "condition": r.condition,
                 "location": r.location.to_json(o)}
                for r in self.library_registrations
            ],
            "stub_declarations": [
                {"stub": d.stub, "kind": d.kind, "function_type": d.function_type, "location": d.location.to_json(o)}
                for d in self.stub_declarations
            ],
            "more_references": self.more_references,
        }
        return document(self.DOCUMENT, FIND_VERSION, origins=o.to_json(), **body)

    @classmethod
    def from_json(cls, d: dict) -> Findings:
        d = check_document(d, cls.DOCUMENT, FIND_VERSION)
        o = OriginTable.from_json(d.get("origins"))

        def symbol(x: dict | None) -> Symbol | None:
            return Symbol(x["name"], Location.from_json(x["location"], o), x.get("kind", "function"), x.get("condition")) if x else None

        return cls(
            d["name"],
            tuple(Definition(symbol(x), x["lookup"], x.get("op")) for x in d.get("definitions") or ()),
            tuple(
                CallSite(symbol(c.get("caller")), c["callee"], c["called"], EdgeKind(c["kind"]), Location.from_json(c["location"], o),
                         c.get("condition"), c.get("preproc"), c.get("library"), c.get("op"), tuple(c.get("outer") or ()))
                for c in d.get("references") or ()
            ),
            tuple(StubRegistration(r["stub"], r.get("kernel"), r["device"], r.get("capability"), Location.from_json(r["location"], o), r.get("condition"))
                  for r in d.get("stub_registrations") or ()),
            tuple(LibraryRegistration(r["op"], r.get("namespace"), r.get("key"), r.get("kernel"), r["kind"], Location.from_json(r["location"], o), r.get("condition"))
                  for r in d.get("library_registrations") or ()),
            d.get("more_references", 0),
            tuple(StubDeclaration(x["stub"], x["kind"], Location.from_json(x["location"], o), x.get("function_type")) for x in d.get("stub_declarations") or ()),
        )


def _may_reach(call: CallSite, name: str) -> bool:
    """Whether a call of the method `name`'s last part may call it: one
    written qualified (callers_of checked it agrees), or a bare one made
    inside its class (c10::DispatchKeySet::add is not the `add(...)` of a
    test at file scope). Not for functions of a namespace: a bare call
    elsewhere may reach one through a using-declaration (at::cuda's
    `using c10::cuda::getCurrentCUDAStream`), which the index does not record."""
    if "::" in call.callee:
        return True
    caller = call.caller.qualified_name if call.caller is not None else ""
    return caller.startswith(f"{name.rsplit('::', 1)[0]}::")


def find(index: Index, name: str, *, limit: int = 50) -> Findings:
    """Definitions of `name`, calls of it, and registrations naming it (as a
    stub, as a stub's kernel, or as an operator); UnknownName with the closest
    indexed names when there is none."""
    from kernelmap.errors import BadInput, UnknownName

    if limit < 0:
        raise BadInput(f"--limit is a count of references, 0 or more, not {limit}")
    name = name.strip()
    if len(name) > MAX_NAME:
        raise BadInput(f"a C++ name of {len(name)} characters is too long (at most {MAX_NAME})")
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:  # undecodable bytes of argv arrive as lone surrogates
        raise BadInput(f"not a C++ name (not valid UTF-8): {name[:80]!r}") from None
    if not name or any(c in name for c in "\n\t\"'") or not name.isprintable():
        raise BadInput(f"not a C++ name: {name[:80]!r}")
    defs = index.definitions(name)
    bare = name.rsplit("::", 1)[-1]
    refs = [] if _MACRO_NAME.fullmatch(name) else index.callers_of(name)
    if "::" in name.removeprefix("::") and defs and all(d.symbol.kind == "method" for d in defs):
        refs = [c for c in refs if _may_reach(c, name.removeprefix("::"))]
    stub_decls = index.stub_declarations(bare)
    stub_regs = index.stub_registrations(bare) + index.stubs_of_kernel(bare)
    lib_regs = index.library_impls(bare) + index.library_defs(bare) if "(" not in name else []
    if "::" in name:  # an operator's registrations only under its own namespace (`quantized::add`), not a C++ one's
        qualifier = name.removeprefix("::").rsplit("::", 1)[0]
        lib_regs = [r for r in lib_regs if qualifier == (r.namespace or "aten")]
    if not (defs or refs or stub_decls or stub_regs or lib_regs):
        suggestions: tuple[str, ...] = ()
        if len(bare) >= 3:
            suggestions = tuple(index.search(bare, limit=5))
        raise UnknownName(name, suggestions)
    return Findings(name, tuple(defs), tuple(refs[:limit]), tuple(stub_regs), tuple(lib_regs), max(0, len(refs) - limit), tuple(stub_decls))
