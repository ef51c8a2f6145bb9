"""One benchmark runner and its typed result.

A benchmark prepares a ``Plan`` (its items, how to score one, how to summarise the records and
write the report); ``run`` does what every protocol repeated: the progress bar, per-item failures
(recorded, the run goes on), the call accounting, ``results.json`` (a ``BenchResult``, the same top-level
keys for every benchmark) and the report. A rerun resumes through the disk cache: every call an
earlier run finished is replayed.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel, Field

from halluscope.backends.stats import CallStats
from halluscope.bench.failures import Failures
from halluscope.bench.provenance import provenance
from halluscope.bench.report import write_csv, write_json
from halluscope.errors import ConfigError, ModelUnavailableError, redact_credentials
from halluscope.metrics import Record, Resampled, bootstrap_metrics
from halluscope.results import DetectionResult, RunMeta

RESULTS = "results.json"
ITEMS_CSV = "items.csv"  # beside results.json: one row per score, for a spreadsheet or pandas
ROW_KEYS = ("item", "unit", "score", "error")  # items.csv's own columns: a record field of the name is not copied


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
    intervals: dict[str, list[float]] = Field(
        default_factory=dict,
        description="95% percentile-bootstrap interval of each real-valued metric, resampling items (seed 0)",
    )
    item: str = Field("item", description="what an item is ('passage', 'question'): the bootstrap's resampling unit")
    per_score: dict[str, str] = Field(
        default_factory=dict, description="record lists with one element per score, and their items.csv column"
    )
    positive: list[str] = Field(
        default_factory=list, description="the unit labels counted as hallucinated (WikiBio: minor, major inaccurate)"
    )
    items: list[BenchItem]
    failures: list[dict[str, Any]] = Field(description="items whose model calls failed for good, with the reason")
    provenance: dict[str, Any] = Field(
        default_factory=dict, description="how the run was made: command, commit, machine (bench.provenance)"
    )

    @property
    def records(self) -> list[dict[str, Any]]:
        return [item.record for item in self.items]

    def write(self, out: str | Path) -> Path:
        """results.json, and items.csv beside it (``rows``)."""
        path = Path(out) / RESULTS
        write_json(path, self.model_dump(mode="json"))
        write_csv(Path(out) / ITEMS_CSV, self.rows())
        return path

    def rows(self) -> list[dict[str, Any]]:
        """items.csv's rows: one per score of each item (``unit`` names the score), with the record's
        plain fields (texts, numbers, flags) and, for each record list named in ``per_score``, its element
        for that score under the column it maps to (wikibio: the sentence and its label). A failed item is
        one row with its error; nested fields stay in results.json."""
        per_score = self.per_score
        rows: list[dict[str, Any]] = []
        for item in self.items:
            plain = {
                k: v
                for k, v in item.record.items()
                if (v is None or isinstance(v, str | int | float | bool)) and k not in ROW_KEYS
            }
            for position, (name, score) in enumerate(item.scores.items()):
                beside = {
                    column: values[position]
                    for key, column in per_score.items()
                    if isinstance(values := item.record.get(key), list) and position < len(values)
                }
                rows.append({"item": item.id, "unit": name, "score": score, **beside, **plain, "error": None})
        rows += [{"item": failure["item"], "error": failure["error"]} for failure in self.failures]
        return rows

    @classmethod
    def read(cls, out: str | Path) -> BenchResult:
        return cls.model_validate_json((Path(out) / RESULTS).read_text(encoding="utf-8"))


def unit_spans(result: DetectionResult) -> list[list[list[int]]]:
    """Each unit's spans in the answer's characters, as a record keeps them (report.html notes a claim's)."""
    return [[list(span) for span in unit.spans] for unit in result.units]


@dataclass
class Plan:
    """One benchmark run, prepared: ``score`` turns an item into its record (with ``scores``),
    ``summarise`` the records into metrics, ``events`` into the bad answers handled, ``report``
    writes report.md and plots beside results.json. ``counts_calls``: the bar counts model calls
    (the judge's included: a long item moves it) instead of items, against ``planned_calls`` per
    item where that is known up front, else against the calls the methods announce as they go.
    ``bootstrap``: the run's ``intervals``, resampling the items;
    off where the metrics carry their own (a bootstrap inside a bootstrap). ``resampled``: the metrics
    of every resample at once (``metrics.Resampled``), where the protocol has them vectorised.
    ``per_score``: the record lists that hold one element per score, and items.csv's column for each;
    ``positive``: the values of the "label" column that count as hallucinated (report.html's threshold
    control reads them)."""

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
    bootstrap: bool = True
    resampled: Resampled | None = None
    per_score: Mapping[str, str] = field(default_factory=dict)  # items.csv: record lists read one per score
    positive: tuple[str, ...] = ()  # the labels (per_score's "label") that count as hallucinated


def summed_events(records: Sequence[Record]) -> dict[str, int]:
    """The bad answers handled over the run: the sum of each record's ``events`` counts."""
    total: dict[str, int] = {}
    for record in records:
        for kind, count in (record.get("events") or {}).items():
            total[kind] = total.get(kind, 0) + count
    return total


@dataclass
class ItemOutcome:
    """One item scored (its record), or failed for good (the reason), and the calls it cost: what a
    worker sends back to the driver."""

    record: Record | None
    error: str | None = None
    counts: dict[str, Any] = field(default_factory=dict)


def score_item(plan: Plan, item: Any) -> ItemOutcome:
    """``plan.score(item)``; a provider that gave up is the item's failure, anything else (a bug) raises."""
    before = plan.stats.snapshot()
    try:
        record = plan.score(item)
    except ModelUnavailableError as exc:
        return ItemOutcome(None, str(exc), plan.stats.since(before))
    return ItemOutcome(record, None, plan.stats.since(before))


class Executor(Protocol):
    """Where a plan's items are scored: ``map`` calls ``on_result(index, outcome)`` as each finishes."""

    def map(self, plan: Plan, indexes: Sequence[int], on_result: Callable[[int, ItemOutcome], None]) -> None: ...


class InProcess:
    """The items one after another in this process (each item's calls fan out in its graph)."""

    def map(self, plan: Plan, indexes: Sequence[int], on_result: Callable[[int, ItemOutcome], None]) -> None:
        for index in indexes:
            on_result(index, score_item(plan, plan.items[index]))


def run(
    plan: Plan,
    out: str | Path,
    progress: bool = True,
    executor: Executor | None = None,
    fresh: bool = False,
    fingerprint: str = "",
) -> BenchResult:
    """Score every item of ``plan`` (a failed item is recorded and the rest go on), then write
    results.json and the report into ``out``.

    Each scored item is appended to ``out``/items.jsonl as it finishes; a rerun with the same plan
    (params and ``fingerprint``, e.g. the prompt versions) skips the items found there, so a crash or a
    Ctrl-C loses none. ``fresh``: score every item again (through the cache)."""
    made = provenance()  # at the start: the code that scores the items, and when it began
    out_dir = checked_out(out)
    ids = [plan.item_id(item) for item in plan.items]
    journal = Journal(out_dir / JOURNAL, _header(plan, fingerprint), fresh)
    finished = {i for i, item_id in enumerate(ids) if item_id in journal.records}
    if finished:
        print(f"resumed {len(finished)} of {len(ids)} {plan.what}s already scored in {journal.path}", file=sys.stderr)
    pending = [i for i in range(len(ids)) if i not in finished]
    failures = Failures()
    kept: dict[int, Record] = {i: journal.records[ids[i]] for i in finished}
    earlier = earlier_runs(out_dir) if finished else None
    plan.stats.started = time.perf_counter()  # its seconds are its own: plans made together run one by one
    try:
        _score_pending(plan, pending, ids, journal, kept, failures, executor, progress)
    finally:
        journal.close()
    result = _result(plan, ids, kept, failures, len(finished), made, earlier)
    result.write(out_dir)
    plan.report(result, out_dir, failures.report_paragraph(len(kept), f"{plan.what}s"))
    return result


def _meta(plan: Plan, records: list[Record], resumed: int, earlier: dict[str, Any] | None) -> RunMeta:
    extra: dict[str, Any] = {"resumed_items": resumed} if resumed else {}
    meta = plan.stats.meta(plan.method, plan.events(records), **extra, **({"earlier_runs": earlier} if earlier else {}))
    if earlier:
        meta.models = sorted({*meta.models, *earlier["models"]})
        meta.prompts = sorted({*meta.prompts, *earlier["prompts"]})
    return meta


def _score_pending(
    plan: Plan,
    pending: list[int],
    ids: list[str],
    journal: Journal,
    kept: dict[int, Record],
    failures: Failures,
    executor: Executor | None,
    progress: bool,
) -> None:
    """Score the pending items (on ``executor``), each kept and journalled as it finishes or recorded as
    failed, under a bar that counts calls or items. A bar counting calls the methods announce as they go
    projects its total from the calls each finished item took, so its time left is an estimate from
    the start, not a total that keeps growing."""
    from tqdm import tqdm  # looked up per run: a caller (a test) may swap the bar

    planned = plan.planned_calls if plan.counts_calls else None
    if planned:
        total: int | None = sum(planned(plan.items[i]) for i in pending)
    else:
        total = None if plan.counts_calls else len(pending)
    unit = " call" if plan.counts_calls else f" {plan.what}"
    local = executor is None or isinstance(executor, InProcess)
    with tqdm(total=total, desc=plan.method, unit=unit, disable=not progress) as bar:
        plan.stats.on_reply = bar.update if plan.counts_calls and local else None
        if plan.counts_calls and local and not planned:  # the total grows as each item's method announces its calls
            already = plan.stats.planned
            plan.stats.on_plan = lambda so_far: _grow(bar, so_far - already)
        done = 0

        def on_result(index: int, outcome: ItemOutcome) -> None:
            nonlocal done
            got = replies(outcome.counts)
            if not local:  # the calls were counted in a worker: add them here
                plan.stats.add(outcome.counts)
                if plan.counts_calls:
                    bar.update(got)
            if outcome.record is None:
                failures.add(ids[index], outcome.error)
            else:  # as JSON gives it back: a fresh record and a resumed one read the same
                kept[index] = json.loads(json.dumps(outcome.record))
                journal.add(ids[index], outcome.record)
            if planned:  # an item with unreadable answers makes fewer calls than planned
                bar.update(max(0, planned(plan.items[index]) - got))
            elif not plan.counts_calls:
                bar.update(1)
            done += 1
            if plan.counts_calls and not planned:  # the calls announced so far undercount: project the rest
                _grow(bar, round(bar.n / done * len(pending)))
            bar.set_postfix(done=f"{done}/{len(pending)}", failed=len(failures))

        try:
            (executor or InProcess()).map(plan, pending, on_result)
        finally:
            plan.stats.on_reply = plan.stats.on_plan = None
        if plan.counts_calls and not planned:  # done: the calls made were all there was (a projection overshoots)
            bar.total = bar.n
            bar.refresh()


def earlier_runs(out_dir: Path) -> dict[str, Any] | None:
    """What the runs into ``out_dir`` before this one spent and used (their results.json, itself carrying
    the runs before it): a resumed run's items were scored by them, so their record stays with it."""
    if not (out_dir / RESULTS).is_file():
        return None
    try:
        last = BenchResult.read(out_dir)
    except (OSError, ValueError, ConfigError):  # unreadable: the journal still holds every item
        return None
    before = last.meta.params.get("earlier_runs") or {}
    return {
        "calls": last.meta.calls + before.get("calls", 0),
        "cache_hits": last.meta.cache_hits + before.get("cache_hits", 0),
        "prompt_tokens": last.meta.tokens.prompt + before.get("prompt_tokens", 0),
        "seconds": round(last.meta.seconds + before.get("seconds", 0.0), 3),
        "models": sorted({*last.meta.models, *before.get("models", [])}),
        "prompts": sorted({*last.meta.prompts, *before.get("prompts", [])}),
    }


def _result(
    plan: Plan,
    ids: list[str],
    kept: dict[int, Record],
    failures: Failures,
    resumed: int,
    made: dict[str, Any],
    earlier: dict[str, Any] | None = None,
) -> BenchResult:
    """The run's result from every item kept, in the plan's order: metrics, intervals, failures; a resumed
    run keeps the record of the runs that scored its resumed items (their models and prompts among its
    own, their calls and seconds as ``earlier_runs``)."""
    position = {item_id: i for i, item_id in enumerate(ids)}
    failures.items.sort(key=lambda f: position[f["item"]])
    failures.check_some_scored(len(kept), plan.what)
    order = sorted(kept)
    records = [dict(kept[i]) for i in order]
    metrics = plan.summarise(records)
    groups = [r["group"] for r in records] if records and all("group" in r for r in records) else None
    intervals = (
        bootstrap_metrics(plan.summarise, records, resampled=plan.resampled, groups=groups) if plan.bootstrap else {}
    )
    items = [
        BenchItem(id=ids[i], scores=record.pop("scores"), record=record)
        for i, record in zip(order, records, strict=True)
    ]
    return BenchResult(
        bench=plan.bench,
        params=plan.params,
        meta=_meta(plan, records, resumed, earlier),
        metrics=metrics,
        intervals=intervals,
        item=plan.what,
        per_score=dict(plan.per_score),
        positive=list(plan.positive),
        items=items,
        failures=failures.items,
        provenance=made,
    )


def checked_out(out: str | Path) -> Path:
    """An output directory that exists or can be made: neither it nor a folder above it is a file."""
    path = Path(out)
    for folder in (path, *path.parents):
        if folder.exists():
            if not folder.is_dir():
                raise ConfigError(f"cannot write the results into {path}: {folder} is a file; write somewhere else")
            break
    return path


JOURNAL = "items.jsonl"


# params that say how many items run, not what an item's record depends on: a larger --limit resumes
# the items a smaller one scored
SIZE_PARAMS = ("limit", "passages", "problems")


# 3: each record carries a checksum over its content and the run's header, so a damaged or hand-edited
# record is scored again, never believed (version 2 kept the records' key order; version 1 sorted them,
# and "sentence 10" came before "sentence 2"). A journal of another version is moved aside, never resumed.
JOURNAL_VERSION = 3


def _header(plan: Plan, fingerprint: str) -> dict[str, Any]:
    """What an item's record depends on besides the item: a journal of another header is not resumed.
    As it is written: credentials redacted, JSON types."""
    params = {k: v for k, v in plan.params.items() if k not in SIZE_PARAMS}
    body = {
        "journal": JOURNAL_VERSION,
        "bench": plan.bench,
        "method": plan.method,
        "params": params,
        "fingerprint": fingerprint,
    }
    return json.loads(redact_credentials(json.dumps(body, sort_keys=True, default=str)))


class Journal:
    """OUT/items.jsonl: a header line, then one line per scored item ({"id", "record", "sum"}), appended
    and flushed as each item finishes. A journal of another run (another header) is moved aside, never
    deleted. A line that cannot be trusted (not UTF-8, not JSON, not a record, a checksum that does not
    match, a repeated item, a torn last line) is named in one warning and its item scored again; the
    journal it was found in is kept aside and a clean one written in its place."""

    def __init__(self, path: Path, header: dict[str, Any], fresh: bool) -> None:
        self.path = path
        self.records: dict[str, Record] = {}
        self._seal = _digest(header)
        if path.exists() and not path.is_file():
            raise ConfigError(f"the resume journal {path} is not a file: move it away, or write somewhere else")
        lines = path.read_bytes().split(b"\n") if path.is_file() else []
        if lines and (fresh or _line(lines[0]) != header):
            aside = _aside(path, "old")
            if not fresh:
                print(f"{path} is of another run (other settings): moved aside to {aside.name}", file=sys.stderr)
            lines = []
        damaged = self._read(lines[1:])
        if damaged:
            aside = _aside(path, "damaged")
            print(
                f"halluscope: warning: {path} had {damaged} damaged line(s); kept aside as {aside.name}, the "
                "good records carried over, and the items of the damaged ones are scored again",
                file=sys.stderr,
            )
        elif lines and lines[-1]:  # a whole last record without its newline: the next would be glued to it
            path.unlink()
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = path.open("a", encoding="utf-8")
        if not path.stat().st_size:
            self._write(header)
            for item_id, record in self.records.items():
                self.add(item_id, record)

    def _read(self, lines: list[bytes]) -> int:
        """The trusted records of the lines after the header; returns how many lines were damaged."""
        damaged = 0
        first_line: dict[str, int] = {}
        for number, raw in enumerate(lines, start=2):
            if number == len(lines) + 1 and not raw:
                break  # the file ends with a newline: the last line is complete
            problem, entry = self._problem(raw, number == len(lines) + 1)
            if problem is None and entry["id"] in first_line:
                problem = f"repeats {entry['id']!r} (line {first_line[entry['id']]} kept)"
            if problem is not None:
                damaged += 1
                print(f"halluscope: warning: {self.path} line {number}: {problem}", file=sys.stderr)
                continue
            first_line[entry["id"]] = number
            self.records[entry["id"]] = entry["record"]
        return damaged

    def _problem(self, raw: bytes, last: bool) -> tuple[str | None, dict[str, Any]]:
        """Why a journal line cannot be trusted (None when it can), and its entry."""
        try:
            entry = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError:
            return "is not UTF-8 text", {}
        except ValueError:
            return ("was cut off mid-write (a crash)" if last else "is not JSON"), {}
        if not (
            isinstance(entry, dict)
            and isinstance(entry.get("id"), str)
            and isinstance(entry.get("record"), dict)
            and isinstance(entry.get("sum"), str)
        ):
            return "is not a journal record (an id, a record and its checksum)", {}
        if entry["sum"] != _checksum(entry["id"], entry["record"], self._seal):
            return f"record of {entry['id']!r} does not match its checksum (edited or damaged)", {}
        scores = entry["record"].get("scores")
        if not isinstance(scores, dict) or not all(_score(v) for v in scores.values()):
            return f"record of {entry['id']!r} has no scores, or a score that is not a number", {}
        return None, entry

    def _write(self, entry: dict[str, Any]) -> None:
        self._file.write(json.dumps(entry, ensure_ascii=False) + "\n")
        self._file.flush()

    def add(self, item_id: str, record: Record) -> None:
        body = json.loads(redact_credentials(json.dumps({"id": item_id, "record": record}, ensure_ascii=False)))
        self._write({**body, "sum": _checksum(body["id"], body["record"], self._seal)})

    def close(self) -> None:
        self._file.close()


def _digest(value: Any) -> str:
    canonical = json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _checksum(item_id: str, record: Record, seal: str) -> str:
    """A record's checksum: its content and the run's header (a record moved between runs fails it)."""
    return _digest({"id": item_id, "record": record, "run": seal})[:32]


def _score(value: Any) -> bool:
    return value is None or (isinstance(value, int | float) and not isinstance(value, bool))


def _aside(path: Path, why: str) -> Path:
    """Move the journal to ``items.jsonl.WHY-<time>`` (never over a kept one) and return where."""
    aside = _unused(path.with_name(f"{path.name}.{why}-{time.strftime('%Y%m%d-%H%M%S')}"))
    path.rename(aside)
    return aside


def _grow(bar: Any, total: int) -> None:
    """A call-counting bar's total: at least the calls announced or projected, never below the count,
    and never shrinking (a total that jumps back and forth makes its time left meaningless)."""
    bar.total = max(total, bar.n, bar.total or 0)
    bar.refresh()


def replies(counts: dict[str, Any]) -> int:
    """Answers an item got, sent or from the cache (what the progress bar counts)."""
    return int(counts.get("calls", 0)) + int(counts.get("cache_hits", 0))


def _unused(path: Path) -> Path:
    """``path``, or ``path``-2, -3 ... when it exists (a rename must not overwrite a kept journal)."""
    candidate, k = path, 1
    while candidate.exists():
        k += 1
        candidate = path.with_name(f"{path.name}-{k}")
    return candidate


def _line(raw: bytes) -> Any:
    try:
        return json.loads(raw.decode("utf-8"))
    except ValueError:  # UnicodeDecodeError included
        return None
