"""The observe tool through the SDK's own client: one live run of torch.add
under gdb, and everything else on what that run left in the server (a
second bound of the same answer, its folds expanded), so the suite pays for
one capture. The run goes aside: another tool answers while it runs. Bad
arguments and names that would run code are tool errors, before any run."""

from __future__ import annotations

import time

import anyio
import pytest

from kernelmap import answers
from kernelmap.mcp.bound import CHARS_PER_TOKEN, size
from tests.mcp.conftest import TREE_NAME, stdio_params, structured, walk, with_client
from tests.observe.conftest import holds_function, needs_gdb

pytestmark = [needs_gdb, pytest.mark.slow]


@pytest.fixture(scope="module")
def observed(served):
    """One session: observe torch.add while `where` is asked; then the same
    answer bounded tighter, and every fold of that expanded."""

    async def body(client):
        done: dict[str, float] = {}
        replies: dict[str, object] = {}

        async def ask(key, tool, args):
            replies[key] = await client.call_tool(tool, args)
            done[key] = time.monotonic()

        async with anyio.create_task_group() as group:
            group.start_soon(ask, "observe", "observe", {"target": "torch.add", "timeout": 600})
            await anyio.sleep(1)  # the run has started aside
            group.start_soon(ask, "where", "where", {"name": "torch.mul"})
        started = time.monotonic()
        tight = await client.call_tool("observe", {"target": "torch.add", "limit_tokens": 2000})
        again = time.monotonic() - started
        pages, pending = [], [n["facts"]["more"] for n in walk(tight.structured_content["root"]) if "more" in n["facts"]]
        while pending:
            page = structured(await client.call_tool("expand", {"id": pending.pop()["id"], "limit_tokens": 2000}))
            pages.append(page)
            pending.extend(n["facts"]["more"] for n in walk(page["root"]) if "more" in n["facts"])
        return replies, done, tight, again, pages

    return with_client(stdio_params("--source", TREE_NAME), body, timeout=900)


def test_observe_answers_what_ran_with_locations_that_hold(observed):
    replies, _, _, _, _ = observed
    reply = replies["observe"]
    doc = structured(reply)
    assert doc["kernelmap"] == "calltree/2" and doc["kind"] == "observe"
    assert doc["meta"]["torch"] and doc["meta"]["stacks"] > 0 and doc["bounded"]["tokens"] <= 8000
    assert doc["pinned"]["selected_tree"]["name"] == TREE_NAME
    text = reply.content[0].text
    assert text.startswith("observe torch.add") and "stacks in" in text  # the short text says what was observed
    names = [n["name"] for n in walk(doc["root"])]
    assert any(n.endswith("add_kernel") for n in names)  # the CPU kernel that ran
    tree = answers.load(doc)
    checked = 0
    for _, node in tree.walk():
        if node.location is not None and node.kind.value in ("kernel", "wrapper", "binding") and node.location.disk_path.is_file():
            assert holds_function(node), (node.name, str(node.location))
            checked += 1
    assert checked >= 5
    located = [n for n in walk(doc["root"]) if n.get("location") and n["location"].get("file")]
    assert located and all(n["location"]["resource"].startswith("kernelmap://") for n in located)


def test_other_tools_answer_while_a_run_goes_on(observed):
    replies, done, _, _, _ = observed
    assert structured(replies["where"])["operator"]["name"] == "aten::mul.Tensor"
    assert done["where"] < done["observe"]  # asked after the run began, answered before it ended


def test_the_same_run_is_bounded_again_and_every_fold_expands(observed):
    replies, _, tight, again, pages = observed
    full = structured(replies["observe"])
    first = structured(tight)
    assert again < 30  # the kept answer, not a second run under gdb
    assert first["bounded"]["answer"] == full["bounded"]["answer"]
    for reply in [first, *pages]:
        assert reply["bounded"]["tokens"] <= 2000 and size(reply) <= 2000 * CHARS_PER_TOKEN
    total = first["bounded"]["nodes"]
    assert pages and first["bounded"]["shown"] + sum(p["bounded"]["shown"] - 1 for p in pages) == total


BAD = [
    ({"target": "train.py"}, "runs an operator or Python name"),
    ({"target": "mypkg.bench:step"}, "runs an operator or Python name"),
    ({"target": "torch.add", "timeout": 0}, "timeout"),
    ({"target": "torch.add", "timeout": 3601}, "timeout"),
    ({"target": "torch.add", "dtype": "float33"}, "unknown dtype"),
    ({"target": "torch.add", "breaks": ["a"] * 9}, "breaks"),
    ({"target": "torch.add", "sample_hz": -1}, "sample_hz"),
    ({"target": ""}, "target"),
]


def test_bad_arguments_are_tool_errors_before_any_run(served):
    async def body(client):
        out = []
        for args, _ in BAD:
            started = time.monotonic()
            result = await client.call_tool("observe", args)
            out.append((result, time.monotonic() - started))
        out.append((await client.call_tool("where", {"name": "torch.add"}), 0.0))  # and the server goes on
        return out

    results = with_client(stdio_params(), body)
    for (args, expected), (result, seconds) in zip(BAD, results):
        text = result.content[0].text if result.content else ""
        assert result.is_error and expected in text and "Traceback" not in text, (args, text)
        assert seconds < 20, args  # refused before gdb starts
    assert not results[-1][0].is_error
