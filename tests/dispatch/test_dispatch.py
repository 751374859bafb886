"""The live dispatcher of the installed torch 2.13.0, read through kernelmap,
compared with what torch itself reports."""

from __future__ import annotations

import re

import pytest
import torch

from kernelmap import dispatch, env
from kernelmap.catalog import load_catalog
from kernelmap.errors import BadInput, UnknownName


def test_cpu_requires_grad_path_is_autograd_then_cpu():
    path = dispatch.dispatch_path("aten::add.Tensor", device="cpu", dtype="float32", requires_grad=True)
    acting = [s for s in path.steps if s.action != "falls through"]
    assert [s.key for s in acting] == ["AutogradCPU", "CPU"]
    assert acting[0].action == "redispatches" and acting[-1].action == "answers"
    # the keys are the tensor's own, as torch reports them (TLS excludes autocast)
    t = torch.ones(2, requires_grad=True)
    assert set(path.keys) >= {"AutogradCPU", "CPU"}
    assert set(path.keys) <= set(re.findall(r"\w+", str(torch._C._dispatch_keys(t)))) | {"BackendSelect", "ADInplaceOrView"}
    # and the CPU kernel is the one torch's computed table names
    table = torch._C._dispatch_dump_table("aten::add.Tensor")
    line = next(l for l in table.splitlines() if l.startswith("CPU:"))
    assert f"{acting[-1].kernel.location.path}:{acting[-1].kernel.location.line}" in line
    assert acting[-1].kernel.symbol == "at::native::ufunc_add_CPU"


def test_conv2d_composite_implicit_registration_file_and_line():
    regs = {k.key: k for k in dispatch.live_registrations("aten::conv2d")}
    cia = regs["CompositeImplicitAutograd"]
    assert re.fullmatch(r"build/aten/src/ATen/RegisterCompositeImplicitAutograd_\d+\.cpp", cia.location.path)
    raw = torch._C._dispatch_dump("aten::conv2d")
    assert re.search(rf"CompositeImplicitAutograd\[alias\]: registered at \S*/{re.escape(cia.location.path)}:{cia.location.line} ", raw)
    # a call with grad on CPU is answered by that kernel at the autograd key: it decomposes
    path = dispatch.dispatch_path("aten::conv2d", requires_grad=True)
    assert path.steps[-1].action == "answers"
    assert path.steps[-1].kernel.location == cia.location
    assert path.steps[-1].kernel.symbol == "at::native::conv2d_symint"


def test_python_registered_meta_kernel_has_its_real_source():
    regs = {k.key: k for k in dispatch.live_registrations("aten::add.Tensor")}
    assert regs["Meta"].kind == "python"
    assert regs["Meta"].location.path.startswith("torch/")
    path = dispatch.dispatch_path("aten::add.Tensor", device="meta")
    meta = path.steps[-1].kernel
    assert meta.kind == "python"
    lines = meta.location.disk_path.read_text().splitlines()
    name = meta.symbol.rsplit(".", 1)[-1]
    assert re.match(rf"\s*def {name}\(", lines[meta.location.line - 1]) or lines[meta.location.line - 1].lstrip().startswith("@")


def test_fallthroughs_and_fallbacks_are_distinguished():
    path = dispatch.dispatch_path("aten::add.Tensor", requires_grad=True)
    kinds = {s.key: s.kernel.kind for s in path.steps}
    assert kinds["ADInplaceOrView"] == "fallthrough"
    table = dispatch.live_table("aten::add.Tensor")
    assert table["Python"].kernel.kind == "fallback"
    assert table["Python"].tag == "backend fallback"


def test_inference_mode_skips_autograd_and_autocast_adds_its_key():
    plain = dispatch.dispatch_path("aten::add.Tensor", inference_mode=True)
    assert not any(k.startswith("Autograd") for k in plain.keys)
    cast = dispatch.dispatch_path("aten::conv2d", autocast=True)
    assert "AutocastCPU" in cast.keys
    assert cast.steps[0].key == "AutocastCPU" and cast.steps[0].action == "redispatches"


def test_cuda_on_a_cpu_build_is_answered_from_the_yaml():
    assert torch.version.cuda is None, "this test describes a CPU build"
    path = dispatch.dispatch_path("aten::add.Tensor", device="cuda", requires_grad=True)
    assert not path.live and "built without CUDA" in path.note
    last = path.steps[-1]
    assert last.key == "CUDA" and last.action == "from yaml"
    assert last.kernel.symbol == "at::native::ufunc_add_CUDA"
    assert last.kernel.location.path.endswith("native_functions.yaml")


def test_bad_inputs():
    with pytest.raises(UnknownName):
        dispatch.live_registrations("aten::no_such_op")
    with pytest.raises(BadInput):
        dispatch.dispatch_path("aten::add.Tensor", device="tpu")
    with pytest.raises(BadInput):
        dispatch.dispatch_path("aten::add.Tensor", dtype="float33")


def _template_defs() -> set[str]:
    """Schemas written by hand into the RegisterSchema.cpp template (not the yaml)."""
    text = (env.torch_install().torchgen_dir / "packaged/ATen/templates/RegisterSchema.cpp").read_text()
    return set(re.findall(r'm\.def\("([\w.]+)\(', text))


def test_every_live_aten_operator_is_catalogued_or_explained():
    """No silent gaps: each aten operator the dispatcher knows is in the catalog,
    or falls into a named category of operators declared outside the yaml."""
    known = load_catalog().qualified_names()
    template = _template_defs()
    categories: dict[str, list[str]] = {"RegisterSchema.cpp template m.def": [], "m.def in hand-written C++": []}
    unexplained = []
    names = [n for n in torch._C._dispatch_get_all_op_names() if n.startswith("aten::")]
    for name in names:
        short = name.removeprefix("aten::")
        if short in known:
            continue
        if short in template:
            categories["RegisterSchema.cpp template m.def"].append(short)
            continue
        where = dispatch.schema_location(name)
        if where is not None and not where.path.startswith("build/"):
            categories["m.def in hand-written C++"].append(f"{short} ({where})")
            continue
        unexplained.append(short)
    print({k: v for k, v in categories.items()})
    assert not unexplained, f"aten operators neither in the catalog nor explained: {unexplained}"
    assert len(names) - sum(map(len, categories.values())) > 3000
