"""Paragraph semantic entropy as a LangGraph graph, on a scripted model: the decompose -> question ->
resample -> cluster protocol, call counts, entropies worked by hand, the refusal rule, retries of
unreadable question lists, fallbacks, cache replay and the claim-to-sentence mapping."""

from __future__ import annotations

import math
import re
import threading
from typing import Any

import pytest

from halluscope.backends.entailment import LLMEntailment
from halluscope.backends.gateway import CallStats, Gateway
from halluscope.errors import ConfigError
from halluscope.methods import semantic_entropy_paragraph as paragraph
from halluscope.scoring import claim_entropy, question_entropy, unanswered
from halluscope.text import align_claims

TEXT = "Ada Lovelace was born in London. She wrote the first program. She died in 1900."
CLAIMS = ["Ada Lovelace was born in London.", "Ada Lovelace wrote the first program.", "Ada Lovelace died in 1900."]
QUESTION = "Who was Ada Lovelace?"
YEARS = ["1852", "1900", "1815"]


class Writer:
    """A scripted model that decomposes TEXT into CLAIMS, asks three questions per call, and answers:
    the birthplace always London, the program always 'unknown', the year of death by sample."""

    def __init__(self, decompose: str = "\n".join(f"- {c}" for c in CLAIMS), garble_first_ask: bool = True) -> None:
        self.decompose = decompose
        self.garble_first_ask = garble_first_ask
        self.prompts: list[str] = []
        self.lock = threading.Lock()

    def __call__(self, prompt: str, params: dict[str, Any]) -> str:
        with self.lock:
            self.prompts.append(prompt)
        if prompt.startswith("Please list the specific factual propositions"):
            return self.decompose
        seed = params.get("seed")
        if "Generate a list of three questions" in prompt:
            claim = prompt.split("You see the sentence:\n")[1].split("\n")[0]
            if "program" in claim and seed == 0 and self.garble_first_ask:
                return "I cannot think of any."
            topic, answer = {"born": ("Where was she born", "London"), "program": ("What did she write", "notes")}.get(
                next((w for w in ("born", "program") if w in claim), ""), ("When did she die", "1900")
            )
            return "\n".join(f"{i}. {topic} (v{seed}-{i})? - {answer}" for i in (1, 2, 3))
        if "Please answer this question." in prompt:
            if "Where was she born" in prompt:
                return "London"
            if "What did she write" in prompt:
                return "Unknown"
            return YEARS[seed % 3]
        raise AssertionError(f"unexpected prompt: {prompt[:80]}")


def judge_model(seen: list[str]) -> Any:
    """Entailment iff the two answers are the same word (case-insensitive)."""
    lock = threading.Lock()

    def respond(prompt: str, params: dict[str, Any]) -> str:
        with lock:
            seen.append(prompt)
        a = re.search(r"Possible Answer 1: (.*)", prompt).group(1)  # type: ignore[union-attr]
        b = re.search(r"Possible Answer 2: (.*)", prompt).group(1)  # type: ignore[union-attr]
        return "Entailment" if a.lower() == b.lower() else "Contradiction"

    return respond


def test_a_claims_entropy_by_hand() -> None:
    """The mean of its questions' entropies; no question: log 4, each of 4 answers its own cluster."""
    assert claim_entropy([0.0, math.log(2), math.log(4)], regenerated=3) == pytest.approx(math.log(8) / 3)
    assert claim_entropy([], regenerated=3) == pytest.approx(math.log(4))
    assert claim_entropy([], regenerated=3, base=2) == pytest.approx(2.0)


def test_refusal_rule_and_question_entropy_by_hand() -> None:
    assert unanswered(["notes", "Unknown", "unknown", "It is unclear"])  # 3 of 4
    assert unanswered(["1900", "not available", "Not provided.", "1900"])  # 2 >= 4 // 2
    assert not unanswered(["1900", "1852", "unknown", "1900"])
    assert question_entropy(["notes", "Unknown", "unknown", "unknown"], [1, 3]) == pytest.approx(math.log(4))
    assert question_entropy(["1900", "1852", "1900", "1815"], [2, 1, 1]) == pytest.approx(
        -(0.5 * math.log(0.5) + 2 * 0.25 * math.log(0.25))
    )
    assert question_entropy(["x", "x", "x", "x"], [4], base=10) == 0.0
    with pytest.raises(ValueError, match="clusters hold 3 answers"):
        question_entropy(["a", "b"], [2, 1])


