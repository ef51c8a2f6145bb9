"""SelfCheck-Prompt as a LangGraph graph and SelfCheck-Unigram as a detector, on scripted models:
call counts, cache replay, the paper's 0.5 rule, and the bench and CLI paths."""

from __future__ import annotations

import json
import math
import threading
from pathlib import Path
from typing import Any

import pytest

from halluscope.backends.entailment import yes_probability
from halluscope.backends.gateway import CallStats, Gateway
from halluscope.bench.wikibio import run_bench
from halluscope.errors import ConfigError
from halluscope.methods import selfcheck_prompt, selfcheck_unigram
from halluscope.methods.sampling import concept_from_prompt
from halluscope.scoring import scgp_score, supported_probability

TEXT = "Einstein was a physicist. He was born in Paris. He developed relativity. He liked sailing."
SAMPLES = [
    "Einstein, a physicist born in Ulm, developed relativity.",
    "Einstein was born in Ulm.",
    "A physicist who developed relativity.",
]


def checker(seen: list[str]) -> Any:
    """Answers by content: regenerations mention Ulm; a check says No to Paris, Maybe to sailing."""
    lock = threading.Lock()

    def respond(prompt: str, params: dict[str, Any]) -> str:
        with lock:
            seen.append(prompt)
        if "Write an article" in prompt:  # seeded samples differ (seed + sample index)
            return f"Albert Einstein was born in Ulm. He developed relativity. Sample seed {params.get('seed')}."
        sentence = prompt.split("Sentence: ")[1]
        if "Paris" in sentence:
            return "No"
        return "Maybe" if "sailing" in sentence else "Yes, it is."

    return respond


@pytest.mark.parametrize("method", [selfcheck_prompt, selfcheck_unigram])
def test_samples_answer_the_users_question_asked_again(method: Any, gateway: Gateway, scripted: Any) -> None:
    """A caller's question is asked again for each sample (SelfCheckGPT: further responses to the same
    query); a question of the WikiBio form, and a concept, get FIBE's E.1 prompt about the person."""
    seen: list[str] = []

    def respond(prompt: str, params: dict[str, Any]) -> str:
        seen.append(prompt)
        return "Yes" if "Sentence: " in prompt else f"Einstein was born in Ulm. Sample {params.get('seed')}."

    model = scripted(respond)
    method.detect(TEXT, model=model, question="Where was Einstein born?", n=2, gateway=gateway)
    assert seen[:2] == ["Where was Einstein born?"] * 2
    seen.clear()
    method.detect(
        TEXT, model=model, question="This is a Wikipedia passage about Albert Einstein:", n=2, gateway=gateway
    )
    assert len(seen) >= 2 and all("Write an article" in p and "about Albert Einstein:" in p for p in seen[:2])
    seen.clear()
    method.detect(TEXT, model=model, concept="Albert Einstein", n=2, gateway=gateway)
    assert all("Write an article" in p for p in seen[:2])


def test_scgp_on_given_samples_makes_n_times_r_calls_and_a_rerun_none(gateway: Gateway, scripted: Any) -> None:
    seen: list[str] = []
    model = scripted(checker(seen))
    result = selfcheck_prompt.detect(TEXT, model=model, samples=SAMPLES, gateway=gateway)
    assert [u.text for u in result.units] == TEXT.replace(". ", ".|").split("|")
    assert result.meta.calls == len(SAMPLES) * 4 and len(seen) == 12
    assert [u.score for u in result.units] == [0.0, 1.0, 0.0, 0.5]  # Yes 1, No 0, anything else 0.5
    assert result.units[1].evidence["supported"] == ["no", "no", "no"]
    assert result.units[3].evidence["supported"] == [None, None, None]
    assert result.meta.parse_failures == 3 and result.meta.params["samples_given"] is True
    assert result.meta.prompts == [gateway.registry.get("selfcheck.prompt").ref]
    again = selfcheck_prompt.detect(TEXT, model=model, samples=SAMPLES, gateway=gateway)
    assert again.meta.calls == 0 and again.meta.cache_hits == 12 and len(seen) == 12
    assert [u.score for u in again.units] == [u.score for u in result.units]


