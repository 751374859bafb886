"""The SQLite schema of a source tree's index, in one place, with its version.

Repeated strings (names, callees, conditions, paths' parts of facts) are
interned in `strings` and referred to by id. Call kinds are small integers
(`CALL_KINDS`) because calls are the bulk of the database.
"""

from __future__ import annotations

import functools
import re

SCHEMA_VERSION = 9  # 2: masked attributes, qualified stub registrations, calls on temporaries; 3: a definition's line is its name's; 4: launches written in function-local #define macros, lost REGISTER_DISPATCH lines, cudaMemcpy* as CUDA runtime calls; 5: calls in named lambdas take their first call's condition, memcpy/memmove as C library calls, directives inside lists and between function heads masked; 6: no FTS5 table of names (a search scans them), strings' unique index made after the bulk insert; 7: stubs passed as arguments (kinds argument and stub_argument); 8: the case/if conditions around a call's innermost (calls.outer_id); 9: #include directives and argument-less #defines with their #if conditions (includes, defines: kernelmap.source.includes)

# Call kinds as stored; their order is part of the schema.
# "argument": a `*_stub` name passed as an argument, no edge; "stub_argument":
# one the tree declares as a stub, an edge to it (Note [stubs passed on] in extract).
CALL_KINDS = ("direct", "dispatcher", "stub", "launch", "vendor", "argument", "stub_argument")
CALL_KIND_CODE = {k: i for i, k in enumerate(CALL_KINDS)}

SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE strings (
    id INTEGER PRIMARY KEY,
    text TEXT NOT NULL                    -- unique: strings_text
);
CREATE TABLE files (
    id INTEGER PRIMARY KEY,
    path TEXT NOT NULL UNIQUE,            -- repository-relative
    sha1 TEXT NOT NULL,
    size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    errors INTEGER NOT NULL,              -- ERROR nodes: regions the grammar could not parse
    skipped TEXT                          -- why the file was not parsed, if it was not
);
CREATE TABLE symbols (
    id INTEGER PRIMARY KEY,
    file_id INTEGER NOT NULL,
    name_id INTEGER NOT NULL,             -- with "(anonymous namespace)" parts
    lookup_id INTEGER NOT NULL,           -- without them
    short_id INTEGER NOT NULL,
    kind TEXT NOT NULL,
    line INTEGER NOT NULL,
    end_line INTEGER NOT NULL,
    cond_id INTEGER,                      -- enclosing preprocessor condition
    op_id INTEGER                         -- structured kernels: the op the macro names
);
CREATE TABLE calls (
    symbol_id INTEGER,                    -- the calling definition; NULL at file scope
    file_id INTEGER NOT NULL,
    callee_id INTEGER NOT NULL,           -- as written: "at::cudnn_convolution", ".add"
    short_id INTEGER NOT NULL,
    kind INTEGER NOT NULL,                -- index into CALL_KINDS
    lib_id INTEGER,                       -- vendor library
    op_id INTEGER,                        -- dispatcher calls: the operator
    line INTEGER NOT NULL,
    cond_id INTEGER,                      -- innermost case label or if condition
    pp_id INTEGER,                        -- enclosing preprocessor condition
    outer_id INTEGER                      -- the case/if conditions around cond_id's, outermost first, a line each
);
CREATE TABLE registrations (
    file_id INTEGER NOT NULL,
    symbol_id INTEGER,                    -- enclosing definition (dtype dispatch sites)
    kind TEXT NOT NULL,                   -- register_dispatch | library_impl | library_def | at_dispatch
    name_id INTEGER NOT NULL,             -- stub, operator, or dispatch site name
    target_id INTEGER,                    -- kernel, or dtype groups
    key_id INTEGER,                       -- device, dispatch key, or AT_DISPATCH macro
    detail_id INTEGER,                    -- CPU capability, or library namespace
    line INTEGER NOT NULL,
    pp_id INTEGER
);
CREATE TABLE stubs (
    file_id INTEGER NOT NULL,
    kind TEXT NOT NULL,                   -- declare | define
    name_id INTEGER NOT NULL,
    detail_id INTEGER,                    -- DECLARE_DISPATCH's function type
    line INTEGER NOT NULL,
    pp_id INTEGER
);
CREATE TABLE includes (                   -- kernelmap.source.includes
    file_id INTEGER NOT NULL,
    line INTEGER NOT NULL,
    name_id INTEGER NOT NULL,             -- as written: "ATen/native/cpu/Loops.h"
    angled INTEGER NOT NULL,              -- 1 <...>, 0 "...", -1 a computed include (#include MACRO)
    cond_id INTEGER                       -- the #if conditions around it (Note [include conditions])
);
CREATE TABLE defines (                    -- #define of a macro without parameters, or #undef (value_id NULL)
    file_id INTEGER NOT NULL,
    line INTEGER NOT NULL,
    name_id INTEGER NOT NULL,
    value_id INTEGER,
    cond_id INTEGER
);
"""

# Every table the schema creates; a database lacking one is damaged.
TABLES = frozenset(re.findall(r"CREATE (?:VIRTUAL )?TABLE (\w+)", SCHEMA))


def table_definitions(db) -> list[tuple[str, str]]:
    """(name, CREATE statement) of every table of `db`: a damaged schema page
    (a column renamed by a flipped bit) shows here before any query trips on it."""
    return sorted(db.execute("SELECT name, coalesce(sql, '') FROM sqlite_master WHERE type = 'table'").fetchall())


def one_line(error: BaseException) -> str:
    """An SQLite error as one short line: its text may quote a damaged page."""
    text = " ".join(str(error).split())
    return text if len(text) <= 120 else text[:117] + "..."


@functools.cache
def expected_table_definitions() -> list[tuple[str, str]]:
    import sqlite3

    db = sqlite3.connect(":memory:")
    db.executescript(SCHEMA)
    try:
        return table_definitions(db)
    finally:
        db.close()

# Created after the bulk insert of a full build (cheaper than maintaining them row by row).
INDEXES = """
CREATE UNIQUE INDEX strings_text ON strings(text);
CREATE INDEX symbols_lookup ON symbols(lookup_id);
CREATE INDEX symbols_short ON symbols(short_id);
CREATE INDEX symbols_file ON symbols(file_id);
CREATE INDEX symbols_op ON symbols(op_id) WHERE op_id IS NOT NULL;
CREATE INDEX calls_symbol ON calls(symbol_id);
CREATE INDEX calls_short ON calls(short_id);
CREATE INDEX registrations_name ON registrations(name_id);
CREATE INDEX registrations_target ON registrations(target_id);
CREATE INDEX registrations_file ON registrations(file_id);
CREATE INDEX registrations_symbol ON registrations(symbol_id) WHERE symbol_id IS NOT NULL;
CREATE INDEX stubs_name ON stubs(name_id);
CREATE INDEX stubs_file ON stubs(file_id);
CREATE INDEX includes_file ON includes(file_id);
CREATE INDEX defines_file ON defines(file_id);
"""
