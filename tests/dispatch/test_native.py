"""torch._native overrides: the static reading of the installed wheel's
torch/_native, checked against the files and against the live registry's own
function objects (inspect)."""

from __future__ import annotations

import inspect
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kernelmap import env
from kernelmap.dispatch import native
from kernelmap.model import CallNode


@pytest.fixture(scope="session")
def install():
    return env.torch_install()


@pytest.fixture(scope="session")
def static(install):
    return native.static_overrides(install.torch_dir / "_native", origin=install.origin)


def _line(install, loc) -> str:
    return (install.site_packages / loc.path).read_text().splitlines()[loc.line - 1]


def test_every_registering_package_is_read(install, static):
    ops_dir = install.torch_dir / "_native" / "ops"
    registering = {p.parent.name for p in ops_dir.rglob("*.py") if "register_op_override(" in p.read_text()}
    assert registering
    assert {Path(o.registered_at.path).parent.name for o in static} == registering


def test_static_locations_hold_their_names(install, static):
    for o in static:
        for ref in (o.condition, o.implementation, *o.kernels):
            line = _line(install, ref.location)
            assert re.match(rf"\s*(async\s+)?def {re.escape(ref.name)}\b", line) or re.search(rf"\b{re.escape(ref.name)}\b.*=", line), (ref, line)
        assert "register_op_override" in _line(install, o.registered_at)
        literal = o.op.removeprefix("aten::")
        # the op is named in the registering file, literally
        assert f'"{literal}"' in (install.site_packages / o.registered_at.path).read_text()


def test_simple_conditions_in_words(static):
    bmm = [o for o in static if o.op == "aten::bmm"]
    assert bmm and all(o.condition_text and "_is_outer_product(a, b)" in o.condition_text for o in bmm)
    assert any(k.name for o in bmm for k in o.kernels)  # the @triton.jit kernel


def test_static_reading_never_imports_torch():
    code = "import sys; from kernelmap.dispatch import native; native.overrides('aten::bmm'); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_live_registry_matches_inspect(install):
    from torch._native import registry

    held = [(op, key, n) for (op, key), nodes in registry._graphs.items() for n in nodes]
    assert held, "the installed torch registers at least one override on any build"
    for op, key, node in held:
        found = [o for o in native.overrides(op, static=False) if o.dispatch_key == key and o.registered]
        assert found, (op, key)
        o = found[0]
        for ref, fn in ((o.condition, node.cond_fn), (o.implementation, node.impl_fn)):
            fn = inspect.unwrap(fn)
            assert Path(inspect.getsourcefile(fn)).resolve() == (install.site_packages / ref.location.path).resolve()
            lines, start = inspect.getsourcelines(fn)
            assert start <= ref.location.line < start + len(lines)
            assert f"def {fn.__name__}" in _line(install, ref.location)


def test_where_shows_every_registered_override(kernelmap_cli):
    from torch._native import registry

    for op, key in registry._graphs:
        r = kernelmap_cli("where", f"aten::{op}", "--json")
        assert r.returncode == 0, r.stderr
        doc = json.loads(r.stdout)
        assert any(o["dispatch_key"] == key and o["registered"] for o in doc["overrides"])
        text = kernelmap_cli("where", f"aten::{op}").stdout
        assert "torch._native overrides" in text


def test_round_trip_nodes_and_label(static):
    o = static[0]
    assert native.NativeOverride.from_json(json.loads(json.dumps(o.to_json())), o.condition.location.origin) == o
    node = native.override_nodes(o)
    assert isinstance(node, CallNode) and node.children[0].name == o.implementation.name
    assert node.attrs["dispatch_key"] == o.dispatch_key
    assert native.served_by_override("aten::add.Tensor", static=True) is None
    assert native.served_by_override(o.op, o.dispatch_key, static=True) is not None


def test_a_torch_without_dsl_overrides_answers_where_without_them():
    """torch 2.11 (seen on a CUDA machine) has no torch._native: `where` used
    to end in a traceback there. Its live reading now finds no override."""
    code = (
        "import sys, torch\n"
        "sys.modules['torch._native'] = None  # what an import finds in a torch without the package\n"
        "from kernelmap.dispatch import native\n"
        "assert native.live_overrides() == ()\n"
        "from kernelmap.cli import main\n"
        "sys.argv = ['kernelmap', 'where', 'aten::bmm', '--json']\n"
        "main()\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    doc = json.loads(done.stdout)
    assert doc["operator"]["name"] == "aten::bmm"
    assert not any(o.get("registered") for o in doc["overrides"])
