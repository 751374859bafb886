"""Download the source archive of one PyTorch commit (by default the
installed torch's) and keep the parts kernelmap reads, as a registered tree.

The archive is streamed: it is decompressed and unpacked as it arrives, only
the kept parts are written, into a directory beside the final one that is
renamed into place once complete. A timeout, an interrupted download, a full
disk or an archive of another commit leave nothing behind.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import socket
import tarfile
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from kernelmap import env
from kernelmap.errors import BadInput, KernelmapError, SourceError
from kernelmap.source.trees import Tree, read_version, register

ARCHIVE_URL_ENV = "KERNELMAP_ARCHIVE_URL"
DEFAULT_ARCHIVE_URL = "https://github.com/pytorch/pytorch/archive"
KEPT_DIRS = ("aten/", "c10/", "torch/csrc/", "tools/autograd/", "torchgen/")
_CHUNK = 1 << 20
_SHA = re.compile(r"[0-9a-f]{7,40}")

Progress = Callable[[int, int | None], None]  # (bytes read, total bytes if known)


class FetchError(SourceError):
    """The archive could not be downloaded, verified or unpacked."""


def is_kept(path: str) -> bool:
    """True for the archive paths (top directory removed) a fetched tree keeps:
    aten/, c10/, torch/csrc/, tools/autograd/, torchgen/, torch/*.py, version.txt."""
    if path == "version.txt" or path.startswith(KEPT_DIRS):
        return True
    return path.startswith("torch/") and path.endswith(".py") and path.count("/") == 1


def archive_url(commit: str) -> str:
    base = os.environ.get(ARCHIVE_URL_ENV) or DEFAULT_ARCHIVE_URL
    return f"{base.rstrip('/')}/{commit}.tar.gz"


def trees_dir() -> Path:
    return env.cache_dir() / "trees"


class _Counting:
    """A readable that counts the bytes read through it."""

    def __init__(self, raw, total: int | None, progress: Progress | None):
        self.raw, self.total, self.progress, self.done = raw, total, progress, 0

    def read(self, n: int = -1) -> bytes:
        data = self.raw.read(n)
        self.done += len(data)
        if self.progress:
            self.progress(self.done, self.total)
        return data


def fetch_tree(commit: str | None = None, *, progress: Progress | None = None, timeout: float = 60.0) -> Tree:
    """Download and register the tree of `commit` (default: the installed torch's).

    A tree already fetched is registered again without downloading.
    """
    if commit is None:
        commit = env.torch_install().commit
        if not commit:
            raise SourceError("the installed torch does not record its git commit; pass --commit SHA")
    commit = commit.strip().lower()
    if not _SHA.fullmatch(commit):
        raise BadInput(f"a commit is 7 to 40 hex digits, not {commit!r}")
    dest = trees_dir() / f"pytorch-{commit[:12]}"
    if (dest / ".complete").is_file():
        full = (dest / ".complete").read_text().strip() or commit
        return register(Tree(dest.name, dest, read_version(dest), full, "fetched"))
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}-"))
    url = archive_url(commit)
    try:
        full = _download(url, commit, tmp, progress, timeout)
        try:
            version = read_version(tmp)
        except KernelmapError:
            raise FetchError(f"the archive at {url} has no version.txt: it is no PyTorch source archive") from None
        (tmp / ".complete").write_text(full + "\n")
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(tmp, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return register(Tree(dest.name, dest, version, full, "fetched"))


def _download(url: str, commit: str, into: Path, progress: Progress | None, timeout: float) -> str:
    """Stream `url` into `into`; returns the archive's full commit id."""
    try:
        resp = urllib.request.urlopen(urllib.request.Request(url, headers={"User-Agent": "kernelmap"}), timeout=timeout)
    except urllib.error.HTTPError as e:
        raise FetchError(f"cannot download {url}: HTTP {e.code} {e.reason}") from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise FetchError(f"cannot download {url}: {reason}") from None
    with resp:
        length = resp.headers.get("Content-Length")
        total = int(length) if length and length.isdigit() else None
        stream = _Counting(resp, total, progress)
        try:
            with tarfile.open(fileobj=stream, mode="r|gz") as tf:
                full = _extract(tf, commit, into, url)
            if total is not None and stream.done < total:
                raise FetchError(f"the download of {url} ended after {stream.done} of {total} bytes")
            return full
        except FetchError:
            raise
        except (socket.timeout, TimeoutError):
            raise FetchError(f"the download of {url} timed out after {timeout:.0f}s without data") from None
        except OSError as e:
            if e.errno == errno.ENOSPC:
                raise FetchError(f"the disk is full: cannot unpack {url} into {into.parent}") from None
            raise FetchError(f"the download of {url} failed: {e}") from None
        except (tarfile.TarError, EOFError, ValueError) as e:
            raise FetchError(f"the archive at {url} is incomplete or not a .tar.gz ({e})") from None


def _extract(tf: tarfile.TarFile, commit: str, into: Path, url: str) -> str:
    first = tf.next()  # reading the first member reads the pax global header
    full = (tf.pax_headers or {}).get("comment", "").strip()
    if not full:
        raise FetchError(f"the archive at {url} names no commit (no pax comment): it is not a GitHub source archive")
    if not full.startswith(commit):
        raise FetchError(f"the archive at {url} is of commit {full}, not {commit}")
    member = first
    while member is not None:
        _extract_member(tf, member, into)
        member = tf.next()
    return full


def _extract_member(tf: tarfile.TarFile, member: tarfile.TarInfo, into: Path) -> None:
    parts = member.name.split("/", 1)
    if len(parts) < 2 or not parts[1]:
        return
    rel = parts[1]
    if not member.isfile() or not is_kept(rel):
        return  # directories come with their files; links and devices are never written
    if rel.startswith("/") or ".." in rel.split("/"):
        raise FetchError(f"the archive holds an unsafe path: {member.name}")
    target = into / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    src = tf.extractfile(member)
    if src is None:
        return
    with src, open(target, "wb") as out:
        shutil.copyfileobj(src, out, _CHUNK)
