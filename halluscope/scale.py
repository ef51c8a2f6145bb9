"""Scale-out on a Ray cluster: the same detector or benchmark, its items spread over worker actors.

What runs where:
- The driver (your process) keeps the order of the items, the progress bar, the per-item failure
  records and the resume journal; it sends each worker a *job* (a detector, or the recipe of a
  benchmark plan), never a graph, a client or a model.
- Each worker actor builds the job once (its graph per item, its gateway from the driver's gateway
  settings, a local model loaded once per actor) and scores the items it is given, ``per_worker``
  at a time. The workers outlive the map, warm, for the next map of the same kind.
- One named actor per API model holds that model's concurrency limit for the whole cluster; every
  worker's gateway takes a slot from it for the length of one request (retries and backoff stay in
  the gateway), and keeps it a moment for its next request. A slot is a lease that runs out, so a
  worker killed mid-request cannot keep it.
- The call cache is shared when it is a Redis server (``HALLUSCOPE_CACHE_URL=redis://...``); a
  directory cache is shared only by the workers of one machine.

A worker that dies is restarted by Ray and its items are retried; an item that still cannot finish
comes back as a failure (``WorkerLost``), never as a missing result.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import Any, Protocol

from halluscope.backends.chat import runs_in_process
from halluscope.backends.gateway import DEFAULT_TIMEOUT
from halluscope.backends.limits import LEASE_GRACE_S, use_shared_limits
from halluscope.errors import ConfigError, HalluscopeError, redact_credentials

RAY_INSTALL = "pip install 'halluscope[ray]'"
NAMESPACE = "halluscope"
LINGER_S = 0.05  # a lease given back waits this long in its process for the next request


class WorkerLost(HalluscopeError):
    """A Ray worker died while scoring an item, and Ray's retries did not bring it back."""


def cpus_for(model: Any) -> float:
    """The CPUs a worker reserves for ``model``: a local model computes (one), an API model waits (none)."""
    return 1.0 if runs_in_process(model) else 0.0


class Job(Protocol):
    """What a worker builds once and then calls per item: picklable plain settings, never a graph."""

    def build(self) -> Callable[[Any], Any]: ...


def ray_module() -> Any:
    """The ``ray`` package, or a clear error naming the extra to install."""
    try:
        import ray
    except ImportError as exc:
        raise ConfigError(f"the ray executor needs Ray: {RAY_INSTALL} ({exc})") from exc
    return ray


def connect(address: str | None) -> Any:
    """Join the cluster at ``address`` ('auto', 'ray://host:port') or start a local one (None); a process
    already connected stays as it is. HALLUSCOPE_* settings travel to the workers."""
    ray = ray_module()
    if not ray.is_initialized():
        env = {k: v for k, v in os.environ.items() if k.startswith("HALLUSCOPE_")}
        ray.init(
            address=address,
            namespace=NAMESPACE,
            runtime_env={"env_vars": env} if env else None,
            include_dashboard=False,
            log_to_driver=False,
        )
    return ray


# ---------------------------------------------------------------- cluster-wide limits


