"""token-logprob: SelfCheckGPT's four token-probability scores, worked by hand, from given log-probs (no
call) and from a proxy model's forward pass (llama.cpp against a hand computation over its logits, and
transformers against llama.cpp on the same tiny model)."""

from __future__ import annotations

import asyncio
import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from langchain_core.messages import AIMessage

import halluscope
from halluscope.backends.chat import load_logprob_model
from halluscope.backends.gateway import Gateway
from halluscope.backends.providers.llama_cpp import LlamaCppLogProbModel
from halluscope.backends.providers.transformers import TransformersLogProbModel
from halluscope.cli import main
from halluscope.errors import ConfigError
from halluscope.methods import token_logprob
from halluscope.results import DetectionResult
from halluscope.scoring.token_probability import (
    TokenStat,
    entropy,
    sentence_scores,
    sentence_spans,
    tokens_by_sentence,
)

TEXT = "Paris is in France. It has a river."
# (token, logprob, top log-probs): the tokens spell TEXT; the second sentence's first token carries the space
TOKENS: list[tuple[str, float, dict[str, float]]] = [
    ("Paris", -0.5, {"Paris": -0.5, "Lyon": -1.5}),
    (" is", -0.1, {" is": -0.1, " was": -2.4}),
    (" in", -0.2, {" in": -0.2, " near": -1.7}),
    (" France", -1.0, {" France": -1.0, " Europe": -0.6}),
    (".", -0.05, {".": -0.05, ",": -3.0}),
    (" It", -2.0, {" It": -2.0, " The": -0.2}),
    (" has", -0.3, {" has": -0.3, " had": -1.4}),
    (" a", -0.4, {" a": -0.4, " two": -1.2}),
    (" river.", -3.0, {" river.": -3.0, " port.": -0.1}),
]


def _h(top: dict[str, float]) -> float:
    """The renormalised entropy of two alternatives, by hand: p = e^a / (e^a + e^b)."""
    a, b = top.values()
    p = math.exp(a) / (math.exp(a) + math.exp(b))
    return -(p * math.log(p) + (1 - p) * math.log(1 - p))


# ---------------------------------------------------------------- the formulas, by hand


def test_the_four_scores_of_each_sentence_worked_by_hand() -> None:
    stats = [TokenStat(0, -0.5, 0.7), TokenStat(5, -0.1, 0.1), TokenStat(11, -2.0, 1.9), TokenStat(14, -0.3, 0.2)]
    first, second = sentence_scores("Paris is. It has.", ["Paris is.", "It has."], stats)
    # sentence 1: tokens at 0 and 5; Avg(-log p) = (0.5 + 0.1) / 2, Max = 0.5; Avg(H) = (0.7 + 0.1) / 2, Max = 0.7
    assert (first.tokens, first.avg_nll, first.max_nll) == (2, pytest.approx(0.3), 0.5)
    assert (first.avg_entropy, first.max_entropy) == (pytest.approx(0.4), 0.7)
    # sentence 2 starts at 10: the token at 11 and at 14; Avg(-log p) = 1.15, Max = 2.0, Avg(H) = 1.05, Max = 1.9
    assert (second.avg_nll, second.max_nll, second.avg_entropy, second.max_entropy) == (
        pytest.approx(1.15),
        2.0,
        pytest.approx(1.05),
        1.9,
    )
    assert [second.variant(v) for v in ("avg-nll", "max-entropy")] == [pytest.approx(1.15), 1.9]


def test_entropy_over_the_whole_distribution_and_renormalised_over_a_top_k() -> None:
    assert entropy([math.log(0.25)] * 4) == pytest.approx(math.log(4))
    # top-2 of a larger distribution: p = 0.5 and 0.25 renormalise to 2/3 and 1/3
    assert entropy([math.log(0.5), math.log(0.25)]) == pytest.approx(
        -(2 / 3 * math.log(2 / 3) + 1 / 3 * math.log(1 / 3))
    )
    assert entropy([0.0, -math.inf]) == 0.0
    with pytest.raises(ValueError):
        entropy([])


