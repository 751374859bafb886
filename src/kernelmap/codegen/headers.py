"""The generated headers a call passes through between its Python binding and
the dispatcher: `at::<op>` (`ATen/ops/<op>.h`) or `Tensor::<op>`
(`ATen/core/TensorBody.h`), each an inline function calling
`at::_ops::<op>::call`. Two sources of one kind:

* the installed wheel ships them in `torch/include/ATen` (with ATen's other
  headers: `native/cpu/Loops.h`, `native/cuda/CUDALoops.cuh`,
  `native/DispatchStub.h`, `TensorIterator.h`...): the installed version's
  own partial tree, read as is, at its exact lines;
* a selected source tree has none: they are regenerated with the tree's own
  torchgen (`--generate headers --per-operator-headers`, as cmake runs it),
  once, on first use (about 15 s and 7,000 files, so apart from the sources
  step: only a graph that shows headers waits for them).

Note [shipped header guard]
The wheel's `torch/include` headers are the generated ones wrapped by the
build in `#if !defined(TORCH_STABLE_ONLY) && !defined(TORCH_TARGET_VERSION)`
... `#error ...` `#endif` (torch 2.10+): one line before, four after. Every
line of a shipped header is thus its regenerated line plus one; the contents
are otherwise identical (see `compare_headers`).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from kernelmap import env
from kernelmap.codegen.build import (
    CodegenSource,
    Reporter,
    _swap_into_place,
    cache_root,
    child_environment,
    clean_stale_dirs,
    installed_source,
    make_tmp_dir,
    tree_source,
)
from kernelmap.errors import KernelmapError, TorchgenError
from kernelmap.model import Location, Op, Origin, OriginKind
from kernelmap.safefiles import read_text

ATEN = "build/aten/src/ATen/"  # where a build writes the generated headers
INCLUDE = "torch/include/"  # where the wheel ships them, under site-packages
HEADERS_FORMAT = 1
_GUARD_OPEN = "#if !defined(TORCH_STABLE_ONLY) && !defined(TORCH_TARGET_VERSION)"


class HeadersDamaged(KernelmapError):
    """A header the cache recorded is missing or changed."""

    def __init__(self, path: Path):
        super().__init__(f"{path} is not the header that was generated (regenerate with `kernelmap gen --regenerate`)")
        self.path = path


@dataclass(frozen=True)
class HeaderFunction:
    """An inline function of a generated header: `at::add` or `at::Tensor::add`."""

    symbol: str  # at::add, at::Tensor::add, at::conv2d_symint
    location: Location  # the `inline ...` line
    calls: str  # at::_ops::add_Tensor::call


HEADERS_KEPT = 512  # headers kept per set: an operator's ops/<op>.h is a few KB, TensorBody.h (asked for often) 300 KB


class HeaderFiles:
    """One version's generated headers: the wheel's torch/include, or a tree's regenerated set."""

    def __init__(self, aten_dir: Path, origin: Origin, sizes: dict[str, int] | None = None):
        self.aten_dir = aten_dir  # holds ops/, core/TensorBody.h, Functions.h
        self.origin = origin  # locations are named build/aten/src/ATen/...; the origin maps them to aten_dir
        self._sizes = sizes  # recorded sizes, checked on each read (a tree's cache); None for the wheel
        self._lines: dict[str, list[str]] = {}  # the HEADERS_KEPT headers most recently asked for, the least first
        self._lock = threading.Lock()  # questions are answered on several threads

    def lines(self, rel: str) -> list[str]:
        """The lines of `rel` (`ops/add.h`); [] when absent."""
        with self._lock:
            found = self._lines.pop(rel, None)
            if found is not None:
                self._lines[rel] = found
                return found
        found = self._read(rel)
        with self._lock:
            self._lines[rel] = found
            while len(self._lines) > HEADERS_KEPT:  # a warm process asks for many operators' headers: forget the oldest
                del self._lines[next(iter(self._lines))]
        return found

    def _read(self, rel: str) -> list[str]:
        path = self.aten_dir / rel
        try:
            text = read_text(path, "a generated header", errors="replace")  # a FIFO is refused, not waited on
        except OSError:
            text = None
        if self._sizes is not None and rel in self._sizes and (text is None or path.stat().st_size != self._sizes[rel]):
            raise HeadersDamaged(path)
        return text.splitlines() if text is not None else []

    def function(self, op: Op, call: str) -> HeaderFunction | None:
        """The inline function a binding's call (`at::conv2d_symint`,
        `at::Tensor::add`) names, in the header of `op`: found after the
        `// aten::<op>(` comment torchgen writes above it."""
        method = call.startswith("at::Tensor::")
        name = call.rsplit("::", 1)[-1]
        rel = "core/TensorBody.h" if method else f"ops/{op.name.name}.h"
        lines = self.lines(rel)
        comment = f"// aten::{op.name.unqualified}("
        qualified = f"Tensor::{name}(" if method else f" {name}("
        for i, text in enumerate(lines):
            if not text.startswith(comment):
                continue
            for j in range(i + 1, min(len(lines), i + 12)):
                line = lines[j]
                if line.startswith("//"):
                    break
                if line.startswith("inline ") and qualified in line:
                    ops_call = re.search(r"(at::_ops::\w+::(?:call|redispatch))\(", "\n".join(lines[j : j + 4]))
                    symbol = f"at::Tensor::{name}" if method else f"at::{name}"
                    location = Location(ATEN + rel, j + 1, origin=self.origin)
                    return HeaderFunction(symbol, location, ops_call.group(1) if ops_call else f"at::_ops::{op.name.unqualified.replace('.', '_')}::call")
        return None


