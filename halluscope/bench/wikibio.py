"""The WikiBio GPT-3 hallucination benchmark and its protocol (SelfCheckGPT; the FIBE paper).

Sentence-level scores (higher = more likely hallucinated) pooled over all passages:
- NonFact: positive = major or minor inaccurate;
- NonFact*: passages not wholly major-inaccurate only; positive = major inaccurate;
- Factual: positive = accurate, scores negated;
AUC-PR = sklearn precision_recall_curve then auc(recall, precision), x100; AUC-ROC likewise.
Passage level: Pearson and Spearman between the mean sentence score and the mean human label
(accurate 0, minor 0.5, major 1), x100.
"""

from __future__ import annotations

import hashlib
import json
import re
import typing
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from halluscope.backends.entailment import Entailment, entailment_judge
from halluscope.backends.gateway import CallStats
from halluscope.backends.models import model_name
from halluscope.bench.benchmark import REQUIRED, Benchmark, Settings, listed, option
from halluscope.bench.datasets import dataset_file
from halluscope.bench.failures import failure_paragraph
from halluscope.bench.runner import BenchResult, Plan, run, unit_spans
from halluscope.calibration import fitted_score
from halluscope.errors import ConfigError, DataError, unknown
from halluscope.metrics import (
    auc_pr_resampled,
    auc_roc_resampled,
    mean_resampled,
    pearson_resampled,
    spearman_resampled,
    unresampled,
)
from halluscope.prompts import short_answer
from halluscope.results import DetectionResult
from halluscope.runtime import registry
from halluscope.runtime.contract import Method, start

DATASET = "wikibio_gpt3_hallucination"
FILE = "wikibio_gpt3_hallucination.json"
SHA256 = "82ed0733fde4f8f550b279a111b05f637a9997ebe8091df36051a478a4cd76f9"
LABEL_VALUE = {"accurate": 0.0, "minor_inaccurate": 0.5, "major_inaccurate": 1.0}
NONFACT = ("minor_inaccurate", "major_inaccurate")  # the protocol's positive class: not accurate


@dataclass(frozen=True)
class Passage:
    index: int
    concept: str
    text: str
    sentences: list[str]
    labels: list[str]
    samples: list[str]
    wiki_text: str

    @property
    def prompt(self) -> str:
        """The prompt GPT-3 answered (SelfCheckGPT's data card)."""
        return f"This is a Wikipedia passage about {self.concept}:"


def concept_of(wiki_text: str, gpt3_text: str) -> str:
    """The person's name: the first words of the Wikipedia paragraph, up to a parenthesis, a comma or
    the first verb ('is', 'was', ...), as the protocol takes it from the first words of the texts."""
    for text in (wiki_text, gpt3_text):
        m = re.match(r"\s*(.+?)\s*(?:\(|,| is | was | were | are | has | had )", text)
        if m and 0 < len(m.group(1).split()) <= 8:
            return m.group(1).strip()
    return " ".join(gpt3_text.split()[:2])


def load_wikibio(data: str | Path | None = None, verify: bool = True) -> list[Passage]:
    path = dataset_file(DATASET, FILE, data)
    raw = path.read_bytes()
    if verify and hashlib.sha256(raw).hexdigest() != SHA256:
        raise DataError(f"{path} is not the file SOURCE.md describes (sha256 differs)")
    rows = json.loads(raw)
    passages = []
    for i, row in enumerate(rows):
        if len(row["gpt3_sentences"]) != len(row["annotation"]):
            raise DataError(
                f"{path}: passage {i} has {len(row['gpt3_sentences'])} sentences but {len(row['annotation'])} labels"
            )
        passages.append(
            Passage(
                index=i,
                concept=concept_of(row["wiki_bio_text"], row["gpt3_text"]),
                text=row["gpt3_text"],
                sentences=list(row["gpt3_sentences"]),
                labels=list(row["annotation"]),
                samples=list(row["gpt3_text_samples"]),
                wiki_text=row["wiki_bio_text"],
            )
        )
    return passages


def finite_scores(scores: np.ndarray) -> np.ndarray:
    """Infinite scores (an unseen unigram) rank above every finite one; sklearn needs finite numbers."""
    finite = scores[np.isfinite(scores)]
    top = finite.max() if finite.size else 0.0
    bottom = finite.min() if finite.size else 0.0
    return np.nan_to_num(scores, posinf=top + 1.0, neginf=bottom - 1.0)