def test_a_token_belongs_to_the_sentence_where_it_starts() -> None:
    text = "Ab cd. Ef gh."
    spans = sentence_spans(text, ["Ab cd.", "Ef gh."])
    assert spans == [(0, 6), (7, 13)]
    # "d." starts in sentence 1 and runs into the gap; " Ef" starts in the gap: the next sentence's first word;
    # a token across the boundary ("d. E", starting at 4) stays in the sentence where it starts
    stats = [TokenStat(0, -1, None), TokenStat(4, -1, None), TokenStat(6, -1, None), TokenStat(10, -1, None)]
    first, second = tokens_by_sentence(stats, spans)
    assert [t.start for t in first] == [0, 4] and [t.start for t in second] == [6, 10]
    assert sentence_spans(text, ["Ab cd.", "Not here."]) == [(0, 6), None]
    assert tokens_by_sentence(stats, [(0, 6), None])[1] == []


# ---------------------------------------------------------------- log-probs given with the answer: no call


def _openai_entries() -> list[dict[str, Any]]:
    return [
        {
            "token": t,
            "logprob": lp,
            "bytes": list(t.encode()),
            "top_logprobs": [{"token": k, "logprob": v} for k, v in top.items()],
        }
        for t, lp, top in TOKENS
    ]


def _expected(variant: str) -> list[float]:
    first, second = TOKENS[:5], TOKENS[5:]
    if variant == "avg-nll":
        return [sum(-lp for _, lp, _ in s) / len(s) for s in (first, second)]
    if variant == "max-nll":
        return [max(-lp for _, lp, _ in s) for s in (first, second)]
    hs = [[_h(top) for _, _, top in s] for s in (first, second)]
    return [sum(h) / len(h) for h in hs] if variant == "avg-entropy" else [max(h) for h in hs]


@pytest.mark.parametrize("variant", ["avg-nll", "max-nll", "avg-entropy", "max-entropy"])
def test_an_aimessages_own_logprobs_score_each_sentence_with_no_call(variant: str, gateway: Gateway) -> None:
    message = AIMessage(content=TEXT, response_metadata={"logprobs": {"content": _openai_entries(), "refusal": None}})
    result = token_logprob.detect(logprobs=message, variant=variant, gateway=gateway)
    assert [u.text for u in result.units] == ["Paris is in France.", "It has a river."]
    assert [u.score for u in result.units] == pytest.approx(_expected(variant))
    assert result.meta.calls == 0 and result.meta.params["source"] == "given"
    assert result.meta.params["entropy_over"] == "top-2 renormalised"
    assert result.units[1].evidence["tokens"] == 4 and result.units[1].evidence["entropy_over"] == "top-2 renormalised"


def test_every_shape_of_given_logprobs_gives_the_same_scores(gateway: Gateway) -> None:
    from openai.types.chat.chat_completion_token_logprob import ChatCompletionTokenLogprob, TopLogprob

    objects = [
        ChatCompletionTokenLogprob(
            token=t, logprob=lp, bytes=None, top_logprobs=[TopLogprob(token=k, logprob=v) for k, v in top.items()]
        )
        for t, lp, top in TOKENS
    ]
    completion = {"choices": [{"message": {"content": TEXT}, "logprobs": {"content": _openai_entries()}}]}
    shapes = [TOKENS, [list(t) for t in TOKENS], objects, {"content": _openai_entries()}, completion]
    expected = _expected("max-entropy")
    for shape in shapes:
        result = token_logprob.detect(TEXT, logprobs=shape, variant="max-entropy", gateway=gateway)
        assert [u.score for u in result.units] == pytest.approx(expected), type(shape)
    # a leading space in the tokens and none in the text: the tokens still find their sentences
    spaced = [(" " + TOKENS[0][0], *TOKENS[0][1:]), *TOKENS[1:]]
    result = token_logprob.detect(TEXT, logprobs=spaced, gateway=gateway)
    assert [u.evidence["tokens"] for u in result.units] == [5, 4]


