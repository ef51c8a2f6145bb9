"""The guard proxy in front of traffic (issue 70): it relays nothing that holds the key it sent upstream,
blocks what it could not check when told to block (a stream held until its check is done), checks each
choice on its own, bounds a stream in total and idle time, refuses bad requests in one line, and says
why when an upstream's stream keeps its answer from being checked. Every upstream is a fake on
127.0.0.1 (``StubAPI``); the proxies are shared by the module's tests, one per setting."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.stub_servers import Fault, StubAPI
from tests.test_proxy import MESSAGES, UPSTREAM_KEY
from tests.test_serve_safely import ANSWER, Served, serve, server_env

QUERY = "api-version=2024-06-01"


@pytest.fixture(scope="module")
def upstream() -> Iterator[StubAPI]:
    with StubAPI(answer=ANSWER) as stub:
        yield stub


@pytest.fixture(scope="module")
def judge() -> Iterator[StubAPI]:
    with StubAPI(answer="Yes") as stub:
        stub.answers_by_content["It lies in Sydney."] = "No"
        yield stub


@pytest.fixture(autouse=True)
def fresh(upstream: StubAPI, judge: StubAPI) -> None:
    """Each test starts from the module's upstream as it was: the same answer, no pending fault."""
    upstream.answer, upstream.more_choices, upstream.tool_calls = ANSWER, [], None
    upstream._faults.clear()
    upstream._failures.clear()
    judge._faults.clear()
    judge._failures.clear()


def started(tmp_path: Path, upstream: StubAPI, judge: StubAPI, base: str, *flags: str, **env: str) -> Iterator[Served]:
    model = f"openai-compatible:{judge.base_url}/v1#judge"
    environment = server_env(tmp_path, **env)
    yield from serve(tmp_path, "--model", model, "--proxy", base, *flags, env=environment)


@pytest.fixture(scope="module")
def annotating(tmp_path_factory: pytest.TempPathFactory, upstream: StubAPI, judge: StubAPI) -> Iterator[Served]:
    """The default proxy, its streams bounded at 8 s in total and 2 s of silence."""
    tmp = tmp_path_factory.mktemp("annotating")
    flags = ("--request-timeout", "8", "--stream-idle-timeout", "2")
    with contextlib.contextmanager(started)(
        tmp, upstream, judge, f"{upstream.base_url}/v1", *flags, HALLUSCOPE_MAX_ATTEMPTS="1"
    ) as served:
        yield served


@pytest.fixture(scope="module")
def blocking(tmp_path_factory: pytest.TempPathFactory, upstream: StubAPI, judge: StubAPI) -> Iterator[Served]:
    """``--on-flag block`` (and so ``--on-error block``), the operator's key, a base URL with a query."""
    tmp = tmp_path_factory.mktemp("blocking")
    base = f"{upstream.base_url}/v1?{QUERY}"
    flags = ("--on-flag", "block", "--upstream-key-env", "UPSTREAM_KEY")
    env = {"UPSTREAM_KEY": UPSTREAM_KEY, "HALLUSCOPE_MAX_ATTEMPTS": "1"}
    with contextlib.contextmanager(started)(tmp, upstream, judge, base, *flags, **env) as served:
        yield served


def post(served: Served, body: dict[str, Any], **headers: str) -> httpx.Response:
    return httpx.post(f"{served.url}/v1/chat/completions", json=body, headers=headers, timeout=60)


def streamed(served: Served, body: dict[str, Any]) -> list[str]:
    """A streamed reply's data lines, each as it came."""
    with httpx.stream("POST", f"{served.url}/v1/chat/completions", json={**body, "stream": True}, timeout=60) as r:
        assert r.status_code == 200, r.read()
        return [line[len("data:") :].strip() for line in r.iter_lines() if line.startswith("data:")]


def verdict_of(lines: list[str]) -> dict[str, Any]:
    """The verdict chunk's object: the chunk before [DONE]."""
    assert lines[-1] == "[DONE]"
    return json.loads(lines[-2])["halluscope"]


