"""LogProbModel on real models: teacher-forced scores, sampled log-probs, and their agreement."""

from __future__ import annotations

from pathlib import Path

import pytest

from halluscope.backends.chat import load_logprob_model
from halluscope.backends.providers.llama_cpp import LlamaCppLogProbModel
from halluscope.backends.providers.transformers import TransformersLogProbModel
from halluscope.errors import ConfigError, ModelSpecError

FRANCE = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]
DESCRIBE = [{"role": "user", "content": "Describe Paris in one sentence."}]


@pytest.fixture(scope="module")
def qwen05() -> LlamaCppLogProbModel:
    model = load_logprob_model("local:qwen2.5-coder-0.5b")
    assert isinstance(model, LlamaCppLogProbModel)
    return model


@pytest.fixture(scope="module")
def smol_tf(smollm2_hf_dir: Path) -> TransformersLogProbModel:
    return TransformersLogProbModel(smollm2_hf_dir, threads=1)


@pytest.mark.slow
def test_qwen_knows_the_capital_of_france(qwen05: LlamaCppLogProbModel) -> None:
    prompt = qwen05.chat_prompt(FRANCE)
    assert prompt.endswith("<|im_start|>assistant\n")
    assert qwen05.score(prompt, " Paris") > qwen05.score(prompt, " Berlin") + 3
    assert qwen05.score(prompt, "Paris") > qwen05.score(prompt, "Berlin") + 3


@pytest.mark.slow
def test_sampled_logprobs_agree_with_teacher_forcing(qwen05: LlamaCppLogProbModel) -> None:
    prompt = qwen05.chat_prompt(DESCRIBE)
    samples = qwen05.sample(prompt, n=5, max_tokens=16, temperature=1.0, seed=3)
    assert len({s.text for s in samples}) > 1
    for s in samples:
        assert len(s.token_logprobs) == len(s.tokens) > 0
        per_token = abs(s.logprob - qwen05.score(prompt, s.text)) / len(s.token_logprobs)
        assert per_token < 0.05, (s.text, per_token)


@pytest.mark.slow
def test_a_score_does_not_depend_on_what_ran_before(qwen05: LlamaCppLogProbModel) -> None:
    """Regression: rows left by sampling (last prompt token decoded alone) shifted a score by 0.09 nats."""
    prompt = qwen05.chat_prompt(FRANCE)
    qwen05._llama.n_tokens = 0
    fresh = qwen05.score(prompt, "Berlin")
    qwen05.sample(prompt, n=3, max_tokens=4, seed=0)
    after_sampling = qwen05.score(prompt, "Berlin")
    qwen05.score(prompt, "Paris is the capital.")
    after_other = qwen05.score(prompt, "Berlin")
    assert fresh == after_sampling == after_other


@pytest.mark.slow
def test_score_many_matches_single_scores_and_empty_is_zero(qwen05: LlamaCppLogProbModel) -> None:
    prompt = qwen05.chat_prompt(FRANCE)
    many = qwen05.score_many(prompt, ["Paris", "Lyon", "The capital is Paris.", ""])
    singles = [qwen05.score(prompt, c) for c in ["Paris", "Lyon", "The capital is Paris."]]
    assert many[:3] == pytest.approx(singles, abs=1e-9) and many[3] == 0.0


@pytest.mark.slow
def test_transformers_backend_on_a_directory_made_from_the_gguf(
    smol_tf: TransformersLogProbModel, smollm2_hf_dir: Path
) -> None:
    prompt = smol_tf.chat_prompt(FRANCE)
    continuations = ["Paris", "Berlin", "The capital of France is Paris."]
    scores = smol_tf.score_many(prompt, continuations)  # one padded batch
    assert scores == pytest.approx([smol_tf.score(prompt, c) for c in continuations], abs=1e-3)
    assert scores[0] > scores[1] + 3
    gguf = load_logprob_model("local:smollm2-135m")
    assert gguf.chat_prompt(FRANCE) == prompt  # the same chat template from both files
    reference = gguf.score_many(prompt, continuations)
    assert scores == pytest.approx(reference, abs=0.5)  # fp32 dequantised vs llama.cpp's quantised kernels


