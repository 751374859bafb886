"""Fill the cache with the generated files of one torch version (or one source
tree): run its torchgen in subprocesses, index what it wrote, and rename the
result into place; later calls open it.

Cache layout, under `kernelmap.env.cache_dir()`:

    codegen/<slug>/manifest.json          who filled it: version, commit, torchgen, options
    codegen/<slug>/index.sqlite           see kernelmap.codegen.index
    codegen/<slug>/read.verified          files hashed once when read (Note [generated files hashed once])
    codegen/<slug>/build/aten/src/ATen/   Register*.cpp, Operators_*.cpp, Ufunc*.cpp/.cu, ...
    codegen/<slug>/torch/csrc/autograd/generated/   VariableType_*.cpp, python_*.cpp, ...

A directory is built as `codegen/.<slug>.tmp-<pid>-*` and renamed to `<slug>`
only when complete, so a reader never sees half a cache. A generation that
was killed leaves its folder behind (with torchgen's children, which stop when
their parent goes): `clean_stale_dirs` removes those of processes that are
gone, on every later use of the cache. A manifest that names a
different version, commit, torchgen or format than expected is detected
(`CacheMismatch`); `generated_files()` then regenerates.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import IO
from dataclasses import dataclass
from pathlib import Path

from kernelmap import env
from kernelmap.codegen.index import SCHEMA_VERSION, build_index
from kernelmap.errors import KernelmapError, SourceError, TorchgenError
from kernelmap.model import Origin
from kernelmap.safefiles import NotRegularFile, check_regular, read_bytes, read_text

# Bump when the layout of the cache or the generation options change.
# 2: the manifest records every file's size and the index's hash.
# 3: the fingerprint holds the hash of the generator's inputs (Note [generated
#    files keyed by content]); the manifest, every file's mtime and hash.
FORMAT = 3

ATEN_OUT = "build/aten/src/ATen"
AUTOGRAD_OUT = "torch/csrc/autograd/generated"

# The options kernelmap passes (see Note [codegen options of a release build]).
ATEN_OPTIONS = ("--per-operator-headers", "--generate", "sources")

# (step, what it writes) in the order they are shown.
# They run side by side, one interpreter each, as a build runs them.
STEPS = (
    ("aten", "ATen: Operators, Register<Key>, Ufunc kernels"),
    ("autograd", "autograd: Python bindings, VariableType, TraceType, ADInplaceOrView, Functions"),
)


class CacheMismatch(KernelmapError):
    """A cache directory filled by another torch version, tree or kernelmap format."""


@dataclass(frozen=True)
class CodegenSource:
    """What the files are generated from: the installed wheel's torchgen and
    packaged yaml/templates, or a source tree's own torchgen and tools/autograd."""

    origin: Origin  # the wheel or the tree
    aten_dir: Path  # holds native/native_functions.yaml and templates/
    autograd_dir: Path  # holds derivatives.yaml, deprecated.yaml and templates/
    torchgen_root: Path | None  # first on PYTHONPATH (a tree's root); None: the installed torchgen

    @property
    def slug(self) -> str:
        """The cache directory's name: the version, and the commit or tree path."""
        if self.torchgen_root is None:
            tail = (self.origin.commit or "nocommit")[:12]
            return f"torch-{self.origin.version}-{tail}"
        tail = hashlib.sha256(str(self.torchgen_root).encode()).hexdigest()[:12]
        return f"tree-{self.origin.version}-{tail}"

    @property
    def describe(self) -> str:
        """`torch 2.13.0+cpu (commit cf30153c4c13)`, for messages."""
        what = f"torch {self.origin.version}" if self.torchgen_root is None else f"the tree {self.torchgen_root} ({self.origin.version})"
        return f"{what} (commit {self.origin.commit[:12]})" if self.origin.commit else what

    @property
    def inputs(self) -> tuple[Path, ...]:
        """The files and folders generation reads (Note [generated files keyed
        by content]): torchgen itself, native_functions.yaml and tags.yaml,
        the ATen templates, and tools/autograd's yaml, templates and code."""
        torchgen = self.torchgen_root / "torchgen" if self.torchgen_root is not None else env.torch_install().torchgen_dir
        native = self.aten_dir / "native"
        return (torchgen, native / "native_functions.yaml", native / "tags.yaml", self.aten_dir / "templates", self.autograd_dir)

    def fingerprint(self) -> dict[str, str | None]:
        """What the manifest records and what a reader expects to find in it."""
        return {
            "format": str(FORMAT),
            "index_schema": str(SCHEMA_VERSION),
            "source": "wheel" if self.torchgen_root is None else "tree",
            "version": self.origin.version,
            "commit": self.origin.commit,
            "tree": str(self.torchgen_root) if self.torchgen_root else None,
            "inputs": inputs_digest(self.inputs),
        }


