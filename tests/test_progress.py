"""Progress for slow first steps: on a terminal's standard error a spinner
names the step (the catalog's first build, importing torch); piped, nothing."""

from __future__ import annotations

import os
import pty
import subprocess
import sys

from tests.conftest import ROOT


def test_a_first_build_shows_its_step_on_a_terminal_only(tmp_path):
    env = {**os.environ, "KERNELMAP_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT / "src"), "TERM": "xterm", "COLUMNS": "100"}
    env.pop("KERNELMAP_SOURCE", None)
    master, slave = pty.openpty()
    done = subprocess.run([sys.executable, "-m", "kernelmap", "where", "torch.add", "--static"],
                          stdout=subprocess.PIPE, stderr=slave, env=env, timeout=600)
    os.close(slave)
    shown = b""
    try:
        while chunk := os.read(master, 65536):
            shown += chunk
    except OSError:  # the pty's other end is closed: all is read
        pass
    os.close(master)
    assert done.returncode == 0
    assert b"reading native_functions.yaml with torchgen" in shown
    piped = subprocess.run([sys.executable, "-m", "kernelmap", "where", "torch.add"], capture_output=True, env=env, timeout=600)  # imports torch
    assert piped.returncode == 0 and piped.stderr == b""
