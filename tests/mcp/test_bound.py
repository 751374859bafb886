"""Bounding on small trees and documents: the main path first, nothing cut
in half, every node or item left out reachable through expand exactly once,
and a bounded reply that stays under its limit and loads back."""

from __future__ import annotations

import re

import pytest

from kernelmap import answers, processors
from kernelmap.errors import BadInput
from kernelmap.mcp import bound
from kernelmap.model import CallNode, CallTree, Location, NodeKind


def _tree(width: int, depth: int, name: str = "n") -> CallNode:
    """A full tree: `width` children per node, `depth` levels below the root."""
    if depth == 0:
        return CallNode(name, NodeKind.KERNEL, Location(f"aten/src/{name}.cpp", 1))
    return CallNode(name, NodeKind.KERNEL, Location(f"aten/src/{name}.cpp", 1),
                    children=tuple(_tree(width, depth - 1, f"{name}.{i}") for i in range(width)))


def _names(node: dict) -> list[str]:
    out, stack = [], [node]
    while stack:
        n = stack.pop()
        out.append(n["name"])
        stack.extend(reversed(n["children"]))
    return out


def _folds(node: dict) -> list[dict]:
    return [n["facts"]["more"] for n in _walk(node) if "more" in n["facts"]]


def _walk(node: dict):
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(n["children"])


def test_a_small_tree_is_shown_whole():
    tree = CallTree(_tree(2, 2), meta={"kind": "callers"})
    kept = bound.Answers()
    aid = kept.add(tree.to_json(), tree)
    reply = bound.bound(aid, kept.get(aid), bound.DEFAULT_LIMIT)
    assert _names(reply["root"]) == _names(tree.to_json()["root"])
    assert reply["bounded"]["folded"] == 0 and reply["bounded"]["shown"] == reply["bounded"]["nodes"] == 7
    assert answers.load(reply).root == tree.root  # still the calltree/2 document


def test_a_large_tree_keeps_the_main_path_first_and_every_fold_expands_once():
    root = _tree(6, 4)  # 1,555 nodes
    # the main path of a tree that is neither stack nor callers: the first child at each level
    tree = CallTree(root, meta={"kind": "path"})
    kept = bound.Answers()
    aid = kept.add(tree.to_json(), tree)
    limit = 1000
    reply = bound.bound(aid, kept.get(aid), limit)
    assert reply["bounded"]["tokens"] <= limit
    assert reply["bounded"]["nodes"] == 1555 and reply["bounded"]["shown"] < 1555
    first = [reply["root"]]
    while first[-1]["children"]:
        first.append(first[-1]["children"][0])
    assert [n["name"] for n in first] == ["n", "n.0", "n.0.0", "n.0.0.0", "n.0.0.0.0"]  # the main path, whole
    assert answers.load(reply).root.name == "n"
    # every node is shown once over the first reply and its expands (each expand's root was shown already)
    seen = _names(reply["root"])
    pending = _folds(reply["root"])
    while pending:
        fold = pending.pop()
        page = bound.expand(kept, fold["id"], limit)
        assert page["bounded"]["tokens"] <= limit
        assert page["root"]["name"] in seen  # the folded node itself, shown before
        seen.extend(_names(page["root"])[1:])
        pending.extend(_folds(page["root"]))
    assert len(seen) == len(set(seen)) and sorted(seen) == sorted(_names(tree.to_json()["root"]))


def test_the_main_path_leads_to_the_first_python_caller():
    """A callers tree marked as the CLI marks it (processors.callers_main_path)
    shows that path first."""
    python = CallNode("torch.nn.functional.conv2d", NodeKind.PYTHON)
    op = CallNode("aten::conv2d", NodeKind.OPERATOR, children=(python,))
    other = CallNode("at::native::helper", NodeKind.KERNEL, children=(CallNode("x", NodeKind.KERNEL),))
    tree = CallTree(CallNode("cudnnConvolutionForward", NodeKind.VENDOR, children=(other, op)), meta={"kind": "callers"})
    marked = processors.mark_main_path(tree, processors.callers_main_path(tree))
    kept = bound.Answers()
    aid = kept.add(marked.to_json(), marked)
    reply = bound.bound(aid, kept.get(aid), bound.DEFAULT_LIMIT)
    assert [c["name"] for c in reply["root"]["children"]] == ["aten::conv2d", "at::native::helper"]  # main path first


