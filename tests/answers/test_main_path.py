"""The main path (Note [the main path] in kernelmap.processors) on tiny
hand-made trees: marked as data, folded for text, rendered as numbered steps
whose locations survive any width; and `--all` keeps today's tree."""

from __future__ import annotations

from kernelmap import processors
from kernelmap.model import CallNode, CallTree, EdgeKind, Location, NodeKind
from kernelmap.render import render
from kernelmap.render.tree import fit

LOC = Location("aten/src/ATen/native/cudnn/Conv_v8.cpp", 400)


def _conv() -> tuple[CallTree, tuple[CallNode, ...]]:
    vendor = CallNode("cudnnBackendExecute", NodeKind.VENDOR, LOC, EdgeKind.VENDOR, attrs={"library": "cuDNN", "closed": True})
    cudnn = CallNode("aten::cudnn_convolution", NodeKind.OPERATOR, via=EdgeKind.DISPATCHER, condition="case ConvBackend::Cudnn", children=(vendor,))
    miopen = CallNode("aten::miopen_convolution", NodeKind.OPERATOR, via=EdgeKind.DISPATCHER, condition="case ConvBackend::Miopen")
    mkldnn = CallNode("aten::mkldnn_convolution", NodeKind.OPERATOR, via=EdgeKind.DISPATCHER, condition="case ConvBackend::Mkldnn")
    select = CallNode("at::native::_select_conv_backend", NodeKind.KERNEL, Location("aten/src/ATen/native/Convolution.cpp", 1300), EdgeKind.DIRECT)
    conv = CallNode("at::native::_convolution", NodeKind.KERNEL, Location("aten/src/ATen/native/Convolution.cpp", 1468), EdgeKind.DISPATCHER,
                    children=(select, miopen, cudnn, mkldnn))
    pad = CallNode("torch.nn.functional.pad", NodeKind.PYTHON, Location("torch/nn/functional.py", 5000), EdgeKind.PYTHON, "self.padding_mode != 'zeros'")
    root = CallNode("torch.nn.Conv2d", NodeKind.MODULE, Location("torch/nn/modules/conv.py", 378), children=(pad, conv))
    tree = CallTree(root, (), {"kind": "stack"})
    return tree, (root, root.children[1], root.children[1].children[2], root.children[1].children[2].children[0])


def test_the_main_path_is_data_on_the_tree():
    tree, path = _conv()
    marked = processors.mark_main_path(tree, path)
    main = [n.name for _, n in marked.walk() if n.attrs.get("main")]
    assert main == ["torch.nn.Conv2d", "at::native::_convolution", "aten::cudnn_convolution", "cudnnBackendExecute"]
    assert sum(1 for _ in marked.walk()) == sum(1 for _ in tree.walk())  # nothing dropped: JSON and HTML get the whole tree
    assert processors.mark_main_path(tree, path[1:]) is tree  # a path that does not start at the root marks nothing


def test_alternatives_fold_to_one_line_each_with_their_condition():
    tree, path = _conv()
    folded = processors.fold_to_main_path(processors.mark_main_path(tree, path))
    notes = {n.name for _, n in folded.walk() if n.kind is NodeKind.NOTE}
    assert notes == {
        "+ 1 other branch: torch.nn.functional.pad [self.padding_mode != 'zeros']",
        "+ 1 other call: _select_conv_backend",
        "+ 2 other backends: Miopen, Mkldnn",
    }
    note = next(n for _, n in folded.walk() if n.name.startswith("+ 2"))
    assert note.attrs["folded"][0] == ("aten::miopen_convolution", "case ConvBackend::Miopen", None)


def test_text_shows_numbered_steps_and_all_shows_the_tree():
    tree, path = _conv()
    marked = processors.mark_main_path(tree, path)
    text = render(marked, "text", width=120, color=False)
    assert text.splitlines() == [
        "1. torch.nn.Conv2d  [module]  @ torch/nn/modules/conv.py:378",
        "   + 1 other branch: torch.nn.functional.pad [self.padding_mode != 'zeros']",
        "2. at::native::_convolution  [kernel]  via dispatcher  @ aten/src/ATen/native/Convolution.cpp:1468",
        "   + 1 other call: _select_conv_backend",
        "   + 2 other backends: Miopen, Mkldnn",
        "3. aten::cudnn_convolution  via dispatcher  [case ConvBackend::Cudnn]",
        "4. cudnnBackendExecute  <cuDNN, closed>  [vendor]  via vendor  @ aten/src/ATen/native/cudnn/Conv_v8.cpp:400",
        "(the main path, 4 steps; + lines fold the rest, --all shows the whole tree)",
    ]
    full = render(marked, "text", width=200, color=False, full=True)
    assert full == render(tree, "text", width=200, color=False)  # --all: today's tree, line for line


def test_a_location_is_never_cut():
    for width in (20, 40, 60, 80):
        lines = fit("│   │   │   │   │   │   └── ", "at::native::raw_cudnn_convolution_forward_out  [kernel]  via direct", str(LOC), width)
        assert any(line.endswith(str(LOC)) for line in lines)
        assert all(len(line) <= width for line in lines if not line.endswith(str(LOC)))
    assert fit("", "short", str(LOC), None) == [f"short  @ {LOC}"]  # piped: the full line


def test_callers_main_path_climbs_to_the_entry_nearest_the_user():
    module = CallNode("torch.nn.Linear", NodeKind.MODULE)
    op = CallNode("aten::mm", NodeKind.OPERATOR)
    deep = CallNode("addmm_impl_cpu_", NodeKind.KERNEL, children=(CallNode("aten::addmm", NodeKind.OPERATOR, children=(module,)),))
    root = CallNode("gemm", NodeKind.KERNEL, children=(op, deep))
    path = processors.callers_main_path(CallTree(root))
    assert [n.name for n in path] == ["gemm", "addmm_impl_cpu_", "aten::addmm", "torch.nn.Linear"]
