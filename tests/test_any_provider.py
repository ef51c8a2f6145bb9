"""Providers beyond halluscope's own routes, through LangChain's init_chat_model: the real
langchain-ollama client against the stub server's Ollama API on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import halluscope
from halluscope.backends.chat import parse_model_spec
from halluscope.backends.gateway import Gateway
from halluscope.errors import ConfigError, ModelSpecError
from halluscope.prompts.registry import PromptRegistry
from tests.conftest import FAST_RETRY
from tests.stub_servers import StubAPI

SCGP = "selfcheck.prompt"
VARS = {"context": "Paris is the capital of France.", "sentence": "The capital of France is Paris."}


@pytest.fixture
def ollama(monkeypatch: pytest.MonkeyPatch) -> Iterator[StubAPI]:
    with StubAPI(answer="Yes") as stub:
        monkeypatch.setenv("OLLAMA_HOST", stub.base_url)  # where the ollama client looks for its server
        yield stub


def _gateway() -> Gateway:
    return Gateway(cache=None, registry=PromptRegistry(), retry=FAST_RETRY)


def test_an_ollama_string_reaches_the_ollama_api_with_its_sampling_settings(ollama: StubAPI) -> None:
    reply = _gateway().call("ollama:llama3", SCGP, VARS, temperature=0.7, max_tokens=5, seed=3)
    assert reply.ok and reply.parsed == "yes" and reply.model == "ollama:llama3"
    [request] = ollama.requests
    body = request["body"]
    assert request["path"] == "/api/chat" and body["model"] == "llama3"
    assert body["options"]["temperature"] == 0.7 and body["options"]["num_predict"] == 5
    assert body["options"]["seed"] == 3
    assert "Paris" in body["messages"][-1]["content"]


def test_a_detector_runs_on_an_init_chat_model_provider(ollama: StubAPI) -> None:
    det = halluscope.detector("selfcheck-prompt", model="ollama:llama3", gateway=_gateway())
    result = det.detect(text="Paris is in France. It has a tower.", samples=["Paris, France.", "A tower."])
    assert result.ok and [u.score for u in result.units] == [0.0, 0.0] and len(ollama.requests) == 4


def test_log_probabilities_are_refused_for_a_provider_that_does_not_give_them_here(ollama: StubAPI) -> None:
    with pytest.raises(ConfigError, match="ollama:llama3 gives no log-probabilities"):
        _gateway().call("ollama:llama3", SCGP, VARS, logprobs=True)
    assert not _gateway().gives_logprobs("ollama:llama3") and ollama.requests == []


def test_a_missing_integration_names_the_package_at_parse_time() -> None:
    with pytest.raises(
        ModelSpecError, match="'groq:llama-3.1-8b' needs LangChain's groq integration: pip install langchain-groq"
    ):
        parse_model_spec("groq:llama-3.1-8b")


def test_an_unknown_provider_lists_both_kinds_of_provider() -> None:
    with pytest.raises(
        ModelSpecError, match="unknown provider 'olama'.*halluscope's: openai, .*init_chat_model: .*ollama"
    ):
        parse_model_spec("olama:llama3")
