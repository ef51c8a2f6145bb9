"""Grounded checking measured on human labels: `halluscope bench grounded --dataset rte|wikibio`.

- ``rte``: the 277 RTE validation pairs (premise = the context, hypothesis = the text, one unit);
  positive = not_entailment (the hypothesis is not supported). AUC-ROC and AUC-PR x100, and the
  judge's own decision (not entailed when the score >= 0.5, i.e. support < 0.5) scored as accuracy,
  balanced accuracy, precision, recall and F1. ``--split train`` scores RTE's training pairs instead,
  where a threshold can be fitted before it is applied to the validation pairs.
- ``wikibio``: each of GPT-3's 1,908 sentences against the passage's own Wikipedia text, with the
  WikiBio protocol's metrics (the same plans as `bench wikibio`, so the grounded rows sit beside the
  reference-free ones in one table).

The methods are the registry's grounded ones (those that read the documents an answer rests on).
"""

from __future__ import annotations

import csv
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from halluscope.backends.gateway import CallStats, Gateway
from halluscope.backends.models import model_name
from halluscope.bench import wikibio
from halluscope.bench.benchmark import REQUIRED, Benchmark, Settings, listed, option
from halluscope.bench.datasets import dataset_file
from halluscope.bench.report import Curve, markdown_table, write_curves, write_text
from halluscope.bench.runner import BenchResult, Plan, unit_spans
from halluscope.errors import ConfigError, DataError
from halluscope.metrics import auc_pr_resampled, auc_roc_resampled, decisions_resampled, mean_resampled, unresampled
from halluscope.runtime import registry
from halluscope.runtime.contract import start

DATASETS = ("rte", "qnli", "wice", "wikibio")
RTE_LABELS = ("entailment", "not_entailment")
QNLI_PARTS = ("fit", "test")  # QNLI's questions and sentences apart: a checker fits on one, is tested on the other
QNLI_SPLIT = "by question and sentence"  # how the parts are drawn, as a run records it (earlier: by question)
QNLI_TEST_EVERY = 5  # a question whose hash is 0 mod 5 is in the test part (about a fifth)
WICE_SPLITS = ("dev", "test")  # a checker fits on dev; `--dataset wice` tests on test
WICE_LABELS = ("supported", "partially_supported", "not_supported")  # supported alone counts (LLM-AggreFact)
RTE_SPLITS = ("val", "train")  # train: where a decision threshold is fitted before it is applied to val
UNSUPPORTED = ("not_entailment",)  # RTE's positive class: the text is not supported by the context
DECISION = 0.5  # the judge's own decision: not supported when support < 0.5
FLAGS = ("top_k", "chunk_words", "overlap_words", "decompose")  # grounded's options a run takes as flags
RTE_PROTOCOL = "RTE pairs: hypothesis against premise; positive = not_entailment; AUC-ROC/PR x100, decisions at 0.5"


def grounded_methods() -> tuple[str, ...]:
    """The methods that check a text against documents given with it."""
    return tuple(name for name, m in registry.methods().items() if m.context_field is not None)


@dataclass(frozen=True)
class Pair:
    index: int
    premise: str
    hypothesis: str
    label: str


def _jsonl_pairs(
    path: Path, what: str, labels: Sequence[str], read: Callable[[dict[str, Any], int], Pair]
) -> list[Pair]:
    """A JSON Lines file's pairs (``read`` makes one of a row and the pairs so far), a row it cannot read or
    a label outside ``labels`` a DataError naming its line."""
    pairs: list[Pair] = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            pair = read(row, len(pairs))
        except (ValueError, KeyError, TypeError) as exc:
            raise DataError(f"{path}, line {number}: not a {what} record ({exc})") from exc
        label = row.get("label")
        if label not in labels:
            raise DataError(f"{path}, line {number}: label {label!r} is not one of {', '.join(labels)}")
        pairs.append(pair)
    return pairs


def load_rte(data: str | Path | None = None, limit: int | None = None, split: str = "val") -> list[Pair]:
    """RTE's validation (or training) pairs (SuperGLUE's jsonl: premise, hypothesis, label, idx)."""
    if split not in RTE_SPLITS:
        raise ConfigError(f"RTE has no split {split!r}; available: {', '.join(RTE_SPLITS)}")

    def read(row: dict[str, Any], _count: int) -> Pair:
        return Pair(int(row["idx"]), str(row["premise"]), str(row["hypothesis"]), str(row["label"]))

    pairs = _jsonl_pairs(dataset_file("rte", f"{split}.jsonl", data), "RTE", RTE_LABELS, read)
    return pairs[:limit] if limit else pairs


