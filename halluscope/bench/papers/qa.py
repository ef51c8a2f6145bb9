"""Closed-book QA for short-answer semantic entropy, as the Nature paper evaluates it (Farquhar et al. 2024).

Per question: one low-temperature answer (temperature 0.1, the official code's "most likely answer")
is graded against the dataset's answers; M answers at temperature 1 give the uncertainty scores.
Each score predicts that the low-temperature answer is wrong: AUROC (y = incorrect), and AURAC
(accuracy kept as the most uncertain answers are rejected), with bootstrap 95% intervals.
"""

from __future__ import annotations

import json
import re
import string
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from halluscope.backends.entailment import Entailment, entailment_judge
from halluscope.backends.gateway import CallStats, Gateway
from halluscope.backends.models import ModelLike, model_name
from halluscope.bench.benchmark import REQUIRED, Benchmark, Settings, option
from halluscope.bench.datasets import dataset_file
from halluscope.bench.report import Curve, markdown_table, write_curves, write_text
from halluscope.bench.runner import BenchResult, Plan
from halluscope.errors import ConfigError, DataError
from halluscope.metrics import auc_roc, aurac, bootstrap_ci, fraction
from halluscope.prompts import short_answer
from halluscope.results import DetectionResult
from halluscope.runtime import registry
from halluscope.runtime.contract import start
from halluscope.scoring.semantic_entropy import ESTIMATES

GREEDY_TEMPERATURE = 0.1
SCORES = (
    ("semantic_entropy", "semantic entropy (discrete)"),
    ("likelihood_semantic_entropy", "semantic entropy (likelihood)"),
    ("naive_entropy", "naive entropy"),
    ("n_clusters", "number of clusters"),
)
SEMANTIC_ENTROPY = registry.get("semantic-entropy")  # the method this protocol scores, as the registry finds it
SE_FLAGS = ("judge", "mode", "cluster_rule", "n")  # semantic entropy's options a QA run takes as flags
CORRECTNESS_RULE = (
    "correct = after normalising (lower case, punctuation and the articles a/an/the removed, spaces squeezed) "
    "the answer equals one of the dataset's answers or aliases, or contains one as whole words"
)


@dataclass(frozen=True)
class QAItem:
    index: int
    question: str
    answers: list[str]  # every accepted answer string (aliases included)


def _triviaqa(row: dict[str, Any]) -> tuple[str, list[str]]:
    """llm-foundry's prompt 'Question: ...\\nAnswer:' back to the question; aliases plus the answer."""
    question = re.sub(r"^\s*Question:\s*|\s*Answer:\s*$", "", row["context"])
    return question, [row["answer"], *row["aliases"]]


def _squad(row: dict[str, Any]) -> tuple[str, list[str]]:
    return row["question"], list(row["answer"])


DATASETS: dict[str, tuple[str, str, Callable[[dict[str, Any]], tuple[str, list[str]]]]] = {
    "triviaqa": ("triviaqa", "triviaqa_sm_sub.jsonl", _triviaqa),
    "squad": ("squad", "dev.jsonl", _squad),
}


def load_qa(name: str, data: str | Path | None = None, limit: int | None = None) -> list[QAItem]:
    """The first ``limit`` questions of a QA dataset, with their accepted answers (deduplicated)."""
    if name not in DATASETS:
        raise ConfigError(f"unknown QA dataset {name!r}; available: {', '.join(DATASETS)}")
    folder, file, parse = DATASETS[name]
    path = dataset_file(folder, file, data)
    items: list[QAItem] = []
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if limit is not None and len(items) >= limit:
                break
            if not line.strip():
                continue
            try:
                question, answers = parse(json.loads(line))
            except (json.JSONDecodeError, KeyError, TypeError) as exc:
                raise DataError(f"{path}:{number}: not a {name} record ({exc})") from exc
            accepted = list(dict.fromkeys(a for a in answers if normalise(a)))
            if not question.strip() or not accepted:
                raise DataError(f"{path}:{number}: a question without question text or answers")
            items.append(QAItem(len(items), question.strip(), accepted))
    return items


def normalise(text: str) -> str:
    """SQuAD's answer normalisation: lower case, no punctuation, no articles, single spaces."""
    text = "".join(ch for ch in text.lower() if ch not in string.punctuation)
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", text).split())


def is_correct(answer: str, accepted: list[str]) -> bool:
    """See CORRECTNESS_RULE: sentence-length answers contain the short gold answer."""
    said = f" {normalise(answer)} "
    for gold in accepted:
        norm = normalise(gold)
        if norm and (said.strip() == norm or f" {norm} " in said):
            return True
    return False


