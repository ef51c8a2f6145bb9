"""A hallucination guard: a LangGraph subgraph over a messages state that checks the last AI message.

    check (detector on the last AI message, the last user message before it as the question)
      -> pass           risk below the threshold: the message goes through unchanged
      -> annotate       the message gets a note naming the flagged statements
      -> revise         the model rewrites the flagged statements (guard.revise prompt), then check
                        again; after ``max_revisions`` a message still flagged is annotated
      -> refuse         the message is replaced by a refusal

State read: ``messages``. State written: ``messages`` (the checked AI message is replaced in place,
by its id), ``hallucination`` (the last check: risk, threshold, flagged units, action, every unit's
score, errors) and ``revisions``. Compiled without a checkpointer, so a host graph whose state has
these keys can mount it as a node and bring its own.
"""

from __future__ import annotations

from typing import Any, Literal

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph

from halluscope.backends.gateway import Gateway, ModelLike, default_gateway
from halluscope.detector import Detector
from halluscope.errors import ConfigError, HalluscopeError

OnFlag = Literal["annotate", "revise", "refuse"]
REVISE = "guard.revise"
REFUSAL = "I can't give an answer to that which I am confident is accurate."


class GuardState(MessagesState, total=False):
    hallucination: dict[str, Any]
    revisions: int


def _last(messages: list[AnyMessage], kind: type) -> tuple[int, Any] | None:
    for i in range(len(messages) - 1, -1, -1):
        if isinstance(messages[i], kind):
            return i, messages[i]
    return None


def _exchange(state: GuardState) -> tuple[AIMessage, str | None] | None:
    """The last AI message and the last user message before it (the question it answers)."""
    messages = state.get("messages", [])
    found = _last(messages, AIMessage)
    if found is None:
        return None
    index, ai = found
    human = _last(messages[:index], HumanMessage)
    return ai, (str(human[1].text) if human else None)  # .text is a str-like accessor; spaCy wants a str


def _text(message: AnyMessage) -> str:
    return str(message.text)


def _risk(unit: dict[str, Any]) -> str:
    score = "inf" if unit["score"] is None else f"{unit['score']:.2f}"
    return f"risk {score}" + ("" if unit.get("probability") is None else f", p={unit['probability']:.2f}")


def _note(flagged: list[dict[str, Any]], method: str) -> str:
    lines = "\n".join(f"- {u['text']} ({_risk(u)})" for u in flagged)
    return f"\n\n[halluscope {method}: these statements may be unsupported:\n{lines}]"


def hallucination_guard(
    det: Detector,
    threshold: float,
    on_flag: OnFlag = "annotate",
    max_revisions: int = 1,
    model: ModelLike | None = None,
    gateway: Gateway | None = None,
    refusal: str = REFUSAL,
    on: Literal["score", "probability"] = "score",
) -> CompiledStateGraph:
    """The guard subgraph; ``model`` (any chat model the gateway accepts) revises when ``on_flag`` is
    'revise'. A unit whose ``on`` value (its raw score, or with a calibrated detector its probability
    of being hallucinated) is at or above ``threshold`` is flagged."""
    if on not in ("score", "probability"):
        raise ConfigError(f"on must be 'score' or 'probability', got {on!r}")
    if on == "probability" and det.calibration is None:
        raise ConfigError("a probability threshold needs a calibrated detector: detector(..., calibration=FILE)")
    if on_flag not in ("annotate", "revise", "refuse"):
        raise ConfigError(f"on_flag must be 'annotate', 'revise' or 'refuse', got {on_flag!r}")
    if on_flag == "revise" and model is None:
        raise ConfigError("on_flag='revise' needs the model that revises the answer")
    if max_revisions < 0:
        raise ConfigError(f"max_revisions must be >= 0, got {max_revisions}")
    gw = gateway or default_gateway()

    def check(state: GuardState) -> dict[str, Any]:
        exchange = _exchange(state)
        if exchange is None:
            return {"hallucination": {"action": "skipped", "error": "no AI message to check"}}
        ai, question = exchange
        previous = state.get("hallucination") or {}
        same_answer = previous.get("message_id") == ai.id  # a revision keeps the message id; a new turn does not
        record: dict[str, Any] = {
            "method": det.method,
            "threshold": threshold,
            "on": on,
            "message_id": ai.id,
            "history": previous.get("history", []) if same_answer else [],
        }
        revisions = state.get("revisions", 0) if same_answer else 0
        try:
            result = det.detect(**det.answer_item(_text(ai), question))
        except HalluscopeError as exc:  # an unchecked answer is said so (a bug still raises)
            error = f"{type(exc).__name__}: {exc}"
            return {"hallucination": {**record, "action": "unchecked", "error": error}, "revisions": revisions}
        calibrated = det.calibration is not None
        hits = {id(u) for u in result.flagged(threshold, on)}
        units: list[dict[str, Any]] = []
        flagged: list[dict[str, Any]] = []
        for u in result.units:
            row = {"text": u.text, "score": u.score, **({"probability": u.probability} if calibrated else {})}
            units.append(row)
            if id(u) in hits:
                flagged.append(row)
        return {
            "hallucination": {
                **record,
                "risk": result.risk,
                "units": units,
                "flagged": flagged,
                "calls": result.meta.calls,
                "action": "flagged" if flagged else "pass",
            },
            "revisions": revisions,
        }

    def route(state: GuardState) -> str:
        record = state["hallucination"]
        if record["action"] != "flagged":
            return END
        if on_flag == "revise":
            return "revise" if state.get("revisions", 0) < max_revisions else "annotate"
        return on_flag

    def annotate(state: GuardState) -> dict[str, Any]:
        ai, _ = _exchange(state)  # type: ignore[misc]
        record = state["hallucination"]
        content = _text(ai) + _note(record["flagged"], det.method)
        return {"messages": [AIMessage(content=content, id=ai.id)], "hallucination": {**record, "action": "annotated"}}

    def revise(state: GuardState) -> dict[str, Any]:
        ai, question = _exchange(state)  # type: ignore[misc]
        record = state["hallucination"]
        flagged = "\n".join(f"- {u['text']}" for u in record["flagged"])
        reply = gw.call(model, REVISE, {"question": question or "", "answer": _text(ai), "flagged": flagged})  # type: ignore[arg-type]
        history = [*record["history"], {"answer": _text(ai), "flagged": record["flagged"]}]
        return {
            "messages": [AIMessage(content=reply.text.strip(), id=ai.id)],
            "revisions": state.get("revisions", 0) + 1,
            "hallucination": {**record, "action": "revised", "history": history},
        }

    def refuse(state: GuardState) -> dict[str, Any]:
        ai, _ = _exchange(state)  # type: ignore[misc]
        record = state["hallucination"]
        return {"messages": [AIMessage(content=refusal, id=ai.id)], "hallucination": {**record, "action": "refused"}}

    graph = StateGraph(GuardState)
    graph.add_node("check", check)
    graph.add_node("annotate", annotate)
    graph.add_node("revise", revise)
    graph.add_node("refuse", refuse)
    graph.add_edge(START, "check")
    graph.add_conditional_edges("check", route, ["annotate", "revise", "refuse", END])
    graph.add_edge("revise", "check")
    graph.add_edge("annotate", END)
    graph.add_edge("refuse", END)
    return graph.compile()
