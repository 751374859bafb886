"""The server under an agent's mistakes and load: bad arguments are tool
errors and the server goes on; an answer too large for a reply is bounded
and continued with expand until every node and item was given once; 200
mixed calls and a client that goes away mid-call leave it serving; the HTTP
transport listens on loopback and refuses a request from another origin or
host; resources read only inside the served roots."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import anyio
import httpx
import pytest

from kernelmap.mcp.bound import CHARS_PER_TOKEN, size
from tests.conftest import run_kernelmap
from tests.mcp.conftest import TRACE, TREE_NAME, holds, line_at, stdio_params, structured, walk, with_client


def _without_resources(value):
    """A document's data less the `resource` URI the server adds to each location."""
    if isinstance(value, dict):
        return {k: _without_resources(v) for k, v in value.items() if k != "resource"}
    if isinstance(value, list):
        return [_without_resources(v) for v in value]
    return value


def _folds(node):
    return [n["facts"]["more"] for n in walk(node) if "more" in n["facts"]]


def test_bad_arguments_are_tool_errors_and_the_server_goes_on(served):
    bad = [
        ("where", {"name": "conv2"}, "closest: conv2d"),  # an unknown name: the closest ones
        ("where", {}, "name"),  # a missing argument
        ("where", {"name": "torch.add", "device": "tpu"}, "device"),  # not a device
        ("where", {"name": "torch.add", "dtype": "float33"}, "unknown dtype"),
        ("stack", {"target": "torch.add", "depth": -1}, "depth"),
        ("stack", {"target": "torch.add", "depth": "deep"}, "depth"),
        ("stack", {"target": "torch.add", "limit_tokens": 10}, "limit_tokens"),
        ("stack", {"target": "torch.add", "source": "no-such-tree"}, "no-such-tree"),
        ("path", {"start": "torch.add", "target": "no_such_symbol_anywhere"}, "no_such_symbol_anywhere"),
        ("find", {"name": ""}, "name"),
        ("find", {"name": "\x00\x01"}, ""),
        ("where", {"name": "x" * 5000}, "at most 4096"),
        ("kernel", {"name": "<<<>>>"}, "not a kernel name"),
        ("trace", {"file": "/no/such/trace.json"}, "cannot read"),
        ("trace", {"file": str(TRACE), "op": "aten::no_such_op"}, "no operator"),
        ("trees", {"select": "no-such-tree"}, "no-such-tree"),
        ("expand", {"id": "a9999.n1.0"}, "no longer kept"),
        ("expand", {"id": "../../etc"}, "not a fold id"),
        ("diff", {"target": "aten::relu", "from_tree": TREE_NAME, "to_tree": TREE_NAME}, ""),
        ("no_such_tool", {}, "no_such_tool"),
    ]

    async def body(client):
        out = []
        for name, args, _ in bad:
            result = await client.call_tool(name, args)
            out.append(result)
            good = await client.call_tool("where", {"name": "torch.add"})  # the server goes on after each
            assert not good.is_error
        return out

    results = with_client(stdio_params(), body)
    for (name, args, expected), result in zip(bad, results):
        text = result.content[0].text
        assert result.is_error, (name, args)
        assert expected in text and "Traceback" not in text, (name, args, text)


def test_an_oversized_answer_is_bounded_and_every_fold_expands(served):
    from kernelmap import graph
    from kernelmap.api import with_main_path

    full = with_main_path(graph.stack("torch.nn.Conv2d", graph.open_context("cuda", source=TREE_NAME)))  # as the CLI's --json
    total = sum(1 for _ in full.walk())
    limit = 2000

    async def body(client):
        first = structured(await client.call_tool("stack", {"target": "torch.nn.Conv2d", "device": "cuda", "limit_tokens": limit}))
        pages = []
        pending = _folds(first["root"])
        while pending:
            page = structured(await client.call_tool("expand", {"id": pending.pop()["id"], "limit_tokens": limit}))
            pages.append(page)
            pending.extend(_folds(page["root"]))
        return first, pages

    first, pages = with_client(stdio_params(), body)
    assert first["bounded"]["nodes"] == total > first["bounded"]["shown"] and pages
    for reply in [first, *pages]:
        assert reply["bounded"]["tokens"] <= limit and size(reply) <= limit * CHARS_PER_TOKEN
        assert reply["kernelmap"] == "calltree/2"
    # the main path comes first: the first child at each level is the path the answer marks, to the call's first-ranked end
    chain = [first["root"]]
    while chain[-1]["children"]:
        chain.append(chain[-1]["children"][0])
    ranked = graph.call_ends(full)[0].node
    assert all(n["facts"].get("main") for n in chain)
    assert chain[-1]["name"] == ranked.name or "more" in chain[-1]["facts"]
    # every node once: the first reply's, then each expand's below its root (shown before)
    assert first["bounded"]["shown"] + sum(p["bounded"]["shown"] - 1 for p in pages) == total
    for reply in [first, *pages]:
        for node in walk(reply["root"]):
            location = node.get("location")
            if location and node["kind"] in ("kernel", "python") and location.get("file"):
                assert holds(node["name"], line_at(location)), node["name"]


