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
