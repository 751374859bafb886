"""Source trees on this machine: a registry (one JSON file in the cache dir)
of PyTorch checkouts and fetched archives, each described by its
`version.txt` and, where known, its git commit.

A tree is added once (`add_tree`, or `fetch_tree` in `kernelmap.source.fetch`)
and then named by its registry name. `select_tree` picks the tree a command
works on: the one matching the installed torch's commit when present, else
the one named by `--source` or `KERNELMAP_SOURCE`.
"""

from __future__ import annotations

import json
import os
import re
import stat
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

from kernelmap import env
from kernelmap.errors import BadInput, KernelmapError, NoSourceTree, SourceError
from kernelmap.model import Origin, OriginKind
from kernelmap.safefiles import read_text

SOURCE_ENV = "KERNELMAP_SOURCE"
REGISTRY_VERSION = 1

# The parts of a tree the index reads; a tree with none of them is no PyTorch tree.
INDEXED_PARTS = ("aten", "c10", "torch/csrc")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,99}")  # it names files: keep it short
# A name read back from the registry: any length (older versions took longer ones, still to be
# removable), never a path (`../x` as a name would make `source remove` delete outside the cache).
_STORED_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")
_SHA = re.compile(r"[0-9a-f]{40}")


class RegistryWarning(UserWarning):
    """Part of the tree registry could not be read; the rest was."""


class NotATree(SourceError):
    """A directory that holds no PyTorch source (no version.txt, no aten/ c10/ torch/csrc)."""


class UnknownTree(SourceError):
    """A tree name the registry does not hold."""


@dataclass(frozen=True)
class Tree:
    """One registered PyTorch source tree."""

    name: str  # registry name: "pytorch-2.6.0+dfsg", "pytorch-1eba9b3aa3c4"
    root: Path
    version: str  # the tree's version.txt: "2.6.0a0"
    commit: str | None = None  # git HEAD (checkout) or the archive's commit (fetched)
    kind: str = "local"  # local | fetched

    @property
    def origin(self) -> Origin:
        """Where this tree's locations come from; its commit pins links."""
        return Origin(OriginKind.TREE, self.version, self.commit, root=str(self.root), label=f"tree {self.name}")

    @property
    def missing_parts(self) -> tuple[str, ...]:
        """The indexed parts (aten, c10, torch/csrc) this tree lacks."""
        return tuple(p for p in INDEXED_PARTS if not (self.root / p).is_dir())

    def to_json(self) -> dict:
        d = asdict(self)
        d["root"] = str(self.root)
        return d

    @staticmethod
    def from_json(d: dict) -> Tree:
        """The tree of one registry entry; ValueError when it is not of the
        shape `to_json` writes."""
        if not isinstance(d, dict):
            raise ValueError(f"an entry is a JSON object, not {type(d).__name__}")
        for key in ("name", "root", "version"):
            if not isinstance(d.get(key), str) or not d[key]:
                raise ValueError(f"an entry's {key!r} is a non-empty string, not {d.get(key)!r:.80}")
        if not _STORED_NAME.fullmatch(d["name"]):  # it names the index's files: `../` would reach outside the cache
            raise ValueError(f"an entry's 'name' is letters, digits and . _ + -, not {d['name']!r:.80}")
        commit, kind = d.get("commit"), d.get("kind", "local")
        if commit is not None and not (isinstance(commit, str) and _SHA.fullmatch(commit)):
            raise ValueError(f"an entry's 'commit' is 40 hex digits or null, not {commit!r:.80}")
        if kind not in ("local", "fetched"):
            raise ValueError(f"an entry's 'kind' is 'local' or 'fetched', not {kind!r:.80}")
        return Tree(d["name"], Path(d["root"]), d["version"], commit, kind)


# ---------------------------------------------------------------------------
# Reading a tree's identity
# ---------------------------------------------------------------------------


