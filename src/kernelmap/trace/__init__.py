"""What runs in my model: code run under `torch.profiler`, or a trace file
recorded elsewhere -> one resolved `CallTree`, summaries, and the trace
written back with source links.

    from kernelmap.trace import trace, tracing, load

    t = trace(model, x)                 # run model(x) under the profiler
    with tracing() as rec:              # or trace a block
        model(x).sum().backward()
    t = rec.trace
    t = load("trace.json.gz")           # a Kineto/Chrome trace from elsewhere
    print(t.summary().to_text())
    t.export_chrome("annotated.json")   # open in Perfetto

A live trace is exported to a Chrome trace file and read back by the
importer (see `kernelmap.trace.record`), so both give the same tree (Note
[trace tree shape] in `kernelmap.trace.build`). torch is imported only when
code is run.
"""

from __future__ import annotations

import gc
import os
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kernelmap.errors import KernelmapError
from kernelmap.model import CallTree

__all__ = ["Trace", "TracedCodeFailed", "TraceFormatError", "trace", "tracing", "load", "run_script", "run_code", "run_function"]

SCHEMA_KIND = "trace"


class TracedCodeFailed(KernelmapError):
    """The traced code raised (or was interrupted); the partial trace is attached."""

    def __init__(self, trace: Trace, error: BaseException):
        self.trace = trace
        self.error = error
        what = "interrupted" if isinstance(error, KeyboardInterrupt) else f"raised {type(error).__name__}: {error}"
        super().__init__(f"the traced code {what}")


from kernelmap.trace.reader import TraceFormatError  # noqa: E402 - re-exported


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

        if self.stored is not None:
            from kernelmap.trace.store import stored_summary

            found = stored_summary(self)
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


def _temporary(t: Trace) -> Trace:
    t._cleanup = weakref.finalize(t, _unlink, str(t.file))
    return t


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def load(
    path: Path | str,
    *,
    keep_frames: bool = False,
    resolve: bool = True,
    source_tree: Path | None = None,
    live: bool = False,
    meta: dict[str, Any] | None = None,
    store: bool = False,
    execution_trace: Path | str | None = None,
) -> Trace:
    """Read a Chrome/Kineto trace (`.json` or `.json.gz`) into a resolved Trace.

    keep_frames: keep every Python frame (by default frames that ran no
    operator and per-call wrappers are dropped). resolve: add catalog,
    dispatch, source and vendor facts. source_tree: a PyTorch tree whose
    index links kernels to source. store: keep the imported tables in the
    cache, keyed by the file's content, and open them from there the next
    time (Note [trace store] in kernelmap.trace.store). A PyTorch execution
    trace (ExecutionTraceObserver JSON) at `path` is read as one (its operator
    graph, with no times); `execution_trace` links one to the Kineto trace at
    `path` recorded in the same run (kernelmap.trace.execution). Raises
    TraceFormatError for a file that is not a well-formed trace, naming the
    byte offset.
    """
    from kernelmap.trace import execution

    if execution_trace is not None or execution.is_execution_trace(Path(path)):
        return execution.load(Path(path), Path(execution_trace) if execution_trace is not None else None,
                              keep_frames=keep_frames, resolve=resolve, source_tree=source_tree, meta=meta, store=store)
    if store and not live:
        from kernelmap.trace import store as stored

        return stored.load(path, keep_frames=keep_frames, resolve=resolve, source_tree=source_tree, meta=meta)
    # Reading makes millions of short-lived lists and records, one window at a
    # time, that hold no cycles: the cyclic collector would only rescan them.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _load(Path(path), keep_frames, resolve, source_tree, live, meta)
    finally:
        if was_enabled:
            gc.enable()


