"""A check service you can put on a network (issue 56): only the operator chooses what the server calls
or reads, a token guards every HTTP route and is required beyond loopback, POST /check is held to the
same Host / Origin / JSON / size rules as /mcp, bad input is one line and never a traceback, and a
request whose client leaves or whose timeout passes makes no further model call.

Every address a request tries to make the server reach is a listener on 127.0.0.1 that records what
arrives (``SinkAPI``); the tests assert it saw nothing, and that no key left the process."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.stub_servers import SinkAPI, StubAPI

REPO = Path(__file__).resolve().parents[1]
ANSWER = "Canberra is the capital of Australia. It lies in Sydney."
DOCS = ["Canberra is the capital of Australia, in the Australian Capital Territory."]
SECRET = "sk-SERVER-OWN-KEY-0123456789"
TOKEN = "t0ken-for-the-tests-0123456789"


def server_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LANGSMITH_", "LANGCHAIN_", "HALLUSCOPE_SERVE"))}
    keys = {"OPENAI_API_KEY": SECRET, "OPENAI_COMPATIBLE_API_KEY": SECRET, "ANTHROPIC_API_KEY": SECRET}
    return env | keys | {"PYTHONPATH": str(REPO), "HALLUSCOPE_CACHE_DIR": str(tmp_path / "cache")} | extra


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Served:
    """A `halluscope serve --http` process and every line it wrote to stderr."""

    url: str
    process: subprocess.Popen[str]
    log: list[str] = field(default_factory=list)

    def text(self) -> str:
        return "".join(self.log)


def serve(tmp_path: Path, *flags: str, env: dict[str, str] | None = None, host: str = "127.0.0.1") -> Iterator[Served]:
    port = free_port()
    argv = [sys.executable, "-m", "halluscope.cli", "serve", "--http", f"{host}:{port}", *flags]
    process = subprocess.Popen(argv, env=env or server_env(tmp_path), stderr=subprocess.PIPE, text=True)
    served = Served(f"http://{host}:{port}", process)
    ready = threading.Event()

    def read() -> None:
        for line in process.stderr or ():
            served.log.append(line)
            if "halluscope MCP server on" in line:
                ready.set()

    threading.Thread(target=read, daemon=True).start()
    try:
        if not ready.wait(90):
            pytest.fail(f"the server did not say it was ready: {served.text()}")
        yield served
    finally:
        process.terminate()
        process.wait(timeout=30)


@pytest.fixture
def judge() -> Iterator[StubAPI]:
    """The operator's judge on 127.0.0.1: Yes, except No for the Sydney sentence."""
    with StubAPI(answer="Yes") as stub:
        stub.answers_by_content["It lies in Sydney."] = "No"
        yield stub


@pytest.fixture
def sink() -> Iterator[SinkAPI]:
    with SinkAPI() as listener:
        yield listener


# ---------------------------------------------------------------- 1. only the operator chooses


def attacks(sink: SinkAPI, tmp_path: Path) -> list[tuple[str, dict[str, Any], str]]:
    """(method, the request's arguments, the option it must be refused for): every way a request once
    made the server call an address of the client's choosing, or read a file of its choosing."""
    there = f"openai-compatible:{sink.base_url}/v1#m"
    secret_file = tmp_path / "secret.gguf"
    secret_file.write_text("PASSWORD=hunter2")
    text = {"text": "Paris is in France."}
    return [
        ("direct-question", {"inputs": text, "options": {"model": there}}, "model"),
        ("direct-question", {"inputs": text, "options": {"model": "openai:gpt-4o-mini"}}, "model"),
        ("direct-question", {"inputs": {**text, "model": there}}, "model"),  # an option smuggled as an input
        ("semantic-entropy", {"inputs": {"question": "Who?"}, "options": {"judge": there}}, "judge"),
        (
            "fewl",
            {"inputs": {"question": "Who?", "answers": ["Ada."]}, "options": {"references": [there]}},
            "references",
        ),
        ("grounded", {"inputs": {**text, "context": DOCS}, "options": {"model": f"local:{secret_file}"}}, "model"),
        ("probe", {"inputs": text, "options": {"probe": str(secret_file)}}, "probe"),
        ("ensemble", {"inputs": text, "options": {"calibration": str(tmp_path / "nothing.json")}}, "calibration"),
        ("direct-question", {"inputs": text, "options": {"gateway": "x"}}, "gateway"),  # a run setting
    ]


