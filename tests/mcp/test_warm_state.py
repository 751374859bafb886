"""What a warm server keeps stays bounded and collectable: a context's
tables of kept results forget their oldest entries past their limit, and
each call's garbage (cycles included) is collected once the call is done,
with what is kept frozen out of later collections (Note [a warm heap] in
kernelmap.mcp.warm)."""

from __future__ import annotations

import asyncio
import gc
import weakref


def test_kept_results_forget_the_oldest_past_their_limit(served):
    from kernelmap import graph
    from kernelmap.graph.context import kept_results
    from tests.mcp.conftest import TREE_NAME

    ctx = graph.open_context("cpu", source=TREE_NAME)
    table = kept_results(ctx, "_bounded_for_a_test", limit=3)
    for i in range(5):
        table[i] = str(i)
    assert list(table.items()) == [(2, "2"), (3, "3"), (4, "4")]
    table[3] = "again"  # a key kept is replaced in place: nothing is forgotten
    assert list(table) == [2, 3, 4]
    assert kept_results(ctx, "_bounded_for_a_test") is table
    assert ctx.kept["_bounded_for_a_test"] is table


class _Cycle:
    def __init__(self):
        self.me = self


def test_a_call_s_cycles_are_collected_and_what_is_kept_frozen():
    from kernelmap.mcp.warm import Warm

    warm = Warm()
    gc.unfreeze()
    try:
        kept: list[_Cycle] = []

        def call():
            dropped = _Cycle()
            kept.append(_Cycle())
            return weakref.ref(dropped)

        async def two_calls():
            dead = await warm.run(call)
            await warm.run(lambda: None)  # the producer thread settles each call before the next runs
            return dead

        dead = asyncio.run(two_calls())
        assert dead() is None, "a cycle the call dropped outlived its settling"
        assert gc.get_freeze_count() > 0
        assert not any(o is kept[0] for o in gc.get_objects()), "what the call kept is still walked by the collector"
    finally:
        warm.close()
        gc.unfreeze()


def test_the_tools_share_one_context_per_device(served):
    """Note [one context per options]: a path after a stack, and callers (which
    require a tree) after both, read the context the stack opened; another
    device or dtype is another context."""
    from kernelmap.mcp.warm import Warm

    warm = Warm()
    try:
        stack = warm.context("cpu", requires_grad=False, all_branches=False, all_calls=False, dtype="float32")
        assert warm.context("cpu", dtype="float32") is stack  # path's and explain's options
        assert warm.context(require_tree=True) is stack and stack.index is not None  # callers'
        assert warm.context("cuda", dtype="float32") is not stack
        assert warm.context("cpu", dtype="float64") is not stack
    finally:
        warm.close()


def test_code_tables_are_shared_by_the_contexts_of_one_tree(served):
    """What reads only the tree's code and index (graph.context.shared_results,
    and the index itself) is kept once for every device; a context's own
    tables are its own; an answer is the same either way."""
    from kernelmap import graph
    import kernelmap.graph.context as context
    from kernelmap.graph.context import kept_results, shared_results
    from tests.mcp.conftest import TREE_NAME

    cpu, cuda = graph.open_context("cpu", source=TREE_NAME), graph.open_context("cuda", source=TREE_NAME)
    assert cpu.code_key == cuda.code_key is not None
    assert cpu.index is cuda.index  # one Index, whose look-ups each keeps for the other
    assert shared_results(cpu, "_shared_for_a_test") is shared_results(cuda, "_shared_for_a_test")
    assert kept_results(cpu, "_kept_for_a_test") is not kept_results(cuda, "_kept_for_a_test")
    graph.stack("torch.nn.functional.conv2d", cuda)
    assert shared_results(cpu, "_resolve_direct"), "the CUDA graph's resolved calls are there for a CPU one"
    after_cuda = graph.stack("torch.nn.functional.conv2d", cpu).to_json()
    context._SHARED.clear()  # a process that never drew a CUDA graph
    alone = graph.stack("torch.nn.functional.conv2d", graph.open_context("cpu", source=TREE_NAME)).to_json()
    assert after_cuda == alone
