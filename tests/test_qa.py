"""The closed-book QA benchmark of semantic entropy: loading TriviaQA and SQuAD, grading by aliases,
AUROC / AURAC / bootstrap intervals by hand, and a run on scripted models with the real questions."""

from __future__ import annotations

import json
import math
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from halluscope.backends.entailment import LLMEntailment
from halluscope.backends.gateway import Gateway
from halluscope.bench.papers.qa import is_correct, load_qa, normalise, qa_plan
from halluscope.bench.runner import BenchResult
from halluscope.bench.runner import run as bench
from halluscope.errors import ConfigError
from halluscope.metrics import auc_roc, aurac, bootstrap_ci, bootstrap_metrics


def test_datasets_load_with_their_accepted_answers(data_dir: Path) -> None:
    trivia = load_qa("triviaqa", data_dir, limit=3)
    assert trivia[0].question == "Brunswick, Lancastrian and Pearl Pickler are types of which vegetable?"
    assert trivia[0].answers[0] == "Onion" and "Allium cepa" in trivia[0].answers
    assert [q.index for q in trivia] == [0, 1, 2]
    assert len(load_qa("triviaqa", data_dir)) == 3000  # SOURCE.md's count
    squad = load_qa("squad", data_dir, limit=1)
    assert squad[0].question == "Which NFL team represented the AFC at Super Bowl 50?"
    assert squad[0].answers == ["Denver Broncos"]
    with pytest.raises(ConfigError, match="unknown QA dataset 'nq'; available: triviaqa, squad"):
        load_qa("nq", data_dir)


def test_grading_by_normalised_exact_or_whole_word_containment() -> None:
    assert normalise("The  Onion!") == "onion" and normalise("A dik-dik's") == "dikdiks"
    assert is_correct("Onion", ["Onion"])
    assert is_correct("Brunswick, Lancastrian and Pearl Pickler are types of onion.", ["Onion", "Allium cepa"])
    assert is_correct("It was the raid on Dieppe, France.", ["DIEPPE", "Dieppe, France"])
    assert not is_correct("They are onions-like leeks.", ["Onion"])  # 'onionslike' is not the word 'onion'
    assert not is_correct("A horseradish.", ["Horse"])
    assert not is_correct("", ["Horse"])


def test_aurac_and_auroc_by_hand() -> None:
    correct = np.array([True, True, False, False])
    uncertainty = np.array([0.0, 0.1, 0.9, 1.0])
    # np.quantile (linear) of [0, .1, .9, 1] at q = 0.1 + i * 0.9/19 sits at position 3q: the 12 first q
    # keep 1 or 2 answers (accuracy 1), i = 12..18 keep 3 (2/3), q = 1 keeps all 4 (1/2)
    assert aurac(correct, uncertainty) == pytest.approx((12 + 7 * 2 / 3 + 0.5) * 0.9 / 19)  # 0.81316
    assert aurac(np.ones(4, dtype=bool), uncertainty) == pytest.approx(20 * 0.9 / 19)
    assert auc_roc(~correct, uncertainty) == 100.0 and auc_roc(correct, uncertainty) == 0.0
    assert auc_roc(np.array([True, True]), np.array([0.1, 0.2])) is None


def test_bootstrap_interval_is_seeded_and_brackets_the_estimate() -> None:
    rng = np.random.default_rng(1)
    y = rng.random(200) < 0.4
    s = y + rng.normal(0, 0.8, 200)
    low, high = bootstrap_ci(auc_roc, y, s)  # type: ignore[misc]
    point = auc_roc(y, s)
    assert point is not None and low < point < high and high - low < 30
    assert bootstrap_ci(auc_roc, y, s) == (low, high)
    assert bootstrap_ci(auc_roc, np.ones(5, dtype=bool), np.arange(5.0)) is None  # never defined


