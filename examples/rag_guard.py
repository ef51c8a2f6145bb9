"""A RAG agent whose answers are checked against the documents it retrieved before the user sees them:

    retrieve (MiniLM over WikiBio's 238 Wikipedia texts) -> answer from them (rag.answer@1)
      -> guard (grounded: each sentence against the retrieved documents) -> pass | annotate | revise

Offline, on the embedded local model (no API key):

    .venv/bin/python examples/rag_guard.py --ask "Tell me about John Russell Reynolds" --data ../shared/data
    .venv/bin/python examples/rag_guard.py --planted --out planted-guard.json
    .venv/bin/python examples/rag_guard.py --planted --on-flag revise --out planted-revise.json

``--planted`` measures the guard on the planted-falsehood biographies of `halluscope bench planted`:
each biography is the answer, and its context is the biography's true sentences followed by what the
planted sentence gets wrong, stated right ("In fact, he was born in Ulm."); it counts how many planted
sentences the guard flags and how many true ones; with ``--on-flag revise``, how many delivered
answers drop the planted sentence and state the truth. The true sentences appear in the context as
they are, so this measures whether the judge catches a contradicted detail, not paraphrase.
The answer prompt is this example's own (examples/prompts), loaded as a user prompt directory.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from tqdm import tqdm

import halluscope
from halluscope.backends.cache import open_cache
from halluscope.backends.embeddings import default_embedder
from halluscope.backends.gateway import CallStats, Gateway
from halluscope.backends.models import ModelLike
from halluscope.bench.planted import BIOGRAPHIES
from halluscope.bench.provenance import provenance
from halluscope.bench.wikibio import load_wikibio
from halluscope.prompts.registry import PromptRegistry
from halluscope.runtime.nodes import stats_of
from halluscope.tools import GuardState, hallucination_guard
from halluscope.tools.guard import OnFlag

PROMPTS = Path(__file__).resolve().parent / "prompts"
ANSWER = "rag.answer"
ANSWER_TOKENS = 256  # two or three sentences fit well within it (the 0.5B once ran 512 tokens, 400 s, mid-word)


def example_gateway() -> Gateway:
    """The process's cache and settings, with this example's prompt directory beside the packaged ones."""
    return Gateway.from_env(cache=open_cache(), registry=PromptRegistry([PROMPTS]))


def build_agent(
    model: ModelLike,
    documents: list[str],
    gateway: Gateway,
    threshold: float = 0.5,
    on_flag: OnFlag = "annotate",
    top: int = 2,
) -> CompiledStateGraph:
    """retrieve -> answer -> guard; the retrieved documents go into the state's ``context``, which the
    grounded guard reads."""
    embedder = default_embedder()
    detector = halluscope.detector("grounded", model=model, gateway=gateway)
    guard = hallucination_guard(detector, threshold, on_flag, model=model, gateway=gateway)

    def retrieve(state: GuardState) -> dict[str, Any]:
        question = str(state["messages"][-1].text)
        found = embedder.nearest([question], documents, top, exclude_identical=False)[0]
        return {"context": [documents[i] for i, _ in found]}

    def answer(state: GuardState, config: RunnableConfig) -> dict[str, Any]:
        question = str(state["messages"][-1].text)
        joined = "\n\n".join(state["context"])
        stats = stats_of(config)
        if stats is not None:
            stats.plan(1)
        asked = {"documents": joined, "question": question}
        reply = gateway.call(model, ANSWER, asked, stats=stats, max_tokens=ANSWER_TOKENS)
        cut = reply.completion_tokens >= ANSWER_TOKENS  # stopped at the limit, maybe mid-sentence
        return {"messages": [AIMessage(content=reply.text.strip(), response_metadata={"cut_at_limit": cut})]}

    graph = StateGraph(GuardState)
    graph.add_node("retrieve", retrieve)
    graph.add_node("answer", answer)
    graph.add_node("guard", guard)
    graph.add_edge(START, "retrieve")
    graph.add_edge("retrieve", "answer")
    graph.add_edge("answer", "guard")
    graph.add_edge("guard", END)
    return graph.compile()


def key_words(fact: str) -> list[str]:
    """The names and numbers of a stated fact ("she died in Passy, France, in 1934": Passy, France, 1934)."""
    return [w.strip(".,") for w in fact.split() if w[:1].isupper() or w[:1].isdigit()]


def measure_planted(
    model: ModelLike, gateway: Gateway, threshold: float, on_flag: OnFlag = "annotate"
) -> dict[str, Any]:
    """The grounded guard on each planted biography: planted and true sentences flagged, and the time.
    With ``on_flag='revise'`` the model rewrites a flagged answer from the context, and each delivered
    answer is read for the planted sentence (still there, word for word?), the truth (its names and
    numbers all stated?) and the true sentences (kept word for word?)."""
    detector = halluscope.detector("grounded", model=model, gateway=gateway)
    guard = hallucination_guard(detector, threshold, on_flag, model=model, gateway=gateway)
    rows, began, stats = [], time.perf_counter(), CallStats()  # every check and revision, counted
    for bio in BIOGRAPHIES:
        started = time.perf_counter()
        state = guard.invoke(
            {
                "messages": [HumanMessage(f"Tell me about {bio.person}."), AIMessage(" ".join(bio.sentences))],
                "context": bio.documents,
            },
            {"configurable": {"stats": stats}},
        )
        record = state["hallucination"]
        versions = record.get("versions") or [{}]  # none when the check failed (its error is in the row)
        first = versions[0]  # the answer as given: what the guard flagged in it
        flagged = {u["text"] for u in first.get("flagged", [])}
        planted = bio.sentences[bio.planted]
        delivered = str(state["messages"][-1].text)
        rows.append(
            {
                "person": bio.person,
                "planted_flagged": planted in flagged,
                "true_flagged": sum(s in flagged for i, s in enumerate(bio.sentences) if i != bio.planted),
                "true_sentences": len(bio.sentences) - 1,
                "scores": [u["score"] for u in first.get("units", [])],
                "action": record.get("action"),
                "revisions": state.get("revisions", 0),
                "delivered": delivered,
                "planted_kept": planted in delivered,
                "true_kept": sum(s in delivered for i, s in enumerate(bio.sentences) if i != bio.planted),
                "truth_stated": all(w in delivered for w in key_words(bio.truth)),
                "check_calls": sum(v.get("calls", 0) for v in versions),  # the revisions' calls come on top
                "seconds": round(time.perf_counter() - started, 2),
                "error": record.get("error"),
            }
        )
    return {
        "model": str(model),
        "threshold": threshold,
        "on_flag": on_flag,
        "biographies": len(rows),
        "items": len(rows),
        "item": "biography",
        "planted_flagged": sum(r["planted_flagged"] for r in rows),
        "true_flagged": sum(r["true_flagged"] for r in rows),
        "true_sentences": sum(r["true_sentences"] for r in rows),
        "revised": sum(r["revisions"] > 0 for r in rows),
        "planted_kept": sum(r["planted_kept"] for r in rows),
        "true_kept": sum(r["true_kept"] for r in rows),
        "truth_stated": sum(r["truth_stated"] for r in rows),
        "seconds": round(time.perf_counter() - began, 1),
        "calls": stats.calls,
        "cache_hits": stats.cache_hits,
        "prompt_tokens": stats.prompt_tokens,
        "rows": rows,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ask", help="a question for the agent, e.g. 'Tell me about John Russell Reynolds'")
    p.add_argument("--planted", action="store_true", help="measure the guard on the planted-falsehood biographies")
    p.add_argument("--model", help="model spec (default: the strongest installed local model)")
    p.add_argument("--data", help="the benchmark data directory holding WikiBio (or HALLUSCOPE_DATA)")
    p.add_argument("--threshold", type=float, default=0.5)
    p.add_argument("--on-flag", choices=["annotate", "revise", "refuse"], default="annotate")
    p.add_argument("--out", help="with --planted: write the measurement here (JSON)")
    args = p.parse_args()
    if not args.ask and not args.planted:
        p.error("give --ask QUESTION or --planted")
    model = args.model or f"local:{halluscope.default_local_model()}"
    gateway = example_gateway()
    if args.planted:
        measured = measure_planted(model, gateway, args.threshold, args.on_flag)
        print(
            f"{measured['planted_flagged']} of {measured['biographies']} planted sentences flagged, "
            f"{measured['true_flagged']} of {measured['true_sentences']} true ones, "
            f"{measured['seconds']} s ({model}, threshold {args.threshold})"
        )
        if args.on_flag == "revise":
            print(
                f"revised {measured['revised']}; delivered answers still holding the planted sentence: "
                f"{measured['planted_kept']}, stating the truth: {measured['truth_stated']} of "
                f"{measured['biographies']}; true sentences kept word for word: {measured['true_kept']} of "
                f"{measured['true_sentences']}"
            )
        if args.out:
            made = {"provenance": provenance(), "model": model}
            Path(args.out).write_text(json.dumps({**made, **measured}, indent=1), encoding="utf-8")
    if args.ask:
        ask(model, gateway, args)


def ask(model: ModelLike, gateway: Gateway, args: argparse.Namespace) -> None:
    """One question through the agent, each stage said as it ends, a bar of the model calls (its total
    growing as the answer and then the guard's checks are planned) meanwhile."""
    documents = [p.wiki_text for p in load_wikibio(args.data)]
    agent = build_agent(model, documents, gateway, args.threshold, args.on_flag)
    state: dict[str, Any] = {"messages": [HumanMessage(args.ask)]}
    with tqdm(desc="rag_guard", unit=" call", file=sys.stderr) as bar:

        def planned(total: int) -> None:
            bar.total = total
            bar.refresh()

        stats = CallStats(on_reply=bar.update, on_plan=planned)
        for update in agent.stream(state, {"configurable": {"stats": stats}}, stream_mode="updates"):
            for stage, change in update.items():
                state.update(change or {})
                bar.write(said(stage, change or {}), file=sys.stderr)
    for message in state["messages"]:
        print(f"{message.type}: {message.text}")
    record = state["hallucination"]
    print(f"guard: {record.get('action')}, risk {record.get('risk')} against {len(state['context'])} documents")


def said(stage: str, change: dict[str, Any]) -> str:
    """One line on a stage that just ended."""
    if stage == "retrieve":
        return f"retrieved {len(change['context'])} documents"
    if stage == "answer":
        message = change["messages"][-1]
        cut = " (stopped at its token limit)" if message.response_metadata.get("cut_at_limit") else ""
        return f"answered in {len(str(message.text).split())} words{cut}; the guard checks it next"
    record = change.get("hallucination") or {}
    return f"guard: {record.get('action')}, {record.get('calls', 0)} check calls"


if __name__ == "__main__":
    main()
