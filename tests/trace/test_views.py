"""Bounded views of a trace's tree (Note [hot subtrees] in
kernelmap.trace.views): the hottest nodes and all their ancestors, what is
left out said per node; the whole tree exported as JSON Lines or Parquet,
node for node the tree's own; the options, as a user gives them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import run_kernelmap

HERE = Path(__file__).resolve().parent
TRAIN = HERE / "cuda" / "resnet50_train_fp32_bench.json.gz"


@pytest.fixture(scope="module")
def train():
    from kernelmap.trace import load

    return load(TRAIN)


def _walk(node, parent=None):
    stack = [(node, parent)]
    while stack:
        n, p = stack.pop()
        yield n, p
        stack.extend((c, n) for c in n.children)


def test_the_hot_view_is_the_heaviest_nodes_and_their_ancestors(train):
    from kernelmap.trace.views import hot_nodes, hot_tree, weights

    t = train._table
    top = 150
    nodes = hot_nodes(t, top)
    w = weights(t)
    heaviest = set(np.argsort(-w, kind="stable")[:top].tolist())
    shown = set(nodes.tolist())
    assert heaviest <= shown
    assert all(int(t.parent[i]) in shown for i in nodes.tolist() if i)  # closed under "parent of"
    extra = shown - heaviest  # only ancestors were added
    assert all(any(int(t.parent[j]) == i for j in shown) for i in extra)
    tree = hot_tree(train, top)
    real = [n for n, _ in _walk(tree.root) if n.kind.value != "note"]
    assert len(real) == len(nodes)
    # under each shown node, its left-out children as one note: their count and time
    by_name = {}
    for n, parent in _walk(tree.root):
        if n.kind.value == "note":
            by_name.setdefault(parent.name, []).append(n)
    assert by_name and any("more call" in n.name for notes in by_name.values() for n in notes)
    assert any("hottest" in note for note in tree.notes)


def test_a_small_tree_is_shown_whole(train):
    from kernelmap.trace.views import hot_tree

    assert hot_tree(train, len(train._table)) is train.tree


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_the_whole_tree_exported_is_the_trees_own(train, tmp_path, suffix):
    from kernelmap.render.json import to_json

    out = tmp_path / f"tree{suffix}"
    done = run_kernelmap("trace", "--from", str(TRAIN), "--no-tree", "--no-summary", "--export-tree", str(out))
    assert done.returncode == 0, done.stderr[-500:]
    if suffix == ".jsonl":
        lines = out.read_text().splitlines()
        rows = [json.loads(x) for x in lines[:-1]]
        assert set(json.loads(lines[-1])) == {"origins", "notes"}
    else:
        import pyarrow.parquet as pq

        table = pq.read_table(out)
        rows = [{"id": r["id"], "parent": r["parent"] if r["parent"] >= 0 else None, "name": r["name"], "kind": r["kind"],
                 "facts": json.loads(r["facts"])} for r in table.to_pylist()]
    # pre-order: the same nodes, names, kinds and facts as the tree's own document, each under its parent
    doc = to_json(train.tree)
    expected, stack = [], [(doc["root"], None)]
    while stack:
        node, parent = stack.pop()
        me = len(expected)
        expected.append((parent, node["name"], node["kind"], node["facts"]))
        stack.extend((c, me) for c in reversed(node["children"]))
    got = [(r["parent"], r["name"], r["kind"], r["facts"]) for r in rows]
    assert len(got) == len(expected)
    for a, b in zip(got, expected):
        assert a[:3] == b[:3]
        assert a[3] == b[3]


def test_view_options_are_checked(tmp_path):
    done = run_kernelmap("trace", "--from", str(TRAIN), "--hot", "5", "--full-tree")
    assert done.returncode == 2 and done.stderr.startswith("kernelmap: error: --hot") and done.stderr.count("\n") == 1
    done = run_kernelmap("trace", "--from", str(TRAIN), "--hot", "0")
    assert done.returncode == 2
    text = run_kernelmap("trace", "--from", str(TRAIN), "--hot", "30", "--no-summary", "--width", "160")
    assert text.returncode == 0 and "more calls not shown" in text.stdout and "the 3" in text.stdout


def test_a_note_of_left_out_calls_opens_its_subtree(train):
    """The `node` fact of a note is the node the calls are under: its subtree,
    bounded in turn, shows them (what the web app opens on a click)."""
    from kernelmap.trace.views import hot_tree, node_tree

    t = train._table
    notes = [(n, p) for n, p in _walk(hot_tree(train, 60).root) if n.kind.value == "note"]
    assert notes
    for note, parent in notes[:5]:
        node = note.attrs["node"]
        sub = node_tree(train, node, top=10_000)
        assert sub.root.name == parent.name and sum(1 for _ in sub.walk()) == int(t.size[node])  # all of it, nothing folded
        assert "more call" not in str([n.name for _, n in sub.walk()])
    import pytest as _pytest

    from kernelmap.errors import BadInput

    with _pytest.raises(BadInput):
        node_tree(train, len(t))


def test_a_stored_traces_summary_and_hot_nodes_are_kept_beside_its_tables(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELMAP_CACHE_DIR", str(tmp_path))
    from kernelmap.render.json import to_json
    from kernelmap.trace import load
    from kernelmap.trace.views import hot_tree

    first = load(TRAIN, resolve=False, store=True)
    summary, hot = first.summary(), to_json(hot_tree(first, 50))
    kept = sorted(p.name for p in first.stored.iterdir() if p.name.startswith(("summary-", "hot-")))
    assert kept[:2] == ["hot-1000-None.npy", "hot-50-None.npy"] and kept[2].startswith("summary-")  # the default view's, chosen at import
    again = load(TRAIN, resolve=False, store=True)
    assert again.summary() == summary and to_json(hot_tree(again, 50)) == hot


def test_the_hot_nodes_are_the_same_weighed_a_slice_at_a_time(train, monkeypatch):
    """hot_nodes weighs a slice of nodes at a time (bounded memory on a re-opened
    trace of any size): the nodes are those of the weights taken at once."""
    from kernelmap.trace import views

    t = train._table
    w = views.weights(t)
    rng = np.random.default_rng(0)
    for root in [0, *rng.integers(0, len(t), 12).tolist()]:
        end = root + int(t.size[root])
        for top, depth in ((40, None), (300, 4), (5, 0)):
            once = views.hot_nodes(t, top, depth, root=root)
            monkeypatch.setattr(views, "_HOT_SLICE", 97)
            sliced = views.hot_nodes(t, top, depth, root=root)
            monkeypatch.undo()
            assert np.array_equal(once, sliced), (root, top, depth)
            if depth is None and end - root > top:  # the heaviest of the subtree (ties to the earlier), and their ancestors
                sub = w[root:end].copy()
                heaviest = set((root + np.lexsort((np.arange(end - root), -sub))[:top]).tolist())
                assert heaviest <= set(once.tolist())