# ---------------------------------------------------------------- 1. secrets


def test_an_upstream_that_quotes_the_key_it_got_never_hands_it_to_the_client(
    blocking: Served, upstream: StubAPI
) -> None:
    body = {"model": "m", "messages": MESSAGES}
    upstream.inject(Fault("echo_key", headers=(("x-request-id", f"req Bearer {UPSTREAM_KEY}"),)), times=3)
    plain = post(blocking, body)
    with httpx.stream("POST", f"{blocking.url}/v1/chat/completions", json={**body, "stream": True}, timeout=60) as r:
        streamed_reply = (r.status_code, r.read(), dict(r.headers))
    models = httpx.get(f"{blocking.url}/v1/models", timeout=60)
    assert upstream.requests[-1]["headers"]["authorization"] == f"Bearer {UPSTREAM_KEY}"  # it was sent, and echoed
    for status, content, headers in [
        (plain.status_code, plain.content, dict(plain.headers)),
        streamed_reply,
        (models.status_code, models.content, dict(models.headers)),
    ]:
        assert status == 401 and b"Incorrect API key provided" in content
        assert UPSTREAM_KEY.encode() not in content and UPSTREAM_KEY not in json.dumps(headers)
        assert headers["x-request-id"] == "req ***" and "x-seen-key" not in headers
    assert UPSTREAM_KEY not in blocking.text()


def test_a_base_url_with_a_query_keeps_it_after_the_route(blocking: Served, upstream: StubAPI) -> None:
    post(blocking, {"model": "m", "messages": MESSAGES})
    assert upstream.requests[-1]["path"] == f"/v1/chat/completions?{QUERY}"
    httpx.get(f"{blocking.url}/v1/models", timeout=60)
    assert upstream.requests[-1]["path"] == f"/v1/models?{QUERY}"


# ---------------------------------------------------------------- 2. fail closed


def test_block_withholds_a_flagged_answers_text_from_the_client_both_ways(blocking: Served) -> None:
    body = {"model": "m", "messages": MESSAGES}
    reply = post(blocking, {**body, "logprobs": True})  # the answer's tokens would spell it out too
    assert reply.headers["x-halluscope-verdict"] == "blocked"
    verdict = reply.json()["halluscope"]
    assert verdict["action"] == "blocked" and verdict["reason"] == "flagged"
    assert b"Sydney" not in reply.content and "blocked" not in verdict  # neither the answer nor its text
    assert [u["position"] for u in verdict["flagged"]] == [1] and "text" not in verdict["flagged"][0]
    lines = streamed(blocking, body)
    assert not any("Sydney" in line for line in lines)  # held until checked: no token of it was sent
    text = "".join(c["delta"].get("content", "") for line in lines[:-2] for c in json.loads(line)["choices"])
    assert text == reply.json()["choices"][0]["message"]["content"] != ANSWER  # the fallback, once
    assert verdict_of(lines)["action"] == "blocked"


def test_block_delivers_a_passing_answer_and_holds_back_what_it_could_not_check(
    blocking: Served, upstream: StubAPI, judge: StubAPI
) -> None:
    upstream.answer = "Canberra is the capital of Australia."
    body = {"model": "m", "messages": MESSAGES}
    passed = post(blocking, body)
    assert passed.headers["x-halluscope-verdict"] == "pass"
    assert passed.json()["choices"][0]["message"]["content"] == upstream.answer
    lines = streamed(blocking, body)
    text = "".join(c["delta"].get("content") or "" for line in lines[:-2] for c in json.loads(line)["choices"])
    assert text == upstream.answer and verdict_of(lines)["action"] == "pass"
    upstream.answer = "Canberra has a lake."  # a sentence not in the cache: the judge is asked, and fails
    judge.inject(Fault("status", 500), times=4)
    failed = post(blocking, body)
    verdict = failed.json()["halluscope"]
    assert failed.headers["x-halluscope-verdict"] == "blocked" and verdict["reason"] == "unchecked"
    assert "lake" not in failed.json()["choices"][0]["message"]["content"]
    bare = post(blocking, {"model": "m", "messages": MESSAGES[1:2]})  # no documents: nothing to check against
    assert bare.headers["x-halluscope-verdict"] == "blocked"
    assert "no tool/system" in bare.json()["halluscope"]["unchecked"]