def test_the_main_path_is_the_one_the_answer_marks():
    """One definition of the main path: the nodes the tree marks `main` (an
    observed path here, which is not the branch a static ranking would pick
    (the vendor call)), kept first and whole under a tight limit."""
    vendor = CallNode("cudnnConvolutionForward", NodeKind.VENDOR, Location("aten/src/ATen/native/cudnn/Conv_v7.cpp", 759),
                      attrs={"library": "cuDNN", "closed": True})
    static = CallNode("at::native::cudnn_convolution", NodeKind.KERNEL, Location("aten/src/ATen/native/cudnn/ConvShared.cpp", 240),
                      children=(vendor,))
    loop = CallNode("at::native::slow_conv2d_forward_out_cpu", NodeKind.KERNEL, Location("aten/src/ATen/native/ConvolutionMM2d.cpp", 500),
                    children=tuple(_tree(4, 2, f"leaf{i}") for i in range(3)))
    wide = tuple(_tree(5, 2, f"other{i}") for i in range(6))
    root = CallNode("at::native::_convolution", NodeKind.KERNEL, Location("aten/src/ATen/native/Convolution.cpp", 1468),
                    children=(static, *wide, loop))
    tree = CallTree(root, meta={"kind": "stack"})
    observed = processors.mark_main_path(tree, (root, root.children[-1], root.children[-1].children[1]))
    kept = bound.Answers()
    aid = kept.add(observed.to_json(), observed)
    reply = bound.bound(aid, kept.get(aid), bound.MIN_LIMIT)
    assert reply["bounded"]["tokens"] <= bound.MIN_LIMIT and reply["bounded"]["folded"]
    first = reply["root"]["children"][0]
    assert first["name"] == "at::native::slow_conv2d_forward_out_cpu" and first["facts"]["main"]
    assert first["children"][0]["name"] == "leaf1" and first["children"][0]["facts"]["main"]
    # an unmarked tree (a trace, a path): the first child at each level
    plain = CallTree(_tree(3, 3), meta={"kind": "stack"})
    aid = kept.add(plain.to_json(), plain)
    reply = bound.bound(aid, kept.get(aid), bound.MIN_LIMIT)
    assert [reply["root"]["children"][0]["name"], reply["root"]["children"][0]["children"][0]["name"]] == ["n.0", "n.0.0"]


def test_lists_keep_a_prefix_and_continue_in_pages():
    doc = {"kernelmap": "find/2", "name": "x", "origins": {}, "definitions": [{"d": i} for i in range(3)],
           "references": [{"caller": "f" * 50, "n": i} for i in range(400)]}
    kept = bound.Answers()
    aid = kept.add(doc)
    reply = bound.bound(aid, kept.get(aid), bound.MIN_LIMIT)
    assert reply["bounded"]["tokens"] <= bound.MIN_LIMIT
    assert reply["definitions"] == doc["definitions"]  # the most important list first
    (fold,) = reply["bounded"]["folded"]
    assert fold["at"] == "/references" and fold["total"] == 400 and reply["references"] == doc["references"][: fold["shown"]]
    items = list(reply["references"])
    next_id = fold["id"]
    while next_id:
        page = bound.expand(kept, next_id, bound.MIN_LIMIT)
        assert page["bounded"]["tokens"] <= bound.MIN_LIMIT and page["start"] == len(items)
        loaded = answers.load(page)
        items.extend(loaded.items)
        next_id = page.get("next")
    assert items == doc["references"]


