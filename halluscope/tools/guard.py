"""A hallucination guard: a LangGraph subgraph over a messages state that checks the last AI message.

    check (detector on the last AI message, the last user message before it as the question)
      -> pass           risk below the threshold: the message goes through unchanged
      -> annotate       the message gets a note naming the flagged statements
      -> revise         the model rewrites the flagged statements (guard.revise prompt; with the
                        state's documents, guard.revise_grounded), then check
                        again; a degenerate revision (looping, far longer, echoing the prompt) is
                        refused unchecked; after ``max_revisions`` (or a refused revision) the least
                        risky version checked is delivered, annotated
      -> refuse         the message is replaced by a refusal

State read: ``messages``, and ``context`` (the documents a grounded detector checks the answer
against). State written: ``messages`` (the checked AI message is replaced in place, by its id),
``hallucination`` (the last check: risk, threshold, flagged units, action, every unit's score, errors;
``versions``: every text checked or refused for this answer with its risk, flags and the method's
evidence; ``delivered``: which version an annotation carries) and ``revisions``. Compiled without a
checkpointer, so a host graph whose state has these keys can mount it as a node and bring its own.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal, get_type_hints

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph

from halluscope.backends.gateway import Gateway, default_gateway
from halluscope.backends.models import ModelLike
from halluscope.detectors import Detector
from halluscope.errors import ConfigError, HalluscopeError
from halluscope.results import DetectionResult
from halluscope.runtime.nodes import stats_of

OnFlag = Literal["annotate", "revise", "refuse"]
REVISE = "guard.revise"
REVISE_GROUNDED = "guard.revise_grounded"  # the same, with the turn's documents (a grounded check's context)
REFUSAL = "I can't give an answer to that which I am confident is accurate."


class GuardState(MessagesState, total=False):
    hallucination: dict[str, Any]
    revisions: int
    context: list[str]  # the documents this turn's answer should rest on (a RAG host's retriever writes them)


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


# A revision this much longer than the answer it revises (in characters, beyond LONGER_SLACK) is refused
LONGER_BY = 3.0
LONGER_SLACK = 200
REPEATED = 3  # a line of the revision this many times over is a model looping, not an answer
PROMPT_LINE = 20  # characters: a sentence of the revise prompt this long, found in a revision, is an echo


def degenerate(revision: str, answer: str, prompt_lines: list[str]) -> str | None:
    """Why a revision must not replace the answer (None: it may be checked): empty, looping on a line,
    far longer than the answer, or echoing the revise prompt's own wording."""
    text = revision.strip()
    if not text:
        return "the revision is empty"
    lines = [" ".join(line.split()).lower() for line in text.splitlines() if line.strip()]
    pieces = [p.strip().lower() for p in text.replace("\n", " ").split(".") if len(p.strip()) >= 10]
    counted = Counter(lines + pieces)
    repeat, times = counted.most_common(1)[0] if counted else ("", 0)
    if times >= REPEATED:
        return f"the revision repeats itself ({times} times: {repeat[:60]!r})"
    if len(text) > LONGER_BY * len(answer) + LONGER_SLACK:
        return f"the revision is far longer than the answer ({len(text)} characters against {len(answer)})"
    lowered = " ".join(text.split()).lower()
    echoed = next((line for line in prompt_lines if line in lowered), None)
    if echoed is not None:
        return f"the revision echoes the revise prompt ({echoed[:60]!r})"
    return None


def _prompt_lines(gateway: Gateway) -> list[str]:
    """The revise prompts' own wording (the sentences of their lines without a variable), as
    ``degenerate`` looks for it."""
    templates = [gateway.registry.get(REVISE), gateway.registry.get(REVISE_GROUNDED)]
    lines = [line for t in templates for m in t.messages or [] for line in m.content.splitlines() if "{" not in line]
    sentences = [part for line in lines for part in re.split(r"(?<=[.:!?])\s+", line)]
    return [" ".join(part.split()).lower() for part in sentences if len(part.strip()) >= PROMPT_LINE]


def _danger(version: dict[str, Any]) -> tuple[int, float]:
    """How risky a checked version is: how many units are flagged, then its riskiest unit's value."""
    return len(version["flagged"]), version["risk"] if version["risk"] is not None else math.inf


@dataclass(frozen=True)
class Guard:
    """What the guard's nodes share: the detector and its threshold, what to do with a flagged answer,
    and the model (with the revise prompts' own wording) that revises one."""

    det: Detector
    threshold: float
    on: Literal["score", "probability"]
    on_flag: OnFlag
    max_revisions: int
    model: ModelLike | None
    gateway: Gateway
    refusal: str
    echoes: list[str]


