"""Direct Question and grounded in one call (issue 45, part 1): every numbered sentence asked at once
(grounded: against one chunk), each verdict's probability read from its own token, and a sentence the
reply misses, repeats with another answer or garbles asked alone with version 1's prompt (a fallback,
counted); version 1 unchanged."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

import halluscope
from halluscope.backends.gateway import Gateway
from halluscope.prompts.parsers import numbered_yes_no, one_call_verdicts
from halluscope.scoring.token_probability import token_at

TEXT = "Paris is in France. Paris is in Spain. The Seine flows there. It has a tower."


def test_the_verdict_tokens_probabilities_worked_by_hand() -> None:
    tokens = [
        {"token": "1", "logprob": -0.01},
        {"token": ".", "logprob": -0.01},
        {"token": " Yes", "logprob": math.log(0.9)},
        {"token": "\n2", "logprob": -0.01},
        {"token": ".", "logprob": -0.01},
        {"token": " No", "logprob": math.log(0.7)},
    ]
    assert token_at(tokens, 3) is tokens[2]  # 'Yes' starts at 3 of "1. Yes\n2. No"
    assert token_at(tokens, 99) is None
    parsed = numbered_yes_no("1. Yes\n2. No")
    read = one_call_verdicts(parsed, tokens, 2)
    assert read[0] == ("yes", tokens[2]) and read[1] == ("no", tokens[5])
    assert one_call_verdicts(parsed, None, 2) == {0: ("yes", None), 1: ("no", None)}


def test_missing_repeated_and_garbled_verdicts_are_left_for_their_own_call() -> None:
    parsed = numbered_yes_no("1. Yes\n2. No\n2. Yes\n4. Yes\n9. No")
    assert one_call_verdicts(parsed, None, 4) == {0: ("yes", None), 3: ("yes", None)}  # 2 conflicts, 3 missing, 9 out
    assert one_call_verdicts(None, None, 4) == {}  # an unreadable reply: every sentence alone


def replies(asked: list[str]) -> Any:
    def respond(prompt: str, _params: dict[str, Any]) -> str:
        asked.append(prompt)
        if "Claims:" in prompt:  # the one-call prompt: 2 repeated with another answer, 3 missing, 4 garbled
            return "1. Yes\n2. No\n2. Yes\n4. Perhaps"
        return "No" if "Spain" in prompt or "tower" in prompt else "Yes"

    return respond


def test_one_call_per_answer_plus_the_fallbacks(gateway: Gateway, scripted: Any) -> None:
    asked: list[str] = []
    model = scripted(replies(asked))
    det = halluscope.detector("direct-question", model=model, gateway=gateway, batch=True)
    result = det.detect(text=TEXT, prompt="Tell me about Paris.")
    assert result.meta.calls == 1 + 3 and result.meta.events["asked_alone"] == 3
    assert [u.score for u in result.units] == [0.0, 1.0, 0.0, 1.0]  # the fallbacks' own answers
    assert [u.evidence["asked_alone"] for u in result.units] == [False, True, True, True]
    one_call = [p for p in asked if "Claims:" in p]
    assert len(one_call) == 1 and all(f"{i}. " in one_call[0] for i in (1, 2, 3, 4))
    assert sum("Claim:" in p for p in asked) == 3  # E.4, version 1's prompt, for each fallback
    again = det.detect(text=TEXT, prompt="Tell me about Paris.")
    assert again.meta.calls == 0 and again.meta.cache_hits == 4
    per_sentence = halluscope.detector("direct-question", model=model, gateway=gateway).detect(
        text=TEXT, prompt="Tell me about Paris."
    )
    assert "asked_alone" not in per_sentence.meta.events and per_sentence.meta.calls == 1  # sentence 1's E.4 is new
    assert [u.score for u in per_sentence.units] == [0.0, 1.0, 0.0, 1.0]


def test_a_clean_one_call_reply_is_the_only_call(gateway: Gateway, scripted: Any) -> None:
    model = scripted(lambda prompt, _p: "1. Yes\n2. No" if "Claims:" in prompt else "Yes")
    result = halluscope.detector("direct-question", model=model, gateway=gateway, batch=True).detect(
        text="Paris is in France. Paris is in Spain."
    )
    assert result.meta.calls == 1 and "asked_alone" not in result.meta.events and result.meta.params["batch"]
    assert [u.score for u in result.units] == [0.0, 1.0]


DOCS = ["Paris is the capital of France. The Seine flows through Paris.", "The Eiffel Tower stands in Paris."]


def support_replies(asked: list[str]) -> Any:
    """One-call grounded: for the first chunk, sentence 1 Yes, 2 repeated with two answers, 3 missing;
    every other chunk, a clean 'No' for each; a pair asked alone: Yes unless it names Spain."""

    def respond(prompt: str, _params: dict[str, Any]) -> str:
        asked.append(prompt)
        if "Sentences:" in prompt:
            if "capital of France" in prompt.split("Question")[0]:
                return "1. Yes\n2. No\n2. Yes"
            count = prompt.split("Sentences:")[1].count("\n") + 1
            return "\n".join(f"{k}. No" for k in range(1, count + 1))
        return "No" if "Spain" in prompt.split("Sentence:")[-1] else "Yes"

    return respond


def test_grounded_checks_every_sentence_against_a_chunk_in_one_call(gateway: Gateway, scripted: Any) -> None:
    asked: list[str] = []
    model = scripted(support_replies(asked))
    text = "Paris is the capital of France. Paris is in Spain. The Seine flows there."
    result = halluscope.detector("grounded", model=model, gateway=gateway, batch=True).detect(text=text, context=DOCS)
    one_call = [p for p in asked if "Sentences:" in p]
    assert len(one_call) == 2  # one per chunk, not one per (sentence, chunk)
    assert result.meta.events["asked_alone"] == 2 and result.meta.calls == 2 + 2  # sentences 2 and 3 on chunk 1
    assert [u.score for u in result.units] == [0.0, 1.0, 0.0]
    with pytest.raises(halluscope.ConfigError, match="an NLI judge reads pairs"):
        from halluscope.methods.grounded import build

        build(_NLI(), gateway, batch=True)


class _NLI(halluscope.Entailment):
    """An NLI judge stand-in: the one-call check is refused before it is asked anything."""

    name = "nli:stand-in"

    def judge_many(self, pairs: Any, question: Any = None, stats: Any = None) -> Any:
        raise AssertionError("never asked")


def scgp_replies(asked: list[str]) -> Any:
    """One-call SelfCheck-Prompt: against the sample about France, 1 Yes, 2 No, 3 garbled; against the other,
    a clean line each; a check asked alone: Yes unless the sentence names Spain."""

    def respond(prompt: str, _params: dict[str, Any]) -> str:
        asked.append(prompt)
        if "Sentences:" in prompt:
            if "in France" in prompt.split("Sentences:")[0]:
                return "1. Yes\n2. No\n3: Maybe"
            return "1. Yes\n2. No\n3. Yes"
        return "No" if "Spain" in prompt.split("Sentence:")[-1] else "Yes"

    return respond


def test_selfcheck_prompt_checks_every_sentence_against_a_sample_in_one_call(gateway: Gateway, scripted: Any) -> None:
    asked: list[str] = []
    model = scripted(scgp_replies(asked))
    text = "Paris is in France. Paris is in Spain. The Seine flows there."
    samples = ["Paris is in France.", "Paris lies on the Seine."]
    det = halluscope.detector("selfcheck-prompt", model=model, gateway=gateway, batch=True)
    result = det.detect(text=text, samples=samples)
    assert sum("Sentences:" in p for p in asked) == 2  # one per sample: S calls, not N x S
    assert result.meta.events["asked_alone"] == 1 and result.meta.calls == 2 + 1  # sentence 3 against sample 1
    assert [u.score for u in result.units] == [0.0, 1.0, 0.0]
    assert [len(u.evidence["supported"]) for u in result.units] == [2, 2, 2]
    per_pair = halluscope.detector("selfcheck-prompt", model=model, gateway=gateway).detect(text=text, samples=samples)
    assert "asked_alone" not in per_pair.meta.events and per_pair.meta.calls + per_pair.meta.cache_hits == 6


def test_the_one_call_checks_are_presets_every_bench_can_name(tmp_path: Path, gateway: Gateway, scripted: Any) -> None:
    from halluscope.bench import mine
    from halluscope.bench.runner import run
    from halluscope.runtime import registry

    assert {"direct-question:batch", "grounded:batch", "selfcheck-prompt:batch"} <= set(registry.sentence_methods())
    model = scripted(lambda prompt, _p: "1. Yes\n2. No" if "Claims:" in prompt else "Yes")
    rows = [{"text": "Paris is in France. Paris is in Spain.", "labels": [0, 1]}] * 2
    [plan] = mine.mine_plans(rows, ["direct-question:batch"], model=model, gateway=gateway)
    result = run(plan, tmp_path / "out", progress=False)
    assert result.meta.calls + result.meta.cache_hits == 2  # one call per answer
    assert [list(i.scores.values()) for i in result.items] == [[0.0, 1.0], [0.0, 1.0]]
