"""Fixtures of the MCP tests: the caches the server reads (the real 2.6.0
tree indexed, the generated files; shared with tests/graph), a server
started as an agent's client starts it (`kernelmap mcp`, stdio) or served
over HTTP on loopback, and the SDK's own client to talk to it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.diff.conftest import old_tree  # noqa: F401 - shared fixtures
from tests.graph.conftest import TREE_NAME, generated, indexed_tree  # noqa: F401 - shared fixtures

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT / "tests/web/data/alexnet-step.json.gz"  # a real GPU trace (AlexNet, one step)


@pytest.fixture(scope="session")
def served(indexed_tree, generated):
    """The caches a server answers from: the 2.6.0 tree's index, the generated
    files, and the tree's own generated files and headers (made once here)."""
    from kernelmap import graph

    graph.stack("aten::add.Tensor", graph.open_context("cpu", source=TREE_NAME))
    return indexed_tree


def stdio_params(*args: str):
    from mcp import StdioServerParameters

    return StdioServerParameters(command=sys.executable, args=["-m", "kernelmap", "mcp", *args], env=dict(os.environ))


def with_client(server: Any, body: Callable[[Any], Awaitable[Any]], timeout: float = 300) -> Any:
    """Run `body(client)` with the SDK's client connected to `server` (stdio
    parameters or an HTTP URL), in its own event loop."""
    from mcp import Client

    async def main():
        with anyio.fail_after(timeout):
            async with Client(server) as client:
                return await body(client)

    return anyio.run(main)


@pytest.fixture(scope="session")
def http_url(served):
    """`kernelmap mcp --http --port 0`, as a user starts it: its URL."""
    proc = subprocess.Popen([sys.executable, "-m", "kernelmap", "mcp", "--http", "--port", "0"], stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ))
    said: list[str] = []
    try:
        line = proc.stderr.readline()
        m = re.search(r"serving MCP on (http://127\.0\.0\.1:\d+/mcp)", line)
        assert m, f"no URL on stderr: {line!r}"
        reader = threading.Thread(target=lambda: said.extend(proc.stderr), daemon=True)  # a full pipe would stall the server
        reader.start()
        yield m.group(1)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
    assert not any("Traceback" in line for line in said), "".join(said)[-3000:]  # every error was a reply, never a crash


def structured(result) -> dict:
    assert not result.is_error, result.content[0].text if result.content else result
    assert result.structured_content is not None and result.content and result.content[0].text.strip()
    return result.structured_content


def walk(node: dict):
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(n.get("children") or ())


def line_at(location: dict) -> str:
    """The line a LOCATION names, read from the file on this machine."""
    return Path(location["file"]).read_text(errors="replace").splitlines()[location["line"] - 1]


def holds(name: str, line: str) -> bool:
    """Whether a line spells the definition or call `name`: its last part, or
    for a structured kernel (`structured_add_Tensor::meta`) its macro
    (`TORCH_META_FUNC2(add, Tensor)`)."""
    m = re.search(r"structured_(\w+)::(meta|impl)$", name)
    if m:
        spelled = re.sub(r"\s+", "", line).replace(",", "_")
        if f"TORCH_{m.group(2).upper()}_FUNC" in spelled and f"({m.group(1)})" in spelled:
            return True
        # a use of a macro that pastes the operator's name from its first argument:
        # CREATE_COMPARISON_SCALAR_TENSOR_IMPL_FUNC(eq), CREATE_UNARY_TORCH_IMPL_FUNC(neg_out, neg_stub)
        use = re.fullmatch(r"[A-Z][A-Z0-9_]*_(?:META|IMPL)_FUNC\((\w+)(?:,\w+)*\);?", re.sub(r"\s+", "", line))
        return use is not None and (m.group(1) == use.group(1) or m.group(1).startswith(f"{use.group(1)}_"))
    return short(name) in line


def short(name: str) -> str:
    """The part of a C++ or Python name that its definition's or call's line spells."""
    name = re.sub(r"<.*", "", name)
    return re.split(r"::|\.", name)[-1]


def wait_for(predicate: Callable[[], bool], seconds: float = 30) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()
