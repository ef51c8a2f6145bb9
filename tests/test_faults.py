"""Provider faults on the real wire: the real openai and anthropic clients (through langchain-openai and
langchain-anthropic, and openai's completions client for log-probs) against a fault-injecting server on
127.0.0.1. Every fault is retried or explained in one sentence, and no fault is ever cached."""

from __future__ import annotations

import email.utils
import subprocess
import sys
import time
from pathlib import Path

import pytest
from langchain_openai import ChatOpenAI

from halluscope.backends import providers
from halluscope.backends.cache import CallCache
from halluscope.backends.gateway import CallStats, Gateway
from halluscope.backends.providers.openai import OpenAICompatibleLogProbModel
from halluscope.backends.retry import RetryPolicy, is_transient, retry_after
from halluscope.bench.report import write_json
from halluscope.errors import ConfigError, ModelUnavailableError
from halluscope.prompts.registry import PromptRegistry
from tests.conftest import FAST_RETRY
from tests.stub_servers import Fault, StubAPI

SCGP = "selfcheck.prompt"
VARS = {"context": "Paris is the capital of France.", "sentence": "The capital of France is Paris."}
SECRET = "sk-test-secret-0123456789"
BAD_REPLIES = ("malformed_json", "empty_object", "no_choices", "null_content")


@pytest.fixture
def stub() -> StubAPI:
    with StubAPI(answer="Yes") as server:
        yield server


@pytest.fixture(params=["openai", "anthropic"])
def provider(request: pytest.FixtureRequest, stub: StubAPI, monkeypatch: pytest.MonkeyPatch) -> str:
    """A model spec of each real client, pointed at the stub."""
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("OPENAI_BASE_URL", stub.base_url + "/v1")
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", stub.base_url)
    return f"{request.param}:stub-model"


def _gateway(cache: CallCache | None, retry: RetryPolicy = FAST_RETRY, timeout: float = 10) -> Gateway:
    return Gateway(cache=cache, registry=PromptRegistry(), retry=retry, timeout=timeout)


@pytest.mark.parametrize("kind", BAD_REPLIES)
def test_a_bad_200_reply_is_retried_and_only_the_real_answer_cached(
    stub: StubAPI, provider: str, cache: CallCache, kind: str
) -> None:
    stub.inject(Fault(kind))
    stats = CallStats()
    gateway = _gateway(cache)
    reply = gateway.call(provider, SCGP, VARS, stats=stats)
    assert reply.parsed == "yes" and len(stub.requests) == 2
    assert stats.retries == 1 and stats.calls == 1
    again = gateway.call(provider, SCGP, VARS)
    assert again.cached and again.text == "Yes" and len(stub.requests) == 2


@pytest.mark.parametrize("kind", BAD_REPLIES)
def test_a_bad_reply_that_persists_is_one_sentence_and_never_cached(
    stub: StubAPI, provider: str, cache: CallCache, kind: str
) -> None:
    stub.inject(Fault(kind), times=FAST_RETRY.attempts)
    expected = {
        "malformed_json": r"sent an unreadable reply \(JSONDecodeError",
        "no_choices": "sent (a reply with no choices|an empty reply)",
        "empty_object": "sent (a reply with no choices|a reply its client could not read)",
        "null_content": r"sent an empty reply \(no content\)",
    }[kind]
    with pytest.raises(
        ModelUnavailableError, match=rf"{provider}@.*: gave up after 4 tries over [0-9.]+ s: {expected}"
    ):
        _gateway(cache).call(provider, SCGP, VARS)
    assert len(stub.requests) == FAST_RETRY.attempts and len(cache) == 0
    healed = _gateway(cache).call(provider, SCGP, VARS)  # the healed server is asked, not a poisoned cache
    assert not healed.cached and healed.parsed == "yes"