def _small_text(path: Path, limit: int = 1 << 20) -> str | None:
    """The text of a small regular file; None when `path` is absent or no
    regular file (a FIFO would block the read for ever)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except (OSError, ValueError):
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, limit).decode("utf-8", errors="replace")
    except OSError:
        return None
    finally:
        os.close(fd)


def read_version(root: Path) -> str:
    """The tree's version.txt, stripped; NotATree when absent or empty."""
    text = _small_text(root / "version.txt", 4096)
    if text is None:
        raise NotATree(f"{root} is not a PyTorch source tree: it has no version.txt (a regular file)")
    version = text.strip()
    if not version or len(version) > 64 or any(c < " " or c == "\x7f" for c in version):
        raise NotATree(f"{root}/version.txt does not hold one version line")
    return version


def read_git_head(root: Path) -> str | None:
    """The commit a checkout's HEAD names, read from .git without the git binary.

    Follows a symbolic ref through loose refs and packed-refs, and a `.git`
    file (`gitdir: ...`, as in worktrees and submodules). None when there is
    no .git or the ref is unborn.
    """
    git = root / ".git"
    if git.is_file():
        text = (_small_text(git) or "").strip()
        if not text.startswith("gitdir:"):
            return None
        git = (root / text[len("gitdir:") :].strip()).resolve()
    if not git.is_dir():
        return None
    head = (_small_text(git / "HEAD") or "").strip()
    if _SHA.fullmatch(head):
        return head
    if not head.startswith("ref:"):
        return None
    ref = head[len("ref:") :].strip()
    # A worktree keeps HEAD in its own dir but refs in the common dir.
    dirs = [git]
    common = git / "commondir"
    if common.is_file():
        dirs.append((git / (_small_text(common) or "").strip()).resolve())
    for d in dirs:
        sha = (_small_text(d / ref) or "").strip()
        if _SHA.fullmatch(sha):
            return sha
        packed = _small_text(d / "packed-refs", 64 << 20)
        if packed is not None:
            for line in packed.splitlines():
                parts = line.split(" ", 1)
                if len(parts) == 2 and parts[1].strip() == ref and _SHA.fullmatch(parts[0]):
                    return parts[0]
    return None


def inspect_tree(root: Path, name: str | None = None, *, kind: str = "local", commit: str | None = None) -> Tree:
    """Describe the PyTorch tree at `root` (not registering it)."""
    root = Path(root).expanduser()
    if not _is_dir(root):
        raise NotATree(f"{str(root)[:200]} is not a directory")
    try:
        root = root.resolve()
    except (OSError, RuntimeError) as e:
        raise NotATree(f"{str(root)[:200]} cannot be resolved ({getattr(e, 'strerror', None) or e})") from None
    version = read_version(root)
    if all(not (root / p).is_dir() for p in INDEXED_PARTS):
        raise NotATree(f"{root} is not a PyTorch source tree: it has none of {', '.join(INDEXED_PARTS)}")
    tree = Tree(name or _default_name(root)[:100], root, version, commit or read_git_head(root), kind)
    if not _NAME.fullmatch(tree.name):
        raise BadInput(f"a tree name is 1 to 100 letters, digits and . _ + -, starting with a letter or digit, not {tree.name[:120]!r}")
    return tree


def _is_dir(path: Path) -> bool:
    """Like Path.is_dir, but False for any OS error (a name too long, a loop)."""
    try:
        return path.is_dir()
    except (OSError, ValueError):
        return False


def _default_name(root: Path) -> str:
    name = re.sub(r"[^A-Za-z0-9._+-]", "-", root.name).lstrip("._+-")
    return name or "tree"


# ---------------------------------------------------------------------------
# The registry
# ---------------------------------------------------------------------------


def registry_path() -> Path:
    return env.cache_dir() / "trees.json"


def _load() -> dict[str, Tree]:
    path = registry_path()
    try:
        data = json.loads(read_text(path, "the tree registry"))
    except FileNotFoundError:
        return {}
    except NotADirectoryError:  # removing trees.json would not help
        raise SourceError(f"the cache directory {str(path.parent)[:200]} is a file, not a directory"
                          + (f" (set by {env.CACHE_ENV})" if os.environ.get(env.CACHE_ENV) else "")) from None
    except (OSError, ValueError, RecursionError) as e:
        raise SourceError(f"the tree registry {path} is unreadable ({e}); remove it and add the trees again") from None
    if not isinstance(data, dict) or data.get("version") != REGISTRY_VERSION or not isinstance(data.get("trees", []), list):
        _warn_once(f"the tree registry {path} is of another format; ignoring it")
        return {}
    trees = {}
    for i, d in enumerate(data.get("trees", [])):
        try:
            tree = Tree.from_json(d)
        except ValueError as e:  # one bad entry must not make every tree command fail
            _warn_once(f"the tree registry {path}: entry {i} is ignored ({e})")
            continue
        trees[tree.name] = tree
    return trees