def _metrics(records: list[dict[str, Any]]) -> dict[str, Any]:
    correct = np.array([r["correct"] for r in records], dtype=bool)
    out: dict[str, Any] = {
        "questions": len(records),
        "pairs_judged": sum(r["pairs_judged"] for r in records),
        "accuracy": float(correct.mean()),
        "accuracy_ci95": bootstrap_ci(lambda y, _s: float(y.mean()), correct, correct.astype(float)),
    }
    for key, _ in SCORES:
        values = [r["scores"][key] for r in records]
        if any(v is None for v in values):  # e.g. likelihood SE without log-probs
            out[key] = None
            continue
        s = np.array(values, dtype=np.float64)
        out[key] = {
            "auroc": fraction(auc_roc(~correct, s)),
            "auroc_ci95": bootstrap_ci(lambda y, x: fraction(auc_roc(y, x)), ~correct, s),
            "aurac": aurac(correct, s),
            "aurac_ci95": bootstrap_ci(aurac, correct, s),
        }
    return out


def _scored_question(
    gateway: Gateway, model: ModelLike, stats: CallStats, entropy: Callable[[Any], DetectionResult], item: QAItem
) -> dict[str, Any]:
    """One question's record: its greedy answer graded against the accepted ones, and the semantic
    entropy of its sampled answers (their clusters, every estimate)."""
    greedy = gateway.call(
        model,
        short_answer.ANSWER,
        {"question": item.question},
        stats=stats,
        temperature=GREEDY_TEMPERATURE,
        max_tokens=short_answer.ANSWER_MAX_TOKENS,
        seed=0,
    )
    se = entropy(SEMANTIC_ENTROPY.inputs(question=item.question))
    evidence = se.units[0].evidence
    return {
        "index": item.index,
        "question": item.question,
        "accepted": item.answers,
        "answer": greedy.text.strip(),
        "correct": is_correct(greedy.text, item.answers),
        "samples": evidence["answers"],
        "clusters": evidence["clusters"],
        "scores": {name: evidence[name] for name in ESTIMATES},
        "pairs_judged": se.meta.params["pairs_judged"],
    }


def qa_plan(
    dataset: str,
    *,
    model: ModelLike,
    judge: Entailment,
    gateway: Gateway,
    data: str | Path | None = None,
    limit: int | None = None,
    **options: Any,
) -> Plan:
    """Per question: one graded answer at temperature 0.1 and semantic entropy of N more; ``options``
    are semantic entropy's own (``n``, ``mode``, ``cluster_rule`` ...), their defaults its own."""
    se = SEMANTIC_ENTROPY.options(model=model, judge=judge, **options)
    if se.n < 2:
        raise ConfigError(
            f"semantic entropy needs at least 2 sampled answers per question, got n={se.n}", settings=("n=",)
        )
    items = load_qa(dataset, data, limit)
    stats = CallStats()
    entropy = SEMANTIC_ENTROPY.scorer(se, start(gateway, stats))
    params = {
        "dataset": dataset,
        "method": SEMANTIC_ENTROPY.name,
        "model": model_name(model),
        "judge": judge.name,
        "mode": se.mode,
        "cluster_rule": se.cluster_rule,
        "n": se.n,
        "limit": limit,
        "greedy_temperature": GREEDY_TEMPERATURE,
        "correctness": CORRECTNESS_RULE,
    }
    return Plan(
        bench="qa",
        method=SEMANTIC_ENTROPY.name,
        what="question",
        items=items,
        item_id=lambda item: f"question {item.index}",
        score=partial(_scored_question, gateway, model, stats, entropy),
        summarise=_metrics,
        params=params,
        report=_write_report,
        stats=stats,
        bootstrap=False,  # its metrics carry their own intervals (accuracy_ci95, auroc_ci95, aurac_ci95)
    )


def _interval(ci: tuple[float, float] | None) -> str:
    return "n/a" if ci is None else f"[{ci[0]:.3f}, {ci[1]:.3f}]"