def check(guard: Guard, state: GuardState, config: RunnableConfig) -> dict[str, Any]:
    """The detector on the last AI message (the user's last message before it as the question): the
    version it checked, with its risk, flags and the method's evidence, joins the answer's record."""
    exchange = _exchange(state)
    if exchange is None:
        return {"hallucination": {"action": "skipped", "error": "no AI message to check"}}
    ai, question = exchange
    previous = state.get("hallucination") or {}
    same_answer = previous.get("message_id") == ai.id  # a revision keeps the message id; a new turn does not
    record: dict[str, Any] = {
        "method": guard.det.method,
        "threshold": guard.threshold,
        "on": guard.on,
        "message_id": ai.id,
        "versions": previous.get("versions", []) if same_answer else [],
    }
    revisions = state.get("revisions", 0) if same_answer else 0
    try:
        version = checked(guard.det, guard.threshold, guard.on, _text(ai), question, state.get("context"), ai, config)
    except HalluscopeError as exc:  # an unchecked answer is said so (a bug still raises)
        error = f"{type(exc).__name__}: {exc}"
        return {"hallucination": {**record, "action": "unchecked", "error": error}, "revisions": revisions}
    summary = {k: version[k] for k in ("risk", "units", "flagged", "calls", "prompt_tokens")}
    flagged = bool(version["flagged"])
    return {
        "hallucination": {
            **record,
            **summary,
            "versions": [*record["versions"], version],
            "action": "flagged" if flagged else "pass",
            **({} if flagged else {"delivered": len(record["versions"])}),
        },
        "revisions": revisions,
    }


def checked(
    det: Detector,
    threshold: float,
    on: Literal["score", "probability"],
    answer: str,
    question: str | None,
    context: Any,
    message: AnyMessage | None,
    config: RunnableConfig | None,
) -> dict[str, Any]:
    """One text checked, as the guard and the agent middleware record it: its units (and probabilities,
    calibrated), those flagged at ``threshold`` on ``on``, its risk, and the method's evidence. The host's
    run counters (``{"configurable": {"stats": ...}}``) count its calls, so a host's bar moves too."""
    host = stats_of(config) if config is not None else None
    part = {"stats": host.part()} if host is not None else {}
    result = det.detect(**det.answer_item(answer, question, context, message), **part)
    return version_of(det, threshold, on, answer, result)


def version_of(
    det: Detector, threshold: float, on: Literal["score", "probability"], answer: str, result: DetectionResult
) -> dict[str, Any]:
    """A checked text's record from its result (``checked``'s, or one its sentences' checks made while it
    streamed)."""
    calibrated = det.calibration is not None
    hits = {id(u) for u in result.flagged(threshold, on)}
    units = [
        {
            "position": i,
            "text": u.text,
            "score": u.score,
            **({"probability": u.probability} if calibrated else {}),
            "spans": [list(span) for span in u.spans],
        }
        for i, u in enumerate(result.units)
    ]
    values = [v for u in result.units if (v := getattr(u, on)) is not None]
    return {
        "answer": answer,
        "risk": max(values) if values else None,
        "units": units,
        "flagged": [row for row, u in zip(units, result.units, strict=True) if id(u) in hits],
        "evidence": {  # why it passed or not: the samples, answers ... the method compared it with
            "result": result.evidence,
            "units": [u.evidence for u in result.units],
        },
        "calls": result.meta.calls,
        "prompt_tokens": result.meta.tokens.prompt,  # what the check sent, beside its calls
    }


def route(guard: Guard, state: GuardState) -> str:
    if state["hallucination"]["action"] != "flagged":
        return END
    if guard.on_flag == "revise":
        return "revise" if state.get("revisions", 0) < guard.max_revisions else "annotate"
    return guard.on_flag


def annotate(guard: Guard, state: GuardState) -> dict[str, Any]:
    """The least risky version checked (the answer where no revision is safer), with its note."""
    ai, _ = _exchange(state)  # type: ignore[misc]
    record = state["hallucination"]
    checked = [v for v in record["versions"] if "refused" not in v]
    best = min(range(len(checked)), key=lambda i: _danger(checked[i]))  # the earliest of equals
    chosen = checked[best]
    content = chosen["answer"] + _note(chosen["flagged"], guard.det.method)
    delivered = record["versions"].index(chosen)
    summary = {k: chosen[k] for k in ("risk", "units", "flagged")}
    return {
        "messages": [AIMessage(content=content, id=ai.id)],
        "hallucination": {**record, **summary, "action": "annotated", "delivered": delivered},
    }


