"""Tracing on the CPU: the path a convolution takes down to the backend that
really ran, ResNet-50 mapped end to end, and the Python API's failure modes."""

from __future__ import annotations

import pytest

from tests.trace.conftest import child_ops, op_nodes


def _select_backend(conv, x) -> str:
    import torch

    return torch._C._select_conv_backend(
        x, conv.weight, conv.bias, list(conv.stride), list(conv.padding), list(conv.dilation),
        conv.transposed, list(conv.output_padding), conv.groups,
    ).name


def _chain_below(node, names):
    """Follow first-child operators named `names` down from `node`; returns the last."""
    for name in names:
        nxt = [c for c in child_ops(node) if c.name == name]
        assert nxt, f"{node.name} has no child {name}; children: {[c.name for c in child_ops(node)]}"
        node = nxt[0]
    return node


def test_small_conv_traces_to_the_backend_that_ran(conv_trace):
    from kernelmap.trace.resolve import CONV_BACKEND_OPS

    conv, x, t = conv_trace
    expected = _select_backend(conv, x)
    [conv2d] = op_nodes(t.tree, "aten::conv2d")
    _conv = _chain_below(conv2d, ["aten::convolution", "aten::_convolution"])
    backend_ops = [c.name for c in child_ops(_conv) if c.name in CONV_BACKEND_OPS]
    assert [CONV_BACKEND_OPS[n] for n in backend_ops] == [expected]
    assert _conv.attrs["conv_backend"] == expected
    assert _conv.attrs["conv_backend_ran"] == expected


def test_a_larger_conv_takes_the_onednn_path():
    import torch

    from kernelmap.trace import trace

    if not torch.backends.mkldnn.is_available():
        pytest.skip("this torch is built without oneDNN")
    conv = torch.nn.Conv2d(64, 64, 3, padding=1, bias=False)
    x = torch.randn(1, 64, 56, 56)
    assert _select_backend(conv, x) == "Mkldnn"
    t = trace(conv, x)
    [_conv] = op_nodes(t.tree, "aten::_convolution")
    [onednn] = [c for c in child_ops(_conv) if c.name == "aten::mkldnn_convolution"]
    assert _conv.attrs["conv_backend"] == "Mkldnn"
    assert (onednn.attrs["library"], onednn.attrs["closed"]) == ("oneDNN", False)
    assert onednn.attrs["dispatch_key"] and onednn.attrs["kernel"] == "at::native::mkldnn_convolution"


def test_resnet50_forward_and_backward_are_fully_mapped(resnet_trace):
    import torch

    model, t = resnet_trace
    ops = op_nodes(t.tree)
    assert ops
    for n in ops:
        a = n.attrs
        assert a.get("op") and a.get("yaml"), f"{n.name} has no catalog entry: {a.get('unknown')}"
        assert a.get("dispatch_key"), f"{n.name} has no dispatch key: {a.get('dispatch_error')}"
        assert a.get("source") or a.get("source_reason"), f"{n.name} has neither source nor a reason"
        assert n.location is not None and n.location.path.endswith("native_functions.yaml")
    convs = sum(isinstance(m, torch.nn.Conv2d) for m in model.modules())
    modules = [n for _, n in t.tree.walk() if n.kind == "module" and n.name.startswith("Conv2d_")]
    assert len(modules) == convs
    # Backward: one ConvolutionBackward0 per convolution, each running convolution_backward.
    backward = [n for _, n in t.tree.walk() if n.kind == "autograd" and n.name == "ConvolutionBackward0"]
    assert len(backward) == convs
    assert all(any(c.name == "aten::convolution_backward" for c in child_ops(b)) for b in backward)
    assert all(b.attrs.get("forward_op") == "aten::convolution" for b in backward)
    # Forward ops that recorded autograd history were served below the Autograd key.
    [first_conv] = [n for n in op_nodes(t.tree, "aten::convolution")][:1]
    assert first_conv.attrs["requires_grad"] is True
    assert first_conv.attrs["dispatch_keys"][0].startswith("Autograd")


def test_resnet50_summary_counts_every_call(resnet_trace):
    model, t = resnet_trace
    s = t.summary()
    rows = {r.name: r for r in s.ops}
    assert rows["aten::conv2d"].calls == len(op_nodes(t.tree, "aten::conv2d"))
    assert rows["aten::convolution_backward"].closed is False
    assert rows["aten::conv2d"].total_us >= rows["aten::convolution"].total_us
    modules = {m.name: m for m in s.modules}
    assert modules["Conv2d"].calls == rows["aten::conv2d"].calls
    assert "Operators" in s.to_text() and "aten::conv2d" in s.to_text()


def test_failing_function_raises_with_the_partial_trace():
    import torch

    from kernelmap.trace import TracedCodeFailed, trace

    def step():
        torch.ones(3).add_(1)
        raise RuntimeError("bad step")

    with pytest.raises(TracedCodeFailed) as info:
        trace(step)
    assert isinstance(info.value.__cause__, RuntimeError)
    assert op_nodes(info.value.trace.tree, "aten::add_")
    assert any("partial" in note for note in info.value.trace.tree.notes)


def test_tracing_block_keeps_the_trace_when_the_block_raises():
    import torch

    from kernelmap.trace import tracing

    rec = tracing()
    with pytest.raises(KeyError):
        with rec:
            torch.zeros(2, 2).mul_(3)
            raise KeyError("x")
    assert op_nodes(rec.trace.tree, "aten::mul_")
    assert isinstance(rec.trace.error, KeyError)


def test_live_trace_exports_to_chrome_with_source_links(conv_trace, tmp_path):
    import json

    _, _, t = conv_trace
    out = t.export_chrome(tmp_path / "annotated.json")
    doc = json.loads(out.read_text())
    annotated = [e for e in doc["traceEvents"] if "kernelmap" in (e.get("args") or {})]
    conv2d = [e for e in annotated if e["name"] == "aten::conv2d"]
    assert conv2d and conv2d[0]["args"]["kernelmap"]["op"] == "aten::conv2d"
    assert conv2d[0]["args"]["kernelmap"]["yaml"].startswith("aten/src/ATen/native/native_functions.yaml:")
    assert doc["kernelmap"]["annotated_events"] == len(annotated)
