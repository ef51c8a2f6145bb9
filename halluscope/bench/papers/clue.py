"""CLUE's QA protocol (Wang et al., Sections 5.1-5.2) on QNLI.

Per question, three answers: D_R (a sentence labelled entailment: it answers the question), D_L (a
sentence labelled not_entailment for the same question) and D_I (a sentence of another question).
CLUE samples N outputs for the question and gives U(c) for each pooled concept; each answer's concept
scores S^a = f(a, "This example is about c") are the ground truth.

- Correlation (5.2.1): per question and subset, Pearson of U(c) against S^a over the concepts; the
  mean over questions (paper, QNLI: D_R -0.488, D_L -0.284, D_I -0.092).
- Detection (5.2.2), on D_R only: a concept is hallucinated (1) if S^a < theta_l, entailed (0) if
  S^a > theta_h, left out otherwise; CLUE scores it by U(c), the baseline by 1 - f(question, "This
  question is relevant to c"); macro (per question with both classes, averaged) and micro (pooled)
  AUROC and AUPRC (paper, QNLI: CLUE macro AUROC 0.867 vs 0.761).
"""

from __future__ import annotations

import csv
import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from halluscope.backends.embeddings import Embedder
from halluscope.backends.entailment import ZeroShot, zero_shot_judge
from halluscope.backends.gateway import CallStats, Gateway
from halluscope.backends.local import local_spec
from halluscope.backends.models import ModelLike, model_name
from halluscope.bench.benchmark import Benchmark, Settings, option
from halluscope.bench.datasets import dataset_file
from halluscope.bench.report import Curve, markdown_table, write_curves, write_text
from halluscope.bench.runner import BenchResult, Plan
from halluscope.checks import finite_number
from halluscope.errors import ConfigError, DataError
from halluscope.methods import clue
from halluscope.metrics import auc_pr, auc_roc, fraction
from halluscope.results import DetectionResult
from halluscope.runtime.contract import start
from halluscope.scoring import concept_labels

SUBSETS = (("D_R", "relevant"), ("D_L", "less relevant"), ("D_I", "irrelevant"))
PAPER_CORRELATION = {"D_R": -0.488, "D_L": -0.284, "D_I": -0.092}  # Table 3, QNLI
PAPER_DETECTION = {  # Table 4, QNLI: macro AUROC, macro AUPRC, micro AUROC, micro AUPRC
    "CLUE": (0.867, 0.899, 0.841, 0.884),
    "baseline": (0.761, 0.798, 0.76, 0.789),
}
# Not stated in the paper (Figure 4 varies them). Ours, for the offline LLM scorer: over 10 QNLI
# questions its S^a spans 0.008-0.937 (median 0.31), and 0.9 / 0.1 leaves only 4 of them with both
# classes (the first with no concept labelled at all). An NLI scorer may suit tighter values.
THETA_H, THETA_L = 0.6, 0.2


@dataclass(frozen=True)
class QnliItem:
    index: int
    question: str
    relevant: str  # D_R
    less_relevant: str  # D_L
    irrelevant: str  # D_I

    def answers(self) -> dict[str, str]:
        return {"D_R": self.relevant, "D_L": self.less_relevant, "D_I": self.irrelevant}


def load_qnli(data: str | Path | None = None, limit: int | None = None, seed: int = 0) -> list[QnliItem]:
    """The first ``limit`` QNLI dev questions (file order) that have both an entailment and a
    not_entailment sentence; the first sentence of each label, and for D_I a seeded random sentence
    of another question."""
    path = dataset_file("qnli", "dev.tsv", data)
    try:
        with path.open(encoding="utf-8", newline="") as handle:
            rows = list(csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))
    except OSError as exc:
        raise DataError(f"cannot read {path}: {exc}") from exc
    if not rows or not {"question", "sentence", "label"} <= set(rows[0]):
        raise DataError(f"{path}: expected the columns question, sentence, label")
    by_question: dict[str, dict[str, str]] = {}
    for row in rows:
        by_question.setdefault(row["question"], {}).setdefault(row["label"], row["sentence"])
    rng = random.Random(seed)
    items: list[QnliItem] = []
    for question, labels in by_question.items():
        if limit is not None and len(items) >= limit:
            break
        if "entailment" not in labels or "not_entailment" not in labels:
            continue
        other = rng.choice(rows)
        while other["question"] == question:
            other = rng.choice(rows)
        items.append(QnliItem(len(items), question, labels["entailment"], labels["not_entailment"], other["sentence"]))
    return items


def pearson(x: list[float], y: list[float]) -> float | None:
    """Pearson correlation; None when undefined (fewer than 2 points, or a constant vector)."""
    a, b = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if a.size < 2 or a.std() == 0 or b.std() == 0:
        return None
    return float(np.corrcoef(a, b)[0, 1])


