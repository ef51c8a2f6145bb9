"""A cascade on `grounded`: the fast check scores every sentence, and only a sentence whose fast score
lies in the band is checked again by the judge, its score replaced by the judge's; each unit says
whether it was escalated, and the calls are the escalated sentences' alone."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

import halluscope
from halluscope.backends.entailment import Entailment, Judgement
from halluscope.backends.gateway import CallStats, Gateway
from halluscope.errors import ConfigError

CONTEXT = "Ada Lovelace was born in London in 1815. She wrote notes on the Analytical Engine."
TEXT = "Ada Lovelace was born in London. She was born in Paris. She wrote about the engine."


class SureAndUnsure(Entailment):
    """A fast checker stand-in: sure of London (supported) and Paris (not), unsure of anything else."""

    name = "nli:stand-in"

    def __init__(self) -> None:
        self.pairs: list[tuple[str, str]] = []

    def judge_many(
        self, pairs: Sequence[tuple[str, str]], question: str | None = None, stats: CallStats | None = None
    ) -> list[Judgement]:
        self.pairs += pairs
        support = [0.95 if "London" in b else 0.05 if "Paris" in b else 0.5 for _, b in pairs]
        return [Judgement("entailment", {"entailment": p}) for p in support]


def test_only_the_sentences_the_fast_check_is_unsure_of_reach_the_judge(gateway: Gateway, scripted: Any) -> None:
    asked: list[str] = []
    judge = scripted(lambda prompt, params: asked.append(prompt) or "Yes")
    fast = SureAndUnsure()
    result = halluscope.detector("grounded", model=judge, fast=fast, gateway=gateway).detect(
        text=TEXT, context=[CONTEXT]
    )
    escalated = [u.evidence["escalated"] for u in result.units]
    assert escalated == [False, False, True]
    assert [u.evidence["fast_score"] for u in result.units] == pytest.approx([0.05, 0.95, 0.5])
    assert [u.score for u in result.units] == pytest.approx([0.05, 0.95, 0.0])  # the judge's Yes replaces 0.5
    assert len(asked) == 1 and "She wrote about the engine." in asked[0]  # one chunk, the one unsure sentence
    assert len(fast.pairs) == 3 and result.meta.calls == 1 and result.meta.params["escalated"] == 1
    assert result.meta.params["band"] == [0.2, 0.8]


def test_a_band_that_holds_every_score_escalates_every_sentence_and_an_empty_one_none(
    gateway: Gateway, scripted: Any
) -> None:
    judge = scripted(lambda prompt, params: "No")
    every = halluscope.detector("grounded", model=judge, fast=SureAndUnsure(), band=(0.0, 1.0), gateway=gateway)
    result = every.detect(text=TEXT, context=[CONTEXT])
    assert all(u.evidence["escalated"] for u in result.units) and [u.score for u in result.units] == [1.0] * 3
    none = halluscope.detector("grounded", model=judge, fast=SureAndUnsure(), band="0.6,0.6", gateway=gateway)
    result = none.detect(text=TEXT, context=[CONTEXT])
    assert not any(u.evidence["escalated"] for u in result.units) and result.meta.calls == 0


def test_a_cascade_refuses_what_it_cannot_run(gateway: Gateway, scripted: Any) -> None:
    judge = scripted(lambda prompt, params: "Yes")
    refused = {
        "band is LOW,HIGH with 0 <= LOW <= HIGH <= 1": {"band": (0.9, 0.1)},
        "band is LOW,HIGH \\(two numbers\\)": {"band": "0.2"},
        "no decompose, no batch": {"decompose": True},
        "fast takes a fitted checker or NLI model": {"fast": judge},
    }
    for message, given in refused.items():
        options = {"model": judge, "fast": SureAndUnsure(), **given}
        with pytest.raises(ConfigError, match=message):
            halluscope.detector("grounded", gateway=gateway, **options).detect(text=TEXT, context=[CONTEXT])