_WARNED: set[str] = set()


def _warn_once(message: str) -> None:
    """A registry problem is said once per process, though a command reads the registry several times."""
    if message not in _WARNED:
        _WARNED.add(message)
        warnings.warn(message, RegistryWarning, stacklevel=4)


def _save(trees: dict[str, Tree]) -> None:
    """Write the registry atomically: a temporary file renamed over the old one."""
    path = registry_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"version": REGISTRY_VERSION, "trees": [t.to_json() for t in sorted(trees.values(), key=lambda t: t.name)]}
    import tempfile  # writing the registry only: selecting a tree reads it

    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".trees-", suffix=".json")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(payload, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _locked():
    from filelock import FileLock

    path = registry_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    return FileLock(str(path) + ".lock", timeout=30)


def register(tree: Tree) -> Tree:
    """Add or replace `tree` in the registry; a name held by another root is refused."""
    try:
        with _locked():
            trees = _load()
            old = trees.get(tree.name)
            if old is not None and old.root != tree.root:
                raise SourceError(f"a tree named {tree.name!r} already exists at {old.root}; pick another name with --name")
            trees[tree.name] = tree
            _save(trees)
    except OSError as e:  # the cache dir unwritable, full, or its path too long
        raise SourceError(f"cannot write the tree registry in {registry_path().parent}: {e.strerror or e}") from None
    return tree


def add_tree(path: Path | str, name: str | None = None) -> Tree:
    """Register the local PyTorch checkout at `path` (any version)."""
    return register(inspect_tree(Path(path), name))


def list_trees() -> list[Tree]:
    """Every registered tree, by name."""
    return sorted(_load().values(), key=lambda t: t.name)


def get_tree(name: str) -> Tree:
    tree = _load().get(name)
    if tree is None:
        known = ", ".join(t.name for t in list_trees()) or "none; add one with `kernelmap source add PATH`"
        raise UnknownTree(f"no source tree named {name!r} (known: {known})")
    return tree


def remove_tree(name: str) -> Tree:
    """Forget a tree and delete its index; a fetched tree's files are deleted too."""
    import shutil

    from filelock import Timeout

    from kernelmap.source.records import clean_stale_copies, index_lock, index_path

    path = index_path(known := get_tree(name))
    path.parent.mkdir(parents=True, exist_ok=True)
    build_lock = index_lock(path)
    try:  # a running build would rename its copy over the deleted index afterwards
        build_lock.acquire(timeout=0)
    except Timeout:
        raise SourceError(f"{name!r} is being indexed by another process; remove it when that build has finished") from None
    try:
        with _locked():
            trees = _load()
            tree = trees.pop(name, None)
            if tree is None or tree != known:
                raise UnknownTree(f"no source tree named {name!r}")
            _save(trees)
        path.unlink(missing_ok=True)
        path.with_name(path.name + ".record").unlink(missing_ok=True)
        for stale in path.parent.glob(f".{path.name}.*.tmp"):
            stale.unlink(missing_ok=True)
        clean_stale_copies(path.parent)
        Path(build_lock.lock_file).unlink(missing_ok=True)
    finally:
        build_lock.release()
    if tree.kind == "fetched" and _fetched_folder(tree):
        shutil.rmtree(tree.root, ignore_errors=True)
    return tree


def _fetched_folder(tree: Tree) -> bool:
    """Whether `tree.root` is the folder `source fetch` made for its commit
    (`<cache>/trees/pytorch-<12 hex digits>`): only that is deleted with the
    tree; a registry entry naming any other folder (the cache itself, its
    codegen) is forgotten, never deleted."""
    expected = env.cache_dir() / "trees" / f"pytorch-{(tree.commit or '')[:12]}"
    try:
        return bool(tree.commit) and tree.root in (expected, expected.resolve()) and not tree.root.is_symlink()
    except (OSError, RuntimeError):
        return False


# Note [the default tree]
# Every command that reads a source tree picks it by one rule, stated in
# `--source`'s help and here, in this order:
#   1. --source NAME|PATH (a registered name, or a folder inspected as it is);
#   2. the registered tree of the installed torch's commit;
#   3. $KERNELMAP_SOURCE;
#   4. the only registered tree;
#   5. of several, the one nearest the installed torch's version (indexed
#      trees before others; then the newer; then by name).
# A choice among several (5) is said in the answer, text and JSON (a note:
# `TreeChoice.note`), so that registering a second tree never changes an
# answer without a word.


@dataclass(frozen=True)
class TreeChoice:
    """The tree a command reads, and which rule of Note [the default tree] chose it."""

    tree: Tree
    rule: str  # "source" | "commit" | "environment" | "only" | "nearest"
    note: str | None = None  # said in the answer: how one of several trees was chosen


def _version_numbers(version: str) -> tuple[int, ...]:
    """(2, 6, 0) of "2.6.0a0" or "2.13.0+cpu"; () when it holds no number."""
    return tuple(int(n) for n in re.findall(r"\d+", version.split("+")[0])[:3])


def _nearest(trees: list[Tree], installed: str | None) -> Tree:
    from kernelmap.source.records import index_path

    wanted = _version_numbers(installed or "")

    def distance(t: Tree) -> tuple:
        have = _version_numbers(t.version)
        gap = tuple(abs(a - b) for a, b in zip(have + (0,) * 3, wanted + (0,) * 3)) if wanted and have else (10**6,)
        try:
            indexed = index_path(t).is_file()
        except OSError:
            indexed = False
        return (not indexed, gap, tuple(-n for n in have), t.name)

    return min(trees, key=distance)


def choose_tree(name: str | None = None) -> TreeChoice:
    """The tree a command works on, by Note [the default tree], and the rule that chose it."""
    trees = list_trees()
    installed = None
    if name is None:
        try:
            install = env.torch_install()
            commit, installed = install.commit, install.version
        except KernelmapError:
            commit = None
        if commit:
            for t in trees:
                if t.commit == commit:
                    return TreeChoice(t, "commit")
        name = os.environ.get(SOURCE_ENV) or None
        if name is not None:
            return TreeChoice(_named(name, trees), "environment")
        if len(trees) == 1:
            return TreeChoice(trees[0], "only")
        if not trees:
            raise NoSourceTree("no source tree selected: add one with `kernelmap source add PATH` or `kernelmap source fetch`")
        tree = _nearest(trees, installed)
        note = (f"{len(trees)} source trees are registered; tree {tree.name} ({tree.version}) answers, the one nearest "
                f"the installed torch {installed or '(unknown)'} (pick another with --source or {SOURCE_ENV})")
        return TreeChoice(tree, "nearest", note)
    return TreeChoice(_named(name, trees), "source")


def select_tree(name: str | None = None) -> Tree:
    """The tree a command works on (Note [the default tree]): `name`
    (`--source`), else the installed torch's commit's tree, KERNELMAP_SOURCE,
    the only registered tree, or of several the one nearest the installed
    torch. A name may also be a directory, which is inspected without being
    registered."""
    return choose_tree(name).tree


def _named(name: str, trees: list[Tree]) -> Tree:
    """The tree `name` names: a registered name, or a folder."""
    for t in trees:
        if t.name == name:
            return t
    if os.sep in name or _is_dir(Path(name)):
        if not _is_dir(Path(name).expanduser()):
            raise UnknownTree(f"no source tree named {name[:200]!r}, and no such directory")
        root = Path(name).expanduser().resolve()
        named = [t for t in trees if t.root == root]
        if named:  # several names for one directory: one that is indexed
            from kernelmap.source.records import index_path

            return next((t for t in named if index_path(t).exists()), named[0])
        return inspect_tree(root)
    return get_tree(name)


def has_python(root: Path) -> bool:
    """Whether a tree holds its own Python package (torch/__init__.py, torch/nn/)."""
    return (root / "torch/__init__.py").is_file() and (root / "torch/nn/modules").is_dir()
