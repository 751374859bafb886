"""The terminal rendering of a GeneratedCode, at a fixed width, no colour."""

from __future__ import annotations

import io

from rich.console import Console

from kernelmap.codegen import Excerpt, GeneratedCode, Layer, Registration
from kernelmap.render.gen import render
from kernelmap.model import Location, OperatorName, Origin, OriginKind

ORIGIN = Origin(OriginKind.GENERATED, "2.13.0", None, root="cache", label="generated from torch 2.13.0")


def _excerpt(path: str, line: int, text: str) -> Excerpt:
    return Excerpt(Location(path, line, line + text.count("\n"), ORIGIN), text)


def test_register_layer_text():
    cpu = "build/aten/src/ATen/RegisterCPU_1.cpp"
    code = GeneratedCode(
        op=OperatorName("relu"),
        origin=ORIGIN,
        schema=_excerpt("build/aten/src/ATen/RegisterSchema.cpp", 7, '  m.def("relu(Tensor self) -> Tensor", tags_0);'),
        registrations=(
            Registration(
                "CPU",
                Layer.REGISTER,
                "wrapper_CPU__relu",
                Location(cpu, 90, origin=ORIGIN),
                _excerpt(cpu, 91, '    m.impl("relu", TORCH_FN(wrapper_CPU__relu));'),
                _excerpt(cpu, 40, "at::Tensor wrapper_CPU__relu(const at::Tensor & self) {\n    return at::native::relu(self);\n}"),
                ("at::native::relu",),
            ),
        ),
        notes=("aten::relu has no ufunc kernels",),
    )
    out = io.StringIO()
    render(code, [Layer.REGISTER], Console(file=out, width=80, no_color=True, force_terminal=False, highlight=False))
    assert out.getvalue() == (
        "aten::relu  (generated from torch 2.13.0)\n"
        "files in cache\n"
        "schema  build/aten/src/ATen/RegisterSchema.cpp:7\n"
        '  7   m.def("relu(Tensor self) -> Tensor", tags_0);\n'
        "\n"
        "── Register<Key> wrappers ──\n"
        "CPU: wrapper_CPU__relu  registered in the block at \n"
        "build/aten/src/ATen/RegisterCPU_1.cpp:90\n"
        "  calls at::native::relu\n"
        '  91     m.impl("relu", TORCH_FN(wrapper_CPU__relu));\n'
        "  40 at::Tensor wrapper_CPU__relu(const at::Tensor & self) {\n"
        "  41     return at::native::relu(self);\n"
        "  42 }\n"
        "\n"
        "note: aten::relu has no ufunc kernels\n"
    )


def test_an_excerpt_has_one_line_of_text_per_line_of_its_location():
    import pytest

    with pytest.raises(ValueError, match="one line per line"):
        Excerpt(Location("build/aten/src/ATen/RegisterCPU_0.cpp", 3, 4, ORIGIN), "only one line")
