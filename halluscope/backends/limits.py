"""One concurrency bound per model, shared by the threads and event loops of a process; or, on a Ray
cluster, by every process of the cluster (``use_shared_limits``: the scale module installs it in
each worker, so N workers together never exceed a model's limit)."""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, AbstractContextManager, asynccontextmanager, contextmanager
from typing import Protocol

from halluscope.errors import ConfigError


class Limiter(Protocol):
    """A model's concurrency bound: a slot is held for the length of one request."""

    def slot(self) -> AbstractContextManager[None]: ...

    def aslot(self) -> AbstractAsyncContextManager[None]: ...


_shared: Callable[[str, int], Limiter] | None = None


def use_shared_limits(factory: Callable[[str, int], Limiter] | None) -> None:
    """From now on, every gateway of this process takes a model's limit from ``factory(model, limit)``
    (None: back to per-process limits); a model that runs in the process keeps its own (the gateway asks)."""
    global _shared
    _shared = factory


def shared_limiter(model: str, limit: int) -> Limiter | None:
    """The cluster-wide limiter of ``model``, when this process runs under one."""
    return None if _shared is None else _shared(model, limit)


class ModelLimiter:
    """A concurrency bound shared by threads and event loops alike (one per model per gateway)."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ConfigError(f"concurrency must be at least 1, got {limit}")
        self.limit = limit
        self.in_use = 0
        self.peak = 0
        self._cond = threading.Condition()
        self._waiters: deque[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = deque()

    def _take(self) -> None:
        self.in_use += 1
        self.peak = max(self.peak, self.in_use)

    def acquire(self) -> None:
        with self._cond:
            while self.in_use >= self.limit:
                self._cond.wait()
            self._take()

    async def aacquire(self) -> None:
        loop = asyncio.get_running_loop()
        with self._cond:
            if self.in_use < self.limit:
                self._take()
                return
            waiter: asyncio.Future[None] = loop.create_future()
            self._waiters.append((loop, waiter))
        try:
            await waiter
        except asyncio.CancelledError:
            with self._cond:
                if (loop, waiter) in self._waiters:
                    self._waiters.remove((loop, waiter))
            raise  # a slot already handed over is given back by _hand_over

    def _hand_over(self, waiter: asyncio.Future[None]) -> None:
        if waiter.cancelled():
            self.release()
        else:
            waiter.set_result(None)

    def release(self) -> None:
        with self._cond:
            while self._waiters:
                loop, waiter = self._waiters.popleft()
                if not loop.is_closed():
                    loop.call_soon_threadsafe(self._hand_over, waiter)  # the slot moves, in_use stays
                    return
            self.in_use -= 1
            self._cond.notify()

    @contextmanager
    def slot(self) -> Iterator[None]:
        self.acquire()
        try:
            yield
        finally:
            self.release()

    @asynccontextmanager
    async def aslot(self) -> AsyncIterator[None]:
        await self.aacquire()
        try:
            yield
        finally:
            self.release()