def test_each_choice_is_checked_on_its_own_and_a_streamed_n_above_one_is_refused(
    annotating: Served, upstream: StubAPI
) -> None:
    upstream.answer = "Canberra is the capital of Australia."
    upstream.more_choices = [ANSWER]
    reply = post(annotating, {"model": "m", "messages": MESSAGES, "n": 2})
    verdict = reply.json()["halluscope"]
    assert reply.headers["x-halluscope-verdict"] == "flagged" and verdict["action"] == "flagged"
    assert [(c["index"], c["action"]) for c in verdict["choices"]] == [(0, "pass"), (1, "flagged")]
    assert [u["text"] for u in verdict["choices"][1]["flagged"]] == ["It lies in Sydney."]
    refused = post(annotating, {"model": "m", "messages": MESSAGES, "n": 2, "stream": True})
    assert refused.status_code == 400 and "n = 1" in refused.json()["error"]


def test_the_verdict_carries_every_units_score_not_only_the_flagged(annotating: Served) -> None:
    verdict = post(annotating, {"model": "m", "messages": MESSAGES}).json()["halluscope"]
    assert [(u["position"], u["score"] >= 0.5) for u in verdict["scored"]] == [(0, False), (1, True)]
    assert verdict["scored"][1]["score"] == verdict["flagged"][0]["score"]
    assert verdict["scored"][1]["spans"] == [[38, 56]]


# ---------------------------------------------------------------- 3. bad input and misbehaving upstreams


@pytest.mark.parametrize(
    ("raw", "said"),
    [
        (b'{"model": "m", "messages": [{"role": "user", "content": "a \\ud800 b"}]}', "lone surrogate"),
        (b'{"model": "m", "temperature": NaN, "messages": [{"role": "user", "content": "a"}]}', "NaN"),
        (b'{"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]}', "string"),
        (b'{"model": "m", "messages": ["hello"]}', "role"),
    ],
)
def test_a_bad_request_is_a_400_in_one_line(annotating: Served, upstream: StubAPI, raw: bytes, said: str) -> None:
    asked = len(upstream.requests)
    reply = httpx.post(
        f"{annotating.url}/v1/chat/completions", content=raw, headers={"content-type": "application/json"}, timeout=60
    )
    assert reply.status_code == 400 and said in reply.json()["error"] and "\n" not in reply.json()["error"]
    assert len(upstream.requests) == asked and "Traceback" not in annotating.text()


@pytest.mark.parametrize(
    ("fault", "said"),
    [
        (Fault("stream_malformed"), "not a chat completion chunk"),
        (Fault("stream_cut"), "broke off"),
        (Fault("stream_surrogate"), "lone surrogate"),
        (Fault("stream_stall", delay=5), "sent nothing for 2 s"),
        (Fault("stream_endless", delay=20), "timeout of 8 s"),
    ],
)
def test_a_stream_that_misbehaves_ends_with_a_chunk_that_says_why_it_was_not_checked(
    annotating: Served, upstream: StubAPI, fault: Fault, said: str
) -> None:
    upstream.inject(fault)
    lines = streamed(annotating, {"model": "m", "messages": MESSAGES})
    verdict = verdict_of(lines)
    assert verdict["verdict"] is None and verdict["action"] == "unchecked" and said in verdict["error"]
    first = json.loads(lines[1])["choices"][0]["delta"]["content"]
    assert first == "Canberra "  # what arrived was passed on
    assert "Traceback" not in annotating.text() and "Expected ASGI" not in annotating.text()