def test_a_first_route_over_the_limit_is_shown_whole_without_its_steps_facts():
    """A path's main route bigger than the limit on its own is not folded
    away (a reply with no route): its steps stay, each without its facts,
    and the reply says so; the next routes fold as any list does."""
    step = {"name": "s", "kind": "kernel", "location": {"path": "aten/src/a.cpp", "line": 1}, "facts": {"schema": "x" * 120}}
    route = {"conditions": [], "steps": [dict(step, name=f"s{i}") for i in range(12)]}
    doc = {"kernelmap": "path/1", "origins": {}, "routes": [route, route, route]}
    kept = bound.Answers()
    aid = kept.add(doc)
    reply = bound.bound(aid, kept.get(aid), bound.MIN_LIMIT)
    assert bound.size(route) > bound.MIN_LIMIT * bound.CHARS_PER_TOKEN  # it does not fit as it is
    assert reply["bounded"]["tokens"] <= bound.MIN_LIMIT
    (shown,) = reply["routes"]
    assert [s["name"] for s in shown["steps"]] == [s["name"] for s in route["steps"]] and not any("facts" in s for s in shown["steps"])
    assert reply["bounded"]["slimmed"]["at"] == "/routes/0"
    (fold,) = reply["bounded"]["folded"]
    assert fold["at"] == "/routes" and fold["shown"] == 1 and fold["total"] == 3


@pytest.mark.parametrize("fold_id", ["", "a1", "a1.n9999.0", "a1.l7.0", "zz.n1.0", "a999.n0.0", "a1.n0.99999"])
def test_a_bad_fold_id_is_a_clear_error(fold_id):
    tree = CallTree(_tree(2, 2), meta={"kind": "stack"})
    kept = bound.Answers()
    kept.add(tree.to_json(), tree)
    with pytest.raises(BadInput) as e:
        bound.expand(kept, fold_id, bound.DEFAULT_LIMIT)
    assert "\n" not in str(e.value)


def test_old_answers_are_dropped_with_a_clear_error():
    kept = bound.Answers(keep=2)
    first = kept.add({"kernelmap": "sources/1", "trees": []})
    kept.add({"kernelmap": "sources/1", "trees": []})
    kept.add({"kernelmap": "sources/1", "trees": []})
    with pytest.raises(BadInput, match="no longer kept"):
        kept.get(first)


def test_the_warm_state_is_opened_again_when_a_source_file_was_edited(monkeypatch):
    """Contexts are dropped, and remembered replies with them, when their
    index finds source files edited since it was built (as each CLI run says)."""
    from types import SimpleNamespace

    from kernelmap.mcp import warm as warm_module

    notes = {"now": None}
    index = SimpleNamespace(stale_note=lambda: notes["now"])
    state = warm_module.Warm()
    state.fresh()
    state._contexts["cpu"] = SimpleNamespace(index=index, stale=None)
    state.remember(("where", "torch.add"), state.answers.add({"kernelmap": "sources/1", "trees": []}), {8000: ("reply", "text")})
    monkeypatch.setattr(warm_module, "STALE_EVERY", 0.0)
    assert state.quick(("where", "torch.add"), 8000) is None  # the producer thread looks first
    state.fresh()
    assert state._contexts and state.remembered(("where", "torch.add"))  # nothing edited: all kept
    notes["now"] = "1 file of debian-2.6.0 changed since it was indexed"
    state.fresh()
    assert not state._contexts and state.remembered(("where", "torch.add")) is None


def test_an_expand_that_cannot_show_a_node_says_the_limit_it_needs():
    """A header that fills the limit (long notes, many origins) leaves no room
    for a child: the expansion is an error naming the limit it needs, never a
    page that repeats its own fold id (a client following folds would loop)."""
    tree = CallTree(_tree(3, 2), notes=tuple("a long note about versions " * 8 for _ in range(5)), meta={"kind": "observe"})
    kept = bound.Answers()
    aid = kept.add(tree.to_json(), tree)
    first = bound.bound(aid, kept.get(aid), bound.MIN_LIMIT)
    (fold,) = _folds(first["root"])
    with pytest.raises(BadInput, match=r"limit_tokens of at least (\d+)") as e:
        bound.expand(kept, fold["id"], bound.MIN_LIMIT)
    need = int(re.search(r"at least (\d+)", str(e.value)).group(1))
    page = bound.expand(kept, fold["id"], need)
    assert page["root"]["children"] and page["bounded"]["tokens"] <= need
