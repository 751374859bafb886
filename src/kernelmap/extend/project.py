"""`scaffold`: an operator of the catalog -> a small extension project that
defines a custom operator with the same schema (plus extra arguments), a
reference CPU kernel, an optional CUDA kernel, fake and autograd
registrations, both build routes, tests against the original and a benchmark.

Imports no torch: the schema comes from the catalog, torchgen types it, and
Jinja2 writes the files (templates/ beside this module).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib.machinery
import json
import os
import shlex
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import jinja2

from kernelmap import __version__
from kernelmap.errors import BadInput
from kernelmap.extend.errors import OutputExists
from kernelmap.extend.families import BACKEND_OPS, BATCH_NORM_MUTATED, BATCH_NORM_OPS, family_of, pointwise_formula, reduction_of
from kernelmap.extend.schema import CustomOpSpec, Param, check_identifier, check_namespace, custom_op_spec
from kernelmap.model import Op
from kernelmap.safefiles import read_bytes, read_text

__all__ = ["DEFAULT_NAMESPACE", "KERNELS", "MANIFEST", "Scaffold", "scaffold", "render_project"]

# What the convolution family's kernels compute: "aten", the call into ATen that the
# original makes (plus an elementwise CUDA epilogue), or "direct", a direct
# convolution loop on the CPU and a tiled CUDA kernel.
KERNELS = ("aten", "direct")

DEFAULT_NAMESPACE = "kernelmap_ext"
MANIFEST = "kernelmap.json"  # written into every project; `verify --load DIR` reads it

_FAMILY_NOTES = {
    "pointwise": "broadcast, promote, one loop over the elements",
    "reduction": "move the reduced dimensions last, then one loop per output element",
    "convolution": "the call into ATen that aten::convolution makes, `at::_convolution`",
    "convolution/direct": "a direct convolution loop (groups, stride, padding, dilation), and a tiled CUDA kernel",
    "batch_norm": "a loop over channels: statistics, then normalisation",
    "aten": "a call into ATen's own operator",
}

_ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("kernelmap.extend", "templates"),
    undefined=jinja2.StrictUndefined,
    keep_trailing_newline=True,
    trim_blocks=True,
    lstrip_blocks=True,
    autoescape=False,
)


def cpp_string(text: str) -> str:
    """`text` as a C++ string literal that holds exactly its UTF-8 bytes:
    quotes and backslashes escaped, a question mark after another too (no
    trigraph), every byte outside printable ASCII as a three-digit octal
    escape (Note [defaults are values] in kernelmap.extend.schema)."""
    out: list[str] = []
    for byte in text.encode("utf-8"):
        ch = chr(byte)
        if ch in '"\\' or (ch == "?" and out and out[-1] in ("?", "\\?")):
            out.append("\\" + ch)
        elif 0x20 <= byte < 0x7F:
            out.append(ch)
        else:
            out.append(f"\\{byte:03o}")
    return '"' + "".join(out) + '"'


_ENV.filters["py"] = repr  # a Python string literal
_ENV.filters["cpp"] = cpp_string
_ENV.filters["shell"] = shlex.quote  # one word of a shell command line


@dataclass(frozen=True)
class Scaffold:
    """What `scaffold` wrote."""

    root: Path  # the project folder
    spec: CustomOpSpec
    family: str  # Note [reference kernels] in kernelmap.extend.families
    files: tuple[Path, ...]  # relative to root
    cuda: bool
    kept: tuple[Path, ...] = ()  # files of the project the user edited, left as they were (--force)

    @property
    def package(self) -> str:
        return self.spec.name

    def to_json(self) -> dict:
        return {
            "kernelmap": __version__,
            "op": self.spec.op,
            "op_schema": self.spec.op_schema,
            "custom_op": self.spec.qualified,
            "schema": self.spec.schema,
            "package": self.package,
            "family": self.family,
            "cuda": self.cuda,
            "extra": [p.schema_text for p in self.spec.extras],
            "files": [str(f) for f in self.files],
        }


def _example_value(p: Param) -> str:
    """Python source of a plausible value for an argument of the generic family."""
    if p.is_tensor:
        return "rand()"
    if p.default is not None:
        return p.py_default or "None"
    return {
        "Tensor?": "None",
        "Scalar": "2",
        "float": "0.5",
        "int": "1",
        "bool": "False",
        "int[]": "[1]",
        "Tensor[]": "[rand(), rand()]",
    }.get(p.type, "None")


def _differentiable(spec: CustomOpSpec, op: Op) -> tuple[int, ...]:
    """Positions of the positional arguments that `op`'s derivative formulas cover."""
    if op.autograd is None:
        return ()
    names = {name.strip() for f in op.autograd.formulas for name in f.inputs}
    # an argument the kernel writes (running statistics) is state, not an input to differentiate
    return tuple(i for i, p in enumerate(spec.positional) if p.name in names and not p.is_mutated)


