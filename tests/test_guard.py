"""Agent workflows on scripted models: the guard's routes (pass, revise then pass, revise then
annotate, annotate, refuse), the guard mounted in a host graph with its own checkpointer, the example
agent, and a detector as a LangChain tool."""

from __future__ import annotations

import importlib.util
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph

import halluscope
from halluscope.backends.gateway import Gateway
from halluscope.errors import ConfigError
from halluscope.tools import GuardState, as_tool, hallucination_guard

REPO = Path(__file__).resolve().parent.parent
QUESTION = "What is the capital of Australia?"
FALSE = "The capital of Australia is Sydney."
TRUE = "The capital of Australia is Canberra."


def load_example() -> Any:
    spec = importlib.util.spec_from_file_location("guarded_agent", REPO / "examples" / "guarded_agent.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["guarded_agent"] = module
    spec.loader.exec_module(module)
    return module


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
    assert record["action"] == "pass" and record["risk"] == 0.0
    assert record["history"] == [{"answer": FALSE, "flagged": [{"text": FALSE, "score": 1.0}]}]
    assert sum(s.startswith("You correct answers") for s in seen) == 1
    text = example.transcript(state)
    assert f"ai: {TRUE}" in text and "revision 1: flagged The capital of Australia is Sydney. (1.00)" in text


def test_a_revision_still_flagged_is_annotated(example: Any, gateway: Gateway, scripted: Any) -> None:
    state = run_agent(example, gateway, scripted(world("It is Sydney, I am sure.", [])))
    assert state["revisions"] == 1 and state["hallucination"]["action"] == "annotated"
    content = state["messages"][-1].text
    assert content.startswith("It is Sydney, I am sure.")
    assert "these statements may be unsupported:\n- It is Sydney, I am sure. (risk 1.00)]" in content


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
    assert len(second["messages"]) == 4 and second["hallucination"]["history"][0]["answer"] == "Sydney, again."
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