def nonfact_star_mask(passage_labels: Sequence[Sequence[str]]) -> np.ndarray:
    """Which pooled sentences NonFact* keeps: those of passages not wholly major-inaccurate."""
    return np.concatenate(
        [np.full(len(labels), not all(lab == "major_inaccurate" for lab in labels)) for labels in passage_labels]
    )


def protocol_metrics(passages: Sequence[Passage], scores: Sequence[Sequence[float]]) -> dict[str, Any]:
    """The benchmark's numbers for per-sentence scores of the given passages (one list per passage)."""
    if len(passages) != len(scores):
        raise ValueError(f"{len(scores)} score lists for {len(passages)} passages")
    for p, s in zip(passages, scores, strict=True):
        if len(s) != len(p.sentences):
            raise ValueError(f"passage {p.index}: {len(s)} scores for {len(p.sentences)} sentences")
    protocol = Protocol([p.labels for p in passages], scores)
    metrics: dict[str, Any] = unresampled(protocol.metrics, len(passages))
    metrics["n_passages"] = len(passages)
    metrics["n_sentences"] = int(protocol.nonfact.size)
    return metrics


class Protocol:
    """The protocol's metrics of passages' labels and sentence scores, for rows of passage weights: one
    row of ones is the benchmark's number, the rows of a bootstrap (how often each passage was drawn)
    are its resamples, all computed at once. AUCs equal scikit-learn's and correlations scipy's to 1e-12
    (tests/test_metrics.py)."""

    def __init__(self, labels: Sequence[Sequence[str]], scores: Sequence[Sequence[float]]) -> None:
        pooled_labels = np.array([lab for passage in labels for lab in passage])
        self.unit_passage = np.repeat(np.arange(len(labels)), [len(passage) for passage in labels])
        self.pooled = finite_scores(np.array([x for s in scores for x in s], dtype=np.float64))
        self.nonfact = pooled_labels != "accurate"
        self.major = pooled_labels == "major_inaccurate"
        self.star_keep = nonfact_star_mask(labels)
        self.predicted = np.array([np.mean(finite_scores(np.array(s, dtype=np.float64))) for s in scores])
        self.human = np.array([np.mean([LABEL_VALUE[lab] for lab in passage]) for passage in labels])

    def metrics(self, weights: np.ndarray) -> dict[str, np.ndarray]:
        """Each metric for each row of ``weights`` (rows x passages), x100; NaN where undefined."""
        units = weights[:, self.unit_passage]
        star, keep = units[:, self.star_keep], self.star_keep
        out = {
            "auc_pr_nonfact": auc_pr_resampled(self.nonfact, self.pooled, units) * 100,
            "auc_pr_nonfact_star": auc_pr_resampled(self.major[keep], self.pooled[keep], star) * 100,
            "auc_pr_factual": auc_pr_resampled(~self.nonfact, -self.pooled, units) * 100,
            "auc_roc_nonfact": auc_roc_resampled(self.nonfact, self.pooled, units) * 100,
            "auc_roc_nonfact_star": auc_roc_resampled(self.major[keep], self.pooled[keep], star) * 100,
            "random_auc_pr_nonfact": mean_resampled(self.nonfact.astype(np.float64), units) * 100,
            "random_auc_pr_factual": mean_resampled((~self.nonfact).astype(np.float64), units) * 100,
        }
        if len(self.human) >= 3:
            out["pearson"] = pearson_resampled(self.predicted, self.human, weights) * 100
            out["spearman"] = spearman_resampled(self.predicted, self.human, weights) * 100
        return out


# ---------------------------------------------------------------- the benchmark command

METRIC_COLUMNS = (
    ("method", "method"),
    ("auc_pr_nonfact", "NonFact AUC-PR"),
    ("auc_pr_nonfact_star", "NonFact* AUC-PR"),
    ("auc_pr_factual", "Factual AUC-PR"),
    ("auc_roc_nonfact", "NonFact AUC-ROC"),
    ("auc_roc_nonfact_star", "NonFact* AUC-ROC"),
    ("pearson", "Pearson"),
    ("spearman", "Spearman"),
)


PROTOCOL = "SelfCheckGPT/FIBE WikiBio: sentence AUC-PR/ROC x100, passage Pearson/Spearman x100"
DATASET_SAMPLES = 20  # GPT-3 samples per passage in the dataset


def bench_methods() -> tuple[str, ...]:
    """What the benchmark runs: every method that scores a text's sentences, and their presets
    ('selfcheck-prompt:prob'), as the registry finds them."""
    return registry.sentence_methods()


