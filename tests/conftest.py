"""Fixtures every test area shares: a private cache directory for the whole
session (built once, so the catalog is parsed once), the real 2.6.0 source
tree, and a way to run the `kernelmap` command as a user would."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session", autouse=True)
def session_cache(tmp_path_factory) -> Path:
    """All tests share one cache directory, away from the user's. A developer
    may set KERNELMAP_TEST_CACHE_DIR to keep it between runs (the index and the
    generated files are then built once, not per run); CI never sets it."""
    kept = os.environ.get("KERNELMAP_TEST_CACHE_DIR")
    path = Path(kept) if kept else tmp_path_factory.mktemp("kernelmap-cache")
    path.mkdir(parents=True, exist_ok=True)
    previous = os.environ.get("KERNELMAP_CACHE_DIR")
    os.environ["KERNELMAP_CACHE_DIR"] = str(path)
    yield path
    if previous is None:
        os.environ.pop("KERNELMAP_CACHE_DIR", None)
    else:
        os.environ["KERNELMAP_CACHE_DIR"] = previous


@pytest.fixture(scope="session")
def tree_2_6() -> Path:
    """The real PyTorch 2.6.0 source tree (Debian's pytorch 2.6.0+dfsg-7)."""
    out = subprocess.run([str(ROOT / "scripts/fetch-test-tree")], capture_output=True, text=True, check=True)
    return Path(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def tree_1_13() -> Path:
    """The real PyTorch 1.13.1 source tree (Debian's pytorch 1.13.1+dfsg-4)."""
    out = subprocess.run(
        [str(ROOT / "scripts/fetch-test-tree"), "1.13"], capture_output=True, text=True, check=True
    )
    return Path(out.stdout.strip().splitlines()[-1])


@pytest.fixture
def wheel_only_cache(session_cache, tmp_path, monkeypatch):
    """A cache with no tree registered, so that the installed wheel answers (a
    registered tree would answer `where` by default), sharing the session's
    catalogs and generated files."""
    cache = tmp_path / "no-tree-cache"
    cache.mkdir()
    for sub in ("catalog", "codegen"):
        (session_cache / sub).mkdir(exist_ok=True)
        (cache / sub).symlink_to(session_cache / sub, target_is_directory=True)
    monkeypatch.setenv("KERNELMAP_CACHE_DIR", str(cache))
    monkeypatch.delenv("KERNELMAP_SOURCE", raising=False)
    return cache


def run_kernelmap(*args: str, env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run `python -m kernelmap ARGS` in a fresh process, as a user would."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "kernelmap", *args], capture_output=True, text=True, env=full_env, cwd=cwd
    )


def default_sigint() -> None:
    """`preexec_fn` for a child that a test interrupts with SIGINT: a shell's
    background job starts with SIGINT ignored, and a child inherits that, so
    the test would not reach it when the suite itself runs in the background."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture
def kernelmap_cli():
    return run_kernelmap


def pastes_into(lines: list[str], line: int, name: str) -> bool:
    """Whether `line` (1-based, of a file's `lines`) is among the arguments of
    a use of a macro the file defines, and holds a word pasted into `name`
    (`sin` of `sin_kernel`, for `STATIC_IMPLEMENT_COMPLEX_KERNEL_WITHOUT_AVX512(sin)`):
    where kernelmap puts a name made by `##`, which no line holds."""
    if not any(len(word) > 1 and word in name for word in re.findall(r"[A-Za-z_]\w*", lines[line - 1])):
        return False
    for start in range(line, max(0, line - 30), -1):
        use = re.match(r"\s*([A-Za-z_]\w*)\s*\(", lines[start - 1])
        if use and any(re.match(rf"\s*#\s*define\s+{use.group(1)}\(", text) for text in lines):
            return True
    return False
