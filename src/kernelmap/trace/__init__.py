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

import os
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kernelmap.errors import KernelmapError

__all__ = ["Trace", "TracedCodeFailed", "TraceFormatError", "trace", "tracing", "load", "run_script", "run_code", "run_function"]

SCHEMA_KIND = "trace"


class TracedCodeFailed(KernelmapError):
    """The traced code raised (or was interrupted); the partial trace is attached."""

    def __init__(self, trace: Trace, error: BaseException):
        self.trace = trace
        self.error = error
        what = "interrupted" if isinstance(error, KeyboardInterrupt) else f"raised {type(error).__name__}: {error}"
        super().__init__(f"the traced code {what}")


from kernelmap.trace.kineto import Trace, read_file  # noqa: E402 - Trace re-exported
from kernelmap.trace.reader import TraceFormatError  # noqa: E402 - re-exported


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

    if execution_trace is not None:
        kineto_path, et_path = execution.pair(Path(path), Path(execution_trace))
        t = load(kineto_path, keep_frames=keep_frames, resolve=resolve, source_tree=source_tree, meta=meta, store=store)
        execution.link_file(t, et_path)
        return t
    if execution.is_execution_trace(Path(path)):
        return execution.load(Path(path), keep_frames=keep_frames, resolve=resolve, source_tree=source_tree, meta=meta)
    if store and not live:
        from kernelmap.trace import store as stored

        return stored.load(path, keep_frames=keep_frames, resolve=resolve, source_tree=source_tree, meta=meta)
    if not live:  # imported into a temporary folder, answered from its mapped tables (Note [import, then re-open])
        from kernelmap.trace import store as stored

        return stored.spilled(path, keep_frames=keep_frames, resolve=resolve, source_tree=source_tree, meta=meta)
    return read_file(Path(path), keep_frames, resolve, source_tree, live, meta)


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
