"""A server for agents outside Python (issue 44, part 4): `halluscope serve` answers the MCP SDK's own
client over stdio and over streamable HTTP (and a plain POST /check), refuses a request past its call
budget as a one-line tool error, and a LangGraph agent built with langchain-mcp-adapters calls its
`check` tool (a scripted chat model drives the agent; SmolLM2 judges in the server)."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from tests.stub_servers import StubAPI

REPO = Path(__file__).resolve().parents[1]
ANSWER = "Canberra is the capital of Australia. It lies in Sydney."
DOCS = ["Canberra is the capital of Australia, in the Australian Capital Territory."]


def server_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LANGSMITH_", "LANGCHAIN_"))}
    return env | {"PYTHONPATH": str(REPO), "HALLUSCOPE_CACHE_DIR": str(tmp_path / "cache"), "HF_HUB_OFFLINE": "1"}


@pytest.fixture
def judge() -> Iterator[StubAPI]:
    """An OpenAI-compatible judge on 127.0.0.1: Yes, except No for the Sydney sentence."""
    with StubAPI(answer="Yes") as stub:
        stub.answers_by_content["It lies in Sydney."] = "No"
        yield stub


def payload(result: Any) -> Any:
    """A tool result's JSON (the SDK's structured content, or its text)."""
    if result.structuredContent is not None:
        found = result.structuredContent
        return found.get("result", found) if set(found) == {"result"} else found
    return json.loads(result.content[0].text)


async def exercise(session: ClientSession) -> None:
    await session.initialize()
    assert {t.name for t in (await session.list_tools()).tools} == {"check", "check_tool_call", "detect", "methods"}
    checked = payload(await session.call_tool("check", {"answer": ANSWER, "context": DOCS}))
    assert checked["method"] == "grounded" and checked["verdict"]["flagged"] == [1]
    [flagged] = checked["flagged"]  # brief: the flagged sentence and the document sentence closest to it
    assert flagged["text"] == "It lies in Sydney." and flagged["evidence"] == [DOCS[0]] and "units" not in flagged
    assert len(json.dumps(checked)) < 1000 and checked["cost"]["calls"] == 2
    assert checked["cost"]["prompt_tokens"] > 0  # what the check sent: a user counts its cost
    call = {"name": "cancel_order", "arguments": {"order_id": "ORD-9999"}, "context": ["Cancel order ORD-1234."]}
    tool_checked = payload(await session.call_tool("check_tool_call", call))
    assert tool_checked["verdict"]["flagged"] == [0] and tool_checked["meta"]["calls"] == 0
    assert tool_checked["units"][0]["evidence"]["reason"].startswith("invented")
    whole = payload(await session.call_tool("check", {"answer": ANSWER, "context": DOCS, "full": True}))
    assert [u["text"] for u in whole["units"]] == ["Canberra is the capital of Australia.", "It lies in Sydney."]
    detected = payload(
        await session.call_tool(
            "detect",
            {
                "method": "selfcheck-unigram",
                "inputs": {"text": "Paris is in France.", "samples": ["Paris is in France."]},
            },
        )
    )
    assert detected["method"] == "selfcheck-unigram" and len(detected["units"]) == 1
    over = await session.call_tool("check", {"answer": ANSWER, "max_calls": 10**9})
    assert over.isError and "max_calls takes 1 to this server's ceiling" in over.content[0].text
    too_many = await session.call_tool("check", {"answer": ANSWER, "context": DOCS, "max_calls": 1})
    assert too_many.isError and "max_calls" in too_many.content[0].text and "\n" not in too_many.content[0].text
    methods = payload(await session.call_tool("methods", {}))
    grounded = next(m for m in methods if m["name"] == "grounded")
    assert "context" in grounded["inputs"]["properties"] and "top_k" in grounded["options"]["properties"]


def test_the_sdks_client_over_stdio(tmp_path: Path, judge: StubAPI) -> None:
    model = f"openai-compatible:{judge.base_url}/v1#judge"
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "halluscope.cli", "serve", "--mcp", "--model", model],
        env=server_env(tmp_path),
    )

    async def session() -> None:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as client:
            await exercise(client)

    asyncio.run(session())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def http_server(tmp_path: Path, judge: StubAPI) -> Iterator[str]:
    port = free_port()
    model = f"openai-compatible:{judge.base_url}/v1#judge"
    argv = [sys.executable, "-m", "halluscope.cli", "serve", "--http", f"127.0.0.1:{port}", "--model", model]
    server = subprocess.Popen(argv, env=server_env(tmp_path), stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if server.poll() is not None:
                    pytest.fail(f"the server exited: {server.stderr.read() if server.stderr else ''}")
                time.sleep(0.2)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_the_sdks_client_over_http_and_a_plain_post(http_server: str, judge: StubAPI) -> None:
    async def session() -> None:
        async with (
            streamable_http_client(f"{http_server}/mcp") as (read, write, _),
            ClientSession(read, write) as client,
        ):
            await exercise(client)

    asyncio.run(session())
    posted = httpx.post(f"{http_server}/check", json={"answer": ANSWER, "context": DOCS}, timeout=60)
    assert posted.status_code == 200 and posted.json()["verdict"]["flagged"] == [1]
    bad = httpx.post(f"{http_server}/check", json={"answer": ANSWER, "api_key": "x"}, timeout=60)
    assert bad.status_code == 400 and bad.json()["error"].startswith("POST /check takes no api_key; it takes: answer")
    unparsed = httpx.post(
        f"{http_server}/check", content=b"{", headers={"content-type": "application/json"}, timeout=60
    )
    assert unparsed.status_code == 400 and unparsed.json() == {"error": "the body is not JSON"}
    call = {"name": "cancel_order", "arguments": {"order_id": "ORD-1234"}, "context": "Cancel order ORD-1234."}
    tool_posted = httpx.post(f"{http_server}/check-tool-call", json=call, timeout=60)
    assert tool_posted.status_code == 200 and tool_posted.json()["verdict"]["flagged"] == []
    partial = httpx.post(f"{http_server}/check-tool-call", json={"name": "cancel_order"}, timeout=60)
    assert partial.status_code == 400 and partial.json()["error"].startswith("POST /check-tool-call takes a JSON")
    wrong = httpx.post(f"{http_server}/check-tool-call", json={**call, "arguments": ["ORD-1234"]}, timeout=60)
    assert wrong.status_code == 400 and "arguments takes" in wrong.json()["error"]
    acted = {"answer": "I have cancelled your order.", "context": DOCS, "question": "Cancel order ORD-1234.",
             "tool_calls": [{"name": "cancel_order", "arguments": {"order_id": "ORD-1234"}, "status": "error",
                             "result": "not found"}]}  # fmt: skip
    checked = httpx.post(f"{http_server}/check", json=acted, timeout=60)
    assert checked.status_code == 200 and checked.json()["actions"]["tool_calls"] == [
        {"name": "cancel_order", "flagged": []}
    ]
    assert [f["reason"] for f in checked.json()["actions"]["actions"]["flagged"]] == ["the call failed: cancel_order"]
    unread = httpx.post(f"{http_server}/check", json={**acted, "tool_calls": [{"name": "x"}]}, timeout=60)
    assert (
        unread.status_code == 400 and unread.json()["error"] == "tool_calls[0] needs a name (a text) and its arguments"
    )
    declined = [{"name": "cancel_order", "arguments": {"order_id": "ORD-1234"}, "result": "declined: shipped"}]
    judge.answers_by_content["The agent called cancel_order"] = "No"  # read against the trajectory: unsupported
    judged = httpx.post(
        f"{http_server}/check", json={**acted, "tool_calls": declined, "judge_actions": True}, timeout=60
    )
    [claim] = judged.json()["actions"]["actions"]["flagged"]
    assert (
        claim["undecided"].startswith("the result of cancel_order reads as a failure") and claim["judge_score"] >= 0.5
    )
    assert judged.json()["actions"]["judge_calls"]["calls"] == 1
    refused = httpx.post(f"{http_server}/check", json={**acted, "judge_actions": "yes"}, timeout=60)
    assert refused.status_code == 400 and "judge_actions" in refused.json()["error"]


@pytest.mark.slow
def test_a_langgraph_agent_calls_check_through_the_mcp_adapters(tmp_path: Path) -> None:
    """The agent's model is scripted (it asks for `check`, then reports the verdict); the server judges
    with SmolLM2."""
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    from langchain_mcp_adapters.client import MultiServerMCPClient
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode

    client = MultiServerMCPClient(
        {
            "halluscope": {
                "command": sys.executable,
                "args": ["-m", "halluscope.cli", "serve", "--mcp", "--model", "local:smollm2-135m"],
                "env": server_env(tmp_path),
                "transport": "stdio",
            }
        }
    )

    def agent(state: MessagesState) -> dict[str, Any]:
        last = state["messages"][-1]
        if isinstance(last, ToolMessage):
            return {"messages": [AIMessage(content=f"checked: {last.content[:2000]}")]}
        call = {"name": "check", "args": {"answer": ANSWER, "context": DOCS}, "id": "call-1", "type": "tool_call"}
        return {"messages": [AIMessage(content="", tool_calls=[call])]}

    async def run() -> list[Any]:
        tools = await client.get_tools()
        assert {t.name for t in tools} == {"check", "check_tool_call", "detect", "methods"}
        graph = StateGraph(MessagesState)
        graph.add_node("agent", agent)
        graph.add_node("tools", ToolNode(tools))
        graph.add_edge(START, "agent")
        graph.add_conditional_edges("agent", lambda s: "tools" if s["messages"][-1].tool_calls else END)
        graph.add_edge("tools", "agent")
        out = await graph.compile().ainvoke({"messages": [HumanMessage(content="Is this answer grounded?")]})
        return list(out["messages"])

    messages = asyncio.run(run())
    tool_reply = next(m for m in messages if isinstance(m, ToolMessage))
    blocks = tool_reply.content if isinstance(tool_reply.content, list) else [{"text": tool_reply.content}]
    result = json.loads(next(b["text"] for b in blocks if isinstance(b, dict) and "text" in b))
    assert result["method"] == "grounded" and result["verdict"]["units"] == 2  # SmolLM2 judged both sentences
    assert messages[-1].content.startswith("checked:")


def test_a_failed_request_says_why_in_one_line_without_the_key(tmp_path: Path) -> None:
    from halluscope.backends.gateway import Gateway
    from halluscope.errors import ConfigError
    from halluscope.prompts.registry import PromptRegistry
    from halluscope.serve import ServerSettings
    from tests.conftest import FAST_RETRY

    model = "openai-compatible:http://127.0.0.1:9/v1?api_key=SECRET-123#judge"  # nothing listens on port 9
    settings = ServerSettings(Gateway(cache=None, registry=PromptRegistry(), retry=FAST_RETRY), model, 100, 60)
    with pytest.raises(ConfigError) as failed:
        asyncio.run(settings.check(ANSWER, context=DOCS))
    message = str(failed.value)
    assert "cannot reach" in message and "SECRET-123" not in message and "\n" not in message
    with pytest.raises(ConfigError, match="unknown method 'grounde'"):
        asyncio.run(settings.detect("grounde", {"text": ANSWER}))
