"""Our planted-falsehood biographies: each has one false sentence, and a method hits when it ranks
that sentence alone riskiest (a tie is a miss)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from halluscope.backends.gateway import Gateway
from halluscope.bench.planted import BIOGRAPHIES, run_planted


def test_every_biography_has_one_planted_sentence() -> None:
    assert len(BIOGRAPHIES) == 8 and len({b.person for b in BIOGRAPHIES}) == 8
    assert all(len(b.sentences) == 5 and 0 <= b.planted < 5 and b.truth for b in BIOGRAPHIES)


def test_a_method_that_doubts_only_the_planted_sentences_hits_every_one(
    gateway: Gateway, scripted: Any, tmp_path: Path
) -> None:
    planted = {b.sentences[b.planted] for b in BIOGRAPHIES}

    def knows(prompt: str, _params: dict[str, Any]) -> str:
        return "No" if any(s in prompt for s in planted) else "Yes"

    result = run_planted("direct-question", tmp_path, False, model=scripted(knows, "scripted:knows"), gateway=gateway)
    assert result.metrics["hits"] == 8 and result.metrics["hit_rate"] == 1.0
    assert result.meta.calls == 8 * 5 and (tmp_path / "report.md").read_text().count("  hit  ") == 8
    credulous = run_planted(
        "direct-question", tmp_path / "c", False, model=scripted(lambda p, k: "Yes", "scripted:yes"), gateway=gateway
    )
    assert credulous.metrics["hits"] == 0  # every sentence ties at the top: nothing singled out


def test_a_grounded_method_is_scored_against_each_biographys_documents(
    gateway: Any, scripted: Any, tmp_path: Any
) -> None:
    """`bench planted --method grounded` was offered and always failed ("grounded needs context"): each
    biography is now checked against its true sentences and the planted detail stated right."""
    from halluscope.bench.planted import BIOGRAPHIES, planted_plan
    from halluscope.bench.runner import run

    def judge(prompt: str, params: dict[str, Any]) -> str:  # supported when the context holds the sentence
        context = prompt.split("Context: ")[1].split("Question the sentence answers:")[0]
        sentence = prompt.split("Sentence: ")[1].split("Is the sentence supported")[0].strip().strip('"')
        return "Yes" if sentence in context else "No"

    result = run(planted_plan("grounded", model=scripted(judge), gateway=gateway), tmp_path, progress=False)
    assert result.metrics["hits"] == len(BIOGRAPHIES) and not result.failures
    assert all(b.truth in b.documents[0] and b.sentences[b.planted] not in b.documents[0] for b in BIOGRAPHIES)
