"""The answer on the first screen, on the real 2.6.0 tree: the default text of
stack, path and callers fits about 40 lines at 100 columns and holds the main
path; at 80 columns every step shown keeps its file:line (names and
conditions are shortened first); piped output keeps full lines; `--all`
gives the whole tree."""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_kernelmap
from tests.graph.conftest import TREE_NAME

SCREEN = 40


def _run(*args: str) -> str:
    done = run_kernelmap(*args, "--source", TREE_NAME)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def _main_locations(doc: dict) -> list[str]:
    """path:line of every node on the main path of a calltree/2 document (but
    an operator's: a tree names its yaml line in JSON only, as before)."""
    out, node = [], doc["root"]
    while node is not None:
        if node.get("location") and node["kind"] != "op":
            out.append(f"{node['location']['path']}:{node['location']['line']}")
        node = next((c for c in node["children"] if c["facts"].get("main")), None)
    return out


@pytest.fixture(scope="module")
def conv_stack(indexed_tree, generated):
    return json.loads(_run("stack", "torch.nn.Conv2d", "--device", "cuda", "--json"))


def test_stack_puts_the_cudnn_path_on_the_first_screen(conv_stack):
    text = _run("stack", "torch.nn.Conv2d", "--device", "cuda", "--width", "100").splitlines()
    assert len(text) <= SCREEN
    main = _main_locations(conv_stack)
    assert main and all(any(loc in line for line in text) for loc in main)
    last = next(line for line in reversed(text) if line[:3].strip().rstrip(".").isdigit())
    assert "cudnn" in last and "<cuDNN, closed>" in last  # the vendor call ends the path
    assert not any("torch.nn.functional.pad  [python]" in line for line in text)  # F.pad is folded
    assert any(line.strip().startswith("+ ") and "backends:" in line for line in text)


def test_at_80_columns_every_step_keeps_its_location(conv_stack):
    text = _run("stack", "torch.nn.Conv2d", "--device", "cuda", "--width", "80")
    lines = text.splitlines()
    assert all(len(line) <= 80 for line in lines), [line for line in lines if len(line) > 80]
    assert all(loc in text for loc in _main_locations(conv_stack))
    route = json.loads(_run("path", "torch.nn.Conv2d", "cudnnConvolutionForward", "--device", "cuda", "--json"))["routes"][0]
    text = _run("path", "torch.nn.Conv2d", "cudnnConvolutionForward", "--device", "cuda", "--width", "80")
    lines = text.splitlines()
    assert len(lines) <= SCREEN
    assert all(len(line) <= 80 for line in lines), [line for line in lines if len(line) > 80]
    for step in route["steps"]:
        if step["location"]:
            assert f"{step['location']['path']}:{step['location']['line']}" in text, step["name"]


def test_piped_output_keeps_full_lines_and_all_keeps_the_tree(conv_stack):
    piped = _run("stack", "torch.nn.Conv2d", "--device", "cuda")
    assert "…" not in piped
    whole = _run("stack", "torch.nn.Conv2d", "--device", "cuda", "--all")
    lines, stack = 0, [conv_stack["root"]]
    while stack:
        node = stack.pop()
        lines += 1
        stack.extend(node["children"])
        # a run of two or more sibling utilities left unexpanded is one line (Note [utilities as steps])
        run = 0
        for child in [*node["children"], None]:
            if child is not None and child["facts"].get("utility") and not child["children"]:
                run += 1
                continue
            lines -= run - 1 if run > 1 else 0
            run = 0
    assert "utilities: " in whole and len(whole.splitlines()) == lines  # one line a node, or a run of utilities


def test_callers_fits_a_screen(indexed_tree, generated):
    text = _run("callers", "cpublas_gemm_impl", "--width", "100").splitlines()
    assert len(text) <= SCREEN
    assert text[-2].split(". ", 1)[1].startswith("torch.nn.modules.")  # up to an nn.Module
    assert len(_run("callers", "cpublas_gemm_impl", "--all").splitlines()) > 5 * SCREEN