# Note [generated files keyed by content]
# Generated files are what torchgen makes of a version's yaml, templates and
# its own code: the cache of a tree whose native_functions.yaml was edited is
# not that tree's any more. So a cache's fingerprint holds the hash of every
# input's bytes, and an edit (a new operator, a line moved) regenerates. The
# hash is taken once per process and set of inputs as they stand (their
# paths, sizes and mtimes: ~2 MB read, ~40 ms), then reused while none of
# them changes. What was generated is checked the same way: the manifest
# records each file's size, mtime and hash; a file whose mtime moved is hashed
# again on open, and a file read for an answer is hashed as it is read
# (GeneratedFiles.lines), so an edit of the same size is never served.

_DIGESTS: dict[tuple, str] = {}


def _input_files(inputs: tuple[Path, ...]) -> list[tuple[str, Path]]:
    files = []
    for top in inputs:
        if top.is_file():
            files.append((top.name, top))
            continue
        for folder, dirs, names in os.walk(top):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not d.startswith("."))
            for name in sorted(names):
                if not name.endswith((".pyc", ".pyo")):
                    path = Path(folder) / name
                    files.append((f"{top.name}/{path.relative_to(top).as_posix()}", path))
    return files


def inputs_digest(inputs: tuple[Path, ...]) -> str:
    """The sha256 of the files under `inputs` (their names and bytes), reused
    while their sizes and mtimes stay as they were in this process."""
    files = _input_files(inputs)
    stamps = []
    for rel, path in files:
        try:
            st = path.stat()
            stamps.append((rel, st.st_size, st.st_mtime_ns))
        except OSError:
            stamps.append((rel, None, None))
    key = (tuple(str(p) for p in inputs), tuple(stamps))
    found = _DIGESTS.get(key)
    if found is None:
        h = hashlib.sha256()
        for rel, path in files:
            h.update(rel.encode() + b"\0")
            try:
                h.update(read_bytes(path))
            except (OSError, NotRegularFile):  # unreadable now: hashed as such, and generation will say why
                h.update(b"\0unreadable")
            h.update(b"\0")
        found = _DIGESTS[key] = h.hexdigest()[:32]
    return found


def installed_source() -> CodegenSource:
    """The installed torch: its torchgen, with the yaml and templates it packages."""
    install = env.torch_install()
    packaged = install.torchgen_dir / "packaged"
    return CodegenSource(install.origin, packaged / "ATen", packaged / "autograd", None)


def tree_source(root: Path) -> CodegenSource:
    """A PyTorch source tree: torchgen/ at its root, tools/autograd/, aten/src/ATen/."""
    from kernelmap.catalog import tree_origin

    root = Path(root).resolve()
    needed = ("torchgen/gen.py", "tools/autograd/gen_autograd.py", "aten/src/ATen/native/native_functions.yaml")
    missing = [p for p in needed if not (root / p).exists()]
    if missing:
        raise SourceError(f"{root} is not a PyTorch source tree (missing {', '.join(missing)})")
    return CodegenSource(tree_origin(root), root / "aten/src/ATen", root / "tools/autograd", root)


def cache_root() -> Path:
    return env.cache_dir() / "codegen"


def read_manifest(directory: Path) -> dict | None:
    try:
        manifest = json.loads(read_text(directory / "manifest.json", "a generated-code manifest"))
    except (OSError, ValueError, RecursionError):
        return None
    return manifest if isinstance(manifest, dict) else None


class CacheDamaged(CacheMismatch):
    """A cache directory whose files are not those its manifest recorded (truncated, edited, garbled, missing)."""


def check_manifest(directory: Path, source: CodegenSource) -> dict:
    """The manifest of a complete cache for `source`, or CacheMismatch saying what differs."""
    manifest = read_manifest(directory)
    if manifest is None:
        raise CacheDamaged(f"{directory} holds no readable manifest.json")
    expected = source.fingerprint()
    found = manifest.get("fingerprint")
    if not isinstance(found, dict):
        raise CacheDamaged(f"the manifest.json of {directory} records no fingerprint")
    diffs = [f"{k} {found.get(k)!r:.80} (expected {v!r})" for k, v in expected.items() if found.get(k) != v]
    if diffs:
        who = f"torch {str(found.get('version'))[:40]}" + (f" (commit {str(found.get('commit'))[:12]})" if found.get("commit") else "")
        raise CacheMismatch(f"{directory} was filled by {who}, not by {source.describe}: {'; '.join(diffs)}")
    count = manifest.get("files")
    if not isinstance(count, int) or isinstance(count, bool) or count <= 0:
        raise CacheDamaged(f"the manifest.json of {directory} records {str(count)[:40]} generated files")
    verify_files(directory, manifest)
    return manifest


