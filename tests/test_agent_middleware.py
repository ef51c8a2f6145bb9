"""The hallucination middleware in a real LangChain agent (create_agent) on scripted models: an agent
that calls a retriever tool and answers; the middleware checks the answer against what the tool returned
(its Documents) and annotates, asks again, blocks or raises; a check that fails never breaks the agent."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.documents import Document
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.tools import tool

from halluscope.backends.gateway import Gateway
from halluscope.errors import ConfigError
from halluscope.tools import HallucinationFlagged, HallucinationMiddleware
from halluscope.tools.middleware import REASKED, documents
from tests.test_grounded import judge

QUESTION = "Tell me about Canberra."
DOC = "Canberra is the capital city of Australia."
TRUE = "Canberra is the capital of Australia."
FALSE = "Canberra is the capital of Australia. It lies in Sydney."


@tool(response_format="content_and_artifact")
def search(query: str) -> tuple[str, list[Document]]:
    """Search the encyclopedia."""
    return "1 document found", [Document(page_content=DOC, metadata={"source": "wiki"})]


class Agent(BaseChatModel):
    """An agent's model, scripted by turn: it calls ``search`` first, then answers ``answers[k]`` on its
    k-th answer of the turn (a re-ask is another answer)."""

    answers: list[str]
    calls: list[list[str]] = []

    @property
    def _llm_type(self) -> str:
        return "agent-script"

    def bind_tools(self, tools: Any, **kwargs: Any) -> Agent:
        return self

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        self.calls.append([m.type for m in messages])
        if not any(isinstance(m, ToolMessage) for m in messages):
            message = AIMessage(content="", tool_calls=[{"name": "search", "args": {"query": "Canberra"}, "id": "c1"}])
        else:
            asked = sum(isinstance(m, HumanMessage) and m.name == REASKED for m in messages)
            message = AIMessage(content=self.answers[min(asked, len(self.answers) - 1)])
        return ChatResult(generations=[ChatGeneration(message=message)])


class StreamingAgent(Agent):
    """The same script, streamed: the answer a word at a time, a pause between words (as a model generates)."""

    pause: float = 0.2

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        message = self._generate(messages).generations[0].message
        if isinstance(message, AIMessage) and message.tool_calls:
            call = message.tool_calls[0]
            piece = {"name": call["name"], "args": json.dumps(call["args"]), "id": call["id"], "index": 0}
            yield ChatGenerationChunk(message=AIMessageChunk(content="", tool_call_chunks=[piece]))
            return
        words = str(message.content).split(" ")
        for i, word in enumerate(words):
            time.sleep(self.pause)
            chunk = ChatGenerationChunk(message=AIMessageChunk(content=word + (" " if i < len(words) - 1 else "")))
            if run_manager is not None:
                run_manager.on_llm_new_token(str(chunk.message.content), chunk=chunk)
            yield chunk


def run(agent_model: Agent, middleware: HallucinationMiddleware) -> dict[str, Any]:
    agent = create_agent(agent_model, tools=[search], middleware=[middleware])
    return agent.invoke({"messages": [HumanMessage(content=QUESTION)]})


@pytest.fixture
def guard(gateway: Gateway, scripted: Callable[..., Any]) -> Callable[..., HallucinationMiddleware]:
    def make(seen: list[str] | None = None, **kwargs: Any) -> HallucinationMiddleware:
        kwargs.setdefault("gateway", gateway)
        return HallucinationMiddleware(model=scripted(judge([] if seen is None else seen)), **kwargs)

    return make


def test_an_answer_the_documents_support_passes_unchanged(guard: Callable[..., HallucinationMiddleware]) -> None:
    seen: list[str] = []
    state = run(Agent(answers=[TRUE]), guard(seen))
    assert [m.type for m in state["messages"]] == ["human", "ai", "tool", "ai"]
    answer = state["messages"][-1]
    assert answer.text == TRUE and "halluscope" not in answer.response_metadata
    record = state["hallucination"]
    assert record["action"] == "pass" and record["method"] == "grounded" and record["flagged"] == []
    assert len(seen) == 1 and DOC in seen[0]  # one judge call, on the tool's Document, not its "1 document found"


def test_a_flagged_answer_is_annotated_in_the_state_and_the_message(
    guard: Callable[..., HallucinationMiddleware],
) -> None:
    state = run(Agent(answers=[FALSE]), guard())
    answer = state["messages"][-1]
    assert answer.text == FALSE  # annotate keeps the words; the verdict rides in the metadata
    shown = answer.response_metadata["halluscope"]
    assert shown["action"] == "annotated" and [u["text"] for u in shown["flagged"]] == ["It lies in Sydney."]
    assert shown["threshold"] == 0.5 and shown["on"] == "score"
    record = state["hallucination"]
    assert record["action"] == "annotated" and len(record["versions"]) == 1
    assert [u["score"] for u in record["units"]] == [0.0, 1.0]


def test_reask_asks_once_more_naming_the_flagged_sentence_and_checks_the_new_answer(
    guard: Callable[..., HallucinationMiddleware],
) -> None:
    model = Agent(answers=[FALSE, TRUE], calls=[])
    state = run(model, guard(on_flag="reask"))
    reask = [m for m in state["messages"] if isinstance(m, HumanMessage) and m.name == REASKED]
    assert len(reask) == 1 and "- It lies in Sydney." in reask[0].text
    assert state["messages"][-1].text == TRUE
    record = state["hallucination"]
    assert record["action"] == "pass" and [v["answer"] for v in record["versions"]] == [FALSE, TRUE]
    assert len(model.calls) == 3  # the tool call, the answer, the answer asked again


def test_reask_is_bounded_and_then_annotates(guard: Callable[..., HallucinationMiddleware]) -> None:
    model = Agent(answers=[FALSE], calls=[])
    state = run(model, guard(on_flag="reask", max_reasks=2))
    assert len(model.calls) == 4  # the tool call, the answer, two answers asked again; no more
    record = state["hallucination"]
    assert record["action"] == "annotated" and len(record["versions"]) == 3
    assert state["messages"][-1].response_metadata["halluscope"]["action"] == "annotated"


def test_block_replaces_the_answer_and_keeps_the_original(guard: Callable[..., HallucinationMiddleware]) -> None:
    state = run(Agent(answers=[FALSE]), guard(on_flag="block", fallback="I cannot answer that reliably."))
    assert state["messages"][-1].text == "I cannot answer that reliably."
    assert state["hallucination"]["action"] == "blocked" and state["hallucination"]["blocked"] == FALSE


def test_raise_stops_the_agent_with_the_record(guard: Callable[..., HallucinationMiddleware]) -> None:
    with pytest.raises(HallucinationFlagged, match="It lies in Sydney") as caught:
        run(Agent(answers=[FALSE]), guard(on_flag="raise"))
    assert caught.value.record["flagged"][0]["score"] == 1.0


def test_a_check_that_fails_is_recorded_and_the_answer_goes_through(
    gateway: Gateway, scripted: Callable[..., Any]
) -> None:
    def down(prompt: str, params: dict[str, Any]) -> str:
        raise ConnectionError("judge down")

    middleware = HallucinationMiddleware(model=scripted(down, "scripted:down"), gateway=gateway)
    state = run(Agent(answers=[FALSE]), middleware)
    assert state["messages"][-1].text == FALSE
    record = state["hallucination"]
    assert record["action"] == "unchecked" and "judge down" in record["error"]

    blocking = HallucinationMiddleware(model=scripted(down, "scripted:down"), gateway=gateway, on_error="block")
    state = run(Agent(answers=[FALSE]), blocking)
    assert state["messages"][-1].text != FALSE and state["hallucination"]["action"] == "blocked"


def test_an_answer_without_documents_is_unchecked_not_judged_against_nothing(
    guard: Callable[..., HallucinationMiddleware],
) -> None:
    seen: list[str] = []
    state = run(Agent(answers=[FALSE]), guard(seen, context=["another_tool"]))
    assert seen == [] and state["hallucination"]["action"] == "unchecked"
    assert "no documents" in state["hallucination"]["error"]


def test_an_async_agent_is_guarded_the_same(guard: Callable[..., HallucinationMiddleware]) -> None:
    agent = create_agent(Agent(answers=[FALSE]), tools=[search], middleware=[guard()])
    state = asyncio.run(agent.ainvoke({"messages": [HumanMessage(content=QUESTION)]}))
    assert state["hallucination"]["action"] == "annotated"


def test_the_documents_each_context_rule_reads() -> None:
    doc = ToolMessage(content="x", tool_call_id="1", name="search", artifact=[Document(page_content="Doc one.")])
    old = ToolMessage(content="Old result.", tool_call_id="0", name="calc")
    messages = [
        SystemMessage(content="Policy text."),
        HumanMessage(content="first"),
        old,
        AIMessage(content="a"),
        HumanMessage(content="second"),
        doc,
        HumanMessage(content="again", name=REASKED),  # asked again by the middleware: the same turn
    ]
    assert documents(messages) == ["Doc one."]  # a tool's Documents stand for its text
    assert documents(messages, "all") == ["Old result.", "Doc one."]
    assert documents(messages, "system") == ["Policy text."]
    assert documents(messages, ["calc"]) == ["Old result."]
    with pytest.raises(ConfigError, match="context must be"):
        documents(messages, "everything")  # type: ignore[arg-type]


def test_bad_settings_are_refused_when_the_middleware_is_built(guard: Callable[..., HallucinationMiddleware]) -> None:
    with pytest.raises(ConfigError, match="on_flag must be"):
        guard(on_flag="revise")
    with pytest.raises(ConfigError, match="max_reasks"):
        guard(max_reasks=-1)
    with pytest.raises(ConfigError, match="context must be"):
        guard(context="everything")
    with pytest.raises(ConfigError, match="raw scores have no default decision"):
        guard(method="selfcheck-unigram")


def test_a_streamed_answers_sentences_get_their_verdicts_as_they_end_and_are_judged_once(
    guard: Callable[..., HallucinationMiddleware],
) -> None:
    seen: list[str] = []
    uncached = Gateway(cache=None)  # a second check of the answer would reach the judge again
    second = "It lies on the coast of New South Wales, a short drive from Sydney."  # words enough to check the first
    model = StreamingAgent(answers=[f"{TRUE} {second}"], calls=[], pause=0.1)
    agent = create_agent(model, tools=[search], middleware=[guard(seen, gateway=uncached)])
    events = list(
        agent.stream({"messages": [HumanMessage(content=QUESTION)]}, stream_mode=["messages", "custom", "values"])
    )
    verdicts = [(i, chunk["halluscope"]) for i, (mode, chunk) in enumerate(events) if mode == "custom"]
    assert [v["text"] for _, v in verdicts] == [TRUE, second]
    assert [v["flagged"] for _, v in verdicts] == [False, True] and verdicts[1][1]["spans"] == [[38, 38 + len(second)]]
    words = [i for i, (mode, chunk) in enumerate(events) if mode == "messages" and chunk[0].content]
    assert verdicts[0][0] < words[-1]  # the first sentence's verdict came while the answer still streamed
    state = [chunk for mode, chunk in events if mode == "values"][-1]
    record = state["hallucination"]
    assert record["action"] == "annotated" and [u["score"] for u in record["units"]] == [0.0, 1.0]
    assert len(seen) == 2  # one judge call a sentence: the answer's check was made of the streamed ones


def test_an_invoked_agent_is_checked_after_its_answer_as_before(guard: Callable[..., HallucinationMiddleware]) -> None:
    seen: list[str] = []
    middleware = guard(seen, gateway=Gateway(cache=None))
    state = run(StreamingAgent(answers=[FALSE], calls=[], pause=0.0), middleware)  # invoke: nothing streams
    assert state["hallucination"]["action"] == "annotated" and len(seen) == 2


def test_an_async_streamed_answer_gets_its_verdicts_too(guard: Callable[..., HallucinationMiddleware]) -> None:
    seen: list[str] = []
    middleware = guard(seen, gateway=Gateway(cache=None))
    agent = create_agent(StreamingAgent(answers=[FALSE], calls=[], pause=0.05), tools=[search], middleware=[middleware])

    async def collect() -> list[Any]:
        question = {"messages": [HumanMessage(content=QUESTION)]}
        return [event async for event in agent.astream(question, stream_mode=["messages", "custom", "values"])]

    events = asyncio.run(collect())
    verdicts = [chunk["halluscope"] for mode, chunk in events if mode == "custom"]
    assert [v["flagged"] for v in verdicts] == [False, True]
    assert [chunk for mode, chunk in events if mode == "values"][-1]["hallucination"]["action"] == "annotated"
    assert len(seen) == 2


def test_a_tools_error_is_no_document() -> None:
    failed = ToolMessage(
        content="Error: Canberra lies in Sydney (the lookup failed)", tool_call_id="1", name="search", status="error"
    )
    messages = [HumanMessage(content=QUESTION), failed, ToolMessage(content=DOC, tool_call_id="2", name="search")]
    assert documents(messages) == [DOC]
    assert documents(messages, "all") == [DOC] and documents(messages, ["search"]) == [DOC]


@pytest.mark.parametrize("on_error", ["pass", "block"])
def test_a_judge_that_raises_a_plain_exception_never_crashes_the_agent(
    gateway: Gateway, scripted: Callable[..., Any], on_error: str
) -> None:
    def broken(prompt: str, params: dict[str, Any]) -> str:
        raise ValueError("the judge's own bug")

    middleware = HallucinationMiddleware(model=scripted(broken, "scripted:broken"), gateway=gateway, on_error=on_error)
    state = run(Agent(answers=[FALSE]), middleware)
    record = state["hallucination"]
    assert "the judge's own bug" in record["error"]
    if on_error == "pass":
        assert record["action"] == "unchecked" and state["messages"][-1].text == FALSE
    else:
        assert record["action"] == "blocked" and state["messages"][-1].text != FALSE


class SpellingAgent(Agent):
    """An agent's model whose answer carries its token log-probs and a reasoning text: both spell it out."""

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        result = super()._generate(messages, *args, **kwargs)
        message = result.generations[0].message
        if isinstance(message, AIMessage) and not message.tool_calls:
            message.response_metadata["logprobs"] = {"content": [{"token": " Sydney", "logprob": -0.1}]}
            message.additional_kwargs["reasoning_content"] = "It lies in Sydney, I think."
        return result


