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

import argparse
import hashlib
import json
import re
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from halluscope.backends.entailment import entailment_judge
from halluscope.backends.gateway import CallStats, model_name
from halluscope.bench.arguments import Benchmark, judge_options
from halluscope.bench.datasets import dataset_file
from halluscope.bench.failures import failure_paragraph
from halluscope.bench.runner import BenchResult, Plan, run
from halluscope.cli.flags import ListFlag
from halluscope.errors import ConfigError, DataError
from halluscope.graphs import direct_question, fibe, selfcheck_prompt, semantic_entropy_paragraph
from halluscope.metrics import (
    auc_pr_resampled,
    auc_roc_resampled,
    mean_resampled,
    pearson_resampled,
    spearman_resampled,
)
from halluscope.results import DetectionResult

DATASET = "wikibio_gpt3_hallucination"
FILE = "wikibio_gpt3_hallucination.json"
SHA256 = "82ed0733fde4f8f550b279a111b05f637a9997ebe8091df36051a478a4cd76f9"
LABEL_VALUE = {"accurate": 0.0, "minor_inaccurate": 0.5, "major_inaccurate": 1.0}


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
    values = protocol.metrics(np.ones((1, len(passages))))
    metrics: dict[str, Any] = {name: float(v[0]) if np.isfinite(v[0]) else None for name, v in values.items()}
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


@dataclass
class BenchRun:
    """What one method's bench run shares across its passages: the samples used, the model, the
    judge, the gateway and the call accounting."""

    samples: int
    model: Any
    gateway: Any
    stats: CallStats
    judge: Any = None  # entailment judge of semantic entropy


Scored = tuple[list[float], dict[str, int]]  # a passage's sentence scores and the bad answers handled


def _unigram(passage: Passage, run: BenchRun) -> Scored:
    from halluscope.scoring import unigram_scores
    from halluscope.text import passage_tokens, tokens

    scored = unigram_scores(passage.sentences, passage.text, passage.samples[: run.samples], tokens, passage_tokens)
    return [u.max_neg_logprob for u in scored], {}


def _sentence_scores(result: DetectionResult) -> Scored:
    return [float(u.score) for u in result.units if u.score is not None], dict(result.meta.events)


def _selfcheck_prompt(passage: Passage, run: BenchRun, scoring: selfcheck_prompt.Scoring = "discrete") -> Scored:
    result = selfcheck_prompt.detect(
        sentences=passage.sentences,
        samples=passage.samples[: run.samples],
        model=run.model,
        scoring=scoring,
        gateway=run.gateway,
        stats=run.stats,
    )
    return _sentence_scores(result)  # SCGP scores every sentence


def _direct_question(passage: Passage, run: BenchRun) -> Scored:
    """E.4 of every sentence, the passage's prompt as context (FIBE's +dq variants ask the same)."""
    result = direct_question.detect(
        sentences=passage.sentences, prompt=passage.prompt, model=run.model, gateway=run.gateway, stats=run.stats
    )
    return _sentence_scores(result)


def _fibe(variant: str) -> Callable[[Passage, BenchRun], Scored]:
    """A FIBE variant with N = --samples exam answers; its SCGP part judges the dataset's samples."""

    def score(passage: Passage, run: BenchRun) -> Scored:
        samples = {"samples": passage.samples[: run.samples]} if fibe.VARIANTS[variant].selfcheck else {}
        result = fibe.detect(
            sentences=passage.sentences,
            prompt=passage.prompt,
            model=run.model,
            variant=variant,
            n=run.samples,
            gateway=run.gateway,
            stats=run.stats,
            **samples,
        )
        return _sentence_scores(result)  # FIBE scores every sentence

    return score


def _semantic_entropy_paragraph(passage: Passage, run: BenchRun) -> Scored:
    """Claims of the GPT-3 passage scored by the model, mapped back to the annotated sentences."""
    result = semantic_entropy_paragraph.detect(
        passage.text,
        question=passage.prompt,
        sentences=passage.sentences,
        model=run.model,
        judge=run.judge,
        gateway=run.gateway,
        stats=run.stats,
    )
    return _sentence_scores(result)  # every sentence holds a claim