def _needs_model(method: Method) -> bool:
    return method.model_field is not None and method.needs_input(method.model_field)


def wikibio_plans(
    methods: Sequence[str],
    data: str | Path | None = None,
    limit: int | None = None,
    n: int | None = None,
    model: Any = None,
    gateway: Any = None,
    judge: Any = None,
    only: Collection[int] | None = None,
    options: Mapping[str, Any] | None = None,
) -> list[Plan]:
    """One plan per method over the same passages (FIBE variants share their calls through the cache);
    ``n``: the dataset's samples each passage gives a method that reads samples, and each method's own
    sample count (default: the dataset's 20, or a method's largest, as FIBE's 10 students);
    ``only`` keeps the passages with these indexes (calibration's fit and test splits); ``options``:
    more method options, each given to the methods that declare it (grounded's ``top_k``)."""
    missing = [m for m in methods if m not in bench_methods()]
    if missing:
        raise ConfigError(unknown("bench method", missing[0], bench_methods()))
    if n is not None and not 1 <= n <= DATASET_SAMPLES:
        raise ConfigError(
            f"n must be between 1 and 20 (the dataset has 20 samples a passage), got {n}", settings=("n",)
        )
    specs = {m: registry.get(registry.configured(m)[0]) for m in methods}
    needs_model = [m for m in methods if _needs_model(specs[m])]
    if needs_model and model is None:
        raise ConfigError(
            f"{', '.join(needs_model)} needs a model (model=SPEC, e.g. local:qwen2.5-coder-1.5b)", settings=("model=",)
        )
    passages = load_wikibio(data)[:limit] if limit else load_wikibio(data)
    if only is not None:
        missing = sorted(set(only) - {p.index for p in passages})
        if missing:
            raise ConfigError(f"WikiBio has {len(passages)} passages; there is no passage {missing[0]}")
        passages = [p for p in passages if p.index in only]
    selection = sorted(only) if only is not None else None
    extra = dict(options or {})
    return [_plan(m, specs[m], passages, n, model, gateway, judge, limit, selection, extra) for m in methods]


def _options(
    name: str, method: Method, n: int | None, model: Any, judge: Any, extra: Mapping[str, Any]
) -> tuple[dict[str, Any], int, bool]:
    """A method's options on WikiBio (its preset's, the run's), the samples each passage is checked
    against, and whether it calls the model."""
    options = {**registry.configured(name)[1], **{k: v for k, v in extra.items() if k in method.option_names}}
    most = method.most("n") or DATASET_SAMPLES
    samples = min(n or DATASET_SAMPLES, most) if "n" in method.option_names else (n or DATASET_SAMPLES)
    if n is not None and n > most:
        raise ConfigError(f"{name} takes n from 1 to {most}, got {n}", settings=("n",))
    if "n" in method.option_names:
        options["n"] = samples
    uses_model = _needs_model(method) or (model is not None and "samples" not in method.input_names)
    if uses_model:
        options[method.model_field] = [model] if method.takes_list(method.model_field) else model
    if "judge" in method.option_names and judge is not None:
        options["judge"] = judge
    return options, samples, uses_model


def _plan(
    name: str,
    method: Method,
    passages: list[Passage],
    n: int | None,
    model: Any,
    gateway: Any,
    judge: Any,
    limit: int | None,
    selection: list[int] | None,
    extra: Mapping[str, Any],
) -> Plan:
    """The method through its contract, each passage an item: its text and sentences, its prompt where
    the method reads one, the dataset's samples where it reads samples, the passage's own Wikipedia text
    where it reads the documents an answer should rest on (a grounded method). ``model`` goes to a
    method that needs one, and to one whose model would otherwise default (a grounded judge), but not
    where the dataset's samples stand in for the model's (SelfCheck-Unigram, -NLI)."""
    options, samples, uses_model = _options(name, method, n, model, judge, extra)
    stats = CallStats()
    ctx = start(gateway, stats)
    if "judge" in method.option_names and judge is None and Entailment in typing.get_args(method.hints["judge"]):
        judge = entailment_judge(None, ctx.gateway, prompt=short_answer.ENTAILMENT)
        options["judge"] = judge  # one judge for every passage (and the params)
    scorer = method.scorer(method.options(**options), ctx)

    passages_by_index = {p.index: p for p in passages}
    params = {
        "dataset": DATASET,
        "method": name,
        "model": model_name(model) if uses_model and model is not None else None,
        "judge": getattr(options.get("judge"), "name", None),
        "n": samples,
        "limit": limit,
        "passages": selection,
        "options": {k: v for k, v in extra.items() if k in method.option_names},  # e.g. grounded's top_k
        "protocol": PROTOCOL,
    }
    return Plan(
        bench="wikibio",
        method=name,
        what="passage",
        items=passages,
        item_id=lambda p: f"passage {p.index}",
        score=partial(score_passage, method, scorer, samples),
        summarise=partial(passage_metrics, passages_by_index),
        resampled=partial(resampled_metrics, passages_by_index),
        params=params,
        report=lambda result, out, failed: None,  # one report for all methods: write_report
        stats=stats,
        counts_calls=uses_model,
        per_score={"sentences": "sentence", "labels": "label", "spans": "spans"},
        positive=NONFACT,
    )


