"""`scaffold --extra`: a default torch's schema parser cannot read is refused
with one line, before a project is written whose m.def torch would reject;
the ground truth is torch._C.parse_schema itself."""

from __future__ import annotations

import ast
import re
import string

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernelmap.errors import BadInput
from kernelmap.extend.schema import parse_extra

EXTRAS = [
    "float s=abc", "float s=--1", "float s=1.0.0", "str s=x", "float s=nan", "Tensor s=1", "float s=1e999",
    "float s=1.5", "float s=-2e-3", "int k=2", "int k=-7", "bool b=False", "str m=\"mean\"", "int[2] p=1", "int[] q=[1, 2]",
    "float? f=None", "Scalar a=1", "Scalar a=0.5", "Tensor? t=None", "int? k=None",
]


@pytest.mark.parametrize("extra", EXTRAS)
def test_an_extra_default_is_accepted_exactly_when_torch_reads_it(extra):
    import torch

    try:
        torch._C.parse_schema(f"myop(Tensor self, *, {extra}) -> Tensor")
        torch_reads = True
    except (RuntimeError, IndexError):  # IndexError: `stod` out of range (1e999)
        torch_reads = False
    try:
        parse_extra([extra])
        accepted = True
    except BadInput:
        accepted = False
    assert accepted == torch_reads, (extra, torch_reads)


# ---------------------------------------------------------------------------
# Note [defaults are values]: whatever the user types as a default, the
# project scaffold writes either holds it as a value or is never written.


def _cpp_literal_bytes(literal: str) -> bytes:
    """The bytes a C++ narrow string literal holds, for the escapes scaffold writes."""
    assert literal[0] == literal[-1] == '"'
    body, out, i = literal[1:-1], bytearray(), 0
    while i < len(body):
        ch = body[i]
        assert ch != '"' and ch != "\n", literal  # an unescaped quote or a newline would end the literal
        if ch != "\\":
            out += ch.encode()
            i += 1
        elif body[i + 1] in '"\\?':
            out += body[i + 1].encode()
            i += 2
        else:
            assert re.fullmatch(r"[0-7]{3}", body[i + 1:i + 4]), literal
            out.append(int(body[i + 1:i + 4], 8))
            i += 4
    return bytes(out)


@pytest.fixture(scope="module")
def relu():
    from kernelmap.extend.project import _operator

    return _operator("aten::relu")


def _shape(source: str) -> list[str]:
    """The module's statements with every string constant blanked: its structure."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            node.value = ""
    return [ast.dump(node) for node in tree.body]


@pytest.fixture(scope="module")
def baseline(relu):
    """The structure of __init__.py with a plain string default."""
    from kernelmap.extend.project import render_project

    _, _, files = render_project(relu, "myop", extra=("str m='fast'",))
    return _shape(files["myop/__init__.py"])


def _fake_defaults(tree: ast.Module) -> dict[str, object]:
    fake = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "_fake")
    args = fake.args
    return {a.arg: ast.literal_eval(d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None}


@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=st.text(max_size=40) | st.text(alphabet=string.printable, max_size=40), quote=st.sampled_from(["'", '"', ""]))
def test_any_default_string_is_held_as_a_string_or_refused(relu, baseline, value, quote):
    """For any text between quotes (or none): scaffold refuses it in one line,
    or the project holds it as a string: __init__.py parses with the same
    structure as with a plain default (nothing became code), its signature's
    default is the string and SCHEMA the schema; the C++ m.def literal holds
    the schema's bytes; torch reads the schema's default back as the string."""
    import torch

    from kernelmap.extend.project import render_project

    extra = f"str m={quote}{value}{quote}"
    try:
        spec, _, files = render_project(relu, "myop", extra=(extra,))
    except BadInput as e:
        assert len(str(e).splitlines()) == 1, str(e)
        return
    assert quote, extra  # an unquoted default is never a string
    init = files["myop/__init__.py"]
    assert _shape(init) == baseline
    tree = ast.parse(init)
    schema = next(n for n in tree.body if isinstance(n, ast.Assign) and n.targets[0].id == "SCHEMA")
    assert ast.literal_eval(schema.value) == spec.schema
    assert _fake_defaults(tree) == {"m": value}
    (m_def,) = re.findall(r"^  m\.def\((.*)\);$", files["csrc/myop.cpp"], re.M)
    assert _cpp_literal_bytes(m_def) == spec.schema.encode()
    (arg,) = [a for a in torch._C.parse_schema(spec.schema).arguments if a.name == "m"]
    assert arg.default_value == value


@pytest.mark.parametrize("extra", ['str mode="fast"', "str mode='fast'", "str mode='a,b'", "str mode=\"it's\"",
                                   "str mode='\"+__import__(\"os\").getcwd()+\"'"])
def test_a_string_default_is_written_as_a_python_and_cpp_literal(relu, extra):
    """The brief's `str mode="fast"`, a comma inside the quotes, the other
    quote inside, and a default that would be code if pasted into a Python string."""
    from kernelmap.extend.project import render_project

    spec, _, files = render_project(relu, "myop", extra=(extra,))
    value = extra.split("=", 1)[1][1:-1]
    init = files["myop/__init__.py"]
    assert _fake_defaults(ast.parse(init)) == {"mode": value}
    assert f"SCHEMA = {spec.schema!r}" in init
    assert spec.schema.endswith(f"*, {extra}) -> Tensor")
    assert "__import__" not in init or f"{value!r}" in init
