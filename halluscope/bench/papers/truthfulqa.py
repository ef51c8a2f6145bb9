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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Literal

import numpy as np

from halluscope.backends import readings
from halluscope.backends.chat import runs_in_process
from halluscope.backends.embeddings import Embedder
from halluscope.backends.gateway import CallStats, Gateway
from halluscope.backends.models import ModelLike, model_name
from halluscope.bench.benchmark import REQUIRED, Benchmark, Settings, listed, option
from halluscope.bench.datasets import dataset_file
from halluscope.bench.report import markdown_table, write_text
from halluscope.bench.runner import BenchResult, Plan
from halluscope.errors import ConfigError, DataError
from halluscope.methods import fewl
from halluscope.results import DetectionResult
from halluscope.runtime.contract import start
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
        raise ConfigError(f"limit must be at least 1, got {limit}", settings=("limit",))
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


def _scored_question(factualness: Callable[[Any], DetectionResult], q: TruthfulQuestion) -> dict[str, Any]:
    """One question's record: every labelled answer's FEWL scores, and what FEWL drew for it."""
    result = factualness(fewl.Inputs(question=q.question, answers=q.labelled))
    scored = question_record(result)
    return {
        "index": q.index,
        "best": q.best,
        "first_incorrect": q.incorrect[0],
        **scored,
        "wrong_answers": result.evidence["wrong_answers"],
        "events": dict(result.meta.events),
        "scores": {f"answer {k}": a.get("fewl") for k, a in enumerate(scored["answers"])},
    }


def truthfulqa_plan(
    *,
    references: Sequence[ModelLike] | None = None,
    gateway: Gateway,
    n: int | None = None,
    neighbours: int = fewl.NEIGHBOURS,
    wrong_model: ModelLike | None = None,
    data: str | Path | None = None,
    limit: int | None = None,
    embedder: Embedder | None = None,
) -> Plan:
    """Every labelled answer of each of the first ``limit`` questions scored by FEWL, one question at a
    time (a neighbour's reference answers asked for one question are replayed from the cache for the next)."""
    everything = load_truthfulqa(data)
    questions = _limited(everything, limit)
    refs, n = fewl.reference_setup(references, n)
    pool = [q.question for q in everything]
    stats = CallStats()
    options = fewl.Options(
        references=refs, n=n, pool=pool, neighbours=neighbours, wrong_model=wrong_model, embedder=embedder
    )
    factualness = fewl.METHOD.scorer(options, start(gateway, stats))
    params = {
        "dataset": "truthfulqa v1",
        "method": fewl.NAME,
        **fewl.reference_params(refs, n, wrong_model),
        "neighbours": neighbours,
        "pool": len(everything),
        "limit": limit,
    }
    return Plan(
        bench="truthfulqa",
        method=fewl.NAME,
        what="question",
        items=questions,
        item_id=lambda q: f"question {q.index}",
        score=partial(_scored_question, factualness),
        summarise=lambda records: {
            "questions": len(records),
            "labelled_answers": sum(len(r["answers"]) for r in records),
            "variants": summarise_variants(records),
        },
        params=params,
        report=_write_truthfulqa_report,
        stats=stats,
        counts_calls=True,
        per_score={"answers": "answer"},
    )


def _write_truthfulqa_report(result: BenchResult, out_dir: Path, failed: str) -> None:
    write_text(out_dir / "report.md", _truthfulqa_report(result) + failed)


def describe_truthfulqa(result: BenchResult, shown: Sequence[str] = VARIANTS) -> str:
    """The lines `halluscope bench truthfulqa` prints, for the ``shown`` variants."""
    m = result.metrics
    lines = [f"FEWL on TruthfulQA v1: {m['questions']} questions, {m['labelled_answers']} labelled answers"]
    for r in m["variants"]:
        if r["variant"] not in shown:
            continue
        a = "n/a" if r["best_above_first_incorrect"] is None else f"{r['best_above_first_incorrect']:.3f}"
        b = "n/a" if r["best_highest_share"] is None else f"{r['best_highest_count']} ({r['best_highest_share']:.1%})"
        paper = f"{r['paper_gpt35_share']:.1%} / {r['paper_gpt4_share']:.1%}"
        lines.append(f"  {r['title']:24s} (a) {a}   (b) {b}   paper (b) {paper}")
    lines.append(result.meta.cost())
    return "\n".join(lines)


