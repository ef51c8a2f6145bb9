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
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from halluscope.backends.entailment import entailment_judge
from halluscope.bench.datasets import dataset_file
from halluscope.bench.failures import Failures
from halluscope.bench.metrics import auc_pr, auc_roc
from halluscope.errors import ConfigError, DataError
from halluscope.graphs import fibe, selfcheck_prompt, semantic_entropy_paragraph

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


def _finite(scores: np.ndarray) -> np.ndarray:
    """Infinite scores (an unseen unigram) rank above every finite one; sklearn needs finite numbers."""
    finite = scores[np.isfinite(scores)]
    top = finite.max() if finite.size else 0.0
    bottom = finite.min() if finite.size else 0.0
    return np.nan_to_num(scores, posinf=top + 1.0, neginf=bottom - 1.0)


def protocol_metrics(passages: Sequence[Passage], scores: Sequence[Sequence[float]]) -> dict[str, Any]:
    """The benchmark's numbers for per-sentence scores of the given passages (one list per passage)."""
    if len(passages) != len(scores):
        raise ValueError(f"{len(scores)} score lists for {len(passages)} passages")
    for p, s in zip(passages, scores, strict=True):
        if len(s) != len(p.sentences):
            raise ValueError(f"passage {p.index}: {len(s)} scores for {len(p.sentences)} sentences")
    labels = np.array([lab for p in passages for lab in p.labels])
    pooled = _finite(np.array([x for s in scores for x in s], dtype=np.float64))
    nonfact = labels != "accurate"
    star_keep = np.concatenate(
        [np.full(len(p.labels), not all(lab == "major_inaccurate" for lab in p.labels)) for p in passages]
    )
    major = labels == "major_inaccurate"
    metrics: dict[str, Any] = {
        "auc_pr_nonfact": auc_pr(nonfact, pooled),
        "auc_pr_nonfact_star": auc_pr(major[star_keep], pooled[star_keep]),
        "auc_pr_factual": auc_pr(~nonfact, -pooled),
        "auc_roc_nonfact": auc_roc(nonfact, pooled),
        "auc_roc_nonfact_star": auc_roc(major[star_keep], pooled[star_keep]),
        "random_auc_pr_nonfact": float(nonfact.mean() * 100),
        "random_auc_pr_factual": float((~nonfact).mean() * 100),
    }
    if len(passages) >= 3:
        from scipy.stats import pearsonr, spearmanr

        predicted = [float(np.mean(_finite(np.array(s, dtype=np.float64)))) for s in scores]
        human = [float(np.mean([LABEL_VALUE[lab] for lab in p.labels])) for p in passages]
        defined = float(np.std(predicted)) > 0 and float(np.std(human)) > 0  # constant input: undefined
        metrics["pearson"] = float(pearsonr(predicted, human)[0] * 100) if defined else None
        metrics["spearman"] = float(spearmanr(predicted, human)[0] * 100) if defined else None
    metrics["n_passages"] = len(passages)
    metrics["n_sentences"] = int(labels.size)
    return metrics


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
    """What every method of one bench run shares: samples used, model, judge, gateway, and the call
    accounting (whose on_reply drives the progress bar)."""

    samples: int
    model: Any
    gateway: Any
    stats: Any
    judge: Any = None  # entailment judge of semantic entropy
    events: Counter[str] = field(default_factory=Counter)  # bad model answers handled, by kind


def _unigram(passage: Passage, run: BenchRun) -> list[float]:
    from halluscope.scoring import unigram_scores
    from halluscope.text import passage_tokens, tokens

    scored = unigram_scores(passage.sentences, passage.text, passage.samples[: run.samples], tokens, passage_tokens)
    return [u.max_neg_logprob for u in scored]


def _selfcheck_prompt(passage: Passage, run: BenchRun) -> list[float]:
    result = selfcheck_prompt.detect(
        sentences=passage.sentences,
        samples=passage.samples[: run.samples],
        model=run.model,
        gateway=run.gateway,
        stats=run.stats,
    )
    return [float(u.score) for u in result.units if u.score is not None]  # SCGP scores every sentence


def _fibe(variant: str) -> Callable[[Passage, BenchRun], list[float]]:
    """A FIBE variant with N = --samples exam answers; its SCGP part judges the dataset's samples."""

    def score(passage: Passage, run: BenchRun) -> list[float]:
        result = fibe.detect(
            sentences=passage.sentences,
            prompt=passage.prompt,
            samples=passage.samples[: run.samples] if fibe.VARIANTS[variant].selfcheck else None,
            model=run.model,
            variant=variant,
            n=run.samples,
            gateway=run.gateway,
            stats=run.stats,
        )
        run.events.update(result.meta.events)
        return [float(u.score) for u in result.units if u.score is not None]  # FIBE scores every sentence

    return score


def _semantic_entropy_paragraph(passage: Passage, run: BenchRun) -> list[float]:
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
    run.events.update(result.meta.events)
    return [float(u.score) for u in result.units if u.score is not None]  # every sentence holds a claim


def _planned_fibe_calls(variant: str, passage: Passage, n: int) -> int:
    return fibe.planned_calls(variant, n, len(passage.sentences))


@dataclass(frozen=True)
class BenchMethod:
    score: Callable[[Passage, BenchRun], list[float]]
    calls: Callable[[Passage, int], int] | None = None  # model calls a passage takes, where known up front
    uses_model: bool = True


