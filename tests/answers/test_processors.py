"""Processors on tiny hand-made trees: each is a tree -> tree function."""

from __future__ import annotations

from dataclasses import replace

from kernelmap import processors
from kernelmap.model import CallNode, CallTree, EdgeKind, Location, NodeKind


def _names(tree: CallTree) -> list[tuple[int, str]]:
    return [(d, n.name) for d, n in tree.walk()]


def _tree() -> CallTree:
    view = CallNode("aten::view", NodeKind.OPERATOR, via=EdgeKind.DISPATCHER, attrs={"utility": True})
    helper = CallNode("check_args", NodeKind.KERNEL, Location("aten/src/ATen/native/Conv.cpp", 3), EdgeKind.DIRECT, children=(view,),
                      attrs={"identity": "cpp:check_args"})
    alloc = CallNode("empty_cpu", NodeKind.KERNEL, via=EdgeKind.DISPATCHER, attrs={"identity": "cpp:empty_cpu"})
    empty = CallNode("aten::empty", NodeKind.OPERATOR, via=EdgeKind.DISPATCHER, children=(alloc,), attrs={"utility": True})
    vendor = CallNode("cudnnConvolutionForward", NodeKind.VENDOR, via=EdgeKind.VENDOR, attrs={"library": "cuDNN", "closed": True})
    work = CallNode("raw_conv", NodeKind.KERNEL, via=EdgeKind.DIRECT, children=(vendor,), attrs={"identity": "cpp:raw_conv"})
    other = CallNode("mkldnn_conv", NodeKind.KERNEL, via=EdgeKind.DISPATCHER, children=(CallNode("ideep::f", NodeKind.VENDOR),),
                     attrs={"branch": "a branch for another device or backend than cuda"})
    again = CallNode("raw_conv", NodeKind.KERNEL, via=EdgeKind.DIRECT, children=(vendor,), attrs={"identity": "cpp:raw_conv"})
    root = CallNode("conv", NodeKind.KERNEL, children=(helper, empty, work, other, again), attrs={"identity": "cpp:conv"})
    return CallTree(root, ("a note",), {"kind": "stack"})


def test_prune_plumbing_keeps_utility_calls_and_helpers_as_steps():
    """A utility a kept step calls stays, one step with nothing below it
    (Note [utilities as steps]); a helper of the tree's own code is a step,
    with the utilities it calls (Note [helpers as steps]); c10's containers
    that reach nothing are plumbing."""
    tree = _tree()
    container = CallNode("c10::SmallVector::push_back", NodeKind.KERNEL, Location("c10/util/SmallVector.h", 10), EdgeKind.DIRECT)
    tree = CallTree(replace(tree.root, children=(*tree.root.children, container)), tree.notes, tree.meta)
    pruned = processors.prune_plumbing(tree)
    names = [n for _, n in _names(pruned)]
    assert "check_args" in names and "aten::view" in names and "c10::SmallVector::push_back" not in names
    (empty,) = [n for _, n in pruned.walk() if n.name == "aten::empty"]
    assert empty.attrs["utility"] and empty.children == () and "empty_cpu" not in names
    assert names.count("cudnnConvolutionForward") == 2 and "mkldnn_conv" in names


def test_fold_notes_gives_a_steps_utilities_one_line():
    utilities = [CallNode(f"aten::{name}", NodeKind.OPERATOR, via=EdgeKind.DISPATCHER, attrs={"utility": True})
                 for name in ("reshape", "transpose.int", "reshape", "expand")]
    work = CallNode("mm", NodeKind.KERNEL, via=EdgeKind.DIRECT)
    notes = processors.fold_notes([utilities[0], work, *utilities[1:]])
    assert [n.name for n in notes] == ["+ 4 utilities: reshape x2, transpose.int, expand", "+ 1 other call: mm"]
    assert [f[0] for f in notes[0].attrs["folded"]] == [u.name for u in utilities]


def test_collapse_branches_marks_and_drops_children():
    tree = processors.collapse_branches(_tree())
    node = next(n for _, n in tree.walk() if n.name == "mkldnn_conv")
    assert node.children == () and node.attrs["collapsed"].startswith("a branch for another device")


def test_cut_at_depth_marks_the_cut():
    tree = processors.cut_at_depth(_tree(), 1)
    assert max(d for d, _ in tree.walk()) == 1
    work = next(n for _, n in tree.walk() if n.name == "raw_conv")
    assert work.attrs["truncated"] == "depth 1 reached"
    assert processors.cut_at_depth(_tree(), 0).root.children == ()


def test_hide_below_counts_what_it_hid():
    tree = processors.hide_below(_tree(), "raw_conv")
    hidden = [n for _, n in tree.walk() if n.name == "raw_conv"]
    assert all(n.children == () and n.attrs["hidden"] == 1 for n in hidden)


def test_mark_repeats_keeps_the_first_expansion():
    tree = processors.mark_repeats(_tree())
    first, second = [n for _, n in tree.walk() if n.name == "raw_conv"]
    assert first.children and not second.children and second.attrs["repeat"] == "expanded above"