def test_every_metric_of_a_run_gets_an_interval_over_resampled_items() -> None:
    """What results.json's ``intervals`` hold: whole items resampled, every real-valued metric."""
    rng = np.random.default_rng(2)

    def summarise(records: list[dict[str, Any]]) -> dict[str, Any]:
        y = np.array([lab for r in records for lab in r["labels"]])
        s = np.array([x for r in records for x in r["scores"]])
        rare = [r for r in records if r["rare"]]
        return {
            "auc": {"roc": auc_roc(y, s)},
            "mean": float(s.mean()),
            "n_items": len(records),
            "rare_mean": float(np.mean([r["scores"][0] for r in rare])) if len(rare) > 5 else None,
        }

    def records(n: int) -> list[dict[str, Any]]:
        out = []
        for i in range(n):
            labels = rng.random(8) < 0.5
            out.append({"labels": labels.tolist(), "scores": (labels + rng.normal(0, 1, 8)).tolist(), "rare": i < 3})
        return out

    few, many = records(25), records(400)
    intervals = bootstrap_metrics(summarise, few, n_resamples=400)
    point = summarise(few)
    assert set(intervals) == {"auc.roc", "mean"}  # a count gets none; a metric mostly undefined gets none
    assert intervals["auc.roc"][0] < point["auc"]["roc"] < intervals["auc.roc"][1]
    assert intervals["mean"][0] < point["mean"] < intervals["mean"][1]
    assert bootstrap_metrics(summarise, few, n_resamples=400) == intervals  # seeded
    wide = intervals["auc.roc"][1] - intervals["auc.roc"][0]
    narrow = bootstrap_metrics(summarise, many, n_resamples=400)["auc.roc"]
    assert narrow[1] - narrow[0] < wide / 2  # 16 times the items: about a quarter of the width
    assert bootstrap_metrics(summarise, few[:1]) == {}


def scripted_answerer(seen: list[dict[str, Any]]) -> Any:
    """Onion and dik-dik: right, and the same at every sample; Garron and Dieppe: wrong, and a new
    animal or place at every sample."""
    lock = threading.Lock()
    right = {"vegetable": "They are onions. They are types of onion.", "dik-dik": "A dik-dik is an antelope."}
    wrong = {
        "Garron": ["a cat", "a dog", "a fish", "a bird", "a cow"],
        "1942": ["Rome", "Oslo", "Kiel", "Nice", "Bonn"],
    }

    def respond(prompt: str, params: dict[str, Any]) -> str:
        with lock:
            seen.append(params)
        for key, text in right.items():
            if key in prompt:
                return text
        for key, options in wrong.items():
            if key in prompt:
                return f"It is {options[params['seed'] % 5]}."
        raise AssertionError(prompt)

    return respond


def test_run_on_scripted_models_scores_every_question(
    gateway: Gateway, scripted: Any, tmp_path: Path, data_dir: Path
) -> None:
    seen: list[dict[str, Any]] = []
    model = scripted(scripted_answerer(seen), "scripted:answers")
    judge = LLMEntailment(
        scripted(lambda p, _: "Entailment" if p.count("onion") + p.count("antelope") >= 2 else "Neutral", "scripted:j"),
        gateway=gateway,
        prompt="semantic_entropy.entailment",
    )
    run = bench(qa_plan("triviaqa", model=model, judge=judge, gateway=gateway, data=data_dir, limit=4, n=5), tmp_path)
    assert [q["correct"] for q in run.records] == [True, True, False, False]
    # per question one answer at temperature 0.1 and M = 5 at temperature 1
    assert sorted(p["temperature"] for p in seen) == [0.1] * 4 + [1.0] * 20
    assert [len(q["clusters"]) for q in run.records] == [1, 1, 5, 5]
    metrics = run.metrics
    assert metrics["accuracy"] == 0.5
    assert metrics["semantic_entropy"]["auroc"] == 1.0 and metrics["n_clusters"]["auroc"] == 1.0
    assert metrics["likelihood_semantic_entropy"] is None and metrics["naive_entropy"] is None  # no log-probs
    assert run.items[2].scores["semantic_entropy"] == pytest.approx(math.log(5))
    # distinct answers of a wrong question: 10 pairs, each judged both ways (Neutral: not equivalent)
    assert metrics["pairs_judged"] == 2 * 10 and run.meta.calls == 24 + 2 * 2 * 10
    saved = json.loads((tmp_path / "results.json").read_text())
    assert set(saved) == set(BenchResult.model_fields) and saved["bench"] == "qa"
    assert saved["metrics"]["questions"] == 4 and saved["items"][0]["record"]["answer"].startswith("They are onions")
    report = (tmp_path / "report.md").read_text()
    assert "| semantic entropy (discrete) | 1.000" in report and "n/a (no log-probs)" in report
    assert (tmp_path / "roc.png").read_bytes()[:4] == b"\x89PNG"
    again = bench(qa_plan("triviaqa", model=model, judge=judge, gateway=gateway, data=data_dir, limit=4, n=5), tmp_path)
    assert again.meta.calls == 0 and again.metrics == metrics
