"""A benchmark's items on a Ray cluster: each worker rebuilds the plan from the same settings (never a
pickled graph, client or model) and scores the items it is given; the driver keeps the journal, the
order, the failures and the call counts (``bench.runner.run``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from halluscope.backends.gateway import DEFAULT_TIMEOUT, Gateway
from halluscope.bench.benchmark import Benchmark, Settings
from halluscope.bench.runner import ItemOutcome, Plan, score_item


@dataclass(frozen=True)
class _PlanJob:
    """What a worker needs to rebuild plan number ``position`` of a benchmark: the benchmark, its
    settings (plain values) and the driver's gateway (which travels as its settings)."""

    benchmark: Benchmark
    settings: Settings
    gateway: Gateway | None
    position: int

    def build(self) -> Callable[[int], ItemOutcome]:
        def gateway() -> Gateway:
            if self.gateway is None:
                raise RuntimeError(f"bench {self.benchmark.name} asked for a gateway it was not given")
            return self.gateway

        plan = self.benchmark.plans(self.settings, gateway)[self.position]
        return lambda index: score_item(plan, plan.items[index])


class OnRay:
    """``runner.Executor`` on Ray: ``workers`` actors (default: the cluster's CPUs), one item at a time each."""

    def __init__(
        self,
        benchmark: Benchmark,
        settings: Settings,
        gateway: Gateway | None,
        position: int,
        address: str | None,
        workers: int | None,
    ) -> None:
        self.job = _PlanJob(benchmark, settings, gateway, position)
        self.address = address
        self.workers = workers
        self.timeout = gateway.timeout if gateway is not None else DEFAULT_TIMEOUT

    def map(self, plan: Plan, indexes: Sequence[int], on_result: Callable[[int, ItemOutcome], None]) -> None:
        from halluscope import scale

        def done(position: int, value: ItemOutcome | scale.WorkerLost) -> None:
            outcome = value if isinstance(value, ItemOutcome) else ItemOutcome(None, str(value))
            on_result(indexes[position], outcome)

        scale.ray_map(
            self.job, list(indexes), done, workers=self.workers, request_timeout=self.timeout, address=self.address
        )
