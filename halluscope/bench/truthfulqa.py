"""FEWL's TruthfulQA protocols (Wei et al., Section 4) on the 817-question v1 TruthfulQA.

- Measurement (4.2, Table 3): every labelled answer of a question (best, correct, incorrect) is scored
  by FEWL against the reference answers; (a) the share of questions whose "best" answer scores above
  the first incorrect one, and (b) the count of questions whose "best" answer scores strictly highest
  among all of the question's labelled answers (the paper's Table 3 measure), for every ablation.
  The laziness penalty's neighbours come from all 817 questions.
- Model ranking (4.3, Table 4): each model answers the questions, FEWL ranks the models by mean
  score; the ground truth ranks them by TruthfulQA MC1 accuracy (v1 mc_task.json), read from
  log-probs (sum over the option's tokens after the answering prompt) or by asking for a letter.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Literal

import numpy as np

from halluscope.backends.embeddings import Embedder
from halluscope.backends.gateway import CallStats, Gateway, ModelLike
from halluscope.bench.datasets import dataset_file
from halluscope.bench.report import markdown_table, write_json
from halluscope.errors import ConfigError, DataError
from halluscope.graphs import fewl
from halluscope.scoring.fewl import VARIANT_TITLES, VARIANTS

# Table 3 (and Table 10 for uniform lambda): counts of 817 questions whose best answer scored highest,
# with GPT-3.5 / GPT-4 as the reference.
PAPER_TABLE3 = {
    "single": (172, 178),
    "single+penalty": (180, 188),
    "multi": (176, 187),
    "fewl": (187, 202),
    "fewl-uniform": (183, 193),
}
PAPER_QUESTIONS = 817
MC_MODES = ("auto", "logprobs", "ask")
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


@dataclass(frozen=True)
class TruthfulQuestion:
    index: int
    question: str
    category: str
    best: str
    correct: tuple[str, ...]
    incorrect: tuple[str, ...]

    @property
    def labelled(self) -> list[str]:
        """Best, correct, then incorrect answers, each text once (best is among the correct ones)."""
        return list(dict.fromkeys([self.best, *self.correct, *self.incorrect]))


def _split(field: str) -> tuple[str, ...]:
    return tuple(a.strip() for a in field.split(";") if a.strip())


def load_truthfulqa(data: str | Path | None = None) -> list[TruthfulQuestion]:
    """The 817 questions of v1/TruthfulQA.csv (a UTF-8 BOM file) in file order."""
    path = dataset_file("truthfulqa", "v1/TruthfulQA.csv", data)
    if not path.is_file():
        raise DataError(f"{path} is missing (the 817-question v1 TruthfulQA)")
    with path.open(encoding="utf-8-sig", newline="") as f:
        rows = list(csv.DictReader(f))
    need = {"Question", "Best Answer", "Correct Answers", "Incorrect Answers"}
    if not rows or not need <= rows[0].keys():
        raise DataError(f"{path} lacks the columns {sorted(need)}")
    out = []
    for i, row in enumerate(rows):
        incorrect = _split(row["Incorrect Answers"])
        if not row["Question"].strip() or not row["Best Answer"].strip() or not incorrect:
            raise DataError(f"{path} row {i + 2}: a question needs a best and an incorrect answer")
        out.append(
            TruthfulQuestion(
                index=i,
                question=row["Question"].strip(),
                category=row.get("Category", ""),
                best=row["Best Answer"].strip(),
                correct=_split(row["Correct Answers"]),
                incorrect=incorrect,
            )
        )
    return out


def load_mc1(data: str | Path | None = None) -> dict[str, list[tuple[str, bool]]]:
    """v1 mc_task.json's MC1 options by question text: [(option, is_true)], exactly one true."""
    path = dataset_file("truthfulqa", "v1/mc_task.json", data)
    try:
        entries = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise DataError(f"cannot read {path}: {exc}") from exc
    return {e["question"].strip(): [(k, bool(v)) for k, v in e["mc1_targets"].items()] for e in entries}