def test_a_folded_list_continues_in_pages(served):
    from kernelmap.source import find, open_index, select_tree

    with open_index(select_tree(TREE_NAME)) as ix:
        expected = find(ix, "empty_like", limit=300).to_json()["references"]
    assert len(expected) > 100

    async def body(client):
        first = structured(await client.call_tool("find", {"name": "empty_like", "limit": 300, "limit_tokens": 1000}))
        (fold,) = [f for f in first["bounded"]["folded"] if f["at"] == "/references"]
        items = list(first["references"])
        next_id = fold["id"]
        while next_id:
            page = structured(await client.call_tool("expand", {"id": next_id, "limit_tokens": 1000}))
            assert page["kernelmap"] == "fold/1" and page["start"] == len(items) and page["bounded"]["tokens"] <= 1000
            items.extend(page["items"])
            next_id = page.get("next")
        return items

    items = with_client(stdio_params(), body)
    assert _without_resources(items) == expected


def test_200_mixed_calls_and_a_client_gone_mid_call(http_url):
    calls = [
        ("where", {"name": "torch.add"}), ("where", {"name": "torch.nn.functional.relu", "device": "cpu"}),
        ("stack", {"target": "torch.add", "limit_tokens": 1000}), ("find", {"name": "add_stub"}),
        ("explain", {"op": "aten::mul.Tensor"}), ("trees", {}), ("where", {"name": "conv2"}),
        ("kernel", {"name": "ncclKernel_AllReduce_RING_LL_Sum_float"}), ("callers", {"symbol": "at::native::mul_kernel", "depth": 6}),
        ("stack", {"target": "torch.add", "depth": -3}),
    ]

    async def mixed(client):
        errors = 0
        for i in range(200):
            name, args = calls[i % len(calls)]
            result = await client.call_tool(name, args)
            errors += result.is_error
            if name == "stack" and not result.is_error and i % 3 == 0:
                folds = _folds(result.structured_content["root"])
                if folds:
                    assert not (await client.call_tool("expand", {"id": folds[0]["id"]})).is_error
            if i % 25 == 0:
                read = await client.read_resource(f"kernelmap://tree/{TREE_NAME}/aten/src/ATen/native/BinaryOps.cpp#L1-L5")
                assert read.contents[0].text.startswith("# aten/src/ATen/native/BinaryOps.cpp:1-5")
        return errors

    assert with_client(http_url, mixed, timeout=600) == 200 // len(calls) * 2  # the two bad calls, each time

    async def gone(client):
        async with anyio.create_task_group() as tg:
            async def slow():  # a question not asked before: seconds of work
                await client.call_tool("path", {"start": "torch.nn.Linear", "target": "cublasGemmEx", "device": "cuda"})

            tg.start_soon(slow)
            await anyio.sleep(0.5)
            tg.cancel_scope.cancel()  # the client stops waiting, and leaves

    with_client(http_url, gone)

    async def after(client):
        return structured(await client.call_tool("where", {"name": "aten::mul.Tensor"}))

    assert with_client(http_url, after)["operator"]["name"] == "aten::mul.Tensor"


def test_a_stdio_client_gone_mid_call_ends_the_server_quietly(served):
    from mcp import Client
    from mcp.client.stdio import stdio_client

    with tempfile.TemporaryFile("w+") as errlog:
        async def main():
            with anyio.fail_after(120):
                async with Client(stdio_client(stdio_params(), errlog=errlog)) as client:
                    assert not (await client.call_tool("where", {"name": "torch.add"})).is_error
                    with anyio.move_on_after(0.5):
                        await client.call_tool("stack", {"target": "torch.nn.Linear", "device": "cuda"})

        anyio.run(main)
        errlog.seek(0)
        assert "Traceback" not in errlog.read()