def _truthfulqa_report(result: BenchResult) -> str:
    s = {**result.params, **result.metrics}
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
        f"# FEWL on TruthfulQA\n\n{s['questions']} questions of the 817-question v1 set, "
        f"{s['labelled_answers']} labelled answers scored; references {', '.join(s['references'])} "
        f"({s['mode']}, N = {s['n']}); IW/CO answers by {s['wrong_model']}; laziness neighbours: K = "
        f"{s['neighbours']} nearest of the {s['pool']} questions (MiniLM cosine).\n\n{table}\n\n"
        "(a): share of questions whose best answer scores above the first incorrect answer. (b): questions "
        "whose best answer scores strictly above every other labelled answer (the paper's Table 3 measure; "
        f"its counts are of 817 questions, shown as shares).\n\n{result.meta.calls} model calls, "
        f"{result.meta.cache_hits} cache hits, {result.meta.seconds / 60:.1f} minutes; "
        f"events: {result.meta.events or 'none'}.\n"
    )


# ---------------------------------------------------------------- model ranking


def mc1_mode(model: ModelLike, mode: Literal["auto", "logprobs", "ask"]) -> str:
    """How a model's MC1 choice is read: 'auto' reads the log-probs of a model that runs in the process
    (llama.cpp, transformers) and asks the others."""
    if mode not in MC_MODES:
        raise ConfigError(f"mc must be one of {', '.join(MC_MODES)}, got {mode!r}", settings=("mc",))
    if mode == "auto":
        return "logprobs" if runs_in_process(model) else "ask"
    return mode


def mc1_pick(
    model: ModelLike,
    k: int,
    question: str,
    options: dict[str, list[tuple[str, bool]]],
    gateway: Gateway,
    mode: str,
    stats: CallStats | None = None,
    seed: int = 0,
) -> dict[str, Any] | None:
    """The model's MC1 choice on question ``k`` (None when mc_task.json has no options for it): by
    log-probs, the option with the highest summed log-prob after the answering prompt (in the
    model's chat template); by asking, the options shuffled (seeded per question), lettered, and the
    letter it names (an unreadable or out-of-range letter counts as wrong, ``unreadable``)."""
    opts = options.get(question.strip())
    if not opts:
        return None
    texts = [t for t, _ in opts]
    truth = next(i for i, (_, ok) in enumerate(opts) if ok)
    unreadable = False
    if mode == "logprobs":
        lm = gateway.logprob_model(str(model))
        prompt = lm.chat_prompt(gateway.registry.get(fewl.ANSWER).render(question=question))
        scores = readings.forward(gateway, lm, prompt, partial(lm.score_many, prompt, texts), stats)
        pick: int | None = int(np.argmax(scores))
    else:
        order = np.random.default_rng([seed, k]).permutation(len(texts))
        listed = "\n".join(f"{LETTERS[j]}. {texts[i]}" for j, i in enumerate(order))
        reply = gateway.call(model, "fewl.multiple_choice", {"question": question, "options": listed}, stats=stats)
        letter = reply.parsed if reply.ok else None
        unreadable = letter is None or LETTERS.index(letter) >= len(texts)
        pick = None if unreadable else int(order[LETTERS.index(letter)])
    return {"question": question, "pick": pick, "truth": truth, "correct": pick == truth, "unreadable": unreadable}


def mc1_summary(mode: str, picks: Sequence[dict[str, Any] | None]) -> dict[str, Any]:
    """MC1 accuracy over the questions that have options."""
    found = [p for p in picks if p is not None]
    if not found:
        raise DataError("none of the questions has MC1 options in mc_task.json")
    return {
        "mode": mode,
        "accuracy": float(np.mean([p["correct"] for p in found])),
        "questions": len(found),
        "missing_options": len(picks) - len(found),
        "unreadable": sum(p["unreadable"] for p in found),
        "picks": found,
    }