def _planned_fibe_calls(variant: str, passage: Passage, n: int) -> int:
    return fibe.planned_calls(variant, n, len(passage.sentences))


@dataclass(frozen=True)
class BenchMethod:
    score: Callable[[Passage, BenchRun], Scored]
    calls: Callable[[Passage, int], int] | None = None  # model calls a passage takes, where known up front
    uses_model: bool = True


def _bench_methods() -> dict[str, BenchMethod]:
    methods = {
        "selfcheck-unigram": BenchMethod(_unigram, uses_model=False),
        "selfcheck-prompt": BenchMethod(_selfcheck_prompt, lambda p, n: n * len(p.sentences)),
        # our option: continuous scores from the checks' log-probs (the same calls, cached apart)
        "selfcheck-prompt:prob": BenchMethod(
            partial(_selfcheck_prompt, scoring="prob"), lambda p, n: n * len(p.sentences)
        ),
        "direct-question": BenchMethod(_direct_question, lambda p, n: len(p.sentences)),
        # claims are known only after decomposition: the bar counts calls without a total
        "semantic-entropy-paragraph": BenchMethod(_semantic_entropy_paragraph),
    }
    for v in fibe.VARIANTS:
        methods[v] = BenchMethod(_fibe(v), partial(_planned_fibe_calls, v))
    return methods


# The model-based methods score the dataset's own GPT-3 samples (SCGP), N fresh exam answers (FIBE) or
# the passage's claims with fresh questions and answers (paragraph semantic entropy).
BENCH_METHODS = _bench_methods()
PROTOCOL = "SelfCheckGPT/FIBE WikiBio: sentence AUC-PR/ROC x100, passage Pearson/Spearman x100"


def wikibio_plans(
    methods: Sequence[str],
    data: str | Path | None = None,
    limit: int | None = None,
    samples: int | None = None,
    model: Any = None,
    gateway: Any = None,
    judge: Any = None,
    only: Collection[int] | None = None,
) -> list[Plan]:
    """One plan per method over the same passages (FIBE variants share their calls through the cache);
    ``only`` keeps the passages with these indexes (calibration's fit and test splits)."""
    from halluscope.backends.gateway import default_gateway

    unknown = [m for m in methods if m not in BENCH_METHODS]
    if unknown:
        raise ConfigError(f"unknown bench method(s) {', '.join(unknown)}; available: {', '.join(BENCH_METHODS)}")
    exams = [m for m in methods if m in fibe.VARIANTS]
    if samples is None:  # the dataset's 20, or as many exam answers as FIBE has students
        samples = len(fibe.STUDENTS) if exams else 20
    if not 1 <= samples <= 20:
        raise ConfigError(f"--samples must be between 1 and 20 (the dataset has 20 per passage), got {samples}")
    needs_model = [m for m in methods if BENCH_METHODS[m].uses_model]
    if needs_model and model is None:
        raise ConfigError(f"{', '.join(needs_model)} needs --model (e.g. local:qwen2.5-coder-1.5b)")
    if exams and samples > len(fibe.STUDENTS):
        most = len(fibe.STUDENTS)
        raise ConfigError(f"{', '.join(exams)} answers the exam --samples times: at most {most}, got {samples}")
    passages = load_wikibio(data)[:limit] if limit else load_wikibio(data)
    if only is not None:
        missing = sorted(set(only) - {p.index for p in passages})
        if missing:
            raise ConfigError(f"WikiBio has {len(passages)} passages; there is no passage {missing[0]}")
        passages = [p for p in passages if p.index in only]
    if needs_model:
        gateway = gateway or default_gateway()
    if "semantic-entropy-paragraph" in methods and judge is None:
        judge = entailment_judge(None, gateway)
    selection = sorted(only) if only is not None else None
    return [_plan(method, passages, samples, model, gateway, judge, limit, selection) for method in methods]