def _aten_cpp_call(spec: CustomOpSpec, op: Op) -> str:
    if spec.op in BACKEND_OPS:  # Note [backend-specific operators]
        return BACKEND_OPS[spec.op].cpp
    if spec.op == "aten::convolution":
        # the flags aten::convolution passes: the user's torch.backends.cudnn settings, never constants
        return ("at::_convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups, "
                "/*benchmark=*/at::globalContext().benchmarkCuDNN(), "
                "/*deterministic=*/at::globalContext().deterministicCuDNN() || at::globalContext().deterministicAlgorithms(), "
                "/*cudnn_enabled=*/at::globalContext().userEnabledCuDNN(), /*allow_tf32=*/at::globalContext().allowTF32CuDNN())")
    args = [p.name for p in spec.originals]
    base = op.name.name
    if "function" in op.variants:
        return f"at::{base}({', '.join(args)})"
    first, *rest = args
    return f"{first}.{base}({', '.join(rest)})"


def _operator(name: str) -> Op:
    """The catalog's operator `name`; a Python name gets the operators it reaches as a hint."""
    from kernelmap.catalog import load_catalog
    from kernelmap.errors import UnknownName

    catalog = load_catalog()
    try:
        return catalog.get(name)
    except (UnknownName, BadInput) as e:
        try:
            reached = catalog.resolve(name)
        except (UnknownName, BadInput):
            raise e from None
        names = ", ".join(str(op.name) for op in reached[:3])
        raise BadInput(f"{name} is not an operator with a schema; it reaches {names}: scaffold one of those") from None


_CANONICAL = {  # the family reference's arguments, for the operators the family starts from
    "batch_norm": ("input, weight, bias, running_mean, running_var, training, momentum, eps", "r"),
    "convolution": ("input, weight, bias, stride, padding, dilation, transposed, output_padding, groups", "r"),
}


