"""`halluscope bench mine --data FILE`: any methods on a user's own labelled answers (``labelled.py``),
scored like every bench (results.json with intervals, items.csv, report.md and report.html, the
resume journal).

Each answer is an item: its inputs go to the method under the method's own names (``question`` is
Direct Question's ``prompt``, ``context`` grounded's documents), its sentences (split as the methods
split them) are the units. Measured, resampling answers: answer-level AUC-ROC and AUC-PR x100 (an
answer's score is its riskiest unit's; positive = label 1), and, where every row labels its sentences,
sentence-level AUC-ROC and AUC-PR x100 too.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from halluscope.backends.gateway import CallStats, Gateway
from halluscope.backends.models import ModelLike, model_name
from halluscope.bench.benchmark import REQUIRED, Benchmark, Settings, listed, option
from halluscope.bench.report import Curve, markdown_table, write_curves, write_text
from halluscope.bench.runner import BenchResult, Plan, unit_spans
from halluscope.bench.wikibio import finite_scores, score_list, stored_score
from halluscope.calibration import fitted_score
from halluscope.checks import finite_number, key_values
from halluscope.errors import ConfigError
from halluscope.labelled import LabelledAnswer, LabelledData, load_labelled
from halluscope.metrics import auc_pr_resampled, auc_roc_resampled, unresampled
from halluscope.results import DetectionResult
from halluscope.runtime import registry
from halluscope.runtime.contract import Flag, Method, arg, start

POSITIVE = ("1",)  # a unit label counted as hallucinated (report.html's threshold control)
PROTOCOL = "your labelled answers: an answer's score is its riskiest unit's; positive = label 1; AUC x100"
COLUMNS = (
    ("method", "method"),
    ("answer_auc_roc", "answer AUC-ROC"),
    ("answer_auc_pr", "answer AUC-PR"),
    ("sentence_auc_roc", "sentence AUC-ROC"),
    ("sentence_auc_pr", "sentence AUC-PR"),
    ("flag_rate", "flagged"),
    ("n_answers", "answers"),
    ("n_hallucinated", "hallucinated"),
)


def method_inputs(method: Method, row: LabelledAnswer) -> dict[str, Any]:
    """A row's columns under the method's input names (``question`` to its question field, ``context`` to
    its documents); where the row labels its sentences, the method is given those sentences, so its units
    are the ones labelled. A column the method does not read is left out."""
    renamed = {"question": method.question_field, "context": method.context_field}
    given: dict[str, Any] = {}
    for column, value in row.inputs.items():
        name = renamed.get(column) or column
        if name in method.input_names:
            given[name] = value
    if row.labels is not None and "sentences" in method.input_names:
        given["sentences"] = row.units
    return given


def check_rows(method: Method, options: Mapping[str, Any], labelled: LabelledData) -> None:
    """Every row's inputs, with the run's options, checked as a detector checks them before a call is made:
    a missing column or a bad cell is one error naming the row and the column."""
    columns = {method.question_field: "question", method.context_field: "context"}

    def label(name: str) -> str:
        if name in method.input_names:
            return f"a '{columns.get(name, name)}' column"
        return "--model" if name == method.model_field else f"--opt {name}=..."

    for number, row in enumerate(labelled.rows, start=1):
        try:
            method.validate({**method_inputs(method, row), **options}, label)
        except ConfigError as exc:
            raise ConfigError(f"{labelled.source}, row {number} (id {row.id}): {exc}") from None


def score_answer(method: Method, scorer: Callable[[Any], DetectionResult], row: LabelledAnswer) -> dict[str, Any]:
    """One answer through the method: its units' scores, beside their labels where the row gives them."""
    result = scorer(method.inputs(**method_inputs(method, row)))
    texts = [u.text for u in result.units]
    if row.labels is not None and len(texts) != len(row.labels):
        raise ConfigError(f"{method.name} scored {len(texts)} units of answer {row.id} for {len(row.labels)} labels")
    return {
        "id": row.id,
        "texts": texts,
        "labels": [str(v) for v in row.labels] if row.labels is not None else [None] * len(texts),
        "answer_label": row.answer_label,
        "spans": unit_spans(result),
        **({"group": row.group} if row.group is not None else {}),
        "events": dict(result.meta.events),
        "scores": {f"unit {k}": stored_score(fitted_score(u)) for k, u in enumerate(result.units)},
    }


def riskiest(scores: Mapping[str, float | None]) -> float:
    """An answer's score: its riskiest unit's (an unseen unigram, None, is +inf as in every bench)."""
    return max(score_list(scores), default=np.nan)


