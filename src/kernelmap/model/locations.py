"""Where facts come from: origins (the installed torch, a source tree, the
files a tree's torchgen generates, an extension of the user's) and the locations
answers give, each carrying its origin and so its version (Note [versions on
locations]).
"""

from __future__ import annotations

import enum
import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


PYTORCH_REPO_URL = "https://github.com/pytorch/pytorch"


# ---------------------------------------------------------------------------
# Where facts come from
# ---------------------------------------------------------------------------


class OriginKind(str, enum.Enum):
    WHEEL = "wheel"  # files of the installed torch wheel (python, packaged yaml)
    TREE = "tree"  # a PyTorch source tree (local checkout or fetched archive)
    GENERATED = "generated"  # files regenerated with torchgen, as a build would write them
    BUILD = "build"  # a path reported by the live dispatcher from the wheel's own build
    EXTENSION = "extension"  # a C++ extension's own sources on this machine (Note [registrations from outside torch])


@dataclass(frozen=True)
class Origin:
    """A set of files with one version: the installed wheel, a source tree, or
    the generated files of one torch version."""

    kind: OriginKind
    version: str  # torch.__version__ or the tree's version.txt
    commit: str | None = None  # full git commit, when known; pins links
    root: str | None = None  # directory on this machine holding the files, if any
    # Repository path prefix -> path prefix under `root`, for files whose place on
    # disk differs from their place in the repository (the wheel ships
    # aten/src/ATen/native/native_functions.yaml as torchgen/packaged/ATen/native/...).
    remap: tuple[tuple[str, str], ...] = ()
    label: str = ""  # short human name: "torch 2.13.0", "tree 2.6.0a0"

    def __post_init__(self) -> None:
        if self.commit is not None and not re.fullmatch(r"[0-9a-f]{7,40}", self.commit):
            raise ValueError(f"an origin's commit is a hex git id, not {self.commit!r}")

    def disk_path(self, path: str) -> Path | None:
        """Where the repository-relative `path` lies on this machine, if it does."""
        if self.root is None:
            return None
        for repo_prefix, disk_prefix in self.remap:
            if path.startswith(repo_prefix):
                return Path(self.root) / (disk_prefix + path[len(repo_prefix) :])
        return Path(self.root) / path

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "version": self.version,
            "commit": self.commit,
            "label": self.label,
            "root": self.root,
            "remap": [list(pair) for pair in self.remap],
        }

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> Origin:
        return Origin(
            OriginKind(d["kind"]),
            d["version"],
            d.get("commit"),
            d.get("root"),
            tuple((a, b) for a, b in d.get("remap") or ()),
            d.get("label", ""),
        )


def is_generated_path(path: str) -> bool:
    """True for files a build generates (they exist in no repository)."""
    return path.startswith("build/") or "/generated/" in path


# Generated files whose template is not named like them (shards and per-key
# or per-operator files are matched by the rules in `generated_template`).
_ATEN_TEMPLATES = "aten/src/ATen/templates/"
_AUTOGRAD_TEMPLATES = "tools/autograd/templates/"
_REGISTER_OWN_TEMPLATE = ("RegisterSchema", "RegisterBackendSelect", "RegisterFunctionalization", "RegisterCodegenUnboxedKernels")


