"""Custom operator schemas from ATen schemas: renamed, SymInt made int, extra
arguments appended keyword-only; the mistakes a user can make refused."""

from __future__ import annotations

import pytest

from kernelmap.catalog import load_catalog
from kernelmap.errors import BadInput
from kernelmap.extend.errors import NotScaffoldable
from kernelmap.extend.schema import custom_op_spec


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


def spec_of(catalog, op, name, extra=()):
    return custom_op_spec(op, catalog.get(op).schema, name, extra=extra)


def test_extra_arguments_are_appended_keyword_only(catalog):
    s = spec_of(catalog, "aten::add.Tensor", "myadd", ("float beta=1.0",))
    assert s.schema == "myadd(Tensor self, Tensor other, *, Scalar alpha=1, float beta=1.0) -> Tensor"
    assert [p.cpp_type for p in s.params] == ["const at::Tensor &", "const at::Tensor &", "const at::Scalar &", "double"]
    assert s.py_signature() == "self, other, *, alpha=1, beta=1.0"
    assert s.aten_call_args() == "self, other, alpha=alpha"


def test_a_star_is_added_when_the_original_has_no_keyword_only_arguments(catalog):
    s = spec_of(catalog, "aten::relu", "myrelu", ("int k=2, bool flag=False",))
    assert s.schema == "myrelu(Tensor self, *, int k=2, bool flag=False) -> Tensor"


def test_symint_becomes_int(catalog):
    s = spec_of(catalog, "aten::convolution", "myconv")
    assert "SymInt" in catalog.get("aten::convolution").schema
    assert "SymInt" not in s.schema
    assert s.schema.startswith("myconv(Tensor input, Tensor weight, Tensor? bias, int[] stride,")


def test_several_results(catalog):
    s = spec_of(catalog, "aten::native_batch_norm", "mybn")
    assert s.returns == ("Tensor", "Tensor", "Tensor")
    assert s.cpp_return == "::std::tuple<at::Tensor,at::Tensor,at::Tensor>"


@pytest.mark.parametrize(
    "extra, message",
    [
        ("float beta", "needs a default"),
        ("float alpha=1.0", "already takes"),
        ("floaty beta=1", "not a schema argument"),
        ("Tensor(a!) t=None", "cannot alias"),
    ],
)
def test_bad_extra_arguments(catalog, extra, message):
    with pytest.raises(BadInput, match=message):
        spec_of(catalog, "aten::add.Tensor", "myadd", (extra,))


@pytest.mark.parametrize("name", ["1relu", "my-relu", "my relu", "", "class"])
def test_bad_names(catalog, name):
    with pytest.raises(BadInput, match="identifier"):
        spec_of(catalog, "aten::relu", name)


@pytest.mark.parametrize("op", ["aten::add_.Tensor", "aten::add.out", "aten::transpose.int"])
def test_operators_that_mutate_or_view_are_refused(catalog, op):
    with pytest.raises(NotScaffoldable):
        spec_of(catalog, op, "mine")