def load_wice(data: str | Path | None = None, split: str = "test", limit: int | None = None) -> list[Pair]:
    """WiCE's claims against their cited evidence (its sentences, one a line), binary as LLM-AggreFact
    scores it: supported is entailment, partially supported and not supported are not."""
    if split not in WICE_SPLITS:
        raise ConfigError(f"WiCE has no split {split!r}; available: {', '.join(WICE_SPLITS)}")

    def read(row: dict[str, Any], count: int) -> Pair:
        evidence = "\n".join(str(sentence) for sentence in row["evidence"])
        return Pair(count, evidence, str(row["claim"]), RTE_LABELS[0 if row["label"] == "supported" else 1])

    pairs = _jsonl_pairs(dataset_file("wice", f"{split}.jsonl", data), "WiCE", WICE_LABELS, read)
    return pairs[:limit] if limit else pairs


def qnli_parts(pairs: Sequence[tuple[str, str]]) -> list[str]:
    """Which part of QNLI each (question, sentence) pair is in. Questions that share a sentence, and so
    every pair of each, go to one part (QNLI asks several questions of one sentence: split by question
    alone, 473 of 1,110 test pairs had a sentence the fit part held): the groups are the connected parts
    of the question-sentence graph, each placed by the hash of its first question (about a fifth tested)."""
    parent: dict[str, str] = {}

    def root(node: str) -> str:
        while parent.setdefault(node, node) != node:
            parent[node] = parent[parent[node]]
            node = parent[node]
        return node

    for question, sentence in pairs:
        a, b = root("q:" + question), root("s:" + sentence)
        if a != b:
            parent[max(a, b)] = min(a, b)
    first: dict[str, str] = {}
    for question, _ in pairs:
        first.setdefault(root("q:" + question), question)
    return [_hashed_part(first[root("q:" + question)]) for question, _ in pairs]


def _hashed_part(question: str) -> str:
    return "test" if int(hashlib.sha256(question.encode()).hexdigest()[:8], 16) % QNLI_TEST_EVERY == 0 else "fit"


def load_qnli_pairs(data: str | Path | None = None, limit: int | None = None, part: str = "test") -> list[Pair]:
    """QNLI's pairs of one part (its dev file, GLUE's): the Wikipedia sentence is the premise, the question
    the hypothesis, entailment where the sentence holds the question's answer."""
    if part not in QNLI_PARTS:
        raise ConfigError(f"QNLI's parts are {', '.join(QNLI_PARTS)}, got {part!r}")
    path = dataset_file("qnli", "dev.tsv", data)
    with path.open(encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))
    if not rows or not {"index", "question", "sentence", "label"} <= set(rows[0]):
        raise DataError(f"{path}: expected the columns index, question, sentence, label")
    parts = qnli_parts([(row["question"], row["sentence"]) for row in rows])
    pairs = [
        Pair(int(row["index"]), row["sentence"], row["question"], row["label"])
        for row, found in zip(rows, parts, strict=True)
        if found == part
    ]
    if bad := [p for p in pairs if p.label not in RTE_LABELS]:
        raise DataError(f"{path}, index {bad[0].index}: label {bad[0].label!r} is not one of {', '.join(RTE_LABELS)}")
    return pairs[:limit] if limit else pairs


def rte_metrics(labels: Sequence[str], scores: Sequence[float], weights: np.ndarray) -> dict[str, np.ndarray]:
    """AUC-ROC, AUC-PR and, at the judge's own decision, accuracy, balanced accuracy, precision, recall and
    F1 (x100), for each row of item weights."""
    y = np.array([label in UNSUPPORTED for label in labels])
    s = np.array(scores, dtype=np.float64)
    decided = {k: v * 100 for k, v in decisions_resampled(y, s >= DECISION, weights).items()}
    return {
        "auc_roc": auc_roc_resampled(y, s, weights) * 100,
        "auc_pr": auc_pr_resampled(y, s, weights) * 100,
        **decided,
        "random_auc_pr": mean_resampled(y.astype(np.float64), weights) * 100,
    }


