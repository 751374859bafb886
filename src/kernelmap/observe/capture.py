"""Run a call under gdb and bring back its native stacks: the capture engine
of `kernelmap observe` and of the runtime golden set.

Note [why gdb]
gdb is the one existing tool that does both things a witness needs: stop at a
named function (`at::native::add_kernel`, `sgemm_`, `cudnnConvolutionForward`)
and show the whole stack there, every native frame named from the libraries'
own symbol tables (the wheel's libtorch_cpu.so keeps 519k of them); and, with
CPython's own gdb helpers (python3.X-gdb.py, shipped beside the interpreter or
by the distribution's debug package), the Python frames in the same walk, so
the user's model line sits above the binding. Sampling is gdb interrupting
the process at a fixed rate and walking every thread (the hot path of a
repeated call). py-spy's native mode samples with Python frames too but has no
breakpoints; perf samples cheaply but names no Python frame on 3.11 and has no
breakpoints without uprobes, which containers rarely allow. gdb is driven
through its Python API by kernelmap.observe.agent, run in gdb's own Python.

Bounds: the whole capture has a wall-clock limit; gdb runs in its own process
session, the debuggee dies with gdb (PR_SET_PDEATHSIG), and on every way out
(success, error, timeout, Ctrl-C) the session is killed and waited for.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelmap.errors import KernelmapError

HERE = Path(__file__).resolve().parent
AGENT = HERE / "agent.py"
RUNNER = HERE / "runner.py"


class ObserveError(KernelmapError):
    """A call that could not be observed."""


class NoDebugger(ObserveError):
    """gdb is not installed (or not on PATH)."""


class PtraceDenied(ObserveError):
    """The kernel refuses to let gdb trace the process."""


class CallFailed(ObserveError):
    """The observed script raised, exited with an error, or crashed."""


class TimedOut(ObserveError):
    """The observed call ran past its time bound."""


class NeverRan(ObserveError):
    """A breakpoint's function never ran during the call."""


PTRACE_HINT = (
    "allow it with `sysctl kernel.yama.ptrace_scope=0` (or 1, for a debugger that starts its debuggee), "
    "or give the process CAP_SYS_PTRACE (docker run --cap-add=SYS_PTRACE; no seccomp profile that blocks ptrace)"
)


@dataclass(frozen=True)
class RawFrame:
    """One frame as gdb saw it: native (name, library, offsets) or Python (function, file, line)."""

    name: str | None = None  # demangled, as the symbol table names it
    lib: str | None = None  # the library's file name
    off: int | None = None  # the pc's offset in the library (a return address, less one, above the top frame)
    fn: int | None = None  # the offset of the function's entry in the library
    py: str | None = None  # a Python frame's function
    file: str | None = None
    line: int | None = None

    @property
    def is_python(self) -> bool:
        return self.py is not None

    @staticmethod
    def parse(d: dict) -> RawFrame:
        if "py" in d:
            return RawFrame(py=d["py"], file=d.get("file"), line=d.get("line"))
        return RawFrame(name=d.get("n"), lib=d.get("lib"), off=d.get("off"), fn=d.get("fn"))


@dataclass(frozen=True)
class RawStack:
    why: str  # "break" or "sample"
    window: int  # which call of the run (0 for a script)
    thread: int
    frames: tuple[RawFrame, ...]  # innermost first
    brk: str | None = None  # the breakpoint's spec, for a break


@dataclass(frozen=True)
class Capture:
    """What one run under gdb saw."""

    stacks: tuple[RawStack, ...]
    info: dict[str, Any] = field(default_factory=dict)  # the runner's: torch, git_version, capability, windows, status, error
    unplaced: tuple[str, ...] = ()  # breakpoints gdb could not place (no such function in the binary)
    notes: tuple[str, ...] = ()
    seconds: float = 0.0

    @property
    def capability(self) -> str | None:
        return self.info.get("capability")


