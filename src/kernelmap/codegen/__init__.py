"""Generated code on demand: the files that exist only in a PyTorch build
directory (Python bindings, `at::_ops` entry points, autograd and tracing
wrappers, `Register<Key>` wrappers, ufunc kernels), regenerated with the
installed torch's own torchgen (or a source tree's), cached once per version,
and the pieces one operator passes through.

    files = generated_files()                 # the installed torch; generated on first use
    files = generated_files(tree=Path(...))   # a source tree, with its own torchgen
    code = locate("aten::conv2d")             # GeneratedCode: bindings, ops, registrations, ufunc
    code.registration("CompositeImplicitAutograd").calls   # ('at::native::conv2d_symint',)

Nothing here imports torch: torchgen runs in subprocesses, and later calls
read the cache.

Note [codegen options of a release build]
The line numbers the live dispatcher reports (`RegisterCPU_0.cpp:1297`) are
only reproduced by generating exactly as a release build does:

* ATen: cmake/Codegen.cmake runs `python -m torchgen.gen --source-path
  aten/src/ATen --install_dir build/aten/src/ATen` with
  `--per-operator-headers` (USE_PER_OPERATOR_HEADERS is ON by default in
  CMakeLists.txt, and it changes every #include block), once per
  `--generate headers|sources|declarations_yaml`. kernelmap runs the sources
  step here: it writes every Register*/Operators/Ufunc file. The headers step
  (about 7,000 files: ops/<op>.h, TensorBody.h, Functions.h) runs apart, on
  first use, for a source tree only: the installed torch ships its headers in
  torch/include (see kernelmap.codegen.headers).
* Backends: `--rocm`, `--mps` and `--xpu` are added only by ROCm, macOS and
  XPU builds (USE_ROCM, USE_MPS, USE_XPU); Linux CPU and CUDA wheels pass none
  of them, and torchgen then writes RegisterCPU_*.cpp, RegisterCUDA_0.cpp,
  RegisterMeta_0.cpp, the Sparse/Quantized/NestedTensor/Mkldnn keys and the
  composite keys. A CPU wheel's dispatcher shows no CUDA registrations;
  RegisterCUDA_0.cpp is generated all the same, as in a CUDA build.
* Shards are fixed in torchgen itself, so the installed torchgen reproduces
  its own build: RegisterCPU in 4, Operators in 5, RegisterFunctionalization
  in 4 (gen.py); VariableType and TraceType in 10 in 2.13 (5 in 2.6),
  ADInplaceOrViewType in 2, python_torch_functions in 3, python_functions in 5.
* Autograd: caffe2/CMakeLists.txt runs tools/setup_helpers/generate_code.py,
  which calls gen_autograd_python (python_*_functions, python_variable_methods,
  python_functions) and gen_autograd (VariableType, TraceType,
  ADInplaceOrViewType, Functions, ViewFuncs) with the nop selector into
  torch/csrc/autograd/generated. Its `--gen_lazy_ts_backend` output
  (RegisterLazy.cpp) registers nothing in the wheel's dispatcher and is not
  generated. The wheel ships these generators as torchgen.packaged.autograd.
* The live dispatcher confirms the file set: every registration it
  attributes to build/ or */generated/ names a file generated here (see
  tests/codegen/test_dispatcher_agrees.py).

`*Everything.cpp` (all shards in one file, for tools) is dropped: the build
compiles the shards.
"""

from __future__ import annotations

import sqlite3
import warnings
from collections.abc import Iterable
from pathlib import Path

from kernelmap.codegen.build import (
    Reporter,
    CacheDamaged,
    CacheMismatch,
    CodegenSource,
    cache_root,
    check_manifest,
    clean_stale_dirs,
    generate,
    installed_source,
    tree_source,
)
from kernelmap.codegen.locate import GeneratedFiles, locate_op
from kernelmap.codegen.sites import (
    Binding,
    Excerpt,
    GeneratedCode,
    Layer,
    OpsFunction,
    Registration,
    StructuredClass,
    UfuncKernel,
)
from kernelmap.errors import KernelmapError
from kernelmap.model import Op, Origin, OriginKind

__all__ = [
    "Binding",
    "CacheDamaged",
    "CacheMismatch",
    "CacheWarning",
    "CodegenSource",
    "Excerpt",
    "GeneratedCode",
    "GeneratedFiles",
    "Layer",
    "NotGenerated",
    "OpsFunction",
    "Registration",
    "StructuredClass",
    "UfuncKernel",
    "generated_files",
    "locate",
    "locate_in",
    "open_generated",
    "resolve_op",
]


class CacheWarning(UserWarning):
    """The cache was damaged and is being rebuilt."""


class NotGenerated(KernelmapError):
    """The generated files of this torch version or tree are not in the cache yet."""


def _source(tree: Path | None) -> CodegenSource:
    return installed_source() if tree is None else tree_source(tree)


def _generated_origin(source: CodegenSource, directory: Path) -> Origin:
    what = f"torch {source.origin.version}" if source.torchgen_root is None else source.origin.label
    return Origin(OriginKind.GENERATED, source.origin.version, source.origin.commit, root=str(directory), label=f"generated from {what}")


