"""The index keeps each file's #include directives and #defines, updated
with the file: an edit re-reads that file alone, a removed file takes its
directives with it (on a tiny tree built here)."""

from __future__ import annotations

from tests.source.conftest import make_tree


def test_directives_follow_the_files_incrementally(tmp_path, monkeypatch):
    from kernelmap.source import add_tree, build_index, open_index

    monkeypatch.setenv("KERNELMAP_CACHE_DIR", str(tmp_path / "cache"))
    root = make_tree(tmp_path / "t", {
        "aten/src/ATen/A.h": "#pragma once\n#define A_ON 1\n#include <ATen/B.h>\n",
        "aten/src/ATen/B.h": "#pragma once\n",
        "aten/src/ATen/A.cpp": "#include <ATen/A.h>\n#if A_ON\n#include <ATen/B.h>\n#endif\n",
    })
    tree = add_tree(root)
    build_index(tree, jobs=1)
    with open_index(tree) as index:
        assert index.include_directives() == [
            ("aten/src/ATen/A.cpp", 1, "ATen/A.h", 1, None),
            ("aten/src/ATen/A.cpp", 3, "ATen/B.h", 1, "A_ON"),
            ("aten/src/ATen/A.h", 3, "ATen/B.h", 1, None),
        ]
        assert index.macro_definitions() == [("aten/src/ATen/A.h", 2, "A_ON", "1", None)]
    (root / "aten/src/ATen/A.cpp").write_text('#include "B.h"\n')
    (root / "aten/src/ATen/A.h").unlink()
    report = build_index(tree, jobs=1)
    assert (report.parsed, report.removed, report.full) == (1, 1, False)
    with open_index(tree) as index:
        assert index.include_directives() == [("aten/src/ATen/A.cpp", 1, "B.h", 0, None)]
        assert index.macro_definitions() == []
