"""Fixtures of the codegen tests: the generated files of the installed torch,
made once per session in the session's private cache (tests/conftest.py),
and a summary of the dispatcher agreement printed at the end of the run."""

from __future__ import annotations

import pytest

from kernelmap.codegen import GeneratedFiles, generated_files

# Filled by test_dispatcher_agrees; printed by pytest_terminal_summary.
AGREEMENT: dict[str, object] = {}


@pytest.fixture(scope="session")
def generated(session_cache) -> GeneratedFiles:
    """The installed torch's generated files (generated once, a few seconds)."""
    return generated_files()


@pytest.fixture(scope="session")
def catalog(session_cache):
    from kernelmap.catalog import load_catalog

    return load_catalog()


def file_lines(files: GeneratedFiles, path: str) -> list[str]:
    """A generated file's lines, read afresh (not through the index or its cache)."""
    return (files.root / path).read_text().split("\n")


def pytest_terminal_summary(terminalreporter) -> None:
    if not AGREEMENT:
        return
    write = terminalreporter.write_line
    terminalreporter.section("codegen: live dispatcher vs regenerated files")
    write(
        f"operators: {AGREEMENT['operators']}; registrations in generated files: {AGREEMENT['checked']}; "
        f"matched at file:line: {AGREEMENT['matched']}; schema m.def blocks checked: "
        f"{AGREEMENT['schemas_checked']}, matched: {AGREEMENT['schemas_matched']}"
    )
    misses = AGREEMENT.get("misses") or {}
    if not misses:
        write("misses: none")
    for reason, items in misses.items():
        write(f"misses ({reason}): {len(items)}")
        for item in items[:20]:
            write(f"  {item}")
