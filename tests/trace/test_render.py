"""Renderers read only model types: exact text at a fixed width without
colour, the canonical JSON document, and trees deeper than Python's
recursion limit."""

from __future__ import annotations

import json

import pytest

from kernelmap.model import CallNode, CallTree, EdgeKind, Location
from kernelmap.render import render


def _gpu_tree() -> CallTree:
    kernel = CallNode("sm80_xmma_fprop_implicit_gemm", "gpu_kernel", attrs={"duration_us": 40.0, "library": "cuDNN", "closed": True})
    launch = CallNode("cudaLaunchKernel", "runtime", attrs={"duration_us": 4.0}, children=(kernel,))
    cudnn = CallNode(
        "aten::cudnn_convolution", "op",
        attrs={"duration_us": 900.0, "dispatch_key": "CUDA", "kernel": "at::native::cudnn_convolution", "library": "cuDNN", "closed": True},
        children=(launch,),
    )
    conv = CallNode(
        "aten::conv2d", "op",
        attrs={"duration_us": 1200.0, "input_shapes": [[1, 3, 32, 32], [8, 3, 3, 3], []],
               "dispatch_key": "CompositeImplicitAutograd", "kernel": "at::native::conv2d_symint"},
        children=(cudnn,),
    )
    add = CallNode(
        "aten::add_", "op",
        attrs={"op": "aten::add_.Tensor", "duration_us": 12.5, "dispatch_key": "CUDA", "kernel": "at::native::add_out",
               "source": "aten/src/ATen/native/BinaryOps.cpp:123"},
    )
    module = CallNode("Conv2d_0", "module", attrs={"duration_us": 1500.0}, children=(conv, add))
    frame = CallNode("model.forward", "python", location=Location("model.py", 12), attrs={"duration_us": 2500.0}, children=(module,))
    return CallTree(CallNode("trace", "trace", children=(frame,)), notes=("a note stated once",))


def test_text_tree_exact_at_fixed_width():
    assert render(_gpu_tree(), "text", width=100, color=False) == (
        "note: a note stated once\n"
        "trace\n"
        "└── model.forward  [python]  2.500 ms  @ model.py:12\n"
        "    └── Conv2d_0  [module]  1.500 ms\n"
        "        ├── aten::conv2d  1.200 ms  [1, 3, 32, 32] [8, 3, 3, 3]  CompositeImplicitAutograd: at::nat…\n"
        "        │   └── aten::cudnn_convolution  900.0 us  CUDA: at::native::cudnn_convolution  <cuDNN, clo…\n"
        "        │       └── cudaLaunchKernel  [runtime]  4.0 us\n"
        "        │           └── sm80_xmma_fprop_implicit_gemm  [gpu_kernel]  40.0 us  <cuDNN, closed>\n"
        "        └── aten::add_.Tensor  12.5 us  CUDA: at::native:…  @ aten/src/ATen/native/BinaryOps.cpp:123\n"  # the location kept whole
    )


def test_text_tree_depth_and_duration_limits():
    assert render(_gpu_tree(), "text", width=80, color=False, max_depth=3, min_us=100, notes=False) == (
        "trace\n"
        "└── model.forward  [python]  2.500 ms  @ model.py:12\n"
        "    └── Conv2d_0  [module]  1.500 ms\n"
        "        ├── aten::conv2d  1.200 ms  [1, 3, 32, 32] [8, 3, 3, 3]  CompositeImpli…\n"
        "        │   └── … 1 children below depth 3\n"
        "        └── … 1 shorter than 100.0 us\n"
    )


def test_static_edges_show_via_and_condition():
    callee = CallNode(
        "at::native::cudnn_convolution", "kernel", location=Location("aten/src/ATen/native/cudnn/ConvShared.cpp", 300),
        via=EdgeKind.DISPATCHER, condition="case ConvBackend::Cudnn",
    )
    tree = CallTree(CallNode("at::native::_convolution", "kernel", location=Location("aten/src/ATen/native/Convolution.cpp", 1400), children=(callee,)))
    assert render(tree, "text", width=200, color=False) == (
        "at::native::_convolution  [kernel]  @ aten/src/ATen/native/Convolution.cpp:1400\n"
        "└── at::native::cudnn_convolution  [kernel]  via dispatcher  [case ConvBackend::Cudnn]"
        "  @ aten/src/ATen/native/cudnn/ConvShared.cpp:300\n"
    )


def test_colour_adds_styles_without_changing_text():
    import re

    plain = render(_gpu_tree(), "text", width=100, color=False)
    coloured = render(_gpu_tree(), "text", width=100, color=True)
    assert "\x1b[" in coloured
    assert re.sub(r"\x1b\[[0-9;]*m", "", coloured) == plain


def test_json_document_is_versioned_and_complete():
    tree = _gpu_tree()
    doc = json.loads(render(tree, "json"))
    assert doc == tree.to_json()
    assert doc["kernelmap"] == "calltree/2" and doc["kind"] == "trace"
    assert doc["notes"] == ["a note stated once"]
    frame = doc["root"]["children"][0]
    assert frame["location"] == {"path": "model.py", "line": 12, "end_line": None, "origin": None, "url": None, "file": None}
    assert [c["name"] for c in frame["children"][0]["children"]] == ["aten::conv2d", "aten::add_"]
    assert json.loads(render(tree, "json", indent=None)) == doc


def test_renderers_are_registered_in_one_table():
    from kernelmap.errors import BadInput

    from kernelmap.render import renderer_for

    assert renderer_for(_gpu_tree(), "text") and renderer_for(_gpu_tree(), "json")
    with pytest.raises(BadInput):
        render(_gpu_tree(), "html-not-yet")


def test_trees_deeper_than_the_recursion_limit_render():
    import sys

    depth = sys.getrecursionlimit() + 500
    node = CallNode("leaf", "op")
    for i in range(depth):
        node = CallNode(f"f{i}", "python", children=(node,))
    tree = CallTree(node)
    text = render(tree, "text", width=60, color=False)
    assert len(text.splitlines()) == depth + 1
    compact = render(tree, "json", indent=None)
    assert compact.count('"name":"f') == depth and compact.count('"name":"leaf"') == 1
    assert len(tree.to_json()["root"]["children"]) == 1
