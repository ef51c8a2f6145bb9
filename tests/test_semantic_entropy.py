"""Semantic entropy for short answers as a LangGraph graph, on scripted models: sampling fan-out,
judge calls, cache replay, given answers, and the estimators."""

from __future__ import annotations

import math
import re
import threading
from typing import Any

import pytest

from halluscope.backends.entailment import LLMEntailment
from halluscope.backends.gateway import CallStats, Gateway
from halluscope.errors import ConfigError
from halluscope.methods import semantic_entropy
from halluscope.methods.semantic_entropy import entropies

CITIES = ["Paris", "Paris", "Lyon", "Paris", "Nice"]


def answerer(seen: list[str]) -> Any:
    lock = threading.Lock()

    def respond(prompt: str, params: dict[str, Any]) -> str:
        with lock:
            seen.append(prompt)
        assert "Answer the following question in a single brief but complete sentence." in prompt
        return f"The capital is {CITIES[params['seed']]}."

    return respond


def judge_model(seen: list[str]) -> Any:
    """Entailment iff both answers name the same city."""
    lock = threading.Lock()

    def respond(prompt: str, params: dict[str, Any]) -> str:
        with lock:
            seen.append(prompt)
        a, b = re.findall(r"capital is (\w+)", prompt)
        return "Entailment" if a == b else "Contradiction"

    return respond


def test_samples_m_answers_clusters_them_and_replays_from_the_cache(gateway: Gateway, scripted: Any) -> None:
    asked: list[str] = []
    judged: list[str] = []
    model = scripted(answerer(asked), "scripted:answers")
    judge = LLMEntailment(
        scripted(judge_model(judged), "scripted:judge"), gateway=gateway, prompt="semantic_entropy.entailment"
    )
    totals: list[int] = []  # the progress bar's total as the method announced its calls
    stats = CallStats(on_plan=totals.append)
    result = semantic_entropy.detect(
        "What is the capital of France?", model=model, judge=judge, n=5, gateway=gateway, stats=stats
    )
    assert totals == [5, 7, 9, 11] and stats.planned == result.meta.calls  # 5 samples, then 2 per pair judged
    (unit,) = result.units
    assert unit.evidence["clusters"] == [[0, 1, 3], [2], [4]]
    # distinct texts compared: Lyon vs Paris, Nice vs Paris, Nice vs Lyon; identical Paris answers are free
    assert result.meta.params["pairs_judged"] == 3 and len(judged) == 6
    assert len(asked) == 5 and result.meta.calls == 5 + 6
    assert all("What is the capital of France?" in p for p in judged)  # conditioned on the question
    assert unit.score == pytest.approx(-(0.6 * math.log(0.6) + 2 * 0.2 * math.log(0.2)))
    assert unit.evidence["n_clusters"] == 3 and unit.evidence["likelihood_semantic_entropy"] is None
    again = semantic_entropy.detect("What is the capital of France?", model=model, judge=judge, n=5, gateway=gateway)
    assert again.meta.calls == 0 and len(asked) == 5 and again.units[0].score == unit.score


def test_given_answers_need_no_answering_model(gateway: Gateway, scripted: Any) -> None:
    judge = LLMEntailment(
        scripted(judge_model([]), "scripted:judge"), gateway=gateway, prompt="semantic_entropy.entailment"
    )
    result = semantic_entropy.detect(
        "Capital?", answers=["The capital is Paris.", "The capital is Paris."], judge=judge, base=10, gateway=gateway
    )
    assert result.units[0].score == 0.0 and result.meta.calls == 0 and result.meta.params["answers_given"]
    with pytest.raises(ConfigError, match="needs model to sample answers, or answers"):
        semantic_entropy.detect("Capital?", judge=judge, gateway=gateway)
    with pytest.raises(ConfigError, match="semantic-entropy needs question"):
        semantic_entropy.detect("  ", answers=["x"], judge=judge, gateway=gateway)


def test_entropies_with_log_likelihoods_by_hand() -> None:
    lls = [math.log(0.5), math.log(0.25), math.log(0.25)]
    got = entropies([[0, 1], [2]], lls)
    assert got["likelihood_semantic_entropy"] == pytest.approx(-(0.75 * math.log(0.75) + 0.25 * math.log(0.25)))
    assert got["naive_entropy"] == pytest.approx((math.log(2) + 2 * math.log(4)) / 3)
    assert entropies([[0, 1], [2]], [lls[0], None, lls[2]])["likelihood_semantic_entropy"] is None
    # a cluster whose answers all have log-likelihood -inf has probability 0: finite entropy, no NaN
    impossible = entropies([[0, 1], [2]], [math.log(0.5), math.log(0.5), -math.inf])
    assert impossible["likelihood_semantic_entropy"] == 0.0
    undefined = entropies([[0], [1]], [-math.inf, -math.inf])
    assert undefined["likelihood_semantic_entropy"] is None and undefined["naive_entropy"] is None


def test_local_model_answers_carry_log_likelihoods(gateway: Gateway, scripted: Any) -> None:
    """The log-prob path end to end on the tiny local model (judged by a scripted judge)."""
    judge = LLMEntailment(
        scripted(lambda p, q: "Entailment", "scripted:yes-judge"), gateway=gateway, prompt="semantic_entropy.entailment"
    )
    result = semantic_entropy.detect(
        "What is the capital of France?", model="local:smollm2-135m", judge=judge, n=3, gateway=gateway
    )
    lls = result.units[0].evidence["log_likelihoods"]
    assert len(lls) == 3 and all(ll is not None and ll < 0 for ll in lls)
    assert result.units[0].evidence["likelihood_semantic_entropy"] is not None