def resampled_metrics(
    records: list[dict[str, Any]], counts: np.ndarray, threshold: float | None = None
) -> dict[str, np.ndarray]:
    """The metrics on each resample of the answers (``counts``: a row per resample, a column per answer);
    with a ``threshold``, the share of answers flagged (their riskiest unit's score at or above it)."""
    y = np.array([r["answer_label"] for r in records], dtype=bool)  # the metrics read booleans
    s = np.array([riskiest(r["scores"]) for r in records], dtype=np.float64)
    keep = ~np.isnan(s)
    s = finite_scores(s)
    out = {
        "answer_auc_roc": auc_roc_resampled(y[keep], s[keep], counts[:, keep]) * 100,
        "answer_auc_pr": auc_pr_resampled(y[keep], s[keep], counts[:, keep]) * 100,
    }
    if records and all(None not in r["labels"] for r in records):
        owner = np.array([i for i, r in enumerate(records) for _ in r["labels"]], dtype=int)
        unit_y = np.array([v == "1" for r in records for v in r["labels"]], dtype=bool)
        unit_s = finite_scores(np.array([x for r in records for x in score_list(r["scores"])], dtype=np.float64))
        out["sentence_auc_roc"] = auc_roc_resampled(unit_y, unit_s, counts[:, owner]) * 100
        out["sentence_auc_pr"] = auc_pr_resampled(unit_y, unit_s, counts[:, owner]) * 100
    if threshold is not None:
        flagged = (s >= threshold) & keep
        out["flag_rate"] = (counts * flagged).sum(axis=1) / np.maximum(counts.sum(axis=1), 1)
    return out


def summarise(records: list[dict[str, Any]], threshold: float | None = None) -> dict[str, Any]:
    metrics: dict[str, Any] = unresampled(partial(resampled_metrics, records, threshold=threshold), len(records))
    metrics["n_answers"] = len(records)
    metrics["n_hallucinated"] = sum(r["answer_label"] for r in records)
    metrics["n_units"] = sum(len(r["scores"]) for r in records)
    return metrics


def mine_plans(
    data: Any,
    methods: Sequence[str],
    model: ModelLike | None = None,
    gateway: Gateway | None = None,
    limit: int | None = None,
    options: Mapping[str, Any] | None = None,
    threshold: float | None = None,
) -> list[Plan]:
    """One plan per method over the user's labelled answers (a path, DataFrame, rows or langsmith:NAME);
    ``options`` and ``model`` go to each method that declares them (a judge, top_k) unless its configured
    name sets them ('grounded[model=nli:DIR]'); ``threshold``: the raw score at
    which an answer is flagged, for the share flagged (``flag_rate``). A method that cannot run on the
    rows is refused up front, naming the row and what it lacks."""
    labelled = data if isinstance(data, LabelledData) else load_labelled(data, limit=limit)
    plans = []
    for name in methods:
        method_name, own = registry.configured(name)  # its preset's and bracketed options win over the run's
        method = registry.get(method_name)
        chosen = {k: v for k, v in (options or {}).items() if k in method.option_names}
        if model is not None and method.model_field in method.option_names:
            chosen[method.model_field] = [model] if method.takes_list(method.model_field) else model
        chosen |= own
        check_rows(method, chosen, labelled)
        plans.append(_plan(name, method, chosen, labelled, gateway, threshold))
    return plans


def samples_given(method: Method, labelled: LabelledData) -> int | None:
    """How many samples an answer gave a method that reads them (the most common count over the rows),
    None where it reads none or no row gives any: what a deployed run must draw to score as it was fitted."""
    if "samples" not in method.input_names:
        return None
    counts = Counter(len(row.inputs["samples"]) for row in labelled.rows if row.inputs.get("samples"))
    return counts.most_common(1)[0][0] if counts else None


def _plan(
    name: str,
    method: Method,
    options: dict[str, Any],
    labelled: LabelledData,
    gateway: Gateway | None,
    threshold: float | None = None,
) -> Plan:
    stats = CallStats()
    ctx = start(gateway, stats)
    scorer = method.scorer(method.options(**options), ctx)
    model = options.get(method.model_field)
    recorded = {k: v for k, v in options.items() if k != method.model_field and isinstance(v, str | int | float)}
    given = samples_given(method, labelled)
    if given is not None and "n" in method.option_names:
        recorded["n"] = given  # scored on the file's samples: n is how many a deployed run draws
    return Plan(
        bench="mine",
        method=name,
        what="answer",
        items=labelled.rows,
        item_id=lambda row: f"answer {row.id}",
        score=partial(score_answer, method, scorer),
        summarise=partial(summarise, threshold=threshold),
        resampled=partial(resampled_metrics, threshold=threshold),
        params={
            "dataset": labelled.source,
            "method": name,
            "model": model_name(model) if isinstance(model, str) else None,
            "options": recorded,
            "samples_from": "your file" if given is not None else None,
            "threshold": threshold,
            "per_sentence": labelled.per_sentence,
            "protocol": PROTOCOL,
        },
        report=lambda result, out, failed: None,  # one report for all methods: write_report
        stats=stats,
        counts_calls=model is not None,
        per_score={"texts": "text", "labels": "label", "spans": "spans"},
        positive=POSITIVE,
    )


