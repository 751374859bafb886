"""Note [generated lines kept]: the generated files' lines a process keeps
are bounded (LINES_KEPT characters, the least recently asked for forgotten
first), shared by every open copy of a set, and what is read again after
being forgotten is the file itself."""

from __future__ import annotations

import importlib

import pytest

from kernelmap.codegen.locate import GeneratedFiles, _KeptLines
from tests.codegen.conftest import file_lines

locate_mod = importlib.import_module("kernelmap.codegen.locate")  # kernelmap.codegen.locate is also a function's name


@pytest.fixture
def kept(monkeypatch):
    """An empty table for this test alone."""
    table = _KeptLines()
    monkeypatch.setattr(locate_mod, "_KEPT", table)
    return table


def _largest(generated, count: int) -> list[str]:
    sizes = {path: (generated.root / path).stat().st_size for path in generated.paths()}
    return sorted(sizes, key=sizes.get, reverse=True)[:count]


def test_open_copies_of_a_set_share_its_lines(generated, kept):
    path = _largest(generated, 1)[0]
    again = GeneratedFiles(generated.root, generated.manifest, generated.origin)
    assert again.lines(path) is generated.lines(path)
    assert kept.chars == len((generated.root / path).read_bytes().decode("utf-8", errors="replace"))


def test_the_lines_kept_are_bounded_and_read_again_alike(generated, kept, monkeypatch):
    paths = _largest(generated, 6)
    sizes = [(generated.root / p).stat().st_size for p in paths]
    bound = sizes[0] + sizes[1]  # room for the two largest, not for six
    monkeypatch.setattr(locate_mod, "LINES_KEPT", bound)
    first = {}
    for path in paths:
        lines = generated.lines(path)
        first[path] = lines
        assert kept.chars <= bound
    assert generated.lines(paths[-1]) is first[paths[-1]]  # the most recent is kept
    again = generated.lines(paths[0])  # the first was forgotten: read (and checked) again
    assert again is not first[paths[0]]
    assert kept.chars <= bound
    expected = file_lines(generated, paths[0])
    assert len(again) == len(expected)
    for n in (1, len(expected) // 2, len(expected)):
        assert again[n - 1] == expected[n - 1]


def test_a_file_larger_than_the_bound_is_still_read(generated, kept, monkeypatch):
    monkeypatch.setattr(locate_mod, "LINES_KEPT", 1000)
    path = _largest(generated, 1)[0]
    assert list(generated.lines(path)[:3]) == file_lines(generated, path)[:3]
    assert len(kept._lines) == 1


def test_the_headers_kept_are_bounded(monkeypatch):
    """A warm process asks for many operators' headers: HeaderFiles keeps the
    HEADERS_KEPT most recently asked for, and reads a forgotten one alike."""
    from kernelmap.codegen import headers as headers_module
    from kernelmap.codegen.headers import wheel_headers

    shipped = wheel_headers()
    assert shipped is not None
    monkeypatch.setattr(headers_module, "HEADERS_KEPT", 4)
    files = headers_module.HeaderFiles(shipped.aten_dir, shipped.origin)
    names = sorted(p.name for p in (shipped.aten_dir / "ops").glob("a*.h"))[:10]
    first = {name: files.lines(f"ops/{name}") for name in names}
    assert len(files._lines) == 4 and list(files._lines) == [f"ops/{name}" for name in names[-4:]]
    assert files.lines(f"ops/{names[-1]}") is first[names[-1]]
    again = files.lines(f"ops/{names[0]}")
    assert again == (shipped.aten_dir / "ops" / names[0]).read_text(errors="replace").splitlines() == first[names[0]]
    assert len(files._lines) == 4
