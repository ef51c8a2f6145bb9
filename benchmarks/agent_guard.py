"""The middleware measured end to end: a LangChain agent (create_agent) answers "Tell me about X" with a
retriever tool over WikiBio people's Wikipedia texts (MiniLM embeddings, an in-memory store), its model
scripted to replay the dataset's GPT-3 passage, and ``HallucinationMiddleware`` checks the answer against
what the tool returned. The same answers checked directly (``halluscope.detector("grounded")`` on the
passage and its Wikipedia text) are the baseline: the plumbing loses nothing when the retriever returns
the person's own text and every unit's score is the same. Sentence AUC-ROC against the human labels is
given for the passages whose sentences our splitter finds as the dataset annotated them (a label per
sentence needs the same sentences); the rest are counted. Each way runs on its own empty cache, so both
make every call, and the middleware's added seconds and calls are what the agent costs beyond the check.

    .venv/bin/python benchmarks/agent_guard.py [--model local:smollm2-135m] [--passages 10]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

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


def agent_scores(passages: list[Passage], model: str) -> tuple[list[list[float | None]], float, int, int]:
    """Each answer's unit scores from the guarded agent, its seconds, judge calls, and right retrievals."""
    store = InMemoryVectorStore(MiniLM())
    store.add_documents([Document(page_content=p.wiki_text, metadata={"person": p.concept}) for p in passages])

    @tool(response_format="content_and_artifact")
    def search(query: str) -> tuple[str, list[Document]]:
        """Search the encyclopedia for a person."""
        found = store.similarity_search(query, k=1)
        return f"{len(found)} article(s) found", found

    middleware = HallucinationMiddleware(model=model, gateway=Gateway(cache=None))
    agent = create_agent(Replay(answers={p.concept: p.text for p in passages}), tools=[search], middleware=[middleware])
    scores, calls, right = [], 0, 0
    started = time.perf_counter()
    for p in passages:
        state = agent.invoke({"messages": [HumanMessage(content=f"Tell me about {p.concept}")]})
        record = state["hallucination"]
        scores.append([u["score"] for u in record["units"]])
        calls += record["calls"]
        tool_docs = next(m for m in state["messages"] if isinstance(m, ToolMessage)).artifact
        right += tool_docs[0].metadata["person"] == p.concept
    return scores, time.perf_counter() - started, calls, right


def direct_scores(passages: list[Passage], model: str) -> tuple[list[list[float | None]], float, int]:
    det = halluscope.detector("grounded", model, gateway=Gateway(cache=None))
    started, scores, calls = time.perf_counter(), [], 0
    for p in passages:
        result = det.detect(text=p.text, context=[p.wiki_text], question=f"Tell me about {p.concept}")
        scores.append([u.score for u in result.units])
        calls += result.meta.calls
    return scores, time.perf_counter() - started, calls


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
        "calls_direct": direct_calls,
        "calls_agent": agent_calls,
        "seconds_per_answer_direct": round(direct_s / len(passages), 2),
        "seconds_per_answer_agent": round(agent_s / len(passages), 2),
    }
    print(json.dumps(row, indent=1))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    made = envelope(
        models=[args.model], items=len(passages), item="passage", calls=direct_calls + agent_calls,
        seconds=time.perf_counter() - began, cache_hits=0,
    )  # fmt: skip
    (out / "agent_guard.json").write_text(json.dumps({**made, **row}, indent=2))
    print(f"wrote {out / 'agent_guard.json'}")


if __name__ == "__main__":
    main()
