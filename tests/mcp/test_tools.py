"""The server as an agent uses it, through the official SDK's client: it
lists its tools, each with a description and typed arguments, and answers
the five questions of the design (where is the kernel, how do the two halves
join, the anatomy of a call, what runs in my model, what to replace to write
the kernel) with documents whose every location holds what it names, read
from the files themselves."""

from __future__ import annotations

from pathlib import Path

from kernelmap.mcp.bound import CHARS_PER_TOKEN, size
from tests.mcp.conftest import TRACE, TREE_NAME, holds, line_at, short, stdio_params, structured, walk, with_client

TOOLS = {"where", "stack", "path", "callers", "explain", "find", "gen", "kernel", "diff", "trace", "observe", "trees", "expand"}


def _locations(doc):
    """Every LOCATION object of a document."""
    stack = [doc]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            if "path" in value and "line" in value and "origin" in value:
                yield value
            stack.extend(v for v in value.values() if isinstance(v, (dict, list)))
        elif isinstance(value, list):
            stack.extend(v for v in value if isinstance(v, (dict, list)))


def _within_limit(doc, limit_tokens=8000):
    assert doc["bounded"]["tokens"] <= limit_tokens and size(doc) <= limit_tokens * CHARS_PER_TOKEN


def test_stdio_lists_every_tool_with_what_it_answers_and_typed_arguments(served):
    async def body(client):
        listed = await client.list_tools()
        templates = await client.list_resource_templates()
        return listed.tools, [t.uri_template for t in templates.resource_templates]

    tools, templates = with_client(stdio_params(), body)
    assert {t.name for t in tools} == TOOLS
    for tool in tools:
        assert len(tool.description) > 120 and "Use it" in tool.description, tool.name
        schema = tool.input_schema
        assert schema["type"] == "object" and schema["properties"], tool.name
        for name, prop in schema["properties"].items():
            assert "type" in prop or "anyOf" in prop or "enum" in prop, (tool.name, name)
    stack = next(t for t in tools if t.name == "stack").input_schema["properties"]
    assert stack["device"]["enum"] == ["cpu", "cuda", "mps", "meta"] and stack["depth"]["type"] == "integer"
    assert stack["limit_tokens"]["default"] == 8000
    assert "kernelmap://tree/{name}/{+path}{?lines}" in templates