def record_files(directory: Path) -> dict:
    """What the manifest records to verify a cache on open: every file's size,
    mtime and hash (Note [generated files keyed by content]), and the index
    database's hash (its pages may change without its size)."""
    sizes, mtimes, hashes = {}, {}, {}
    for p in sorted(directory.rglob("*")):
        if p.is_file():
            rel = p.relative_to(directory).as_posix()
            st = p.stat()
            sizes[rel], mtimes[rel], hashes[rel] = st.st_size, st.st_mtime_ns, _sha256(p)
    return {"sizes": sizes, "mtimes": mtimes, "sha256": hashes, "index_sha256": hashes.get("index.sqlite") or _sha256(directory / "index.sqlite")}


def verify_files(directory: Path, manifest: dict) -> None:
    """CacheDamaged unless the files are those `record_files` recorded: sizes
    and mtimes (a stat per file, a few milliseconds), the hash of a file whose
    mtime moved, and the index's hash. A file that is no regular file (a FIFO
    planted there) is refused at once, not read."""
    sizes, digest = manifest.get("sizes"), manifest.get("index_sha256")
    mtimes, hashes = manifest.get("mtimes"), manifest.get("sha256")
    if (not isinstance(sizes, dict) or not isinstance(digest, str) or "index.sqlite" not in sizes
            or not isinstance(mtimes, dict) or not isinstance(hashes, dict)):
        raise CacheDamaged(f"the manifest.json of {directory} does not record its files")
    for rel, size in sizes.items():
        try:
            st = check_regular(directory / rel, "a generated file")
        except (OSError, ValueError, TypeError):
            st = None
        if st is None:
            raise CacheDamaged(f"{directory} lacks {str(rel)[:200]}")
        if st.st_size != size:
            raise CacheDamaged(f"{directory}/{rel} has {st.st_size} bytes, not the {size} it was generated with")
        if st.st_mtime_ns != mtimes.get(rel) and rel != "index.sqlite":  # touched, or edited to the same size
            try:
                same = _sha256(directory / rel) == hashes.get(rel)
            except OSError:
                same = False
            if not same:
                raise CacheDamaged(f"{directory}/{rel} is not the file that was generated (edited since)")
    from kernelmap.verified import is_verified, mark_verified

    index = directory / "index.sqlite"
    if is_verified(index, f"sha256 {digest}"):  # hashed before, the same file since: not hashed on every open
        return
    try:
        before = os.stat(index)
        same = _sha256(index) == digest
    except OSError as e:
        raise CacheDamaged(f"{directory}/index.sqlite is unreadable ({e.strerror or e})") from None
    if not same:
        raise CacheDamaged(f"{directory}/index.sqlite is not the file it was generated as")
    mark_verified(index, f"sha256 {digest}", before)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


Reporter = Callable[[str, str], None]  # (step, "start" | "done")


# `.<slug>.tmp-<pid>-<mkdtemp's 8>` being built, `.<slug>.old-<pid>` being
# replaced; `.<slug>.tmp-<8>` of kernelmap before the pid was recorded.
_LEFT_BEHIND = re.compile(r"\.(?P<slug>.+)\.(?:tmp-(?P<pid>\d+)-[a-z0-9_]{8}|old-(?P<old>\d+)|tmp-[a-z0-9_]{8})")

# Set for torchgen's children: the pid of the kernelmap whose folder they write into.
PARENT_VARIABLE = "KERNELMAP_CODEGEN_PARENT"


def make_tmp_dir(target: Path) -> Path:
    """A new folder beside `target` to build it in, named for this process (see `clean_stale_dirs`)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-{os.getpid()}-", dir=target.parent))


def clean_stale_dirs(directory: Path) -> list[Path]:
    """Delete the folders of generations whose process is gone (killed: a
    SIGKILL runs no cleanup), of any torch or tree; returns what was deleted.
    A folder whose process lives (a generation running now) is kept. A folder
    named without a pid, by an older kernelmap, goes when no generation of its
    slug holds the slug's lock."""
    try:
        names = os.listdir(directory)
    except OSError:  # no cache yet
        return []
    gone = []
    for name in names:
        m = _LEFT_BEHIND.fullmatch(name)
        if m is None:
            continue
        pid = m.group("pid") or m.group("old")
        if pid is not None and env.process_alive(int(pid)):
            continue
        if pid is None and not _unlocked(directory / f".{m.group('slug')}.lock"):
            continue
        shutil.rmtree(directory / name, ignore_errors=True)
        gone.append(directory / name)
    return gone