def test_a_request_cannot_choose_what_the_server_calls_or_reads(tmp_path: Path, sink: SinkAPI, judge: StubAPI) -> None:
    from halluscope.serve import ServerSettings

    operator = f"openai-compatible:{judge.base_url}/v1#judge"
    settings = ServerSettings(model=operator, max_calls=50, timeout=60)
    for method, request, option in attacks(sink, tmp_path):
        with pytest.raises(Exception) as refused:
            asyncio.run(settings.detect(method, request["inputs"], request.get("options")))
        message = str(refused.value)
        assert repr(option) in message and "\n" not in message, (method, option, message)
        assert "hunter2" not in message and "PASSWORD" not in message and sink.base_url not in message
    assert sink.requests == []  # nothing reached the client's address
    assert judge.requests == []  # and no request ran on the operator's model either


def test_the_operator_allows_an_exact_spec_and_the_test_sees_it_arrive(tmp_path: Path, sink: SinkAPI) -> None:
    """The attack's counter-proof: allowed by the operator, the same spec is called (so the sink would
    have seen the attack had it got through)."""
    from halluscope.backends.gateway import Gateway
    from halluscope.prompts.registry import PromptRegistry
    from halluscope.serve import ServerSettings
    from tests.conftest import FAST_RETRY

    there = f"openai-compatible:{sink.base_url}/v1#m"
    gateway = Gateway(cache=None, registry=PromptRegistry(), retry=FAST_RETRY)
    settings = ServerSettings(gateway, max_calls=50, timeout=60, allowed=[there])
    with pytest.raises(Exception):  # noqa: B017 - the sink answers no chat completion; it only records
        asyncio.run(settings.detect("direct-question", {"text": "Paris is in France."}, {"model": there}))
    assert sink.requests and sink.requests[0]["path"].endswith("/chat/completions")


def test_the_attack_over_the_mcp_door_reaches_nothing_and_no_key_leaves(tmp_path: Path, sink: SinkAPI) -> None:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(
        command=sys.executable, args=["-m", "halluscope.cli", "serve", "--mcp"], env=server_env(tmp_path)
    )

    async def attack() -> list[str]:
        errors = []
        async with stdio_client(params) as (read, write), ClientSession(read, write) as client:
            await client.initialize()
            for method, request, _ in attacks(sink, tmp_path):
                found = await client.call_tool("detect", {"method": method, **request})
                assert found.isError
                errors.append(found.content[0].text)
            extra = await client.call_tool(
                "check", {"answer": ANSWER, "model": f"openai-compatible:{sink.base_url}/v1#m"}
            )
            assert extra.isError and "check takes no model" in extra.content[0].text
        return errors

    errors = asyncio.run(attack())
    assert all("\n" not in e and "hunter2" not in e for e in errors)
    assert sink.requests == []
    assert not any(SECRET in json.dumps(r["headers"]) for r in sink.requests)


def test_a_shared_langgraph_server_holds_the_configurable_to_the_operators_choices(
    monkeypatch: pytest.MonkeyPatch, sink: SinkAPI
) -> None:
    from halluscope.runtime import studio

    there = f"openai-compatible:{sink.base_url}/v1#m"
    monkeypatch.setenv("HALLUSCOPE_SERVE_SHARED", "1")
    graph = asyncio.run(studio.direct_question_graph({"configurable": {"model": there}}))
    with pytest.raises(studio.ClientError, match="option 'model' names a model this server's operator did not allow"):
        graph.invoke({"text": "Paris is in France."})
    monkeypatch.setenv("HALLUSCOPE_SERVE_ALLOW_MODEL", there)  # allowed: the graph is built on it
    allowed = asyncio.run(studio.direct_question_graph({"configurable": {"model": there}}))
    assert allowed.name == "direct-question"
    assert sink.requests == []


