"""The live dispatcher of the installed torch: which kernel each dispatch key
has for an operator, where it was registered, and which keys a call with
given inputs passes through. The only producer that imports torch for a
static-looking answer; everything else reads the catalog.

    live_registrations("aten::add.Tensor")   # what was registered, per key
    live_table("aten::add.Tensor")           # what each runtime key would run
    dispatch_path("aten::add.Tensor", device="cpu", requires_grad=True)

Note [reading the dispatcher's dumps]
`torch._C._dispatch_dump(op)` lists registrations as the dispatcher holds
them (alias keys marked `[alias]`, shadowed ones `(inactive)`), each with the
file:line its `m.impl` stood on in the build that made the wheel (a builder
path like /__w/pytorch/pytorch/build/aten/src/ATen/RegisterCPU_0.cpp) or the
Python file that called `Library.impl`. `_dispatch_dump_table(op)` is the
computed table per runtime key, tagged `[kernel]`, `[math kernel]`
(CompositeImplicitAutograd), `[default backend kernel]` (CompositeExplicit*),
`[autograd kernel]`, `[backend fallback]`. Paths are cut at the first
repository folder (build/, aten/, torch/, c10/, ...) so they read as in a
checkout or build directory.
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass
from pathlib import Path

from kernelmap import env
from kernelmap.errors import BadInput, TorchUnavailable, UnknownName
from kernelmap.model import DispatchPath, DispatchStep, Kernel, Location, Origin, OriginKind, extension_origin

DEVICE_KEYS = {"cpu": "CPU", "cuda": "CUDA", "mps": "MPS", "meta": "Meta", "xpu": "XPU"}

_REPO_DIR = re.compile(r"/(build|aten|torch|c10|caffe2|functorch|third_party)/")
_DUMP_LINE = re.compile(
    r"^(?P<key>\w+)(?P<alias>\[alias\])?(?P<inactive> \(inactive\))?: (?P<fallthrough>fallthrough )?"
    r"registered at (?P<path>.+?):(?P<line>\d+)(?: :: .*)?$"
)
_TABLE_LINE = re.compile(
    r"^(?P<key>\w+): (?P<fallthrough>fallthrough )?registered at (?P<path>.+?):(?P<line>\d+) \[(?P<tag>[^\]]+)\]$"
)

# Runtime keys whose kernels do their part and pass the call on to the keys below
# (they `redispatch`): autograd records the graph, ADInplaceOrView bumps versions
# and sets up views, autocast casts, BackendSelect picks a backend for factories.
_REDISPATCHING_TAGS = {"autograd kernel"}
_REDISPATCHING_KEYS = {"ADInplaceOrView", "BackendSelect", "Tracer"}


def _torch():
    import sys

    from kernelmap import progress

    try:
        if "torch" in sys.modules:
            import torch
        else:
            with progress.step("importing torch for the live dispatcher"):
                import torch
    except ImportError as e:  # pragma: no cover - torch is a requirement
        raise TorchUnavailable(f"the live dispatcher needs torch: {e}") from None
    return torch


@functools.lru_cache(maxsize=1)
def _build_origin() -> Origin:
    install = env.torch_install()
    return Origin(OriginKind.BUILD, install.version, install.commit, label=f"build of torch {install.version}")


def registration_location(raw_path: str, line: int) -> tuple[Location, str]:
    """A dispatcher-reported path:line as a Location, and whether it is "cpp" or "python".

    Python registrations point into the installed wheel; C++ ones into the
    build that made it (see Note [reading the dispatcher's dumps]).
    """
    install = env.torch_install()
    site = str(install.site_packages) + "/"
    if raw_path.startswith(site):
        return Location(raw_path[len(site) :], line, origin=install.origin), "python"
    m = _REPO_DIR.search(raw_path)
    if _outside_torch(raw_path, m):
        return _extension_location(Path(raw_path), line, install.version), "cpp"
    path = raw_path[m.start() + 1 :] if m else raw_path.lstrip("/")
    return Location(path, line, origin=_build_origin()), "cpp"


# Note [registrations from outside torch]
# A C++ extension (a scaffolded project, any TORCH_LIBRARY_IMPL a user
# compiles) is registered from a file on this machine, which the dispatcher
# reports by its absolute path. It was read as a path of torch's build, which
# mangled `/tmp/ext/csrc/x.cpp` into `tmp/ext/csrc/x.cpp` and
# `/home/u/torch/ext/x.cpp` into `torch/ext/x.cpp`. Such a file is now
# named from its project, the nearest folder above it holding kernelmap.json,
# setup.py or pyproject.toml (else its own folder), with an origin of kind
# "extension" rooted there. A file of a PyTorch checkout built on this machine
# (`.../pytorch/build/aten/...` with `.../pytorch/aten/src/ATen` beside it)
# is still torch's own.
def _outside_torch(raw_path: str, repo_dir: re.Match | None) -> bool:
    if not os.path.isabs(raw_path) or not os.path.isfile(raw_path):
        return False
    return repo_dir is None or not os.path.isdir(os.path.join(raw_path[: repo_dir.start()], "aten", "src", "ATen"))


_PROJECT_FILES = ("kernelmap.json", "setup.py", "pyproject.toml")


def _extension_location(file: Path, line: int, torch_version: str) -> Location:
    folder = file.parent
    root = next((p for p in (folder, *folder.parents)[:4] if any((p / f).is_file() for f in _PROJECT_FILES)), folder)
    return Location(file.relative_to(root).as_posix(), line, origin=extension_origin(str(root), torch_version))


def _qualified(name: str) -> str:
    text = name.strip()
    if not text:
        raise BadInput("empty operator name")
    return text if "::" in text else f"aten::{text}"


def _dump(name: str) -> str:
    torch = _torch()
    qualified = _qualified(name)
    op_name, _, overload = qualified.partition(".")
    try:
        torch._C._dispatch_find_schema_or_throw(op_name, overload)
    except RuntimeError:
        raise UnknownName(name) from None
    return torch._C._dispatch_dump(qualified)


@dataclass(frozen=True)
class Registration:
    """One registration the dispatcher holds for an operator."""

    kernel: Kernel
    is_alias: bool  # registered to an alias key (Autograd, CompositeImplicitAutograd, ...)
    is_active: bool  # False when a later registration for the same key shadows it


def registrations(name: str) -> tuple[Registration, ...]:
    """Every registration of `name` (`aten::add.Tensor`), in the dispatcher's order."""
    result = []
    for text in _dump(name).splitlines():
        m = _DUMP_LINE.match(text)
        if not m or m["key"] == "debug":
            continue
        location, language = registration_location(m["path"], int(m["line"]))
        kind = "fallthrough" if m["fallthrough"] else language
        result.append(Registration(Kernel(m["key"], "", location, kind), bool(m["alias"]), not m["inactive"]))
    return tuple(result)


def live_registrations(name: str) -> tuple[Kernel, ...]:
    """The active registrations of `name`: one kernel per key, alias keys included."""
    return tuple(r.kernel for r in registrations(name) if r.is_active)


def schema_location(name: str) -> Location | None:
    """Where the operator's schema was registered (`RegisterSchema.cpp`, or a TORCH_LIBRARY)."""
    for text in _dump(name).splitlines():
        if text.startswith("debug: registered at "):
            path, _, line = text[len("debug: registered at ") :].rpartition(":")
            if line.isdigit():
                return registration_location(path, int(line))[0]
    return None


@dataclass(frozen=True)
class TableEntry:
    """What one runtime dispatch key runs for an operator."""

    key: str
    kernel: Kernel
    tag: str  # "kernel", "math kernel", "default backend kernel", "autograd kernel", "backend fallback"


def live_table(name: str) -> dict[str, TableEntry]:
    """The dispatcher's computed table for `name`, runtime key -> entry."""
    torch = _torch()
    _dump(name)  # raises UnknownName for unknown operators
    table = {}
    for text in torch._C._dispatch_dump_table(_qualified(name)).splitlines():
        m = _TABLE_LINE.match(text.strip())
        if not m:
            continue
        location, language = registration_location(m["path"], int(m["line"]))
        tag = m["tag"]
        if m["fallthrough"]:
            kind = "fallthrough"
        elif tag == "backend fallback":
            kind = "fallback"
        elif tag in ("math kernel", "default backend kernel") or (tag == "autograd kernel" and language == "cpp"):
            kind = "alias" if tag != "autograd kernel" else language
        else:
            kind = language
        table[m["key"]] = TableEntry(m["key"], Kernel(m["key"], "", location, kind), tag)
    return table


def python_kernel_source(name: str, key: str) -> tuple[str, Location] | None:
    """For a kernel registered from Python (a meta function, a decomposition):
    its qualified name and real file:line in the installed wheel."""
    import inspect

    torch = _torch()
    base, _, overload = _qualified(name).split("::", 1)[1].partition(".")
    try:
        op = getattr(getattr(torch.ops.aten, base), overload or "default")
    except AttributeError:
        return None
    dispatch_key = getattr(torch._C.DispatchKey, key, None)
    fn = op.py_kernels.get(dispatch_key) if dispatch_key is not None else None
    if fn is None:
        from torch._decomp import global_decomposition_table

        for table in ("meta", "post_autograd", "pre_autograd"):
            fn = global_decomposition_table[table].get(op)
            if fn is not None:
                break
    if fn is None:
        return None
    fn = inspect.unwrap(fn)
    try:
        path = inspect.getsourcefile(fn)
        line = inspect.getsourcelines(fn)[1]
    except (TypeError, OSError):
        return None
    if path is None:
        return None
    location, _ = registration_location(path, max(line, 1))
    return f"{fn.__module__}.{fn.__qualname__}", location


# ---------------------------------------------------------------------------
# The path of one call
# ---------------------------------------------------------------------------


def _backend_is_built(torch, device: str) -> bool:
    if device in ("cpu", "meta"):
        return True
    if device == "cuda":
        return torch.version.cuda is not None or torch.version.hip is not None
    if device == "mps":
        return torch.backends.mps.is_built()
    if device == "xpu":
        return getattr(torch.version, "xpu", None) is not None
    return False


def _key_set(torch, device: str, dtype, requires_grad: bool, autocast: bool, inference_mode: bool) -> list[str]:
    """The keys a call with one such tensor would see, highest priority first."""
    import contextlib

    C = torch._C
    ctx = contextlib.ExitStack()
    with ctx:
        if autocast:
            ctx.enter_context(torch.autocast(device if device != "meta" else "cpu"))
        if inference_mode:
            ctx.enter_context(torch.inference_mode())
        t = torch.empty(2, device=device, dtype=dtype, requires_grad=requires_grad and dtype.is_floating_point)
        tensor_keys = _key_names(C._dispatch_keys(t))
        include = _key_names(C._dispatch_tls_local_include_set())
        exclude = set(_key_names(C._dispatch_tls_local_exclude_set()))
    keys = [k for k in dict.fromkeys(tensor_keys + include) if k not in exclude]
    order = {k: i for i, k in enumerate(_key_names(C._dispatch_keyset_full()))}
    return sorted(keys, key=lambda k: order.get(k, -1), reverse=True)


def _key_names(keyset) -> list[str]:
    text = str(keyset)
    inner = text[text.index("(") + 1 : text.rindex(")")]
    return [k.strip() for k in inner.split(",") if k.strip()]


def _analogous_keys(device_key: str, requires_grad: bool, autocast: bool, inference_mode: bool) -> list[str]:
    """The key set a tensor of a backend this build lacks would have."""
    keys = []
    if autocast:
        keys.append(f"Autocast{device_key}")
    if not inference_mode:
        keys += [f"Autograd{device_key}", "ADInplaceOrView"]
    keys.append(device_key)
    return keys


def dispatch_path(
    op_name: str,
    device: str = "cpu",
    dtype: str = "float32",
    requires_grad: bool = False,
    autocast: bool = False,
    inference_mode: bool = False,
    catalog=None,
) -> DispatchPath:
    """The dispatch keys a call of `op_name` on a tensor with these properties
    passes through, highest first, and what answers at each."""
    torch = _torch()
    if device not in DEVICE_KEYS:
        raise BadInput(f"unknown device {device!r}; choose one of {', '.join(DEVICE_KEYS)}")
    torch_dtype = getattr(torch, dtype, None)
    if not isinstance(torch_dtype, torch.dtype):
        raise BadInput(f"unknown dtype {dtype!r} (e.g. float32, bfloat16, int64)")
    device_key = DEVICE_KEYS[device]
    table = live_table(op_name)
    live = _backend_is_built(torch, device)
    if live:
        keys = _key_set(torch, device, torch_dtype, requires_grad, autocast, inference_mode)
        note = None
    else:
        keys = _analogous_keys(device_key, requires_grad, autocast, inference_mode)
        note = (
            f"this torch ({torch.__version__}) is built without {device_key}: the {device_key} kernel is "
            "taken from native_functions.yaml, the keys above it from the live dispatcher"
        )

    if catalog is None:
        from kernelmap.catalog import load_catalog

        catalog = load_catalog()
    steps = []
    for key in keys:
        entry = table.get(key)
        if key == device_key and not live:
            steps.append(DispatchStep(key, catalog.effective_kernel(catalog.get(op_name), key), "from yaml"))
            break
        if entry is None:
            continue
        if entry.kernel.kind == "fallthrough":
            steps.append(DispatchStep(key, entry.kernel, "falls through", entry.tag))
            continue
        kernel = _named(entry, op_name, catalog)
        if entry.tag in _REDISPATCHING_TAGS or key in _REDISPATCHING_KEYS or key.startswith("Autocast"):
            steps.append(DispatchStep(key, kernel, "redispatches", entry.tag))
            continue
        steps.append(DispatchStep(key, kernel, "answers", entry.tag))
        break
    return DispatchPath(
        _qualified(op_name), device, dtype, requires_grad, autocast, inference_mode, tuple(keys), tuple(steps), live, note
    )


def _named(entry: TableEntry, op_name: str, catalog) -> Kernel:
    """The live kernel, with the symbol it runs: from the yaml for native
    kernels, the generated VariableType function for autograd, the Python
    function (and its real file:line) for Python registrations."""
    kernel = entry.kernel
    if kernel.kind == "python":
        found = python_kernel_source(op_name, entry.key)
        if found:
            return Kernel(entry.key, found[0], found[1], "python")
        return kernel
    if kernel.kind == "fallback":
        return kernel
    try:
        op = catalog.get(op_name)
    except UnknownName:  # an operator the yaml does not declare
        return kernel
    symbol = ""
    if entry.tag == "autograd kernel":
        symbol = f"torch::autograd::VariableType::{op.name.name}" + (f"_{op.name.overload}" if op.name.overload else "")
    elif entry.tag == "math kernel":
        yaml = op.kernel_for("CompositeImplicitAutograd")
        symbol = yaml.symbol if yaml else ""
    else:
        yaml = catalog.effective_kernel(op, entry.key)
        symbol = yaml.symbol if yaml else ""
    return Kernel(entry.key, symbol, kernel.location, kernel.kind, structured=False)