class ClusterLimiter:
    """A model's limit held by its named actor: ``slot()`` holds one lease for one request.

    A lease given back stays in this process for ``linger_s`` and goes to the next request, so a worker
    scoring item after item asks the actor once rather than for every call (each ask is a round trip
    and CPU on both sides). Only a lease with a whole request's time left is handed on; one idle longer
    than ``linger_s`` goes back to the actor, so a worker that stops waiting keeps no slot from others
    for longer than that. Every request still holds a lease the actor granted: the limit holds."""

    def __init__(self, actor: Any, lease_s: float, request_s: float, linger_s: float = LINGER_S) -> None:
        self._actor = actor
        self._lease_s = lease_s
        self._request_s = request_s
        self._linger_s = linger_s
        self._idle: list[tuple[str, float, float]] = []  # (token, lease deadline, idle since), newest last
        self._cond = threading.Condition()
        self._reaper: threading.Thread | None = None

    def _reuse(self) -> tuple[str, float] | None:
        """An idle lease with a whole request's time left, if this process holds one."""
        now = time.monotonic()
        with self._cond:
            while self._idle:
                token, deadline, _ = self._idle.pop()
                if deadline - now > self._request_s:
                    return token, deadline
                self._actor.release.remote(token)  # too little time left for one more request
        return None

    def _keep(self, token: str, deadline: float) -> None:
        with self._cond:
            self._idle.append((token, deadline, time.monotonic()))
            if self._reaper is None:
                self._reaper = threading.Thread(target=self._reap, name="halluscope-lease-reaper", daemon=True)
                self._reaper.start()
            self._cond.notify()

    def _reap(self) -> None:
        """Gives back to the actor every lease idle for longer than linger_s."""
        with self._cond:
            while True:
                if not self._idle:
                    self._cond.wait()
                    continue
                now = time.monotonic()
                stale = [entry for entry in self._idle if now - entry[2] >= self._linger_s]
                for entry in stale:
                    self._idle.remove(entry)
                    self._actor.release.remote(entry[0])
                if self._idle:
                    oldest = min(since for _, _, since in self._idle)
                    self._cond.wait(timeout=max(0.0, oldest + self._linger_s - now))

    def _new_lease(self) -> tuple[str, float, Any]:
        """A token, its deadline here (taken before asking, so never later than the actor's) and the
        actor's answer to wait on."""
        token = uuid.uuid4().hex
        return token, time.monotonic() + self._lease_s, self._actor.acquire.remote(token, self._lease_s)

    @contextmanager
    def slot(self) -> Iterator[None]:
        lease = self._reuse()
        if lease is None:
            token, deadline, granted = self._new_lease()
            ray_module().get(granted)
            lease = token, deadline
        try:
            yield
        finally:
            self._keep(*lease)

    @asynccontextmanager
    async def aslot(self) -> AsyncIterator[None]:
        lease = self._reuse()
        if lease is None:
            token, deadline, granted = self._new_lease()
            await granted
            lease = token, deadline
        try:
            yield
        finally:
            self._keep(*lease)


@functools.cache
def _limit_actor_class() -> Any:
    ray = ray_module()

    @ray.remote(num_cpus=0, max_concurrency=10_000)
    class ModelLimit:
        """One model's slots for the whole cluster: at most ``limit`` leases at once; a lease not given
        back within its time (a worker killed mid-request) is taken back."""

        def __init__(self, limit: int) -> None:
            import asyncio

            self.limit = limit
            self.leases: dict[str, float] = {}
            self.peak = 0
            self.granted = 0
            self.cond = asyncio.Condition()

        def _expire(self) -> None:
            now = time.monotonic()
            for token in [t for t, deadline in self.leases.items() if deadline < now]:
                del self.leases[token]

        async def acquire(self, token: str, lease_s: float) -> None:
            import asyncio

            async with self.cond:
                while True:
                    self._expire()
                    if len(self.leases) < self.limit:
                        self.leases[token] = time.monotonic() + lease_s
                        self.peak = max(self.peak, len(self.leases))
                        self.granted += 1
                        return
                    # woken by a release, or every second to take back expired leases
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self.cond.wait(), timeout=1.0)

        async def release(self, token: str) -> None:
            async with self.cond:
                self.leases.pop(token, None)
                self.cond.notify()

        async def state(self) -> dict[str, int]:
            return {"limit": self.limit, "in_use": len(self.leases), "peak": self.peak, "granted": self.granted}

    return ModelLimit


def budget_actor() -> Any:
    """A batch's call count for the whole cluster (detect_many on Ray): each worker's runs announce their
    calls, and their retries, to this one actor, so ``max_calls`` covers the batch's items together."""
    ray = ray_module()

    @ray.remote(num_cpus=0)
    class BatchBudget:
        def __init__(self) -> None:
            self.planned = 0
            self.retries = 0

        def plan(self, calls: int, retry: bool) -> tuple[int, int]:
            self.planned += calls
            self.retries += calls if retry else 0
            return self.planned, self.retries

    return BatchBudget.remote()


def _limit_name(model: str, limit: int) -> str:
    """The limit actor's name, which Ray's dashboard and state API show: no credential in it."""
    return f"limit:{redact_credentials(model)}:{limit}"


