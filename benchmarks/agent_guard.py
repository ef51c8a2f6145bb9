"""The middleware measured end to end: a LangChain agent (create_agent) answers "Tell me about X" with a
retriever tool over WikiBio people's Wikipedia texts (MiniLM embeddings, an in-memory store), its model
scripted to replay the dataset's GPT-3 passage, and ``HallucinationMiddleware`` checks the answer against
what the tool returned. The same answers checked directly (``halluscope.detector("grounded")`` on the
passage and its Wikipedia text) are the baseline: the plumbing loses nothing when the retriever returns
the person's own text and every unit's score is the same. Sentence AUC-ROC against the human labels is
given for the passages whose sentences our splitter finds as the dataset annotated them (a label per
sentence needs the same sentences); the rest are counted. Each way runs on its own empty cache, so each
makes every call, and the middleware's added seconds and calls are what the agent costs beyond the check.

The same agent through the guard proxy: its model is ChatOpenAI pointed at `halluscope serve --proxy`,
whose upstream (a replay server on 127.0.0.1) calls the search tool first and then answers with the
passage; the tool returns the article's text, which the proxy reads as the answer's document
(``--context-from tool``). Its object names the flagged sentences only, so it is compared with the direct
check's verdict at the same threshold (0.5): the same flagged sentences with the same scores.

    .venv/bin/python benchmarks/agent_guard.py [--model local:smollm2-135m] [--passages 10]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from langchain.agents import create_agent
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langchain_core.vectorstores import InMemoryVectorStore

import halluscope
from halluscope.backends.embeddings import Embedder
from halluscope.backends.gateway import Gateway
from halluscope.bench.provenance import envelope
from halluscope.bench.wikibio import Passage, load_wikibio
from halluscope.metrics import auc_roc
from halluscope.text import sentences
from halluscope.tools import HallucinationMiddleware

INACCURATE = ("minor_inaccurate", "major_inaccurate")


class Cost(NamedTuple):
    """What one path's checks sent: its judge calls and their prompt tokens."""

    calls: int
    prompt_tokens: int


class MiniLM(Embeddings):
    """halluscope's embedder as LangChain's Embeddings, for the vector store."""

    def __init__(self) -> None:
        self.embedder = Embedder()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.embedder.encode(texts).tolist()

    def embed_query(self, text: str) -> list[float]:
        return self.embedder.encode([text])[0].tolist()


class Replay(BaseChatModel):
    """The agent's model: it searches for the person first, then answers with the dataset's passage."""

    answers: dict[str, str]

    @property
    def _llm_type(self) -> str:
        return "replay"

    def bind_tools(self, tools: Any, **kwargs: Any) -> Replay:
        return self

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        person = str(next(m for m in messages if isinstance(m, HumanMessage)).text).removeprefix("Tell me about ")
        if not any(isinstance(m, ToolMessage) for m in messages):
            call = {"name": "search", "args": {"query": person}, "id": "search-1"}
            return ChatResult(generations=[ChatGeneration(message=AIMessage(content="", tool_calls=[call]))])
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=self.answers[person]))])


def agent_scores(passages: list[Passage], model: str) -> tuple[list[list[float | None]], float, Cost, int]:
    """Each answer's unit scores from the guarded agent, its seconds, judge calls and prompt tokens, and
    right retrievals."""
    store = InMemoryVectorStore(MiniLM())
    store.add_documents([Document(page_content=p.wiki_text, metadata={"person": p.concept}) for p in passages])

    @tool(response_format="content_and_artifact")
    def search(query: str) -> tuple[str, list[Document]]:
        """Search the encyclopedia for a person."""
        found = store.similarity_search(query, k=1)
        return f"{len(found)} article(s) found", found

    middleware = HallucinationMiddleware(model=model, gateway=Gateway(cache=None))
    agent = create_agent(Replay(answers={p.concept: p.text for p in passages}), tools=[search], middleware=[middleware])
    scores, calls, tokens, right = [], 0, 0, 0
    started = time.perf_counter()
    for p in passages:
        state = agent.invoke({"messages": [HumanMessage(content=f"Tell me about {p.concept}")]})
        record = state["hallucination"]
        scores.append([u["score"] for u in record["units"]])
        calls += record["calls"]
        tokens += record["prompt_tokens"]
        tool_docs = next(m for m in state["messages"] if isinstance(m, ToolMessage)).artifact
        right += tool_docs[0].metadata["person"] == p.concept
    return scores, time.perf_counter() - started, Cost(calls, tokens), right