def test_cut_recursion():
    inner = CallNode("f", NodeKind.KERNEL, children=(CallNode("g", NodeKind.KERNEL),), attrs={"identity": "cpp:f"})
    tree = CallTree(CallNode("f", NodeKind.KERNEL, children=(inner,), attrs={"identity": "cpp:f"}))
    cut = processors.cut_recursion(tree)
    assert cut.root.children[0].children == () and "recursion" in cut.root.children[0].attrs["cycle"]


def test_processors_leave_their_input_alone():
    tree = _tree()
    before = tree.to_json()
    processors.prune_plumbing(processors.collapse_branches(processors.cut_at_depth(tree, 1)))
    assert tree.to_json() == before


def test_compact_layers_keeps_one_node_per_layer_on_each_path():
    vendor = CallNode("cudnnConvolutionForward", NodeKind.VENDOR)
    k2 = CallNode("raw_conv", NodeKind.KERNEL, children=(vendor,))
    k1 = CallNode("conv_impl", NodeKind.KERNEL, children=(k2,))
    op2 = CallNode("aten::_convolution", NodeKind.OPERATOR, children=(k1,))
    op1 = CallNode("aten::conv2d", NodeKind.OPERATOR, children=(op2,))
    root = CallNode("torch.nn.Conv2d", NodeKind.MODULE, children=(CallNode("Conv2d.forward", NodeKind.PYTHON, children=(op1,)),))
    compact = processors.compact_layers(CallTree(root))
    assert [(d, n.name) for d, n in compact.walk()] == [
        (0, "torch.nn.Conv2d"), (1, "aten::conv2d"), (2, "conv_impl"), (3, "cudnnConvolutionForward"),
    ]


def test_prune_plumbing_keeps_a_depth_cut_chain_with_its_mark():
    """A helper whose children a limit cut is unknown below, not plumbing: it stays, marked."""
    cut = CallNode("cudnn_convolution_forward_out", NodeKind.KERNEL, via=EdgeKind.DIRECT,
                   attrs={"identity": "cpp:fwd", "truncated": "depth 24 reached"})
    root = CallNode("cudnn_convolution", NodeKind.KERNEL, children=(cut, CallNode("check", NodeKind.KERNEL, via=EdgeKind.DIRECT)))
    pruned = processors.prune_plumbing(CallTree(root))
    (kept,) = pruned.root.children
    assert kept.name == "cudnn_convolution_forward_out" and kept.attrs["truncated"] == "depth 24 reached"


def test_prune_plumbing_unmarks_the_repeats_of_a_node_left_with_no_children():
    """A kept node (a backend check) whose children were all plumbing: its repeat
    must not say "expanded above" when nothing is expanded anywhere."""
    def check(**facts):
        helper = CallNode("shape_helper", NodeKind.KERNEL, via=EdgeKind.DIRECT, attrs={"identity": "cpp:shape_helper"})
        return CallNode("use_cudnn", NodeKind.KERNEL, via=EdgeKind.DIRECT, children=() if facts else (helper,),
                        attrs={"identity": "cpp:use_cudnn", "keep": True, **facts})

    vendor = CallNode("cudnnConvolutionForward", NodeKind.VENDOR, via=EdgeKind.VENDOR)
    work = CallNode("raw_conv", NodeKind.KERNEL, via=EdgeKind.DIRECT, children=(vendor,), attrs={"identity": "cpp:raw_conv"})
    again = CallNode("raw_conv", NodeKind.KERNEL, via=EdgeKind.DIRECT, attrs={"identity": "cpp:raw_conv", "repeat": "expanded above"})
    root = CallNode("select_backend", NodeKind.KERNEL, children=(check(), check(repeat="expanded above"), work, again))
    pruned = processors.prune_plumbing(CallTree(root))
    first, second, kept_work, kept_again = pruned.root.children
    assert first.name == second.name == "use_cudnn" and first.children == () and "repeat" not in second.attrs
    assert kept_work.children and kept_again.attrs["repeat"] == "expanded above"  # a real twin keeps its mark


def test_drop_inner_autograd_splices_wrappers_that_never_run():
    def op(name, *children):
        return CallNode(name, NodeKind.OPERATOR, via=EdgeKind.DISPATCHER, children=children)

    def autograd(name, *children):
        return CallNode(name, NodeKind.WRAPPER, via=EdgeKind.AUTOGRAD, children=children)

    kernel = CallNode("at::native::_convolution", NodeKind.KERNEL, children=(op("aten::cudnn_convolution", autograd("VariableType::cudnn_convolution",
                      CallNode("wrapper_CUDA__cudnn_convolution", NodeKind.WRAPPER, via=EdgeKind.DISPATCHER))),))
    outer = op("aten::convolution", autograd("VariableType::convolution", op("aten::_convolution", autograd("VariableType::_convolution", kernel))))
    tree = CallTree(op("aten::conv2d", outer))  # conv2d is composite implicit: no wrapper of its own
    names = [n for _, n in _names(processors.drop_inner_autograd(tree))]
    assert names == ["aten::conv2d", "aten::convolution", "VariableType::convolution", "aten::_convolution", "at::native::_convolution",
                     "aten::cudnn_convolution", "wrapper_CUDA__cudnn_convolution"]