def revise(guard: Guard, state: GuardState, config: RunnableConfig) -> dict[str, Any]:
    """The model rewrites the flagged statements (from the turn's documents where it has them); a
    degenerate revision is kept in the record, never checked or delivered."""
    ai, question = _exchange(state)  # type: ignore[misc]
    record = state["hallucination"]
    flagged = "\n".join(f"- {u['text']}" for u in record["flagged"])
    asked = {"question": question or "", "answer": _text(ai), "flagged": flagged}
    documents = state.get("context")
    if documents:  # a RAG turn: the rewrite takes the right fact from the documents (the prompt fences them)
        asked["documents"] = "\n\n".join(documents)
    try:
        prompt = REVISE_GROUNDED if documents else REVISE
        host = stats_of(config)
        if host is not None:
            host.plan(1)
        revision = guard.gateway.call(guard.model, prompt, asked, stats=host).text  # type: ignore[arg-type]
        refused = degenerate(revision, _text(ai), guard.echoes)
    except HalluscopeError as exc:  # an empty reply, a provider that stays down: no revision to check
        revision, refused = "", f"no revision: {exc}"
    if refused is not None:
        versions = [*record["versions"], {"answer": revision, "refused": refused}]
        return {"hallucination": {**record, "versions": versions}, "revisions": state.get("revisions", 0) + 1}
    return {
        "messages": [AIMessage(content=revision.strip(), id=ai.id)],
        "revisions": state.get("revisions", 0) + 1,
        "hallucination": {**record, "action": "revised"},
    }


def after_revision(state: GuardState) -> str:
    return "annotate" if "refused" in state["hallucination"]["versions"][-1] else "check"


def refuse(guard: Guard, state: GuardState) -> dict[str, Any]:
    ai, _ = _exchange(state)  # type: ignore[misc]
    record = state["hallucination"]
    return {"messages": [AIMessage(content=guard.refusal, id=ai.id)], "hallucination": {**record, "action": "refused"}}


def hallucination_guard(
    det: Detector,
    threshold: float,
    on_flag: OnFlag = "annotate",
    max_revisions: int = 1,
    model: ModelLike | None = None,
    gateway: Gateway | None = None,
    refusal: str = REFUSAL,
    on: Literal["score", "probability"] = "score",
    host: StateGraph | None = None,
    name: str = "hallucination_guard",
) -> CompiledStateGraph:
    """The guard subgraph; ``model`` (any chat model the gateway accepts) revises when ``on_flag`` is
    'revise'. A unit whose ``on`` value (its raw score, or with a calibrated detector its probability
    of being hallucinated) is at or above ``threshold`` is flagged. The guard never delivers a text
    riskier than the answer: every version checked is kept in the record, a still-flagged answer is
    delivered as its least risky version, annotated, and a degenerate revision is never checked or
    delivered. ``host``: a graph to add it to as the node ``name``, refused when the host's state would
    drop what the guard writes or never give it what it reads (LangGraph keeps only a subgraph's keys
    that the host declares)."""
    if host is not None:
        check_host(host, det)
    if on not in ("score", "probability"):
        raise ConfigError(f"on must be 'score' or 'probability', got {on!r}")
    if on == "probability" and det.calibration is None:
        raise ConfigError("a probability threshold needs a calibrated detector: detector(..., calibration=FILE)")
    problem = det.spec.threshold_problem(threshold, on == "probability")
    if problem:
        raise ConfigError(f"the guard's {problem}")
    if on_flag not in ("annotate", "revise", "refuse"):
        raise ConfigError(f"on_flag must be 'annotate', 'revise' or 'refuse', got {on_flag!r}")
    if on_flag == "revise" and model is None:
        raise ConfigError("on_flag='revise' needs the model that revises the answer")
    if max_revisions < 0:
        raise ConfigError(f"max_revisions must be >= 0, got {max_revisions}")
    gw = gateway or default_gateway()
    echoes = _prompt_lines(gw) if on_flag == "revise" else []
    guard = Guard(det, threshold, on, on_flag, max_revisions, model, gw, refusal, echoes)
    graph = StateGraph(GuardState)
    graph.add_node("check", partial(check, guard))
    graph.add_node("annotate", partial(annotate, guard))
    graph.add_node("revise", partial(revise, guard))
    graph.add_node("refuse", partial(refuse, guard))
    graph.add_edge(START, "check")
    graph.add_conditional_edges("check", partial(route, guard), ["annotate", "revise", "refuse", END])
    graph.add_conditional_edges("revise", after_revision, ["check", "annotate"])
    graph.add_edge("annotate", END)
    graph.add_edge("refuse", END)
    compiled = graph.compile()
    if host is not None:
        host.add_node(name, compiled)
    return compiled


GUARD_KEYS = ("messages", "hallucination", "revisions")  # what the guard reads and writes in any host


def check_host(host: StateGraph, det: Detector) -> None:
    """Refuse a host whose state lacks a key the guard writes (its record would be dropped without a
    word) or the documents a grounded detector reads, naming them and the fix."""
    declared = get_type_hints(host.state_schema)
    needed = [*GUARD_KEYS, *(["context"] if det.spec.context_field else [])]
    missing = [key for key in needed if key not in declared]
    if missing:
        raise ConfigError(
            f"the host's state {host.state_schema.__name__} has no {', '.join(missing)}: LangGraph would drop "
            "what the guard writes there (or never hand it the documents); declare them, e.g. by subclassing "
            "halluscope.tools.GuardState"
        )
