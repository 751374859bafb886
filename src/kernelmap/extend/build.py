"""Load a custom kernel into this process: a built library (`.so`), or a
scaffolded project folder, whose package is imported (it builds just in time
when it has to). A failed build becomes a `BuildError` naming the first
compiler error by file:line, relative to the project.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from kernelmap.errors import BadInput
from kernelmap.extend.errors import BuildError
from kernelmap.extend.project import MANIFEST
from kernelmap.safefiles import read_text

__all__ = ["Loaded", "load_extension", "first_compiler_error"]

# g++/clang: "path:line:col: error: message"; nvcc: "path(line): error: message"
_GCC_ERROR = re.compile(r"^(?P<path>[^\s:][^:\n]*):(?P<line>\d+):(?:\d+:)?\s*(?:fatal )?error:\s*(?P<msg>.+)$", re.M)
_NVCC_ERROR = re.compile(r"^(?P<path>[^\s(][^(\n]*)\((?P<line>\d+)\):\s*(?:catastrophic )?error:?\s*(?P<msg>.+)$", re.M)


@dataclass(frozen=True)
class Loaded:
    """What `load_extension` loaded."""

    path: Path  # the library, or the project folder
    package: str | None  # the imported package of a project
    custom_op: str | None  # "kernelmap_ext::myconv", from a project's manifest


def first_compiler_error(log: str, root: Path | None = None) -> str | None:
    """"csrc/x.cpp:12: error: ..." for the first error in a compiler log."""
    found = [m for rx in (_GCC_ERROR, _NVCC_ERROR) for m in rx.finditer(log)]
    if not found:
        return None
    m = min(found, key=lambda m: m.start())
    path = Path(m["path"])
    if root is not None:
        try:
            path = path.resolve().relative_to(root.resolve())
        except ValueError:
            pass
    return f"{path}:{m['line']}: error: {m['msg'].strip()}"


def _import_project(root: Path, package: str):
    init = root / package / "__init__.py"
    if not init.exists():
        raise BadInput(f"{root} names package {package!r} in {MANIFEST}, but {init} is missing")
    loaded = sys.modules.get(package)
    if loaded is not None:
        if Path(loaded.__file__ or "").resolve() == init.resolve():
            return loaded
        raise BadInput(f"another module named {package!r} is loaded already ({loaded.__file__}); rename the project")
    spec = importlib.util.spec_from_file_location(package, init, submodule_search_locations=[str(init.parent)])
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[package] = module
    try:
        spec.loader.exec_module(module)
    except RuntimeError as e:
        del sys.modules[package]
        text = str(e)
        if "Error building extension" not in text and "error:" not in text:
            raise
        where = first_compiler_error(text, root)
        raise BuildError(f"building {root.name} failed: {where or text.splitlines()[0]}", log=text) from None
    except BaseException:
        sys.modules.pop(package, None)
        raise
    return module


def load_extension(path: str | Path) -> Loaded:
    """Load `path`: a shared library (its TORCH_LIBRARY registrations run), or a
    folder written by `scaffold` (its package is imported: ahead-of-time library
    if current, else a just-in-time build)."""
    import torch

    p = Path(path)
    if p.is_file() and p.suffix in (".so", ".dylib", ".dll", ".pyd"):
        try:
            torch.ops.load_library(str(p))
        except OSError as e:
            raise BadInput(f"cannot load {p}: {e}") from None
        return Loaded(p, None, None)
    if p.is_dir():
        manifest = p / MANIFEST
        if not manifest.exists():
            raise BadInput(f"{p} is no project written by kernelmap scaffold (no {MANIFEST})")
        try:
            meta = json.loads(read_text(manifest, "the project's manifest"))
            package = meta["package"]
            if not isinstance(package, str):
                raise TypeError(f"its package is {type(package).__name__}")
        except (OSError, ValueError, RecursionError, KeyError, TypeError) as e:
            raise BadInput(f"{manifest} is not a manifest written by kernelmap scaffold ({type(e).__name__}: {str(e)[:80]})") from None
        _import_project(p, package)
        return Loaded(p, package, meta.get("custom_op") if isinstance(meta, dict) else None)
    raise BadInput(f"--load takes a scaffolded project folder or a shared library (.so), not {path}")
