"""The witnessed graph: run a call on the installed torch under gdb, capture
its real native stacks (kernelmap.observe.capture, Note [why gdb]), and join
them to the source map (kernelmap.observe.join): `kernelmap observe`, and
`stack`/`path`/`where --observe`, which mark each static step observed,
inlined or not taken (kernelmap.observe.mark).

    tree = observe("torch.add")                          # example inputs from OpInfo
    tree = observe(code="import torch; torch.mm(torch.ones(4, 4), torch.ones(4, 4))", breaks=("sgemm_",))
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from kernelmap.errors import BadInput
from kernelmap.model import CallTree
from kernelmap.observe.capture import (
    CallFailed,
    Capture,
    NeverRan,
    NoDebugger,
    ObserveError,
    PtraceDenied,
    TimedOut,
    capture,
    python_helpers,
)

__all__ = ["observe", "run_capture", "CallFailed", "NeverRan", "NoDebugger", "ObserveError", "PtraceDenied", "TimedOut"]

DEFAULT_TIMEOUT = 120.0
MAX_TIMEOUT = 3600.0
BREAK_HITS = 4  # stacks kept per --break location


def spec_for(target: str | None, code: str | None, argv: tuple[str, ...] = (), dtype: str = "float32") -> dict:
    """What the runner runs: a script, code, `module:function`, or a name with example inputs."""
    if code is not None:
        if target:
            raise BadInput("give a TARGET or -c CODE, not both")
        if not code.strip():
            raise BadInput("-c CODE is empty")
        return {"mode": "code", "target": code, "argv": list(argv)}
    if not target or not target.strip():
        raise BadInput("observe needs a TARGET (a script, module:function, an operator or Python name) or -c CODE")
    if target.endswith(".py") or os.path.sep in target:
        path = Path(target)
        if not path.is_file():
            raise BadInput(f"no such script: {target}")
        return {"mode": "script", "target": str(path.resolve()), "argv": list(argv)}
    if ":" in target and "::" not in target:
        module, _, fn = target.partition(":")
        if not module or not fn:
            raise BadInput(f"{target!r} is not module:function")
        return {"mode": "function", "target": target}
    return {"mode": "call", "target": target, "dtype": dtype}


def work_offsets_cached(library: Path) -> list[int]:
    """The work functions' offsets in `library` (Note [the functions that do the work]),
    read once per library file and kept in the cache directory."""
    from kernelmap import env
    from kernelmap.observe.symbols import read_symbols, work_offsets

    st = library.stat()
    cache = env.cache_dir() / "observe" / f"{library.name}-{st.st_size}-{int(st.st_mtime)}.json"
    try:
        return json.loads(cache.read_text())
    except (OSError, ValueError):
        pass
    offsets = work_offsets(read_symbols(library))
    cache.parent.mkdir(parents=True, exist_ok=True)
    tmp = cache.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(offsets))
    os.replace(tmp, cache)
    return offsets


def run_capture(spec: dict, *, breaks: tuple[str, ...] = (), timeout: float = DEFAULT_TIMEOUT, sample_hz: float = 0.0, python: bool = True) -> Capture:
    """Capture `spec`'s run: with `breaks`, the stacks at those functions; else every
    work function's first run (one-shot traps) and, with `sample_hz`, samples."""
    from kernelmap import env

    if not 0 < timeout <= MAX_TIMEOUT:
        raise BadInput(f"--timeout is seconds above 0 and at most {MAX_TIMEOUT:g}; got {timeout:g}")
    offsets = None
    if not breaks:
        library = env.torch_install().torch_dir / "lib" / "libtorch_cpu.so"
        offsets = {library.name: work_offsets_cached(library)} if library.exists() else None
    cap = capture(
        spec,
        breaks=breaks,
        offsets=offsets,
        hot=() if breaks else ("memcpy", "memset"),
        one_shot=not breaks,
        max_hits=BREAK_HITS if breaks else None,
        windows=True,
        sample_hz=sample_hz,
        python=python,
        timeout=timeout,
        need=() if breaks else ("at::_ops::",),
    )
    if breaks:
        unplaced = [b for b in breaks if b in cap.unplaced]
        if unplaced:
            raise BadInput(f"no function named {unplaced[0]} in the libraries the run loaded (torch {cap.info.get('torch', '?')}); "
                           "name it as its symbol does (sgemm_, at::native::add_kernel, add_kernel)")
        hit = {s.brk for s in cap.stacks}
        never = [b for b in breaks if b not in hit]
        if never:
            raise NeverRan(f"{never[0]} never ran during {_what(spec)}")
    return cap


def _what(spec: dict) -> str:
    from kernelmap.observe.capture import _what as what

    return what(spec)


def source_map(source: str | None = None, notes: list[str] | None = None):
    """The source map frames are joined to: the selected tree's index and
    generated files, or nothing (a note says so)."""
    from kernelmap.observe.join import SourceMap

    try:
        from kernelmap import graph

        context = graph.open_context("cpu", source=source)
    except Exception as e:  # no tree, no index: frames keep their names, a note says why
        if source is not None:
            raise
        if notes is not None:
            notes.append(f"frames are not joined to a source tree: {str(e).splitlines()[0]}")
        return SourceMap(), None
    if notes is not None:
        notes.extend(context.notes)
    return SourceMap(context.index, context.generated), context


def version_note(torch_version: str | None, context) -> list[str]:
    """The note an answer carries when its frames ran in another torch than the tree's."""
    if context is None or context.index is None or not context.catalog.origin.version:
        return []
    if str(torch_version or "").startswith(context.catalog.origin.version.split("a")[0]):
        return []
    return [f"version mismatch: the frames ran in torch {torch_version}; their locations are {context.catalog.origin.label}'s, "
            "and a frame whose function that tree lacks says so"]


def observe(
    target: str | None = None,
    *,
    code: str | None = None,
    argv: tuple[str, ...] = (),
    breaks: tuple[str, ...] = (),
    source: str | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    dtype: str = "float32",
    sample_hz: float = 0.0,
    all_frames: bool = False,
) -> CallTree:
    """What ran when `target` (or `code`) ran on the installed torch: its
    native stacks joined to the source map, as one CallTree."""
    from kernelmap import env
    from kernelmap.observe.join import observed_tree

    spec = spec_for(target, code, argv, dtype)
    cap = run_capture(spec, breaks=breaks, timeout=timeout, sample_hz=sample_hz)
    notes: list[str] = []
    sources, context = source_map(source, notes)
    install = env.torch_install()
    what = cap.info.get("windows", [{}])[0] if cap.info.get("windows") else {}
    notes.append(
        f"observed on torch {cap.info.get('torch')} ({(cap.info.get('git_version') or '')[:12]}), CPU capability {cap.capability}, "
        f"{cap.info.get('threads')} threads" + (f"; inputs: {what.get('opinfo') or what.get('module')} {what.get('input', '')} {what.get('dtype', '')}".rstrip() if what.get("opinfo") or what.get("module") else "")
    )
    notes.extend(version_note(cap.info.get("torch"), context))
    if python_helpers() is None:
        notes.append("no Python frames: this interpreter has no CPython gdb helpers (python3.X-gdb.py; Debian: python3-dbg)")
    notes.extend(cap.notes)
    label = target if target else "-c code"
    meta = {"torch": cap.info.get("torch"), "git_version": cap.info.get("git_version"), "capability": cap.capability,
            "breaks": list(breaks), "stacks": len(cap.stacks), "seconds": round(cap.seconds, 2)}
    return observed_tree(cap, sources, label, wheel=install.origin, notes=tuple(notes), all_frames=all_frames, meta=meta)
