"""Every answer kernelmap gives, in one place: its document name and
version (Note [answer documents] in model/documents.py), the type that holds it, and
what it answers. `load(document)` turns any saved document back into its
answer, which any renderer can show again.

| document      | type                                     | answers                                   |
|---------------|------------------------------------------|-------------------------------------------|
| calltree/2    | kernelmap.model.CallTree                 | stack, callers, path, and a trace's tree  |
| where/2       | kernelmap.model.WhereAnswer              | where                                     |
| explain/2     | kernelmap.model.Explanation              | explain                                   |
| find/2        | kernelmap.source.index.Findings          | find                                      |
| gen/2         | kernelmap.codegen.sites.GeneratedCode    | gen                                       |
| trace/2       | kernelmap.trace.summary.TraceReport      | trace (tree and summary)                  |
| path/1        | kernelmap.model.PathAnswer               | path                                      |
| sources/1     | kernelmap.model.SourceList               | source list                               |
| scaffold/1    | kernelmap.model.ScaffoldAnswer           | scaffold                                  |
| compile/1     | kernelmap.compile.model.CompileAnswer    | compile (see kernelmap.compile.model)     |
| diff/1        | kernelmap.diff.OpDiff                    | diff                                      |
| verify/2      | kernelmap.extend.compare.VerifyReport    | verify (see its to_json)                  |
| kernel/1      | kernelmap.kernels.resolve.KernelAnswer   | kernel (one GPU kernel name)              |
| ranks/1       | kernelmap.trace.ranks.RanksSummary       | trace --from of several ranks             |
| fold/1        | kernelmap.mcp.bound.Fold                 | mcp expand: the next page of a list       |
| impact/1      | kernelmap.impact.model.ImpactAnswer      | impact (what an edit rebuilds)            |

A document is a JSON object: `{"kernelmap": "<name>/<version>", ...fields}`.
Documents that carry locations have an `origins` table (key -> kind,
version, commit, label, root) and each LOCATION names its origin by key:

    LOCATION = {"path": "aten/src/ATen/native/Convolution.cpp", "line": 1701, "end_line": 1766,
                "origin": "tree debian-2.6.0", "url": "https://github.com/pytorch/pytorch/blob/<sha>/...#L1701" | null,
                "file": "<where the file lies on this machine>" | null}

calltree/2: {"kind": "stack|callers|path|trace", "notes": [...], "meta": {...}, "origins": {...},
             "root": NODE}, NODE = {"name", "kind" (model.NodeKind), "layer" (Note [layers]),
             "location": LOCATION | null, "via" (model.EdgeKind) | null, "condition": str | null,
             "facts": {name: value} (only names declared in model.FACTS), "children": [NODE, ...]}
where/2:    {"query", "torch": {"version", "commit"}, "notes", "operator": OP, "also": [OP],
             "structured_delegate": OP | null, "live": null | {"schema_registered_at", "registrations": [KERNEL],
             "dispatch_path": {"op", "device", "dtype", ..., "keys", "steps": [{"key", "action", "tag", "kernel"}]}},
             "source": [{"role", "name", "location", "detail"}], "overrides": [...]}
explain/2:  {"op", "device", "dtype", "torch", "notes", "steps": [{"title", "summary", "location", "excerpt", "language",
             "alternatives": [{"name", "condition", "location", "note"}]}]}
find/2:     {"name", "definitions", "references", "stub_registrations", "library_registrations",
             "stub_declarations", "more_references"}
gen/2:      {"op", "origin", "layers", "schema", "bindings", "ops", "registrations", "backward", "ufunc", "notes"}
trace/2:    {"tree": calltree/2 | null, "summary": {"ops", "modules", "files", "notes"} | null}
path/1:     {"source", "target", "device", "torch", "notes", "searched": {"nodes", "depth", "cut", "routes", "more"},
             "origins", "routes": [{"conditions": [str], "steps": [NODE without "children"]}]}
sources/1:  {"trees": [{"name", "root", "version", "commit", "kind", "indexed"}]}
diff/1:     {"query", "op", "device", "from": origin key, "to": origin key, "notes", "origins",
             "changes": [{"section" (yaml|kernel|stub|wrapper|node), "change" (added|removed|changed|moved|renamed|same),
             "name", "before", "after", "from": LOCATION | null, "to": LOCATION | null, "detail"}]}
kernel/1:   {"name", "demangled", "symbol", "truncated", "library", "closed", "repository",
             "kernel": SITE | null, "functor": SITE | null, "launches": [SITE], "tree",
             "extension": the folder of the extension project whose file holds the kernel (its
             location is relative to it; `tree` is then null) | null, "family": a library kernel's family | null,
             "entries": [the entry points that launch the family], "unknown": "unknown, because ..." | null, "notes"},
             SITE = {"role", "symbol", "location": "path:line" | null, "caller"}
ranks/1:    {"ranks": [{"rank", "file", "gpu_us", "source_us", "library_us", "collective_us"}],
             "merged_ops": [{"name", "calls", "total_us", "device_us"}],
             "collectives": [{"name", "index", "us": {rank: us}, "slowest"}],
             "differences": [{"name", "device_us": {rank: us}, "spread_us"}]}
fold/1:     {"answer": "<name>/<version>" of the answer it continues, "at": JSON pointer of its list, "start", "total",
             "items": [...], "next": fold id | null, "origins"}; replies of `kernelmap mcp` also add "pinned",
             "bounded" (Note [bounded answers] in kernelmap.mcp.bound) and a LOCATION's "resource" to any document
impact/1:   {"query", "target" (file|line|symbol|operator), "device", "tree": origin key, "origins", "notes",
             "edited": [{"path", "reason", "location": LOCATION | null}], "counts": {"cpp", "cu", "capability",
             "capability AVX2", ...}, "libraries": {library: units}, "maybe", "estimate": {"cpu_seconds",
             "wall_seconds", "jobs", "model", "error", "measured"}, "advice": [{"summary", "path", "location",
             "units", "cpu_seconds"}], "operators": [str], "third_party": [str],
             "units": [{"path", "kind" (cpp|cu|capability), "capability", "library", "seconds", "maybe", "via"}]}
"""

