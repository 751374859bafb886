"""Read native_functions.yaml, tags.yaml and derivatives.yaml with whichever
torchgen is first on sys.path, and print the operators as JSON on stdout.

This file runs as a script in its own interpreter (see Note [one torchgen per
interpreter] in catalog/build.py): with the installed wheel's torchgen, or
with a source tree's own torchgen when the tree's root is put first on
PYTHONPATH. It must therefore import nothing from kernelmap and only the parts
of torchgen that every PyTorch 2.x release has.

Usage: python _extract.py NATIVE_YAML TAGS_YAML DERIVATIVES_YAML
"""

from __future__ import annotations

import json
import re
import sys


def _load_derivatives_module():
    # A source tree keeps its autograd codegen in tools/autograd/; the wheel
    # packages the same files as torchgen.packaged.autograd.
    try:
        from tools.autograd import load_derivatives  # type: ignore[import-not-found]
    except ImportError:
        from torchgen.packaged.autograd import load_derivatives  # type: ignore[no-redef]
    return load_derivatives


def _load_python_bindings_module():
    try:
        from tools.autograd import gen_python_functions  # type: ignore[import-not-found]
    except ImportError:
        from torchgen.packaged.autograd import gen_python_functions  # type: ignore[no-redef]
    return gen_python_functions


_DERIVATIVE_NAME = re.compile(r"^- name:\s*([A-Za-z0-9_.]+)\(")


def _derivative_lines(path: str) -> dict[str, int]:
    """`add.Tensor` -> line of its `- name:` entry in derivatives.yaml."""
    lines: dict[str, int] = {}
    with open(path) as f:
        for number, text in enumerate(f, 1):
            m = _DERIVATIVE_NAME.match(text)
            if m:
                lines.setdefault(m.group(1), number)
    return lines


_DISPATCH_ENTRY = re.compile(r"^\s+([A-Za-z0-9_, ]+):\s*([A-Za-z0-9_:]+)\s*(?:#.*)?$")
# `Generic: add (AllAndComplex, BFloat16, Half, ComplexHalf)` under `ufunc_inner_loop:`
_UFUNC_ENTRY = re.compile(r"^\s+(\w+):\s*(\w+)\s*\(")


def _dispatch_lines(lines: list[str], func_line: int) -> tuple[dict[str, tuple[int, str]], tuple[int, str] | None]:
    """In the yaml entry whose `- func:` is at `func_line` (1-based): dispatch
    key -> (line, kernel) of the `dispatch:` entry naming its kernel (`CUDA:
    batch_norm_cuda` is where that kernel is written, not the `- func:` line;
    `SparseCPU, SparseCUDA: narrow_copy_sparse` gives both keys its line); and
    (line, loop) of the first `ufunc_inner_loop:` entry, if any."""
    found: dict[str, tuple[int, str]] = {}
    ufunc = None
    indent = None  # of the `dispatch:` or `ufunc_inner_loop:` key, while inside its block
    block = None
    for number in range(func_line, len(lines)):  # the lines after `- func:`
        text = lines[number]
        if text.startswith("- "):
            break
        if not text.strip() or text.lstrip().startswith("#"):
            continue
        depth = len(text) - len(text.lstrip())
        if indent is not None and depth <= indent:
            indent = None
        if indent is None:
            block = text.split("#")[0].strip()
            if block in ("dispatch:", "ufunc_inner_loop:"):
                indent = depth
            continue
        if block == "ufunc_inner_loop:":  # torchgen names the loops' kernels ufunc_<loop>_<key>: the first names them
            m = _UFUNC_ENTRY.match(text)
            if m and ufunc is None:
                ufunc = (number + 1, m.group(2))
            continue
        m = _DISPATCH_ENTRY.match(text)
        if m:
            for key in m.group(1).split(","):
                found.setdefault(key.strip(), (number + 1, m.group(2).rsplit("::", 1)[-1]))
    return found, ufunc


def extract(native_yaml: str, tags_yaml: str, derivatives_yaml: str) -> dict:
    import torchgen
    from torchgen.api.autograd import match_differentiability_info
    from torchgen.gen import parse_native_yaml
    from torchgen.model import SchemaKind

    parsed = parse_native_yaml(native_yaml, tags_yaml)
    functions = parsed.native_functions
    indices = parsed.backend_indices

    infos, _ = _load_derivatives_module().load_derivatives(derivatives_yaml, native_yaml, tags_yaml)
    with_infos = match_differentiability_info(functions, infos)
    derivative_lines = _derivative_lines(derivatives_yaml)
    py = _load_python_bindings_module()
    with open(native_yaml) as yaml_file:
        yaml_lines = yaml_file.read().splitlines()

    ops = []
    for f, fn_info in zip(functions, with_infos):
        assert fn_info.func is f
        written, ufunc = _dispatch_lines(yaml_lines, f.loc.line)
        dispatch = []
        for key, index in indices.items():
            meta = index.get_kernel(f)
            if meta is None:
                continue
            namespace = getattr(meta, "cpp_namespace", "at::native")
            # The entry's line where the yaml names this key's kernel; a ufunc's CPU and
            # CUDA kernels (torchgen's ufunc_<loop>_<key>), its loop's line; else none.
            line, kernel = written.get(str(key), (None, None))
            if line is None and ufunc is not None and meta.kernel == f"ufunc_{ufunc[1]}_{key}":
                line, kernel = ufunc[0], meta.kernel
            dispatch.append([str(key), f"{namespace}::{meta.kernel}", bool(meta.structured), line if kernel == meta.kernel else None])

        autograd = None
        info = (fn_info.info or {}).get("Default")
        if info is not None:
            source_name = str(info.func.func.name)
            autograd = {
                "node": info.op,
                "name": source_name,
                "line": derivative_lines.get(source_name),
                "formulas": [[list(d.var_names), d.original_formula] for d in info.derivatives],
            }

        name = f.func.name
        ops.append(
            {
                "name": str(name.name),
                "overload": name.overload_name,
                "schema": str(f.func),
                "line": f.loc.line,
                "variants": sorted(v.name for v in f.variants),
                "python_module": f.python_module,
                "tags": sorted(f.tags),
                "dispatch": dispatch,
                "structured": f.structured,
                "structured_delegate": str(f.structured_delegate) if f.structured_delegate else None,
                "ufunc_inner_loop": [
                    [str(key), f"{loop.name} ({', '.join(str(d) for d in loop.supported_dtypes)})"]
                    for key, loop in (f.ufunc_inner_loop or {}).items()
                ],
                "composite_implicit": f.has_composite_implicit_autograd_kernel,
                "composite_explicit": f.has_composite_explicit_autograd_kernel,
                "composite_explicit_non_functional": f.has_composite_explicit_autograd_non_functional_kernel,
                "is_view": f.is_view_op,
                "is_inplace": f.func.kind() == SchemaKind.inplace,
                "is_out": f.func.kind() == SchemaKind.out,
                "manual_cpp_binding": f.manual_cpp_binding,
                "python_binding": py.should_generate_py_binding(f),
                "autograd": autograd,
            }
        )
    return {"torchgen": torchgen.__file__, "ops": ops}


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    # torchgen's derivatives reader builds its regular expressions per
    # derivative, ~16,000 of them: past re's cache of 512 each is compiled
    # again (a tenth of the run); the distinct ones fit a larger cache.
    re._MAXCACHE = max(getattr(re, "_MAXCACHE", 512), 65536)
    json.dump(extract(*sys.argv[1:]), sys.stdout)
