"""One concurrency bound per model, shared by the threads and event loops of a process; or by every
process of a cluster (``use_shared_limits``): on Ray, the scale module installs its actors' limits in
each worker; several ``serve`` processes install ``redis_limits`` on the Redis server whose call cache
they share. Either way N processes together never exceed a model's limit."""

from __future__ import annotations

import asyncio
import hashlib
import threading
import time
import uuid
import warnings
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, AbstractContextManager, asynccontextmanager, contextmanager
from typing import Any, Protocol

from halluscope.backends.cache import RedisCache
from halluscope.errors import ConfigError, redact_credentials


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


# takes a slot when fewer than ARGV[1] leases are held: expired leases dropped first, on the server's clock
TAKE_LEASE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[1]) then
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[3])
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
"""
LEASE_GRACE_S = 30.0  # a shared slot outlives a model call's timeout by this much before it is taken back
POLL_S = (0.005, 0.1)  # a waiting process asks again after 5 ms, doubling up to 100 ms


class RedisLimiter:
    """A model's limit held in a Redis server that several processes share: a slot is a lease in a sorted
    set scored by its expiry on the server's clock, taken by one atomic script and given back at the
    request's end; a lease a killed process never gives back runs out after ``lease_s``. A server that
    fails mid-run leaves each process its own limit from then on, with one warning (requests go on)."""

    KEY = "halluscope:limit:"

    def __init__(self, client: Any, server_errors: tuple[type[Exception], ...], model: str, limit: int, lease_s: float):
        self._client = client
        self._errors = server_errors
        self._script = client.register_script(TAKE_LEASE)
        digest = hashlib.sha256(model.encode()).hexdigest()[:16]  # the key names no credential of the spec
        self.key = f"{self.KEY}{digest}:{limit}"
        self.model = redact_credentials(model)
        self.limit = limit
        self.lease_ms = max(1, int(lease_s * 1000))
        self._local: ModelLimiter | None = None  # this process's own limit, once the server has failed
        self._lock = threading.Lock()

    def _lost(self, exc: Exception) -> ModelLimiter:
        with self._lock:
            if self._local is not None:
                return self._local
            self._local = ModelLimiter(self.limit)
            warnings.warn(
                f"the shared limit of {self.model} failed ({type(exc).__name__}: {exc}); this process keeps "
                f"its own limit of {self.limit} from now on",
                stacklevel=3,
            )
        return self._local

    def take(self, token: str) -> bool | ModelLimiter:
        """Takes a lease named ``token`` if a slot is free (whether it did); this process's own limiter where
        the server has failed."""
        if self._local is not None:
            return self._local
        try:
            return bool(self._script(keys=[self.key], args=[self.limit, self.lease_ms, token]))
        except self._errors as exc:
            return self._lost(exc)

    def _give_back(self, token: str) -> None:
        if self._local is None:
            try:
                self._client.zrem(self.key, token)
            except self._errors as exc:
                self._lost(exc)

    @contextmanager
    def slot(self) -> Iterator[None]:
        token, wait = uuid.uuid4().hex, POLL_S[0]
        while (taken := self.take(token)) is False:
            time.sleep(wait)
            wait = min(2 * wait, POLL_S[1])
        if isinstance(taken, ModelLimiter):
            with taken.slot():
                yield
            return
        try:
            yield
        finally:
            self._give_back(token)

    @asynccontextmanager
    async def aslot(self) -> AsyncIterator[None]:
        token, wait = uuid.uuid4().hex, POLL_S[0]
        while (taken := await asyncio.to_thread(self.take, token)) is False:
            await asyncio.sleep(wait)
            wait = min(2 * wait, POLL_S[1])
        if isinstance(taken, ModelLimiter):
            async with taken.aslot():
                yield
            return
        try:
            yield
        finally:
            await asyncio.to_thread(self._give_back, token)

    def held(self) -> int:
        """How many leases of this model are held now, by every process (expired ones not counted)."""
        seconds, micros = self._client.time()
        return int(self._client.zcount(self.key, seconds * 1000 + micros // 1000, "+inf"))


def redis_limits(cache: RedisCache, lease_s: float) -> Callable[[str, int], Limiter]:
    """A ``use_shared_limits`` factory: each model's limit held on the Redis server of ``cache`` (the serve
    processes behind one address share it with their call cache, over the cache's own connection); a
    lease lasts ``lease_s``, a model call's longest time and a margin."""
    made: dict[tuple[str, int], RedisLimiter] = {}
    lock = threading.Lock()

    def limiter(model: str, limit: int) -> Limiter:
        with lock:
            if (model, limit) not in made:
                made[(model, limit)] = RedisLimiter(cache.client, cache.server_errors, model, limit, lease_s)
            return made[(model, limit)]

    return limiter