def _load(path: Path, keep_frames: bool, resolve: bool, source_tree: Path | None, live: bool, meta: dict[str, Any] | None,
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
    table = build(collected, keep_frames=keep_frames)
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


def _from_recording(rec, keep_frames: bool, source_tree: Path | None, how: str) -> Trace:
    from kernelmap import env

    meta = {"recorded": how, "torch": env.torch_install().version, "cuda": rec.cuda}
    if rec.error is not None:
        meta["error"] = f"{type(rec.error).__name__}: {rec.error}"
    t = load(rec.path, keep_frames=keep_frames, source_tree=source_tree, live=True, meta=meta)
    t.error = rec.error
    if rec.error is not None:
        kind = "interrupted" if isinstance(rec.error, KeyboardInterrupt) else f"raised {type(rec.error).__name__}"
        t.with_notes(f"partial trace: the traced code {kind}")
    return _temporary(t)


def _run(runner: Callable[[], Any], how: str, keep_frames: bool, source_tree: Path | None, raise_on_error: bool,
         warmup: int = 0, steps: int = 1) -> Trace:
    from kernelmap.trace.record import record

    rec = record(runner, warmup=warmup, steps=steps)
    if warmup or steps != 1:
        how = f"{how} (after {warmup} warm-up run(s), {steps} profiled)"
    t = _from_recording(rec, keep_frames, source_tree, how)
    if rec.error is not None and raise_on_error:
        raise TracedCodeFailed(t, rec.error) from rec.error
    return t


def trace(fn: Callable[..., Any], *args: Any, keep_frames: bool = False, source_tree: Path | None = None,
          warmup: int = 0, steps: int = 1, **kwargs: Any) -> Trace:
    """Run `fn(*args, **kwargs)` under the profiler and return its resolved trace;
    with `warmup`, that many unprofiled calls first (the cold first call is not
    in the trace), and `steps` profiled calls (a few steps of a training loop).

    If `fn` raises (or Ctrl-C stops it), raises TracedCodeFailed carrying the
    partial trace and, as its cause, the original exception.
    """
    return _run(lambda: fn(*args, **kwargs), getattr(fn, "__qualname__", repr(fn)), keep_frames, source_tree, True, warmup, steps)


def run_script(path: str, argv: tuple[str, ...] = (), **options: Any) -> Trace:
    """Trace `python path argv...`; a failure returns the partial trace with `.error` set.
    Options: keep_frames, source_tree, warmup (unprofiled runs first), steps (profiled runs)."""
    from kernelmap.trace.record import script_runner

    return _run(script_runner(path, argv), Path(path).name, options.get("keep_frames", False), options.get("source_tree"), False,
                options.get("warmup", 0), options.get("steps", 1))


def run_code(code: str, **options: Any) -> Trace:
    """Trace `python -c code`; a failure returns the partial trace with `.error` set."""
    from kernelmap.trace.record import code_runner

    return _run(code_runner(code), "-c", options.get("keep_frames", False), options.get("source_tree"), False,
                options.get("warmup", 0), options.get("steps", 1))


def run_function(target: str, **options: Any) -> Trace:
    """Trace `module:function()`; a failure returns the partial trace with `.error` set."""
    from kernelmap.trace.record import function_runner

    return _run(function_runner(target), target, options.get("keep_frames", False), options.get("source_tree"), False,
                options.get("warmup", 0), options.get("steps", 1))


class tracing:
    """Trace a block: `with tracing() as rec: ...`, then `rec.trace`.

    An exception in the block propagates; the partial trace is still
    available as `rec.trace` (with `.error` set).
    """

    def __init__(self, *, keep_frames: bool = False, source_tree: Path | None = None):
        self.keep_frames = keep_frames
        self.source_tree = source_tree
        self.trace: Trace | None = None
        self._profiling = None

    def __enter__(self) -> tracing:
        from kernelmap.trace.record import Profiling

        self._profiling = Profiling()
        self._profiling.start()
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        from kernelmap.trace.record import Recording

        assert self._profiling is not None
        path = self._profiling.stop()
        rec = Recording(path, None, exc, self._profiling.cuda)
        self.trace = _from_recording(rec, self.keep_frames, self.source_tree, "block")
        return False


class _CallableModule(type(os)):
    """`kernelmap.trace` is both this package and, called, `trace()`: the
    public API promises `kernelmap.trace(fn, *args)` beside `kernelmap.trace.load(...)`."""

    def __call__(self, fn: Callable, *args: Any, **kwargs: Any) -> Trace:
        return trace(fn, *args, **kwargs)


import sys as _sys  # noqa: E402

_sys.modules[__name__].__class__ = _CallableModule
