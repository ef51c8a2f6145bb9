"""The guard proxy (`halluscope serve --proxy UPSTREAM`) on the wire: a fake OpenAI-compatible upstream on
127.0.0.1, the operator's judge on another, and the real clients (the openai package, LangChain's
ChatOpenAI, curl) pointed at the proxy. The reply comes back as the upstream gave it, with its answer's
check; streamed, the tokens pass as they come and the verdict arrives before [DONE]; the upstream's key is
the operator's or the client's, never both, and the proxy's own token never leaves."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.stub_servers import Fault, StubAPI
from tests.test_serve_safely import ANSWER, DOCS, TOKEN, free_port, leave_during_the_first_call, serve, server_env

UPSTREAM_KEY = "sk-UPSTREAM-OPERATOR-KEY-0123456789"
MESSAGES = [
    {"role": "system", "content": "Answer from the documents."},
    {"role": "user", "content": "Tell me about Canberra."},
    {"role": "tool", "tool_call_id": "c1", "content": DOCS[0]},
]


@pytest.fixture
def upstream() -> Iterator[StubAPI]:
    """The application's model behind the proxy: it answers ANSWER, whose second sentence DOCS do not hold."""
    with StubAPI(answer=ANSWER) as stub:
        yield stub


@pytest.fixture
def judge() -> Iterator[StubAPI]:
    with StubAPI(answer="Yes") as stub:
        stub.answers_by_content["It lies in Sydney."] = "No"
        yield stub


def proxy(tmp_path: Path, upstream: StubAPI, judge: StubAPI, *flags: str, **env: str) -> Iterator[Any]:
    model = f"openai-compatible:{judge.base_url}/v1#judge"
    yield from serve(
        tmp_path, "--model", model, "--proxy", f"{upstream.base_url}/v1", *flags, env=server_env(tmp_path, **env)
    )


def test_the_openai_client_gets_the_upstreams_reply_and_the_verdict(
    tmp_path: Path, upstream: StubAPI, judge: StubAPI
) -> None:
    import openai

    for served in proxy(tmp_path, upstream, judge):
        client = openai.OpenAI(base_url=f"{served.url}/v1", api_key="sk-CLIENT-OWN-KEY")
        raw = client.chat.completions.with_raw_response.create(model="m", messages=MESSAGES)  # type: ignore[arg-type]
        reply = raw.parse()
        assert reply.choices[0].message.content == ANSWER  # unchanged
        assert raw.headers["x-halluscope-verdict"] == "flagged"
        verdict = reply.model_extra["halluscope"]  # type: ignore[index]
        assert verdict["action"] == "flagged" and [u["text"] for u in verdict["flagged"]] == ["It lies in Sydney."]
        assert verdict["flagged"][0]["spans"] == [[38, 56]]
        sent = upstream.requests[-1]
        assert sent["body"]["messages"] == MESSAGES and sent["headers"]["authorization"] == "Bearer sk-CLIENT-OWN-KEY"
        assert all(
            "authorization" not in r["headers"] or "CLIENT" not in r["headers"]["authorization"] for r in judge.requests
        )

        models = httpx.get(f"{served.url}/v1/models")
        assert models.status_code == upstream_models_status(upstream)  # passed through as the upstream answers


def upstream_models_status(upstream: StubAPI) -> int:
    return httpx.get(f"{upstream.base_url}/v1/models").status_code


def test_a_streamed_reply_passes_its_tokens_and_ends_with_the_verdict(
    tmp_path: Path, upstream: StubAPI, judge: StubAPI
) -> None:
    import openai

    for served in proxy(tmp_path, upstream, judge):
        client = openai.OpenAI(base_url=f"{served.url}/v1", api_key="sk-CLIENT-OWN-KEY")
        chunks = list(client.chat.completions.create(model="m", messages=MESSAGES, stream=True))  # type: ignore[arg-type]
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text == ANSWER
        last = chunks[-1]
        assert last.choices == [] and last.model_extra["halluscope"]["action"] == "flagged"  # type: ignore[index]
        assert sum(1 for c in chunks if c.model_extra.get("halluscope")) == 1  # type: ignore[union-attr]