def test_an_upstream_that_answers_a_stream_with_json_is_relayed_as_a_completion(
    annotating: Served, upstream: StubAPI
) -> None:
    upstream.inject(Fault("stream_as_json"))
    body = {"model": "m", "messages": MESSAGES, "stream": True}
    reply = httpx.post(f"{annotating.url}/v1/chat/completions", json=body, timeout=60)
    assert reply.headers["content-type"].startswith("application/json")
    assert reply.json()["halluscope"]["action"] in ("pass", "flagged") and "data:" not in reply.text


def test_retry_after_and_location_reach_the_client(annotating: Served, upstream: StubAPI) -> None:
    upstream.inject(Fault("status", 429, headers=(("retry-after", "7"), ("x-ratelimit-remaining-requests", "0"))))
    limited = post(annotating, {"model": "m", "messages": MESSAGES})
    assert limited.status_code == 429 and limited.headers["retry-after"] == "7"
    assert limited.headers["x-ratelimit-remaining-requests"] == "0"
    upstream.inject(Fault("status", 307, headers=(("location", "https://elsewhere.example/v1/chat/completions"),)))
    moved = post(annotating, {"model": "m", "messages": MESSAGES})
    assert moved.status_code == 307 and moved.headers["location"] == "https://elsewhere.example/v1/chat/completions"


def test_under_on_error_block_an_answer_with_a_sentence_left_unchecked_is_blocked() -> None:
    from halluscope.serve.proxy import Proxy, ProxySettings
    from halluscope.serve.service import ServerSettings

    partly = {
        "verdict": {"flagged": []},
        "flagged": [],
        "scored": [{"position": 0, "score": 0.1}, {"position": 1, "score": None}],  # its judge call failed
    }
    blocking = Proxy(ProxySettings("http://127.0.0.1:9/v1", on_error="block"), ServerSettings())
    assert blocking.acted(partly)["action"] == "blocked" and blocking.acted(partly)["reason"] == "unchecked"
    passing = Proxy(ProxySettings("http://127.0.0.1:9/v1"), ServerSettings())
    assert passing.acted(partly)["action"] == "pass"


def test_a_client_closing_its_mcp_session_puts_no_traceback_in_the_log(caplog: pytest.LogCaptureFixture) -> None:
    import logging

    from halluscope.serve.http import MCP_SDK_LOG, quiet_closed_sessions

    quiet_closed_sessions()
    sdk = logging.getLogger(MCP_SDK_LOG)
    with caplog.at_level(logging.INFO):
        try:
            raise ConnectionResetError("the client went away")
        except ConnectionResetError:
            sdk.exception("Error in standalone SSE response")  # what the SDK logs when a client closes
            sdk.exception("Error handling POST request")  # a real fault of the SDK's is still logged
    assert [r.getMessage() for r in caplog.records] == ["Error handling POST request"]


def test_serve_proxy_without_the_serve_extra_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from halluscope.errors import ConfigError
    from halluscope.serve.http import HttpSettings, serve_http
    from halluscope.serve.proxy import ProxySettings
    from halluscope.serve.service import ServerSettings

    monkeypatch.setitem(sys.modules, "uvicorn", None)  # not installed
    with pytest.raises(ConfigError, match=r"serve --http --proxy needs the serve extra .*-e '\.\[serve\]'"):
        serve_http(ServerSettings(), HttpSettings(), ProxySettings("http://127.0.0.1:9/v1"))


