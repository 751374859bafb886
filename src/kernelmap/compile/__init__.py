"""Code run under `torch.compile` -> a `CompileAnswer`: each kernel Inductor
generated (cpp_fused_* / triton_*) with the aten ops it fused, the
decompositions that produced them, the user lines behind them, its place in
Inductor's output code and its time; ATen kernels Inductor called instead
(extern kernels, fallbacks); graph breaks with reason and user line.

Everything comes from Inductor's own records of the run, never from a
kernel's name: the debug trace it writes per graph (`output_code.py`,
`fx_graph_transformed.py` with `# File:` comments, and the provenance
mapping `inductor_provenance_tracking_node_mappings.json`, kernel -> post-grad
nodes), each post-grad node's `original_aten` metadata, Dynamo's graph-break
log, and the profiler's per-kernel events. Each run gets a private Inductor
cache and debug folder, so nothing is read from an earlier run.

Note [compile's own folder]
Everything Inductor writes during a run goes into the run's own folders,
none of it into the system's temporary folder: its debug trace (the output
code and records the answer is read from) into the output folder, and into
a scratch folder removed after the run its cache (TORCHINDUCTOR_CACHE_DIR,
TRITON_CACHE_DIR: the compiled kernels), its precompiled headers (about
150 MB per run, in `$TMPDIR/torchinductor_<user>` by default, a path fixed
when torch._inductor.codecache is imported, pointed into the scratch folder
here) and whatever else it asks `tempfile` for (the temporary folder is the
scratch folder's while the run lasts). With --output-dir the output folder
is kept; by default it lies in the scratch folder, removed once the answer is
read, and the answer says so (`kept`): --output-dir keeps the output code.
The folder Dynamo fixes for its own cache when torch._dynamo is imported
(TORCHINDUCTOR_CACHE_DIR, else `$TMPDIR/torchinductor_<user>`, made there and
then) is the scratch folder too: the scratch folder is set up before
anything kernelmap runs imports torch._dynamo (`inductor_scratch`).
"""

from __future__ import annotations

import contextlib
import inspect
import json
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelmap.compile.model import (
    CompileAnswer,
    Decomposition,
    FileLine,
    FusedOp,
    GeneratedKernel,
    Graph,
    GraphBreak,
)
from kernelmap.errors import BadInput, KernelmapError
from kernelmap.trace.record import quiet_stderr, activities

__all__ = ["CompileAnswer", "CompilerMissing", "compile_callable", "inductor_scratch", "run_code", "run_function", "run_script"]


class CompilerMissing(KernelmapError):
    """Inductor needs a C++ compiler for CPU kernels and none is on PATH."""


_CXX_CANDIDATES = ("g++", "c++", "clang++")
_FILE_COMMENT = re.compile(r"^\s*# File: (?P<path>.+?):(?P<line>\d+) in (?P<func>\S+), code: (?P<code>.*)$")
_NODE_LINE = re.compile(r"^\s*(?P<name>\w+)(?:: \"[^\"]*\")? = torch\.ops\.(?P<target>[\w.]+)\(")
_KERNEL_DEF = re.compile(r"^(?P<name>(?:cpp|triton)_\w+) = async_compile\.")
_HANDLE_COMMENT = re.compile(r"^\s*# \[Provenance debug handles\] (?P<handle>\S+):(?P<id>\d+)$")
_BREAK_HEAD = re.compile(r"Graph break in user code at (?P<path>.+):(?P<line>\d+)")
_GRAPH_DIR = re.compile(r"model__(?P<graph>\d+)_(?P<kind>[a-z]+)_(?P<n>\d+)")


def find_cxx() -> str:
    """The C++ compiler Inductor will use on CPU: $CXX, else the first of g++, c++, clang++."""
    candidates = ([os.environ["CXX"]] if os.environ.get("CXX") else []) + list(_CXX_CANDIDATES)
    for name in candidates:
        found = shutil.which(name)
        if found:
            return found
    raise CompilerMissing(
        f"no C++ compiler on PATH (looked for {', '.join(candidates)}): Inductor builds CPU kernels with one; install g++ or set CXX"
    )


