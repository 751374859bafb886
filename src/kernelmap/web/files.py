"""Locations -> file contents, confined to the roots kernelmap may show: the
registered source trees, the generated-code cache and the installed torch
wheel's `torch/` and `torchgen/` (where the wheel's Python frames and its
packaged yaml live).

A file is named by a root name (`tree:NAME`, `generated`, `wheel`) and a path
relative to that root. Absolute paths, `..`, backslashes, NUL bytes, paths
still percent-encoded after the URL was decoded, and symlinks that lead out
of the root are refused with `FileRefused`; nothing outside a root is ever
opened. The same reader gives the HTML report its excerpts.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from kernelmap.errors import KernelmapError
from kernelmap.model import is_generated_path
from kernelmap.safefiles import NotRegularFile, read_text

# Largest file the source viewer shows (the biggest generated file is ~10 MB).
MAX_FILE_BYTES = 16 * 1024 * 1024
KEPT_FILES = 64  # files whose lines are kept for excerpts (the pages that need them are cached too)
_ENCODED = re.compile(r"%[0-9A-Fa-f]{2}")


class FileRefused(KernelmapError):
    """A file request names something outside the roots kernelmap serves."""


@dataclass(frozen=True)
class Root:
    name: str  # "tree:debian-2.6.0", "generated", "wheel"
    directory: Path  # resolved
    label: str  # the origin label locations carry: "tree debian-2.6.0", "torch 2.13.0+cpu", ...
    remap: tuple[tuple[str, str], ...] = ()  # repository prefix -> prefix under the directory
    allowed: tuple[str, ...] = ()  # top-level folders served ("" = all)


@dataclass(frozen=True)
class Opened:
    """A file found under a root: which root, its path there, its text."""

    root: Root
    path: str  # as asked (repository or build path)
    disk: Path
    text: str


def check_relative(path: str) -> str:
    """`path` when it is a plain relative path; FileRefused otherwise."""
    if not path or "\x00" in path or "\\" in path:
        raise FileRefused("not a relative file path")
    if _ENCODED.search(path):
        raise FileRefused("encoded characters in a file path are refused")
    p = PurePosixPath(path)
    if p.is_absolute() or path.startswith("/") or re.match(r"^[A-Za-z]:", path):
        raise FileRefused("absolute paths are refused; name a file inside a registered tree")
    if any(part in ("..", ".") for part in path.split("/")):
        raise FileRefused("'..' and '.' are refused in file paths")
    return path


class SourceFiles:
    """The roots, and reading files under them."""

    def __init__(self, roots: list[Root], default_tree: str | None = None):
        self.roots = {r.name: r for r in roots}
        self.default_tree = default_tree
        self._lines: OrderedDict[tuple[str, str, str], list[str] | None] = OrderedDict()  # the last files excerpted
        self._lock = threading.Lock()

    @staticmethod
    def discover() -> SourceFiles:
        """Every registered tree, the generated-code cache and the installed
        wheel, as this machine has them."""
        from kernelmap import env
        from kernelmap.codegen.build import cache_root
        from kernelmap.source.trees import list_trees

        roots: list[Root] = []
        trees = list_trees()
        for t in trees:
            if t.root.is_dir():
                roots.append(Root(f"tree:{t.name}", t.root.resolve(), t.origin.label))
        generated = cache_root()
        if generated.is_dir():
            roots.append(Root("generated", generated.resolve(), "generated"))
        try:
            wheel = env.torch_install()
        except KernelmapError:
            wheel = None
        if wheel is not None:
            o = wheel.origin
            roots.append(Root("wheel", wheel.site_packages.resolve(), o.label, o.remap, ("torch", "torchgen")))
        default = None
        try:
            from kernelmap.source.trees import select_tree

            default = f"tree:{select_tree().name}"
        except KernelmapError:
            default = f"tree:{trees[0].name}" if trees else None
        return SourceFiles(roots, default)

    # -- naming ------------------------------------------------------------

    def root_for(self, location: dict[str, Any]) -> Root | None:
        """The root a LOCATION object's file lies under: generated paths in
        the generated-code cache, others by their origin label, and
        origin-less ones (a trace's `source` attrs) in the default tree."""
        path = str(location.get("path") or "")
        origin = location.get("origin")
        if is_generated_path(path):
            return self.roots.get("generated")
        for root in self.roots.values():
            if origin and root.label == origin:
                return root
        if origin is None and self.default_tree:
            return self.roots.get(self.default_tree)
        return None

    def resolve(self, root_name: str, path: str) -> tuple[Root, Path]:
        """The file `path` under the root `root_name`, checked to lie inside it
        (symlinks resolved); FileRefused otherwise."""
        root = self.roots.get(root_name)
        if root is None:
            raise FileRefused(f"no such root: {root_name!r}")
        check_relative(path)
        rel = path
        for repo_prefix, disk_prefix in root.remap:
            if rel.startswith(repo_prefix):
                rel = disk_prefix + rel[len(repo_prefix) :]
                break
        if root.name == "generated":
            rel = self._generated_path(rel)
        if root.allowed and rel.split("/", 1)[0] not in root.allowed:
            raise FileRefused(f"only {', '.join(root.allowed)} are served from the wheel")
        candidate = root.directory / rel
        try:
            disk = candidate.resolve(strict=True)
        except (OSError, RuntimeError):
            raise FileRefused(f"no such file: {path}") from None
        if not disk.is_relative_to(root.directory):
            raise FileRefused("the path leads out of its tree")
        if not disk.is_file():
            raise FileRefused(f"not a file: {path}")
        return root, disk

    def _generated_path(self, rel: str) -> str:
        """A build path (`build/aten/...`) names a file of the installed
        torch's generated set; a path with its set's folder is taken as is."""
        if not rel.startswith("build/") and "/generated/" not in rel:
            return rel
        from kernelmap.codegen import open_generated

        try:
            directory = open_generated().root.resolve()
        except KernelmapError as e:
            raise FileRefused(f"no generated files: {e}") from None
        return str((directory / rel).relative_to(self.roots["generated"].directory))

    def open(self, root_name: str, path: str) -> Opened:
        root, disk = self.resolve(root_name, path)
        if disk.stat().st_size > MAX_FILE_BYTES:
            raise FileRefused(f"{path} is larger than {MAX_FILE_BYTES // (1024 * 1024)} MB")
        try:
            return Opened(root, path, disk, read_text(disk, errors="replace"))
        except NotRegularFile as e:  # a FIFO is refused, not waited on
            raise FileRefused(str(e)) from None

    def open_location(self, location: dict[str, Any]) -> Opened | None:
        by_file = self._open_file(location)
        if by_file is not None:
            return by_file
        root = self.root_for(location)
        if root is None:
            return None
        try:
            return self.open(root.name, str(location["path"]))
        except FileRefused:
            return None

    def _open_file(self, location: dict[str, Any]) -> Opened | None:
        """A location whose `file` (where it lies on this machine: a tree's
        generated set, its headers, the wheel's torch/include) is under a root."""
        file = location.get("file")
        if not isinstance(file, str) or not file.startswith("/"):
            return None
        try:
            disk = Path(file).resolve(strict=True)
        except (OSError, RuntimeError):
            return None
        for root in self.roots.values():
            if not disk.is_relative_to(root.directory) or not disk.is_file():
                continue
            rel = disk.relative_to(root.directory).as_posix()
            if (root.allowed and rel.split("/", 1)[0] not in root.allowed) or disk.stat().st_size > MAX_FILE_BYTES:
                return None
            try:
                return Opened(root, str(location.get("path")), disk, read_text(disk, errors="replace"))
            except (OSError, NotRegularFile):
                return None
        return None

    # -- excerpts ----------------------------------------------------------

    def excerpt(self, location: dict[str, Any], lines: int = 40, open_ended: int = 10) -> str | None:
        """The text of a location's lines, for the HTML renderer's `excerpt`
        option: from its line to its end line (at most `lines`), or
        `open_ended` lines when it names no end."""
        opened = self._cached(location)
        if opened is None:
            return None
        first = int(location["line"])
        end = location.get("end_line") or first + open_ended - 1
        end = min(int(end), first + lines - 1)
        text = opened[first - 1 : end]
        return "\n".join(text) if text else None

    def _cached(self, location: dict[str, Any]) -> list[str] | None:
        root = self.root_for(location)
        if root is None and not location.get("file"):
            return None
        # two generated sets (the wheel's, a tree's) share build paths: their files tell them apart
        key = (root.name if root else "", str(location.get("path")), str(location.get("file") or ""))
        with self._lock:
            if key in self._lines:
                self._lines.move_to_end(key)
                return self._lines[key]
        opened = self.open_location(location)
        lines = opened.text.split("\n") if opened else None
        with self._lock:
            self._lines[key] = lines
            while len(self._lines) > KEPT_FILES:
                self._lines.popitem(last=False)
        return lines
