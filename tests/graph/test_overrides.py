"""torch._native DSL overrides appear in `stack` as dispatch alternatives beside ATen's kernel."""

from __future__ import annotations

from kernelmap import env
from kernelmap.dispatch.native import overrides


def test_stack_shows_each_override_for_the_device(context):
    from kernelmap import graph

    expected = [o for o in overrides("aten::bmm", static=True) if o.dispatch_key == "CUDA"]
    assert expected, "the installed wheel registers a CUDA override of bmm (torch/_native)"
    tree = graph.stack("aten::bmm", context("cuda"), depth=4)
    found = [n for _, n in tree.walk() if n.kind == "override"]
    assert len(found) == len(expected)
    root = env.torch_install().site_packages
    for node, o in zip(found, expected):
        impl = node.children[0]
        line = (root / impl.location.path).read_text().splitlines()[impl.location.line - 1]
        assert f"def {o.implementation.name.rsplit('.', 1)[-1]}(" in line
        assert node.attrs["dispatch_key"] == "CUDA" and node.condition
    cpu = graph.stack("aten::bmm", context("cpu"), depth=4)
    assert not [n for _, n in cpu.walk() if n.kind == "override"]


def test_a_traced_gpu_op_with_an_override_is_labelled():
    """A CUDA trace recorded elsewhere: an operator the installed torch's
    torch._native overrides on CUDA is labelled with the override."""
    from kernelmap.trace.resolve import Resolver

    resolver = Resolver(live=False)
    expected = [o for o in overrides("aten::bmm", static=True) if o.dispatch_key == "CUDA"]
    facts = resolver._op_facts("aten::bmm", ["float", "float"], "cuda", False)
    assert expected[0].implementation.name in facts["served_by"]
    assert "served_by" not in resolver._op_facts("aten::bmm", ["float", "float"], "cpu", False)
    assert "served_by" not in resolver._op_facts("aten::mm", ["float", "float"], "cuda", False)