def open_generated(tree: Path | None = None) -> GeneratedFiles:
    """The cached files of the installed torch (or `tree`), without generating:
    NotGenerated when absent, CacheMismatch when another version filled the directory."""
    source = _source(tree)
    directory = cache_root() / source.slug
    if not directory.exists():
        raise NotGenerated(f"no generated files for {source.describe} in {directory.parent}")
    manifest = check_manifest(directory, source)
    try:
        return GeneratedFiles(directory, manifest, _generated_origin(source, directory))
    except sqlite3.DatabaseError as e:
        raise CacheDamaged(f"{directory}/index.sqlite is unreadable ({' '.join(str(e).split())[:120]})") from None


def generated_files(tree: Path | None = None, *, progress: Reporter | None = None, regenerate: bool = False) -> GeneratedFiles:
    """The generated files of the installed torch (or `tree`), generating them
    first if the cache lacks them or holds another version's (half a minute
    of torchgen in subprocesses). `progress(step, "start" | "done")` hears of
    each step while they are generated: the CLI draws a bar with it; the
    library itself draws nothing."""
    source = _source(tree)
    directory = cache_root() / source.slug
    clean_stale_dirs(directory.parent)  # what killed generations left, of any version
    if not regenerate:
        try:
            return open_generated(tree)
        except (NotGenerated, CacheMismatch) as e:
            reason = e
    else:
        reason = None
    import filelock  # only to generate: a warm cache is read without it

    directory.parent.mkdir(parents=True, exist_ok=True)
    with filelock.FileLock(str(directory.parent / f".{source.slug}.lock")):
        if not regenerate:  # another process may have generated it meanwhile
            try:
                return open_generated(tree)
            except (NotGenerated, CacheMismatch):
                pass
        if isinstance(reason, (CacheDamaged, CacheMismatch)):
            warnings.warn(f"regenerating: {reason}", CacheWarning, stacklevel=2)
        generate(source, directory, progress)
    return open_generated(tree)


def resolve_op(name: str, tree: Path | None = None, catalog=None) -> tuple[Op, Op | None]:
    """The operator `name` (`aten::conv2d`, `conv2d`, `add.out`, `add`) in the
    catalog (`catalog`, else the installed torch's or `tree`'s), and the
    operator whose ufunc_inner_loop made its ufunc kernels (itself or its
    structured delegate), if any. UnknownName / BadInput otherwise."""
    from kernelmap.catalog import load_catalog

    catalog = catalog if catalog is not None else load_catalog(tree=tree)
    op = catalog.resolve(name)[0]
    ufunc_op = None
    if op.ufunc_inner_loop:
        ufunc_op = op
    elif op.structured_delegate:
        delegate = catalog.delegate(op)
        if delegate is not None and delegate.ufunc_inner_loop:
            ufunc_op = delegate
    return op, ufunc_op


def locate(
    name: str,
    *,
    layers: Iterable[Layer | str] | None = None,
    tree: Path | None = None,
    files: GeneratedFiles | None = None,
    progress: Reporter | None = None,
    regenerate: bool = False,
) -> GeneratedCode:
    """Everything generated for operator `name`, limited to `layers` (all by default).

    The name is resolved first, so a bad one fails before any generation;
    then the files are opened, or generated (see `generated_files`)."""
    op, ufunc_op = resolve_op(name, tree)
    wanted = tuple(Layer(layer) for layer in layers) if layers is not None else tuple(Layer)
    own = files is None
    if own:
        files = generated_files(tree, progress=progress, regenerate=regenerate)
    try:
        code = locate_op(files, op, wanted, ufunc_op)
    except CacheDamaged as e:  # a file read is not the one generated (edited since): generated again, once
        if not own:
            raise
        warnings.warn(f"regenerating: {e}", CacheWarning, stacklevel=2)
        files = generated_files(tree, progress=progress, regenerate=True)
        code = locate_op(files, op, wanted, ufunc_op)
    if tree is None:
        code = _note_missing_backends(code)
    return code


def locate_in(files: GeneratedFiles, name: str, catalog, layers: Iterable[Layer | str] | None = None) -> GeneratedCode:
    """Operator `name` of `catalog` in `files`: the generated files of the same
    version as the catalog (a selected tree's files with the tree's catalog),
    so that the operator and its generated code never come from two versions."""
    op, ufunc_op = resolve_op(name, catalog=catalog)
    wanted = tuple(Layer(layer) for layer in layers) if layers is not None else tuple(Layer)
    return locate_op(files, op, wanted, ufunc_op)


def _note_missing_backends(code: GeneratedCode) -> GeneratedCode:
    """Say so when every backend kernel is for CUDA and the installed torch has none."""
    from dataclasses import replace

    from kernelmap import env

    if env.torch_install().cuda is not None:
        return code
    backends = {r.key for r in code.registrations if r.layer is Layer.REGISTER and not r.key.startswith(("Composite", "Functionalize", "BackendSelect"))}
    if backends and all("CUDA" in key for key in backends):
        note = (
            f"{code.op} has kernels only for {', '.join(sorted(backends))}: torch {env.torch_install().version} is a "
            "CPU build, so its dispatcher holds none of them (the files are generated as a CUDA build has them)"
        )
        code = replace(code, notes=code.notes + (note,))
    return code