def test_a_reply_without_the_logprobs_asked_for_is_retried_not_cached(
    stub: StubAPI, cache: CallCache, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = f"openai-compatible:{stub.base_url}/v1#m"
    stub.inject(Fault("no_logprobs"), times=FAST_RETRY.attempts)
    with pytest.raises(ModelUnavailableError, match="sent no token log-probs although they were asked for"):
        _gateway(cache).call(spec, SCGP, VARS, logprobs=True)
    assert len(cache) == 0
    stub.inject(Fault("no_logprobs"))
    stats = CallStats()
    reply = _gateway(cache).call(spec, SCGP, VARS, logprobs=True, stats=stats)
    assert reply.logprobs and stats.retries == 1 and len(cache) == 1
    # asked without log-probs, the same reply is a real answer
    assert _gateway(cache).call(spec, SCGP, VARS).parsed == "yes"


def test_an_older_poisoned_entry_is_not_replayed(stub: StubAPI, cache: CallCache) -> None:
    spec = f"openai-compatible:{stub.base_url}/v1#m"
    gateway = _gateway(cache)
    gateway.call(spec, SCGP, VARS)
    (key,) = list(cache._store.iterkeys())
    cache.set(key, {"text": "", "prompt_tokens": 1})  # what an older version cached for content: null
    reply = gateway.call(spec, SCGP, VARS)
    assert not reply.cached and reply.parsed == "yes" and len(stub.requests) == 2


@pytest.mark.parametrize(
    "header",
    [("retry-after", "0.4"), ("retry-after-ms", "400")],
)
def test_retry_after_is_honoured(stub: StubAPI, provider: str, header: tuple[str, str]) -> None:
    stub.inject(Fault("status", 429, headers=(header,)))
    policy = RetryPolicy(attempts=3, initial=0.001, cap=5.0)  # its own backoff would wait ~1 ms
    started = time.monotonic()
    assert _gateway(None, policy).call(provider, SCGP, VARS).parsed == "yes"
    assert 0.4 <= time.monotonic() - started < 4.0


def test_retry_after_as_an_http_date_is_capped_by_the_policy(stub: StubAPI, provider: str) -> None:
    later = email.utils.formatdate(time.time() + 3600, usegmt=True)  # an hour from now
    stub.inject(Fault("status", 503, headers=(("retry-after", later),)))
    policy = RetryPolicy(attempts=2, initial=0.001, cap=0.3)
    started = time.monotonic()
    assert _gateway(None, policy).call(provider, SCGP, VARS).parsed == "yes"
    assert 0.3 <= time.monotonic() - started < 3.0


def test_retry_after_values() -> None:
    class Response:
        def __init__(self, headers: dict[str, str]) -> None:
            self.headers = headers

    class Fault429(Exception):
        def __init__(self, headers: dict[str, str]) -> None:
            self.response = Response(headers)

    assert retry_after(Fault429({"retry-after": "7"})) == 7.0
    assert retry_after(Fault429({"retry-after-ms": "250", "retry-after": "7"})) == 0.25
    soon = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 25 <= (retry_after(Fault429({"retry-after": soon})) or 0) <= 30
    assert retry_after(Fault429({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"})) == 0.0  # in the past
    assert retry_after(Fault429({"retry-after": "soon"})) is None and retry_after(Fault429({})) is None
    wrapped = RuntimeError("wrapper")
    wrapped.__cause__ = Fault429({"retry-after": "2"})
    assert retry_after(wrapped) == 2.0


def test_the_sdks_connection_and_unreadable_reply_errors_are_transient() -> None:
    import anthropic
    import httpx
    import openai

    request = httpx.Request("POST", "http://127.0.0.1:9/v1/chat/completions")
    response = httpx.Response(200, request=request)
    for sdk, name in ((openai, "openai"), (anthropic, "anthropic")):
        adapter = providers.get(name)  # each provider's adapter names its own client's errors
        assert is_transient(sdk.APIConnectionError(request=request), adapter)
        assert is_transient(sdk.APIResponseValidationError(response=response, body=None), adapter)
    assert not is_transient(ValueError("a bug"), providers.get("openai"))


def test_importing_halluscope_loads_no_provider_sdk() -> None:
    """A Ray worker and every CLI run pay for each import (anthropic's alone is ~2 s of CPU): a
    provider's SDK loads when a model of that provider is built."""
    code = (
        "import sys, halluscope.cli, halluscope.detectors;"
        "print([m for m in ('openai', 'anthropic') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize("status", [429, 500, 503, 529])
def test_running_out_of_retries_says_so(stub: StubAPI, provider: str, status: int) -> None:
    stub.inject(Fault("status", status), times=FAST_RETRY.attempts)
    with pytest.raises(ModelUnavailableError, match=rf"gave up after 4 tries over [0-9.]+ s: {status} "):
        _gateway(None).call(provider, SCGP, VARS)
    assert len(stub.requests) == FAST_RETRY.attempts


def test_a_401_names_the_variable_that_holds_the_key(stub: StubAPI, provider: str) -> None:
    stub.inject(Fault("status", 401))
    variable = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}[provider.split(":")[0]]
    with pytest.raises(ModelUnavailableError, match=rf"refused the API key \(401\): check {variable}"):
        _gateway(None).call(provider, SCGP, VARS)
    assert len(stub.requests) == 1  # not retried


def test_a_slow_server_times_out_under_the_set_timeout_and_is_retried(stub: StubAPI) -> None:
    stub.inject(Fault("slow", delay=1.0))
    spec = f"openai-compatible:{stub.base_url}/v1#m"
    stats = CallStats()
    reply = _gateway(None, timeout=0.3).call(spec, SCGP, VARS, stats=stats)
    assert reply.parsed == "yes" and stats.retries == 1


def test_the_logprob_path_retries_under_the_one_policy_only(stub: StubAPI, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.test_logprobs import _echo

    stub.completion = _echo([("Q:", -1.0, -1.0), (" Paris", -0.5, -0.5), ("\n", -3.0, -3.0)])
    stub.fail_next(503, times=2)
    model = OpenAICompatibleLogProbModel(stub.base_url + "/v1", "m", retry=FAST_RETRY)
    assert model.score("Q:", " Paris") == pytest.approx(-0.5)
    assert len(stub.requests) == 3  # 2 faults + the answer: our policy retried
    stub.fail_next(503, times=5)
    monkeypatch.setenv("HALLUSCOPE_MAX_ATTEMPTS", "1")
    once = OpenAICompatibleLogProbModel(stub.base_url + "/v1", "m")  # the policy from the environment
    with pytest.raises(ModelUnavailableError, match="gave up after 1 try"):
        once.score("Q:", " Paris")
    assert len(stub.requests) == 4  # exactly one more: the client's own retries are off


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("HALLUSCOPE_MAX_ATTEMPTS", "abc", "HALLUSCOPE_MAX_ATTEMPTS must be a whole number, got 'abc'"),
        ("HALLUSCOPE_MAX_ATTEMPTS", "0", "HALLUSCOPE_MAX_ATTEMPTS must be at least 1"),
        ("HALLUSCOPE_RETRY_CAP", "-1", "HALLUSCOPE_RETRY_CAP must be at least 0"),
        ("HALLUSCOPE_RETRY_INITIAL", "nan", "HALLUSCOPE_RETRY_INITIAL must be at least 0"),
    ],
)
def test_bad_numbers_in_the_environment_are_clear_errors(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, message: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigError, match=message):
        RetryPolicy.from_env()


def test_two_instances_that_differ_only_in_base_url_have_their_own_cache_entries(cache: CallCache) -> None:
    with StubAPI(answer="Yes") as first, StubAPI(answer="No") as second:
        models = [
            ChatOpenAI(model="m", api_key="x", base_url=server.base_url + "/v1", max_retries=0)
            for server in (first, second)
        ]
        gateway = _gateway(cache)
        answers = [gateway.call(model, SCGP, VARS).text for model in models]
        assert answers == ["Yes", "No"] and len(first.requests) == len(second.requests) == 1
        # the same configuration in a new object (another process, another run) replays its own answer
        again = ChatOpenAI(model="m", api_key="other", base_url=second.base_url + "/v1", max_retries=0)
        assert _gateway(cache).call(again, SCGP, VARS).cached
        warmer = ChatOpenAI(model="m", api_key="x", base_url=second.base_url + "/v1", temperature=0.9)
        assert not _gateway(cache).call(warmer, SCGP, VARS).cached


def test_credentials_in_a_base_url_never_reach_results_meta_or_errors(
    stub: StubAPI, cache: CallCache, tmp_path: Path
) -> None:
    spec = f"openai-compatible:http://user:{SECRET}@127.0.0.1:{stub.port}/v1#m"
    stats = CallStats()
    assert _gateway(cache).call(spec, SCGP, VARS, stats=stats).parsed == "yes"
    meta = stats.meta("selfcheck-prompt")
    assert SECRET not in meta.model_dump_json() and meta.models == [
        f"openai-compatible:http://***@127.0.0.1:{stub.port}/v1#m"
    ]
    write_json(tmp_path / "results.json", {"model": spec, "meta": meta.model_dump()})
    assert SECRET not in (tmp_path / "results.json").read_text()
    stub.inject(Fault("status", 400))
    with pytest.raises(ModelUnavailableError) as failed:
        _gateway(None).call(spec, "semantic_entropy.answer", {"question": "q"})
    assert SECRET not in str(failed.value) and "***@" in str(failed.value)
    cache.close()
    blobs = b"".join(p.read_bytes() for p in Path(cache.directory).rglob("*") if p.is_file())
    assert SECRET.encode() not in blobs


def test_the_cli_takes_a_timeout_and_refuses_bad_numbers(
    stub: StubAPI, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from halluscope.cli import main

    stub.inject(Fault("slow", delay=1.0), times=10)
    spec = f"openai-compatible:{stub.base_url}/v1#m"
    monkeypatch.setenv("HALLUSCOPE_MAX_ATTEMPTS", "2")
    monkeypatch.setenv("HALLUSCOPE_RETRY_INITIAL", "0.01")
    args = ["prompts", "run", SCGP, "--model", spec, "--var", "context=c", "--var", "sentence=s", "--no-cache"]
    assert main([*args, "--timeout", "0.2"]) == 2
    assert "gave up after 2 tries" in capsys.readouterr().err
    monkeypatch.setenv("HALLUSCOPE_TIMEOUT", "soon")
    assert main(args) == 2
    assert "HALLUSCOPE_TIMEOUT must be a number, got 'soon'" in capsys.readouterr().err
    assert main([*args, "--timeout", "0"]) == 2
    assert "--timeout must be a positive number" in capsys.readouterr().err


def test_a_bad_context_size_in_the_environment_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from halluscope.backends.local import n_ctx_default

    monkeypatch.setenv("HALLUSCOPE_LOCAL_N_CTX", "4k")
    with pytest.raises(ConfigError, match="HALLUSCOPE_LOCAL_N_CTX must be a whole number, got '4k'"):
        n_ctx_default()
    monkeypatch.setenv("HALLUSCOPE_LOCAL_N_CTX", "2048")
    assert n_ctx_default() == 2048


# ---------------------------------------------------------------- issue 32: a key in a URL's query string


QUERY_SPECS = ("api_key", "token", "sig", "password", "X-Amz-Signature", "apiKey", "client_secret", "auth", "code")


@pytest.mark.parametrize("name", QUERY_SPECS)
def test_every_query_parameter_not_known_harmless_is_redacted(name: str) -> None:
    """Redacted by default, shown only by name: a key in ``?code=`` (a serverless function's URL) was
    shown, because only names that look like a secret were redacted."""
    from halluscope.errors import redact_credentials

    url = f"openai-compatible:http://127.0.0.1:8000/v1?model=m&{name}={SECRET}&region=eu#m"
    assert redact_credentials(url) == f"openai-compatible:http://127.0.0.1:8000/v1?model=m&{name}=***&region=eu#m"
    escaped = f"http://h/v1?model=1&amp;{name}={SECRET}&amp;api-version=2"  # as report.html escapes it
    assert SECRET not in redact_credentials(escaped) and "api-version=2" in redact_credentials(escaped)
    assert redact_credentials("http://h/?keyword=ada&monkey=1") == "http://h/?keyword=***&monkey=***"
    assert redact_credentials(redact_credentials(url)) == redact_credentials(url)


def _secret_spec(stub: StubAPI, name: str = "api_key") -> str:
    return f"openai-compatible:http://127.0.0.1:{stub.port}/v1?{name}={SECRET}#m"


@pytest.mark.parametrize("name", ["api_key", "code"])
def test_no_log_line_carries_a_credential_whoever_configured_the_logging(
    stub: StubAPI, caplog: pytest.LogCaptureFixture, name: str
) -> None:
    """httpx logs every request's full URL at INFO (under `langgraph dev` the server's log showed
    ``?api_key=...``); every record of the process is redacted as it is made."""
    import logging

    caplog.set_level(logging.DEBUG)  # what a server's logging does: httpx at INFO, httpcore at DEBUG
    reply = _gateway(None).call(_secret_spec(stub, name), "semantic_entropy.answer", {"question": "Who?"})
    assert reply.text
    logged = [r.getMessage() for r in caplog.records]
    assert any("HTTP Request: POST" in line for line in logged)  # the request line is there, redacted
    assert all(SECRET not in line for line in logged) and f"{name}=***" in caplog.text


@pytest.mark.parametrize("name", ["api_key", "code"])
def test_a_query_string_key_never_reaches_errors_progress_or_any_bench_file(
    stub: StubAPI, tmp_path: Path, capsys: pytest.CaptureFixture[str], data_dir: Path, name: str
) -> None:
    """One spec with ?api_key= (or a serverless function's ?code=) through a bench (results.json, report.md,
    report.html, items.jsonl, curves.json, the printed lines and the progress on stderr), --json, and a
    refused call (the error)."""
    from halluscope.cli import main

    spec = _secret_spec(stub, name)
    out = tmp_path / "bench"
    argv = ["bench", "wikibio", "--method", "selfcheck-prompt", "--model", spec, "--limit", "1", "--samples", "1"]
    assert main([*argv, "--out", str(out), "--data", str(data_dir)]) == 0
    printed = capsys.readouterr()
    written = {
        p.name: p.read_text(encoding="utf-8") for p in out.rglob("*") if p.suffix in (".json", ".jsonl", ".md", ".html")
    }
    assert {"results.json", "report.md", "report.html", "items.jsonl", "curves.json"} <= set(written)
    for where, text in [*written.items(), ("stdout", printed.out), ("stderr (progress)", printed.err)]:
        assert SECRET not in text, where
    assert f"{name}=***" in written["items.jsonl"] and f"{name}=***" in written["report.html"]
    assert main(["detect", "direct-question", "--text", "Ada wrote.", "--model", spec, "--json"]) == 0
    shown = capsys.readouterr().out
    assert SECRET not in shown and f"{name}=***" in shown
    stub.fail_next(400)
    code = main(["detect", "direct-question", "--text", "Ada wrote.", "--model", spec, "--no-cache"])
    err = capsys.readouterr().err
    assert code == 2 and "refused the call (400)" in err and f"{name}=***" in err and SECRET not in err


def test_a_query_string_key_never_reaches_a_failed_item_or_the_log(
    stub: StubAPI, capsys: pytest.CaptureFixture[str]
) -> None:
    """detect_many records a failed item's error, and the cache warns on stderr: neither shows the key."""
    import warnings

    import halluscope

    stub.fail_next(400)
    det = halluscope.detector("direct-question", model=_secret_spec(stub), gateway=_gateway(None))
    failed = det.detect_many([{"text": "Ada wrote."}], progress=False)[0]
    assert failed.error is not None and "api_key=***" in failed.error and SECRET not in failed.error
    from halluscope.backends.cache import RedisCache

    cache = object.__new__(RedisCache)  # a cache that lost its server mid-run, as its warning names it
    cache.url, cache._down, cache._lock = (
        f"redis://127.0.0.1:1/0?password={SECRET}",
        False,
        __import__("threading").Lock(),
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cache._lost(ConnectionError("gone"))
    assert caught and SECRET not in str(caught[0].message) and "password=***" in str(caught[0].message)


def test_a_query_string_key_never_reaches_cache_stats(capsys: pytest.CaptureFixture[str]) -> None:
    from halluscope.cli import main
    from tests.stub_servers import free_port

    url = f"redis://127.0.0.1:{free_port()}/0?password={SECRET}"
    assert main(["cache", "stats", "--cache", url]) == 2
    err = capsys.readouterr().err
    assert "password=***" in err and SECRET not in err


def test_a_query_string_key_never_names_a_ray_limit_actor() -> None:
    from halluscope.scale import _limit_name

    name = _limit_name(f"openai-compatible:http://h/v1?api_key={SECRET}#m", 4)
    assert name == "limit:openai-compatible:http://h/v1?api_key=***#m:4"