def mc1_accuracy(
    model: ModelLike,
    questions: Sequence[str],
    options: dict[str, list[tuple[str, bool]]],
    gateway: Gateway,
    mode: Literal["auto", "logprobs", "ask"] = "auto",
    stats: CallStats | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    """MC1 accuracy of one model over ``questions`` (``mc1_pick`` for each)."""
    chosen = mc1_mode(model, mode)
    return mc1_summary(
        chosen, [mc1_pick(model, k, q, options, gateway, chosen, stats, seed) for k, q in enumerate(questions)]
    )


def kendall_tau(a: Sequence[float], b: Sequence[float]) -> float | None:
    """Kendall's tau-b between two scorings of the same models (None with fewer than two, or constant)."""
    from scipy.stats import kendalltau

    if len(a) < 2:
        return None
    tau = kendalltau(a, b).statistic
    return None if tau is None or np.isnan(tau) else float(tau)


def rank_models(
    questions: Sequence[str],
    models: Sequence[ModelLike],
    *,
    references: Sequence[ModelLike] | None = None,
    n: int | None = None,
    pool: Sequence[str] = (),
    neighbours: int = fewl.NEIGHBOURS,
    wrong_model: ModelLike | None = None,
    embedder: Embedder | None = None,
    gateway: Gateway | None = None,
    stats: CallStats | None = None,
    on_step: Callable[[str], None] | None = None,
    max_concurrency: int | None = None,
) -> dict[str, Any]:
    """FEWL's Section 4.3: every model answers every question (``fewl.answer``), FEWL scores the answers
    against the same references, and the models are ranked by mean FEWL (higher = less
    hallucinated). Returns ``ranking`` (best first), per model ``mean`` {variant: mean} and
    per-question ``scores``, and the ``scored`` records (one per question)."""
    if len(models) < 2:
        raise ConfigError(f"ranking needs at least two models, got {len(models)}")
    opts = fewl.Options(
        references=references,
        n=n,
        pool=pool,
        neighbours=neighbours,
        wrong_model=wrong_model,
        candidates=list(models),
        embedder=embedder,
    )
    score = fewl.METHOD.scorer(opts, start(gateway, stats, max_concurrency, on_step))
    results = [score(fewl.Inputs(question=q, answers=[])) for q in questions]
    events: dict[str, int] = {}
    for result in results:
        for kind, count in result.meta.events.items():
            events[kind] = events.get(kind, 0) + count
    return {
        **ranking([question_record(r) for r in results], models, bool(pool)),
        "scored": [question_record(r) for r in results],
        "events": events,
        "references": results[0].meta.params["references"] if results else [],
    }


def question_record(result: DetectionResult) -> dict[str, Any]:
    """One question's record as FEWL's scoring makes it (the references, expertise, weights,
    neighbours and every answer's row), read back from its result."""
    record = {k: v for k, v in result.evidence.items() if k != "wrong_answers"}
    return {**record, "answers": [{"text": u.text, **u.evidence} for u in result.units]}


def ranking(scored: Sequence[dict[str, Any]], models: Sequence[ModelLike], penalty: bool) -> dict[str, Any]:
    """The models ranked by the mean FEWL of their answers over the ``scored`` questions (higher =
    less hallucinated): ``ranking`` (best first), per model its ``scores``, ``answered`` and ``mean``
    {variant: mean}, the ``headline`` variant and whether the ``penalty`` was on."""
    names = [model_name(m) for m in models]
    per_model: dict[str, dict[str, Any]] = {}
    for name in names:
        rows = [next((a for a in s["answers"] if a["source"] == name), None) for s in scored]
        scores = [None if a is None else a["fewl"] for a in rows]
        variants = {
            v: [a["variants"].get(v) for a in rows if a is not None and a["fewl"] is not None] for v in VARIANTS
        }
        per_model[name] = {
            "scores": scores,
            "answered": sum(s is not None for s in scores),
            "mean": {v: (float(np.mean(xs)) if xs and None not in xs else None) for v, xs in variants.items()},
        }
    headline = "fewl" if penalty else "multi"  # without a pool there is no penalty: uniform weights

    def mean_of(name: str) -> float:
        value = per_model[name]["mean"][headline]
        return -np.inf if value is None else value

    return {
        "ranking": sorted(names, key=mean_of, reverse=True),
        "models": per_model,
        "penalty": penalty,
        "headline": headline,
    }


def rank_summary(records: list[dict[str, Any]], models: list[str], modes: dict[str, str]) -> dict[str, Any]:
    """The models ranked by mean FEWL and by MC1 accuracy, and Kendall's tau between the two rankings."""
    ranked = ranking([r["scored"] for r in records], models, penalty=True)
    accuracy = {m: mc1_summary(modes[m], [r["mc1"][m] for r in records]) for m in models}
    rows = [
        {
            "model": m,
            "fewl": ranked["models"][m]["mean"][ranked["headline"]],
            "answered": ranked["models"][m]["answered"],
            "mc1_accuracy": accuracy[m]["accuracy"],
            "mc_mode": accuracy[m]["mode"],
            "variants": ranked["models"][m]["mean"],
        }
        for m in models
    ]
    tau = None
    if all(r["fewl"] is not None for r in rows):
        tau = kendall_tau([r["fewl"] for r in rows], [r["mc1_accuracy"] for r in rows])
    return {
        "questions": len(records),
        "headline": ranked["headline"],
        "models": rows,
        "ranking_fewl": ranked["ranking"],
        "ranking_mc1": sorted(models, key=lambda m: -accuracy[m]["accuracy"]),
        "kendall_tau": tau,
        "mc1": {m: {k: v for k, v in a.items() if k != "picks"} for m, a in accuracy.items()},
    }


def _mc1_choices(
    models: Sequence[str],
    modes: Mapping[str, str],
    options: Any,
    gateway: Gateway,
    stats: CallStats,
    q: TruthfulQuestion,
) -> dict[str, Any]:
    """Every model's MC1 choice on one question, read as its mode says (log-probs or asked)."""
    return {m: mc1_pick(m, q.index, q.question, options, gateway, modes[m], stats) for m in models}


def _ranked_question(
    factualness: Callable[[Any], DetectionResult],
    mc1: Callable[[TruthfulQuestion], dict[str, Any]],
    models: Sequence[str],
    q: TruthfulQuestion,
) -> dict[str, Any]:
    """One question's record for the ranking: every model's answer scored by FEWL, and its MC1 choice."""
    result = factualness(fewl.Inputs(question=q.question, answers=[]))
    scored = question_record(result)
    by_model = {a["source"]: a.get("fewl") for a in scored["answers"]}
    return {
        "index": q.index,
        "scored": scored,
        "mc1": mc1(q),
        "events": dict(result.meta.events),
        "scores": {model_name(m): by_model.get(model_name(m)) for m in models},
    }


def rank_plan(
    *,
    models: Sequence[str],
    references: Sequence[ModelLike] | None = None,
    gateway: Gateway,
    n: int | None = None,
    neighbours: int = fewl.NEIGHBOURS,
    wrong_model: ModelLike | None = None,
    mc: Literal["auto", "logprobs", "ask"] = "auto",
    data: str | Path | None = None,
    limit: int | None = None,
    embedder: Embedder | None = None,
) -> Plan:
    """Per question: every model answers, FEWL scores the answers, and every model's MC1 choice is read;
    the models are then ranked by mean FEWL and by MC1 accuracy (Kendall's tau between the two)."""
    if len(set(models)) < 2:
        raise ConfigError(f"models needs at least two different models, got {list(models)}", settings=("models",))
    modes = {m: mc1_mode(m, mc) for m in models}
    everything = load_truthfulqa(data)
    questions = _limited(everything, limit)
    options = load_mc1(data)
    refs, n = fewl.reference_setup(references, n)
    pool = [q.question for q in everything]
    stats = CallStats()
    fewl_options = fewl.Options(
        references=refs,
        n=n,
        pool=pool,
        neighbours=neighbours,
        wrong_model=wrong_model,
        candidates=list(models),
        embedder=embedder,
    )
    factualness = fewl.METHOD.scorer(fewl_options, start(gateway, stats))
    mc1 = partial(_mc1_choices, models, modes, options, gateway, stats)
    params = {
        "dataset": "truthfulqa v1",
        "method": fewl.NAME,
        "models": list(models),
        **fewl.reference_params(refs, n, wrong_model),
        "neighbours": neighbours,
        "mc": mc,
        "limit": limit,
    }
    return Plan(
        bench="truthfulqa-rank",
        method=fewl.NAME,
        what="question",
        items=questions,
        item_id=lambda q: f"question {q.index}",
        score=partial(_ranked_question, factualness, mc1, models),
        summarise=partial(rank_summary, models=list(models), modes=modes),
        params=params,
        report=_write_rank_report,
        stats=stats,
        counts_calls=True,
    )


def _write_rank_report(result: BenchResult, out_dir: Path, failed: str) -> None:
    write_text(out_dir / "report.md", _rank_report(result) + failed)


def describe_rank(result: BenchResult) -> str:
    """The lines `halluscope bench truthfulqa-rank` prints."""
    m = result.metrics
    lines = [f"ranking {len(m['models'])} models on {m['questions']} TruthfulQA questions"]
    for r in m["models"]:
        fewl_mean = "n/a" if r["fewl"] is None else f"{r['fewl']:.4f}"
        lines.append(
            f"  {r['model']:32s} mean FEWL {fewl_mean}   MC1 accuracy {r['mc1_accuracy']:.3f} ({r['mc_mode']})"
        )
    tau = "n/a" if m["kendall_tau"] is None else f"{m['kendall_tau']:.3f}"
    lines += [f"FEWL: {' > '.join(m['ranking_fewl'])}", f"MC1:  {' > '.join(m['ranking_mc1'])}", f"Kendall's tau {tau}"]
    lines.append(result.meta.cost())
    return "\n".join(lines)


def _rank_report(result: BenchResult) -> str:
    s = {**result.params, **result.metrics}
    table = markdown_table(
        s["models"],
        [("model", "model"), ("fewl", "mean FEWL"), ("mc1_accuracy", "MC1 accuracy"), ("mc_mode", "MC1 read by")],
        digits=4,
    )
    tau = "n/a" if s["kendall_tau"] is None else f"{s['kendall_tau']:.3f}"
    return (
        f"# Ranking models by FEWL on TruthfulQA\n\n{s['questions']} questions of v1; references "
        f"{', '.join(s['references'])}; headline score: {s['headline']}.\n\n{table}\n\n"
        f"FEWL ranking: {' > '.join(s['ranking_fewl'])}\n\nMC1 ranking: {' > '.join(s['ranking_mc1'])}\n\n"
        f"Kendall's tau: {tau}\n\n{result.meta.calls} model calls, {result.meta.cache_hits} cache hits, "
        f"{result.meta.seconds / 60:.1f} minutes.\n"
    )


def _variant_list(chosen: list[str]) -> list[str]:
    unknown = [m for m in chosen if m not in VARIANTS]
    if unknown or not chosen:
        raise ConfigError(
            f"unknown method {', '.join(unknown) or '(none)'}; known: {', '.join(VARIANTS)}", settings=("method",)
        )
    return chosen


FEWL_FLAGS = ("references", "n", "neighbours", "wrong_model")  # FEWL's options a TruthfulQA run takes as flags


@dataclass(frozen=True, kw_only=True)
class TruthfulQASettings(Settings):
    method: tuple[str, ...] = listed(VARIANTS, "variants to report (default: all)", "--method")
    limit: int | None = option(None, "only the first K questions", "--limit", type=int)


@dataclass(frozen=True, kw_only=True)
class RankSettings(Settings):
    models: tuple[str, ...] = listed(REQUIRED, "models to rank", "--models", metavar="SPEC")
    mc: str = option("auto", "how MC1 is read", "--mc", choices=MC_MODES)
    limit: int | None = option(None, "only the first K questions", "--limit", type=int)


def _plans(settings: TruthfulQASettings, gateway: Callable[[], Gateway]) -> list[Plan]:
    _variant_list(settings.method)  # an unknown variant fails before any call
    return [truthfulqa_plan(gateway=gateway(), data=settings.data, limit=settings.limit, **settings.method_options)]


def _rank_plans(settings: RankSettings, gateway: Callable[[], Gateway]) -> list[Plan]:
    return [rank_plan(
        models=settings.models, gateway=gateway(), mc=settings.mc, data=settings.data, limit=settings.limit,
        **settings.method_options,
    )]  # fmt: skip


BENCHMARK = Benchmark(
    name="truthfulqa",
    help="FEWL on TruthfulQA v1: does the best answer score above the incorrect ones (Table 3, ablations)",
    description="Wei et al., Section 4.2: every labelled answer scored by FEWL; (a) best above the first "
    "incorrect answer, (b) best highest among all labelled answers; every ablation from one run.",
    settings=TruthfulQASettings,
    fields_of=(fewl.METHOD, FEWL_FLAGS),
    plans=_plans,
    describe=lambda results, settings: describe_truthfulqa(results[0], _variant_list(settings.method)),
)
RANK_BENCHMARK = Benchmark(
    name="truthfulqa-rank",
    help="rank models by mean FEWL and by TruthfulQA MC1 accuracy; Kendall's tau",
    description="Wei et al., Section 4.3: each model answers the questions, FEWL ranks the models; the "
    "ground truth is each model's MC1 accuracy (log-probs for local models, else asked).",
    settings=RankSettings,
    fields_of=(fewl.METHOD, FEWL_FLAGS),
    plans=_rank_plans,
    describe=lambda results, _settings: describe_rank(results[0]),
)