def test_scgp_regenerates_n_passages_first(gateway: Gateway, scripted: Any) -> None:
    seen: list[str] = []
    result = selfcheck_prompt.detect(
        TEXT, model=scripted(checker(seen)), concept="Albert Einstein", n=2, gateway=gateway
    )
    assert result.meta.calls == 2 + 2 * 4  # N + N|R|
    assert sum("Write an article of about 4 lines." in p for p in seen) == 2
    assert sum("This is a Wikipedia passage about Albert Einstein:" in p for p in seen) == 2
    assert result.evidence["samples"] == [
        f"Albert Einstein was born in Ulm. He developed relativity. Sample seed {s}." for s in (0, 1)
    ]


def test_scgp_graph_state_and_fan_out_order(gateway: Gateway, scripted: Any) -> None:
    graph = selfcheck_prompt.build(scripted(checker([])), gateway, n=3)
    stats = CallStats()
    out = graph.invoke(
        {"sentences": ["A physicist.", "Born in Paris."], "samples": SAMPLES}, {"configurable": {"stats": stats}}
    )
    assert out["scores"] == [0.0, 1.0] and len(out["verdicts"]) == 6 and stats.calls == 6
    assert {(v["i"], v["j"]) for v in out["verdicts"]} == {(i, j) for i in range(2) for j in range(3)}


def test_scgp_needs_a_text_and_samples_or_a_concept(gateway: Gateway, scripted: Any) -> None:
    model = scripted(checker([]))
    with pytest.raises(ConfigError, match="selfcheck-prompt needs text, or sentences"):
        selfcheck_prompt.detect("   ", model=model, samples=SAMPLES, gateway=gateway)
    with pytest.raises(ConfigError, match="needs samples, or question to regenerate samples, or concept"):
        selfcheck_prompt.detect(TEXT, model=model, gateway=gateway)
    assert concept_from_prompt("This is a Wikipedia passage about Bryan McClendon:") == "Bryan McClendon"
    assert concept_from_prompt("Ada Lovelace") == "Ada Lovelace"


def test_unigram_detector_with_given_and_regenerated_samples(gateway: Gateway, scripted: Any) -> None:
    given = selfcheck_unigram.detect(TEXT, samples=SAMPLES)
    assert given.meta.calls == 0 and len(given.units) == 4
    assert all(u.score is not None and u.score > 0 for u in given.units)
    seen: list[str] = []
    regenerated = selfcheck_unigram.detect(
        TEXT, model=scripted(checker(seen)), concept="Albert Einstein", n=3, gateway=gateway
    )
    assert regenerated.meta.calls == 3 and regenerated.meta.params["samples_given"] is False
    unseen = selfcheck_unigram.detect("Zebras.", samples=["x"], sentences=["Quokkas."])
    assert unseen.units[0].score is None and unseen.units[0].evidence["unseen_token"] is True
    assert math.isfinite(given.units[0].evidence["avg_neg_logprob"])


def test_bench_runs_scgp_on_the_datasets_samples(
    scripted: Any, gateway: Gateway, tmp_path: Path, data_dir: Path
) -> None:
    seen: list[str] = []
    runs = run_bench(
        ["selfcheck-prompt", "selfcheck-unigram"],
        tmp_path,
        data_dir,
        limit=3,
        n=2,
        progress=False,
        model=scripted(checker(seen), "scripted:judge"),
        gateway=gateway,
    )
    scgp, unigram = runs
    sentences = scgp.metrics["n_sentences"]
    assert scgp.meta.calls == 2 * sentences == len(seen) and scgp.meta.models == ["scripted:judge"]
    assert scgp.meta.prompts == [gateway.registry.get("selfcheck.prompt").ref]
    assert unigram.meta.calls == 0 and unigram.meta.models == [] and unigram.params["model"] is None
    summary = [
        json.loads((tmp_path / m / "results.json").read_text()) for m in ("selfcheck-prompt", "selfcheck-unigram")
    ]
    assert not (tmp_path / "results.json").exists()  # several methods: one results.json each
    assert [r["params"]["method"] for r in summary] == ["selfcheck-prompt", "selfcheck-unigram"]
    assert "| selfcheck-prompt |" in (tmp_path / "report.md").read_text()
    with pytest.raises(ConfigError, match="needs a model"):
        run_bench(["selfcheck-prompt"], tmp_path, data_dir, limit=1, progress=False)


