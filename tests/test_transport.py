"""The real openai and anthropic clients (through langchain-openai / langchain-anthropic) on the
real wire, against a stub API server on 127.0.0.1."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from halluscope.backends.cache import CallCache
from halluscope.backends.gateway import CallStats, Gateway
from halluscope.errors import ModelUnavailableError
from halluscope.prompts.registry import PromptRegistry
from tests.conftest import FAST_RETRY
from tests.stub_servers import StubAPI

SCGP = "selfcheck.prompt"
VARS = {"context": "Paris is the capital of France.", "sentence": "The capital of France is Paris."}
SECRET = "sk-test-secret-0123456789"


@pytest.fixture
def stub() -> StubAPI:
    with StubAPI(answer="Yes") as server:
        yield server


def _gateway(cache: CallCache) -> Gateway:
    return Gateway(cache=cache, registry=PromptRegistry(), retry=FAST_RETRY, timeout=10)


def test_openai_provider_retries_a_429_through_the_real_client(
    stub: StubAPI, cache: CallCache, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("OPENAI_BASE_URL", stub.base_url + "/v1")
    stub.fail_next(429)
    stats = CallStats()
    reply = _gateway(cache).call("openai:gpt-4o-mini", SCGP, VARS, stats=stats, logprobs=True)
    assert reply.parsed == "yes"
    assert (reply.prompt_tokens, reply.completion_tokens) == (11, 2)
    assert reply.logprobs == [{"token": "Yes", "logprob": -0.05, "bytes": [89, 101, 115], "top_logprobs": []}]
    assert len(stub.requests) == 2 and stats.retries == 1 and stats.calls == 1
    sent = stub.requests[-1]
    assert sent["path"] == "/v1/chat/completions"
    assert sent["headers"]["authorization"] == f"Bearer {SECRET}"
    assert sent["body"]["messages"] == [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": PromptRegistry().get(SCGP).render(**VARS)[1]["content"]},
    ]
    assert sent["body"]["temperature"] == 0.0 and sent["body"]["top_p"] == 0.0 and sent["body"]["logprobs"] is True
    assert sent["body"]["top_logprobs"] == 0  # without it llama.cpp's server returns no log-probs
    assert stats.models == {f"openai:gpt-4o-mini@{stub.base_url}/v1"}


def test_openai_compatible_provider_and_the_cache_replay(stub: StubAPI, cache: CallCache) -> None:
    gateway = _gateway(cache)
    spec = f"openai-compatible:{stub.base_url}/v1#local-model"
    limited = gateway.call(spec, SCGP, VARS, max_tokens=4)
    first = gateway.call(spec, SCGP, VARS)  # max_tokens is part of the key: a new call
    again = gateway.call(spec, SCGP, VARS)
    assert [r.cached for r in (limited, first, again)] == [False, False, True] and again.text == "Yes"
    assert len(stub.requests) == 2 and stub.requests[0]["body"]["model"] == "local-model"
    body = stub.requests[0]["body"]  # both spellings: llama.cpp's server ignores max_completion_tokens
    assert body["max_tokens"] == 4 and body["max_completion_tokens"] == 4


def test_anthropic_provider_retries_a_429_and_a_529_through_the_real_client(
    stub: StubAPI, cache: CallCache, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", stub.base_url)
    stub.fail_next(429)
    stub.fail_next(529)
    stats = CallStats()
    reply = _gateway(cache).call("anthropic:claude-stub-model", SCGP, VARS, stats=stats, max_tokens=5)
    assert reply.parsed == "yes" and (reply.prompt_tokens, reply.completion_tokens) == (9, 1)
    assert len(stub.requests) == 3 and stats.retries == 2
    sent = stub.requests[-1]
    assert sent["path"] == "/v1/messages"
    assert SECRET in (
        sent["headers"].get("x-api-key", ""),
        sent["headers"].get("authorization", "").removeprefix("Bearer "),
    )
    assert sent["body"]["system"] == "You are a helpful assistant."
    assert sent["body"]["max_tokens"] == 5 and "seed" not in sent["body"]


def test_a_400_surfaces_at_once_with_the_status(
    stub: StubAPI, cache: CallCache, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("OPENAI_BASE_URL", stub.base_url + "/v1")
    stub.fail_next(400)
    with pytest.raises(ModelUnavailableError, match=r"refused the call \(400\)"):
        _gateway(cache).call("openai:gpt-4o-mini", SCGP, VARS)
    assert len(stub.requests) == 1


def test_an_unreachable_server_is_one_clear_error_after_the_retries(cache: CallCache) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here once the socket closes
    with pytest.raises(ModelUnavailableError, match="cannot reach openai-compatible:http://127.0.0.1.*server running"):
        _gateway(cache).call(f"openai-compatible:http://127.0.0.1:{port}/v1#m", SCGP, VARS)


def test_api_keys_never_reach_the_cache(stub: StubAPI, cache: CallCache, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("OPENAI_BASE_URL", stub.base_url + "/v1")
    _gateway(cache).sample("openai:gpt-4o-mini", SCGP, VARS, 3)
    assert len(cache) == 3  # the three answers were cached: the files below hold them
    cache.close()
    blobs = b"".join(p.read_bytes() for p in Path(cache.directory).rglob("*") if p.is_file())
    assert b'"text": "Yes"' in blobs
    assert SECRET.encode() not in blobs
