"""Generating from a source tree with the tree's own torchgen (the real
PyTorch 2.6.0 tree): a newer torchgen cannot read its yaml, so it runs in its
own interpreter with the tree first on PYTHONPATH."""

from __future__ import annotations

import re

import pytest

from kernelmap.codegen import generated_files, locate


@pytest.fixture(scope="module")
def tree_files(tree_2_6):
    return generated_files(tree=tree_2_6)


def _shards(path) -> int:
    return int(re.search(r"num_shards=(\d+)", path.read_text()).group(1))


def test_the_tree_is_generated_with_its_own_shard_counts(tree_2_6, tree_files):
    paths = tree_files.paths()
    for generator, stem in (("gen_variable_type.py", "VariableType_"), ("gen_trace_type.py", "TraceType_")):
        count = sum(1 for p in paths if p.startswith(f"torch/csrc/autograd/generated/{stem}"))
        assert count == _shards(tree_2_6 / "tools/autograd" / generator)
    version = (tree_2_6 / "version.txt").read_text().strip()
    assert tree_files.origin.version == version
    assert tree_files.manifest["fingerprint"]["tree"] == str(tree_2_6.resolve())


def test_conv2d_in_the_tree(tree_2_6, tree_files):
    code = locate("aten::conv2d", tree=tree_2_6, files=tree_files)
    assert code.origin.version == (tree_2_6 / "version.txt").read_text().strip()
    (binding,) = code.bindings
    assert "at::conv2d_symint" in binding.calls
    reg = code.registration("CompositeImplicitAutograd")
    assert reg is not None and "at::native::conv2d_symint" in reg.calls