def _detection(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Macro (per question with both classes) and micro (pooled) AUROC/AUPRC for CLUE and the baseline."""
    out: dict[str, Any] = {}
    for name, key in (("CLUE", "uncertainty"), ("baseline", "baseline_risk")):
        per_question: list[tuple[float, float]] = []
        ys: list[int] = []
        ss: list[float] = []
        for r in records:
            keep = [j for j, label in enumerate(r["labels"]) if label != -1]
            y = np.array([r["labels"][j] for j in keep], dtype=int)
            s = np.array([r[key][j] for j in keep], dtype=np.float64)
            ys.extend(y.tolist())
            ss.extend(s.tolist())
            roc, pr = fraction(auc_roc(y, s)), fraction(auc_pr(y, s))
            if roc is not None and pr is not None:  # None: one class only in this question
                per_question.append((roc, pr))
        y_all, s_all = np.array(ys, dtype=int), np.array(ss, dtype=np.float64)
        out[name] = {
            "macro_auroc": float(np.mean([a for a, _ in per_question])) if per_question else None,
            "macro_auprc": float(np.mean([p for _, p in per_question])) if per_question else None,
            "micro_auroc": fraction(auc_roc(y_all, s_all)),
            "micro_auprc": fraction(auc_pr(y_all, s_all)),
            "questions_with_both_classes": len(per_question),
            "concepts_labelled": int(y_all.size),
            "hallucinated": int(y_all.sum()),
        }
    return out


def _scored_question(
    concepts: Callable[[Any], DetectionResult], stats: CallStats, theta_h: float, theta_l: float, item: QnliItem
) -> dict[str, Any]:
    """One question's record: its concepts' uncertainty, each answer's scores against them, the
    concepts' labels and the calls it made."""
    before_calls, before_hits = stats.calls, stats.cache_hits
    result = concepts(clue.Inputs(question=item.question, references=item.answers()))
    units, outputs = result.units, result.evidence["outputs"]
    uncertainty = [float(u.score or 0.0) for u in units]
    answer_scores = {name: [u.evidence["references"][name] for u in units] for name in item.answers()}
    relevance = [u.evidence["question_relevance"] for u in units]
    return {
        "index": item.index,
        "question": item.question,
        "answers": item.answers(),
        "outputs": outputs,
        "extracted": result.evidence["extracted"],
        "concepts": [u.text for u in units],
        "merged": {u.text: u.evidence["merged"] for u in units if u.evidence["merged"]},
        "merge_pairs": result.meta.params["merge_pairs"],
        "matrix": [[u.evidence["scores"][i] for u in units] for i in range(len(outputs))] if units else [],
        "uncertainty": uncertainty,
        "answer_scores": answer_scores,
        "question_relevance": relevance,
        "baseline_risk": [1.0 - s for s in relevance],
        "labels": concept_labels(answer_scores.get("D_R", []), theta_h, theta_l),
        "correlation": {k: pearson(uncertainty, answer_scores[k]) for k, _ in SUBSETS if k in answer_scores},
        "events": dict(result.meta.events),
        "calls": stats.calls - before_calls,
        "cache_hits": stats.cache_hits - before_hits,
        "scores": {f"U({u.text})": u.score for u in units},
    }


def clue_plan(
    *,
    model: ModelLike,
    scorer: ZeroShot,
    gateway: Gateway,
    data: str | Path | None = None,
    limit: int | None = None,
    n: int = 5,
    theta_h: float = THETA_H,
    theta_l: float = THETA_L,
    prefilter: float | None = None,
    embedder: Embedder | None = None,
) -> Plan:
    """CLUE on each QNLI question, its three answers scored against the concepts."""
    concept_labels([], theta_h, theta_l)  # bad thresholds fail before any model call
    items = load_qnli(data, limit)
    if not items:
        raise ConfigError("no QNLI question to run (limit must be at least 1)", settings=("limit",))
    stats = CallStats()
    options = clue.Options(model=model, judge=scorer, n=n, prefilter=prefilter, embedder=embedder)
    concepts = clue.METHOD.scorer(options, start(gateway, stats))

    params = {
        "dataset": "qnli",
        "method": clue.NAME,
        "model": model_name(model),
        "scorer": scorer.name,
        "n": n,
        "limit": limit,
        "theta_h": theta_h,
        "theta_l": theta_l,
        "merge_threshold": clue.MERGE_THRESHOLD,
        "merge_prefilter": prefilter,
    }
    return Plan(
        bench="clue",
        method=clue.NAME,
        what="question",
        items=items,
        item_id=lambda item: f"question {item.index}",
        score=partial(_scored_question, concepts, stats, theta_h, theta_l),
        summarise=_summarise,
        params=params,
        report=_write_report,
        stats=stats,
        counts_calls=True,
    )


def _summarise(records: list[dict[str, Any]]) -> dict[str, Any]:
    correlation = {}
    for key, _ in SUBSETS:
        values = [r["correlation"][key] for r in records if r["correlation"].get(key) is not None]
        correlation[key] = {
            "mean": float(np.mean(values)) if values else None,
            "questions": len(values),
            "paper": PAPER_CORRELATION[key],
        }
    return {
        "questions": len(records),
        "concepts_per_question": float(np.mean([len(r["concepts"]) for r in records])),
        "merged_per_question": float(np.mean([sum(map(len, r["merged"].values())) for r in records])),
        "merge_pairs": sum(r["merge_pairs"] for r in records),
        "correlation": correlation,
        "detection": _detection(records),
    }


def describe(result: BenchResult) -> str:
    """The lines `halluscope bench clue` prints."""

    def num(x: float | None) -> str:
        return "n/a" if x is None else f"{x:.3f}"

    m = result.metrics
    lines = [f"CLUE on QNLI: {m['questions']} questions, {m['concepts_per_question']:.1f} concepts each"]
    for key, name in SUBSETS:
        c = m["correlation"][key]
        lines.append(f"  Pearson(U, S^a) {key} ({name}): {num(c['mean'])}  (paper {c['paper']:.3f})")
    for method in ("CLUE", "baseline"):
        d = m["detection"][method]
        lines.append(
            f"  {method}: macro AUROC {num(d['macro_auroc'])} AUPRC {num(d['macro_auprc'])}, "
            f"micro AUROC {num(d['micro_auroc'])} AUPRC {num(d['micro_auprc'])}"
        )
    lines.append(result.meta.cost(f"{m['merge_pairs']} pairs asked in merging"))
    return "\n".join(lines)


def _detection_curves(result: BenchResult, out_dir: Path, title: str) -> None:
    """roc.png and pr.png: CLUE's concept uncertainty and the question-relevance baseline on D_R's
    labelled concepts, each with its interval over questions."""
    records = result.records
    for kind, metric in (("roc", "micro_auroc"), ("pr", "micro_auprc")):
        curves = []
        for method, key, name in (("CLUE", "uncertainty", "CLUE"), ("question relevance", "baseline_risk", "baseline")):
            y = [label for r in records for label in r["labels"] if label != -1]
            s = [r[key][j] for r in records for j, label in enumerate(r["labels"]) if label != -1]
            ci = result.intervals.get(f"detection.{name}.{metric}")  # a fraction, resampling the questions
            interval = None if ci is None else [100 * ci[0], 100 * ci[1]]
            curves.append(Curve(method, np.array(y, dtype=int), np.array(s, dtype=np.float64), interval))
        write_curves(out_dir / f"{kind}.png", curves, kind, title)


def _report_rows(summary: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The report's two tables beside the paper's: the correlations (Table 3), the detection (Table 4)."""
    corr_rows = [
        {
            "subset": f"{key} ({name})",
            "ours": summary["correlation"][key]["mean"],
            "questions": summary["correlation"][key]["questions"],
            "paper": PAPER_CORRELATION[key],
        }
        for key, name in SUBSETS
    ]
    det_rows = []
    for method, paper in PAPER_DETECTION.items():
        d = summary["detection"][method]
        label = "CLUE" if method == "CLUE" else "question relevance (baseline)"
        det_rows.append(
            {
                "method": label,
                **{k: d[k] for k in ("macro_auroc", "macro_auprc", "micro_auroc", "micro_auprc")},
                "paper": " / ".join(f"{x:.3f}" for x in paper),
            }
        )
    return corr_rows, det_rows


def _write_report(result: BenchResult, out_dir: Path, failed: str) -> None:
    summary = {**result.params, **result.metrics}
    corr_rows, det_rows = _report_rows(summary)
    d = summary["detection"]["CLUE"]
    _correlation_plot(out_dir / "correlation.png", summary)
    _detection_curves(result, out_dir, f"QNLI D_R: hallucinated concepts, {d['concepts_labelled']} labelled")
    events = ", ".join(f"{k} {v}" for k, v in sorted(result.meta.events.items())) or "none"
    prefilter = summary["merge_prefilter"]
    write_text(
        out_dir / "report.md",
        f"# CLUE on QNLI\n\n"
        f"{summary['questions']} questions (the first QNLI dev questions with both an entailment and a "
        f"not_entailment sentence); N = {summary['n']} outputs by {summary['model']} at temperature 1, concepts "
        f"extracted by the same model (Table 7 prompt, temperature 0); zero-shot scorer {summary['scorer']}; "
        f"concepts merged when both mutual scores exceed {summary['merge_threshold']}"
        + (f" (pairs with embedding cosine below {prefilter} are not asked)" if prefilter is not None else "")
        + f". {summary['concepts_per_question']:.1f} concepts kept per question, "
        f"{summary['merged_per_question']:.1f} merged.\n\n"
        "## Correlation of U(c) with the answer concept score S^a (mean Pearson over questions)\n\n"
        + markdown_table(
            corr_rows,
            (("subset", "subset"), ("ours", "ours"), ("questions", "questions"), ("paper", "paper (Table 3)")),
            3,
        )
        + "\n\n![correlation](correlation.png)\n\n"
        "## Concept-level hallucination detection on D_R "
        f"(theta_h = {summary['theta_h']}, theta_l = {summary['theta_l']})\n\n"
        f"{d['concepts_labelled']} concepts labelled ({d['hallucinated']} hallucinated), "
        f"{d['questions_with_both_classes']} questions with both classes (macro averages over these).\n\n"
        + markdown_table(
            det_rows,
            (
                ("method", "method"),
                ("macro_auroc", "macro AUROC"),
                ("macro_auprc", "macro AUPRC"),
                ("micro_auroc", "micro AUROC"),
                ("micro_auprc", "micro AUPRC"),
                ("paper", "paper (Table 4, same order)"),
            ),
            3,
        )
        + "\n\n![ROC](roc.png) ![PR](pr.png)\n\n"
        f"{result.meta.calls} model calls ({summary['merge_pairs']} concept pairs asked in merging), "
        f"{result.meta.cache_hits} cache hits, {result.meta.seconds / 60:.1f} minutes; bad answers handled: {events}.\n"
        + failed,
    )


def _correlation_plot(path: Path, summary: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = [k for k, _ in SUBSETS]
    ours = [summary["correlation"][k]["mean"] for k in keys]
    fig, ax = plt.subplots(figsize=(5.5, 4), dpi=120)
    x = np.arange(len(keys))
    ax.bar(x - 0.2, [math.nan if v is None else v for v in ours], 0.4, label="halluscope")
    ax.bar(x + 0.2, [PAPER_CORRELATION[k] for k in keys], 0.4, label="paper (Table 3)")
    ax.axhline(0, color="grey", linewidth=0.8)
    ax.set_xticks(x, [f"{k}\n{name}" for k, name in SUBSETS])
    ax.set_ylabel("mean Pearson(U(c), S^a)")
    ax.set_title(f"QNLI, {summary['questions']} questions")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


@dataclass(frozen=True, kw_only=True)
class ClueSettings(Settings):
    dataset: str = option("qnli", "the QA data", "--dataset", choices=("qnli",))
    limit: int | None = option(None, "only the first K questions", "--limit", type=int)
    model: str = option(local_spec("qwen2.5-coder-1.5b"), "model that answers and extracts concepts", "--model")
    judge: str | None = option(
        None,
        "zero-shot scorer: a model spec, or nli:PATH (nli:NAME once pulled; default: local model)",
        "--judge",
        metavar="SPEC",
    )
    n: int = option(5, "N outputs per question", "--samples", type=int)
    theta_h: float = option(THETA_H, "S^a above it: entailed concept", "--theta-h", type=finite_number)
    theta_l: float = option(THETA_L, "S^a below it: hallucinated concept", "--theta-l", type=finite_number)
    prefilter: float | None = option(
        None, "merge: ask only pairs with embedding cosine >= COS", "--prefilter", type=finite_number, metavar="COS"
    )


def _plans(settings: ClueSettings, gateway: Callable[[], Gateway]) -> list[Plan]:
    gw = gateway()
    scorer = zero_shot_judge(settings.judge, gw, prompt=clue.ZERO_SHOT)
    return [clue_plan(
        model=settings.model, scorer=scorer, gateway=gw, data=settings.data, limit=settings.limit,
        n=settings.n, theta_h=settings.theta_h, theta_l=settings.theta_l, prefilter=settings.prefilter,
    )]  # fmt: skip


BENCHMARK = Benchmark(
    name="clue",
    help="CLUE's QA protocol on QNLI: U(c) vs answer concept scores, concept-level hallucination detection",
    description="Wang et al., Sections 5.1-5.2: per question, D_R / D_L / D_I answers; mean Pearson of U(c) "
    "with each answer's concept scores, and detection of hallucinated concepts on D_R against the "
    "question-relevance baseline (macro and micro AUROC/AUPRC).",
    settings=ClueSettings,
    plans=_plans,
    describe=lambda results, _settings: describe(results[0]),
)