def test_every_option_that_names_a_model_or_a_file_says_so() -> None:
    """A new option holding a spec or a path must declare ``refers`` (or the server would pass it on): every
    option that takes text is declared, a Literal, or one of the listed plain-text ones."""
    import typing

    from halluscope.runtime import registry

    plain_text = {("ensemble", "methods"), ("fewl", "pool"), ("grounded", "band")}  # names; questions; "LOW,HIGH"
    undeclared = []
    for name, method in registry.methods().items():
        for option in method.option_names:
            hint = method.hints[option]
            members = typing.get_args(hint) or (hint,)
            texts = [m for m in members if m is str or typing.get_args(m)[:1] == (str,) or "ModelLike" in str(m)]
            if texts and option not in method.refers and (name, option) not in plain_text:
                undeclared.append(f"{name}.{option}")
    assert not undeclared, undeclared


# ---------------------------------------------------------------- 2. a token, and where one is needed


def test_a_bind_beyond_loopback_without_a_token_is_refused_at_start(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "halluscope.cli", "serve", "--http", f"0.0.0.0:{free_port()}"]
    done = subprocess.run(argv, env=server_env(tmp_path), capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "needs a token" in lines[0] and "HALLUSCOPE_SERVE_TOKEN" in lines[0]


def test_every_route_needs_the_token_and_the_token_is_never_logged(tmp_path: Path, judge: StubAPI) -> None:
    model = f"openai-compatible:{judge.base_url}/v1#judge"
    env = server_env(tmp_path, HALLUSCOPE_SERVE_TOKEN=TOKEN)
    for served in serve(tmp_path, "--model", model, env=env):
        good = {"authorization": f"Bearer {TOKEN}"}
        for headers in ({}, {"authorization": "Bearer wrong-token-0123456789"}, {"authorization": TOKEN}):
            assert httpx.get(f"{served.url}/health", headers=headers).status_code == 401
            assert httpx.post(f"{served.url}/check", json={"answer": ANSWER}, headers=headers).status_code == 401
            assert httpx.post(f"{served.url}/mcp", json={}, headers=headers).status_code == 401
        health = httpx.get(f"{served.url}/health", headers=good)
        assert health.status_code == 200 and health.json()["status"] == "ok" and health.json()["model"] == model
        checked = httpx.post(f"{served.url}/check", json={"answer": ANSWER, "context": DOCS}, headers=good, timeout=60)
        assert checked.status_code == 200 and checked.json()["verdict"]["flagged"] == [1]
        assert TOKEN not in served.text()


def test_an_ipv6_loopback_bind_prints_its_url_with_brackets(tmp_path: Path) -> None:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError as exc:
        pytest.skip(f"this machine has no IPv6 loopback to bind ({exc})")
    for served in serve(tmp_path, host="[::1]"):
        assert f"on {served.url}/mcp" in served.text() and "http://[::1]:" in served.url


# ---------------------------------------------------------------- 3. POST /check as careful as /mcp


def test_check_refuses_what_mcp_refuses_and_bad_input_is_one_line(tmp_path: Path, judge: StubAPI) -> None:
    model = f"openai-compatible:{judge.base_url}/v1#judge"
    for served in serve(tmp_path, "--model", model, "--max-body", "1000"):
        url = f"{served.url}/check"
        rebinding = {"host": "evil.example", "origin": "http://evil.example"}
        assert httpx.post(url, json={"answer": ANSWER}, headers=rebinding).status_code == 421
        assert httpx.post(url, json={"answer": ANSWER}, headers={"origin": "http://evil.example"}).status_code == 403
        form = httpx.post(url, content=json.dumps({"answer": ANSWER}), headers={"content-type": "text/plain"})
        assert form.status_code == 415
        assert httpx.post(url, json={"answer": "x" * 5000}).status_code == 413
        chunked = httpx.post(
            url, content=iter([b'{"answer": "', b"x" * 3000, b'"}']), headers={"content-type": "application/json"}
        )
        assert chunked.status_code == 413
        as_json = {"content-type": "application/json"}
        bad = {
            "threshold": json.dumps({"answer": ANSWER, "context": DOCS, "threshold": "high"}).encode(),
            "a list": b"[0.5]",
            "not UTF-8": b'{"answer": "caf\xe9"}',
            "lone surrogate": b'{"answer": "Paris is big.\\ud800", "context": ["Paris."]}',
            "deep": b"[" * 100_000 + b"]" * 100_000,
        }
        for what, body in bad.items():
            if what == "deep":
                continue  # larger than this server's body limit: the next server takes it
            answered = httpx.post(url, content=body, headers=as_json, timeout=60)
            assert answered.status_code == 400, (what, answered.text)
            assert "\n" not in answered.json()["error"], what
        rpc = httpx.post(
            f"{served.url}/mcp",
            json={"jsonrpc": "2.0", "id": {"an": "object"}, "method": "tools/list"},
            headers={"accept": "application/json, text/event-stream"},
        )
        assert rpc.status_code == 400 and rpc.json()["error"]["code"] == -32600
        time.sleep(0.5)
        assert "Traceback" not in served.text(), served.text()
    for served in serve(tmp_path, "--model", model):
        deep = httpx.post(f"{served.url}/check", content=bad["deep"], headers=as_json, timeout=60)
        assert deep.status_code == 400 and deep.json() == {"error": "the body's JSON is nested too deeply"}
        deep_rpc = httpx.post(f"{served.url}/mcp", content=bad["deep"], headers=as_json, timeout=60)
        assert deep_rpc.status_code == 400
        time.sleep(0.5)
        assert "Traceback" not in served.text(), served.text()


def test_a_lone_surrogate_is_one_clear_error_in_python_too() -> None:
    import halluscope
    from halluscope.errors import ConfigError

    with pytest.raises(ConfigError, match=r"not valid Unicode: a lone surrogate '\\ud800' at character 13"):
        halluscope.check("Paris is big.\ud800", context=["Paris is a city."], model="local:smollm2-135m")
    with pytest.raises(ConfigError, match=r"context\[0\] is not valid Unicode"):
        halluscope.check("Paris is big.", context=["Paris\udfff."], model="local:smollm2-135m")


# ---------------------------------------------------------------- 4. work stops when nobody waits


def test_a_request_past_its_timeout_makes_no_further_call(tmp_path: Path) -> None:
    sentences = " ".join(f"Canberra has {i} parks." for i in range(8))
    with StubAPI(answer="Yes", latency=0.6) as slow:
        model = f"openai-compatible:{slow.base_url}/v1#judge"
        for served in serve(tmp_path, "--model", model, "--request-timeout", "1", "--concurrency", "1"):
            answered = httpx.post(f"{served.url}/check", json={"answer": sentences, "context": DOCS}, timeout=60)
            cut = time.monotonic()
            assert answered.status_code == 504 and "timeout of 1 s" in answered.json()["error"]
            time.sleep(2.5)
            assert slow.arrivals and not [t for t in slow.arrivals if t > cut], "calls after the cut"
            assert len(slow.arrivals) <= 3  # 8 sentences would have been 8 calls


def leave_during_the_first_call(served: Served, path: str, body: dict[str, Any], judge: StubAPI) -> float:
    """POST ``body`` to ``path`` on a raw socket and close it once the judge's first call has arrived
    (the client leaves mid-request); the time it left."""
    data = json.dumps(body).encode()
    port = int(served.url.rsplit(":", 1)[1])
    client = socket.create_connection(("127.0.0.1", port))
    head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
    client.sendall(head.encode() + f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
    deadline = time.monotonic() + 30
    while not judge.arrivals and time.monotonic() < deadline:
        time.sleep(0.05)
    client.close()
    return time.monotonic()


def test_a_request_whose_client_leaves_makes_no_further_call(tmp_path: Path) -> None:
    sentences = " ".join(f"Canberra has {i} parks." for i in range(8))
    with StubAPI(answer="Yes", latency=1.0) as slow:
        model = f"openai-compatible:{slow.base_url}/v1#judge"
        for served in serve(tmp_path, "--model", model, "--concurrency", "1"):
            left = leave_during_the_first_call(served, "/check", {"answer": sentences, "context": DOCS}, slow)
            time.sleep(3)
            assert len(slow.arrivals) == 1 and not [t for t in slow.arrivals if t > left]


def test_serve_mcp_exits_within_two_seconds_of_stdin_closing(tmp_path: Path) -> None:
    with StubAPI(answer="Yes", latency=20.0) as stalled:
        model = f"openai-compatible:{stalled.base_url}/v1#judge"
        argv = [sys.executable, "-m", "halluscope.cli", "serve", "--mcp", "--model", model]
        process = subprocess.Popen(
            argv, env=server_env(tmp_path), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        assert process.stdin is not None
        messages = [
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "t", "version": "0"},
                },
            },
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {"name": "check", "arguments": {"answer": ANSWER, "context": DOCS}},
            },
        ]
        for message in messages:
            process.stdin.write((json.dumps(message) + "\n").encode())
        process.stdin.flush()
        deadline = time.monotonic() + 60
        while len(stalled.arrivals) < 2 and time.monotonic() < deadline:  # ANSWER's two sentences go out together
            time.sleep(0.05)
        assert len(stalled.arrivals) == 2, "the request's two calls never reached the model"
        closed = time.monotonic()
        process.stdin.close()
        process.wait(timeout=30)
        assert time.monotonic() - closed < 2.0
        assert not [t for t in stalled.arrivals if t > closed]  # none after the cut