def limit_actor(model: str, limit: int) -> Any:
    """The named actor holding ``model``'s limit (made by the first worker that needs it; detached, so it
    outlives that worker)."""
    return (
        _limit_actor_class()
        .options(name=_limit_name(model, limit), namespace=NAMESPACE, get_if_exists=True, lifetime="detached")
        .remote(limit)
    )


def limit_state(model: str, limit: int) -> dict[str, int]:
    """The limit, the leases held now, the most ever held at once and how many were ever granted, of
    ``model`` on this cluster."""
    ray = ray_module()
    return ray.get(ray.get_actor(_limit_name(model, limit), namespace=NAMESPACE).state.remote())


def use_cluster_limits(request_s: float) -> None:
    """In this worker process, every gateway takes an API model's slots from the cluster's actor; a
    lease lasts a request's time (``request_s``) plus LEASE_GRACE_S."""
    actors: dict[str, ClusterLimiter] = {}

    def limiter(model: str, limit: int) -> ClusterLimiter:
        if model not in actors:
            actors[model] = ClusterLimiter(limit_actor(model, limit), request_s + LEASE_GRACE_S, request_s)
        return actors[model]

    use_shared_limits(limiter)


# ---------------------------------------------------------------- the worker pool


@functools.cache
def _worker_class() -> Any:
    ray = ray_module()

    @ray.remote
    class Worker:
        """A warm process: builds each map's job once and scores its items, ``max_concurrency`` at a
        time. It outlives one map, so the next map finds its imports done and its models loaded."""

        def __init__(self, request_s: float) -> None:
            use_cluster_limits(request_s)
            self._lock = threading.Lock()
            self._built: tuple[str, Callable[[Any], Any]] | None = None  # one map at a time per pool

        def _job(self, job_id: str, job_ref: list[Any]) -> Callable[[Any], Any]:
            """The map's job, built here once (again in a process Ray restarted); the ref comes in a
            list so that Ray hands it over unread and the job is read only when it is built."""
            with self._lock:
                if self._built is None or self._built[0] != job_id:
                    self._built = job_id, ray.get(job_ref[0]).build()
                return self._built[1]

        def prepare(self, job_id: str, job_ref: list[Any]) -> None:
            """Builds the job (a failed build raises here, before any item is sent)."""
            self._job(job_id, job_ref)

        def pid(self) -> int:
            return os.getpid()

        def score(self, job_id: str, job_ref: list[Any], payload: Any) -> Any:
            return self._job(job_id, job_ref)(payload)

    return Worker


_idle: tuple[tuple[Any, ...], list[Any]] | None = None  # the last map's workers, kept warm, and their kind
_idle_lock = threading.Lock()


def _take_idle() -> tuple[tuple[Any, ...], list[Any]] | None:
    global _idle
    with _idle_lock:
        idle, _idle = _idle, None
    return idle


def _workers(ray: Any, kind: tuple[Any, ...], count: int, request_s: float) -> list[Any]:
    """``count`` workers of this kind: the idle ones of the last map when it was of the same kind, the
    rest started. Idle workers of another kind are stopped first (they hold CPUs and models)."""
    idle = _take_idle()
    actors: list[Any] = []
    if idle is not None:
        idle_kind, idle_actors = idle
        if idle_kind == kind:
            actors, idle_actors = idle_actors[:count], idle_actors[count:]
        _stop(ray, idle_kind, idle_actors)
    _, cpus, per_worker, _ = kind
    worker_class = _worker_class().options(
        num_cpus=cpus, max_concurrency=per_worker, max_restarts=2, max_task_retries=2
    )
    return actors + [worker_class.remote(request_s) for _ in range(count - len(actors))]


def _stop(ray: Any, kind: tuple[Any, ...], actors: list[Any]) -> None:
    """Stops workers of this Ray session (those of a session shut down are gone with it)."""
    if ray.is_initialized() and kind[0] == ray.get_runtime_context().get_job_id():
        for actor in actors:
            ray.kill(actor)