def test_the_five_questions_over_stdio(served):
    async def body(client):
        replies = {}
        # 1. where is the kernel behind F.conv2d on CUDA?
        replies["where"] = await client.call_tool("where", {"name": "torch.nn.functional.conv2d", "device": "cuda"})
        # 2. connect the two halves: nn.Conv2d -> ??? -> cudnnConvolutionForward
        replies["path"] = await client.call_tool("path", {"start": "torch.nn.Conv2d", "target": "cudnnConvolutionForward", "device": "cuda",
                                                          "limit": 2})
        # 3. the anatomy of one call
        replies["explain"] = await client.call_tool("explain", {"op": "aten::add.Tensor", "device": "cpu"})
        # 4. what ran in my model (a real GPU trace), one operator's detail and one kernel's
        replies["trace"] = await client.call_tool("trace", {"file": str(TRACE)})
        top = replies["trace"].structured_content["summary"]["ops"]
        op = next(r["name"] for r in top if r["name"].startswith("aten::") and r["kernels"])
        kernel = next(r for r in top if r["name"] == op)["kernels"][0]["name"]
        replies["trace op"] = await client.call_tool("trace", {"file": str(TRACE), "op": op})
        replies["trace kernel"] = await client.call_tool("trace", {"file": str(TRACE), "kernel": kernel})
        replies["kernel"] = await client.call_tool("kernel", {"name": kernel})
        # 5. to write the kernel: the registration a custom kernel replaces
        replies["gen"] = await client.call_tool("gen", {"op": "aten::native_batch_norm", "layer": "register"})
        return replies, op, kernel

    replies, op, kernel = with_client(stdio_params(), body)
    docs = {k: structured(v) for k, v in replies.items()}
    for name, doc in docs.items():
        _within_limit(doc)
        assert doc["pinned"]["torch"]["version"] and doc["pinned"]["selected_tree"]["name"] == TREE_NAME, name
        for location in _locations(doc):
            if location.get("file") and Path(location["file"]).is_file():
                assert location["resource"].startswith("kernelmap://"), (name, location)

    where = docs["where"]
    assert where["kernelmap"] == "where/2" and where["operator"]["name"] == "aten::conv2d"
    roles = {s["role"]: s for s in where["source"]}
    assert roles["entry kernel"]["name"].endswith("conv2d_symint")
    leaves = [s for s in where["source"] if s["role"] == "leaf"]
    assert any(s["name"].startswith("cudnn") for s in leaves)
    for step in where["source"]:
        assert holds(step["name"], line_at(step["location"])), step
    assert where["pinned"]["answered_by"] and not where["pinned"]["mixed"]  # the tree answers every layer
    assert "aten::conv2d" in replies["where"].content[0].text

    route = docs["path"]["routes"][0]["steps"]
    assert route[0]["name"].endswith("Conv2d") and route[-1]["name"] == "cudnnConvolutionForward"
    checked = 0
    for step in route:
        location = step["location"]
        if location is not None and step["kind"] in ("kernel", "vendor", "python", "wrapper", "launch"):
            assert holds(step["name"], line_at(location)), step
            checked += 1
    assert checked >= 5

    explain = docs["explain"]
    assert explain["kernelmap"] == "explain/2" and len(explain["steps"]) >= 5
    code_steps = [s for s in explain["steps"] if s["location"] is not None and s["excerpt"] and s["title"] != "Python argument parsing"]
    assert len(code_steps) >= 10  # the binding's step shows its signatures, gathered from several lines
    for step in code_steps:
        assert step["excerpt"].splitlines()[0].strip() == line_at(step["location"]).strip(), step["title"]

    summary = docs["trace"]["summary"]
    assert docs["trace"]["kernelmap"] == "trace/2" and summary["ops"] and docs["trace"]["tree"] is None
    detail = docs["trace op"]
    assert [r["name"] for r in detail["summary"]["ops"]] == [op] and detail["tree"]["root"]["name"] == op
    assert docs["trace kernel"]["launched_by"] and op in {x["op"] for x in docs["trace kernel"]["launched_by"]}
    k = docs["kernel"]
    assert k["kernelmap"] == "kernel/1" and (k["library"] or k["kernel"])
    if k.get("kernel") and k["kernel"]["location"]:
        path, line = k["kernel"]["location"].rsplit(":", 1)
        text = (Path(served.root) / path).read_text(errors="replace").splitlines()[int(line) - 1]
        assert short(k["kernel"]["symbol"]) in text

    gen = docs["gen"]
    cpu = [r for r in gen["registrations"] if r["key"] == "CPU"]
    assert cpu and all(short(r["symbol"]) in line_at(r["definition"]) for r in cpu)
    assert all(r["impl"]["text"].splitlines()[0].strip() == line_at(r["impl"]).strip() for r in cpu)


def test_stack_callers_find_and_trees_over_http(http_url):
    async def body(client):
        out = {}
        out["stack"] = await client.call_tool("stack", {"target": "torch.add", "device": "cpu"})
        out["callers"] = await client.call_tool("callers", {"symbol": "cudnnConvolutionForward", "depth": 12})
        out["find"] = await client.call_tool("find", {"name": "mul_stub"})
        out["trees"] = await client.call_tool("trees", {})
        return out

    docs = {k: structured(v) for k, v in with_client(http_url, body).items()}
    stack = docs["stack"]
    assert stack["kernelmap"] == "calltree/2" and stack["kind"] == "stack"
    checked = 0
    for node in walk(stack["root"]):
        location = node.get("location")
        if location and node["kind"] in ("kernel", "python", "wrapper") and location.get("file"):
            assert holds(node["name"], line_at(location)), node["name"]
            checked += 1
    assert checked >= 3
    callers = docs["callers"]
    names = [n["name"] for n in walk(callers["root"])]
    assert callers["root"]["name"] == "cudnnConvolutionForward" and any("cudnn_convolution" in n for n in names)
    found = docs["find"]
    assert found["stub_registrations"] and all("mul_stub" in line_at(r["location"]) for r in found["stub_registrations"])
    trees = docs["trees"]
    assert TREE_NAME in {t["name"] for t in trees["trees"]} and trees["selected"] == TREE_NAME


def test_diff_compares_an_operator_across_two_trees(http_url, old_tree):
    async def body(client):
        return await client.call_tool("diff", {"target": "aten::prelu", "from_tree": str(old_tree.root), "to_tree": TREE_NAME})

    doc = structured(with_client(http_url, body))
    assert doc["kernelmap"] == "diff/1" and doc["changes"]
    assert doc["pinned"]["mixed"]  # two versions, each location naming its tree
    for change in doc["changes"]:
        for side in ("from", "to"):
            location = change.get(side)
            if location and location.get("file") and change["section"] == "kernel":
                assert short(change["name"]) in line_at(location), change