def pairs_resampled(records: list[dict[str, Any]], counts: np.ndarray) -> dict[str, np.ndarray]:
    """A pair bench's metrics on each resample of its pairs."""
    return rte_metrics([r["labels"][0] for r in records], [r["scores"]["hypothesis"] for r in records], counts)


def summarise_pairs(records: list[dict[str, Any]]) -> dict[str, Any]:
    """A pair bench's metrics on its pairs, with how many there are and how many are not entailed."""
    metrics: dict[str, Any] = unresampled(partial(pairs_resampled, records), len(records))
    metrics["n_pairs"] = len(records)
    metrics["n_unsupported"] = sum(r["labels"][0] in UNSUPPORTED for r in records)
    return metrics


def rte_plan(
    name: str,
    pairs: list[Pair],
    options: Mapping[str, Any],
    gateway: Gateway | None,
    split: str = "val",
    dataset: str = "rte",
) -> Plan:
    """One method over the pairs: each hypothesis one unit, checked against its premise."""
    method = registry.get(name)
    stats = CallStats()
    ctx = start(gateway, stats)
    chosen = {k: v for k, v in options.items() if k in method.option_names and v is not None}
    score_pair = method.scorer(method.options(**chosen), ctx)

    def score(pair: Pair) -> dict[str, Any]:
        given = {"sentences": [pair.hypothesis], method.context_field: [pair.premise]}
        result = score_pair(method.inputs(**given))
        unit = result.units[0]
        return {
            "index": pair.index,
            "texts": [pair.hypothesis],
            "labels": [pair.label],
            "spans": unit_spans(result)[:1],
            "events": dict(result.meta.events),
            "evidence": unit.evidence.get("answers"),
            "scores": {"hypothesis": unit.score},
        }

    model = chosen.get(method.model_field)
    return Plan(
        bench=f"grounded-{dataset}",
        method=name,
        what="pair",
        items=pairs,
        item_id=lambda p: f"pair {p.index}",
        score=score,
        summarise=summarise_pairs,
        resampled=pairs_resampled,
        params={
            "dataset": dataset,
            "split": split,
            **({"qnli_parts": QNLI_SPLIT} if dataset == "qnli" else {}),
            "method": name,
            "model": model_name(model) if model is not None else None,
            "options": {k: v for k, v in chosen.items() if k != method.model_field},
            "protocol": RTE_PROTOCOL,
        },
        report=lambda result, out, failed: None,  # one report for all methods: write_report
        stats=stats,
        counts_calls=True,
        planned_calls=lambda pair: 1,
        per_score={"texts": "text", "labels": "label", "spans": "spans"},
        positive=UNSUPPORTED,
    )


RTE_COLUMNS = (
    ("method", "method"),
    ("auc_roc", "AUC-ROC"),
    ("auc_pr", "AUC-PR (not entailed)"),
    ("accuracy", f"accuracy (score >= {DECISION})"),
    ("balanced_accuracy", "balanced accuracy"),
    ("precision", "precision"),
    ("recall", "recall"),
    ("f1", "F1"),
    ("n_pairs", "pairs"),
)


def write_report(results: Sequence[BenchResult], out: Path) -> None:
    """report.md: the WikiBio protocol's, or RTE's table of methods with their PR and ROC curves
    (pr.png, roc.png, and curves.json for report.html)."""
    if results and results[0].bench == "wikibio":
        wikibio.write_report(results, out)
        return
    rows = [{"method": r.params["method"], **r.metrics} for r in results]
    m = results[0].metrics if results else {}
    split = results[0].params.get("split", "val") if results else "val"
    name = str(results[0].params.get("dataset", "rte")).upper() if results else "RTE"
    for kind, title in (("pr", "precision-recall"), ("roc", "ROC")):
        curves = [
            Curve(
                r.params["method"],
                np.array([item.record["labels"][0] in UNSUPPORTED for item in r.items], dtype=int),
                np.array([item.scores["hypothesis"] for item in r.items], dtype=np.float64),
                r.intervals.get(f"auc_{kind}"),
            )
            for r in results
            if r.items
        ]
        if curves:
            write_curves(out / f"{kind}.png", curves, kind, f"{name} {split}: not entailed, {title}")
    write_text(
        out / "report.md",
        f"# Grounded checking on {name}\n\n{m.get('n_pairs')} {split} pairs, {m.get('n_unsupported')} not entailed "
        f"(random AUC-PR {m.get('random_auc_pr') or 0:.2f}).\nProtocol: {RTE_PROTOCOL}.\n\n"
        f"{markdown_table(rows, RTE_COLUMNS)}\n\n![PR](pr.png) ![ROC](roc.png)\n",
    )