def find_gdb() -> str:
    gdb = shutil.which(os.environ.get("KERNELMAP_GDB") or "gdb")
    if not gdb:
        raise NoDebugger("observe needs gdb, which is not installed: install it (apt-get install gdb) and try again")
    return gdb


def python_helpers(executable: str | None = None) -> str | None:
    """CPython's gdb helpers for `executable`: beside it (python3.11-gdb.py, as
    CPython's `make install` and pyenv put it) or in gdb's auto-load tree (as
    Debian's python3.X-dbg puts it)."""
    exe = os.path.realpath(executable or sys.executable)
    candidates = [exe + "-gdb.py", "/usr/share/gdb/auto-load" + exe + "-gdb.py"]
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    candidates += [f"/usr/share/gdb/auto-load/usr/bin/python{version}-gdb.py", f"/usr/lib/debug/usr/bin/python{version}-gdb.py"]
    for c in candidates:
        if os.path.isfile(c):
            return c
    return None


def capture(
    spec: dict[str, Any],
    *,
    breaks: tuple[str, ...] = (),
    offsets: dict[str, list[int]] | None = None,
    hot: tuple[str, ...] = (),
    one_shot: bool = False,
    max_hits: int | None = None,
    windows: bool = True,
    sample_hz: float = 0.0,
    python: bool = True,
    timeout: float = 120.0,
    need: tuple[str, ...] = (),
    stop_at: tuple[str, ...] = (),
    cut_at_python: bool = False,
    cwd: str | None = None,
    env: dict[str, str] | None = None,
) -> Capture:
    """Run the runner with `spec` under gdb and return what it saw. Raises
    NoDebugger, PtraceDenied, TimedOut or CallFailed with one line each."""
    gdb = find_gdb()
    started = time.monotonic()
    with ended_by_signals(), tempfile.TemporaryDirectory(prefix="kernelmap-observe-") as tmp:
        out, info_path = Path(tmp, "stacks.jsonl"), Path(tmp, "info.json")
        spec = dict(spec, info=str(info_path))
        Path(tmp, "spec.json").write_text(json.dumps(spec))
        helpers = python_helpers() if python else None
        config = {
            "out": str(out),
            "breaks": list(breaks),
            "offsets": offsets or {},
            "hot": list(hot),
            "one_shot": one_shot,
            "max_hits": max_hits,
            "windows": windows,
            "sample_hz": sample_hz,
            "helpers": helpers,
            "deadline_s": timeout,
            "need": list(need),
            "stop_at": list(stop_at),
            "cut_at_python": cut_at_python,
        }
        Path(tmp, "agent.json").write_text(json.dumps(config))
        full_env = dict(os.environ)
        full_env.update(env or {})
        full_env["KERNELMAP_OBSERVE_AGENT"] = str(Path(tmp, "agent.json"))
        # the runner imports kernelmap (examples, golden calls) from the same place this process does
        package_root = str(HERE.parents[1])
        full_env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, full_env.get("PYTHONPATH", "")) if p)
        command = [gdb, "-nx", "-batch", "-q", "-iex", "set auto-load python-scripts off", "-x", str(AGENT), "--args", sys.executable, str(RUNNER), str(Path(tmp, "spec.json"))]
        log = Path(tmp, "gdb.log")
        with open(log, "wb") as log_file:
            proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT, cwd=cwd, env=full_env, start_new_session=True)
            try:
                # gdb's own deadline stops the debuggee; this one is the last word, with time to load symbols and quit
                proc.wait(timeout=timeout + 60)
            except subprocess.TimeoutExpired:
                pass
            finally:
                end_session(proc, info_path)
        records = read_records(out)
        info = read_info(info_path)
        text = log.read_text(errors="replace")
        if os.environ.get("KERNELMAP_OBSERVE_DEBUG"):
            sys.stderr.write(text[-4000:] + "\n" + json.dumps(records[-5:])[:3000] + "\n")
        seconds = time.monotonic() - started
    return judge(records, info, text, spec, seconds, timeout)