def score_passage(
    method: Method, scorer: Callable[[Any], DetectionResult], samples: int, passage: Passage
) -> dict[str, Any]:
    """One passage through the method: its text, sentences and prompt, the dataset's first ``samples``
    samples where it reads samples, the Wikipedia text where it reads documents; each sentence scored."""
    given = {"text": passage.text, "sentences": passage.sentences, method.question_field: passage.prompt}
    if "samples" in method.input_names:
        given["samples"] = passage.samples[:samples]
    if method.context_field is not None:
        given[method.context_field] = passage.wiki_text
    result = scorer(method.inputs(**{k: v for k, v in given.items() if k in method.input_names}))
    sentence_scores = [fitted_score(u) for u in result.units]  # the sentences given, each scored
    return {
        "index": passage.index,
        "sentences": passage.sentences,  # beside each score and label: results.json reads on its own
        "labels": passage.labels,
        "spans": unit_spans(result),
        "events": dict(result.meta.events),
        "scores": {f"sentence {s}": stored_score(x) for s, x in enumerate(sentence_scores)},
    }


def passage_metrics(passages: Mapping[int, Passage], records: list[dict[str, Any]]) -> dict[str, Any]:
    """The protocol's metrics of the passages scored."""
    return protocol_metrics([passages[r["index"]] for r in records], [score_list(r["scores"]) for r in records])


def resampled_metrics(
    passages: Mapping[int, Passage], records: list[dict[str, Any]], counts: np.ndarray
) -> dict[str, np.ndarray]:
    """The protocol's metrics on each bootstrap resample of the passages (``counts``: one row a resample)."""
    scores = [score_list(r["scores"]) for r in records]
    return Protocol([passages[r["index"]].labels for r in records], scores).metrics(counts)


def stored_score(score: float | None) -> float | None:
    """A record's score: an unseen unigram (+inf) is kept as None, as JSON has no infinity."""
    return None if score is None or not np.isfinite(score) else float(score)


def score_list(scores: Mapping[str, float | None]) -> list[float]:
    """A record's unit scores in order, an unseen unigram (None) back to +inf (the riskiest)."""
    return [float("inf") if x is None else x for x in scores.values()]


def sentence_scores(result: BenchResult) -> list[list[float]]:
    """Every scored passage's sentence scores, in order (+inf for an unseen unigram)."""
    return [score_list(item.scores) for item in result.items]


def run_bench(
    methods: Sequence[str],
    out: str | Path,
    data: str | Path | None = None,
    limit: int | None = None,
    n: int | None = None,
    progress: bool = True,
    model: Any = None,
    gateway: Any = None,
    judge: Any = None,
    only: Collection[int] | None = None,
) -> list[BenchResult]:
    """Score the passages with each method (OUT/METHOD/results.json each), then write the shared
    report.md and PR/ROC PNGs."""
    out_dir = Path(out)
    plans = wikibio_plans(methods, data, limit, n, model, gateway, judge, only)
    fingerprint = gateway.prompt_fingerprint() if gateway is not None else ""
    results = [run(plan, out_dir / plan.method, progress, fingerprint=fingerprint) for plan in plans]
    write_report(results, out_dir)
    return results