class ReplayAPI(ThreadingHTTPServer):
    """The proxy's upstream: OpenAI's chat completions, replaying ``Replay``'s two turns (a search call,
    then the person's passage)."""

    def __init__(self, answers: dict[str, str]) -> None:
        answers_ = answers

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                messages = body["messages"]
                person = next(m["content"] for m in messages if m["role"] == "user").removeprefix("Tell me about ")
                if any(m["role"] == "tool" for m in messages):
                    message: dict[str, Any] = {"role": "assistant", "content": answers_[person]}
                else:
                    call = {"name": "search", "arguments": json.dumps({"query": person})}
                    message = {"role": "assistant", "content": None, "tool_calls": [
                        {"id": "search-1", "type": "function", "function": call}]}  # fmt: skip
                reply = {"id": "replay", "object": "chat.completion", "created": 0, "model": "replay",
                         "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}  # fmt: skip
                data = json.dumps(reply).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()


def served_proxy(upstream: str, model: str) -> tuple[subprocess.Popen[str], str]:
    """`halluscope serve --proxy` on a free port of 127.0.0.1, returned once it says it is ready."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = [sys.executable, "-m", "halluscope.cli", "serve", "--http", f"127.0.0.1:{port}", "--model", model,
            "--proxy", upstream, "--context-from", "tool", "--no-cache"]  # fmt: skip
    process = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True)
    for line in process.stderr or ():
        if "halluscope MCP server on" in line:
            threading.Thread(target=process.stderr.read, daemon=True).start()  # the rest, unread
            return process, f"http://127.0.0.1:{port}/v1"
    raise RuntimeError(f"the proxy did not start (exit {process.wait()})")


def proxy_verdicts(passages: list[Passage], model: str) -> tuple[list[dict[str, Any]], float, Cost]:
    """Each answer's halluscope object from the agent through the proxy, the agent's seconds, judge calls
    and prompt tokens."""
    import httpx
    from langchain_openai import ChatOpenAI

    by_person = {p.concept: p for p in passages}

    @tool
    def search(query: str) -> str:
        """Search the encyclopedia for a person."""
        return by_person[query].wiki_text  # the article, as the message's text: the proxy reads that

    seen: list[dict[str, Any]] = []

    def keep(response: httpx.Response) -> None:
        response.read()
        verdict = response.json().get("halluscope")
        if verdict is not None and verdict.get("unchecked") is None:  # the answer's, not the tool call's
            seen.append(verdict)

    upstream = ReplayAPI({p.concept: p.text for p in passages})
    process, url = served_proxy(f"http://127.0.0.1:{upstream.server_address[1]}/v1", model)
    try:
        chat = ChatOpenAI(model="replay", base_url=url, api_key="unused", max_retries=0, timeout=900,
                          http_client=httpx.Client(event_hooks={"response": [keep]}, timeout=900))  # fmt: skip
        agent = create_agent(chat, tools=[search])
        started = time.perf_counter()
        for p in passages:
            agent.invoke({"messages": [HumanMessage(content=f"Tell me about {p.concept}")]})
        seconds = time.perf_counter() - started
    finally:
        process.terminate()
        process.wait(timeout=60)
        upstream.shutdown()
    return seen, seconds, Cost(sum(v["cost"]["calls"] for v in seen), sum(v["cost"]["prompt_tokens"] for v in seen))


def same_verdict(proxied: dict[str, Any], direct: list[float | None], threshold: float = 0.5) -> bool:
    """Whether the proxy flagged the sentences the direct check flags at ``threshold``, with its scores."""
    flagged = [i for i, x in enumerate(direct) if x is not None and x >= threshold]
    shown = [(u["position"], u["score"]) for u in proxied["flagged"]]
    return [i for i, _ in shown] == flagged and all(direct[i] == score for i, score in shown)


def direct_scores(passages: list[Passage], model: str) -> tuple[list[list[float | None]], float, Cost]:
    det = halluscope.detector("grounded", model, gateway=Gateway(cache=None))
    started, scores, calls, tokens = time.perf_counter(), [], 0, 0
    for p in passages:
        result = det.detect(text=p.text, context=[p.wiki_text], question=f"Tell me about {p.concept}")
        scores.append([u.score for u in result.units])
        calls += result.meta.calls
        tokens += result.meta.tokens.prompt
    return scores, time.perf_counter() - started, Cost(calls, tokens)


def sentence_auc(passages: list[Passage], scores: list[list[float | None]]) -> tuple[float | None, int]:
    """AUC-ROC (x100, as metrics gives it) over the passages whose split matches the annotation, and how
    many those are."""
    labels, flat, used = [], [], 0
    for p, s in zip(passages, scores, strict=True):
        if sentences(p.text) != p.sentences or any(x is None for x in s):
            continue
        used += 1
        labels += [int(label in INACCURATE) for label in p.labels]
        flat += s
    if not used or len(set(labels)) < 2:
        return None, used
    return auc_roc(np.array(labels), np.array(flat, dtype=float)), used


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="local:smollm2-135m", help="the grounded judge")
    ap.add_argument("--passages", type=int, default=10)
    ap.add_argument("--data", default=os.environ.get("HALLUSCOPE_DATA", "../shared/data"))
    ap.add_argument("--out", default="benchmarks/results")
    args = ap.parse_args()
    passages = load_wikibio(args.data)[: args.passages]
    began = time.perf_counter()
    halluscope.check("Warm up.", context=["Warm up."], model=args.model, gateway=Gateway(cache=None))
    direct, direct_s, direct_calls = direct_scores(passages, args.model)
    agent, agent_s, agent_calls, right = agent_scores(passages, args.model)
    same = [a == d for a, d in zip(agent, direct, strict=True)]
    differences = [
        abs(x - y)
        for a, d in zip(agent, direct, strict=True)
        if len(a) == len(d)
        for x, y in zip(a, d, strict=True)
        if x is not None and y is not None
    ]
    proxied, proxy_s, proxy_calls = proxy_verdicts(passages, args.model)
    direct_auc, used = sentence_auc(passages, direct)
    agent_auc, _ = sentence_auc(passages, agent)
    row = {
        "passages": len(passages),
        "retrieved_right": right,
        "answers_with_the_same_scores": sum(same),
        "max_abs_difference": max(differences) if differences else None,
        "auc_roc_direct": direct_auc,
        "auc_roc_agent": agent_auc,
        "auc_passages": used,
        "calls_direct": direct_calls.calls,
        "calls_agent": agent_calls.calls,
        "seconds_per_answer_direct": round(direct_s / len(passages), 2),
        "seconds_per_answer_agent": round(agent_s / len(passages), 2),
        "answers_with_the_same_verdict_through_the_proxy": sum(
            same_verdict(v, d) for v, d in zip(proxied, direct, strict=True)
        ),
        "proxied_answers": len(proxied),
        "calls_proxy": proxy_calls.calls,
        "seconds_per_answer_proxy": round(proxy_s / len(passages), 2),
    }
    print(json.dumps(row, indent=1))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    paths = (direct_calls, agent_calls, proxy_calls)
    made = envelope(
        models=[args.model], items=len(passages), item="passage", calls=sum(c.calls for c in paths),
        seconds=time.perf_counter() - began, cache_hits=0, prompt_tokens=sum(c.prompt_tokens for c in paths),
    )  # fmt: skip
    (out / "agent_guard.json").write_text(json.dumps({**made, **row}, indent=2))
    print(f"wrote {out / 'agent_guard.json'}")


if __name__ == "__main__":
    main()
