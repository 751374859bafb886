"""Run one step of PyTorch's code generation with whichever torchgen is first
on sys.path, writing files where a build would put them under OUT.

This file runs as a script in its own interpreter (see Note [one torchgen per
interpreter] in catalog/store.py): the installed wheel's torchgen, or a source
tree's own torchgen and tools/autograd when the tree's root is first on
PYTHONPATH. It imports nothing from kernelmap, and only the parts of torchgen
every PyTorch 2.x release has. The options are those of a release build; see
Note [codegen options of a release build] in kernelmap/codegen/__init__.py.

Usage: python _generate.py STEP ATEN_DIR AUTOGRAD_DIR OUT
  STEP      aten (cmake/Codegen.cmake's torchgen.gen) | autograd (generate_code.py:
            Python bindings, then VariableType, TraceType, ADInplaceOrView, Functions)
  ATEN_DIR  the directory holding native/native_functions.yaml and templates/
  AUTOGRAD_DIR  tools/autograd of a tree, or torchgen/packaged/autograd
  OUT       the root of the output: build/aten/src/ATen and
            torch/csrc/autograd/generated are created below it
"""

from __future__ import annotations

import contextlib
import io
import os
import sys

ATEN_OUT = "build/aten/src/ATen"
AUTOGRAD_OUT = "torch/csrc/autograd/generated"


def _autograd_module():
    # A source tree keeps its autograd codegen in tools/autograd/; the wheel
    # packages the same files as torchgen.packaged.autograd.
    try:
        from tools.autograd import gen_autograd  # type: ignore[import-not-found]
    except ImportError:
        from torchgen.packaged.autograd import gen_autograd  # type: ignore[no-redef]
    return gen_autograd


def _supported_options() -> str:
    import torchgen.gen

    with open(torchgen.gen.__file__) as f:
        return f.read()


def generate_aten(aten_dir: str, out: str) -> None:
    import torchgen.gen

    scratch = os.path.join(out, ".scratch")
    argv = [
        "torchgen.gen",
        "--source-path",
        aten_dir,
        "--install_dir",
        os.path.join(out, ATEN_OUT),
        # cmake/Codegen.cmake: USE_PER_OPERATOR_HEADERS is ON in release builds;
        # it changes the #include lines and so every line number after them.
        "--per-operator-headers",
        # cmake runs headers, sources and declarations_yaml as three commands;
        # only the sources register kernels (and headers are ~10,000 files).
        "--generate",
        "sources",
    ]
    source = _supported_options()
    if "--aoti-install-dir" in source:
        argv += ["--aoti-install-dir", os.path.join(scratch, "aoti")]
    if "--headeronly-install-dir" in source:
        argv += ["--headeronly-install-dir", os.path.join(scratch, "headeronly")]
    sys.argv = argv
    # torchgen reports missing AOTInductor shim headers on stdout; they belong
    # to the headers step, which a build runs separately.
    with contextlib.redirect_stdout(io.StringIO()):
        torchgen.gen.main()


def generate_autograd(aten_dir: str, autograd_dir: str, out: str) -> None:
    from torchgen.selective_build.selector import SelectiveBuilder

    gen_autograd = _autograd_module()
    native = os.path.join(aten_dir, "native/native_functions.yaml")
    tags = os.path.join(aten_dir, "native/tags.yaml")
    target = os.path.join(out, AUTOGRAD_OUT)
    os.makedirs(target, exist_ok=True)
    # tools/setup_helpers/generate_code.py, as caffe2/CMakeLists.txt runs it
    # (no --subset): gen_autograd_python, then gen_autograd with the nop
    # selector (no selective build) and autograd enabled, in one interpreter,
    # so the yaml and derivatives are parsed once.
    gen_autograd.gen_autograd_python(native, tags, target, autograd_dir)
    gen_autograd.gen_autograd(native, tags, target, autograd_dir, SelectiveBuilder.get_nop_selector())


def main(argv: list[str]) -> None:
    if len(argv) != 4 or argv[0] not in ("aten", "autograd"):
        sys.exit(__doc__)
    step, aten_dir, autograd_dir, out = argv
    if step == "aten":
        generate_aten(aten_dir, out)
    else:
        generate_autograd(aten_dir, autograd_dir, out)


if __name__ == "__main__":
    main(sys.argv[1:])