@dataclass
class _Capture:
    """What a run leaves behind besides the debug folder."""

    original_aten: dict[str, dict[str, str]] = field(default_factory=dict)  # graph signature -> node -> original op
    breaks: list[GraphBreak] = field(default_factory=list)
    frames: int = 0  # Python frames Dynamo was asked to compile during the run
    graphs: int = 0  # graphs it captured (each handed to the backend)


class _BreakHandler(logging.Handler):
    def __init__(self, capture: _Capture) -> None:
        super().__init__(logging.DEBUG)
        self.capture = capture

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        head = _BREAK_HEAD.search(text)
        if head is None:
            return
        reason = text.split("Graph Break Reason:", 1)[-1].strip()
        first = next((ln.strip() for ln in reason.splitlines() if ln.strip() and not ln.strip().startswith("Encountered graph break")), reason)
        self.capture.breaks.append(GraphBreak(first, FileLine(head["path"], int(head["line"])), reason))


def _graph_breaks_loggers() -> list[logging.Logger]:
    return [logging.getLogger(n) for n in list(logging.root.manager.loggerDict) if n.endswith("__graph_breaks")]


@contextlib.contextmanager
def inductor_scratch() -> Iterator[Path]:
    """A scratch folder for everything Inductor writes besides its debug
    trace, removed on exit (Note [compile's own folder]). Entered before
    torch._dynamo is imported: its import fixes Dynamo's cache folder from
    TORCHINDUCTOR_CACHE_DIR, making `$TMPDIR/torchinductor_<user>` if unset."""
    scratch = Path(tempfile.mkdtemp(prefix="kernelmap-inductor-"))
    saved_env = {k: os.environ.get(k) for k in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")}
    saved_tempdir = tempfile.tempdir
    try:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(scratch / "cache")
        os.environ["TRITON_CACHE_DIR"] = str(scratch / "cache" / "triton")
        (scratch / "tmp").mkdir()
        tempfile.tempdir = str(scratch / "tmp")
        yield scratch
    finally:
        tempfile.tempdir = saved_tempdir
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(scratch, ignore_errors=True)


class _AnsweredFilter(logging.Filter):
    """Drops the warnings whose facts the answer holds: Inductor's "<graph>
    debug trace: <folder>" (kernelmap turned the debug trace on, not the
    user) and Dynamo's graph-break warnings (the answer lists each break with
    its reason and line)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.name.startswith(("torch._inductor", "torch._dynamo")):
            return True
        text = str(record.msg)
        return "debug trace:" not in text and "Graph break" not in text


def _torch_handlers() -> list[logging.Handler]:
    """The handlers torch's loggers write through (torch._logging installs its own)."""
    found: list[logging.Handler] = []
    for name in ["torch", *[n for n in list(logging.root.manager.loggerDict) if n.startswith("torch.")]]:
        logger = logging.getLogger(name)
        found += [h for h in getattr(logger, "handlers", ()) if h not in found]
    return found


@contextlib.contextmanager
def _inductor_session(workdir: Path, scratch: Path, capture: _Capture):
    """A private debug folder (`workdir`) and cache (`scratch`, from
    inductor_scratch), provenance tracking, per-kernel profiler events,
    graph-break records and each post-grad node's original aten op."""
    import torch
    import torch._dynamo
    import torch._dynamo.config as dynamo_config
    import torch._inductor.codecache as codecache
    import torch._inductor.config as inductor_config
    import torch._logging
    from torch._dynamo.utils import counters

    # Note [compile's own folder]: the precompiled headers' folder, fixed at import
    saved_headers = codecache._HEADER_DIR, codecache._HEADER_LOCK_DIR
    codecache._HEADER_DIR = str(scratch / "cache" / "precompiled_headers")
    codecache._HEADER_LOCK_DIR = os.path.join(codecache._HEADER_DIR, "locks")
    codecache._precompile_header.cache_clear()  # an earlier run's headers lay in its scratch folder, removed
    frames_before, graphs_before = counters["frames"]["total"], counters["stats"]["unique_graphs"]

    def record_original_aten(graph) -> None:  # runs after Inductor's post-grad passes
        names = {}
        for node in graph.nodes:
            orig = node.meta.get("original_aten")
            if orig is not None:
                names[node.name] = str(orig)
        capture.original_aten[_signature(n.name for n in graph.nodes if n.op == "call_function")] = names

    patches = {
        "trace.enabled": True,
        "trace.provenance_tracking_level": 1,
        "cpp.enable_kernel_profile": True,  # a profiler event per generated CPU kernel
        "post_grad_custom_post_pass": record_original_aten,
        "fx_graph_cache": False,
        "fx_graph_remote_cache": False,
    }
    torch._dynamo.reset()
    torch._logging.set_logs(graph_breaks=True)
    answered = _AnsweredFilter()
    handlers = _torch_handlers()  # torch's own, before the one that records the breaks joins them
    for h in handlers:
        h.addFilter(answered)
    handler = _BreakHandler(capture)
    loggers = _graph_breaks_loggers()
    for lg in loggers:
        lg.addHandler(handler)
        lg.propagate = False  # the graph-break log goes to the answer, not to the user's stderr
    try:
        with inductor_config.patch(patches), dynamo_config.patch(debug_dir_root=str(workdir / "debug")):
            yield
    finally:
        capture.frames = counters["frames"]["total"] - frames_before
        capture.graphs = counters["stats"]["unique_graphs"] - graphs_before
        for lg in loggers:
            lg.removeHandler(handler)
            lg.propagate = True
        for h in handlers:
            h.removeFilter(answered)
        torch._logging.set_logs()
        codecache._HEADER_DIR, codecache._HEADER_LOCK_DIR = saved_headers
        codecache._precompile_header.cache_clear()
        torch._dynamo.reset()


def def_line(fn: Any) -> int:
    """The line of `def name` (getsourcelines starts at the first decorator)."""
    lines, start = inspect.getsourcelines(fn)
    for i, text in enumerate(lines):
        if text.lstrip().startswith(("def ", "async def ")):
            return start + i
    return start


def _signature(names) -> str:
    return ",".join(sorted(names))


def compile_callable(fn: Callable[[], Any], *, workdir: Path | None = None, profile: bool = True,
                     scratch: Path | None = None) -> CompileAnswer:
    """Run `fn` (code that calls `torch.compile`d functions) once and map what
    Inductor generated. `workdir` keeps Inductor's cache and output (default:
    a temporary folder, removed once the answer is read: Note [compile's own
    folder]). What `fn` raises is in `answer.error`, with whatever was
    compiled before it. `scratch`: a folder of `inductor_scratch` the caller
    holds (default: one for this call)."""
    if scratch is None:
        with inductor_scratch() as scratch:
            return compile_callable(fn, workdir=workdir, profile=profile, scratch=scratch)
    import torch

    if not torch.cuda.is_available():
        find_cxx()
    if workdir is not None and not str(workdir):
        raise BadInput("--output-dir is an empty path")
    if workdir is not None and Path(workdir).exists() and (not Path(workdir).is_dir() or any(Path(workdir).iterdir())):
        # an earlier run's cache or output would mix with this one's
        raise BadInput(f"the output directory must be new or empty: {workdir}")
    keep = workdir is not None
    # absolute now: the code may change folder while Inductor writes here
    workdir = Path(os.path.abspath(workdir)) if keep else scratch / "output"
    try:
        workdir.mkdir(parents=True, exist_ok=True)
        capture = _Capture()
        error: BaseException | None = None
        prof = None
        with _inductor_session(workdir, scratch, capture):
            if profile:
                # no Python stacks: the per-kernel totals are all this needs
                prof = torch.profiler.profile(activities=activities(torch))
                with quiet_stderr():
                    prof.__enter__()
            try:
                fn()
            except SystemExit as e:
                if e.code not in (None, 0):
                    error = e
            except BaseException as e:  # noqa: BLE001 - reported beside what did compile
                error = e
            finally:
                times = _kernel_times(prof) if prof is not None else {}
        graphs = tuple(_read_graph(d, capture, times) for d in _graph_dirs(workdir / "debug"))
    finally:
        if not keep:  # its paths stay in the answer, marked as not kept
            shutil.rmtree(workdir, ignore_errors=True)
    return CompileAnswer(
        workdir=str(workdir),
        torch_version=torch.__version__,
        graphs=graphs,
        graph_breaks=tuple(capture.breaks),
        profiled=profile,
        error=None if error is None else f"{type(error).__name__}: {error}",
        exception=error,
        kept=keep,
        notes=_why_no_graph(capture, error) if not graphs else (),
    )


def _why_no_graph(capture: _Capture, error: BaseException | None) -> tuple[str, ...]:
    """Why a run compiled no graph, from Dynamo's own counters."""
    if error is not None and capture.frames == 0:
        return ("no graph: the code raised before it called anything compiled",)
    if capture.frames == 0:
        return ("no graph: the code called no function or module wrapped in torch.compile (a script or -c code "
                "calls torch.compile itself and then calls what it returns; a module:function target is wrapped "
                "for you)",)
    if capture.graphs == 0:
        return (f"no graph: Dynamo ran {capture.frames} frame(s) of compiled code but captured no tensor operation "
                f"in them (nothing to hand to Inductor)",)
    return (f"no graph of Inductor's: Dynamo captured {capture.graphs} graph(s), but Inductor compiled none; is "
            f"torch.compile given another backend (backend=...)?",)


def _kernel_times(prof) -> dict[str, tuple[float, int]]:
    """profiler event name -> (total microseconds, calls)."""
    with quiet_stderr():
        prof.__exit__(None, None, None)
    out: dict[str, tuple[float, int]] = {}
    for e in prof.key_averages():
        total = getattr(e, "device_time_total", 0.0) or 0.0
        out[e.key] = (max(e.cpu_time_total, total), e.count)
    return out


def _graph_dirs(debug: Path) -> list[Path]:
    dirs = [p for p in debug.glob("run_*/torchinductor/*") if p.is_dir() and (p / "output_code.py").is_file()]
    return sorted(dirs, key=lambda p: tuple(int(x) for x in re.findall(r"\d+", p.name)))


@dataclass(frozen=True)
class _Node:
    name: str
    target: str  # "aten.convolution.default"
    user: FileLine | None
    code: str | None


def _read_post_grad(path: Path) -> dict[str, _Node]:
    nodes: dict[str, _Node] = {}
    user: FileLine | None = None
    code: str | None = None
    for line in path.read_text(encoding="utf-8").splitlines():
        m = _FILE_COMMENT.match(line)
        if m:
            user, code = FileLine(m["path"], int(m["line"])), m["code"].strip()
            continue
        m = _NODE_LINE.match(line)
        if m:
            nodes[m["name"]] = _Node(m["name"], m["target"], user, code)
        elif not line.strip():
            user, code = None, None
    return nodes


def _read_graph(directory: Path, capture: _Capture, times: dict[str, tuple[float, int]]) -> Graph:
    """One graph's debug folder -> its kernels and fallbacks."""
    try:
        output = directory / "output_code.py"
        nodes = _read_post_grad(directory / "fx_graph_transformed.py")
        mapping_path = directory / "inductor_provenance_tracking_node_mappings.json"
        mapping = json.loads(mapping_path.read_text(encoding="utf-8")) if mapping_path.is_file() else {}
        original = capture.original_aten.get(_signature(nodes), {})
        kernel_to_post: dict[str, list[str]] = mapping.get("cppCodeToPost") or mapping.get("kernelToPost") or {}
        defs: dict[str, int] = {}
        calls: dict[str, int] = {}
        lines = output.read_text(encoding="utf-8").splitlines()
        for i, line in enumerate(lines, 1):
            m = _KERNEL_DEF.match(line)
            if m:
                defs[m["name"]] = i
            m = _HANDLE_COMMENT.match(line)
            if m:
                calls.setdefault(f"{m['handle']}:{m['id']}", i + 1)
        gm = _GRAPH_DIR.search(directory.name)
        graph_id = int(gm["graph"]) if gm else 0
        kernels = []
        for handle, post in kernel_to_post.items():
            name = handle.rsplit(":", 1)[0]
            fused = tuple(_fused_op(nodes[n], original.get(n)) for n in sorted(post, key=_node_order(nodes)) if n in nodes)
            generated = name in defs
            # generated CPU kernels are profiled as graph_<id>_<name>, Triton
            # kernels by name; extern kernels as the aten op they call
            key = f"graph_{graph_id}_{name}" if generated else "aten::" + name.rsplit(".", 1)[-1]
            us, count = times.get(key) or times.get(name) or (None, 0)
            kernels.append(
                GeneratedKernel(
                    name=name,
                    generated=generated,
                    definition=FileLine(str(output), defs[name]) if generated else None,
                    call=FileLine(str(output), calls[handle]) if handle in calls else None,
                    ops=fused,
                    time_us=us,
                    calls=count,
                )
            )
        return Graph(directory.name, str(output), tuple(kernels))
    except (OSError, ValueError, KeyError) as e:
        raise KernelmapError(f"while reading Inductor's output in {directory}: {e}") from e


def _node_order(nodes: dict[str, _Node]):
    order = {n: i for i, n in enumerate(nodes)}
    return lambda n: order.get(n, len(order))


def _fused_op(node: _Node, original: str | None) -> FusedOp:
    decomp = None
    if original and _overload_name(original) != _overload_name(node.target):
        decomp = _decomposition(original)
    return FusedOp(node.name, _overload_name(node.target), original and _overload_name(original), node.user, node.code, decomp)


def _overload_name(target: str) -> str:
    """'aten.add.Tensor' / 'aten::add.Tensor' -> 'aten::add.Tensor' (default overloads bare)."""
    t = target.replace("::", ".")
    ns, _, rest = t.partition(".")
    return f"{ns}::{rest.removesuffix('.default')}"


def _decomposition(original: str) -> Decomposition | None:
    """The torch._decomp / torch._refs / Inductor function that decomposes
    `original` (an aten overload), at its source line."""
    import torch
    from torch._decomp import decomposition_table
    from torch._inductor.decomposition import decompositions as inductor_decompositions

    ns, _, rest = original.replace("::", ".").partition(".")
    name, _, overload = rest.partition(".")
    packet = getattr(getattr(torch.ops, ns, None), name, None)
    op = getattr(packet, overload or "default", None) if packet is not None else None
    if op is None:
        return None
    fn = inductor_decompositions.get(op) or decomposition_table.get(op)
    if fn is None:
        return None
    fn = inspect.unwrap(fn)
    try:
        path = inspect.getsourcefile(fn)
        line = def_line(fn)
    except (TypeError, OSError):
        return None
    return Decomposition(_overload_name(original), f"{fn.__module__}.{fn.__qualname__}", FileLine(str(path), line))


def run_script(path: str, argv: tuple[str, ...] = (), **options: Any) -> CompileAnswer:
    from kernelmap.trace.record import script_runner

    return compile_callable(script_runner(path, argv), **options)


def run_code(code: str, **options: Any) -> CompileAnswer:
    from kernelmap.trace.record import code_runner

    return compile_callable(code_runner(code), **options)


def run_function(target: str, **options: Any) -> CompileAnswer:
    """`package.module:function`, wrapped in `torch.compile` and called with no arguments."""
    import torch

    from kernelmap.trace.record import function_runner

    with inductor_scratch() as scratch:  # before the module's import and torch.compile import torch._dynamo
        compiled = torch.compile(function_runner(target))
        return compile_callable(compiled, scratch=scratch, **options)
