"""A trace file + kernelmap's facts per event -> the same trace with those
facts added to each event's `args["kernelmap"]`, so Perfetto or
chrome://tracing show the operator's catalog entry, dispatch key, kernel and
source link beside the profiler's own fields.

The input is streamed again event by event and the output written as it
goes, so memory stays bounded however large the trace is; the top-level
fields are kept, and a `kernelmap` field records what was added.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from kernelmap import __version__
from kernelmap.trace.reader import TraceHeader, read_trace


def export(source: Path, out: Path, links: dict[int, dict[str, Any]]) -> Path:
    """Write `source` to `out` (gzip when `out` ends in .gz) with `links` added."""
    header = TraceHeader()
    tmp = out.with_name(out.name + ".part")
    opener = gzip.open if out.name.endswith(".gz") else open
    tmp.unlink(missing_ok=True)  # whatever was left at that name (a link) is replaced, never written through
    try:
        _write(source, tmp, opener, links, header)
    except BaseException:
        tmp.unlink(missing_ok=True)  # a full disk, an interrupt: nothing half-written is left behind
        raise
    tmp.replace(out)
    return out


def _write(source: Path, tmp: Path, opener, links: dict[int, dict[str, Any]], header: TraceHeader) -> None:
    with opener(tmp, "wt", encoding="utf-8") as f:  # type: ignore[operator]
        f.write('{"traceEvents": [\n')
        first = True
        for index, event in enumerate(read_trace(source, header)):
            facts = links.get(index)
            if facts:
                args = event.get("args")
                if not isinstance(args, dict):
                    args = event["args"] = {}
                args["kernelmap"] = facts
            if not first:
                f.write(",\n")
            first = False
            f.write(json.dumps(event, separators=(",", ":"), default=str))
        f.write("\n]")
        for key, value in header.fields.items():
            f.write(f",\n{json.dumps(key)}: {json.dumps(value, default=str)}")
        f.write(f',\n"kernelmap": {json.dumps({"version": __version__, "annotated_events": len(links)})}\n}}\n')
