"""Checks run once per cache file (kernelmap.verified) and answers remembered
on disk (pysource's rebound names): trusted only while the file is the one
checked, never for a file written in the same clock tick as its check."""

from __future__ import annotations

import os
import time

from kernelmap import pysource
from kernelmap.verified import MARGIN_NS, is_verified, mark_verified


def _aged(path, seconds=10):
    past = time.time_ns() - seconds * 1_000_000_000
    os.utime(path, ns=(past, past))


def test_a_check_is_recorded_only_for_a_file_written_well_before_it(tmp_path):
    path = tmp_path / "index.sqlite"
    path.write_bytes(b"x" * 100)
    mark_verified(path, "sha256 abc", os.stat(path))  # written this tick: not recorded (Note [racy checks])
    assert not is_verified(path, "sha256 abc")
    _aged(path, MARGIN_NS // 1_000_000_000 + 5)
    mark_verified(path, "sha256 abc", os.stat(path))
    assert is_verified(path, "sha256 abc") and not is_verified(path, "sha256 other")


def test_any_write_or_replacement_undoes_it(tmp_path):
    path = tmp_path / "index.sqlite"
    path.write_bytes(b"x" * 100)
    _aged(path)
    mark_verified(path, "integrity_check", os.stat(path))
    assert is_verified(path, "integrity_check")
    path.write_bytes(b"y" * 100)  # same size, new mtime
    assert not is_verified(path, "integrity_check")
    _aged(path)
    mark_verified(path, "integrity_check", os.stat(path))
    st = os.stat(path)
    other = tmp_path / "other"
    other.write_bytes(b"z" * 100)
    os.utime(other, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(other, path)  # same size and mtime, another file
    assert not is_verified(path, "integrity_check")


def test_a_file_changed_during_its_check_is_not_recorded(tmp_path):
    path = tmp_path / "index.sqlite"
    path.write_bytes(b"x" * 100)
    _aged(path)
    before = os.stat(path)
    path.write_bytes(b"x" * 101)
    _aged(path)
    mark_verified(path, "integrity_check", before)
    assert not is_verified(path, "integrity_check")


def test_rebound_names_are_read_again_when_torch_init_changes(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELMAP_CACHE_DIR", str(tmp_path / "cache"))
    root = tmp_path / "tree"
    (root / "torch").mkdir(parents=True)
    init = root / "torch/__init__.py"
    init.write_text("for name in dir(_C._VariableFunctions):\n    pass\n\ndef norm():\n    pass\n")
    pysource.rebound_builtins.cache_clear()
    assert pysource.rebound_builtins(root) == {"torch.norm"}
    assert list((tmp_path / "cache/python").glob("rebound-*.json"))
    init.write_text("for name in dir(_C._VariableFunctions):\n    pass\n\ndef norm():\n    pass\n\ndef split():\n    pass\n")
    pysource.rebound_builtins.cache_clear()
    pysource._parse_file.cache_clear()
    assert pysource.rebound_builtins(root) == {"torch.norm", "torch.split"}