def describe(results: Sequence[BenchResult]) -> str:
    if results and results[0].bench == "wikibio":
        return wikibio.describe(results)
    name = str(results[0].params.get("dataset", "rte")).upper() if results else "RTE"
    lines = [f"{name}: {results[0].metrics.get('n_pairs')} pairs" if results else "RTE: no pairs"]
    for r in results:
        lines.append(f"{r.params['method']}: {r.meta.cost()}")
        if r.failures:
            lines.append(f"  {len(r.failures)} pairs failed (left out of the metrics; results.json has the reasons)")
        values = [(h, r.metrics.get(k)) for k, h in RTE_COLUMNS[1:-1]]
        lines.append("  " + "  ".join(f"{h} {'n/a' if v is None else f'{v:.2f}'}" for h, v in values))
    return "\n".join(lines)


def grounded_plans(
    dataset: str,
    methods: Sequence[str],
    data: str | Path | None = None,
    limit: int | None = None,
    model: Any = None,
    gateway: Gateway | None = None,
    options: Mapping[str, Any] | None = None,
    split: str = "val",
) -> list[Plan]:
    """One plan per grounded method on RTE's pairs (``split``: val or train), QNLI's test part (the pairs
    a checker is never fitted on) or WikiBio's passages."""
    unknown = [m for m in methods if m not in grounded_methods()]
    if unknown:
        raise ConfigError(f"not a grounded method: {', '.join(unknown)}; available: {', '.join(grounded_methods())}")
    if dataset == "wikibio":
        return wikibio.wikibio_plans(methods, data, limit, None, model, gateway, options=options)
    if dataset not in ("rte", "qnli", "wice"):
        raise ConfigError(f"unknown grounded dataset {dataset!r}; available: {', '.join(DATASETS)}")
    pairs = {
        "rte": lambda: load_rte(data, limit, split),
        "qnli": lambda: load_qnli_pairs(data, limit, "test"),
        "wice": lambda: load_wice(data, "test", limit),
    }[dataset]()
    chosen = {**(options or {}), **({"model": model} if model is not None else {})}
    return [rte_plan(m, pairs, chosen, gateway, split if dataset == "rte" else "test", dataset) for m in methods]


@dataclass(frozen=True, kw_only=True)
class GroundedSettings(Settings):
    dataset: str = option(
        REQUIRED,
        "rte: 277 labelled pairs; qnli: its test part (a fifth of its questions); wice: its 1,070 test claims; "
        "wikibio: 1,908 sentences",
        "--dataset",
        choices=DATASETS,
    )
    method: tuple[str, ...] = listed(("grounded",), "methods that check a text against documents", "--method")
    model: str | None = option(
        None, "the judge: a model spec, or nli:PATH (nli:NAME once pulled; default: the default local model)", "--model"
    )
    limit: int | None = option(None, "only the first K pairs or passages", "--limit", type=int)
    split: str = option(
        "val",
        "RTE's pairs: val (277, the reported split) or train (2,490: where a threshold is fitted)",
        "--split",
        choices=RTE_SPLITS,
    )


def _plans(settings: GroundedSettings, gateway: Callable[[], Gateway]) -> list[Plan]:
    if settings.split != "val" and settings.dataset != "rte":
        raise ConfigError(
            "split chooses RTE's pairs; QNLI and WiCE are tested on their test parts, WikiBio on its passages",
            settings=("split",),
        )
    return grounded_plans(
        settings.dataset,
        settings.method,
        settings.data,
        settings.limit,
        settings.model,
        gateway(),
        settings.method_options,
        split=settings.split,
    )


BENCHMARK = Benchmark(
    name="grounded",
    help="grounded checking against human labels (RTE pairs; WikiBio sentences against their Wikipedia text)",
    description="Each text checked against the documents given with it, scored against human labels.",
    settings=GroundedSettings,
    fields_of=(registry.get("grounded"), FLAGS),
    plans=_plans,
    describe=lambda results, _settings: describe(results),
    finish=write_report,
    by_method=True,
)
