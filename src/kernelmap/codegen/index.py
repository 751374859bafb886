"""Index the generated files: where each operator is registered (`m.impl`
inside `TORCH_LIBRARY_IMPL` blocks, `m.def` inside `TORCH_LIBRARY`), where
each function and struct is defined, which Python binding calls which
operator, and which Python name each binding is installed under. Written
once into `index.sqlite` beside the files when they are generated, so a
lookup is a query plus reading the few lines it shows.

Note [where the dispatcher says a kernel was registered]
`torch._C._dispatch_dump` reports, for a kernel registered from C++, the
file and line of the `TORCH_LIBRARY_IMPL(aten, CPU, m)` block that holds the
`m.impl(...)` call (the line a `torch::Library` records when it is made),
not the line of the `m.impl` itself. Each registration is therefore indexed
with both lines: `block_line`, which must equal the dispatcher's, and `line`,
the `m.impl` statement shown to people.

Function ends are not indexed: they are found when a definition is shown,
by matching braces from its first line (see `locate.definition_end`).
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

SCHEMA_VERSION = 1

SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE files (id INTEGER PRIMARY KEY, path TEXT NOT NULL UNIQUE);
-- m.impl("add.Tensor", TORCH_FN(wrapper_CPU_add_Tensor)) in TORCH_LIBRARY_IMPL(aten, CPU, m)
CREATE TABLE impls (
    op TEXT NOT NULL,          -- add.Tensor (as the m.impl call spells it)
    namespace TEXT NOT NULL,   -- aten
    key TEXT NOT NULL,         -- CPU, Autograd, Tracer, ADInplaceOrView, ...
    file INTEGER NOT NULL REFERENCES files(id),
    block_line INTEGER NOT NULL,  -- the TORCH_LIBRARY_IMPL line: what the dispatcher reports
    line INTEGER NOT NULL,     -- the m.impl statement
    end_line INTEGER NOT NULL,
    symbol TEXT NOT NULL       -- wrapper_CPU_add_Tensor, VariableType::add_Tensor, "fallthrough"
);
-- m.def("add.Tensor(Tensor self, ...) -> Tensor") in TORCH_LIBRARY(aten, m)
CREATE TABLE schemas (
    op TEXT NOT NULL, namespace TEXT NOT NULL, file INTEGER NOT NULL,
    block_line INTEGER NOT NULL, line INTEGER NOT NULL, end_line INTEGER NOT NULL
);
-- top-level function and struct definitions (first line only)
CREATE TABLE defs (
    name TEXT NOT NULL,        -- wrapper_CPU_add_Tensor, conv2d::call, THPVariable_add, AddBackward0::apply
    kind TEXT NOT NULL,        -- function | struct
    file INTEGER NOT NULL,
    line INTEGER NOT NULL,
    base TEXT                  -- a struct's base class
);
-- `// aten::add.out(...)` comments that open each dispatch case of a Python binding
CREATE TABLE pycalls (op TEXT NOT NULL, file INTEGER NOT NULL, line INTEGER NOT NULL);
-- method-table entries: {"add", castPyCFunctionWithKeywords(THPVariable_add), ...}
CREATE TABLE methods (pyname TEXT NOT NULL, function TEXT NOT NULL, file INTEGER NOT NULL, line INTEGER NOT NULL);
"""

# Patterns open with a literal where they can: the regex engine then skips
# ahead by plain search, which is what keeps indexing ~40 MB quick.
# Created after the rows are in: one sort per index instead of one update per row.
INDEXES = """
CREATE INDEX impls_op ON impls(op);
CREATE INDEX impls_block ON impls(file, block_line);
CREATE INDEX schemas_op ON schemas(op);
CREATE INDEX defs_name ON defs(name);
CREATE INDEX defs_file ON defs(file, line);
CREATE INDEX pycalls_op ON pycalls(op);
CREATE INDEX methods_function ON methods(file, function);
"""

