"""A small LangGraph agent whose answers pass a hallucination guard before the user sees them:

    answer -> guard (SelfCheck-Prompt on the answer's sentences) -> pass | revise once, check again | annotate

Offline, on the embedded local model (no API key):

    .venv/bin/python examples/guarded_agent.py --question "What is the capital of Australia?" \
        --plant "The capital of Australia is Sydney."

``--plant`` makes the agent give that answer instead of its own, to watch the guard catch it;
``--model openai:gpt-4o-mini`` (or any spec) runs the same agent on a provider.

``--check token-logprob`` guards at no extra call: the agent answers with its tokens' log-probs (top 5),
and the guard scores each sentence by Max(-log p) over its tokens (a planted answer, never generated, is
read once by the model instead: one forward pass). Its threshold is in nats: 8.5 flagged all 8 planted
sentences and 5 of the 32 true ones of the planted biographies (chosen on those 40 sentences,
docs/results/token-logprob.md).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

import halluscope
from halluscope.backends.gateway import Gateway
from halluscope.backends.models import ModelLike
from halluscope.tools import GuardState, hallucination_guard
from halluscope.tools.guard import OnFlag

ANSWER = "fewl.answer"  # one concise sentence at temperature 0
TOP_LOGPROBS = 5  # the alternatives a token-probability guard reads the entropy from
THRESHOLDS = {"selfcheck-prompt": 0.5, "token-logprob": 8.5}  # a score, and nats of Max(-log p)


def build_agent(
    model: ModelLike,
    detector: halluscope.Detector,
    threshold: float = 0.5,
    on_flag: OnFlag = "revise",
    max_revisions: int = 1,
    gateway: Gateway | None = None,
    planted: str | None = None,
) -> CompiledStateGraph:
    """The agent graph: the model answers the last user message (or says ``planted``), the guard checks."""
    gw = gateway or halluscope.default_gateway()
    guard = hallucination_guard(detector, threshold, on_flag, max_revisions, model=model, gateway=gw)

    with_logprobs = detector.spec.logprobs_field is not None  # the guard reads the answer's own log-probs

    def answer(state: GuardState) -> dict[str, Any]:
        question = str(state["messages"][-1].text)
        if planted is not None:
            return {"messages": [AIMessage(content=planted)]}
        asked = {"logprobs": True, "top_logprobs": TOP_LOGPROBS} if with_logprobs else {}
        reply = gw.call(model, ANSWER, {"question": question}, **asked)
        metadata = {"logprobs": {"content": reply.logprobs}} if with_logprobs and reply.logprobs else {}
        return {"messages": [AIMessage(content=reply.text.strip(), response_metadata=metadata)]}

    graph = StateGraph(GuardState)
    graph.add_node("answer", answer)
    graph.add_node("guard", guard)
    graph.add_edge(START, "answer")
    graph.add_edge("answer", "guard")
    graph.add_edge("guard", END)
    return graph.compile()


def transcript(state: dict[str, Any]) -> str:
    """The conversation as the user sees it, then what the guard did."""
    lines = [f"{m.type}: {m.text}" for m in state["messages"]]
    record = state.get("hallucination", {})
    for i, version in enumerate(record.get("versions", [])):
        name = "answer" if i == 0 else f"revision {i}"
        if "refused" in version:
            lines.append(f"guard, {name}: refused unchecked, {version['refused']}")
            continue
        flagged = "; ".join(f"{u['text']} ({u['score']:.2f})" for u in version["flagged"]) or "nothing"
        lines.append(f"guard, {name}: flagged {flagged} in: {version['answer']}")
    risk = record.get("risk")
    lines.append(
        f"guard: {record.get('action')}, risk {'n/a' if risk is None else f'{risk:.2f}'} "
        f"(threshold {record.get('threshold')}, {record.get('method')})"
    )
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--question", default="What is the capital of Australia?")
    p.add_argument("--plant", help="the answer the agent gives instead of its own")
    p.add_argument("--model", help="model spec (default: the strongest installed local model)")
    p.add_argument("--check", choices=["selfcheck-prompt", "token-logprob"], default="selfcheck-prompt")
    p.add_argument("--samples", type=int, default=3, help="SelfCheck-Prompt samples (default 3)")
    p.add_argument("--threshold", type=float, help="flag at this score (default 0.5; token-logprob 8.5 nats)")
    p.add_argument("--on-flag", choices=["annotate", "revise", "refuse"], default="revise")
    p.add_argument("--json", action="store_true", help="print the guard's record as JSON too")
    args = p.parse_args()
    model = args.model or f"local:{halluscope.default_local_model()}"
    options = {"n": args.samples} if args.check == "selfcheck-prompt" else {"variant": "max-nll"}
    detector = halluscope.detector(args.check, model=model, **options)
    threshold = THRESHOLDS[args.check] if args.threshold is None else args.threshold
    agent = build_agent(model, detector, threshold, args.on_flag, planted=args.plant)
    state = agent.invoke({"messages": [HumanMessage(content=args.question)]})
    print(transcript(state))
    if args.json:
        print(json.dumps(state["hallucination"], indent=2, ensure_ascii=False))


if __name__ == "__main__":
    main()
