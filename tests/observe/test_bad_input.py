"""Bad input to `kernelmap observe`: one clear line and exit status 2 (1 for
a symbol that never runs), never a traceback, and nothing left running."""

from __future__ import annotations

import ctypes
import os
import struct
import sys
import textwrap

import pytest

from tests.conftest import run_kernelmap
from tests.observe.conftest import TREE_NAME, needs_gdb

# A seccomp filter that makes ptrace fail with EPERM, as a container's default
# profile does; the child then execs kernelmap, so gdb inherits it.
NO_PTRACE = textwrap.dedent(
    """
    import ctypes, os, struct, sys
    libc = ctypes.CDLL(None, use_errno=True)
    code = b"".join([struct.pack("HBBI", 0x20, 0, 0, 0), struct.pack("HBBI", 0x15, 0, 1, 101),
                     struct.pack("HBBI", 0x06, 0, 0, 0x00050001), struct.pack("HBBI", 0x06, 0, 0, 0x7FFF0000)])
    buf = ctypes.create_string_buffer(code)
    class Prog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
    prog = Prog(4, ctypes.addressof(buf))
    assert libc.prctl(38, 1, 0, 0, 0) == 0 and libc.prctl(22, 2, ctypes.byref(prog), 0, 0) == 0
    os.execv(sys.executable, [sys.executable, "-m", "kernelmap"] + sys.argv[1:])
    """
)


def _ours() -> set[int]:
    """Processes of kernelmap's capture: its gdb agent or its runner."""
    found = set()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().decode(errors="replace")
            state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and ("kernelmap/observe/agent.py" in cmd or "kernelmap/observe/runner.py" in cmd):
            found.add(int(pid))
    return found


@pytest.fixture
def nothing_left():
    before = _ours()
    yield
    assert _ours() - before == set(), "a capture left gdb or its process running"


def _one_line_error(result, status=2):
    assert result.returncode == status, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kernelmap"), result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


def test_no_debugger():
    line = _one_line_error(run_kernelmap("observe", "-c", "pass", env={"KERNELMAP_GDB": "/nonexistent/gdb"}))
    assert "gdb" in line and "install" in line


def test_no_target_and_no_script():
    assert "TARGET" in _one_line_error(run_kernelmap("observe"))
    assert "no such script" in _one_line_error(run_kernelmap("observe", "missing/model.py"))
    assert "empty" in _one_line_error(run_kernelmap("observe", "-c", "  "))
    assert "--timeout" in _one_line_error(run_kernelmap("observe", "-c", "pass", "--timeout", "0"))


@needs_gdb
def test_ptrace_not_permitted(nothing_left):
    import subprocess

    result = subprocess.run([sys.executable, "-c", NO_PTRACE, "observe", "-c", "pass"], capture_output=True, text=True)
    line = _one_line_error(result)
    assert "ptrace" in line and "kernel.yama.ptrace_scope" in line and "CAP_SYS_PTRACE" in line


@needs_gdb
@pytest.mark.slow
def test_a_script_that_raises(tmp_path, nothing_left):
    script = tmp_path / "model.py"
    script.write_text("import torch\n\ndef f():\n    raise ValueError('bad shape')\n\nf()\n")
    line = _one_line_error(run_kernelmap("observe", str(script), "--timeout", "300"))
    assert "raised ValueError" in line and f"{script}:4" in line and "bad shape" in line


@needs_gdb
@pytest.mark.slow
def test_a_script_that_exits_or_hangs(tmp_path, nothing_left):
    script = tmp_path / "model.py"
    script.write_text("import sys, time\nif sys.argv[1] == 'exit':\n    sys.exit(3)\ntime.sleep(600)\n")
    assert "exited with status 3" in _one_line_error(run_kernelmap("observe", str(script), "exit", "--timeout", "300"))
    line = _one_line_error(run_kernelmap("observe", str(script), "hang", "--timeout", "20"))
    assert "time bound of 20 s" in line


@needs_gdb
@pytest.mark.slow
def test_a_break_symbol_that_never_runs_or_does_not_exist(nothing_left, indexed_tree):
    code = "import torch; torch.mm(torch.ones(8, 8), torch.ones(8, 8))"
    line = _one_line_error(run_kernelmap("observe", "-c", code, "--break", "add_kernel", "--source", TREE_NAME, "--timeout", "300"), status=1)
    assert "add_kernel never ran" in line
    line = _one_line_error(run_kernelmap("observe", "-c", code, "--break", "no_such_function_anywhere", "--source", TREE_NAME, "--timeout", "300"))
    assert "no function named no_such_function_anywhere" in line


@needs_gdb
@pytest.mark.slow
def test_a_terminated_observe_leaves_nothing_running_or_written(tmp_path, nothing_left):
    """SIGTERM (a `timeout`, a job scheduler) to `kernelmap observe` mid-run ends gdb's session and the
    debuggee and removes the scratch folder; Python's default would leave gdb running in its own session."""
    import signal
    import subprocess
    import time

    script = tmp_path / "model.py"
    script.write_text("import time\ntime.sleep(600)\n")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    before = _ours()
    proc = subprocess.Popen([sys.executable, "-m", "kernelmap", "observe", str(script), "--timeout", "300"],
                            env=dict(os.environ, TMPDIR=str(scratch)), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (_ours() - before):
        time.sleep(0.2)
    assert _ours() - before, "the capture never started"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 128 + signal.SIGTERM
    assert "Traceback" not in proc.stderr.read().decode()
    assert not list(scratch.glob("kernelmap-observe-*"))