def test_http_listens_on_loopback_and_refuses_other_origins_and_hosts(http_url):
    port = int(re.search(r":(\d+)/", http_url).group(1))
    listening = [line.split()[1] for line in Path("/proc/net/tcp").read_text().splitlines()[1:] if line.split()[3] == "0A"]
    assert f"0100007F:{port:04X}" in listening  # 127.0.0.1, and no other address, holds the port
    assert not any(a.endswith(f":{port:04X}") and a != f"0100007F:{port:04X}" for a in listening)
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                  "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}}}
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    with httpx.Client(timeout=30) as http:
        evil_origin = http.post(http_url, json=initialize, headers={**headers, "Origin": "http://attacker.example"})
        evil_host = http.post(http_url, json=initialize, headers={**headers, "Host": f"attacker.example:{port}"})
        rebound = http.post(http_url, json=initialize, headers={**headers, "Origin": f"http://localhost.attacker.example:{port}"})
        local = http.post(http_url, json=initialize, headers={**headers, "Origin": f"http://127.0.0.1:{port}"})
    assert evil_origin.status_code == 403 and evil_host.status_code == 421 and rebound.status_code == 403
    assert local.status_code == 200


def test_resources_read_lines_inside_the_served_roots_only(served):
    async def body(client):
        where = structured(await client.call_tool("where", {"name": "aten::add.Tensor", "device": "cpu"}))
        gen = structured(await client.call_tool("gen", {"op": "aten::add.Tensor", "layer": "register"}))
        reads = {}
        entry = next(s for s in where["source"] if s["role"] == "entry kernel")
        reads["entry"] = (entry["location"], (await client.read_resource(entry["location"]["resource"])).contents[0].text)
        definition = gen["registrations"][0]["definition"]
        reads["generated"] = (definition, (await client.read_resource(definition["resource"])).contents[0].text)
        yaml = where["operator"]["location"]
        reads["yaml"] = (yaml, (await client.read_resource(yaml["resource"])).contents[0].text)
        refused = []
        for uri in [f"kernelmap://tree/{TREE_NAME}/../../../etc/passwd", f"kernelmap://tree/{TREE_NAME}/aten/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
                    f"kernelmap://tree/{TREE_NAME}//etc/passwd", "kernelmap://tree/no-such-tree/README.md",
                    "kernelmap://wheel/numpy/__init__.py", "kernelmap://generated/../trees.json",
                    f"kernelmap://tree/{TREE_NAME}/aten/src/ATen/native/BinaryOps.cpp#L999999",
                    f"kernelmap://tree/{TREE_NAME}/aten/src/ATen/native/BinaryOps.cpp#Lx"]:
            try:
                await client.read_resource(uri)
                refused.append((uri, False))
            except Exception as e:  # the SDK raises the server's error reply
                refused.append((uri, "passwd" not in str(e) or "root:" not in str(e)))
        still = (await client.read_resource(f"kernelmap://tree/{TREE_NAME}/aten/src/ATen/native/BinaryOps.cpp")).contents[0].text
        return reads, refused, still

    reads, refused, still = with_client(stdio_params(), body)
    for what, (location, text) in reads.items():
        header, first = text.splitlines()[:2]
        named, lines = re.match(r"# (\S+):(\d+)-", header).groups()  # a generated file is named with its set's folder first
        assert named.endswith(location["path"]) and int(lines) == location["line"], what
        number, code = re.match(r"\s*(\d+)  ?(.*)$", first).groups()
        assert int(number) == location["line"] and code == line_at(location), what
    assert all(ok for _, ok in refused) and len(refused) == 8, refused
    assert still.startswith("# aten/src/ATen/native/BinaryOps.cpp:1-") and len(still.splitlines()) <= 401


def test_the_cli_refuses_an_unknown_tree_and_a_port_in_use(served):
    done = run_kernelmap("mcp", "--source", "no-such-tree")
    assert done.returncode == 2 and done.stderr.startswith("kernelmap: error:") and len(done.stderr.strip().splitlines()) == 1
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        done = run_kernelmap("mcp", "--http", "--port", str(s.getsockname()[1]))
    assert done.returncode == 2 and "kernelmap: error: cannot serve on 127.0.0.1" in done.stderr
