"""Entailment: the bidirectional rule, label probabilities, the LLM judge (scripted and real),
and the transformers NLI path on a tiny randomly initialised classifier built here."""

from __future__ import annotations

import asyncio
import math
import threading
from pathlib import Path
from typing import Any

import pytest

from halluscope.backends.entailment import LLMEntailment, NLIEntailment, equivalent, label_probabilities
from halluscope.backends.gateway import CallStats, Gateway
from halluscope.errors import ConfigError
from tests.tiny_nli import build_tiny_nli


@pytest.mark.parametrize(
    ("forward", "backward", "strict", "lax"),
    [
        ("entailment", "entailment", True, True),
        ("entailment", "neutral", False, True),
        ("neutral", "neutral", False, False),
        ("entailment", "contradiction", False, False),
        ("contradiction", "contradiction", False, False),
        ("entailment", None, False, False),
    ],
)
def test_bidirectional_rule_of_the_official_code(forward: Any, backward: Any, strict: bool, lax: bool) -> None:
    assert equivalent(forward, backward, "strict") is strict
    assert equivalent(backward, forward, "lax") is lax
    with pytest.raises(ConfigError):
        equivalent(forward, backward, "loose")  # type: ignore[arg-type]


def test_label_probabilities_from_the_first_answer_token() -> None:
    entries = [
        {"token": " ", "logprob": 0.0, "top_logprobs": []},
        {
            "token": "Ent",
            "logprob": math.log(0.6),
            "top_logprobs": [
                {"token": "Ent", "logprob": math.log(0.6)},
                {"token": "Contr", "logprob": math.log(0.2)},
                {"token": " Neutral", "logprob": math.log(0.1)},
                {"token": "The", "logprob": math.log(0.1)},
            ],
        },
    ]
    probs = label_probabilities(entries)
    assert probs == pytest.approx({"entailment": 2 / 3, "contradiction": 2 / 9, "neutral": 1 / 9})
    assert (
        label_probabilities([{"token": "The", "logprob": 0.0, "top_logprobs": [{"token": "The", "logprob": 0.0}]}])
        is None
    )
    assert label_probabilities(None) is None


def judge_by_content(seen: list[str]) -> Any:
    lock = threading.Lock()

    def respond(prompt: str, params: dict[str, Any]) -> str:
        with lock:
            seen.append(prompt)
        one = prompt.split("Possible Answer 1: ")[1].split("\n")[0]
        two = prompt.split("Possible Answer 2: ")[1].split("\n")[0]
        if "Lyon" in (one + two):
            return "Contradiction."
        if "weather" in (one + two):
            return "I cannot tell."
        return "entailment" if ("short" not in one) else "Neutral"

    return respond


def test_llm_judge_through_the_gateway(gateway: Gateway, scripted: Any) -> None:
    seen: list[str] = []
    judge = LLMEntailment(scripted(judge_by_content(seen)), gateway=gateway, prompt="semantic_entropy.entailment")
    assert judge.with_probs is False  # a scripted model has no log-probs
    q = "What is the capital of France?"
    assert judge.bidirectional("Paris is the capital.", "The capital is Paris.", q)
    assert not judge.bidirectional("Paris is the capital.", "Lyon is the capital.", q)
    assert not judge.bidirectional("Paris, short.", "Paris is the capital.", q, mode="strict")
    assert judge.bidirectional("Paris, short.", "Paris is the capital.", q, mode="lax")
    assert all(p.startswith(f"We are evaluating answers to the question {q}\n") for p in seen)
    unparsed = judge.judge("It rains.", "The weather is bad.", q)
    assert unparsed.label is None and unparsed.raw == "I cannot tell."
    calls = len(seen)
    judge.judge_many([("Paris is the capital.", "The capital is Paris.")], q)
    assert len(seen) == calls  # judged before: served from the cache
    pairs = [("Paris is the capital.", "Lyon is the capital."), ("Berlin is big.", "Berlin is a city.")]
    awaited = asyncio.run(judge.ajudge_many(pairs, q))
    assert awaited == judge.judge_many(pairs, q) and len(seen) == calls + 1  # one new pair, then cached


