"""`scaffold`: an operator of the catalog -> a small extension project that
defines a custom operator with the same schema (plus extra arguments), a
reference CPU kernel, an optional CUDA kernel, fake and autograd
registrations, both build routes, tests against the original and a benchmark.

Imports no torch: the schema comes from the catalog, torchgen types it, and
Jinja2 writes the files (templates/ beside this module).
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import jinja2

from kernelmap import __version__
from kernelmap.errors import BadInput
from kernelmap.extend.errors import OutputExists
from kernelmap.extend.families import family_of, pointwise_formula, reduction_of
from kernelmap.extend.schema import CustomOpSpec, Param, check_identifier, custom_op_spec
from kernelmap.model import Op

__all__ = ["DEFAULT_NAMESPACE", "MANIFEST", "Scaffold", "scaffold", "render_project"]

DEFAULT_NAMESPACE = "kernelmap_ext"
MANIFEST = "kernelmap.json"  # written into every project; `verify --load DIR` reads it

_FAMILY_NOTES = {
    "pointwise": "broadcast, promote, one loop over the elements",
    "reduction": "move the reduced dimensions last, then one loop per output element",
    "convolution": "the call into ATen that aten::convolution makes, `at::_convolution`",
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


@dataclass(frozen=True)
class Scaffold:
    """What `scaffold` wrote."""

    root: Path  # the project folder
    spec: CustomOpSpec
    family: str  # Note [reference kernels] in kernelmap.extend.families
    files: tuple[Path, ...]  # relative to root
    cuda: bool

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
    return tuple(i for i, p in enumerate(spec.positional) if p.name in names)


def _aten_cpp_call(spec: CustomOpSpec, op: Op) -> str:
    if spec.op == "aten::convolution":
        return ("at::_convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups, "
                "/*benchmark=*/false, /*deterministic=*/false, /*cudnn_enabled=*/true, /*allow_tf32=*/true)")
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


def render_project(op: Op, name: str, *, namespace: str = DEFAULT_NAMESPACE, extra: tuple[str, ...] = (), cuda: bool = False) -> tuple[CustomOpSpec, str, dict[str, str]]:
    """(spec, family, {relative path: text}) of the project for `op`; writes nothing."""
    spec = custom_op_spec(str(op.name), op.schema, name, namespace, extra)
    family = family_of(spec, op.tags)
    pw = pointwise_formula(spec) if family == "pointwise" else None
    context = {
        "s": spec,
        "family": family,
        "family_note": _FAMILY_NOTES[family],
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
        "contiguous_results": family in ("pointwise", "reduction", "batch_norm"),
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


def scaffold(
    op: str | Op,
    name: str,
    *,
    out: str | Path | None = None,
    namespace: str = DEFAULT_NAMESPACE,
    extra: tuple[str, ...] | list[str] = (),
    cuda: bool = False,
    force: bool = False,
) -> Scaffold:
    """Write the extension project for a custom operator `namespace::name` that
    starts as `op` (an operator of the catalog: "aten::relu", "add.Tensor") into
    `out` (default: ./NAME). Refuses an existing folder unless `force`."""
    check_identifier(name, "NAME")
    check_identifier(namespace, "the namespace")
    if name in sys.stdlib_module_names or importlib.util.find_spec(name) is not None:
        raise BadInput(f"NAME {name!r} is the name of an installed module; the project's package would hide it")
    if isinstance(op, str):
        op = _operator(op)
    root = Path(out) if out is not None else Path(name)
    if root.exists() and not force:
        if not root.is_dir() or any(root.iterdir()):
            raise OutputExists(f"{root} exists; choose another --out or pass --force to overwrite it")
    spec, family, files = render_project(op, name, namespace=namespace, extra=tuple(extra), cuda=cuda)
    if root.exists() and force:
        if not root.is_dir():
            raise BadInput(f"{root} is a file, not a folder")
        for stale in (root / "csrc", root / name, root / "tests", root / "build"):
            if stale.is_dir():
                shutil.rmtree(stale)
    root.mkdir(parents=True, exist_ok=True)
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    result = Scaffold(root, spec, family, tuple(Path(p) for p in sorted(files)) + (Path(MANIFEST),), cuda)
    (root / MANIFEST).write_text(json.dumps(result.to_json(), indent=2) + "\n")
    return result
