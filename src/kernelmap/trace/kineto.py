"""A Kineto (Chrome) trace file read into a `Trace`: the events into columns,
nested into the call tree (kernelmap.trace.build) and resolved to kernelmap's
facts (kernelmap.trace.resolve). The package's `load` picks this reader, the
execution-trace reader or the store."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

from kernelmap.errors import KernelmapError
from kernelmap.model import CallTree
from kernelmap.trace.reader import TraceFormatError


class Trace:
    """A resolved trace: the call tree and the trace file it was read from
    (each node's `event` attr is its event's index in that file).

    The tree is held as columns (Note [columnar trace] in
    `kernelmap.trace.build`); `summary()` reads them directly, and the
    CallNode tree is made the first time `tree` is asked for."""

    def __init__(self, tree: CallTree | None, file: Path, error: BaseException | None = None, *,
                 table=None, notes: tuple[str, ...] = (), meta: dict[str, Any] | None = None):
        self._tree = tree
        self._table = table
        self.notes = tuple(tree.notes) if tree is not None else tuple(notes)
        self.meta = dict(tree.meta) if tree is not None else dict(meta or {})
        self.file = file  # the Chrome trace the tree was read from
        self.error = error  # what the traced code raised, for a partial trace
        self._cleanup: Any = None
        self.id: str | None = None  # its id in the trace store (Note [trace store] in kernelmap.trace.store), when stored
        self.stored: Path | None = None  # the folder of its tables
        # What the store keeps beside them, read back (trace.store.Kept): set by the
        # store, which this module does not import (its summary, its hot subtrees)
        self.kept: Any = None

    @property
    def tree(self) -> CallTree:
        if self._tree is None:
            from kernelmap.trace.build import to_tree

            was_enabled = gc.isenabled()
            gc.disable()  # a million small objects that live as long as the trace: nothing to collect
            try:
                self._tree = to_tree(self._table, list(self.notes), self.meta)
            finally:
                if was_enabled:
                    gc.enable()
        return self._tree

    def with_notes(self, *notes: str) -> None:
        """Put `notes` first among the tree's notes."""
        self.notes = (*notes, *self.notes)
        if self._tree is not None:
            self._tree = CallTree(self._tree.root, self.notes, self._tree.meta)

    def summary(self):
        """Per operator, module and source file (`kernelmap.trace.summary.Summary`);
        a stored trace's is computed once and kept beside its tables."""
        from kernelmap.trace.summary import summarize, summarize_table

        if self.kept is not None:
            found = self.kept.summary(self)
            if found is not None:
                return found
        if self._table is not None:
            return summarize_table(self._table, self.notes, self.meta.get("versions"))
        return summarize(self.tree)

    def kernels(self, libraries: tuple[str, ...]) -> list[tuple[float, str, float]]:
        """(start µs, name, duration µs) of the GPU kernels of these libraries, from the columns."""
        if self._table is None:
            return [(float(n.attrs.get("start_us", 0.0)), n.name, float(n.attrs.get("duration_us", 0.0)))
                    for _, n in self.tree.walk() if n.kind == "gpu_kernel" and n.attrs.get("library") in libraries]
        from kernelmap.trace.build import kernels_of

        return kernels_of(self._table, libraries)

    def _repr_html_(self) -> str:
        from kernelmap.render.html import repr_html

        return repr_html(self)

    def export_chrome(self, out: Path | str) -> Path:
        """Write the trace back with kernelmap's facts in each event's args."""
        from kernelmap.trace.chrome import export

        return export(self.file, Path(out), links(self.tree))


def read(path: Path, keep_frames: bool, resolve: bool, source_tree: Path | None, live: bool, meta: dict[str, Any] | None,
          batches=None) -> Trace:
    from kernelmap.trace.build import build
    from kernelmap.trace.collect import collect
    from kernelmap.trace.events import PythonFrames
    from kernelmap.trace.reader import TraceHeader, read_batches

    header = TraceHeader()
    origin = None
    try:
        from kernelmap import env

        origin = env.torch_install().origin
    except KernelmapError:
        pass
    # A trace recorded here ran the installed torch; one read from a file may come from another.
    frames = PythonFrames(origin, check=not live)
    try:
        collected = collect(read_batches(path, header) if batches is None else batches, python_frames=frames)
    except ValueError as e:
        raise TraceFormatError(path.name, None, f"unusable event: {e}") from None  # it names the event by its number
    from kernelmap.trace.build import release_freed

    release_freed()  # the reader's windows, freed: their pages back before the build's arrays are made
    table = build(collected, keep_frames=keep_frames)
    release_freed()  # the reader's windows and the build's temporaries, freed: their pages back to the system
    notes = table.notes
    if frames.mismatched:
        notes.append(f"{frames.mismatched} Python frame name(s) of torch point at lines outside the function they name in the "
                     f"installed {origin.label}: the trace was recorded with another torch version; those frames are shown where "
                     "the trace says, not linked to the installed files")
    if resolve:
        from kernelmap.trace.resolve import Resolver
        from kernelmap.trace.sources import open_source_index

        index, reason = open_source_index(source_tree)
        if reason is not None and source_tree is not None:
            from kernelmap.errors import SourceError

            raise SourceError(reason)  # a tree asked for by name must open: the same error as every command's --source
        from kernelmap.trace.resolve import platform_of

        resolver = Resolver(live=live, source_index=index, source_reason=reason, platform=platform_of(header.fields, table))
        notes.extend(resolver.resolve(table))
        release_freed()  # resolution's temporaries (per-node keys, tables of distinct names), freed: their pages back too
        if resolver.versions:
            meta = {"versions": resolver.versions, **(meta or {})}  # Note [versions in a trace] in kernelmap.trace.summary
    m: dict[str, Any] = {
        "file": path.name,
        "events": collected.events,
        "device_events": collected.device_count,
        "trace_fields": {k: v for k, v in header.fields.items() if isinstance(v, (str, int, float, bool))},
    }
    dist = header.fields.get("distributedInfo")
    if isinstance(dist, dict) and isinstance(dist.get("rank"), int) and not isinstance(dist.get("rank"), bool):
        m["rank"] = dist["rank"]
    if header.fields.get("deviceProperties"):
        m["devices"] = [d.get("name") for d in header.fields["deviceProperties"] if isinstance(d, dict)]
    m.update(meta or {})
    return Trace(None, path, table=table, notes=tuple(notes), meta=m)


_LINK_KEYS = (
    "op", "yaml", "op_kind", "dispatch_key", "kernel_key", "kernel", "registered_at", "source", "source_url", "source_file",
    "source_reason", "functor", "launcher", "library", "closed", "conv_backend", "conv_backend_ran", "launched_by", "unknown", "forward_op",
)


def links(tree: CallTree) -> dict[int, dict[str, Any]]:
    """kernelmap's facts per event index of the trace file, for `export_chrome`."""
    out = {}
    for _, n in tree.walk():
        index = n.attrs.get("event")
        if index is not None:
            facts = {k: n.attrs[k] for k in _LINK_KEYS if n.attrs.get(k) is not None}
            if facts:
                out[index] = facts
    return out


def read_file(path: Path, keep_frames: bool, resolve: bool, source_tree: Path | None, live: bool,
              meta: dict[str, Any] | None) -> Trace:
    """`read`, with the cyclic collector paused: reading makes millions of
    short-lived lists and records, one window at a time, that hold no cycles,
    which the collector would only rescan."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return read(path, keep_frames, resolve, source_tree, live, meta)
    finally:
        if was_enabled:
            gc.enable()
