"""Direct Question as a method of its own (FIBE Appendix E.4): H_D = 1 - known, one call per
sentence, p(Yes) where the model gives log-probs, and the same cache entries as FIBE's +dq."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

import halluscope
from halluscope.backends.gateway import Gateway
from halluscope.bench.wikibio import load_wikibio, run_bench, sentence_scores
from halluscope.cli import main
from halluscope.methods import direct_question, fibe
from halluscope.results import DetectionResult
from tests.stub_servers import StubAPI

TEXT = "Einstein was born in Ulm. He developed relativity."
PROMPT = "This is a Wikipedia passage about Albert Einstein:"


def test_known_from_p_yes_and_the_same_calls_as_fibes_direct_question(gateway: Gateway) -> None:
    """A server that answers Yes with log-prob -0.05: known = p_1 = e^-0.05, H_D = 1 - e^-0.05 = 0.0488
    for each sentence, one call each; FIBE+DQ afterwards replays those two questions from the cache."""
    with StubAPI(answer="Yes") as stub:
        spec = f"openai-compatible:{stub.base_url}/v1#m"
        result = direct_question.detect(TEXT, model=spec, prompt=PROMPT, gateway=gateway)
        assert result.meta.calls == 2 == len(stub.requests)
        assert all(r["body"]["logprobs"] for r in stub.requests)
        assert (
            '"This is a Wikipedia passage about Albert Einstein:"' in stub.requests[0]["body"]["messages"][0]["content"]
        )
        exam = fibe.detect(TEXT, model=spec, prompt=PROMPT, variant="fibe+dq", n=2, gateway=gateway)
        assert exam.meta.calls == 1 + 2 and exam.meta.cache_hits == 2  # create, 2 answers; DQ replayed
    assert [u.score for u in result.units] == pytest.approx([1 - math.exp(-0.05)] * 2)
    assert result.units[0].evidence["answer"] == "yes" and result.meta.params["with_probability"] == 2
    assert [u.evidence["h_direct_question"] for u in exam.units] == pytest.approx([u.score for u in result.units])


def test_without_log_probs_known_is_one_zero_or_zero(gateway: Gateway, scripted: Any) -> None:
    def respond(prompt: str, _params: dict[str, Any]) -> str:
        return "Yes" if "Ulm" in prompt else "No" if "relativity" in prompt else "I cannot say"

    model = scripted(respond, "scripted:dq")
    det = halluscope.detector("direct-question", model=model, gateway=gateway)
    result = det.detect(text=TEXT + " He liked tea.", prompt=PROMPT)
    assert [u.score for u in result.units] == [0.0, 1.0, 1.0]  # neither Yes nor No: known 0
    assert [u.parsed for u in result.units] == [True, True, False] and result.meta.events == {"unanswered": 1}
    assert result.meta.params["with_probability"] == 0


def test_direct_question_from_the_command_line_and_in_the_wikibio_bench(
    capsys: pytest.CaptureFixture[str], gateway: Gateway, scripted: Any, tmp_path: Path, data_dir: Path
) -> None:
    with StubAPI(answer="No") as stub:
        argv = ["detect", "direct-question", "--text", TEXT, "--question", PROMPT]
        code = main([*argv, "--model", f"openai-compatible:{stub.base_url}/v1#m", "--json", "--no-cache"])
        result = DetectionResult.from_json(capsys.readouterr().out)
    assert code == 0 and result.method == "direct-question" and len(stub.requests) == 2
    assert [u.score for u in result.units] == pytest.approx([math.exp(-0.05)] * 2)  # No: known = 1 - p_1

    seen: list[str] = []

    def respond(prompt: str, _params: dict[str, Any]) -> str:
        seen.append(prompt)
        return "No"

    (run,) = run_bench(
        ["direct-question"], tmp_path, data_dir, limit=2, progress=False, model=scripted(respond), gateway=gateway
    )
    passages = load_wikibio(data_dir)[:2]
    assert run.meta.calls == len(seen) == sum(len(p.sentences) for p in passages)
    assert all(x == 1.0 for s in sentence_scores(run) for x in s)
