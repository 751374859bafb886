"""Facts about this machine that every producer needs, found without importing
torch: the cache directory, and the installed torch's version, commit and files
(read from `torch/version.py` and the wheel's layout on disk)."""

from __future__ import annotations

import functools
import importlib.util
import os
import re
from dataclasses import dataclass
from pathlib import Path

from kernelmap.errors import TorchUnavailable
from kernelmap.model import Origin, OriginKind

CACHE_ENV = "KERNELMAP_CACHE_DIR"


def cache_dir() -> Path:
    """The user cache directory (`KERNELMAP_CACHE_DIR` overrides platformdirs)."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env)
    import platformdirs

    return Path(platformdirs.user_cache_dir("kernelmap"))


def torchgen_environment(tree: Path | None) -> tuple[dict[str, str], str | None]:
    """The environment and working directory of a subprocess that must run a
    tree's own torchgen (and tools/) rather than the installed one: the tree's
    root first on PYTHONPATH (Note [one torchgen per interpreter] in
    catalog/store.py). With no tree, the current environment unchanged."""
    environ = dict(os.environ)
    if tree is None:
        return environ, None
    environ["PYTHONPATH"] = os.pathsep.join([str(tree), environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return environ, str(tree)


def is_writable_dir(path: Path) -> bool:
    """True when files can be created in `path` (creating it if need be)."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        import tempfile  # only here: reading the cache needs no probe

        with tempfile.NamedTemporaryFile(dir=path, prefix=".probe-"):
            return True
    except OSError:
        return False


@dataclass(frozen=True)
class TorchInstall:
    """The installed torch wheel, as found on disk."""

    version: str  # "2.13.0+cpu"
    commit: str | None  # torch.version.git_version
    cuda: str | None  # torch.version.cuda: None on a CPU build
    site_packages: Path  # the directory that holds torch/ and torchgen/

    @property
    def torch_dir(self) -> Path:
        return self.site_packages / "torch"

    @property
    def torchgen_dir(self) -> Path:
        return self.site_packages / "torchgen"

    @property
    def origin(self) -> Origin:
        """The wheel's files, named by their repository paths."""
        return Origin(
            OriginKind.WHEEL,
            self.version,
            self.commit,
            root=str(self.site_packages),
            remap=(
                ("aten/src/ATen/native/", "torchgen/packaged/ATen/native/"),
                ("aten/src/ATen/templates/", "torchgen/packaged/ATen/templates/"),
                ("tools/autograd/", "torchgen/packaged/autograd/"),
            ),
            label=f"torch {self.version}",
        )

    @property
    def native_yaml(self) -> Path:
        return self.torchgen_dir / "packaged/ATen/native/native_functions.yaml"

    @property
    def tags_yaml(self) -> Path:
        return self.torchgen_dir / "packaged/ATen/native/tags.yaml"

    @property
    def derivatives_yaml(self) -> Path:
        return self.torchgen_dir / "packaged/autograd/derivatives.yaml"


_VERSION_FIELD = re.compile(r"^(__version__|git_version|cuda)\s*(?::[^=]*)?=\s*(.+)$", re.M)


@functools.lru_cache(maxsize=1)
def torch_install() -> TorchInstall:
    """Find the installed torch without importing it."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        raise TorchUnavailable("torch is not installed in this environment (pip install torch==2.13.0)")
    torch_dir = Path(next(iter(spec.submodule_search_locations)))
    fields: dict[str, str | None] = {}
    try:
        text = (torch_dir / "version.py").read_text()
    except OSError as e:
        raise TorchUnavailable(f"cannot read torch/version.py: {e}") from None
    for key, value in _VERSION_FIELD.findall(text):
        value = value.strip()
        fields[key] = None if value == "None" else value.strip("'\"")
    if not fields.get("__version__"):
        raise TorchUnavailable(f"torch/version.py in {torch_dir} names no __version__")
    return TorchInstall(
        version=fields["__version__"] or "",
        commit=fields.get("git_version") if fields.get("git_version") not in (None, "Unknown") else None,
        cuda=fields.get("cuda"),
        site_packages=torch_dir.parent,
    )


_DTYPE_LINE = re.compile(r"^(\w+): dtype = \.\.\.$", re.M)


@functools.lru_cache(maxsize=1)
def torch_dtypes() -> frozenset[str]:
    """The dtype names of the installed torch (`float32`, `bfloat16`, `half`...),
    read from its type stubs (`torch/_C/__init__.pyi`) without importing it."""
    install = torch_install()
    try:
        text = (install.torch_dir / "_C" / "__init__.pyi").read_text(encoding="utf-8")
    except OSError as e:
        raise TorchUnavailable(f"cannot read the installed torch's type stubs: {e}") from None
    names = frozenset(_DTYPE_LINE.findall(text))
    if not names:
        raise TorchUnavailable(f"{install.torch_dir / '_C' / '__init__.pyi'} declares no dtypes")
    return names


def process_alive(pid: int) -> bool:
    """Whether process `pid` exists on this machine (a signal 0 test): what
    decides that a temporary file or folder named after its owner is left over."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):  # someone else's process; a number no process can have
        return True
    return True
