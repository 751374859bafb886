"""override(): the dispatcher routes one operator's calls for one key to a
Python callable or a custom operator, counts them, and is exactly as before
afterwards; mismatched schemas are refused before anything is registered."""

from __future__ import annotations

import pytest
import torch

from kernelmap.errors import BadInput, UnknownName
from kernelmap.extend import OverrideError, SchemaMismatch, override
from kernelmap.extend.overrides import check_override_schema


def dump(op: str) -> str:
    return torch._C._dispatch_dump(op) + torch._C._dispatch_dump_table(op)


def test_a_python_callable_takes_the_cpu_calls_and_is_removed_after():
    x = torch.randn(5)
    before = dump("aten::relu")
    with override("aten::relu", lambda self: torch.full_like(self, 7.0), key="CPU") as o:
        assert dump("aten::relu") != before
        assert torch.equal(torch.relu(x), torch.full_like(x, 7.0))
        assert torch.equal(torch.nn.functional.relu(x), torch.full_like(x, 7.0))
    assert o.calls == 2
    assert dump("aten::relu") == before
    assert torch.equal(torch.relu(x), x.clamp_min(0))


def test_registrations_are_restored_when_the_block_raises():
    before = dump("aten::relu")
    with pytest.raises(ZeroDivisionError):
        with override("aten::relu", lambda self: self, key="CPU"):
            1 / 0
    assert dump("aten::relu") == before


def test_other_keys_are_untouched():
    x = torch.randn(3, device="meta")
    with pytest.warns(UserWarning, match="the override of aten::relu for CPU received no calls"):
        with override("aten::relu", lambda self: self * 0 + 1, key="CPU") as o:
            assert torch.relu(x).device.type == "meta"
    assert o.calls == 0


def test_an_override_that_receives_no_calls_warns():
    model = torch.nn.BatchNorm2d(3).eval()
    with pytest.warns(UserWarning, match="aten::cudnn_batch_norm for CPU received no calls"):
        with override("aten::cudnn_batch_norm", lambda *args: None, key="CPU") as o:
            model(torch.randn(1, 3, 4, 4))
    assert o.calls == 0


def test_a_custom_op_with_an_extra_argument(myadd):
    a, b = torch.randn(3), torch.randn(3)
    before = dump("aten::add.Tensor")
    with override("aten::add.Tensor", "kernelmap_ext::myadd", key="CPU", extra_args={"beta": 2.0}) as o:
        out = a + b
    torch.testing.assert_close(out, torch.add(a, b))
    assert o.calls >= 1
    assert o.extra_args == {"beta": 2.0}
    assert dump("aten::add.Tensor") == before


def test_a_custom_op_whose_schema_does_not_fit_is_refused_before_registration(myrelu):
    before = dump("aten::convolution")
    with pytest.raises(SchemaMismatch, match="kernelmap_ext::myrelu cannot stand in for aten::convolution"):
        with override("aten::convolution", "kernelmap_ext::myrelu", key="CPU"):
            pytest.fail("the block must not run")
    assert dump("aten::convolution") == before


def test_a_callable_whose_signature_does_not_fit_is_refused():
    before = dump("aten::relu")
    with pytest.raises(SchemaMismatch, match="cannot take the arguments"):
        with override("aten::relu", lambda a, b: a, key="CPU"):
            pass
    assert dump("aten::relu") == before


def test_a_kernel_that_calls_the_operator_it_overrides_is_stopped():
    x = torch.randn(3)
    with pytest.raises(OverrideError, match="calls aten::relu, the operator it overrides"):
        with override("aten::relu", lambda self: torch.relu(self), key="CPU"):
            torch.relu(x)
    torch.testing.assert_close(torch.relu(x), x.clamp_min(0))


def test_unknown_names_and_keys():
    with pytest.raises(UnknownName):
        with override("aten::no_such_op", lambda x: x):
            pass
    with pytest.raises(UnknownName, match="is its library loaded"):
        with override("aten::relu", "nolib::nothing"):
            pass
    with pytest.raises(BadInput, match="not a dispatch key"):
        with override("aten::relu", lambda self: self, key="NoSuchKey"):
            pass


def test_schema_rules():
    conv = torch.ops.aten.convolution.default._schema
    parse = torch._C.parse_schema
    ok = parse("m::c(Tensor input, Tensor weight, Tensor? bias, int[] stride, int[] padding, int[] dilation, "
               "bool transposed, int[] output_padding, int groups, *, float scale=1.0) -> Tensor")
    check_override_schema(conv, ok)
    check_override_schema(conv, ok, {"scale": 2.0})
    needs_value = parse("m::c(Tensor input, Tensor weight, Tensor? bias, int[] stride, int[] padding, int[] dilation, "
                        "bool transposed, int[] output_padding, int groups, *, float scale) -> Tensor")
    with pytest.raises(SchemaMismatch, match="'scale' has no default"):
        check_override_schema(conv, needs_value)
    check_override_schema(conv, needs_value, {"scale": 1.0})
    with pytest.raises(SchemaMismatch, match="not extra arguments"):
        check_override_schema(conv, ok, {"shift": 1.0})
    wrong_type = parse("m::c(Tensor input, Tensor weight, Tensor bias, int[] stride, int[] padding, int[] dilation, "
                       "bool transposed, int[] output_padding, int groups) -> Tensor")
    with pytest.raises(SchemaMismatch, match="argument 2 'bias' is Tensor\\? there but 'bias' is Tensor here"):
        check_override_schema(conv, wrong_type)
    add = torch.ops.aten.add.Tensor._schema
    with pytest.raises(SchemaMismatch, match="no keyword argument 'alpha'"):
        check_override_schema(add, parse("m::a(Tensor self, Tensor other) -> Tensor"))
    with pytest.raises(SchemaMismatch, match="returns"):
        check_override_schema(add, parse("m::a(Tensor self, Tensor other, *, Scalar alpha=1) -> (Tensor, Tensor)"))
    # a string default with a comma and quotes inside (torch prints it with backslashes) is a default like any other
    with_string = parse("""m::a(Tensor self, Tensor other, *, Scalar alpha=1, str mode='fast, "exact"') -> Tensor""")
    check_override_schema(add, with_string)
    check_override_schema(add, with_string, {"mode": "slow"})
    with pytest.raises(SchemaMismatch, match="returns"):
        check_override_schema(add, parse("""m::a(Tensor self, Tensor other, *, Scalar alpha=1, str m='a=b, c') -> (Tensor, Tensor)"""))


def test_nested_overrides_of_one_key_unwind_in_order():
    x = torch.randn(4)
    before = dump("aten::relu")
    with override("aten::relu", lambda self: torch.full_like(self, 1.0)) as outer:
        middle = dump("aten::relu")
        with override("aten::relu", lambda self: torch.full_like(self, 2.0)) as inner:
            assert torch.equal(torch.relu(x), torch.full_like(x, 2.0))
        assert dump("aten::relu") == middle
        assert torch.equal(torch.relu(x), torch.full_like(x, 1.0))
    assert (outer.calls, inner.calls) == (1, 1)
    assert dump("aten::relu") == before
