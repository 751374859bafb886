"""Fixtures of the impact tests: the real 2.6.0 tree indexed (shared with
tests/graph), its impact data per device (the include graph, units,
operators and costs, built once into the session cache beside the
regenerated headers and sources), and the compiler's layout for checking
the graph against `g++ -MM` / `nvcc -M`."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.graph.conftest import TREE_NAME, indexed_tree  # noqa: F401 - the shared indexed tree


@pytest.fixture(scope="session")
def impact_data(indexed_tree):  # noqa: F811
    """device -> ImpactData of the real tree (built on first use)."""
    from kernelmap.impact import open_impact
    from kernelmap.source import open_index

    built = {}

    def get(device: str):
        if device not in built:
            with open_index(indexed_tree) as index:
                built[device] = open_impact(indexed_tree, index, device)
        return built[device]

    return get


@pytest.fixture(scope="session")
def layout(indexed_tree, impact_data, tmp_path_factory):  # noqa: F811
    """device -> the compiler's include folders, the wheel's configuration headers and -D flags."""
    from kernelmap import env
    from kernelmap.impact.check import CompileLayout

    work = tmp_path_factory.mktemp("impact-compiler")
    made = {}

    def get(device: str):
        if device not in made:
            data = impact_data(device)
            made[device] = CompileLayout.create(indexed_tree.root, Path(data.headers_dir), Path(data.sources_dir), work, device,
                                                env.torch_install().torch_dir / "include")
        return made[device]

    return get


@pytest.fixture(scope="session")
def answer(indexed_tree):  # noqa: F811
    """(target, device) -> the impact answer over the real tree, each asked once."""
    from kernelmap.impact import impact

    asked = {}

    def get(target: str, device: str = "cpu"):
        key = (target, device)
        if key not in asked:
            asked[key] = impact(target, device=device, source=TREE_NAME)
        return asked[key]

    return get
