"""What a server keeps open between calls: the graph contexts (catalogs, the
source index, the generated-code tables), the kernel resolver, the source
files it serves, imported traces and the answers it gave, so that a second
question costs a lookup, not a process start.

The producers hold SQLite connections and caches meant for one thread:
every producer call runs on one worker thread (`Warm.run`), one at a time,
while the event loop keeps serving the transport. A run that takes seconds
and reads no warm state (an observed call under gdb) runs on a thread of its
own (`Warm.aside`), one at a time too, so the other tools keep answering. A client that goes away
mid-call cancels its wait; the worker finishes and the result is dropped.
Rebuilding an index or regenerating code changes the stamp `Warm.fresh`
reads (a few `stat`s a call): the warm state is then opened again. A source
file edited since its tree was indexed is looked for every STALE_EVERY
seconds (a `stat` per indexed file, as each CLI run does): answers then say
so again, as the CLI's do.

Note [a warm heap]
A warm process holds millions of objects (catalog rows, index answers,
generated-code tables, the answers kept for expand), and Python's cycle
collector walks all of them each time enough new objects outlive a few
collections: a second or more, inside whichever question made the last of
them (measured over the bench's warm first asks: from a tenth to over half
of the time of `stack` and `callers`, by where the full collections fall).
So after each call, once its result is handed over, the producer thread
collects what the call left and freezes the rest (`gc.freeze`): later
collections walk only what later calls made. Cycles that die once frozen are
not collected until the heap is thawed: every SETTLE_EVERY calls and after
the warm state is dropped (`fresh`), the whole heap is collected once.
"""

from __future__ import annotations

import asyncio
import gc
import os
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from kernelmap.errors import KernelmapError
from kernelmap.mcp.bound import Answers
from kernelmap.web.files import SourceFiles

T = TypeVar("T")
MEMO = 512  # answers remembered by question
STALE_EVERY = 30.0  # seconds between looks for source files edited since they were indexed
SETTLE_EVERY = 256  # calls between collections of the whole heap (Note [a warm heap])
KEPT_PATHS = 4096  # generated files' disk paths kept with their served names
WRITE_EVERY = 30.0  # seconds between writes of what the graph worked out from code (Note [what a server writes back])
_NONE = object()


class ServedFiles(SourceFiles):
    """SourceFiles as the server names them: a generated file is named by its
    path under the generated-code cache, its set's folder first
    (`tree-2.6.0a0-83d8b5c5ae8c/build/aten/src/ATen/RegisterCPU_0.cpp`), or by
    a build path of the installed torch's set (`build/aten/...`)."""

    def __init__(self, roots, default_tree: str | None = None):
        super().__init__(roots, default_tree)
        # a generated file's disk path -> its path under the generated-code cache (or None): every
        # location of a generated file asks (a `resolve`, stats of each part), and answers name the
        # same few files; the files are discovered again when a cache changes (Warm.fresh)
        self._generated_rels: OrderedDict[str, str | None] = OrderedDict()

    def generated_rel(self, disk: str) -> str | None:
        """`disk` (a generated file's place on this machine) relative to the
        generated-code cache, or None when it lies elsewhere."""
        found = self._generated_rels.get(disk, _NONE)
        if found is _NONE:
            generated = self.roots.get("generated")
            try:
                found = Path(disk).resolve().relative_to(generated.directory).as_posix() if generated is not None else None
            except (OSError, ValueError):
                found = None
            self._generated_rels[disk] = found
            while len(self._generated_rels) > KEPT_PATHS:
                self._generated_rels.popitem(last=False)
        return found

    def _generated_path(self, rel: str) -> str:
        first = rel.split("/", 1)[0]
        generated = self.roots.get("generated")
        if generated is not None and "/" in rel and not rel.startswith("build/") and (generated.directory / first).is_dir():
            return rel
        return super()._generated_path(rel)


# Note [what a server writes back]
# What the graph works out from code alone (Note [shared results on disk] in
# kernelmap.graph.context, Note [Python read once] in kernelmap.graph.python)
# is written back when a CLI process exits; a server is usually ended by its
# client with a signal, which runs no exit handler. So the producer thread
# writes them once a call's result is handed over: the Python layer's small
# JSON tables after every call that added to them, the pickled shared results
# (larger) after the first call and then at most every WRITE_EVERY seconds.
# The next server (or CLI run) reads them instead of working them out again.
def write_back(shared: bool = True) -> None:
    from kernelmap.graph.context import write_shared_results
    from kernelmap.graph.python import write_tables

    if shared:
        write_shared_results()
    write_tables()


# Note [one context per options]
# A context is what open_context makes of a device and its options; asked
# for with an option left out, it is the one asked for with the option at
# its default, and asked for with require_tree it is the one asked for
# without, once that has its tree (open_context differs only in raising
# when the tree cannot be had). So the tools share one context per device:
# what it keeps of the code (GraphContext.kept) serves them all.
_CONTEXT_DEFAULTS = {"requires_grad": False, "all_branches": False, "all_calls": False, "dtype": "float32"}