def _keep_idle(ray: Any, kind: tuple[Any, ...], actors: list[Any]) -> None:
    global _idle
    with _idle_lock:
        previous, _idle = _idle, (kind, actors)
    if previous is not None:
        _stop(ray, *previous)


def release_workers() -> None:
    """Stops the workers the last map left warm (they hold their CPUs and loaded models until then, or
    until this process disconnects from Ray)."""
    idle = _take_idle()
    if idle is not None:
        _stop(ray_module(), *idle)


def ray_map(
    job: Job,
    payloads: Sequence[Any],
    on_result: Callable[[int, Any], None],
    *,
    workers: int | None = None,
    per_worker: int = 1,
    cpus_per_worker: float = 1.0,
    request_timeout: float = DEFAULT_TIMEOUT,
    address: str | None = None,
    on_start: Callable[[list[Any]], None] | None = None,
) -> None:
    """Score every payload on ``workers`` actors (default: the cluster's CPUs) and call
    ``on_result(position, value)`` on the driver as each finishes (any order); a model's cluster-wide
    slot is leased for ``request_timeout`` plus LEASE_GRACE_S; a payload whose worker died for good
    gives a ``WorkerLost`` value. An error the job raises (a bug) is raised here, and so is one from
    building the job (bad settings, data missing on a node), once, before any item is sent. The
    workers stay up, idle, for the next map of the same kind (``release_workers`` stops them).
    ``on_start`` sees the workers (tests kill one)."""
    if workers is not None and workers < 1:
        raise ConfigError(f"workers must be at least 1, got {workers}")
    if per_worker < 1:
        raise ConfigError(f"items per worker must be at least 1, got {per_worker}")
    ray = connect(address)
    workers = workers or max(1, int(ray.cluster_resources().get("CPU", 1)))
    kind = (ray.get_runtime_context().get_job_id(), cpus_per_worker, per_worker, request_timeout)
    actors = _workers(ray, kind, min(workers, max(1, len(payloads))), request_timeout)
    job_id, job_ref = uuid.uuid4().hex, [ray.put(job)]
    try:
        ray.get([actor.prepare.remote(job_id, job_ref) for actor in actors])
    except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError) as exc:  # every item would fail alike
        _stop(ray, kind, actors)
        cause = str(exc).strip().splitlines()[-1]
        raise ConfigError(f"the Ray workers could not start: {cause}") from exc
    if on_start is not None:
        on_start(actors)
    pending: dict[Any, tuple[int, Any]] = {}  # a running item: its position and its actor
    alive = list(actors)
    queue = iter(enumerate(payloads))

    def submit(actor: Any) -> None:
        nxt = next(queue, None)
        if nxt is not None:
            position, payload = nxt
            pending[actor.score.remote(job_id, job_ref, payload)] = (position, actor)

    try:
        for actor in actors:  # each actor runs per_worker items with as many queued behind: no idle round trip
            for _ in range(2 * per_worker):
                submit(actor)
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            position, actor = pending.pop(done[0])
            outcome = _outcome(ray, done[0])
            on_result(position, outcome)
            if isinstance(outcome, WorkerLost) and actor in alive:
                alive.remove(actor)  # gone for good: its share goes to the others
            if alive:
                submit(actor if actor in alive else alive[position % len(alive)])
            elif not pending:  # no worker left: what was never sent is lost, and recorded so
                for position, _payload in queue:
                    on_result(position, WorkerLost("every Ray worker died and Ray's retries gave up"))
    except BaseException:  # a bug in the job, Ctrl-C: items may still run on the workers
        _stop(ray, kind, actors)
        raise
    _stop(ray, kind, [actor for actor in actors if actor not in alive])
    _keep_idle(ray, kind, alive)


def _outcome(ray: Any, ref: Any) -> Any:
    """The item's value, a WorkerLost when its worker died for good, or the job's own error raised."""
    try:
        return ray.get(ref)
    except (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError, ray.exceptions.ObjectLostError) as exc:
        return WorkerLost(f"its Ray worker died and Ray's retries gave up ({type(exc).__name__})")
    except ray.exceptions.RayTaskError as exc:
        raise exc.as_instanceof_cause() from None