def test_given_logprobs_that_cannot_score_are_clear_errors(gateway: Gateway) -> None:
    with pytest.raises(ConfigError, match="no log-probs in its response_metadata"):
        token_logprob.detect(logprobs=AIMessage(content=TEXT), gateway=gateway)
    with pytest.raises(ConfigError, match="spell"):
        token_logprob.detect("Berlin is in Germany.", logprobs=TOKENS, gateway=gateway)
    bare = [(t, lp) for t, lp, _ in TOKENS]
    scored = token_logprob.detect(TEXT, logprobs=bare, variant="avg-nll", gateway=gateway)
    assert scored.meta.params["entropy_over"] == "none given"
    with pytest.raises(ConfigError, match="needs each token's alternatives"):
        token_logprob.detect(TEXT, logprobs=bare, variant="max-entropy", gateway=gateway)
    default = token_logprob.detect(TEXT, logprobs=bare, gateway=gateway)  # max-nll: no alternatives needed
    assert [u.score for u in default.units] == pytest.approx(_expected("max-nll"))
    with pytest.raises(ConfigError, match="not \\(token, logprob"):
        token_logprob.detect(TEXT, logprobs=[{"text": "Paris"}], gateway=gateway)
    with pytest.raises(ConfigError, match="token-logprob needs model .*or logprobs"):
        token_logprob.detect(TEXT, gateway=gateway)
    with pytest.raises(ConfigError, match="variant"):
        token_logprob.detect(TEXT, logprobs=TOKENS, variant="median", gateway=gateway)


def test_the_command_line_reads_a_logprobs_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "logprobs.json"
    path.write_text(json.dumps({"content": _openai_entries()}))
    assert main(["detect", "token-logprob", "--text", TEXT, "--logprobs-file", str(path), "--json"]) == 0
    result = DetectionResult.from_json(capsys.readouterr().out)
    assert [u.score for u in result.units] == pytest.approx(_expected("max-nll"))  # the default
    path.write_text('{"choices": []}')
    assert main(["detect", "token-logprob", "--text", TEXT, "--logprobs-file", str(path)]) == 2
    assert "the log-probs must be one of: a chat completion response" in capsys.readouterr().err


# ---------------------------------------------------------------- a proxy model reads the text


@pytest.fixture(scope="module")
def smol() -> LlamaCppLogProbModel:
    model = load_logprob_model("local:smollm2-135m")
    assert isinstance(model, LlamaCppLogProbModel)
    return model


def test_llama_cpp_token_stats_equal_a_hand_computation_over_its_logits(smol: LlamaCppLogProbModel) -> None:
    prompt = smol.chat_prompt([{"role": "user", "content": "Where is Paris?"}])
    stats = smol.token_stats(prompt, TEXT)
    llama = smol._llama
    full = list(llama.tokenize((prompt + TEXT).encode(), add_bos=True, special=True))
    start = len(full) - len(stats)
    llama.reset()
    llama.eval(full)
    logits = np.array(llama.scores[: len(full)], dtype=np.float64)
    for k, stat in enumerate(stats):
        row = logits[start + k - 1]
        p = np.exp(row - row.max())
        p /= p.sum()
        assert stat.logprob == pytest.approx(math.log(p[full[start + k]]), abs=1e-6)
        assert stat.entropy == pytest.approx(float(-(p[p > 0] * np.log(p[p > 0])).sum()), abs=1e-6)
    # the tokens' offsets: each token's text starts where its offset says, and the sum is the teacher-forced score
    pieces = [smol.token_text(t) for t in full[start:]]
    assert "".join(pieces) == TEXT
    assert [s.start for s in stats] == [sum(len(p) for p in pieces[:k]) for k in range(len(pieces))]
    assert sum(s.logprob for s in stats) == pytest.approx(smol.score(prompt, TEXT), abs=1e-6)


def test_the_proxy_reads_each_text_once_and_the_cache_serves_it_again(gateway: Gateway) -> None:
    first = token_logprob.detect(TEXT, question="Where is Paris?", model="local:smollm2-135m", gateway=gateway)
    assert first.meta.calls == 1 and first.meta.params["forward_passes"] == 1
    assert first.meta.params["entropy_over"] == "whole vocabulary" and first.meta.params["source"] == "proxy"
    assert all(u.score is not None and u.score > 0 for u in first.units)
    again = token_logprob.detect(
        TEXT, question="Where is Paris?", model="local:smollm2-135m", variant="avg-nll", gateway=gateway
    )
    assert again.meta.calls == 0 and again.meta.cache_hits == 1
    assert [u.evidence["max_nll"] for u in again.units] == [u.score for u in first.units]  # the default
    assert [u.score for u in again.units] == [u.evidence["avg_nll"] for u in first.units]
    plain = token_logprob.detect(
        TEXT, question="Where is Paris?", model="local:smollm2-135m", chat=False, gateway=gateway
    )
    assert plain.meta.calls == 1  # another reading prompt, another pass
    asynchronous = asyncio.run(
        token_logprob.adetect(TEXT, question="Where is Paris?", model="local:smollm2-135m", gateway=gateway)
    )
    assert [u.score for u in asynchronous.units] == [u.score for u in first.units]