def _write_report(result: BenchResult, out_dir: Path, failed: str) -> None:
    metrics, params = result.metrics, result.params
    rows = []
    curves = []
    incorrect = np.array([not r["correct"] for r in result.records], dtype=bool)
    for key, name in SCORES:
        score = metrics[key]
        if score is None:
            rows.append({"score": name, "auroc": "n/a (no log-probs)", "aurac": "n/a"})
            continue
        auroc = "n/a" if score["auroc"] is None else f"{score['auroc']:.3f} {_interval(score['auroc_ci95'])}"
        rows.append({"score": name, "auroc": auroc, "aurac": f"{score['aurac']:.3f} {_interval(score['aurac_ci95'])}"})
        scores = np.array([i.scores[key] for i in result.items], dtype=np.float64)
        ci = score["auroc_ci95"]  # the bench's own bootstrap over the questions, as a fraction
        curves.append(Curve(name, incorrect, scores, None if ci is None else [100 * ci[0], 100 * ci[1]]))
    table = markdown_table(rows, (("score", "score"), ("auroc", "AUROC [95% CI]"), ("aurac", "AURAC [95% CI]")))
    n = len(result.items)
    write_curves(out_dir / "roc.png", curves, "roc", f"{params['dataset']}: predicting wrong answers, {n} questions")
    write_text(
        out_dir / "report.md",
        f"# Semantic entropy on {params['dataset']}\n\n"
        f"{n} questions; answers by {params['model']} (M = {params['n']} at temperature 1, plus one at "
        f"{params['greedy_temperature']} that is graded); entailment judge {params['judge']} ({params['mode']}).\n"
        f"Accuracy of the graded answers: {metrics['accuracy']:.3f} {_interval(metrics['accuracy_ci95'])}.\n"
        f"Grading: {CORRECTNESS_RULE}.\n\n{table}\n\n"
        "AUROC: each score predicting that the graded answer is wrong. AURAC: the official code's area under "
        "the rejection-accuracy curve (20 quantiles from 0.1 to 1). Intervals: percentile bootstrap, "
        "1000 resamples, seed 0.\n\n"
        f"{result.meta.calls} model calls ({metrics['pairs_judged']} answer pairs judged), "
        f"{result.meta.cache_hits} cache hits, {result.meta.seconds / 60:.1f} minutes.\n"
        + failed
        + "\n![ROC](roc.png)\n",
    )


def describe(result: BenchResult) -> str:
    """The lines `halluscope bench qa` prints."""
    metrics = result.metrics
    low, high = metrics["accuracy_ci95"] or (float("nan"), float("nan"))
    lines = [
        f"{result.params['dataset']}: {len(result.items)} questions, "
        f"accuracy {metrics['accuracy']:.3f} [{low:.3f}, {high:.3f}]"
    ]
    for key, name in SCORES:
        score = metrics[key]
        if score is None:
            lines.append(f"  {name}: n/a (no log-probs)")
            continue
        auroc = "n/a" if score["auroc"] is None else f"{score['auroc']:.3f}"
        lines.append(f"  {name}: AUROC {auroc}  AURAC {score['aurac']:.3f}")
    lines.append(result.meta.cost(f"{metrics['pairs_judged']} pairs judged"))
    return "\n".join(lines)


@dataclass(frozen=True, kw_only=True)
class QASettings(Settings):
    dataset: str = option(REQUIRED, "the closed-book QA data", "--dataset", choices=tuple(DATASETS))
    method: str = option("semantic-entropy", "the method scored", "--method", choices=("semantic-entropy",))
    model: str | None = option(None, "model spec that answers, e.g. local:qwen2.5-coder-0.5b", "--model")
    limit: int | None = option(None, "only the first K questions", "--limit", type=int)


def _plans(settings: QASettings, gateway: Callable[[], Gateway]) -> list[Plan]:
    if not settings.model:
        raise ConfigError(
            "bench qa needs a model to answer the questions (model=SPEC, e.g. local:qwen2.5-coder-0.5b)",
            settings=("model=",),
        )
    gw = gateway()
    options = dict(settings.method_options)
    options["judge"] = entailment_judge(options.get("judge"), gw, prompt=short_answer.ENTAILMENT)
    return [
        qa_plan(settings.dataset, model=settings.model, gateway=gw, data=settings.data, limit=settings.limit, **options)
    ]


BENCHMARK = Benchmark(
    name="qa",
    help="closed-book QA (TriviaQA, SQuAD): semantic entropy's AUROC / AURAC protocol",
    description="Answer each question once at temperature 0.1 (graded against the dataset's answers) and "
    "M times at temperature 1 (scored by semantic entropy); report how well each score predicts wrong answers.",
    settings=QASettings,
    fields_of=(SEMANTIC_ENTROPY, SE_FLAGS),
    plans=_plans,
    describe=lambda results, _settings: describe(results[0]),
)
