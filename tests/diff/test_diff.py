"""`kernelmap diff` on the real trees, 1.13.1 -> 2.6.0, for operators whose
path changed between them. Every expectation is read from the two trees'
own files in the test (their native_functions.yaml entries, the files that
define a kernel); every location the diff gives is opened on its own side."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kernelmap.model import OriginKind
from tests.conftest import run_kernelmap
from tests.diff.conftest import TREE_2_6, YAML, defines, line_at, yaml_entry


@pytest.fixture(scope="session")
def diff_of(old_tree, new_tree):
    from kernelmap.diff import diff_op

    cache = {}

    def get(op: str, **options):
        key = (op, tuple(sorted(options.items())))
        if key not in cache:
            cache[key] = diff_op(op, str(old_tree.root), new_tree.name, **options)
        return cache[key]

    return get


def dispatch_of(root, op: str) -> dict[str, str]:
    """The entry's dispatch table as torchgen reads it (torchgen/model.py): an
    entry with neither dispatch nor structured_delegate gets
    CompositeImplicitAutograd: <name>; ufunc_inner_loop adds CPU and CUDA:
    ufunc_<name>_<key> (torchgen/api/ufunc.py)."""
    _, fields, dispatch = yaml_entry(root, op)
    if "dispatch" not in fields and "structured_delegate" not in fields:
        return {"CompositeImplicitAutograd": op.split(".")[0]}
    if "ufunc_inner_loop" in fields:
        dispatch = {**dispatch, **{key: f"ufunc_{op.split('.')[0]}_{key}" for key in ("CPU", "CUDA")}}
    return dispatch


def tags_of(root, op: str) -> list[str]:
    """The entry's tags as the tree's torchgen reads them: as written, plus
    pt2_compliant_tag on every aten operator where its model.py adds it."""
    _, fields, _ = yaml_entry(root, op)
    tags = [t.strip() for t in fields.get("tags", "").strip("[]").split(",") if t.strip()]
    if '"pt2_compliant_tag" in valid_tags' in (root / "torchgen/model.py").read_text():
        tags.append("pt2_compliant_tag")
    return sorted(set(tags))


def yaml_changes(d, prefix: str = "dispatch ") -> dict[str, tuple[str, str | None, str | None]]:
    return {c.name.removeprefix(prefix): (c.change, c.before, c.after) for c in d.section("yaml") if c.name.startswith(prefix)}


def expected_dispatch_changes(old: dict[str, str], new: dict[str, str]) -> dict[str, tuple[str, str | None, str | None]]:
    out = {}
    for key in old.keys() | new.keys():
        a, b = old.get(key), new.get(key)
        change = "added" if a is None else "removed" if b is None else "same" if a == b else "changed"
        out[key] = (change, a and f"at::native::{a}", b and f"at::native::{b}")
    return out


def check_sides(d, old_tree, new_tree) -> int:
    """Every location is on its own side: the --from tree (or files generated
    from it) before, the --to tree after. Returns how many were checked."""
    checked = 0
    for c in d.changes:
        for loc, tree in ((c.old, old_tree), (c.new, new_tree)):
            if loc is None:
                continue
            assert loc.origin.version == tree.version, c
            if loc.origin.kind is OriginKind.TREE:
                assert loc.origin == tree.origin, c
            else:  # regenerated with this tree's own torchgen, as its cache's manifest records
                assert loc.origin.kind is OriginKind.GENERATED, c
                manifest = json.loads((Path(loc.origin.root) / "manifest.json").read_text())
                assert manifest["fingerprint"]["tree"] == str(tree.root), c
            assert loc.disk_path.is_file(), c
            checked += 1
    return checked


def test_prelu_became_composite_implicit(diff_of, old_tree, new_tree):
    """1.13 has prelu_cpu/prelu_cuda/... per backend; 2.6 one composite kernel."""
    d = diff_of("aten::prelu")
    old, new = dispatch_of(old_tree.root, "prelu"), dispatch_of(new_tree.root, "prelu")
    assert old != new
    assert yaml_changes(d) == expected_dispatch_changes(old, new)
    kind = {c.name: c for c in d.section("yaml")}["kind"]
    assert (kind.before == "dispatch") == ("CPU" in old) and (kind.after == "composite implicit") == (set(new) == {"CompositeImplicitAutograd"})
    assert kind.change == "changed"
    kernels = {c.name: c for c in d.section("kernel")}
    for key, kernel in old.items():
        if key not in new:
            c = kernels[f"at::native::{kernel}"]
            assert c.change == "removed", c
            # prelu_mps is in an Objective-C++ file the index could not parse: said so, not dropped
            assert defines(c.old, kernel) if c.old is not None else "no definition found" in c.detail, c
    for key, kernel in new.items():
        c = kernels[f"at::native::{kernel}"]
        assert c.change == "added" and defines(c.new, kernel), (c, line_at(c.new))
    wrappers = {c.name: c for c in d.section("wrapper")}
    for key in set(old) - set(new) - {"MPS"}:
        c = wrappers[f"register {key}"]
        assert c.change == "removed" and c.before.startswith(f"wrapper") and f"at::native::{old[key]}" in c.before
        assert defines(c.old, c.before.split(" ")[0])
    for key in set(new) - set(old):
        c = wrappers[f"register {key}"]
        assert c.change == "added" and defines(c.new, c.after.split(" ")[0])
    assert check_sides(d, old_tree, new_tree) > 10


def test_conv2d_kernel_renamed_for_symbolic_shapes(diff_of, old_tree, new_tree):
    d = diff_of("aten::conv2d")
    old, new = dispatch_of(old_tree.root, "conv2d"), dispatch_of(new_tree.root, "conv2d")
    (key,) = old.keys()
    assert old[key] != new[key]
    assert yaml_changes(d)[key] == ("changed", f"at::native::{old[key]}", f"at::native::{new[key]}")
    # the files that define each kernel, found by reading the trees
    def defining_file(root, kernel):
        found = []
        for path in sorted((root / "aten/src/ATen/native").glob("*.cpp")):
            lines = path.read_text(errors="replace").splitlines()
            for n, line in enumerate(lines, 1):
                # conv2d.padding (padding as a string) is another overload
                if re.match(rf"(at::)?Tensor {kernel}\(", line) and "string_view" not in " ".join(lines[n - 1 : n + 3]):
                    found.append((path.relative_to(root).as_posix(), n))
        assert len(found) == 1, found
        return found[0]

    before, after = defining_file(old_tree.root, old[key]), defining_file(new_tree.root, new[key])
    (renamed,) = [c for c in d.section("kernel") if c.change == "renamed"]
    assert renamed.before == f"at::native::{old[key]}" and renamed.after == f"at::native::{new[key]}"
    assert (renamed.old.path, renamed.old.line) == before and (renamed.new.path, renamed.new.line) == after
    assert "similar" in renamed.detail
    check_sides(d, old_tree, new_tree)


def test_relu_gained_sparse_kernels_and_tags(diff_of, old_tree, new_tree):
    d = diff_of("torch.relu")
    assert d.op == "aten::relu"
    old, new = dispatch_of(old_tree.root, "relu"), dispatch_of(new_tree.root, "relu")
    assert set(new) - set(old), "2.6 adds dispatch keys to relu"
    assert yaml_changes(d) == expected_dispatch_changes(old, new)
    tags = {c.name: c for c in d.section("yaml")}["tags"]
    assert tags_of(old_tree.root, "relu") == [] and tags.change == "added"
    assert tags.after == ", ".join(tags_of(new_tree.root, "relu"))
    line, _, _ = yaml_entry(new_tree.root, "relu")
    assert tags.new.path == YAML and tags.new.line == line
    wrappers = {c.name: c for c in d.section("wrapper")}
    for key in set(new) - set(old):
        assert wrappers[f"register {key}"].change == "added"
    check_sides(d, old_tree, new_tree)


def test_nested_add_kernel_moved_file(diff_of, old_tree, new_tree):
    """NestedTensor_add_Tensor left NestedTensorMath.cpp in the split of the nested ops."""
    d = diff_of("aten::add.Tensor")

    def where(root):
        hits = []
        for path in sorted((root / "aten/src/ATen/native/nested").glob("*.cpp")):
            for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                if re.match(r"Tensor NestedTensor_add_Tensor\(", line):
                    hits.append((path.relative_to(root).as_posix(), n))
        assert len(hits) == 1, hits
        return hits[0]

    before, after = where(old_tree.root), where(new_tree.root)
    assert before[0] != after[0]
    c = {c.name: c for c in d.section("kernel")}["at::native::NestedTensor_add_Tensor"]
    assert c.change == "moved" and (c.old.path, c.old.line) == before and (c.new.path, c.new.line) == after
    # add.Tensor is structured in both: the delegate's entry is compared too
    _, old_fields, _ = yaml_entry(old_tree.root, "add.Tensor")
    _, new_fields, _ = yaml_entry(new_tree.root, "add.Tensor")
    delegate = {c.name: c for c in d.section("yaml")}["structured_delegate"]
    assert delegate.before == old_fields["structured_delegate"] and delegate.after == new_fields["structured_delegate"]
    old_out, new_out = dispatch_of(old_tree.root, "add.out"), dispatch_of(new_tree.root, "add.out")
    assert yaml_changes(d, "add.out dispatch ") == expected_dispatch_changes(old_out, new_out)
    check_sides(d, old_tree, new_tree)


def test_nodes_compare_the_call_trees(diff_of, old_tree, new_tree):
    d = diff_of("aten::prelu", nodes=True)
    nodes = d.section("node")
    assert nodes and {c.change for c in nodes} >= {"added", "removed"}
    for c in nodes:
        for loc in (c.old, c.new):
            if loc is not None and c.name.startswith("kernel "):
                assert defines(loc, c.name.split(" ", 1)[1]) or "FUNC" in line_at(loc), (c, line_at(loc))
    check_sides(d, old_tree, new_tree)


def test_an_operator_one_tree_lacks_is_compared_by_its_yaml_entry_only(diff_of, old_tree, new_tree):
    """_scaled_dot_product_attention is in 1.13's yaml, not 2.6's (both read
    here): its yaml entry is removed, but what it reached (cpublas_gemm_impl,
    mul_kernel: still in 2.6, reached by other operators) is not called removed."""
    assert re.search(r"^- func: _scaled_dot_product_attention\(", (old_tree.root / YAML).read_text(), re.M)
    assert not re.search(r"^- func: _scaled_dot_product_attention\(", (new_tree.root / YAML).read_text(), re.M)
    assert "cpublas_gemm_impl(" in (new_tree.root / "aten/src/ATen/native/cpu/BlasKernel.cpp").read_text()
    d = diff_of("aten::_scaled_dot_product_attention")
    assert [(c.section, c.change, c.name) for c in d.changes] == [("yaml", "removed", "entry")]
    assert any(n.startswith("kernels, stubs and wrappers not compared") for n in d.notes)


def test_cli_text_and_json(old_tree, new_tree):
    args = ("diff", "aten::prelu", "--from", str(old_tree.root), "--to", TREE_2_6)
    text = run_kernelmap(*args, "--width", "200")
    assert text.returncode == 0, text.stderr
    assert text.stdout.splitlines()[0] == f"aten::prelu: {old_tree.origin.label} ({old_tree.version}) -> {new_tree.origin.label} ({new_tree.version}), device cpu"
    assert "- removed  at::native::prelu_cpu" in text.stdout
    out = run_kernelmap(*args, "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["kernelmap"] == "diff/1"
    assert doc["origins"][doc["from"]]["root"] == str(old_tree.root)
    assert doc["origins"][doc["to"]]["root"] == str(new_tree.root)
    from kernelmap.answers import load
    from kernelmap.diff import OpDiff

    answer = load(doc)
    assert isinstance(answer, OpDiff) and answer.to_json() == doc
    for c in doc["changes"]:
        for side, version in (("from", old_tree.version), ("to", new_tree.version)):
            if c[side] is not None:
                assert doc["origins"][c[side]["origin"]]["version"] == version
                assert c[side]["file"] is not None


def test_bad_input_is_one_line(old_tree, new_tree, tmp_path):
    bare = tmp_path / "no-torchgen"
    for part in ("aten", "c10", "torch/csrc"):
        (bare / part).mkdir(parents=True)
    (bare / "version.txt").write_text("2.1.0a0\n")
    cases = {
        ("--from", "no-such-tree", "--to", TREE_2_6): "no-such-tree",
        ("--from", str(bare), "--to", TREE_2_6): "torchgen/",
        ("--from", TREE_2_6, "--to", TREE_2_6): "same tree",
        ("--from", str(new_tree.root), "--to", TREE_2_6): "same tree",
    }
    for args, says in cases.items():
        out = run_kernelmap("diff", "aten::relu", *args)
        assert out.returncode == 2, (args, out.stderr)
        assert out.stdout == "" and len(out.stderr.strip().splitlines()) == 1, out.stderr
        assert out.stderr.startswith("kernelmap: error: ") and says in out.stderr, out.stderr
