"""One benchmark runner and its typed result.

A benchmark prepares a ``Plan`` (its items, how to score one, how to summarise the records and
write the report); ``run`` does what every protocol repeated: the progress bar, per-item failures
(recorded, the run goes on), the call accounting, ``results.json`` (a ``BenchResult``, the same top-level
keys for every benchmark) and the report. A rerun resumes through the disk cache: every call an
earlier run finished is replayed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from halluscope.backends.stats import CallStats
from halluscope.bench.failures import Failures
from halluscope.bench.report import write_json
from halluscope.results import RunMeta

RESULTS = "results.json"


class BenchItem(BaseModel):
    """One scored item: a stable id ('passage 12'), its scores by name (what a prompt comparison
    diffs) and everything else the protocol keeps about it."""

    id: str
    scores: dict[str, float | None]
    record: dict[str, Any] = Field(default_factory=dict)


class BenchResult(BaseModel):
    """What every benchmark writes to results.json."""

    bench: str
    params: dict[str, Any] = Field(description="what was asked: method, model, data, sizes")
    meta: RunMeta = Field(description="what it cost: calls, cache hits, tokens, seconds, models, prompts, events")
    metrics: dict[str, Any]
    items: list[BenchItem]
    failures: list[dict[str, Any]] = Field(description="items whose model calls failed for good, with the reason")

    @property
    def records(self) -> list[dict[str, Any]]:
        return [item.record for item in self.items]

    def write(self, out: str | Path) -> Path:
        path = Path(out) / RESULTS
        write_json(path, self.model_dump(mode="json"))
        return path

    @classmethod
    def read(cls, out: str | Path) -> BenchResult:
        return cls.model_validate_json((Path(out) / RESULTS).read_text(encoding="utf-8"))


Record = dict[str, Any]


@dataclass
class Plan:
    """One benchmark run, prepared: ``score`` turns an item into its record (with ``scores``),
    ``summarise`` the records into metrics, ``events`` into the bad answers handled, ``report``
    writes report.md and plots beside results.json. ``counts_calls``: the bar counts model calls
    (the judge's included: a long item moves it) instead of items, against ``planned_calls`` per
    item where that is known up front."""

    bench: str
    method: str
    what: str  # 'passage', 'question', 'query': how the report and the errors name an item
    items: Sequence[Any]
    item_id: Callable[[Any], str]
    score: Callable[[Any], Record]
    summarise: Callable[[list[Record]], dict[str, Any]]
    params: dict[str, Any]
    report: Callable[[BenchResult, Path, str], None]
    stats: CallStats = field(default_factory=CallStats)
    events: Callable[[list[Record]], dict[str, int]] = field(default=lambda records: summed_events(records))
    counts_calls: bool = False
    planned_calls: Callable[[Any], int] | None = None


def summed_events(records: Sequence[Record]) -> dict[str, int]:
    """The bad answers handled over the run: the sum of each record's ``events`` counts."""
    total: dict[str, int] = {}
    for record in records:
        for kind, count in (record.get("events") or {}).items():
            total[kind] = total.get(kind, 0) + count
    return total


def run(plan: Plan, out: str | Path, progress: bool = True) -> BenchResult:
    """Score every item of ``plan`` (a failed item is recorded and the rest go on), then write
    results.json and the report into ``out``."""
    from tqdm import tqdm  # looked up per run: a caller (a test) may swap the bar

    failures = Failures()
    kept: list[tuple[Any, Record]] = []
    planned = plan.planned_calls if plan.counts_calls else None
    total = sum(planned(i) for i in plan.items) if planned else None if plan.counts_calls else len(plan.items)
    unit = " call" if plan.counts_calls else f" {plan.what}"
    with tqdm(total=total, desc=plan.method, unit=unit, disable=not progress) as bar:
        plan.stats.on_reply = bar.update if plan.counts_calls else None
        for k, item in enumerate(plan.items):
            before = bar.n
            record = failures.attempt(plan.item_id(item), partial(plan.score, item))
            if record is not None:
                kept.append((item, record))
            if planned:  # an item with unreadable answers makes fewer calls than planned
                bar.update(max(0, planned(item) - (bar.n - before)))
            elif not plan.counts_calls:
                bar.update(1)
            bar.set_postfix(done=f"{k + 1}/{len(plan.items)}", failed=len(failures))
    plan.stats.on_reply = None
    failures.check_some_scored(len(kept), plan.what)
    records = [record for _, record in kept]
    metrics = plan.summarise(records)
    items = [BenchItem(id=plan.item_id(item), scores=record.pop("scores"), record=record) for item, record in kept]
    result = BenchResult(
        bench=plan.bench,
        params=plan.params,
        meta=plan.stats.meta(plan.method, plan.events(records)),
        metrics=metrics,
        items=items,
        failures=failures.items,
    )
    out_dir = Path(out)
    result.write(out_dir)
    plan.report(result, out_dir, failures.report_paragraph(len(kept), f"{plan.what}s"))
    return result
