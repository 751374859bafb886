"""The C++ operators a definition writes on Tensors (Note [operators written
as C++ operators] in kernelmap.graph.sites) are read once per definition and
kept with the code's shared results (Note [shared results on disk] in
kernelmap.graph.context): read back, they are the ones computed, and a
catalog whose yaml files changed never reads another catalog's."""

from __future__ import annotations

import os

from tests.mcp.test_kept_on_disk import _fresh_memory


def test_operator_sites_read_back_are_the_ones_computed(served):
    from kernelmap import graph
    import kernelmap.graph.context as context
    import kernelmap.graph.sites as sites
    from tests.mcp.conftest import TREE_NAME

    ctx = graph.open_context("cpu", source=TREE_NAME)
    _fresh_memory()
    context._results_path(ctx.code_key)[0].unlink(missing_ok=True)
    _fresh_memory()
    computed = graph.stack("torch.nn.Conv2d", ctx).to_json()  # helpers of its kernels write C++ operators on Tensors
    table = context._SHARED[ctx.code_key]["_operator_sites"]
    assert table.added > 0 and any(table.values()), "no definition wrote an operator on Tensors"
    kept = dict(table)
    context.write_shared_results()

    _fresh_memory()
    again = graph.stack("torch.nn.Conv2d", graph.open_context("cpu", source=TREE_NAME)).to_json()
    assert again == computed
    read = context._SHARED[ctx.code_key]["_operator_sites"]
    assert read.added == 0, "the operator sites were worked out again"
    for (symbol, span, stamp), found in kept.items():  # each as the walk computes it now
        definition = next(d for d in ctx.index.definitions(symbol.qualified_name) if d.symbol == symbol)
        calls = ctx.index.calls_from(definition)
        if span is not None:
            calls = [s for s in calls if span[0] <= s.location.line <= span[1] and not (s.location.line == span[0] and sites._loop_call(s))]
        assert tuple(sites._operator_sites(definition, calls, span, ctx)) == found, symbol


def test_a_changed_catalog_reads_no_kept_operator_sites(served, monkeypatch):
    """The key names the catalog's stamp: its yaml files' sizes and mtimes
    (an edit of native_functions.yaml is no edit of an indexed file)."""
    from kernelmap import graph
    import kernelmap.graph.context as context
    import kernelmap.graph.sites as sites
    from tests.mcp.conftest import TREE_NAME

    ctx = graph.open_context("cpu", source=TREE_NAME)
    yaml = ctx.index.tree.root / "aten/src/ATen/native/native_functions.yaml"
    st = os.stat(yaml)
    assert (str(yaml), st.st_size, st.st_mtime_ns) in ctx.catalog.stamp
    graph.stack("torch.nn.Conv2d", ctx)
    symbol = next(symbol for (symbol, span, _), found in context._SHARED[ctx.code_key]["_operator_sites"].items() if span is None and found)
    definition = next(d for d in ctx.index.definitions(symbol.qualified_name) if d.symbol == symbol)
    calls = ctx.index.calls_from(definition)
    computed: list[int] = []
    real = sites._operator_sites
    monkeypatch.setattr(sites, "_operator_sites", lambda *a: computed.append(1) or real(*a))
    first = sites._kept_operator_sites(definition, calls, None, ctx)
    assert computed == [], "a kept answer was worked out again"
    monkeypatch.setattr(ctx.catalog, "stamp", (*ctx.catalog.stamp, ("edited", 0, 0)))
    assert sites._kept_operator_sites(definition, calls, None, ctx) == first
    assert computed == [1], "another catalog's operator sites were served"