@pytest.fixture(scope="module")
def tiny_nli(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_nli(
        tmp_path_factory.mktemp("tiny_nli"),
        "paris is the capital of france lyon berlin germany a city river",
        {0: "CONTRADICTION", 1: "NEUTRAL", 2: "ENTAILMENT"},
    )


PAIRS = [
    ("paris is the capital of france", "paris is a city"),
    ("berlin", "lyon is a river"),
    ("the capital", "germany"),
    ("a", "a city of france"),
]


@pytest.mark.slow
def test_nli_labels_follow_the_configs_label_order(tiny_nli: Path, tmp_path: Path) -> None:
    import json
    import shutil

    nli = NLIEntailment(tiny_nli, batch_size=3, threads=1)
    logits = nli.logits(PAIRS)
    stats = CallStats()
    judgements = nli.judge_many(PAIRS, stats=stats)
    assert asyncio.run(nli.ajudge_many(PAIRS)) == judgements  # a local judge's async form: a thread
    # every batch is a checker pass, counted apart from LLM calls (a max_calls budget is not spent on it)
    assert stats.checker_passes == -(-len(PAIRS) // 3) and stats.calls == 0 and nli.replies_for(len(PAIRS)) == 0
    order = {0: "contradiction", 1: "neutral", 2: "entailment"}
    for row, j in zip(logits, judgements, strict=True):
        assert j.label == order[row.index(max(row))]
        assert j.probs is not None and sum(j.probs.values()) == pytest.approx(1.0)
    # the same weights under another label order (as BART-MNLI vs RoBERTa-MNLI differ): labels follow id2label
    other = tmp_path / "reordered"
    shutil.copytree(tiny_nli, other)
    config = json.loads((other / "config.json").read_text())
    config["id2label"] = {"0": "ENTAILMENT", "1": "NEUTRAL", "2": "CONTRADICTION"}
    config["label2id"] = {"ENTAILMENT": 0, "NEUTRAL": 1, "CONTRADICTION": 2}
    (other / "config.json").write_text(json.dumps(config))
    swapped = {"entailment": "contradiction", "contradiction": "entailment", "neutral": "neutral"}
    assert [j.label for j in NLIEntailment(other).judge_many(PAIRS)] == [swapped[j.label] for j in judgements]


@pytest.mark.slow
def test_nli_batches_give_the_same_answers_as_single_pairs(tiny_nli: Path) -> None:
    nli = NLIEntailment(tiny_nli, batch_size=4)
    batched = nli.logits(PAIRS)
    single = [nli.logits([p])[0] for p in PAIRS]
    for a, b in zip(batched, single, strict=True):
        assert a == pytest.approx(b, abs=1e-5)
    forward, backward = nli.judge_many([PAIRS[0], PAIRS[0][::-1]])
    assert nli.bidirectional(*PAIRS[0]) == equivalent(forward.label, backward.label)


def test_a_classifier_without_nli_labels_is_refused() -> None:
    with pytest.raises(ConfigError, match="not an NLI model"):
        NLIEntailment._label_index({0: "NEGATIVE", 1: "POSITIVE"})
    with pytest.raises(ConfigError, match="not an NLI model"):
        NLIEntailment._label_index({0: "LABEL_0", 1: "LABEL_1", 2: "LABEL_2"})


def test_a_two_way_nli_head_is_read_by_name_or_in_selfcheckgpts_order() -> None:
    """SelfCheckGPT's DeBERTa has no neutral head: (entailment, contradiction), named or as LABEL_0/1."""
    assert NLIEntailment._label_index({0: "CONTRADICTION", 1: "ENTAILMENT"}) == {"contradiction": 0, "entailment": 1}
    assert NLIEntailment._label_index({0: "LABEL_0", 1: "LABEL_1"}) == {"entailment": 0, "contradiction": 1}


PROBES = [
    (
        "What is the capital of France?",
        "Paris is the capital of France.",
        "The capital of France is Paris.",
        "entailment",
    ),
    (
        "What is the capital of France?",
        "Paris is the capital of France.",
        "Lyon is the capital of France.",
        "contradiction",
    ),
    ("Who wrote Hamlet?", "Shakespeare wrote Hamlet.", "Hamlet was written by William Shakespeare.", "entailment"),
    ("Who wrote Hamlet?", "Shakespeare wrote Hamlet.", "Christopher Marlowe wrote Hamlet.", "contradiction"),
    ("What colour is the sky on a clear day?", "The sky is blue.", "On a clear day the sky is blue.", "entailment"),
    ("What colour is the sky on a clear day?", "The sky is blue.", "The sky is green.", "contradiction"),
    ("When did World War II end?", "World War II ended in 1945.", "The war ended in 1945.", "entailment"),
    ("When did World War II end?", "World War II ended in 1945.", "World War II ended in 1939.", "contradiction"),
    (
        "What is the boiling point of water at sea level?",
        "Water boils at 100 degrees Celsius.",
        "At sea level, water boils at 100 °C.",
        "entailment",
    ),
    (
        "What is the boiling point of water at sea level?",
        "Water boils at 100 degrees Celsius.",
        "Water boils at 50 degrees Celsius.",
        "contradiction",
    ),
    (
        "Who painted the Mona Lisa?",
        "Leonardo da Vinci painted the Mona Lisa.",
        "The Mona Lisa was painted by Leonardo da Vinci.",
        "entailment",
    ),
    (
        "Who painted the Mona Lisa?",
        "Leonardo da Vinci painted the Mona Lisa.",
        "Vincent van Gogh painted the Mona Lisa.",
        "contradiction",
    ),
]


@pytest.mark.slow
def test_the_default_local_judge_is_useful(gateway: Gateway) -> None:
    """Qwen2.5-Coder-1.5B, the default judge: 11 of 12 measured here; the 0.5B says 'entailment' to all."""
    judge = LLMEntailment("local:qwen2.5-coder-1.5b", gateway=gateway, prompt="semantic_entropy.entailment")
    results = [judge.judge(a, b, q) for q, a, b, _ in PROBES]
    right = sum(r.label == gold for r, (*_, gold) in zip(results, PROBES, strict=True))
    assert right >= 10, [r.label for r in results]
    for r in results:
        assert r.probs is not None and sum(r.probs.values()) == pytest.approx(1.0)
        assert max(r.probs, key=lambda k: r.probs[k]) == r.label  # type: ignore[index]


@pytest.mark.slow
def test_nli_zero_shot_ignores_neutral(tiny_nli: Path) -> None:
    """CLUE's Appendix A: softmax over the entailment and contradiction logits only."""
    from halluscope.backends.entailment import NLIZeroShot

    nli = NLIEntailment(tiny_nli)
    scores = NLIZeroShot(nli).scores(PAIRS)
    for row, score in zip(nli.logits(PAIRS), scores, strict=True):
        ent, con = row[2], row[0]  # id2label: 0 contradiction, 2 entailment
        assert score == pytest.approx(math.exp(ent) / (math.exp(ent) + math.exp(con)))


def test_llm_zero_shot_reads_p_yes_from_a_real_model(gateway: Gateway) -> None:
    from halluscope.backends.entailment import LLMZeroShot, yes_probability

    scorer = LLMZeroShot("local:smollm2-135m", gateway=gateway, prompt="clue.zero_shot")
    pair = ("Paris is the capital of France.", "This example is about France")
    (score,) = scorer.scores([pair])
    assert score is not None and 0.0 < score < 1.0
    reply = gateway.call("local:smollm2-135m", "clue.zero_shot", {"premise": pair[0], "hypothesis": pair[1]})
    assert reply.cached and yes_probability(reply.logprobs) == score  # every pair is cached
    assert asyncio.run(scorer.ascores([pair])) == [score]  # the async form reads the same entry


def test_llm_zero_shot_refuses_a_provider_without_logprobs(monkeypatch: pytest.MonkeyPatch, gateway: Gateway) -> None:
    from halluscope.backends.entailment import LLMZeroShot

    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    with pytest.raises(ConfigError, match="no log-probabilities"):
        LLMZeroShot("anthropic:claude-sonnet-4-5", gateway=gateway, prompt="clue.zero_shot")


def test_a_sentencepiece_vocabulary_is_read_with_the_normalization_it_was_built_with(tmp_path: Path) -> None:
    """transformers 5 reads a DeBERTa-v3 spm.model without its NFKC normalization: '½' and a left-to-right
    mark became [UNK] where transformers 4 (SelfCheckGPT's) reads '1⁄2' and a space. halluscope normalizes
    itself when the tokenizer does not, so the two give the same tokens (the NLI peer record shows it)."""
    from halluscope.backends.entailment import spm_normalized
    from tests.tiny_nli import build_tiny_deberta

    assert spm_normalized("8½ years") == "81⁄2 years" and spm_normalized("Kia\u200e; born") == "Kia ; born"
    assert spm_normalized("ＡＢ！") == "AB!"
    folder = build_tiny_deberta(
        tmp_path / "tiny", "eighty one half years . Kia was born . a b c", character_coverage=1.0
    )
    nli = NLIEntailment(folder)
    if nli.normalize:  # this transformers does not normalize: halluscope does, and both spellings read alike
        assert nli.tokenizer(nli._text("8½"))["input_ids"] == nli.tokenizer("81⁄2")["input_ids"]
    else:
        assert nli.tokenizer("8½")["input_ids"] == nli.tokenizer("81⁄2")["input_ids"]