def test_detect_reports_each_node_run_for_progress(gateway: Gateway, scripted: Any) -> None:
    steps: list[str] = []
    selfcheck_prompt.detect(TEXT, model=scripted(checker([])), samples=SAMPLES, gateway=gateway, on_step=steps.append)
    assert steps.count("check") == 12 and steps[0] == "split" and steps[-1] == "score"


# ---------------------------------------------------------------- scoring="prob" (our option)


def test_supported_probability_reads_p_yes_and_falls_back_to_the_papers_value() -> None:
    # top log-probs Yes -0.2, No -1.8: p(Yes) / (p(Yes) + p(No)) = 1 / (1 + e^-1.6) = 0.8320
    p_yes = yes_probability(
        [
            {
                "token": "Yes",
                "logprob": -0.2,
                "top_logprobs": [{"token": "Yes", "logprob": -0.2}, {"token": "No", "logprob": -1.8}],
            }
        ]
    )
    assert p_yes == pytest.approx(0.8320, abs=1e-4)
    assert supported_probability(p_yes, "yes") == (p_yes, False)
    assert scgp_score([supported_probability(p_yes, "yes")[0], 0.5]) == pytest.approx((0.1680 + 0.5) / 2, abs=1e-4)
    assert supported_probability(None, "no") == (0.0, True) and supported_probability(None, None) == (0.5, True)


def test_prob_scoring_makes_the_same_calls_with_log_probs_and_scores_continuously(gateway: Gateway) -> None:
    """A server that answers No with log-prob -0.05 (no alternatives): p(Yes) = 1 - e^-0.05, so every
    sentence scores e^-0.05 = 0.951 instead of the paper's 1.0; the same 2 x 2 calls, asked with log-probs
    (cached apart from the discrete run's)."""
    from tests.stub_servers import StubAPI

    text = "Einstein was born in Paris. He developed relativity."
    samples = ["Einstein was born in Ulm.", "He worked in Bern."]
    with StubAPI(answer="No") as stub:
        spec = f"openai-compatible:{stub.base_url}/v1#m"
        prob = selfcheck_prompt.detect(text, model=spec, samples=samples, scoring="prob", gateway=gateway)
        assert prob.meta.calls == 4 == len(stub.requests) and prob.meta.params["scoring"] == "prob"
        assert all(r["body"]["logprobs"] and r["body"]["top_logprobs"] == 10 for r in stub.requests)
        discrete = selfcheck_prompt.detect(text, model=spec, samples=samples, gateway=gateway)
        assert discrete.meta.calls == 4 and not any(r["body"].get("logprobs") for r in stub.requests[4:])
        again = selfcheck_prompt.detect(text, model=spec, samples=samples, scoring="prob", gateway=gateway)
        assert again.meta.calls == 0 and len(stub.requests) == 8
    assert [u.score for u in prob.units] == pytest.approx([math.exp(-0.05)] * 2)
    assert prob.units[0].evidence["p_yes"] == pytest.approx([1 - math.exp(-0.05)] * 2)
    assert [u.score for u in discrete.units] == [1.0, 1.0] and "p_yes" not in discrete.units[0].evidence
    assert prob.meta.events == {}


def test_prob_scoring_without_log_probs_falls_back_with_an_event(gateway: Gateway, scripted: Any) -> None:
    seen: list[str] = []
    model = scripted(checker(seen), "scripted:judge")  # a chat model object: no log-probs to ask for
    text = "Einstein was born in Paris. He developed relativity."
    result = selfcheck_prompt.detect(text, model=model, samples=["a.", "b."], scoring="prob", gateway=gateway)
    discrete = selfcheck_prompt.detect(text, model=model, samples=["a.", "b."], gateway=gateway)
    assert [u.score for u in result.units] == [u.score for u in discrete.units]
    assert result.meta.events == {"no_probability": 4} and discrete.meta.calls == 0  # the same requests
    with pytest.raises(ConfigError, match="unknown SelfCheck-Prompt scoring 'soft'"):
        selfcheck_prompt.build(model, gateway, scoring="soft")  # type: ignore[arg-type]