def generated_template(path: str) -> str | None:
    """The repository path of the torchgen template a generated file is
    written from: `build/aten/src/ATen/RegisterCPU_0.cpp` ->
    `aten/src/ATen/templates/RegisterDispatchKey.cpp`,
    `torch/csrc/autograd/generated/VariableType_3.cpp` ->
    `tools/autograd/templates/VariableType.cpp`; None for other files."""
    name = path.rsplit("/", 1)[-1]
    stem, dot, suffix = name.rpartition(".")
    if not dot:
        return None
    stem = re.sub(r"_\d+$", "", stem)  # shards: Operators_3, VariableType_7
    if path.startswith("torch/csrc/autograd/generated/"):
        return f"{_AUTOGRAD_TEMPLATES}{stem}.{suffix}"
    if not path.startswith("build/aten/src/ATen/"):
        return None
    rel = path[len("build/aten/src/ATen/") :]
    if rel.startswith("ops/"):  # per-operator headers
        for ending, template in (("_ops", "Operator.h"), ("_native", "NativeFunction.h"), ("_meta", "NativeMetaFunction.h")):
            if stem.endswith(ending):
                return _ATEN_TEMPLATES + template
        if stem.endswith("_dispatch"):  # ops/add_cpu_dispatch.h
            return _ATEN_TEMPLATES + "DispatchKeyFunction.h"
        return _ATEN_TEMPLATES + "Function.h"
    if rel.startswith("core/"):
        return f"{_ATEN_TEMPLATES}{stem}.{suffix}"
    if stem == "VmapGeneratedPlumbing":  # written by torchgen/gen_vmap_plumbing.py from code, no template
        return None
    per_key = re.fullmatch(r"[A-Z]\w*Functions(_inl)?", stem)
    if per_key and stem not in ("Functions", "NativeFunctions", "NativeMetaFunctions", "RedispatchFunctions", "UnboxingFunctions"):
        return f"{_ATEN_TEMPLATES}DispatchKeyFunctions{per_key.group(1) or ''}.h"  # CPUFunctions.h, CPUFunctions_inl.h
    if stem.startswith("Register") and stem not in _REGISTER_OWN_TEMPLATE:
        return _ATEN_TEMPLATES + "RegisterDispatchKey.cpp"
    ufunc = re.match(r"(Ufunc(?:CPU|CUDA|CPUKernel))_\w+$", stem)
    if ufunc:
        return f"{_ATEN_TEMPLATES}{ufunc.group(1)}.{suffix}"
    return f"{_ATEN_TEMPLATES}{stem}.{suffix}"


@dataclass(frozen=True)
class Location:
    """A line range in a file, named by its path in the PyTorch repository (or,
    for generated files, in a build directory: `build/aten/src/ATen/...`)."""

    path: str
    line: int
    end_line: int | None = None
    origin: Origin | None = None

    def __post_init__(self) -> None:
        if self.line < 1:
            raise ValueError(f"lines count from 1; got {self.line} for {self.path}")
        if self.end_line is not None and self.end_line < self.line:
            raise ValueError(f"a location ends at or after its start: {self.path}:{self.line}-{self.end_line}")
        if self.path.startswith("/"):
            raise ValueError(f"a location's path is relative to its origin: {self.path}")

    def __str__(self) -> str:
        return f"{self.path}:{self.line}"

    @property
    def url(self) -> str | None:
        """A link to these lines at the origin's exact commit on the public
        repository; None for generated files, which exist in no repository."""
        o = self.origin
        if o is None or o.commit is None or o.kind is OriginKind.GENERATED or is_generated_path(self.path):
            return None
        anchor = f"#L{self.line}" + (f"-L{self.end_line}" if self.end_line and self.end_line != self.line else "")
        return f"{PYTORCH_REPO_URL}/blob/{o.commit}/{self.path}{anchor}"

    @property
    def disk_path(self) -> Path | None:
        return self.origin.disk_path(self.path) if self.origin else None

    @property
    def template(self) -> str | None:
        """For a generated file, the torchgen template it is written from (its repository path)."""
        return generated_template(self.path) if is_generated_path(self.path) else None

    @property
    def template_url(self) -> str | None:
        """The template's pinned link, when the generating version's commit is known."""
        template, o = self.template, self.origin
        if template is None or o is None or o.commit is None:
            return None
        return f"{PYTORCH_REPO_URL}/blob/{o.commit}/{template}"

    def to_json(self, origins: OriginTable | None = None) -> dict[str, Any]:
        """`origin` names the origin: its key in `origins` (the document's origin
        table) when given, else its label. `file` is where the file lies on this
        machine (generated files live in the cache), `url` its pinned link."""
        disk = _disk_file(self.origin, self.path) if self.origin else None
        return {
            "path": self.path,
            "line": self.line,
            "end_line": self.end_line,
            "origin": (origins.key(self.origin) if origins is not None else self.origin.label) if self.origin else None,
            "url": self.url,
            "file": disk,
            **({"template": self.template, "template_url": self.template_url} if self.template else {}),
        }

    @staticmethod
    def from_json(d: Mapping[str, Any], origins: OriginTable | None = None) -> Location:
        origin = origins.get(d.get("origin")) if origins is not None else None
        return Location(d["path"], d["line"], d.get("end_line"), origin)


