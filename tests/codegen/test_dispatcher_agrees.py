"""The live dispatcher of the installed torch names, for every kernel
registered from generated code, the file and line of its TORCH_LIBRARY_IMPL
block in the build that made the wheel (Note [where the dispatcher says a
kernel was registered], codegen/index.py). The regenerated files must have
that registration at exactly that file and line, for every operator."""

from __future__ import annotations

from collections import defaultdict

import pytest

from kernelmap import dispatch
from kernelmap.model import is_generated_path
from tests.codegen.conftest import AGREEMENT

# Explained reasons a registration may be missed; each must be printed. None
# is expected for the installed torch: add one only with its explanation.
ALLOWED_MISSES: dict[str, str] = {}


def _all_operators() -> list[str]:
    torch = pytest.importorskip("torch")
    return sorted(torch._C._dispatch_get_all_op_names())


def _miss_reason(generated, path: str, line: int, namespace: str, key: str, op: str) -> str | None:
    if not generated.has_file(path):
        return "file not generated"
    in_block = generated.registrations_at(path, line)
    if not in_block:
        return "no TORCH_LIBRARY_IMPL block at that line"
    if (namespace, key, op) in in_block:
        return None
    if any(o == op for _, _, o in in_block):
        return "block registers the operator under another key"
    return "block has no m.impl for the operator"


def test_every_generated_registration_is_at_the_reported_file_and_line(generated):
    operators = _all_operators()
    checked = matched = 0
    misses: dict[str, list[str]] = defaultdict(list)
    for name in operators:
        namespace, _, op = name.partition("::")
        for reg in dispatch.registrations(name):  # active and shadowed (inactive) ones
            location = reg.kernel.location
            if location is None or reg.kernel.kind != "cpp" or not is_generated_path(location.path):
                continue
            checked += 1
            reason = _miss_reason(generated, location.path, location.line, namespace, reg.kernel.key, op)
            if reason is None:
                matched += 1
            else:
                misses[reason].append(f"{name} {reg.kernel.key}: {location}")

    schemas_checked = schemas_matched = 0
    for name in operators:
        location = dispatch.schema_location(name)
        if location is None or not is_generated_path(location.path):
            continue
        schemas_checked += 1
        if (location.path, location.line) in generated.schema_blocks(name.partition("::")[2]):
            schemas_matched += 1
        else:
            misses["schema m.def not in the TORCH_LIBRARY block at that line"].append(f"{name}: {location}")

    AGREEMENT.update(
        operators=len(operators),
        checked=checked,
        matched=matched,
        schemas_checked=schemas_checked,
        schemas_matched=schemas_matched,
        misses=dict(misses),
    )
    for reason, items in misses.items():
        print(f"{len(items)} misses: {reason}")
        for item in items:
            print(f"  {item}")

    assert len(operators) >= 300 and checked >= 300, "the dispatcher attributes too few registrations to generated files"
    unexplained = {r: items for r, items in misses.items() if r not in ALLOWED_MISSES}
    assert not unexplained, f"{sum(map(len, unexplained.values()))} of {checked + schemas_checked} registrations missed"
    assert matched + sum(len(i) for r, i in misses.items() if "schema" not in r) == checked


def test_the_reported_conv2d_registration_is_its_m_impl(generated):
    """aten::conv2d is registered in RegisterCompositeImplicitAutograd_0.cpp;
    the block the dispatcher names holds `m.impl("conv2d", ...)`."""
    kernels = {k.key: k for k in dispatch.live_registrations("aten::conv2d")}
    location = kernels["CompositeImplicitAutograd"].location
    assert location.path == "build/aten/src/ATen/RegisterCompositeImplicitAutograd_0.cpp"
    from tests.codegen.conftest import file_lines

    lines = file_lines(generated, location.path)
    assert lines[location.line - 1].startswith("TORCH_LIBRARY_IMPL(aten, CompositeImplicitAutograd, m)")
    assert ("aten", "CompositeImplicitAutograd", "conv2d") in generated.registrations_at(location.path, location.line)