def test_a_cached_entry_that_is_not_rows_of_numbers_is_read_as_a_miss(gateway: Gateway) -> None:
    from halluscope.backends.readings import _token_rows

    assert _token_rows({"tokens": [[0, -1.0, 2.0]]}) == [TokenStat(0, -1.0, 2.0)]
    assert _token_rows({"tokens": [[0, "x", 2.0]]}) == [] and _token_rows({"tokens": "no"}) == []
    assert _token_rows(None) == []


@pytest.mark.slow
def test_transformers_agrees_with_llama_cpp_on_the_same_tiny_model(
    smol: LlamaCppLogProbModel, smollm2_hf_dir: Path
) -> None:
    tf = TransformersLogProbModel(smollm2_hf_dir, threads=1)
    prompt = tf.chat_prompt([{"role": "user", "content": "Where is Paris?"}])
    assert prompt == smol.chat_prompt([{"role": "user", "content": "Where is Paris?"}])
    ours, theirs = tf.token_stats(prompt, TEXT), smol.token_stats(prompt, TEXT)
    assert [s.start for s in ours] == [s.start for s in theirs]  # one tokenizer, one mapping
    # fp32 dequantised weights against llama.cpp's quantised kernels: close, not equal
    assert np.mean([abs(a.logprob - b.logprob) for a, b in zip(ours, theirs, strict=True)]) < 0.3
    assert np.mean([abs(a.entropy - b.entropy) for a, b in zip(ours, theirs, strict=True)]) < 0.3  # type: ignore[operator]


def test_a_detector_reads_given_logprobs_with_no_model(gateway: Gateway) -> None:
    detector = halluscope.detector("token-logprob", gateway=gateway)
    result = detector.detect(text=TEXT, logprobs=TOKENS)
    assert [u.score for u in result.units] == pytest.approx(_expected("max-nll"))


# ---------------------------------------------------------------- through the other doors


def _message() -> AIMessage:
    return AIMessage(content=TEXT, response_metadata={"logprobs": {"content": _openai_entries()}})


def test_the_guard_checks_an_answer_from_its_own_logprobs_with_no_call(gateway: Gateway) -> None:
    from langchain_core.messages import HumanMessage

    from halluscope.tools import hallucination_guard

    # avg-nll: sentence 1 scores 0.37, sentence 2 (2.0 + 0.3 + 0.4 + 3.0) / 4 = 1.425
    det = halluscope.detector("token-logprob", variant="avg-nll", gateway=gateway)
    guard = hallucination_guard(det, threshold=1.0)
    state = guard.invoke({"messages": [HumanMessage(content="Where is Paris?"), _message()]})
    record = state["hallucination"]
    assert record["calls"] == 0 and record["action"] == "annotated"
    assert [u["text"] for u in record["flagged"]] == ["It has a river."]
    # a message without log-probs and no proxy model: unchecked, and said why
    bare = guard.invoke({"messages": [HumanMessage(content="Where is Paris?"), AIMessage(content=TEXT)]})
    assert bare["hallucination"]["action"] == "unchecked" and "needs model" in bare["hallucination"]["error"]


def test_an_evaluator_reads_the_runs_message_and_its_logprobs(gateway: Gateway) -> None:
    from halluscope.evaluators import create_evaluator

    evaluate = create_evaluator("token-logprob", variant="avg-nll", gateway=gateway)
    found = evaluate(inputs={"question": "Where is Paris?"}, outputs={"messages": [_message()]})
    assert found["score"] == pytest.approx(_expected("avg-nll")[1]) and found["metadata"]["calls"] == 0
    assert evaluate(inputs={"question": "Q"}, outputs={"answer": _message()})["score"] == found["score"]