@pytest.mark.parametrize("where", ["model", "member"])
def test_a_calibration_that_names_a_remote_model_is_refused_unless_the_operator_names_it(
    tmp_path: Path, judge: StubAPI, where: str
) -> None:
    import subprocess
    import sys

    from tests.calibrations import line
    from tests.stub_servers import SinkAPI, free_port

    with SinkAPI() as sink:
        there = f"openai-compatible:{sink.base_url}/v1#m"
        if where == "model":
            fitted = line("grounded", (0.0, 1.0), (0.2, 0.9), model=there)
        else:
            fitted = line(f"grounded[model={there}]", (0.0, 1.0), (0.2, 0.9))
        path = fitted.save(tmp_path / "calibration.json")
        argv = [sys.executable, "-m", "halluscope.cli", "check", "--calibration", str(path), "--context", "Doc."]
        done = subprocess.run([*argv, "--text", ANSWER], env=server_env(tmp_path), capture_output=True, text=True)
        assert done.returncode == 2 and "name that model yourself (--model)" in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1
        port = str(free_port())
        serving = [sys.executable, "-m", "halluscope.cli", "serve", "--http", f"127.0.0.1:{port}"]
        serving += ["--calibration", str(path)]
        started_ = subprocess.run(serving, env=server_env(tmp_path), capture_output=True, text=True, timeout=60)
        assert started_.returncode == 2 and "--model or --allow-model" in started_.stderr
        assert sink.requests == []  # neither the answer nor a key went there


def test_the_ready_line_says_what_the_server_loaded_at_start(annotating: Served, judge: StubAPI) -> None:
    assert f"loaded openai-compatible:{judge.base_url}/v1#judge" in annotating.text()


# ---------------------------------------------------------------- tool calls (issue 73)

CANCEL = {"type": "function", "function": {"name": "cancel_order", "parameters": {"type": "object", "properties": {
    "order_id": {"type": "string"}, "reason": {"type": "string", "default": "customer request"}}}}}  # fmt: skip


def _call(order: str) -> dict[str, Any]:
    arguments = json.dumps({"order_id": order, "reason": "customer request"})
    return {"id": "call_1", "type": "function", "function": {"name": "cancel_order", "arguments": arguments}}


@pytest.fixture(scope="module")
def calls_blocked(tmp_path_factory: pytest.TempPathFactory, upstream: StubAPI, judge: StubAPI) -> Iterator[Served]:
    """``--check-tool-calls --check-actions --judge-actions --on-flag block``."""
    tmp = tmp_path_factory.mktemp("calls")
    flags = ("--check-tool-calls", "--check-actions", "--judge-actions", "--on-flag", "block")
    with contextlib.contextmanager(started)(tmp, upstream, judge, f"{upstream.base_url}/v1", *flags) as served:
        yield served


