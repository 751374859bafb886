"""Code to run -> a Chrome trace file written by `torch.profiler`.

Runs a callable, a script, a code string or `module:function` under the
profiler (CPU, plus CUDA when a GPU is present) with Python stacks and input
shapes, and exports the trace; the tree is then read back from that file by
the same code that imports traces recorded elsewhere, so a live trace and an
imported one give the same tree. An exception or Ctrl-C in the traced code
stops the run but still exports what was recorded.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import runpy
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelmap.errors import BadInput, TorchUnavailable


@dataclass
class Recording:
    """A trace file on disk and how the run ended."""

    path: Path
    result: Any = None
    error: BaseException | None = None  # what the traced code raised (KeyboardInterrupt included)
    cuda: bool = False


def _torch():
    try:
        import torch
    except ImportError as e:  # pragma: no cover - torch is a requirement
        raise TorchUnavailable(f"tracing needs torch: {e}") from None
    return torch


def activities(torch) -> list:
    acts = [torch.profiler.ProfilerActivity.CPU]
    if torch.cuda.is_available():
        acts.append(torch.profiler.ProfilerActivity.CUDA)
    return acts


class Profiling:
    """The profiler around a block; `stop()` exports the trace to a fresh file."""

    def __init__(self) -> None:
        self.torch = _torch()
        self.cuda = self.torch.cuda.is_available()
        self.prof = self.torch.profiler.profile(activities=activities(self.torch), record_shapes=True, with_stack=True)

    def start(self) -> None:
        with quiet_stderr():
            self.prof.__enter__()

    def stop(self) -> Path:
        if self.cuda:
            self.torch.cuda.synchronize()
        with quiet_stderr():
            self.prof.__exit__(None, None, None)
        fd, name = tempfile.mkstemp(prefix="kernelmap-trace-", suffix=".json")
        os.close(fd)
        self.prof.export_chrome_trace(name)
        return Path(name)


@contextlib.contextmanager
def quiet_stderr():
    """Silence file descriptor 2 while the profiler starts or stops: its C++
    side logs a line for each ("profiler_start", "profiler_stop") that would
    land between the traced code's own output. Only those two calls are
    covered; the traced code's stderr is untouched."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no real stderr (embedded, captured): nothing to silence
        yield
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def record(fn: Callable[..., Any], *args: Any, warmup: int = 0, steps: int = 1, **kwargs: Any) -> Recording:
    """Run `fn(*args, **kwargs)` `warmup` times unprofiled (first-call costs:
    lazy initialisation, allocator growth, thread pools), then `steps` times
    under the profiler; never raises what `fn` raises. The result is the last
    profiled call's."""
    if not isinstance(warmup, int) or warmup < 0:
        raise BadInput(f"warmup must be a whole number >= 0, not {warmup!r}")
    if not isinstance(steps, int) or steps < 1:
        raise BadInput(f"steps must be a whole number >= 1, not {steps!r}")
    p = Profiling()
    result, error = None, _calls(fn, args, kwargs, warmup)[1]
    p.start()
    try:
        if error is None:  # a warm-up that failed leaves an empty trace and its error
            result, error = _calls(fn, args, kwargs, steps)
    finally:
        path = p.stop()
    return Recording(path, result, error, p.cuda)


def _calls(fn: Callable[..., Any], args: tuple, kwargs: dict, times: int) -> tuple[Any, BaseException | None]:
    """(the last result, what stopped the calls) of calling `fn` `times` times."""
    result = None
    for _ in range(times):
        try:
            result = fn(*args, **kwargs)
        except SystemExit as e:
            if e.code not in (None, 0):
                return None, e
        except BaseException as e:  # noqa: BLE001 - reported with the partial trace
            return None, e
    return result, None


def script_runner(path: str, argv: tuple[str, ...] = ()) -> Callable[[], Any]:
    """A callable that runs a script as `python script.py argv...` would."""
    script = Path(path)
    if not script.is_file():
        raise BadInput(f"no such script: {path}")

    def run() -> Any:
        saved_argv, saved_path = sys.argv[:], sys.path[:]
        sys.argv = [str(script), *argv]
        sys.path.insert(0, str(script.resolve().parent))
        try:
            return runpy.run_path(str(script), run_name="__main__")
        finally:
            sys.argv, sys.path[:] = saved_argv, saved_path

    return run


def code_runner(code: str) -> Callable[[], Any]:
    """A callable that runs a code string as `python -c` would."""
    try:
        compiled = compile(code, "<string>", "exec")
    except SyntaxError as e:
        raise BadInput(f"the code does not compile: {e.msg} (line {e.lineno})") from None
    except (MemoryError, RecursionError):  # the parser's limit on nesting (100,000 unary minuses)
        raise BadInput("the code does not compile: it is nested too deeply") from None

    def run() -> Any:
        namespace = {"__name__": "__main__"}
        exec(compiled, namespace)  # noqa: S102 - running the user's code is the point
        return None

    return run


def function_runner(target: str) -> Callable[[], Any]:
    """A callable for `package.module:function` (called with no arguments);
    the module is imported now, so import errors are reported before tracing."""
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise BadInput(f"expected module:function, got {target!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise BadInput(f"cannot import {module_name}: {e}") from None
    fn: Any = module
    for part in attr.split("."):
        fn = getattr(fn, part, None)
        if fn is None:
            raise BadInput(f"{module_name} has no attribute {attr!r}")
    if not callable(fn):
        raise BadInput(f"{target} is not callable")
    return fn