def write_report(results: Sequence[BenchResult], out: Path) -> None:
    """report.md: a row per method, and the PR and ROC curves of the answers, and of the sentences where
    every row labels them (report.html reads curves.json)."""
    rows = [{"method": r.params["method"], **r.metrics} for r in results]
    per_sentence = bool(results) and all(None not in item.record["labels"] for r in results for item in r.items)
    levels = [("answer", "answers"), *([("sentence", "sentences")] if per_sentence else [])]
    for level, units in levels:
        for kind, title in (("pr", "precision-recall"), ("roc", "ROC")):
            curves = [_curve(r, level, kind) for r in results]
            if any(c.y.size for c in curves):
                name = f"{kind}.png" if level == "answer" else f"{level}_{kind}.png"
                write_curves(out / name, curves, kind, f"your {units}: hallucinated, {title}")
    source = results[0].params["dataset"] if results else "no data"
    shown = " ".join(f"![{k}]({k}.png)" for k in ("pr", "roc")) + (
        " ![sentences PR](sentence_pr.png) ![sentences ROC](sentence_roc.png)" if per_sentence else ""
    )
    write_text(
        out / "report.md",
        f"# Your labelled answers\n\n{source}. Protocol: {PROTOCOL}.\n\n{markdown_table(rows, COLUMNS)}\n\n{shown}\n",
    )


def _curve(result: BenchResult, level: str, kind: str) -> Curve:
    """One method's curve: its answers (each its riskiest unit's score) or its labelled sentences."""
    records = [{**item.record, "scores": item.scores} for item in result.items]
    if level == "answer":
        scores = np.array([riskiest(rec["scores"]) for rec in records], dtype=np.float64)
        labels = np.array([rec["answer_label"] for rec in records], dtype=int)
    else:
        scores = np.array([x for rec in records for x in score_list(rec["scores"])], dtype=np.float64)
        labels = np.array([v == "1" for rec in records for v in rec["labels"]], dtype=int)
    keep = ~np.isnan(scores)
    interval = result.intervals.get(f"{level}_auc_{kind}")
    return Curve(result.params["method"], labels[keep], finite_scores(scores[keep]), interval)


def describe(results: Sequence[BenchResult]) -> str:
    lines = []
    for r in results:
        lines.append(f"{r.params['method']}: {r.meta.cost()}")
        if r.failures:
            lines.append(f"  {len(r.failures)} answers failed (left out of the metrics; results.json has the reasons)")
        shown = [f"{h} {_with_interval(r, k)}" for k, h in COLUMNS[1:] if k in r.metrics]
        lines.append("  " + "  ".join(shown))
    return "\n".join(lines)


def _with_interval(result: BenchResult, key: str) -> str:
    """A metric as printed: its value and, where it has one, its 95% interval resampling answers."""
    value, interval = result.metrics.get(key), result.intervals.get(key)
    if value is None:
        return "n/a"
    if not isinstance(value, float):
        return str(value)
    digits = 3 if key == "flag_rate" else 2
    shown = f"{value:.{digits}f}"
    return shown + (f" [{interval[0]:.{digits}f}, {interval[1]:.{digits}f}]" if interval else "")


def _shown(value: Any) -> str:
    return "n/a" if value is None else f"{value:.2f}" if isinstance(value, float) else str(value)


@dataclass(frozen=True, kw_only=True)
class MineSettings(Settings):
    data: str = option(
        REQUIRED,
        "your labelled answers: a .csv or .jsonl file, one row an answer (its inputs as columns, and "
        "'labels', a JSON list of 0/1 per sentence, or 'label', 0/1 for the answer; 1 = hallucinated)",
        "--data",
        metavar="FILE",
    )
    method: tuple[str, ...] = listed(REQUIRED, "methods (halluscope methods lists them)", "--method")
    model: str | None = option(None, "the model of every method that calls one (default: the method's own)", "--model")
    limit: int | None = option(None, "only the first K answers", "--limit", type=int)
    threshold: float | None = option(
        None,
        "a raw score at which an answer is flagged: the share flagged (--max-flag-rate gates it)",
        "--threshold",
        type=finite_number,
        metavar="T",
    )
    opt: tuple[str, ...] = arg(
        (),
        help="a method option, given to each method that has it (e.g. judge=nli:deberta-v3-large-mnli, top_k=2)",
        flags=(Flag(("--opt",), append=True, metavar="KEY=VALUE"),),
    )


def _plans(settings: MineSettings, gateway: Callable[[], Gateway]) -> list[Plan]:
    options = key_values(settings.opt, "--opt", typed=True)
    s = settings
    return mine_plans(s.data, s.method, s.model, gateway(), s.limit, options, s.threshold)


BENCHMARK = Benchmark(
    name="mine",
    help="any methods on your own labelled answers (CSV or JSON Lines)",
    description="Any methods on your own labelled answers (a .csv or .jsonl file, one row an answer), scored "
    "like every benchmark: answer-level AUC-ROC and AUC-PR with intervals resampling answers, and "
    "sentence-level ones where every row labels its sentences.",
    settings=MineSettings,
    plans=_plans,
    describe=lambda results, _settings: describe(results),
    finish=write_report,
    by_method=True,
    own_data=True,
)