def wheel_headers() -> HeaderFiles | None:
    """The installed wheel's torch/include/ATen as a partial tree of its own version."""
    install = env.torch_install()
    aten = install.torch_dir / "include/ATen"
    if not (aten / "core/TensorBody.h").is_file():
        return None
    return HeaderFiles(aten, include_origin())


def include_origin() -> Origin:
    """The installed version's torch/include, named by repository paths:
    generated headers as a build writes them (build/aten/src/ATen/...), the
    others as the repository has them (aten/src/ATen/..., c10/...)."""
    install = env.torch_install()
    remap = ((ATEN, f"{INCLUDE}ATen/"), ("aten/src/ATen/", f"{INCLUDE}ATen/"), ("c10/", f"{INCLUDE}c10/"), ("torch/csrc/", f"{INCLUDE}torch/csrc/"))
    return Origin(OriginKind.WHEEL, install.version, install.commit, str(install.site_packages), remap, f"torch {install.version} include")


def _headers_dir(source: CodegenSource) -> Path:
    return cache_root() / f"{source.slug}-headers"


def generated_headers(tree: Path | None = None, *, progress: Reporter | None = None) -> HeaderFiles:
    """The headers of `tree` regenerated with its own torchgen (or, with no
    tree, the installed torchgen's: for checking them against the shipped
    ones), generated on first use and cached."""
    source = installed_source() if tree is None else tree_source(tree)
    directory = _headers_dir(source)
    clean_stale_dirs(directory.parent)
    opened = _open(directory, source)
    if opened is not None:
        return opened
    import filelock  # only to generate: headers generated are read without it

    directory.parent.mkdir(parents=True, exist_ok=True)
    with filelock.FileLock(str(directory.parent / f".{directory.name}.lock")):
        opened = _open(directory, source)
        if opened is not None:
            return opened
        if (directory / "manifest.json").exists():  # there, but garbled or of another shape or torch
            _warn(f"{directory} is not the generated headers of {source.describe}")
        _generate(source, directory, progress)
    opened = _open(directory, source)
    assert opened is not None, "headers just generated open"
    return opened


def regenerate_headers(tree: Path | None, damaged: HeadersDamaged, *, progress: Reporter | None = None) -> HeaderFiles:
    """The headers generated again after a read found one that is not the
    file generated (truncated, edited), with one warning."""
    import filelock

    source = installed_source() if tree is None else tree_source(tree)
    directory = _headers_dir(source)
    _warn(f"{damaged.path} is not the header that was generated")
    with filelock.FileLock(str(directory.parent / f".{directory.name}.lock")):
        (directory / "manifest.json").unlink(missing_ok=True)
    return generated_headers(tree, progress=progress)