@contextlib.contextmanager
def ended_by_signals():
    """SIGTERM and SIGHUP (a `timeout`, a closed terminal) end a capture
    through its clean-up, as Ctrl-C does: gdb's session killed, the debuggee
    waited for, the scratch folder removed; then the process exits 128+N.
    Python's default for them ends the process at once and leaves gdb and
    the debuggee running in their own session."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame):
        raise SystemExit(128 + signum)

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def end_session(proc: subprocess.Popen, info_path: Path) -> None:
    """Kill gdb's whole session and the debuggee, and wait for them: nothing stays."""
    pid = None
    try:
        pid = json.loads(info_path.read_text()).get("pid")
    except (OSError, ValueError):
        pass
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()
    if pid:
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and _alive(int(pid)):
            time.sleep(0.02)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def read_records(path: Path) -> list[dict]:
    records = []
    if not path.exists():
        return records
    with open(path) as f:
        for line in f:
            try:
                records.append(json.loads(line))
            except ValueError:
                continue  # a line cut by the kill
    return records


def read_info(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def judge(records: list[dict], info: dict, log: str, spec: dict, seconds: float, timeout: float) -> Capture:
    """The capture, or the one-line error that says why there is none."""
    if "ptrace: Operation not permitted" in log or "Could not trace the inferior process" in log or "PTRACE_TRACEME" in log:
        raise PtraceDenied(f"the kernel does not permit ptrace here, so gdb cannot run the call; {PTRACE_HINT}")
    kinds = {r.get("t") for r in records}
    what = _what(spec)
    if "timeout" in kinds or (not kinds and seconds >= timeout):
        raise TimedOut(f"{what} ran past the time bound of {timeout:g} s; it was stopped (raise --timeout to give it longer)")
    signals = [r for r in records if r.get("t") == "signal"]
    if signals:
        frames = [RawFrame.parse(f) for f in signals[0].get("frames") or ()]
        top = next((f.name for f in frames if f.name), "?")
        raise CallFailed(f"{what} crashed with {signals[0]['name']} in {top}")
    errors = [r for r in records if r.get("t") == "error"]
    status = info.get("status")
    if status == "no example":
        raise ObserveError((info.get("error") or {}).get("message") or f"kernelmap cannot make inputs for {what}")
    if status == "raised":
        e = info.get("error") or {}
        where = f" at {e['where']}" if e.get("where") else ""
        raise CallFailed(f"{what} raised {e.get('type', 'an exception')}{where}: {e.get('message', '')}".rstrip(": "))
    if status and status.startswith("exit ") and status != "exit 0":
        raise CallFailed(f"{what} exited with status {info.get('exit_code')}")
    if not info or status == "running":
        if errors:
            raise ObserveError(f"gdb could not run {what}: {errors[0]['message']}")
        last = next((line for line in reversed(log.splitlines()) if line.strip()), "no output")
        raise CallFailed(f"{what} did not finish under gdb: {last[:200]}")
    stacks = []
    unplaced: list[str] = []
    for r in records:
        if r.get("t") == "stack":
            stacks.append(RawStack(r["why"], int(r.get("window", 0)), int(r.get("thread", 0)), tuple(RawFrame.parse(f) for f in r["frames"]), r.get("break")))
        elif r.get("t") == "unplaced":
            unplaced.extend(r.get("names") or ())
    notes = tuple(r["message"] for r in records if r.get("t") == "note")
    return Capture(tuple(stacks), info, tuple(unplaced), notes, seconds)


def _what(spec: dict) -> str:
    mode, target = spec.get("mode"), spec.get("target")
    if mode == "script":
        return f"the script {target}"
    if mode == "code":
        return "the code"
    if mode == "function":
        return f"{target}()"
    if mode == "call":
        return f"the call of {target}"
    return "the run"
