"""Fixtures of the extend tests: scaffolded projects, each compiled once per
session (just in time, with g++ and ninja) into a folder under pytest's tmp
dir, and loaded into this process."""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from kernelmap.extend import load_extension, scaffold

ROOT = Path(__file__).resolve().parents[2]
RESNET50 = ROOT / "examples" / "resnet50.py"
MODE = """str mode='fast, "exact"'"""  # myadd's second extra argument


@dataclass(frozen=True)
class Built:
    root: Path  # the project folder
    op: str  # the custom operator: "kernelmap_ext::myrelu"
    build_s: float  # seconds the first build and load took


@pytest.fixture(scope="session", autouse=True)
def one_compile_job():
    """The machine is shared: ninja runs one compiler at a time."""
    previous = os.environ.get("MAX_JOBS")
    os.environ["MAX_JOBS"] = "1"
    yield
    if previous is None:
        os.environ.pop("MAX_JOBS", None)
    else:
        os.environ["MAX_JOBS"] = previous


@pytest.fixture(scope="session")
def projects(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("extend-projects")


def build(root: Path) -> Built:
    t0 = time.perf_counter()
    loaded = load_extension(root)
    return Built(root, loaded.custom_op or "", time.perf_counter() - t0)


@pytest.fixture(scope="session")
def myrelu(projects) -> Built:
    scaffold("aten::relu", "myrelu", out=projects / "myrelu")
    return build(projects / "myrelu")


@pytest.fixture(scope="session")
def myadd(projects) -> Built:
    # a string default with a comma and the other quote inside: C++ and Python must hold it as a string
    scaffold("aten::add.Tensor", "myadd", out=projects / "myadd", extra=["float beta=1.0", MODE])
    return build(projects / "myadd")


@pytest.fixture(scope="session")
def mysum(projects) -> Built:
    scaffold("aten::sum.dim_IntList", "mysum", out=projects / "mysum")
    return build(projects / "mysum")


def edit(path: Path, old: str, new: str) -> None:
    """A user's edit: replace the one line that holds `old`."""
    text = path.read_text()
    assert text.count(old) == 1, f"{path.name} holds {old!r} {text.count(old)} times"
    path.write_text(text.replace(old, new))


@pytest.fixture(scope="session")
def myconv(projects) -> Built:
    """aten::convolution with an extra `scale` the kernel multiplies its result by."""
    root = projects / "myconv"
    scaffold("aten::convolution", "myconv", out=root, extra=["float scale=1.0"], cuda=True)
    edit(root / "csrc" / "myconv.cpp", "(void)scale;", "out.mul_(scale);")
    return build(root)


@pytest.fixture(scope="session")
def mydconv(projects) -> Built:
    """aten::convolution's direct kernel (a loop of its own, not ATen's), unmodified."""
    root = projects / "mydconv"
    scaffold("aten::convolution", "mydconv", out=root, kernel="direct", cuda=True)
    return build(root)


@pytest.fixture(scope="session")
def mybn(projects) -> Built:
    """aten::native_batch_norm's reference kernel (a loop over channels), unmodified."""
    root = projects / "mybn"
    scaffold("aten::native_batch_norm", "mybn", out=root)
    return build(root)


def first_line_number(path: Path, pattern: str) -> int:
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if re.search(pattern, line):
            return number
    raise AssertionError(f"{pattern!r} not in {path}")