def _warn(reason: str) -> None:
    import warnings

    from kernelmap.codegen import CacheWarning

    warnings.warn(f"regenerating: {reason}", CacheWarning, stacklevel=3)


def _fingerprint(source: CodegenSource) -> dict:
    return {**source.fingerprint(), "headers_format": str(HEADERS_FORMAT)}


def _open(directory: Path, source: CodegenSource) -> HeaderFiles | None:
    try:
        manifest = json.loads(read_text(directory / "manifest.json", "a generated headers' manifest"))
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(manifest, dict) or manifest.get("fingerprint") != _fingerprint(source) or not isinstance(manifest.get("sizes"), dict):
        return None
    what = f"torch {source.origin.version}" if source.torchgen_root is None else source.origin.label
    origin = Origin(OriginKind.GENERATED, source.origin.version, source.origin.commit, root=str(directory), label=f"generated from {what}")
    return HeaderFiles(directory / ATEN, origin, manifest["sizes"])


def _generate(source: CodegenSource, target: Path, progress: Reporter | None) -> None:
    script = Path(__file__).with_name("_generate.py")
    environ, cwd = env.torchgen_environment(source.torchgen_root)
    environ = child_environment(environ)
    tmp = make_tmp_dir(target)
    try:
        started = time.perf_counter()
        if progress:
            progress("headers", "start")
        cmd = [sys.executable, str(script), "headers", str(source.aten_dir), str(source.autograd_dir), str(tmp)]
        done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=environ, cwd=cwd)
        if done.returncode != 0:
            lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
            raise TorchgenError(f"the torchgen of {source.describe} failed generating headers: {lines[-1] if lines else done.returncode}")
        if progress:
            progress("headers", "done")
        shutil.rmtree(tmp / ".scratch", ignore_errors=True)
        aten = tmp / ATEN
        sizes = {p.relative_to(aten).as_posix(): p.stat().st_size for p in aten.rglob("*") if p.is_file()}
        manifest = {"fingerprint": _fingerprint(source), "label": source.describe, "files": len(sizes), "seconds": round(time.perf_counter() - started, 2), "sizes": sizes}
        (tmp / "manifest.json").write_text(json.dumps(manifest))
        _swap_into_place(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


@dataclass(frozen=True)
class HeaderComparison:
    """Regenerated headers against the shipped ones, file by file."""

    identical: tuple[str, ...]  # byte for byte
    guarded: tuple[str, ...]  # identical inside the shipped guard (Note [shipped header guard])
    differing: tuple[str, ...]
    not_shipped: tuple[str, ...]  # regenerated, absent from torch/include
    not_regenerated: tuple[str, ...]  # shipped under ops/, not regenerated (hand-written: ops/from_blob.h, ops/tensor.h)


def unguard(text: str) -> str:
    """A shipped header without the guard the build wraps it in."""
    lines = text.split("\n")
    if not lines or lines[0] != _GUARD_OPEN:
        return text
    body = lines[1:]
    while body and body[-1] == "":
        body.pop()
    if len(body) >= 4 and body[-3].startswith("#else") and body[-1].startswith("#endif"):
        body = body[:-4]
    return "\n".join(body) + "\n"


def compare_headers(regenerated: HeaderFiles, shipped: HeaderFiles) -> HeaderComparison:
    identical, guarded, differing, not_shipped = [], [], [], []
    rels = sorted(p.relative_to(regenerated.aten_dir).as_posix() for p in regenerated.aten_dir.rglob("*.h"))
    for rel in rels:
        mine = (regenerated.aten_dir / rel).read_text(encoding="utf-8")
        try:
            theirs = (shipped.aten_dir / rel).read_text(encoding="utf-8")
        except OSError:
            not_shipped.append(rel)
            continue
        if mine == theirs:
            identical.append(rel)
        elif unguard(theirs) == mine:
            guarded.append(rel)
        else:
            differing.append(rel)
    regenerated_ops = {r for r in rels if r.startswith("ops/")}
    shipped_ops = sorted(f"ops/{p.name}" for p in (shipped.aten_dir / "ops").glob("*.h"))
    return HeaderComparison(tuple(identical), tuple(guarded), tuple(differing), tuple(not_shipped), tuple(r for r in shipped_ops if r not in regenerated_ops))
