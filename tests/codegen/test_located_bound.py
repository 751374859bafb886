"""The located answers kept on disk (Note [located answers kept]) are
bounded: past their limit, the oldest written are removed, looked over at a
process's first answer written and every so many after."""

from __future__ import annotations

import importlib
import os


def _answers(folder, count, start=0):
    for i in range(start, start + count):
        path = folder / f"{i:04d}.json"
        path.write_text("{}")
        os.utime(path, ns=(i * 10**9, i * 10**9))  # written in order


def test_the_oldest_answers_go_past_the_limit(tmp_path, monkeypatch):
    locate = importlib.import_module("kernelmap.codegen.locate")  # the package's `locate` function hides the module
    monkeypatch.setattr(locate, "_LOCATED_FILES", 8)
    monkeypatch.setattr(locate, "_PRUNE_EVERY", 4)
    monkeypatch.setattr(locate, "_WRITTEN", {})
    folder = tmp_path / "located"
    folder.mkdir()
    _answers(folder, 12)
    (folder / ".0099.json.1.2.tmp").write_text("{")  # another process's record being written: not an answer
    locate._bound_answers(folder)  # the first answer written: looked over
    assert sorted(p.name for p in folder.glob("*.json")) == [f"{i:04d}.json" for i in range(6, 12)]
    _answers(folder, 6, start=12)
    for _ in range(3):
        locate._bound_answers(folder)  # not looked over again until the fifth
    assert len(list(folder.glob("*.json"))) == 12
    locate._bound_answers(folder)
    assert sorted(p.name for p in folder.glob("*.json")) == [f"{i:04d}.json" for i in range(12, 18)]
    assert (folder / ".0099.json.1.2.tmp").exists()