def test_decompose_question_resample_cluster_end_to_end(gateway: Gateway, scripted: Any) -> None:
    writer, judged = Writer(), []
    model = scripted(writer, "scripted:writer")
    judge = LLMEntailment(
        scripted(judge_model(judged), "scripted:judge"), gateway=gateway, prompt="semantic_entropy.entailment"
    )
    totals: list[int] = []
    stats = CallStats(on_plan=totals.append)
    result = paragraph.detect(TEXT, question=QUESTION, model=model, judge=judge, gateway=gateway, stats=stats)
    # the total is known once the claims are: 1 decompose, then 3 claims x 20, the retry and the judge's pairs
    assert totals[:2] == [1, paragraph.planned_calls(3)] and stats.planned == result.meta.calls

    # 1 decompose + 3 claims x (2 question calls + 6 x 3 new answers) + 1 retry of an unreadable list
    model_calls = len(writer.prompts)
    assert model_calls == paragraph.planned_calls(3) + 1 == 62
    # judge: claim 1 compares 'notes' with 'Unknown' (1 pair per question), claim 2 compares the three
    # distinct years (3 pairs per question); the identical London answers are free
    assert result.meta.params["pairs_judged"] == 6 * 1 + 6 * 3 and len(judged) == 2 * 24
    assert result.meta.calls == model_calls + len(judged)
    assert result.meta.params["claims"] == 3 and result.meta.params["questions"] == 18
    assert result.meta.events == {"questions_unparsed": 1}

    # the first claim has no text so far; later ones see claims 1..k-1 joined by spaces
    asks = [p for p in writer.prompts if "Generate a list of three questions" in p]
    assert sum(not p.startswith("Following this text") for p in asks) == 2
    assert any(f"Following this text:\n{CLAIMS[0]} {CLAIMS[1]}\nYou see the sentence:\n{CLAIMS[2]}" in p for p in asks)
    answers = [p for p in writer.prompts if "Please answer this question." in p]
    assert sum("First, we observe the following question" in p for p in answers) == 18
    assert all(f'the question "{QUESTION}"' in p for p in answers)
    # each comparison is conditioned on the generated question the answers answer
    assert all(re.search(r"question (What did she write|When did she die) \(v\d-\d\)\?", p) for p in judged)

    born, program, died = result.units
    assert [u.text for u in result.units] == TEXT.replace(". ", ".|").split("|")
    assert born.score == 0.0
    assert program.score == pytest.approx(math.log(4))  # 'Unknown' three times in four: maximum entropy
    assert died.score == pytest.approx(-(0.5 * math.log(0.5) + 2 * 0.25 * math.log(0.25)))
    (claim,) = died.evidence["claims"]
    assert claim["text"] == CLAIMS[2] and len(claim["questions"]) == 6
    q0 = claim["questions"][0]
    assert q0["answers"] == ["1900", "1852", "1900", "1815"] and q0["clusters"] == [[0, 2], [1], [3]]
    assert program.evidence["claims"][0]["questions"][0]["unanswered"] is True
    assert program.evidence["events"] == ["questions_unparsed"]

    again = paragraph.detect(TEXT, question=QUESTION, model=model, judge=judge, gateway=gateway)
    assert again.meta.calls == 0 and [u.score for u in again.units] == [u.score for u in result.units]


def test_unreadable_claims_fall_back_to_sentences_and_bad_input_is_named(gateway: Gateway, scripted: Any) -> None:
    writer = Writer(decompose="Sorry, I can only talk about code.", garble_first_ask=False)
    model = scripted(writer, "scripted:writer")
    judge = LLMEntailment(
        scripted(judge_model([]), "scripted:judge"), gateway=gateway, prompt="semantic_entropy.entailment"
    )
    result = paragraph.detect(TEXT, question=QUESTION, model=model, judge=judge, gateway=gateway)
    assert result.meta.events == {"decompose_unparsed": 1}
    assert result.meta.params["paragraph_events"] == ["decompose_unparsed"]
    assert [c["text"] for u in result.units for c in u.evidence["claims"]] == [u.text for u in result.units]
    assert all(u.score is not None for u in result.units)
    with pytest.raises(ConfigError, match="semantic-entropy-paragraph needs question"):
        paragraph.detect(TEXT, question=" ", model=model, judge=judge, gateway=gateway)
    with pytest.raises(ConfigError, match="semantic-entropy-paragraph needs text, or sentences"):
        paragraph.detect("  ", question=QUESTION, model=model, judge=judge, gateway=gateway)


def test_a_claim_without_questions_gets_the_maximum_entropy(gateway: Gateway, scripted: Any) -> None:
    def respond(prompt: str, params: dict[str, Any]) -> str:
        return "- Ada Lovelace was born in London." if prompt.startswith("Please list") else "no list at all"

    judge = LLMEntailment(
        scripted(judge_model([]), "scripted:judge"), gateway=gateway, prompt="semantic_entropy.entailment"
    )
    result = paragraph.detect(
        "Ada Lovelace was born in London.", question=QUESTION, model=scripted(respond), judge=judge, gateway=gateway
    )
    (unit,) = result.units
    assert unit.score == pytest.approx(math.log(4))
    assert result.meta.events == {"questions_unparsed": 2 * paragraph.QUESTION_ATTEMPTS, "no_questions": 1}
    assert result.meta.calls == 1 + 2 * paragraph.QUESTION_ATTEMPTS


def test_claims_map_to_the_sentences_they_came_from() -> None:
    sentences = [
        "Joshua Schrier is an American chemist.",
        "He is a Professor of Chemistry at Fordham University.",
        "He retired.",
    ]
    claims = [
        "Joshua Schrier is American.",
        "Joshua Schrier is a chemist.",
        "Joshua Schrier is a Professor of Chemistry.",
        "Joshua Schrier works at Fordham University.",
    ]
    # the name in every claim weighs 1/4 a word; 'retired' matches no claim, so the sentence borrows
    # the claim covering most of its words (none: the first)
    assert align_claims(claims, sentences) == [[0, 1], [2, 3], [0]]
    assert align_claims([], sentences) == [[], [], []]