def test_a_streamed_answer_is_checked_sentence_by_sentence_while_its_tokens_pass(
    tmp_path: Path, upstream: StubAPI, judge: StubAPI
) -> None:
    upstream.answer = ANSWER + " " + " ".join(["It has many parks."] * 3)
    upstream.chunk_gap = 0.3  # 20 words: the stream lasts about 6 s
    for served in proxy(tmp_path, upstream, judge):
        body = {"model": "m", "messages": MESSAGES, "stream": True}
        with httpx.stream("POST", f"{served.url}/v1/chat/completions", json=body, timeout=60) as reply:
            lines = [line for line in reply.iter_lines() if line.startswith("data:")]
        verdict = json.loads(lines[-2][len("data:") :])["halluscope"]
        assert judge.arrivals[0] < upstream.streams_ended[-1] - 2  # the first sentence was judged mid-stream
        assert len(judge.requests) == 3 * 2  # distinct sentences x documents (system, tool): none checked again
        assert verdict["action"] == "flagged" and [u["text"] for u in verdict["flagged"]] == ["It lies in Sydney."]
        assert verdict["flagged"][0]["spans"] == [[38, 56]]


def test_langchains_chat_openai_works_through_the_proxy(tmp_path: Path, upstream: StubAPI, judge: StubAPI) -> None:
    from langchain_openai import ChatOpenAI

    for served in proxy(tmp_path, upstream, judge):
        chat = ChatOpenAI(model="m", base_url=f"{served.url}/v1", api_key="sk-CLIENT-OWN-KEY", max_retries=0)
        message = chat.invoke(MESSAGES[:2] + [{"role": "user", "content": "Canberra?"}])
        assert message.text == ANSWER
        streamed = "".join(str(c.text) for c in chat.stream("Canberra?"))
        assert streamed == ANSWER


def test_block_replaces_a_flagged_answer_and_delivers_none_of_it(
    tmp_path: Path, upstream: StubAPI, judge: StubAPI
) -> None:
    for served in proxy(tmp_path, upstream, judge, "--on-flag", "block"):
        reply = httpx.post(f"{served.url}/v1/chat/completions", json={"model": "m", "messages": MESSAGES}, timeout=60)
        body = reply.json()
        assert reply.headers["x-halluscope-verdict"] == "blocked"
        assert body["choices"][0]["message"]["content"] != ANSWER and "Sydney" not in reply.text  # never delivered


def test_the_operators_upstream_key_is_sent_and_a_clients_own_is_refused_never_both(
    tmp_path: Path, upstream: StubAPI, judge: StubAPI
) -> None:
    env = {"HALLUSCOPE_SERVE_TOKEN": TOKEN, "UPSTREAM_KEY": UPSTREAM_KEY}
    for served in proxy(tmp_path, upstream, judge, "--upstream-key-env", "UPSTREAM_KEY", **env):
        url = f"{served.url}/v1/chat/completions"
        body = {"model": "m", "messages": MESSAGES}
        assert httpx.post(url, json=body, timeout=60).status_code == 401  # the proxy's token first
        ok = httpx.post(url, json=body, headers={"authorization": f"Bearer {TOKEN}"}, timeout=60)
        assert ok.status_code == 200 and ok.json()["halluscope"]["action"] == "flagged"
        sent = upstream.requests[-1]["headers"]
        assert sent["authorization"] == f"Bearer {UPSTREAM_KEY}"  # the operator's key, not the proxy's token
        assert all(TOKEN not in json.dumps(r["headers"]) for r in upstream.requests + judge.requests)
        assert UPSTREAM_KEY not in served.text() and TOKEN not in served.text()
    with StubAPI() as other:
        env = {"UPSTREAM_KEY": UPSTREAM_KEY}
        for served in proxy(tmp_path, other, judge, "--upstream-key-env", "UPSTREAM_KEY", **env):
            both = httpx.post(
                f"{served.url}/v1/chat/completions",
                json={"model": "m", "messages": MESSAGES},
                headers={"authorization": "Bearer sk-CLIENT-OWN-KEY"},
            )
            assert both.status_code == 400 and "send no Authorization" in both.json()["error"]
            assert other.requests == []


