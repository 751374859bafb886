"""Bounding on small trees and documents: the main path first, nothing cut
in half, every node or item left out reachable through expand exactly once,
and a bounded reply that stays under its limit and loads back."""

from __future__ import annotations

import pytest

from kernelmap import answers
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
    python = CallNode("torch.nn.functional.conv2d", NodeKind.PYTHON)
    op = CallNode("aten::conv2d", NodeKind.OPERATOR, children=(python,))
    other = CallNode("at::native::helper", NodeKind.KERNEL, children=(CallNode("x", NodeKind.KERNEL),))
    tree = CallTree(CallNode("cudnnConvolutionForward", NodeKind.VENDOR, children=(other, op)), meta={"kind": "callers"})
    assert [n.name for n in bound.main_path(tree)] == ["cudnnConvolutionForward", "aten::conv2d", "torch.nn.functional.conv2d"]
    kept = bound.Answers()
    aid = kept.add(tree.to_json(), tree)
    reply = bound.bound(aid, kept.get(aid), bound.DEFAULT_LIMIT)
    assert [c["name"] for c in reply["root"]["children"]] == ["aten::conv2d", "at::native::helper"]  # main path first


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