_BLOCK = re.compile(r"^[ \t]*TORCH_LIBRARY(?P<impl>_IMPL)?\((?P<ns>\w+)(?:, (?P<key>\w+))?, m\)", re.M)
# RegisterBackendSelect.cpp spells names qualified: m.impl("aten::arange", ...).
_IMPL = re.compile(r'm\.(?P<what>impl|def)\(\s*"(?:\w+::)?(?P<name>[\w.]+)')
_TORCH_FN = re.compile(r"TORCH_FN\(\s*([\w:]+)\s*\)")
# A definition starts at column 0 (or one namespace indent) with a return type and a name; its body
# opens on that line or the next: find the line that closes a parameter list
# and opens a body, then read the name from the start of that line.
_BODY_OPENS = re.compile(r"\)[^\n;]*\{\n|\)\n\{\n")
_DEF = re.compile(r"(?P<head>[A-Za-z_:][^\n;{}()=]*?)\b(?P<name>[A-Za-z_]\w*(?:::~?\w+)*)\(")
_STRUCT = re.compile(r"\nstruct (?:TORCH_API )?(?P<name>\w+)(?: final)?\s*(?::\s*public (?P<base>[\w:]+))?\s*\{")
_IMPL_FUNC = re.compile(r"^(TORCH_IMPL_FUNC|TORCH_META_FUNC)\((\w+)\)\s*\(", re.M)
_PYCALL = re.compile(r"// aten::(?P<op>\w+(?:\.\w+)?)\(")
_METHOD = re.compile(r'\{"(?P<pyname>\w+)",[^\n]*?\b(?P<fn>THPVariable_\w+)')
_INDENTS = ("    ", "  ")
_NOT_NAMES = frozenset({"if", "for", "while", "switch", "return", "sizeof", "catch", "defined", "decltype"})


def _starts_line(text: str, offset: int) -> bool:
    """True when only blanks stand between the start of its line and `offset`."""
    start = text.rfind("\n", 0, offset) + 1
    return not text[start:offset].strip(" \t")


class _Lines:
    """Line numbers of increasing offsets in one text, counted incrementally."""

    def __init__(self, text: str):
        self.text = text
        self.pos = 0
        self.line = 1

    def at(self, offset: int) -> int:
        if offset < self.pos:  # rare: a search went back; count from the start
            self.pos, self.line = 0, 1
        self.line += self.text.count("\n", self.pos, offset)
        self.pos = offset
        return self.line


def _statement_end(text: str, offset: int) -> int:
    """Offset of the `;` that ends the statement starting at `offset`."""
    end = text.find(";", offset)
    return len(text) if end < 0 else end


@dataclass(frozen=True)
class _Impl:
    op: str
    namespace: str
    key: str
    block_line: int
    line: int
    end_line: int
    symbol: str


def scan_registrations(text: str) -> Iterator[tuple[str, _Impl]]:
    """("impl" | "def", registration) for every m.impl / m.def in `text`."""
    if "TORCH_LIBRARY" not in text:
        return
    blocks = [(m.start(), m) for m in _BLOCK.finditer(text)]
    if not blocks:
        return
    lines = _Lines(text)
    block_lines = [(start, lines.at(start), m) for start, m in blocks]
    b = 0
    lines = _Lines(text)
    for m in _IMPL.finditer(text):
        if not _starts_line(text, m.start()):
            continue
        while b + 1 < len(block_lines) and block_lines[b + 1][0] < m.start():
            b += 1
        start, block_line, bm = block_lines[b]
        if start > m.start():
            continue  # an m.impl before any block: not a registration we can place
        end = _statement_end(text, m.end())
        line = lines.at(m.start())
        end_line = line + text.count("\n", m.start(), end)
        if m["what"] == "impl":
            statement = text[m.end() : end]
            fn = _TORCH_FN.search(statement)
            if fn:
                symbol = fn.group(1)
            elif "makeFallthrough" in statement:
                symbol = "fallthrough"
            else:  # a kernel made in place: torch::autograd::autogradNotImplementedFallback()
                symbol = statement.split(",", 1)[-1].strip()
                symbol = symbol[:-1].strip() if symbol.endswith(")") else symbol
            yield "impl", _Impl(m["name"], bm["ns"], bm["key"] or "", block_line, line, end_line, symbol)
        elif not bm["impl"]:
            yield "def", _Impl(m["name"], bm["ns"], "", block_line, line, end_line, "")