def test_what_every_request_needs_is_loaded_before_the_server_says_it_is_ready() -> None:
    from halluscope.serve import ServerSettings

    class Recording:
        warmed: list[str] = []

        def warm(self, spec: str) -> None:
            self.warmed.append(spec)

    gateway = Recording()
    ServerSettings(gateway, model="local:smollm2-135m", judge="local:qwen2.5-coder-0.5b").warm()  # type: ignore[arg-type]
    assert gateway.warmed == ["local:qwen2.5-coder-0.5b", "local:smollm2-135m"]
    from halluscope import text

    assert text._pipeline.cache_info().currsize == 1  # spaCy's sentencizer loaded


def test_a_server_with_a_calibration_runs_it_as_fitted_and_answers_with_probabilities(
    tmp_path: Path, judge: StubAPI
) -> None:
    """serve --calibration FILE: every /check runs the file's method with its options, answers with each
    sentence's probability and draws the verdict at the file's threshold; another method is refused."""
    from tests.calibrations import line

    model = f"openai-compatible:{judge.base_url}/v1#judge"
    fitted = line("grounded", (0.0, 1.0), (0.2, 0.9), model=model, settings={"grounded": {"top_k": 1}}, threshold=0.6)
    fitted = fitted.save(tmp_path / "calibration.json")
    for served in serve(tmp_path, "--model", model, "--calibration", str(fitted)):
        answered = httpx.post(f"{served.url}/check", json={"answer": ANSWER, "context": DOCS}, timeout=60)
        assert answered.status_code == 200, answered.text
        result = answered.json()
        assert [u["probability"] for u in result["units"]] == pytest.approx(
            [0.2 + 0.7 * u["score"] for u in result["units"]]
        )
        assert result["verdict"]["threshold"] == 0.6 and result["verdict"]["flagged"] == [1]
        other = httpx.post(f"{served.url}/check", json={"answer": ANSWER, "context": DOCS, "method": "direct-question"})
        assert other.status_code == 400 and "fitted for grounded, not direct-question" in other.json()["error"]