from __future__ import annotations

import importlib
from typing import Any

from kernelmap.model import DocumentError

# document name -> (version, "module:Type")
ANSWERS: dict[str, tuple[int, str]] = {
    "calltree": (2, "kernelmap.model:CallTree"),
    "where": (2, "kernelmap.model:WhereAnswer"),
    "explain": (2, "kernelmap.model:Explanation"),
    "find": (2, "kernelmap.source.index:Findings"),
    "gen": (2, "kernelmap.codegen.sites:GeneratedCode"),
    "trace": (2, "kernelmap.trace.summary:TraceReport"),
    "path": (1, "kernelmap.model:PathAnswer"),
    "sources": (1, "kernelmap.model:SourceList"),
    "verify": (2, "kernelmap.extend.compare:VerifyReport"),
    "scaffold": (1, "kernelmap.model:ScaffoldAnswer"),
    "compile": (1, "kernelmap.compile.model:CompileAnswer"),
    "diff": (1, "kernelmap.diff:OpDiff"),
    "kernel": (1, "kernelmap.kernels.resolve:KernelAnswer"),
    "ranks": (1, "kernelmap.trace.ranks:RanksSummary"),
    "fold": (1, "kernelmap.mcp.bound:Fold"),
    "impact": (1, "kernelmap.impact.model:ImpactAnswer"),
}


def answer_type(name: str) -> type:
    if name not in ANSWERS:
        raise DocumentError(f"unknown answer document {name!r}; kernelmap writes {', '.join(sorted(ANSWERS))}")
    module, attr = ANSWERS[name][1].split(":")
    return getattr(importlib.import_module(module), attr)


def document_name(doc: Any) -> str:
    """The answer name of a document (`calltree` for `calltree/2`)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("kernelmap"), str) or "/" not in doc["kernelmap"]:
        raise DocumentError('not a kernelmap document: a JSON object with "kernelmap": "<answer>/<version>" is expected')
    return doc["kernelmap"].split("/", 1)[0]


def load(doc: Any) -> Any:
    """The answer a document describes (its type's `from_json`). A document
    is anyone's text: one of the right name whose fields are not what its
    type holds (a null where a location must be, a string for a list) is a
    DocumentError naming the problem, whatever the type's reader raised."""
    kind = answer_type(document_name(doc))
    try:
        return kind.from_json(doc)
    except DocumentError:
        raise
    except (RecursionError, MemoryError):
        raise DocumentError(f"a {doc['kernelmap']} document too large or too deep to read") from None
    except Exception as e:  # noqa: BLE001 - every way a reader meets a field of the wrong shape
        raise DocumentError(f"not a {doc['kernelmap']} document kernelmap can read ({type(e).__name__}: {str(e)[:200]})") from None