def _unlocked(lock: Path) -> bool:
    """Whether no process (this one included) holds `lock` now."""
    import filelock

    held = filelock.FileLock(str(lock), timeout=0)
    try:
        held.acquire()
    except filelock.Timeout:
        return False
    except OSError:  # a lock that cannot be opened: not known to be free
        return False
    held.release()
    return True


def child_environment(environ: dict[str, str]) -> dict[str, str]:
    """`environ` for a torchgen child, which ends itself when this process is gone (_generate.py)."""
    return {**environ, PARENT_VARIABLE: str(os.getpid())}


def generate(source: CodegenSource, target: Path, report: Reporter | None = None) -> dict:
    """Generate every file for `source` and index them, into the new directory
    `target` (built aside and renamed into place). Returns the manifest."""
    tmp = make_tmp_dir(target)
    try:
        started = time.perf_counter()
        _run_steps(source, tmp, report or (lambda step, state: None))
        files = _finish_tree(tmp)
        if not files:  # never cache an empty generation: every later answer would miss its layer
            raise TorchgenError(f"torchgen wrote no C++ sources for {source.describe}")
        if report:
            report("index", "start")
        fingerprint = source.fingerprint()
        build_index(tmp / "index.sqlite", tmp, files, {k: str(v) for k, v in fingerprint.items()})
        if report:
            report("index", "done")
        manifest = {
            "fingerprint": fingerprint,
            "label": source.describe,
            "options": {"aten": list(ATEN_OPTIONS), "autograd": "gen_autograd_python + gen_autograd, nop selector"},
            "files": len(files),
            "seconds": round(time.perf_counter() - started, 2),
            **record_files(tmp),
        }
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2))
        _swap_into_place(tmp, target)
        return manifest
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _run_steps(source: CodegenSource, out: Path, report: Reporter) -> None:
    """The codegen steps, side by side in their own interpreters."""
    script = Path(__file__).with_name("_generate.py")
    # Note [one torchgen per interpreter] (catalog/store.py): the tree's
    # torchgen and tools/ come first, never mixed with the installed one.
    environ, cwd = env.torchgen_environment(source.torchgen_root)
    environ = child_environment(environ)
    running: dict[str, subprocess.Popen] = {}
    logs: dict[str, IO[str]] = {}
    width = max(1, min(len(STEPS), os.cpu_count() or 1))
    pending = [step for step, _ in STEPS]
    failures: list[tuple[str, str]] = []
    try:
        while pending or running:
            while pending and len(running) < width:
                step = pending.pop(0)
                logs[step] = tempfile.TemporaryFile(mode="w+")
                cmd = [sys.executable, str(script), step, str(source.aten_dir), str(source.autograd_dir), str(out)]
                running[step] = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=logs[step], env=environ, cwd=cwd)
                report(step, "start")
            for step, proc in list(running.items()):
                if proc.poll() is None:
                    continue
                del running[step]
                if proc.returncode != 0:
                    logs[step].seek(0)
                    lines = [line for line in logs[step].read().strip().splitlines() if line.strip()]
                    failures.append((step, lines[-1] if lines else f"exit status {proc.returncode}"))
                    pending.clear()
                else:
                    report(step, "done")
            if running:
                time.sleep(0.05)
    finally:
        for proc in running.values():  # after a failure: stop the others before the directory goes
            proc.kill()
            proc.wait()
        for log in logs.values():
            log.close()
    if failures:
        order = [name for name, _ in STEPS]
        step, message = min(failures, key=lambda failure: order.index(failure[0]))
        raise TorchgenError(f"the torchgen of {source.describe} failed generating {step}: {message}")


def _finish_tree(out: Path) -> list[str]:
    """Drop what a build does not compile, and list the sources that remain."""
    shutil.rmtree(out / ".scratch", ignore_errors=True)
    shutil.rmtree(out / AUTOGRAD_OUT / "templates", ignore_errors=True)
    files = []
    for path in sorted(out.rglob("*")):
        if not path.is_file():
            continue
        # `*Everything.cpp` holds all shards in one file for tools; the build
        # compiles the shards, which are the files the dispatcher names.
        if "Everything" in path.name:
            path.unlink()
            continue
        if path.suffix in (".cpp", ".cu"):
            files.append(path.relative_to(out).as_posix())
    return files


def _swap_into_place(tmp: Path, target: Path) -> None:
    if target.exists():
        old = target.with_name(f".{target.name}.old-{os.getpid()}")
        os.replace(target, old)
        os.replace(tmp, target)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, target)