def test_a_proxy_with_a_token_and_no_upstream_key_is_refused_at_start(tmp_path: Path) -> None:
    argv = ["serve", "--http", f"127.0.0.1:{free_port()}", "--proxy", "http://127.0.0.1:9/v1"]
    done = subprocess.run(
        [sys.executable, "-m", "halluscope.cli", *argv],
        env=server_env(tmp_path, HALLUSCOPE_SERVE_TOKEN=TOKEN),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0 and "--upstream-key-env" in done.stderr and TOKEN not in done.stderr


def test_a_request_without_documents_is_passed_unchecked_and_an_upstream_error_as_it_came(
    tmp_path: Path, upstream: StubAPI, judge: StubAPI
) -> None:
    for served in proxy(tmp_path, upstream, judge):
        url = f"{served.url}/v1/chat/completions"
        bare = httpx.post(url, json={"model": "m", "messages": MESSAGES[1:2]}, timeout=60)
        assert (
            bare.headers["x-halluscope-verdict"] == "unchecked"
            and "no tool/system" in bare.json()["halluscope"]["unchecked"]
        )
        upstream.inject(Fault("malformed_json"))  # a 200 that is no completion: passed on as it came, unchecked
        odd = httpx.post(url, json={"model": "m", "messages": MESSAGES}, timeout=60)
        assert odd.status_code == 200 and odd.content == b'{"id": "chatcmpl-stub", "choices": ['
        assert odd.headers["x-halluscope-verdict"] == "unchecked"
        upstream.fail_next(429)
        refused = httpx.post(url, json={"model": "m", "messages": MESSAGES}, timeout=60)
        assert refused.status_code == 429 and "halluscope" not in refused.json()
        assert httpx.post(url, json={"messages": "x"}).status_code == 400


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not on this machine")
def test_curl_gets_the_verdict_header(tmp_path: Path, upstream: StubAPI, judge: StubAPI) -> None:
    for served in proxy(tmp_path, upstream, judge):
        done = subprocess.run(
            ["curl", "-s", "-D", "-", f"{served.url}/v1/chat/completions", "-H", "content-type: application/json",
             "-d", json.dumps({"model": "m", "messages": MESSAGES})],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert "x-halluscope-verdict: flagged" in done.stdout.lower() and '"halluscope"' in done.stdout


def test_two_proxies_share_one_redis_cache_so_a_repeated_request_makes_no_judge_call(
    tmp_path: Path, upstream: StubAPI, judge: StubAPI
) -> None:
    from tests.stub_servers import redis_server

    server, url = redis_server(tmp_path)
    try:
        body = {"model": "m", "messages": MESSAGES}
        for first in proxy(tmp_path, upstream, judge, "--cache", url):
            one = httpx.post(f"{first.url}/v1/chat/completions", json=body, timeout=60).json()["halluscope"]
        asked = len(judge.requests)
        assert asked > 0
        for second in proxy(tmp_path / "other", upstream, judge, "--cache", url):
            two = httpx.post(f"{second.url}/v1/chat/completions", json=body, timeout=60).json()["halluscope"]
        assert len(judge.requests) == asked  # the second process read the first's verdicts from Redis
        assert two["flagged"] == one["flagged"] and two["cost"]["calls"] == 0 and two["cost"]["cache_hits"] > 0
    finally:
        server.kill()
        server.wait(timeout=30)


@pytest.mark.parametrize("shared", [True, False])
def test_two_proxies_on_one_redis_hold_a_judges_limit_together(tmp_path: Path, upstream: StubAPI, shared: bool) -> None:
    """Four requests at once, two to each of two proxies with --concurrency 1: the judge holds one call at a
    time when their --cache is one Redis server, and two (each process its own limit) when it is not."""
    from tests.stub_servers import redis_server

    server, url = redis_server(tmp_path)
    asks = [[MESSAGES[2], {"role": "user", "content": f"How many parks, {i}?"}] for i in range(4)]
    for i in range(4):
        upstream.answers_by_content[f"parks, {i}?"] = f"Canberra has {i + 2} parks."  # one sentence, one call each
    try:
        with StubAPI(answer="Yes", latency=1.0) as slow, contextlib.ExitStack() as stack:
            cache = ("--cache", url) if shared else ()
            served = [
                stack.enter_context(
                    contextlib.contextmanager(proxy)(tmp_path / n, upstream, slow, "--concurrency", "1", *cache)
                )
                for n in "ab"
            ]
            with ThreadPoolExecutor(4) as pool:
                replies = list(
                    pool.map(
                        lambda i: httpx.post(
                            f"{served[i % 2].url}/v1/chat/completions",
                            json={"model": "m", "messages": asks[i]},
                            timeout=60,
                        ).json()["halluscope"],
                        range(4),
                    )
                )
            assert [r["action"] for r in replies] == ["pass"] * 4 and len(slow.requests) == 4
            assert slow.peak_in_flight == (1 if shared else 2)
    finally:
        server.kill()
        server.wait(timeout=30)


@pytest.mark.parametrize("stream", [False, True])
def test_a_proxied_request_whose_client_leaves_makes_no_further_judge_call(
    tmp_path: Path, upstream: StubAPI, stream: bool
) -> None:
    upstream.answer = " ".join(f"Canberra has {i} parks." for i in range(8))
    with StubAPI(answer="Yes", latency=1.0) as slow:
        for served in proxy(tmp_path, upstream, slow, "--concurrency", "1"):
            body = {"model": "m", "messages": MESSAGES, "stream": stream}
            left = leave_during_the_first_call(served, "/v1/chat/completions", body, slow)
            time.sleep(3)
            assert len(slow.arrivals) == 1 and not [t for t in slow.arrivals if t > left]


NODE_CLIENT = """
const OpenAI = require("openai");
const [url, messages] = [process.argv[2], JSON.parse(process.argv[3])];
const client = new OpenAI({ baseURL: url, apiKey: "sk-CLIENT-OWN-KEY" });
(async () => {
  const { data, response } = await client.chat.completions.create({ model: "m", messages }).withResponse();
  let text = "", verdict = null;
  for await (const chunk of await client.chat.completions.create({ model: "m", messages, stream: true })) {
    text += chunk.choices.map((c) => c.delta.content || "").join("");
    if (chunk.halluscope) verdict = chunk.halluscope.action;
  }
  console.log(JSON.stringify({ answer: data.choices[0].message.content, action: data.halluscope.action,
    header: response.headers.get("x-halluscope-verdict"), streamed: text, streamed_action: verdict }));
})();
"""


def node_with_openai() -> str | None:
    """Why the JavaScript client cannot run here (None: it can): node, and the openai package on NODE_PATH
    (.ci/run installs it where npm is)."""
    if shutil.which("node") is None:
        return "node is not on this machine"
    found = subprocess.run(["node", "-e", "require('openai')"], capture_output=True, text=True, timeout=60)
    return None if found.returncode == 0 else "the openai npm package is not on NODE_PATH (npm install openai@4)"


@pytest.mark.skipif(node_with_openai() is not None, reason=str(node_with_openai()))
def test_the_openai_javascript_client_gets_the_reply_and_the_verdict_both_ways(
    tmp_path: Path, upstream: StubAPI, judge: StubAPI
) -> None:
    script = tmp_path / "client.js"
    script.write_text(NODE_CLIENT)
    for served in proxy(tmp_path, upstream, judge):
        done = subprocess.run(
            ["node", str(script), f"{served.url}/v1", json.dumps(MESSAGES)], capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
        seen = json.loads(done.stdout)
        assert seen == {
            "answer": ANSWER,
            "action": "flagged",
            "header": "flagged",
            "streamed": ANSWER,
            "streamed_action": "flagged",
        }
