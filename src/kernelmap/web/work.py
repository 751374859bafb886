"""Long work (answer pages, the source view, trace import, search) -> a
bounded pool of threads, awaited with a timeout, so the event loop only
moves bytes: a static file or a cached page is served at once while a long
page computes.

At most `workers` jobs run and `waiting` more wait; beyond that a request is
refused at once (`Busy`, a 503 that says to retry). A request that waits
longer than `timeout` seconds gets `TooSlow` (a 503): a job still waiting is
dropped, and a running one is left to finish (a thread cannot be stopped),
so the page it was making is cached and a reload shows it. Requests for the
same key while its job runs share that job.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from kernelmap.errors import KernelmapError

T = TypeVar("T")


class Busy(KernelmapError):
    """The app has as much work in hand as it takes; try again shortly."""


class TooSlow(KernelmapError):
    """An answer took longer than the app waits for one."""


class Work:
    def __init__(self, workers: int | None = None, waiting: int = 32, timeout: float = 120.0):
        self.workers = workers or min(4, (os.cpu_count() or 1) + 1)
        self.waiting = waiting
        self.timeout = timeout
        self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="kernelmap-web")
        self._pending = 0  # jobs submitted and not finished (read and written on the event loop only)
        self._shared: dict[str, Future] = {}

    @property
    def pending(self) -> int:
        return self._pending

    async def run(self, fn: Callable[[], T], key: str | None = None) -> T:
        """`fn()` in the pool; Busy or TooSlow as the module's docstring says."""
        loop = asyncio.get_running_loop()
        job = self._shared.get(key) if key is not None else None
        if job is None:
            if self._pending >= self.workers + self.waiting:
                raise Busy("kernelmap is busy with other pages; try again in a moment")
            job = self._pool.submit(fn)
            self._pending += 1
            if key is not None:
                self._shared[key] = job
            job.add_done_callback(lambda _, k=key, j=job: self._call_soon(loop, self._finished, k, j))
        try:
            return await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(job)), self.timeout)
        except asyncio.TimeoutError:  # TimeoutError itself from 3.11 on
            if key is None:
                job.cancel()  # dropped if it has not started; a running thread finishes on its own
            raise TooSlow(f"the answer took longer than {self.timeout:g} s; it may be ready later: reload the page in a while") from None

    @staticmethod
    def _call_soon(loop: asyncio.AbstractEventLoop, fn: Callable[..., Any], *args: Any) -> None:
        try:
            loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # the loop is closed: the server stopped
            pass

    def _finished(self, key: str | None, job: Future) -> None:
        self._pending -= 1
        if key is not None and self._shared.get(key) is job:
            del self._shared[key]

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