def _bench_methods() -> dict[str, BenchMethod]:
    methods = {
        "selfcheck-unigram": BenchMethod(_unigram, uses_model=False),
        "selfcheck-prompt": BenchMethod(_selfcheck_prompt, lambda p, n: n * len(p.sentences)),
        # claims are known only after decomposition: the bar counts calls without a total
        "semantic-entropy-paragraph": BenchMethod(_semantic_entropy_paragraph),
    }
    for v in fibe.VARIANTS:
        methods[v] = BenchMethod(_fibe(v), partial(_planned_fibe_calls, v))
    return methods


# The model-based methods score the dataset's own GPT-3 samples (SCGP), N fresh exam answers (FIBE) or
# the passage's claims with fresh questions and answers (paragraph semantic entropy).
BENCH_METHODS = _bench_methods()


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
) -> list[dict[str, Any]]:
    """Score the passages with each method, then write results.json, report.md and PR/ROC PNGs."""
    from tqdm import tqdm

    from halluscope.bench.report import markdown_table, write_curves, write_json

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
    from halluscope.backends.gateway import CallStats, default_gateway

    passages = load_wikibio(data)[:limit] if limit else load_wikibio(data)
    if needs_model:
        gateway = gateway or default_gateway()
    if "semantic-entropy-paragraph" in methods and judge is None:
        judge = entailment_judge(None, gateway)
    out_dir = Path(out)
    runs, curves, failed = [], [], []
    for method in methods:
        spec = BENCH_METHODS[method]
        # the bar counts model calls (the judge's and retries included) where a method makes them,
        # else passages
        total = sum(spec.calls(p, samples) for p in passages) if spec.calls else None
        with tqdm(total=total if spec.uses_model else len(passages), desc=method, disable=not progress) as bar:
            bench = BenchRun(
                samples,
                model if spec.uses_model else None,
                gateway if spec.uses_model else None,
                CallStats(on_reply=bar.update if spec.uses_model else None),
                judge=judge,
            )
            scores, scored, failures = [], [], Failures()
            for i, p in enumerate(passages):
                bar.set_postfix(passage=f"{i + 1}/{len(passages)}", failed=len(failures))
                before = bar.n
                got = failures.attempt(p.index, partial(spec.score, p, bench))
                if got is not None:
                    scores.append(got)
                    scored.append(p)
                # a passage with unreadable answers makes fewer calls than planned: keep the bar honest
                if spec.calls:
                    bar.update(max(0, spec.calls(p, samples) - (bar.n - before)))
                elif not spec.uses_model:
                    bar.update(1)
        failures.check_some_scored(len(scored), "passage")
        metrics = protocol_metrics(scored, scores)
        meta = bench.stats.meta(method)
        run = {
            "method": method,
            "model": meta.models[0] if meta.models else None,
            "prompts": meta.prompts,
            "samples": samples,
            "calls": meta.calls,
            "cache_hits": meta.cache_hits,
            "tokens": meta.tokens.model_dump(),
            "parse_failures": meta.parse_failures,
            "events": dict(bench.events),
            "seconds": meta.seconds,
            "n_passages": metrics.pop("n_passages"),
            "n_sentences": metrics.pop("n_sentences"),
            "protocol": "SelfCheckGPT/FIBE WikiBio: sentence AUC-PR/ROC x100, passage Pearson/Spearman x100",
            "metrics": metrics,
            "failed": failures.items,  # passages whose model calls failed for good, with the reason
            "scores": [[None if not np.isfinite(x) else float(x) for x in s] for s in scores],
            "passages": [p.index for p in scored],
        }
        write_json(out_dir / method / "results.json", run)
        runs.append(run)
        pooled = _finite(np.array([x for s in scores for x in s], dtype=np.float64))
        y = np.array([lab != "accurate" for p in scored for lab in p.labels])
        curves.append((method, y, pooled))
        failed.append(failures.report_paragraph(len(scored), f"{method}: passages"))
    summary = [{k: v for k, v in r.items() if k not in ("scores", "passages")} for r in runs]
    write_json(out_dir / "results.json", summary[0] if len(summary) == 1 else {"runs": summary})
    size = f"{summary[0]['n_passages']} passages, {summary[0]['n_sentences']} sentences"
    write_curves(out_dir / "pr_nonfact.png", curves, "pr", f"WikiBio NonFact, {size}")
    write_curves(out_dir / "roc_nonfact.png", curves, "roc", f"WikiBio NonFact, {size}")
    table = markdown_table([{"method": r["method"], **r["metrics"]} for r in runs], METRIC_COLUMNS)
    random_line = (
        f"Random AUC-PR on this data: NonFact {runs[0]['metrics']['random_auc_pr_nonfact']:.2f}, "
        f"Factual {runs[0]['metrics']['random_auc_pr_factual']:.2f}."
    )
    (out_dir / "report.md").write_text(
        f"# WikiBio GPT-3 hallucination benchmark\n\n{size}; {samples} samples per passage.\n"
        f"Protocol: SelfCheckGPT/FIBE (sentence-level AUC-PR and AUC-ROC x100 pooled over passages; "
        f"passage-level Pearson and Spearman x100).\n\n{table}\n\n{random_line}\n"
        + "".join(failed)
        + "\n![PR](pr_nonfact.png) ![ROC](roc_nonfact.png)\n",
        encoding="utf-8",
    )
    return runs