def _plan(
    method: str,
    passages: list[Passage],
    samples: int,
    model: Any,
    gateway: Any,
    judge: Any,
    limit: int | None,
    selection: list[int] | None,
) -> Plan:
    spec = BENCH_METHODS[method]
    bench = BenchRun(
        samples, model if spec.uses_model else None, gateway if spec.uses_model else None, CallStats(), judge
    )

    def score(passage: Passage) -> dict[str, Any]:
        sentence_scores, events = spec.score(passage, bench)
        finite = [None if not np.isfinite(x) else float(x) for x in sentence_scores]  # inf: an unseen unigram
        return {
            "index": passage.index,
            "sentences": passage.sentences,  # beside each score and label: results.json reads on its own
            "labels": passage.labels,
            "events": events,
            "scores": {f"sentence {s}": x for s, x in enumerate(finite)},
        }

    def summarise(records: list[dict[str, Any]]) -> dict[str, Any]:
        scored = [passages_by_index[r["index"]] for r in records]
        return protocol_metrics(scored, [_sentence_list(r["scores"]) for r in records])

    def resampled(records: list[dict[str, Any]], counts: np.ndarray) -> dict[str, np.ndarray]:
        scores = [_sentence_list(r["scores"]) for r in records]
        return Protocol([passages_by_index[r["index"]].labels for r in records], scores).metrics(counts)

    passages_by_index = {p.index: p for p in passages}
    params = {
        "dataset": DATASET,
        "method": method,
        "model": model_name(model) if spec.uses_model and model is not None else None,
        "judge": getattr(judge, "name", None) if method == "semantic-entropy-paragraph" else None,
        "samples": samples,
        "limit": limit,
        "passages": selection,
        "protocol": PROTOCOL,
    }
    return Plan(
        bench="wikibio",
        method=method,
        what="passage",
        items=passages,
        item_id=lambda p: f"passage {p.index}",
        score=score,
        summarise=summarise,
        resampled=resampled,
        params=params,
        report=lambda result, out, failed: None,  # one report for all methods: write_report
        stats=bench.stats,
        counts_calls=spec.uses_model,
        planned_calls=(lambda p: spec.calls(p, samples)) if spec.calls else None,  # type: ignore[misc]
    )


def _sentence_list(scores: dict[str, float | None]) -> list[float]:
    """A passage's sentence scores in order, an unseen unigram (None) back to +inf."""
    return [float("inf") if x is None else x for x in scores.values()]


def sentence_scores(result: BenchResult) -> list[list[float]]:
    """Every scored passage's sentence scores, in order (+inf for an unseen unigram)."""
    return [_sentence_list(item.scores) for item in result.items]


def run_bench(
    methods: Sequence[str],
    out: str | Path,
    data: str | Path | None = None,
    limit: int | None = None,
    samples: int | None = None,
    progress: bool = True,
    model: Any = None,
    gateway: Any = None,
    judge: Any = None,
    only: Collection[int] | None = None,
) -> list[BenchResult]:
    """Score the passages with each method (OUT/METHOD/results.json each), then write the shared
    report.md and PR/ROC PNGs."""
    out_dir = Path(out)
    plans = wikibio_plans(methods, data, limit, samples, model, gateway, judge, only)
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
        f"# WikiBio GPT-3 hallucination benchmark\n\n{size}; {results[0].params['samples']} samples per passage.\n"
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


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--method", action=ListFlag, required=True, help="methods: " + ", ".join(BENCH_METHODS))
    p.add_argument("--model", help="model spec for model-based methods, e.g. local:qwen2.5-coder-1.5b")
    judge_options(p, "semantic-entropy-paragraph", strictness=False)
    p.add_argument("--limit", type=int, help="only the first K passages")
    p.add_argument(
        "--samples",
        type=int,
        help="N: the dataset's samples SCGP and unigram use (of 20), and FIBE's exam answers (at most 10) "
        "(default 20, or 10 when a FIBE variant runs)",
    )


def _plans(args: argparse.Namespace, gateway: Callable[[], Any]) -> list[Plan]:
    gw = gateway()
    judge = entailment_judge(args.judge, gw) if args.judge else None
    return wikibio_plans(args.method, args.data, args.limit, args.samples, args.model, gw, judge)


BENCHMARK = Benchmark(
    name="wikibio",
    help="WikiBio GPT-3 hallucination (SelfCheckGPT/FIBE protocol)",
    description="Sentence scores of the 238 GPT-3 passages against their human labels, per method.",
    arguments=_arguments,
    plans=_plans,
    describe=lambda results, _args: describe(results),
    finish=write_report,
    by_method=True,
)