class Warm:
    """The producers one server opened, and the answers it gave."""

    def __init__(self, source: str | None = None):
        self.source = source  # the tree answers read (None: the default selection)
        self.answers = Answers()
        self.traces: dict[str, Any] = {}  # trace key -> kernelmap.trace.Trace
        self._contexts: dict[Hashable, Any] = {}
        self._memo: OrderedDict[Hashable, tuple[str, dict]] = OrderedDict()  # question -> (answer id, replies by limit)
        self._files: ServedFiles | None = None
        self._resolvers: dict[str | None, tuple[Any, str | None]] = {}
        self._stamp: tuple | None = None
        self._looked = time.monotonic()  # when edited source files were last looked for
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kernelmap-mcp")
        self._aside = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kernelmap-mcp-aside")
        self._settled = 0  # calls settled (Note [a warm heap])
        self._thaw = False  # the next settling collects the whole heap
        self._written = time.monotonic() - WRITE_EVERY  # when the graph's tables were last written back: the first call writes

    # -- running producers ------------------------------------------------------

    async def run(self, fn: Callable[[], T]) -> T:
        """`fn()` on the producer thread; the caller's cancellation stops waiting, not the work.
        Then, once its result is handed over, what it kept is settled (Note [a warm heap])."""
        done = self._executor.submit(fn)
        self._executor.submit(self._settle)
        return await asyncio.wrap_future(done)

    def _settle(self) -> None:
        """Note [a warm heap]: collect what the last call left, then freeze what
        is kept; every SETTLE_EVERY calls, or after the warm state was dropped,
        thaw and collect the whole heap once."""
        self._settled += 1
        if time.monotonic() - self._written >= WRITE_EVERY:
            self._written = time.monotonic()
            write_back()
        else:
            write_back(shared=False)
        if self._thaw or self._settled % SETTLE_EVERY == 0:
            self._thaw = False
            gc.unfreeze()
        gc.collect()
        gc.freeze()

    async def aside(self, fn: Callable[[], T]) -> T:
        """`fn()` on the thread for long runs that read no warm state; one at a time."""
        return await asyncio.wrap_future(self._aside.submit(fn))

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
        self._aside.shutdown(wait=False, cancel_futures=True)

    # -- freshness ------------------------------------------------------------------

    def fresh(self) -> None:
        """Drop what was opened when the caches it came from changed (an index
        rebuilt, code regenerated, a tree added or removed)."""
        stamp = _stamp()
        edited = False
        if stamp == self._stamp and time.monotonic() - self._looked > STALE_EVERY:
            self._looked = time.monotonic()
            # a source file edited (or put back) since the contexts were opened
            edited = any(c.index is not None and c.index.stale_note() != c.stale for c in self._contexts.values())
        if stamp != self._stamp or edited:
            self._thaw = True  # what was dropped is collected after this call
            self._contexts.clear()
            self._memo.clear()
            self._resolvers.clear()
            self._files = None
            self._stamp = stamp

    def select(self, source: str | None) -> None:
        self.source = source

    # -- producers, opened once ------------------------------------------------------

    def context(self, device: str = "cpu", source: str | None = None, **options: Any):
        """The graph context for these options (kernelmap.graph.open_context), opened once."""
        from kernelmap import graph

        source = source if source is not None else self.source
        # one context per device and options as opened, whichever tool asks: a path after a stack, or
        # callers (which require a tree) after either, reads what the first kept (Note [one context per options])
        require_tree = options.pop("require_tree", False)
        opened = {**_CONTEXT_DEFAULTS, **options}
        key = (device, source, tuple(sorted(opened.items())))
        found = self._contexts.get(key)
        if found is None or (require_tree and found.index is None):  # one opened without its tree is no answer to callers
            found = self._contexts[key] = graph.open_context(device, source=source, require_tree=require_tree, **opened)
        return found

    def resolver(self, source: str | None = None):
        """(kernel-name resolver, why it has no source locations or None), opened once."""
        from kernelmap.kernels import open_resolver

        source = source if source is not None else self.source
        if source not in self._resolvers:
            self._resolvers[source] = open_resolver(source)
        return self._resolvers[source]

    @property
    def files(self) -> ServedFiles:
        """The roots resources are read from: registered trees, generated code, the wheel."""
        if self._files is None:
            found = SourceFiles.discover()
            self._files = ServedFiles(list(found.roots.values()), found.default_tree)
        return self._files

    # -- answers remembered by question ------------------------------------------

    def remembered(self, question: Hashable) -> tuple[str, dict] | None:
        """(answer id, its replies by token limit) of a question answered before and still kept."""
        found = self._memo.get(question)
        if found is None:
            return None
        try:
            self.answers.get(found[0])
        except KernelmapError:
            del self._memo[question]
            return None
        self._memo.move_to_end(question)
        return found

    def quick(self, question: Hashable, limit_tokens: int) -> Any | None:
        """The reply given before to the same question and limit, when nothing
        it was read from changed: read on the event loop, without waiting for
        the producer thread (which alone writes what is remembered)."""
        if _stamp() != self._stamp or time.monotonic() - self._looked > STALE_EVERY:
            return None  # the producer thread looks first (`fresh`)
        found = self._memo.get(question)
        if found is None or not self.answers.holds(found[0]):
            return None
        return found[1].get(limit_tokens)

    def remember(self, question: Hashable, aid: str, replies: dict) -> None:
        self._memo[question] = (aid, replies)
        while len(self._memo) > MEMO:
            self._memo.popitem(last=False)


def _stamp() -> tuple:
    """What changes when a cache the warm state read is rebuilt: the tree
    registry, each index's record and the generated-code folders."""
    from kernelmap import env

    cache = env.cache_dir()
    parts: list[Any] = []
    for rel in ("trees.json", "index", "codegen"):
        parts.append(_stat(cache / rel))
    index = cache / "index"
    try:
        parts.extend(_stat(index / name) for name in sorted(os.listdir(index)) if name.endswith(".record"))
    except OSError:
        pass
    return tuple(parts)


def _stat(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_size, st.st_mtime_ns)