def _limited(questions: list[TruthfulQuestion], limit: int | None) -> list[TruthfulQuestion]:
    if limit is not None and limit < 1:
        raise ConfigError(f"--limit must be at least 1, got {limit}")
    return questions[:limit] if limit else questions


def table_measures(record: dict[str, Any], variant: str) -> tuple[bool | None, bool | None]:
    """(a) best above the first incorrect answer, (b) best strictly highest among all labelled
    answers, for one question's record; None where the variant has no score."""
    scores = {a["text"]: (a["variants"] or {}).get(variant) for a in record["answers"]}
    best, first_wrong = scores.get(record["best"]), scores.get(record["first_incorrect"])
    if best is None or first_wrong is None or any(s is None for s in scores.values()):
        return None, None
    others = [s for t, s in scores.items() if t != record["best"]]
    return best > first_wrong, all(best > s for s in others)


def summarise_variants(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for v in VARIANTS:
        measures = [table_measures(r, v) for r in records]
        a = [m[0] for m in measures if m[0] is not None]
        b = [m[1] for m in measures if m[1] is not None]
        paper = PAPER_TABLE3[v]
        rows.append(
            {
                "variant": v,
                "title": VARIANT_TITLES[v],
                "questions": len(a),
                "best_above_first_incorrect": float(np.mean(a)) if a else None,
                "best_highest_count": int(sum(b)),
                "best_highest_share": float(np.mean(b)) if b else None,
                "paper_gpt35_share": paper[0] / PAPER_QUESTIONS,
                "paper_gpt4_share": paper[1] / PAPER_QUESTIONS,
            }
        )
    return rows


def run_truthfulqa_bench(
    out: str | Path,
    *,
    references: Sequence[ModelLike] | None,
    gateway: Gateway,
    n: int | None = None,
    neighbours: int = fewl.NEIGHBOURS,
    wrong_model: ModelLike | None = None,
    data: str | Path | None = None,
    limit: int | None = None,
    embedder: Embedder | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Score every labelled answer of the first ``limit`` questions; write results.json and report.md."""
    from tqdm import tqdm

    everything = load_truthfulqa(data)
    questions = _limited(everything, limit)
    refs, n = fewl.reference_setup(references, n)
    graph = fewl.build(refs, n=n, neighbours=neighbours, wrong_model=wrong_model, embedder=embedder, gateway=gateway)
    items = [fewl.Item(question=q.question, answers=q.labelled) for q in questions]
    with tqdm(desc="fewl truthfulqa", unit=" call", disable=not progress) as bar:
        stats = CallStats(on_reply=bar.update)
        run = fewl.run(graph, items, stats, pool=[q.question for q in everything], max_concurrency=gateway.concurrency)
    records = []
    for q, scored in zip(questions, run["scored"], strict=True):
        records.append({"index": q.index, "best": q.best, "first_incorrect": q.incorrect[0], **scored})
    meta = stats.meta(fewl.NAME)
    summary = {
        "dataset": "truthfulqa v1",
        "method": fewl.NAME,
        **fewl.reference_params(refs, n, wrong_model),
        "neighbours": neighbours,
        "pool": len(everything),
        "n_questions": len(records),
        "labelled_answers": sum(len(r["answers"]) for r in records),
        "calls": meta.calls,
        "cache_hits": meta.cache_hits,
        "tokens": meta.tokens.model_dump(),
        "seconds": meta.seconds,
        "prompts": meta.prompts,
        "events": run["events"],
        "variants": summarise_variants(records),
    }
    out_dir = Path(out)
    write_json(out_dir / "results.json", {**summary, "questions": records, "wrong_answers": run["wrongs"]})
    (out_dir / "report.md").write_text(_truthfulqa_report(summary), encoding="utf-8")
    return {**summary, "questions": records}


def _truthfulqa_report(s: dict[str, Any]) -> str:
    table = markdown_table(
        [
            {
                **r,
                "a": r["best_above_first_incorrect"],
                "b": f"{r['best_highest_count']} ({r['best_highest_share']:.1%})"
                if r["best_highest_share"] is not None
                else "n/a",
                "paper": f"{r['paper_gpt35_share']:.1%} / {r['paper_gpt4_share']:.1%}",
            }
            for r in s["variants"]
        ],
        [
            ("title", "variant"),
            ("a", "(a) best > first incorrect"),
            ("b", "(b) best highest of all labelled"),
            ("paper", "paper (b), GPT-3.5 / GPT-4 reference"),
        ],
        digits=3,
    )
    return (
        f"# FEWL on TruthfulQA\n\n{s['n_questions']} questions of the 817-question v1 set, "
        f"{s['labelled_answers']} labelled answers scored; references {', '.join(s['references'])} "
        f"({s['mode']}, N = {s['n']}); IW/CO answers by {s['wrong_model']}; laziness neighbours: K = "
        f"{s['neighbours']} nearest of the {s['pool']} questions (MiniLM cosine).\n\n{table}\n\n"
        "(a): share of questions whose best answer scores above the first incorrect answer. (b): questions "
        "whose best answer scores strictly above every other labelled answer (the paper's Table 3 measure; "
        f"its counts are of 817 questions, shown as shares).\n\n{s['calls']} model calls, {s['cache_hits']} "
        f"cache hits, {s['seconds'] / 60:.1f} minutes; events: {s['events'] or 'none'}.\n"
    )


# ---------------------------------------------------------------- model ranking


def mc1_accuracy(
    model: ModelLike,
    questions: Sequence[str],
    options: dict[str, list[tuple[str, bool]]],
    gateway: Gateway,
    mode: Literal["auto", "logprobs", "ask"] = "auto",
    stats: CallStats | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    """MC1 accuracy: by log-probs, the option with the highest summed log-prob after the answering
    prompt (in the model's chat template) is the model's choice; by asking, the options are shuffled
    (seeded per question), lettered, and the letter it names is its choice (an unreadable or
    out-of-range letter counts as wrong and is an event)."""
    if mode not in MC_MODES:
        raise ConfigError(f"--mc must be one of {', '.join(MC_MODES)}, got {mode!r}")
    chosen_mode = mode
    if mode == "auto":
        chosen_mode = "logprobs" if isinstance(model, str) and model.startswith("local:") else "ask"
    answering = gateway.registry.get(fewl.ANSWER)
    picks: list[dict[str, Any]] = []
    missing = unreadable = 0
    for k, q in enumerate(questions):
        opts = options.get(q.strip())
        if not opts:
            missing += 1
            continue
        texts = [t for t, _ in opts]
        truth = next(i for i, (_, ok) in enumerate(opts) if ok)
        if chosen_mode == "logprobs":
            lm = gateway.logprob_model(str(model))
            prompt = lm.chat_prompt(answering.render(question=q))
            scores = gateway.forward(lm, prompt, partial(lm.score_many, prompt, texts), stats)
            pick: int | None = int(np.argmax(scores))
        else:
            order = np.random.default_rng([seed, k]).permutation(len(texts))
            listed = "\n".join(f"{LETTERS[j]}. {texts[i]}" for j, i in enumerate(order))
            reply = gateway.call(model, "fewl.multiple_choice", {"question": q, "options": listed}, stats=stats)
            letter = reply.parsed if reply.ok else None
            if letter is None or LETTERS.index(letter) >= len(texts):
                unreadable += 1
                pick = None
            else:
                pick = int(order[LETTERS.index(letter)])
        picks.append({"question": q, "pick": pick, "truth": truth, "correct": pick == truth})
    if not picks:
        raise DataError("none of the questions has MC1 options in mc_task.json")
    return {
        "mode": chosen_mode,
        "accuracy": float(np.mean([p["correct"] for p in picks])),
        "questions": len(picks),
        "missing_options": missing,
        "unreadable": unreadable,
        "picks": picks,
    }


def kendall_tau(a: Sequence[float], b: Sequence[float]) -> float | None:
    """Kendall's tau-b between two scorings of the same models (None with fewer than two, or constant)."""
    from scipy.stats import kendalltau

    if len(a) < 2:
        return None
    tau = kendalltau(a, b).statistic
    return None if tau is None or np.isnan(tau) else float(tau)


def run_rank_bench(
    out: str | Path,
    *,
    models: Sequence[str],
    references: Sequence[ModelLike] | None,
    gateway: Gateway,
    n: int | None = None,
    neighbours: int = fewl.NEIGHBOURS,
    wrong_model: ModelLike | None = None,
    mc: Literal["auto", "logprobs", "ask"] = "auto",
    data: str | Path | None = None,
    limit: int | None = None,
    embedder: Embedder | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Rank ``models`` by mean FEWL of their answers and by MC1 accuracy on the same questions;
    Kendall's tau between the two; write results.json and report.md."""
    from tqdm import tqdm

    if len(set(models)) < 2:
        raise ConfigError(f"--models needs at least two different models, got {list(models)}")
    everything = load_truthfulqa(data)
    questions = [q.question for q in _limited(everything, limit)]
    options = load_mc1(data)
    with tqdm(desc="fewl truthfulqa-rank", unit=" call", disable=not progress) as bar:
        stats = CallStats(on_reply=bar.update)
        ranked = fewl.rank_models(
            questions,
            list(models),
            references=references,
            n=n,
            pool=[q.question for q in everything],
            neighbours=neighbours,
            wrong_model=wrong_model,
            embedder=embedder,
            gateway=gateway,
            stats=stats,
            max_concurrency=gateway.concurrency,
        )
        accuracy = {m: mc1_accuracy(m, questions, options, gateway, mc, stats) for m in models}
    headline = ranked["headline"]
    rows = []
    for m in models:
        rows.append(
            {
                "model": m,
                "fewl": ranked["models"][m]["mean"][headline],
                "answered": ranked["models"][m]["answered"],
                "mc1_accuracy": accuracy[m]["accuracy"],
                "mc_mode": accuracy[m]["mode"],
                "variants": ranked["models"][m]["mean"],
            }
        )
    by_accuracy = sorted(models, key=lambda m: -accuracy[m]["accuracy"])
    meta = stats.meta(fewl.NAME)
    summary = {
        "dataset": "truthfulqa v1",
        "n_questions": len(questions),
        "references": ranked["references"],
        "headline": headline,
        "models": rows,
        "ranking_fewl": ranked["ranking"],
        "ranking_mc1": by_accuracy,
        "kendall_tau": None
        if any(r["fewl"] is None for r in rows)
        else kendall_tau([r["fewl"] for r in rows], [r["mc1_accuracy"] for r in rows]),
        "calls": meta.calls,
        "cache_hits": meta.cache_hits,
        "seconds": meta.seconds,
        "events": ranked["events"],
    }
    out_dir = Path(out)
    write_json(
        out_dir / "results.json",
        {**summary, "scored": ranked["scored"], "mc1": {m: accuracy[m] for m in models}},
    )
    (out_dir / "report.md").write_text(_rank_report(summary), encoding="utf-8")
    return summary


def _rank_report(s: dict[str, Any]) -> str:
    table = markdown_table(
        s["models"],
        [("model", "model"), ("fewl", "mean FEWL"), ("mc1_accuracy", "MC1 accuracy"), ("mc_mode", "MC1 read by")],
        digits=4,
    )
    tau = "n/a" if s["kendall_tau"] is None else f"{s['kendall_tau']:.3f}"
    return (
        f"# Ranking models by FEWL on TruthfulQA\n\n{s['n_questions']} questions of v1; references "
        f"{', '.join(s['references'])}; headline score: {s['headline']}.\n\n{table}\n\n"
        f"FEWL ranking: {' > '.join(s['ranking_fewl'])}\n\nMC1 ranking: {' > '.join(s['ranking_mc1'])}\n\n"
        f"Kendall's tau: {tau}\n\n{s['calls']} model calls, {s['cache_hits']} cache hits, "
        f"{s['seconds'] / 60:.1f} minutes.\n"
    )
