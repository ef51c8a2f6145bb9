"""Agent workflows on scripted models: the guard's routes (pass, revise then pass, revise then
annotate, annotate, refuse), the guard mounted in a host graph with its own checkpointer, the example
agent, and a detector as a LangChain tool."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph

import halluscope
from halluscope.backends.gateway import Gateway
from halluscope.errors import ConfigError
from halluscope.tools import GuardState, as_tool, hallucination_guard
from halluscope.tools.guard import degenerate
from tests.scripts import load_script

QUESTION = "What is the capital of Australia?"
FALSE = "The capital of Australia is Sydney."
TRUE = "The capital of Australia is Canberra."


def load_example() -> Any:
    return load_script("examples/guarded_agent.py")


def world(revision: str, seen: list[str]) -> Any:
    """Samples know Canberra; a check supports a sentence that names Canberra; the agent answers Sydney;
    a revision answers ``revision``."""
    lock = threading.Lock()

    def respond(prompt: str, params: dict[str, Any]) -> str:
        with lock:
            seen.append(prompt.split("\n", 1)[0])
        if prompt == QUESTION:  # the user's question, asked again for a sample
            return f"Canberra is the capital of Australia. Sample {params.get('seed')}."
        if "fact-checker found" in prompt:
            return revision
        if "Answer the following question accurately" in prompt:
            return FALSE
        return "Yes" if "Canberra" in prompt.split("Sentence: ")[1] else "No"

    return respond


@pytest.fixture
def example() -> Any:
    return load_example()


def run_agent(example: Any, gateway: Gateway, model: Any, on_flag: str = "revise", planted: str | None = None) -> Any:
    det = halluscope.detector("selfcheck-prompt", model=model, n=2, gateway=gateway)
    agent = example.build_agent(model, det, 0.5, on_flag, gateway=gateway, planted=planted)
    return agent.invoke({"messages": [HumanMessage(content=QUESTION)]})


def test_a_false_answer_is_revised_once_and_then_passes(example: Any, gateway: Gateway, scripted: Any) -> None:
    seen: list[str] = []
    state = run_agent(example, gateway, scripted(world(TRUE, seen)))
    assert [m.type for m in state["messages"]] == ["human", "ai"]  # the flagged answer was replaced in place
    assert state["messages"][-1].text == TRUE and state["revisions"] == 1
    record = state["hallucination"]
    assert record["action"] == "pass" and record["risk"] == 0.0 and record["delivered"] == 1
    first, second = record["versions"]
    flagged = [{"position": 0, "text": FALSE, "score": 1.0, "spans": [[0, 35]]}]
    assert (first["answer"], first["flagged"], first["risk"]) == (FALSE, flagged, 1.0)
    assert (second["answer"], second["flagged"], second["risk"]) == (TRUE, [], 0.0)
    # the evidence a user reads to see why it passed: the samples it was compared with, each check's answers
    assert all("Canberra" in sample for sample in second["evidence"]["result"]["samples"])
    assert second["evidence"]["units"][0]["supported"] == ["yes", "yes"]
    assert sum(s.startswith("You correct answers") for s in seen) == 1
    text = example.transcript(state)
    assert f"ai: {TRUE}" in text and "answer: flagged The capital of Australia is Sydney. (1.00)" in text
    assert f"revision 1: flagged nothing in: {TRUE}" in text


def test_a_revision_no_safer_than_the_answer_is_not_delivered(example: Any, gateway: Gateway, scripted: Any) -> None:
    """Still flagged and as risky as the answer: the answer is delivered, annotated (the earliest of equals)."""
    state = run_agent(example, gateway, scripted(world("It is Sydney, I am sure.", [])))
    record = state["hallucination"]
    assert state["revisions"] == 1 and record["action"] == "annotated" and record["delivered"] == 0
    content = state["messages"][-1].text
    assert content.startswith(FALSE) and f"these statements may be unsupported:\n- {FALSE} (risk 1.00)]" in content
    assert [v["answer"] for v in record["versions"]] == [FALSE, "It is Sydney, I am sure."]


def test_the_least_risky_version_is_delivered(gateway: Gateway, scripted: Any) -> None:
    """Two false sentences; a revision that fixes one is delivered (annotated for the other), and one that
    adds a false sentence is not."""
    two = "The capital of Australia is Sydney. Sydney has the parliament."

    def guarded(revision: str) -> dict[str, Any]:
        model = scripted(world(revision, []), f"scripted:{len(revision)}")  # its own cache: another revision
        det = halluscope.detector("selfcheck-prompt", model=model, n=2, gateway=gateway)
        guard = hallucination_guard(det, 0.5, "revise", model=model, gateway=gateway)
        return guard.invoke({"messages": [HumanMessage(QUESTION), AIMessage(two, id="a1")]})

    better = guarded("The capital of Australia is Canberra. Sydney has the parliament.")
    assert better["hallucination"]["delivered"] == 1 and better["messages"][-1].text.startswith(
        "The capital of Australia is Canberra."
    )
    assert [len(v["flagged"]) for v in better["hallucination"]["versions"]] == [2, 1]
    worse = guarded("Sydney. Sydney is the capital. Sydney has the parliament.")
    assert worse["hallucination"]["delivered"] == 0 and worse["messages"][-1].text.startswith(two)
    assert [len(v["flagged"]) for v in worse["hallucination"]["versions"]] == [2, 3]


LOOP = ("A fact-checker found that these statements in the draft are probably false:\n- " + FALSE + "\n") * 20


@pytest.mark.parametrize(
    ("revision", "reason"),
    [
        (LOOP, "repeats itself (20 times"),
        ("Draft answer: " + FALSE + " Write a corrected answer to the question.", "echoes the revise prompt"),
        (
            "Canberra is the capital. "
            + " ".join(f"Its district number {i} has {i} parks and lakes." for i in range(12)),
            "far longer than the answer",
        ),
        ("   ", "no revision: scripted:test: gave up"),
    ],
)
def test_a_degenerate_revision_is_refused_unchecked_and_the_answer_annotated(
    gateway: Gateway, scripted: Any, revision: str, reason: str
) -> None:
    """SmolLM2 answered the revise prompt by repeating it about 20 times: the guard keeps that in its
    record, never checks or delivers it, and annotates the answer."""
    seen: list[str] = []
    model = scripted(world(revision, seen))
    det = halluscope.detector("selfcheck-prompt", model=model, n=2, gateway=gateway)
    guard = hallucination_guard(det, 0.5, "revise", max_revisions=2, model=model, gateway=gateway)
    state = guard.invoke({"messages": [HumanMessage(QUESTION), AIMessage(FALSE, id="a1")]})
    record = state["hallucination"]
    assert record["action"] == "annotated" and record["delivered"] == 0
    assert state["messages"][-1].text.startswith(FALSE + "\n\n[halluscope selfcheck-prompt:")
    assert reason in record["versions"][1]["refused"] and record["versions"][1]["answer"].strip() == revision.strip()
    checks = [s for s in seen if not s.startswith("You correct answers")]  # an empty reply is asked again
    assert len(record["versions"]) == 2 and len(checks) == 2 + 2  # two samples, the answer's two checks: no more


def test_degenerate_by_hand() -> None:
    lines = ["write a corrected answer to the question."]
    assert degenerate("Canberra is the capital.", "Sydney is the capital.", lines) is None
    assert degenerate("Yes. Yes. Yes. Yes.", "No.", lines) is None  # short pieces are not a loop
    assert "repeats itself (3 times" in (degenerate("It is Canberra for sure.\n" * 3, "Sydney.", lines) or "")
    assert "echoes" in (degenerate("Write a corrected answer to the question. Canberra.", "Sydney.", lines) or "")


def test_annotate_refuse_and_pass_routes(example: Any, gateway: Gateway, scripted: Any) -> None:
    seen: list[str] = []
    model = scripted(world(TRUE, seen))
    annotated = run_agent(example, gateway, model, on_flag="annotate")
    assert annotated["messages"][-1].text.startswith(FALSE + "\n\n[halluscope selfcheck-prompt:")
    refused = run_agent(example, gateway, model, on_flag="refuse")
    assert refused["messages"][-1].text == halluscope.tools.guard.REFUSAL
    assert refused["hallucination"]["action"] == "refused"
    passed = run_agent(example, gateway, model, planted=TRUE)
    assert passed["messages"][-1].text == TRUE and passed["hallucination"]["action"] == "pass"
    assert not any(s.startswith("You correct answers") for s in seen)


def test_guard_as_a_subgraph_with_the_hosts_checkpointer(gateway: Gateway, scripted: Any) -> None:
    model = scripted(world(TRUE, []))
    det = halluscope.detector("selfcheck-prompt", model=model, n=2, gateway=gateway)
    guard = hallucination_guard(det, 0.5, "revise", model=model, gateway=gateway)
    host = StateGraph(GuardState)
    host.add_node("guard", guard)
    host.add_edge(START, "guard")
    app = host.compile(checkpointer=InMemorySaver())
    thread = {"configurable": {"thread_id": "t1"}}
    first = app.invoke({"messages": [HumanMessage(QUESTION), AIMessage(FALSE)]}, thread)
    assert first["messages"][-1].text == TRUE and first["revisions"] == 1
    # A new answer in the same thread is a new check: its revision budget starts again.
    second = app.invoke({"messages": [HumanMessage(QUESTION), AIMessage("Sydney, again.")]}, thread)
    assert second["revisions"] == 1 and second["messages"][-1].text == TRUE
    assert len(second["messages"]) == 4 and second["hallucination"]["versions"][0]["answer"] == "Sydney, again."
    with pytest.raises(ConfigError, match="needs the model that revises"):
        hallucination_guard(det, 0.5, "revise")
    with pytest.raises(ConfigError, match="on_flag must be"):
        hallucination_guard(det, 0.5, "shout")  # type: ignore[arg-type]


def test_detector_as_a_tool(gateway: Gateway, scripted: Any) -> None:
    det = halluscope.detector("selfcheck-prompt", model=scripted(world(TRUE, [])), n=2, gateway=gateway)
    tool = as_tool(det)
    assert tool.name == "check_selfcheck_prompt"
    schema = tool.get_input_schema().model_json_schema()
    assert schema["required"] == ["answer"] and set(schema["properties"]) == {"answer", "question"}
    call = {"name": tool.name, "args": {"answer": FALSE, "question": QUESTION}, "id": "c1", "type": "tool_call"}
    message = tool.invoke(call)
    assert isinstance(message, ToolMessage) and "highest risk 1.000" in message.content
    assert message.artifact.units[0].score == 1.0
    empty = tool.invoke({**call, "args": {"answer": " "}})
    assert empty.content == "selfcheck-prompt could not check this: ConfigError: selfcheck-prompt: the text is empty"
    se = as_tool(halluscope.detector("semantic-entropy", model="local:x"), name="uncertainty")
    assert se.get_input_schema().model_json_schema()["required"] == ["question"]


def test_a_calibrated_detector_guards_on_the_probability(gateway: Gateway, scripted: Any) -> None:
    """A Platt calibration p = 1 / (1 + e^-(4 score - 2)): the false sentence (score 1) has p = 0.88
    and is flagged at 0.8; a raw-score guard would have flagged it at 0.8 too, but a probability
    threshold of 0.9 lets it pass."""
    from halluscope.calibration import Calibration

    cal = Calibration(
        kind="platt",
        methods=["selfcheck-prompt"],
        model="scripted:world",
        prompts=[gateway.registry.get(p).ref for p in ("selfcheck.prompt", "selfcheck.regenerate")],
        params={"coef": [4.0], "intercept": -2.0, "cap": {"selfcheck-prompt": 2.0}},
    )
    model = scripted(world(TRUE, []), "scripted:world")
    det = halluscope.detector("selfcheck-prompt", model=model, n=2, gateway=gateway, calibration=cal)
    messages = {"messages": [HumanMessage(content=QUESTION), AIMessage(content=FALSE, id="a1")]}
    flagged = hallucination_guard(det, 0.8, on="probability").invoke(messages)["hallucination"]
    assert flagged["action"] == "annotated" and flagged["on"] == "probability"
    assert flagged["flagged"][0]["probability"] == pytest.approx(1 / (1 + 2.718281828459045**-2))
    passed = hallucination_guard(det, 0.9, on="probability").invoke(messages)["hallucination"]
    assert passed["action"] == "pass"
    with pytest.raises(ConfigError, match="needs a calibrated detector"):
        hallucination_guard(halluscope.detector("selfcheck-prompt", model=model), 0.5, on="probability")


def test_a_hosts_run_counters_see_the_guards_calls_as_they_come(gateway: Gateway, scripted: Any) -> None:
    """A host agent that passes its CallStats in the run's configurable gets every reply of the guard's
    check on its hooks (a progress bar moves) and every plan (the bar's total grows before the calls),
    while the guard's record keeps the check's own count."""
    from halluscope.backends.stats import CallStats

    det = halluscope.detector("selfcheck-prompt", model=scripted(world(TRUE, [])), n=2, gateway=gateway)
    guard = hallucination_guard(det, threshold=0.5)
    replies, totals = [], []
    host = CallStats(on_reply=lambda: replies.append(1), on_plan=totals.append)
    state = {"messages": [HumanMessage(content=QUESTION), AIMessage(content=FALSE)]}
    out = guard.invoke(state, {"configurable": {"stats": host}})
    calls = out["hallucination"]["calls"]
    assert calls > 0 and len(replies) == calls == host.calls  # every reply, on the host's hook and counters
    assert totals and totals[-1] == host.planned == calls  # planned before made: the bar's total
    assert out["hallucination"]["prompt_tokens"] == host.prompt_tokens > 0  # what the check sent, beside its calls


def test_a_host_whose_state_would_drop_the_guards_record_is_refused_at_build(gateway: Gateway, scripted: Any) -> None:
    """LangGraph keeps only the subgraph keys a host declares: a host on MessagesState would lose
    hallucination and revisions without a word, so hallucination_guard(host=...) refuses it, naming them."""
    from langgraph.graph import MessagesState

    model = scripted(world(TRUE, []))
    det = halluscope.detector("selfcheck-prompt", model=model, n=2, gateway=gateway)
    with pytest.raises(ConfigError, match="MessagesState has no hallucination, revisions: LangGraph would drop"):
        hallucination_guard(det, 0.5, host=StateGraph(MessagesState))
    grounded = halluscope.detector("grounded", model=model, gateway=gateway)

    class Chat(MessagesState, total=False):
        hallucination: dict[str, Any]
        revisions: int

    with pytest.raises(ConfigError, match="Chat has no context"):  # a grounded guard reads the documents there
        hallucination_guard(grounded, 0.5, host=StateGraph(Chat))
    host = StateGraph(GuardState)
    hallucination_guard(det, 0.5, host=host, name="guard")
    host.add_edge(START, "guard")
    done = host.compile().invoke({"messages": [HumanMessage(QUESTION), AIMessage(FALSE)]})
    assert done["hallucination"]["action"] == "annotated"  # the record reached the host's state