def scan_definitions(text: str) -> Iterator[tuple[str, str, int, str | None]]:
    """(name, kind, line, base) for functions and structs defined at namespace level in `text`."""
    found: list[tuple[int, str, str, str | None]] = []
    for body in _BODY_OPENS.finditer(text):
        start = text.rfind("\n", 0, body.start()) + 1
        # Column 0, or one namespace's indent (RegisterFunctionalization
        # indents its wrappers inside `namespace functionalization`).
        for indent in _INDENTS:
            if text.startswith(indent, start):
                start += len(indent)
                break
        first = text[start : start + 1]
        if not (first.isalpha() or first in "_:"):
            continue
        m = _DEF.match(text, start)
        if m is None or m.end() > body.start() + 1:
            continue
        name, head = m["name"], m["head"].strip()
        if not head or name in _NOT_NAMES or head in ("else", "return", "namespace"):
            continue
        found.append((start, name, "function", None))
    if "TORCH_IMPL_FUNC" in text or "TORCH_META_FUNC" in text:
        for m in _IMPL_FUNC.finditer(text):
            # TORCH_IMPL_FUNC(ufunc_add_CPU) defines at::native::structured_ufunc_add_CPU::impl
            what = "impl" if m.group(1) == "TORCH_IMPL_FUNC" else "meta"
            found.append((m.start(), f"structured_{m.group(2)}::{what}", "function", None))
    for m in _STRUCT.finditer(text):
        found.append((m.start() + 1, m["name"], "struct", m["base"]))
    found.sort()
    lines = _Lines(text)
    for start, name, kind, base in found:
        yield name, kind, lines.at(start), base


def scan_pycalls(text: str) -> Iterator[tuple[str, int]]:
    lines = _Lines(text)
    for m in _PYCALL.finditer(text):
        if _starts_line(text, m.start()):
            yield m["op"], lines.at(m.start())


def scan_methods(text: str) -> Iterator[tuple[str, str, int]]:
    lines = _Lines(text)
    for m in _METHOD.finditer(text):
        if _starts_line(text, m.start()):
            yield m["pyname"], m["fn"], lines.at(m.start())


def build_index(db_path: Path, root: Path, files: Iterable[str], meta: dict[str, str]) -> None:
    """Scan `files` (paths relative to `root`) into a new SQLite index at `db_path`."""
    db = sqlite3.connect(db_path)
    try:
        # The file is built aside and renamed into place when complete (see
        # build.py), so it needs no journal and no syncing while it is written.
        db.execute("PRAGMA journal_mode = OFF")
        db.execute("PRAGMA synchronous = OFF")
        db.executescript(SCHEMA)
        with db:
            db.executemany("INSERT INTO meta VALUES (?, ?)", [("schema", str(SCHEMA_VERSION)), *meta.items()])
            for file_id, path in enumerate(sorted(files), 1):
                try:
                    _index_file(db, file_id, path, (root / path).read_text(errors="replace"))
                except Exception as e:
                    raise RuntimeError(f"while indexing {path}: {e}") from e
        db.executescript(INDEXES)
    finally:
        db.close()


def _index_file(db: sqlite3.Connection, file_id: int, path: str, text: str) -> None:
    db.execute("INSERT INTO files VALUES (?, ?)", (file_id, path))
    impls, schemas = [], []
    for what, r in scan_registrations(text):
        if what == "impl":
            impls.append((r.op, r.namespace, r.key, file_id, r.block_line, r.line, r.end_line, r.symbol))
        else:
            schemas.append((r.op, r.namespace, file_id, r.block_line, r.line, r.end_line))
    db.executemany("INSERT INTO impls VALUES (?, ?, ?, ?, ?, ?, ?, ?)", impls)
    db.executemany("INSERT INTO schemas VALUES (?, ?, ?, ?, ?, ?)", schemas)
    db.executemany(
        "INSERT INTO defs VALUES (?, ?, ?, ?, ?)",
        ((name, kind, file_id, line, base) for name, kind, line, base in scan_definitions(text)),
    )
    if Path(path).name.startswith("python_"):
        db.executemany("INSERT INTO pycalls VALUES (?, ?, ?)", ((op, file_id, line) for op, line in scan_pycalls(text)))
        db.executemany(
            "INSERT INTO methods VALUES (?, ?, ?, ?)",
            ((py, fn, file_id, line) for py, fn, line in scan_methods(text)),
        )