def render_project(op: Op, name: str, *, namespace: str = DEFAULT_NAMESPACE, extra: tuple[str, ...] = (), cuda: bool = False,
                   kernel: str = "aten") -> tuple[CustomOpSpec, str, dict[str, str]]:
    """(spec, family, {relative path: text}) of the project for `op`; writes nothing."""
    opname = str(op.name)
    mutated = BATCH_NORM_MUTATED if opname in BATCH_NORM_OPS else None  # Note [mutated arguments]
    spec = custom_op_spec(opname, op.schema, name, namespace, extra, extra_mutated=mutated)
    family = family_of(spec, op.tags)
    if kernel not in KERNELS:
        raise BadInput(f"--kernel is one of {', '.join(KERNELS)}, not {kernel!r}")
    if kernel == "direct" and family != "convolution":
        raise BadInput(f"--kernel direct is written for convolutions; {opname} is scaffolded as {family}")
    backend = BACKEND_OPS.get(opname)
    canonical, canonical_returns = (backend.canonical, backend.returns) if backend else _CANONICAL.get(family, ("", ""))
    pw = pointwise_formula(spec) if family == "pointwise" else None
    context = {
        "s": spec,
        "family": family,
        "family_note": _FAMILY_NOTES["convolution/direct" if kernel == "direct" else family],
        "kernel": kernel,
        "backend": backend,
        "canonical": canonical,
        "canonical_returns": canonical_returns,
        # arguments the kernel writes: the autograd kernel is then registered by hand
        "mutated": [p for p in spec.params if p.is_mutated],
        "original_signature": ", ".join(p.py_param for p in spec.originals if not p.kwarg_only)
        + ("" if not any(p.kwarg_only for p in spec.originals) else ", *, " + ", ".join(p.py_param for p in spec.originals if p.kwarg_only)),
        "pw": pw,
        "red": reduction_of(spec) if family == "reduction" else None,
        "cuda": cuda,
        "autograd": op.autograd if op.autograd and op.autograd.formulas else None,
        # non-tensor arguments of a pointwise formula, passed to the device as scalar_t
        "scalars": [p for p in spec.originals if not p.is_tensor],
        # extras the CUDA launcher takes: plain C++ scalars only
        "cuda_extras": [p for p in spec.extras if p.type in ("float", "int", "bool")],
        "aten_cpp_call": _aten_cpp_call(spec, op),
        "example_value": _example_value,
        "differentiable": _differentiable(spec, op),
        # the reference kernel's results are contiguous; ATen's may keep the input's layout
        "contiguous_results": family in ("pointwise", "reduction", "batch_norm") or kernel == "direct",
    }
    outputs = {
        f"csrc/{name}.cpp": "csrc/kernel.cpp.j2",
        f"{name}/__init__.py": "python/__init__.py.j2",
        f"{name}/_build.py": "python/_build.py.j2",
        f"{name}/cases.py": "python/cases.py.j2",
        "setup.py": "setup.py.j2",
        f"tests/test_{name}.py": "tests/test_kernel.py.j2",
        "tests/conftest.py": "tests/conftest.py.j2",
        f"bench_{name}.py": "bench.py.j2",
        "README.md": "README.md.j2",
    }
    if cuda:
        outputs[f"csrc/{name}_kernel.cu"] = "csrc/kernel.cu.j2"
        outputs[f"csrc/{name}_cuda.cpp"] = "csrc/kernel_cuda.cpp.j2"
    files = {}
    for path, template in outputs.items():
        try:
            files[path] = _ENV.get_template(template).render(**context)
        except jinja2.TemplateError as e:  # a template bug, not a user mistake: keep the traceback, add context
            raise RuntimeError(f"while rendering {template} for {op.name}: {e}") from e
    return spec, family, files


def _installed_module(name: str) -> bool:
    """Whether `name` is a module of the standard library or one installed
    on the path outside the current folder: `python -m kernelmap` puts the
    current folder first on the path, where a project scaffolded before
    (`./NAME`) is found as a package of that name."""
    if name in sys.stdlib_module_names or name in sys.builtin_module_names:
        return True
    here = {"", ".", os.getcwd()}
    return importlib.machinery.PathFinder.find_spec(name, [p for p in sys.path if p not in here]) is not None