@pytest.mark.slow
def test_token_logprob_calibrates_on_wikibio_and_stacks_with_the_unigram(data_dir: Path, tmp_path: Path) -> None:
    """calibrate reads each passage through the proxy once; the ensemble of it and the unigram (which
    costs no call) runs on a new answer, and a calibration refuses another variant."""
    from halluscope.calibration import Calibration
    from halluscope.tune.calibrate import WikiBioCalibrationSettings, calibrate_wikibio

    path = tmp_path / "stack.json"
    methods = ["token-logprob", "selfcheck-unigram"]
    calibrate_wikibio(  # forced: five passages and SmolLM2 make plumbing, not a calibration to keep
        WikiBioCalibrationSettings(
            methods=methods, fit_passages=range(0, 3), test_passages=range(3, 5), n=2, data=data_dir, force=True
        ),
        path,
        model="local:smollm2-135m",
        progress=False,
    )
    calibration = Calibration.load(path)
    assert calibration.settings["token-logprob"]["variant"] == "max-nll"  # the default
    det = halluscope.detector("ensemble", calibration=path, model="local:smollm2-135m")
    result = det.detect(text=TEXT, prompt="Where is Paris?", samples=["Paris is in France.", "It has a port."])
    assert len(result.units) == 2 and all(u.probability is not None for u in result.units)
    assert set(result.units[0].evidence["scores"]) == set(methods)
    one = tmp_path / "one.json"
    calibrate_wikibio(
        WikiBioCalibrationSettings(
            methods=["token-logprob"], fit_passages=range(0, 3), test_passages=range(3, 5), data=data_dir, force=True
        ),
        one,
        model="local:smollm2-135m",
        progress=False,
    )
    with pytest.raises(ConfigError, match="variant"):
        halluscope.detector("token-logprob", model="local:smollm2-135m", calibration=one, variant="max-entropy").detect(
            TEXT
        )


@pytest.mark.slow
def test_the_guarded_agent_answers_with_logprobs_and_its_guard_sends_no_call(gateway: Gateway) -> None:
    from langchain_core.messages import HumanMessage

    from tests.test_guard import load_example

    example = load_example()
    det = halluscope.detector("token-logprob", model="local:smollm2-135m", gateway=gateway)
    agent = example.build_agent("local:smollm2-135m", det, threshold=100.0, on_flag="annotate", gateway=gateway)
    state = agent.invoke({"messages": [HumanMessage(content="What is the capital of France?")]})
    answer = state["messages"][-1]
    assert answer.response_metadata["logprobs"]["content"]  # generated with its tokens' log-probs
    record = state["hallucination"]
    assert record["action"] == "pass" and record["calls"] == 0 and record["units"]
    planted = example.build_agent(
        "local:smollm2-135m", det, threshold=100.0, on_flag="annotate", gateway=gateway, planted="Paris is in Peru."
    ).invoke({"messages": [HumanMessage(content="Where is Paris?")]})
    assert planted["hallucination"]["calls"] == 1  # never generated: the model reads it once


@pytest.mark.parametrize(
    ("bad", "shown"),
    [(float("nan"), "nan"), (float("inf"), "inf"), (5.0, "5.0"), (1e308, "1e+308"), (-math.inf, "-inf")],
)
def test_a_logprob_that_cannot_be_one_is_refused_naming_its_token(
    bad: float, shown: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A NaN was dropped (its unit scored 0.10), +inf and +5.0 ignored, -inf made "score": Infinity in
    --json: a log-prob must be finite and at most 0, the file is refused in one line, exit 2."""
    entries = _openai_entries()
    entries[1] = {**entries[1], "logprob": bad}
    with pytest.raises(ConfigError, match=rf"log-prob {re.escape(shown)} of token ' is' is not a log-probability"):
        token_logprob.detect(TEXT, logprobs=entries)
    alternatives = _openai_entries()
    alternatives[2]["top_logprobs"] = [{"token": "x", "logprob": bad}] * 2
    with pytest.raises(ConfigError, match="is not a log-probability"):
        token_logprob.detect(TEXT, logprobs=alternatives, variant="max-entropy")
    path = tmp_path / "lp.json"
    path.write_text(json.dumps({"content": entries}))  # Python's json writes NaN and Infinity as such
    argv = [
        "detect",
        "token-logprob",
        "--text",
        TEXT,
        "--logprobs-file",
        str(path),
        "--exit-code",
        "--threshold",
        "0.5",
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("halluscope: error: token-logprob: the log-prob") and err.count("\n") == 1


def test_json_output_is_valid_json_whatever_the_scores() -> None:
    from halluscope.results import DetectionResult, RunMeta, Unit

    result = DetectionResult(method="m", units=[Unit(text="a", score=math.inf)], meta=RunMeta(method="m"))
    shown = json.loads(result.to_json(), parse_constant=lambda name: pytest.fail(f"{name} in the JSON"))
    assert shown["units"][0]["score"] is None