def test_a_tool_call_is_checked_before_the_client_sees_it(
    calls_blocked: Served, upstream: StubAPI, judge: StubAPI
) -> None:
    """A call whose order id the user gave goes through with its verdict; one the user never gave is taken
    out, the fallback said in its place, and the verdict names the argument, streamed or not (a stream is
    held until its calls are whole and checked); the judge is never asked."""
    body = {"model": "m", "messages": [{"role": "user", "content": "Cancel my order ORD-1234."}], "tools": [CANCEL]}
    asked = len(judge.requests)
    upstream.tool_calls = [_call("ORD-1234")]
    passed = post(calls_blocked, body).json()
    assert passed["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "cancel_order"
    assert passed["halluscope"] == {
        "verdict": "tool calls",
        "tool_calls": [{"name": "cancel_order", "flagged": []}],
        "action": "pass",
    }
    upstream.tool_calls = [_call("ORD-9999")]
    reply = post(calls_blocked, body)
    blocked = reply.json()
    assert "tool_calls" not in blocked["choices"][0]["message"] and blocked["choices"][0]["finish_reason"] == "stop"
    assert blocked["halluscope"]["action"] == "blocked" and reply.headers["x-halluscope-verdict"] == "blocked"
    [flag] = blocked["halluscope"]["tool_calls"][0]["flagged"]
    assert flag.startswith('order_id="ORD-9999": invented')
    upstream.tool_calls = [{"id": "c", "type": "function", "function": {"name": "cancel_order", "arguments": "{"}}]
    assert post(calls_blocked, body).json()["halluscope"]["action"] == "blocked"  # unreadable: not let through
    assert len(judge.requests) == asked
    upstream.tool_calls = [_call("ORD-1234")]
    streamed = post(calls_blocked, {**body, "stream": True}).text  # the call's arguments come in pieces
    assert '"arguments": "{\\"ord' in streamed  # held, then released whole
    closing = json.loads(streamed.split("data: ")[-2])["halluscope"]
    assert closing == {
        "verdict": "tool calls",
        "tool_calls": [{"name": "cancel_order", "flagged": []}],
        "action": "pass",
    }
    upstream.tool_calls = [_call("ORD-9999")]
    stopped = post(calls_blocked, {**body, "stream": True}).text
    assert "ORD-9999" not in stopped.split("halluscope")[0] and '"content": "' in stopped  # the fallback, no call
    assert json.loads(stopped.split("data: ")[-2])["halluscope"]["action"] == "blocked"
    assert len(judge.requests) == asked


def test_a_claim_of_an_action_whose_call_failed_is_annotated(calls_blocked: Served, upstream: StubAPI) -> None:
    """``--check-actions``: the final answer says it cancelled an order whose call the request shows failed
    (an error payload); its claim is flagged with why, streamed or not, and the answer goes on as its own
    check decides."""
    messages = [
        {"role": "user", "content": "Cancel order ORD-5."},
        {"role": "assistant", "content": None, "tool_calls": [_call("ORD-5")]},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"error": "order ORD-5 has shipped"}'},
    ]
    upstream.tool_calls = None
    upstream.answers_by_content["Cancel order ORD-5."] = "I have cancelled your order ORD-5."
    try:
        replied = post(calls_blocked, {"model": "m", "messages": messages}).json()["halluscope"]
        assert replied["actions"] == {"claims": 1, "flagged": [{
            "text": "I have cancelled your order ORD-5.", "claims_action": True, "verb": "cancelled",
            "calls": ["cancel_order"], "reason": "the call failed: cancel_order"}], "undecided": []}  # fmt: skip
        assert replied["action"] == "pass"  # annotated: the answer's own check passed it
        streamed = post(calls_blocked, {"model": "m", "messages": messages, "stream": True}).text
        closing = json.loads(streamed.split("data: ")[-2])
        assert closing["halluscope"]["actions"]["flagged"][0]["reason"] == "the call failed: cancel_order"
    finally:
        del upstream.answers_by_content["Cancel order ORD-5."]


def test_a_claim_matching_cannot_decide_is_read_by_the_judge(
    calls_blocked: Served, upstream: StubAPI, judge: StubAPI
) -> None:
    """``--judge-actions``: the answer says it paid an invoice whose call ran but was declined in words (no
    error payload); the server's judge reads the claim against the calls and their results (one call
    beside the answer's own check) and flags it; the answer goes on as its own check decides."""
    call = {
        "id": "call_7",
        "type": "function",
        "function": {"name": "pay_invoice", "arguments": '{"invoice": "INV-7"}'},
    }
    messages = [
        {"role": "user", "content": "Pay invoice INV-7."},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_7", "content": '{"status": "declined"}'},
    ]
    upstream.answers_by_content["Pay invoice INV-7."] = "I have paid invoice INV-7."
    judge.answers_by_content["The agent called pay_invoice"] = "No"
    asked = len(judge.requests)
    try:
        replied = post(calls_blocked, {"model": "m", "messages": messages}).json()["halluscope"]
        [flag] = replied["actions"]["flagged"]
        assert flag["undecided"] == "the result of pay_invoice reads as a failure in words, with no error"
        assert flag["judge_score"] >= 0.5 and flag["reason"].endswith("the judge finds it unsupported")
        assert replied["action"] == "pass" and len(judge.requests) == asked + 2
        read = [json.dumps(r) for r in judge.requests[asked:] if "The agent called pay_invoice" in json.dumps(r)]
        assert len(read) == 1 and "It returned:" in read[0] and "declined" in read[0]
    finally:
        del upstream.answers_by_content["Pay invoice INV-7."], judge.answers_by_content["The agent called pay_invoice"]