def scaffold(
    op: str | Op,
    name: str,
    *,
    out: str | Path | None = None,
    namespace: str = DEFAULT_NAMESPACE,
    extra: tuple[str, ...] | list[str] = (),
    cuda: bool = False,
    force: bool = False,
    kernel: str = "aten",
) -> Scaffold:
    """Write the extension project for a custom operator `namespace::name` that
    starts as `op` (an operator of the catalog: "aten::relu", "add.Tensor") into
    `out` (default: ./NAME). Refuses an existing, non-empty folder unless
    `force`; see Note [scaffold writes only its own files]."""
    check_identifier(name, "NAME")
    check_namespace(namespace)
    if _installed_module(name):
        raise BadInput(f"NAME {name!r} is the name of an installed module; the project's package would hide it")
    if isinstance(op, str):
        op = _operator(op)
    root = Path(out) if out is not None else Path(name)
    if root.is_symlink():
        raise OutputExists(f"{root} is a symbolic link; scaffold does not write through links (choose another --out)")
    try:
        occupied = root.exists() and (not root.is_dir() or any(root.iterdir()))
    except OSError as e:
        raise BadInput(f"cannot read --out {root}: {e.strerror}") from None
    if occupied and not force:
        raise OutputExists(f"{root} exists; choose another --out or pass --force to overwrite it")
    if root.exists() and not root.is_dir():
        raise BadInput(f"{root} is a file, not a folder")
    spec, family, files = render_project(op, name, namespace=namespace, extra=tuple(extra), cuda=cuda, kernel=kernel)
    rels = tuple(sorted(files)) + (MANIFEST,)
    result = Scaffold(root, spec, family, tuple(Path(p) for p in rels), cuda)
    manifest = result.to_json()
    # What each file held as written: a later --force replaces or removes a
    # file only if it still holds that.
    manifest["sha256"] = {rel: _digest(text.encode()) for rel, text in sorted(files.items())}
    kept: list[str] = []
    try:
        if not root.exists():
            files[MANIFEST] = json.dumps(manifest, indent=2) + "\n"
            _write_new(root, files)
        else:
            kept = _write_over(root, files, manifest)
    except OSError as e:
        where = f" {e.filename}" if e.filename else ""
        raise BadInput(f"cannot write the project into {root}:{where}: {e.strerror}") from None
    return dataclasses.replace(result, kept=tuple(Path(rel) for rel in kept))


# Note [scaffold writes only its own files]
# A project folder holds the user's work beside what scaffold wrote. So a new
# folder is written whole under a hidden name and renamed into place (an
# interrupted scaffold leaves nothing at --out); over an existing folder
# (--force), scaffold writes only files its manifest (kernelmap.json) lists
# from the previous scaffold, and of those only the ones that still hold what
# that scaffold wrote (the manifest records each file's sha256): a file the
# user edited is kept as it is, and said so (the manifest keeps the digest of
# what scaffold last wrote there, so the next --force keeps it too; a manifest
# of an older kernelmap recorded no digests, so every listed file that differs
# from the new text counts as edited). Any other file in the way is refused;
# scaffold never writes through a symbolic link (--out itself included), and
# writes every file aside (a new file, never through whatever was left at the
# aside name) before it renames them into place, the manifest last: a write
# that fails leaves the folder as it was. A previous scaffold's file that this
# one no longer writes (another NAME) is removed only if it still holds what
# that scaffold wrote: an edited one, or one a hand-edited manifest lists,
# stays; so do folders that still hold anything. Nothing else is removed.


def _write_new(root: Path, files: dict[str, str]) -> None:
    root.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{root.name}.", suffix=".kernelmap-tmp", dir=root.parent))
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(staging, 0o777 & ~umask)  # a project folder like any other, not mkdtemp's private 0700
        for rel, text in files.items():
            path = staging / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        os.rename(staging, root)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _write_aside(path: Path, text: str) -> Path:
    """`text` in a new file beside `path`, to be renamed over it: never
    through a link or a file someone left at the aside name."""
    aside = path.with_name(f".{path.name}.kernelmap-tmp")
    if aside.is_symlink() or aside.is_file():
        aside.unlink()  # a link itself is removed, never followed
    elif aside.exists():
        raise OutputExists(f"{aside} is in the way of the file scaffold writes beside {path.name}; move it away")
    fd = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o666)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    return aside


