"""Every benchmark by name, and one way to run one from its settings: in this process, or with its
items spread over a Ray cluster (each worker rebuilds the same plans from the same settings)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

from halluscope.backends.gateway import Gateway
from halluscope.bench import grounded, mine, planted, ragtruth, wikibio
from halluscope.bench.benchmark import Benchmark, Settings
from halluscope.bench.distributed import OnRay
from halluscope.bench.html import write_html_report
from halluscope.bench.papers import clue, icl, phr_synthetic, qa, truthfulqa
from halluscope.bench.runner import BenchResult, Executor, checked_out, run

BENCHMARKS: dict[str, Benchmark] = {
    b.name: b
    for b in (
        wikibio.BENCHMARK,
        qa.BENCHMARK,
        phr_synthetic.BENCHMARK,
        icl.BENCHMARK,
        clue.BENCHMARK,
        truthfulqa.BENCHMARK,
        truthfulqa.RANK_BENCHMARK,
        planted.BENCHMARK,
        grounded.BENCHMARK,
        mine.BENCHMARK,
        ragtruth.BENCHMARK,
    )
}
LOCAL_CLUSTER = "local"  # --ray with no address: a Ray instance started on this machine


def run_benchmark(
    benchmark: Benchmark,
    settings: Settings,
    gateway: Callable[[], Gateway],
    out: str | Path,
    *,
    progress: bool = True,
    ray: str | None = None,
    workers: int | None = None,
    fresh: bool = False,
) -> list[BenchResult]:
    """Every plan of ``benchmark`` for these settings, each into its folder under ``out`` (resuming the
    items found there unless ``fresh``), then what they share. ``ray``: a cluster address ('auto',
    'ray://host:port') or LOCAL_CLUSTER, to score the items on ``workers`` Ray actors."""
    checked_out(out)  # before any data is read or model loaded
    shared = functools.cache(gateway)  # every plan of a run shares one gateway
    plans = benchmark.plans(settings, shared)
    fingerprint = shared().prompt_fingerprint() if benchmark.calls_models else ""
    results = []
    for position, plan in enumerate(plans):
        executor: Executor | None = None
        if ray is not None:
            address = None if ray == LOCAL_CLUSTER else ray
            gw = shared() if benchmark.calls_models else None
            executor = OnRay(benchmark, settings, gw, position, address, workers)
        results.append(run(plan, benchmark.out_dir(plan.method, out), progress, executor, fresh, fingerprint))
    benchmark.finish(results, Path(out))
    write_html_report(results, Path(out))
    return results