def write_report(results: Sequence[BenchResult], out_dir: Path) -> None:
    """report.md with a row per method, and the pooled PR and ROC curves of every method."""
    from halluscope.bench.report import Curve, markdown_table, write_curves, write_text

    # pr_nonfact, roc_nonfact, pr_nonfact_star, roc_nonfact_star: one curve per method each
    curves: dict[str, list[Curve]] = {f"{k}_{s}": [] for s in ("nonfact", "nonfact_star") for k in ("pr", "roc")}
    failed = []
    for result in results:
        method = result.params["method"]
        labels = np.array([lab for r in result.records for lab in r["labels"]])
        pooled = finite_scores(np.array([x for s in sentence_scores(result) for x in s], dtype=np.float64))
        keep = nonfact_star_mask([r["labels"] for r in result.records])
        for subset, y, scores in (
            ("nonfact", labels != "accurate", pooled),
            ("nonfact_star", labels[keep] == "major_inaccurate", pooled[keep]),
        ):
            for kind in ("pr", "roc"):  # each curve's interval is the run's (results.json), not drawn again
                interval = result.intervals.get(f"auc_{kind}_{subset}")
                curves[f"{kind}_{subset}"].append(Curve(method, y, scores, interval))
        failed.append(failure_paragraph(result.failures, len(result.items), f"{method}: passages"))
    m = results[0].metrics
    size = f"{m['n_passages']} passages, {m['n_sentences']} sentences"
    star_size = f"{int(curves['pr_nonfact_star'][0].y.size)} sentences" if results else ""
    titles = {"nonfact": f"WikiBio NonFact, {size}", "nonfact_star": f"WikiBio NonFact*, {star_size}"}
    for name, drawn in curves.items():
        kind, subset = name.split("_", 1)
        write_curves(out_dir / f"{name}.png", drawn, kind, titles[subset])
    table = markdown_table([{"method": r.params["method"], **r.metrics} for r in results], METRIC_COLUMNS)
    random_line = (
        f"Random AUC-PR on this data: NonFact {m['random_auc_pr_nonfact']:.2f}, "
        f"Factual {m['random_auc_pr_factual']:.2f}."
    )
    write_text(
        out_dir / "report.md",
        f"# WikiBio GPT-3 hallucination benchmark\n\n{size}; {results[0].params['n']} samples per passage.\n"
        f"Protocol: SelfCheckGPT/FIBE (sentence-level AUC-PR and AUC-ROC x100 pooled over passages; "
        f"passage-level Pearson and Spearman x100).\n\n{table}\n\n{random_line}\n"
        + "".join(failed)
        + "\n![PR](pr_nonfact.png) ![ROC](roc_nonfact.png)\n",
    )


def describe(results: Sequence[BenchResult]) -> str:
    """The lines `halluscope bench wikibio` prints."""
    m = results[0].metrics
    lines = [f"WikiBio: {m['n_passages']} passages, {m['n_sentences']} sentences"]
    for r in results:
        lines.append(f"{r.params['method']}: {r.meta.cost()}")
        if r.failures:
            lines.append(f"  {len(r.failures)} passages failed (left out of the metrics; results.json has the reasons)")
        values = [(h, r.metrics.get(k)) for k, h in METRIC_COLUMNS[1:]]
        lines.append("  " + "  ".join(f"{h} {'n/a' if v is None else f'{v:.2f}'}" for h, v in values))
    return "\n".join(lines)


@dataclass(frozen=True, kw_only=True)
class WikiBioSettings(Settings):
    method: tuple[str, ...] = listed(REQUIRED, "methods that score a text's sentences, and their presets", "--method")
    model: str | None = option(None, "model spec for model-based methods, e.g. local:qwen2.5-coder-1.5b", "--model")
    limit: int | None = option(None, "only the first K passages", "--limit", type=int)
    n: int | None = option(
        None,
        "N: the dataset's samples a method reads (of 20) and each method's own n, as FIBE's exam answers "
        "(default 20, or a method's largest: FIBE's 10 students)",
        "--samples",
        type=int,
    )


def _plans(settings: WikiBioSettings, gateway: Callable[[], Any]) -> list[Plan]:
    gw = gateway()
    judge = settings.method_options.get("judge")
    judged = entailment_judge(judge, gw, prompt=short_answer.ENTAILMENT) if judge else None
    return wikibio_plans(settings.method, settings.data, settings.limit, settings.n, settings.model, gw, judged)


BENCHMARK = Benchmark(
    name="wikibio",
    help="WikiBio GPT-3 hallucination (SelfCheckGPT/FIBE protocol)",
    description="Sentence scores of the 238 GPT-3 passages against their human labels, per method.",
    settings=WikiBioSettings,
    fields_of=(registry.get("semantic-entropy-paragraph"), ("judge",)),
    plans=_plans,
    describe=lambda results, _settings: describe(results),
    finish=write_report,
    by_method=True,
)