def _previous_files(root: Path) -> tuple[set[str], dict[str, str] | None]:
    """The files the previous scaffold into `root` wrote, from its manifest,
    and the sha256 of each as written (None from a manifest of an older
    kernelmap, which recorded none)."""
    manifest = root / MANIFEST
    if manifest.is_symlink():
        raise OutputExists(f"{manifest} is a symbolic link; scaffold does not write through links")
    if not manifest.exists():
        return set(), None
    try:
        meta = json.loads(read_text(manifest, "the project's manifest"))  # a FIFO there is refused, not waited on
        listed, digests = meta.get("files"), meta.get("sha256")
    except (OSError, ValueError, RecursionError, AttributeError):
        listed = digests = None
    if not isinstance(listed, list) or not all(isinstance(f, str) for f in listed):
        raise OutputExists(f"{manifest} is not a manifest written by kernelmap scaffold; move it away or choose another --out")
    if digests is not None:
        digests = {k: v for k, v in digests.items() if isinstance(v, str)} if isinstance(digests, dict) else {}
    return {f for f in listed if _is_inside(f)}, digests


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _remove_empty_folders(root: Path, folder: Path) -> None:
    """`folder` and the folders above it inside `root`, while they are empty."""
    while folder != root and root in folder.parents:
        try:
            folder.rmdir()
        except OSError:  # not empty (or not ours to remove): the folders above hold it
            return
        folder = folder.parent


def _is_inside(rel: str) -> bool:
    parts = Path(rel).parts
    return bool(parts) and not Path(rel).is_absolute() and ".." not in parts


def _check_no_link(root: Path, rel: str) -> None:
    """Refuse `rel` when it, or a folder on the way to it inside `root`, is a symbolic link."""
    path = root
    for part in Path(rel).parts:
        path = path / part
        if path.is_symlink():
            raise OutputExists(f"{path} is a symbolic link; scaffold does not write through links (remove it or choose another --out)")


def _write_over(root: Path, files: dict[str, str], manifest: dict) -> list[str]:
    """Write `files` and then `manifest` over the previous scaffold in `root`
    (Note [scaffold writes only its own files]); the files kept as the user
    edited them."""
    previous, digests = _previous_files(root)
    kept: list[str] = []
    for rel in files:  # every refusal comes before the first write
        _check_no_link(root, rel)
        path = root / rel
        # a file the manifest lists with no digest beside those of the others was added to it by hand
        if path.exists() and (rel not in previous or (digests is not None and rel != MANIFEST and rel not in digests)):
            kind = "folder" if path.is_dir() else "file"
            raise OutputExists(f"{path} exists and is not a file of a previous scaffold; --force replaces only those "
                               f"(move this {kind} away or choose another --out)")
        if path.is_dir():
            raise OutputExists(f"{path} is a folder where scaffold writes a file")
        if rel != MANIFEST and path.is_file() and _is_edited(path, files[rel], (digests or {}).get(rel)):
            kept.append(rel)
    for rel in sorted(previous - set(files)):
        _check_no_link(root, rel)
    for rel in kept:  # what scaffold last wrote there, so that the edit is seen again next time
        manifest["sha256"][rel] = (digests or {}).get(rel) or manifest["sha256"][rel]
    files = {rel: text for rel, text in files.items() if rel not in kept}
    files[MANIFEST] = json.dumps(manifest, indent=2) + "\n"
    body = [rel for rel in files if rel != MANIFEST]
    # every file is written aside first: a write that fails leaves the folder as it was
    written: list[tuple[Path, Path]] = []
    made: list[Path] = []
    try:
        for rel in body + [MANIFEST]:
            path = root / rel
            missing = [d for d in (path.parent, *path.parent.parents) if d != root and root in d.parents and not d.exists()]
            path.parent.mkdir(parents=True, exist_ok=True)
            made.extend(reversed(missing))
            written.append((_write_aside(path, files[rel]), path))
    except BaseException:
        for aside, _ in written:
            aside.unlink(missing_ok=True)
        for folder in reversed(made):
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise
    for aside, path in written:  # the manifest last
        os.replace(aside, path)
    for rel in sorted(previous - set(files) - set(kept)):
        stale = root / rel
        if stale.is_file() and digests is not None and digests.get(rel) == _digest(read_bytes(stale, "a scaffolded file")):
            stale.unlink()
            _remove_empty_folders(root, stale.parent)
    return kept


def _is_edited(path: Path, new_text: str, written: str | None) -> bool:
    """Whether `path` holds neither what scaffold wrote there (`written`, its
    sha256; None when the manifest recorded none) nor `new_text`."""
    current = _digest(path.read_bytes())
    return current != written and current != _digest(new_text.encode())