def test_block_keeps_the_flagged_text_out_of_the_message_a_client_reads(
    guard: Callable[..., HallucinationMiddleware],
) -> None:
    state = run(SpellingAgent(answers=[FALSE]), guard(on_flag="block"))
    message = state["messages"][-1]
    assert "Sydney" not in json.dumps(message.response_metadata) and "Sydney" not in message.text
    assert "Sydney" not in json.dumps(message.additional_kwargs)
    shown = message.response_metadata["halluscope"]
    assert shown["action"] == "blocked" and [u["position"] for u in shown["flagged"]] == [1]
    assert state["hallucination"]["blocked"] == FALSE  # the operator's record keeps it


def test_max_reasks_has_a_ceiling(guard: Callable[..., HallucinationMiddleware]) -> None:
    with pytest.raises(ConfigError, match="from 0 to 5"):
        guard(on_flag="reask", max_reasks=1000)
    with pytest.raises(ConfigError, match="max_reasks"):
        guard(max_reasks=True)


def test_on_error_block_blocks_a_streamed_answer_with_a_sentence_left_unchecked(
    gateway: Gateway, scripted: Callable[..., Any]
) -> None:
    answers = judge([])

    def flaky(prompt: str, params: dict[str, Any]) -> str:
        if "coast" in prompt.split("Sentence: ")[-1]:
            raise ConnectionError("judge down")
        return answers(prompt, params)

    second = "It lies on the coast of New South Wales, a short drive from Sydney."
    middleware = HallucinationMiddleware(
        model=scripted(flaky, "scripted:flaky"), gateway=Gateway(cache=None), on_error="block"
    )
    agent = create_agent(StreamingAgent(answers=[f"{TRUE} {second}"], calls=[], pause=0.05), tools=[search],
                         middleware=[middleware])  # fmt: skip
    events = list(agent.stream({"messages": [HumanMessage(content=QUESTION)]}, stream_mode=["messages", "values"]))
    state = [chunk for mode, chunk in events if mode == "values"][-1]
    assert state["hallucination"]["action"] == "blocked" and "could not be checked" in state["hallucination"]["error"]
    assert state["messages"][-1].text != f"{TRUE} {second}"