@pytest.mark.slow
def test_transformers_samples_carry_raw_logprobs(smol_tf: TransformersLogProbModel) -> None:
    prompt = smol_tf.chat_prompt(DESCRIBE)
    samples = smol_tf.sample(prompt, n=3, max_tokens=12, temperature=1.0, top_p=0.9, seed=0)
    again = smol_tf.sample(prompt, n=3, max_tokens=12, temperature=1.0, top_p=0.9, seed=0)
    assert [s.text for s in samples] == [s.text for s in again]
    for s in samples:
        # raw log-probs: after top_p the kept tokens would look likelier than the model says
        assert abs(s.logprob - smol_tf.score(prompt, s.text)) / len(s.token_logprobs) < 0.05
    stopped = smol_tf.sample(prompt, n=1, max_tokens=12, temperature=0.0, stop=["."])[0]
    assert "." not in stopped.text and stopped.token_logprobs


def test_specs_without_logprobs_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="Anthropic gives no log-probabilities"):
        load_logprob_model("anthropic:claude-stub-model")
    with pytest.raises(ModelSpecError, match="cannot score a given continuation"):
        load_logprob_model("openai:gpt-4o-mini")
    with pytest.raises(ConfigError, match="not a Hugging Face model directory"):
        load_logprob_model(f"transformers:{tmp_path}")


def _echo(tokens: list[tuple[str, float, float]]) -> dict[str, object]:
    """A completions body echoing (token, logprob, the same token's top-row logprob) + 1 generated."""
    return {
        "id": "cmpl",
        "object": "text_completion",
        "created": 0,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "text": "".join(t for t, _, _ in tokens),
                "finish_reason": "length",
                "logprobs": {
                    "tokens": [t for t, _, _ in tokens],
                    "token_logprobs": [lp for _, lp, _ in tokens],
                    "top_logprobs": [{t: top} for t, _, top in tokens],
                    "text_offset": list(range(len(tokens))),
                },
            }
        ],
        "usage": {"prompt_tokens": len(tokens) - 1, "completion_tokens": 1, "total_tokens": len(tokens)},
    }


def test_echoed_logprobs_sum_over_the_continuation_tokens() -> None:
    from halluscope.backends.providers.openai import OpenAICompatibleLogProbModel
    from tests.stub_servers import StubAPI

    with StubAPI() as stub:
        stub.completion = _echo(
            [("<s>", 0.0, 0.0), ("Q:", -1.0, -1.0), (" Paris", -0.5, -0.5), (".", -0.25, -0.25), ("\n", -3.0, -3.0)]
        )
        model = OpenAICompatibleLogProbModel(stub.base_url + "/v1", "m")
        assert model.score("<s>Q:", " Paris.") == pytest.approx(-0.75)  # the generated "\n" is not counted
        assert stub.requests[0]["body"]["echo"] is True and stub.requests[0]["body"]["logprobs"] == 1


def test_a_server_whose_echo_contradicts_its_top_rows_is_refused() -> None:
    from halluscope.backends.logprobs import LogProbMismatchError
    from halluscope.backends.providers.openai import OpenAICompatibleLogProbModel
    from tests.stub_servers import StubAPI

    with StubAPI() as stub:  # the numbers seen from llama-cpp-python 0.3.36's server
        stub.completion = _echo([("The", -1.0, -1.0), (" capital", -13.07, -8.40), ("\n", -1.0, -1.0)])
        with pytest.raises(LogProbMismatchError, match=r"' capital' but lists it at -8.40"):
            OpenAICompatibleLogProbModel(stub.base_url + "/v1", "m").score("The", " capital")


@pytest.mark.slow
def test_a_chat_call_on_the_shared_context_does_not_leak_into_scores(qwen05: LlamaCppLogProbModel) -> None:
    from halluscope.backends.gateway import Gateway

    prompt = qwen05.chat_prompt(FRANCE)
    before = qwen05.score(prompt, "Berlin")
    Gateway(cache=None).call(
        "local:qwen2.5-coder-0.5b",
        "semantic_entropy.answer",
        {"question": "Capital of France?"},
        logprobs=True,
        max_tokens=4,
    )
    other = load_logprob_model("local:qwen2.5-coder-0.5b")  # a second scorer on the same context
    assert other.score(prompt, "Paris") < 0
    assert qwen05.score(prompt, "Berlin") == before