def extension_origin(root: str, torch_version: str = "") -> Origin:
    """The origin of a C++ extension project's files, in the folder `root`
    (Note [registrations from outside torch] in kernelmap.dispatch); the torch
    version it was loaded by, when a live dispatcher reported it."""
    return Origin(OriginKind.EXTENSION, torch_version, root=root, label=f"extension {root}")


class OriginTable:
    """The origins one JSON document names, each once, by a short key (its
    label, made unique): locations refer to them by key, so that a document
    loads back with every location's origin intact."""

    def __init__(self, origins: Mapping[str, Origin] | None = None):
        self._by_key: dict[str, Origin] = dict(origins or {})
        self._keys: dict[Origin, str] = {o: k for k, o in self._by_key.items()}

    def key(self, origin: Origin) -> str:
        found = self._keys.get(origin)
        if found is None:
            found = origin.label or origin.kind.value
            n = 2
            while found in self._by_key:
                found = f"{origin.label or origin.kind.value} #{n}"
                n += 1
            self._by_key[found] = origin
            self._keys[origin] = found
        return found

    def get(self, key: str | None) -> Origin | None:
        if key is None:
            return None
        if key not in self._by_key:
            raise ValueError(f"a location names origin {key!r}, which the document's origin table lacks")
        return self._by_key[key]

    def to_json(self) -> dict[str, Any]:
        return {k: o.to_json() for k, o in self._by_key.items()}

    @staticmethod
    def from_json(d: Mapping[str, Any] | None) -> OriginTable:
        return OriginTable({k: Origin.from_json(v) for k, v in (d or {}).items()})


# Note [versions on locations]
# One answer may hold locations of several versions: a selected 2.6.0 tree's
# yaml and kernels beside the installed 2.13 wheel's live registrations; or of
# one version that is not the installed torch's (a tree answers alone). Then
# a line number alone misleads (native_functions.yaml:1724 is the tree's, the
# wheel's entry is at :1701), so every location of such an answer carries its
# version in text, as it does in JSON through its origin. `tags_versions`
# decides, once per answer; renderers write each location with `located`.


def tags_versions(locations: Iterable[Location | None], installed: str | None = None) -> bool:
    """Whether an answer's locations need their versions said: they come from
    more than one version, or from one that is not `installed` (the installed
    torch's, when the answer knows it)."""
    versions = {loc.origin.version for loc in locations if loc is not None and loc.origin is not None and loc.origin.version}
    return len(versions) > 1 or (bool(installed) and bool(versions) and versions != {installed})


def located(location: Location | None, versions: bool = False, missing: str = "") -> str:
    """`path:line`, with `(version)` after it when `versions` (Note [versions on locations])."""
    if location is None:
        return missing
    if versions and location.origin is not None and location.origin.version:
        return f"{location} ({location.origin.version})"
    return str(location)


def location_json(location: Location | None, origins: OriginTable | None = None) -> dict[str, Any] | None:
    return location.to_json(origins) if location is not None else None


def location_from_json(d: Mapping[str, Any] | None, origins: OriginTable | None = None) -> Location | None:
    return Location.from_json(d, origins) if d is not None else None


@functools.lru_cache(maxsize=16384)
def _disk_file(origin: Origin, path: str) -> str | None:
    """Where `path` of `origin` lies on this machine, as text: an answer names
    the same files at many of its locations (a Path made per location is dear)."""
    disk = origin.disk_path(path)
    return str(disk) if disk is not None else None
