"""Download the source archive of one PyTorch commit (by default the
installed torch's) and keep the parts kernelmap reads, as a registered tree.

The archive is streamed: it is decompressed and unpacked as it arrives, only
the kept parts are written, into a directory beside the final one that is
renamed into place once complete. A timeout, an interrupted download, a full
disk or an archive of another commit leave nothing behind.
"""

from __future__ import annotations

import errno
import math
import os
import re
import shutil
import socket
import tarfile
import tempfile
import urllib.error
import urllib.parse
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
# Limits on what one archive may make us write or read. PyTorch's archive of
# 2.6.0 has ~20,000 members and ~1 GB unpacked, of which ~150 MB are kept;
# the limits leave room for growth and stop archives built to fill a disk.
MAX_MEMBERS = 400_000
MAX_MEMBER_BYTES = 256 << 20  # one kept file
MAX_KEPT_BYTES = 4 << 30  # all kept files
MAX_ARCHIVE_BYTES = 16 << 30  # every member, kept or not, as unpacked
MAX_TIMEOUT_S = 86_400.0
# A member's metadata (a pax header, a GNU long name) is read whole into
# memory before the member: GitHub's archives hold one pax header of a
# commit id (52 bytes); a 600 MB one in a 0.6 MB archive would take 1.8 GB.
MAX_HEADER_BYTES = 1 << 20
_HEADER_TYPES = (tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE, tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK)
_SHA = re.compile(r"[0-9a-f]{7,40}")
_FULL_SHA = re.compile(r"[0-9a-f]{40}")

Progress = Callable[[int, int | None], None]  # (bytes read, total bytes if known)


class FetchError(SourceError):
    """The archive could not be downloaded, verified or unpacked."""


class _BoundedInfo(tarfile.TarInfo):
    """A member whose metadata (pax header, GNU long name) is refused above
    MAX_HEADER_BYTES before it is read, not after."""

    def _proc_member(self, tarfile_):
        if self.type in _HEADER_TYPES and self.size > MAX_HEADER_BYTES:
            raise FetchError(f"the archive holds a header of {self.size} bytes (more than {MAX_HEADER_BYTES >> 20} MB of metadata for one member): "
                             "it is no PyTorch source archive")
        return super()._proc_member(tarfile_)


def is_kept(path: str) -> bool:
    """True for the archive paths (top directory removed) a fetched tree keeps:
    aten/, c10/, torch/csrc/, tools/autograd/, torchgen/, torch/*.py, version.txt."""
    if path == "version.txt" or path.startswith(KEPT_DIRS):
        return True
    return path.startswith("torch/") and path.endswith(".py") and path.count("/") == 1


def archive_url(commit: str) -> str:
    base = os.environ.get(ARCHIVE_URL_ENV) or DEFAULT_ARCHIVE_URL
    scheme = urllib.parse.urlsplit(base).scheme
    if scheme not in ("https", "http", "file"):
        raise BadInput(f"${ARCHIVE_URL_ENV} is an https://, http:// or file:// URL, not {base[:200]!r}")
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
    if not (isinstance(timeout, (int, float)) and math.isfinite(timeout) and 0 < timeout <= MAX_TIMEOUT_S):
        raise BadInput(f"--timeout is a number of seconds above 0 and at most {MAX_TIMEOUT_S:.0f}, not {timeout}")
    commit = commit.strip().lower()
    if not _SHA.fullmatch(commit):
        raise BadInput(f"a commit is 7 to 40 hex digits, not {commit[:80]!r}")
    dest = trees_dir() / f"pytorch-{commit[:12]}"
    done = _completed(dest)
    if done is not None:
        if done.startswith(commit):
            return register(Tree(dest.name, dest, read_version(dest), done, "fetched"))
        if len(commit) == 40:  # another commit with the same 12-digit prefix: never mix them up
            raise FetchError(f"{dest} holds commit {done}, not {commit}; remove it with `kernelmap source remove {dest.name}` first")
    url = archive_url(commit)
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}-"))
    except OSError as e:
        raise FetchError(f"cannot write into {dest.parent}: {e.strerror or e}") from None
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


def _completed(dest: Path) -> str | None:
    """The full commit a finished fetch recorded in `dest/.complete`, or None
    (no fetch finished there, or its record is not a full commit: fetched again)."""
    try:
        full = (dest / ".complete").read_text(errors="replace").strip()
    except OSError:
        return None
    return full if _FULL_SHA.fullmatch(full) else None


def _download(url: str, commit: str, into: Path, progress: Progress | None, timeout: float) -> str:
    """Stream `url` into `into`; returns the archive's full commit id."""
    try:
        resp = urllib.request.urlopen(urllib.request.Request(url, headers={"User-Agent": "kernelmap"}), timeout=timeout)
    except urllib.error.HTTPError as e:
        raise FetchError(f"cannot download {url}: HTTP {e.code} {e.reason}") from None
    except (urllib.error.URLError, OSError, ValueError) as e:
        reason = getattr(e, "reason", e)
        raise FetchError(f"cannot download {url}: {reason}") from None
    with resp:
        length = resp.headers.get("Content-Length")
        total = int(length) if length and length.isdigit() else None
        stream = _Counting(resp, total, progress)
        try:
            with tarfile.open(fileobj=stream, mode="r|gz", tarinfo=_BoundedInfo) as tf:
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
    if not _FULL_SHA.fullmatch(full) or not full.startswith(commit):
        raise FetchError(f"the archive at {url} is of commit {full[:80]}, not {commit}")
    member, count, unpacked, kept = first, 0, 0, 0
    while member is not None:
        count += 1
        unpacked += max(member.size, 0)
        if count > MAX_MEMBERS:
            raise FetchError(f"the archive at {url} has more than {MAX_MEMBERS} members: it is no PyTorch source archive")
        if unpacked > MAX_ARCHIVE_BYTES:
            raise FetchError(f"the archive at {url} unpacks to more than {MAX_ARCHIVE_BYTES >> 30} GB: it is no PyTorch source archive")
        kept += _extract_member(tf, member, into, url)
        if kept > MAX_KEPT_BYTES:
            raise FetchError(f"the kept parts of {url} are larger than {MAX_KEPT_BYTES >> 30} GB: it is no PyTorch source archive")
        member = tf.next()
    return full


def _extract_member(tf: tarfile.TarFile, member: tarfile.TarInfo, into: Path, url: str = "") -> int:
    """Write one kept member; returns the bytes written."""
    parts = member.name.split("/", 1)
    if len(parts) < 2 or not parts[1]:
        return 0
    rel = parts[1]
    if not member.isfile() or not is_kept(rel):
        return 0  # directories come with their files; links and devices are never written
    if rel.startswith("/") or ".." in rel.split("/"):
        raise FetchError(f"the archive holds an unsafe path: {member.name}")
    if member.size > MAX_MEMBER_BYTES:
        raise FetchError(f"the archive {url} holds {member.name[:200]} of {member.size} bytes (more than {MAX_MEMBER_BYTES >> 20} MB)")
    target = into / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    src = tf.extractfile(member)
    if src is None:
        return 0
    with src, open(target, "wb") as out:
        shutil.copyfileobj(src, out, _CHUNK)
    return member.size
