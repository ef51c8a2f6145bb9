"""An answer checked while it streams: a sentence's verdict comes once the next sentence has begun, the
answer's result equals checking the whole answer, the spans lie on the answer's characters, and a failed
sentence never stops the stream."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from langchain_core.messages import AIMessageChunk, ToolMessage

import halluscope
from halluscope.backends.gateway import Gateway
from halluscope.errors import ConfigError
from halluscope.results import DetectionResult
from halluscope.streaming import SentenceVerdict, astream_check, stream_check
from tests.test_grounded import judge

DOCS = ["Canberra is the capital city of Australia.", "Sydney is the largest city of Australia."]
ANSWER = "Canberra is the capital of Australia. It lies in Melbourne. Sydney is its largest city."


def words(text: str) -> list[str]:
    """The answer as a model streams it: a word (with its space) a chunk."""
    parts = text.split(" ")
    return [p + (" " if i < len(parts) - 1 else "") for i, p in enumerate(parts)]


def test_each_sentence_is_judged_once_the_next_has_begun_and_the_answer_equals_check(
    gateway: Gateway, scripted: Callable[..., Any]
) -> None:
    read: list[str] = []

    def chunks() -> Iterator[str]:
        for piece in words(ANSWER):
            read.append(piece)
            yield piece

    model = scripted(judge([]))
    events = []
    for event in stream_check(chunks(), context=DOCS, model=model, gateway=gateway):
        events.append((event, "".join(read)))
    verdicts = [e for e, _ in events if isinstance(e, SentenceVerdict)]
    assert [v.text for v in verdicts] == [
        "Canberra is the capital of Australia.",
        "It lies in Melbourne.",
        "Sydney is its largest city.",
    ]
    # the first verdict came when the second sentence had begun, before the answer was read
    assert events[0][1] == "Canberra is the capital of Australia. It "
    assert events[1][1] == "Canberra is the capital of Australia. It lies in Melbourne. Sydney "
    assert [v.flagged for v in verdicts] == [False, True, False]
    assert all(ANSWER[v.start : v.end] == v.text for v in verdicts)
    assert [v.unit.spans for v in verdicts] == [[(v.start, v.end)] for v in verdicts]  # in the answer's characters

    answer = events[-1][0]
    assert isinstance(answer, DetectionResult)
    whole = halluscope.check(ANSWER, context=DOCS, model=model, gateway=gateway)
    assert [(u.text, u.score) for u in answer.units] == [(u.text, u.score) for u in whole.units]
    assert answer.verdict == whole.verdict and answer.verdict.flagged == [1]
    assert answer.meta.calls == 6 and whole.meta.calls == 0  # three sentences x two chunks; then all cached


def test_message_chunks_and_an_agents_message_pairs_are_read_and_a_tools_message_is_not(
    gateway: Gateway, scripted: Callable[..., Any]
) -> None:
    stream: list[Any] = [
        (ToolMessage(content="Sydney is the capital.", tool_call_id="1"), {"langgraph_node": "tools"}),
        *[(AIMessageChunk(content=w), {"langgraph_node": "model"}) for w in words(ANSWER)[:7]],
        *[AIMessageChunk(content=w) for w in words(ANSWER)[7:]],
    ]
    events = list(stream_check(stream, context=DOCS, model=scripted(judge([])), gateway=gateway))
    assert events[-1].units[1].text == "It lies in Melbourne." and events[-1].verdict.flagged == [1]
    with pytest.raises(ConfigError, match="a stream's chunk is a string or a message chunk, got int"):
        list(stream_check([1], context=DOCS, model=scripted(judge([])), gateway=gateway))


def test_a_sentence_whose_check_fails_is_recorded_and_the_stream_goes_on(
    gateway: Gateway, scripted: Callable[..., Any]
) -> None:
    answers = judge([])

    def flaky(prompt: str, params: dict[str, Any]) -> str:
        if "Melbourne" in prompt.split("Sentence: ")[-1]:
            raise ConnectionError("judge down")
        return answers(prompt, params)

    events = list(stream_check(words(ANSWER), context=DOCS, model=scripted(flaky, "scripted:flaky"), gateway=gateway))
    verdicts = [e for e in events if isinstance(e, SentenceVerdict)]
    assert [v.flagged for v in verdicts] == [False, False, False]
    assert verdicts[1].unit.score is None and "judge down" in verdicts[1].unit.evidence["error"]
    assert any("unchecked sentence It lies in Melbourne." in w for w in events[-1].meta.warnings)


def test_the_async_stream_gives_the_same_verdicts_in_order(gateway: Gateway, scripted: Callable[..., Any]) -> None:
    async def chunks() -> AsyncIterator[str]:
        for piece in words(ANSWER):
            await asyncio.sleep(0)
            yield piece

    async def collect() -> list[Any]:
        return [e async for e in astream_check(chunks(), context=DOCS, model=scripted(judge([])), gateway=gateway)]

    events = asyncio.run(collect())
    assert [e.text for e in events[:-1]] == [u.text for u in events[-1].units]
    assert [e.flagged for e in events[:-1]] == [False, True, False] and events[-1].verdict.flagged == [1]


def test_a_method_that_scores_a_sentence_against_the_rest_is_refused(scripted: Callable[..., Any]) -> None:
    with pytest.raises(ConfigError, match="checked sentence by sentence with grounded or direct-question"):
        list(stream_check(["An answer."], method="selfcheck-prompt", model=scripted(judge([]))))


def test_the_async_stream_stops_checking_when_its_consumer_leaves(
    gateway: Gateway, scripted: Callable[..., Any]
) -> None:
    answers = judge([])
    started: list[float] = []

    def slow(prompt: str, params: dict[str, Any]) -> str:
        started.append(time.monotonic())
        time.sleep(0.2)
        return answers(prompt, params)

    answer = " ".join(f"Canberra has {i} parks." for i in range(12))
    left: list[float] = []

    async def leave_after_the_first() -> None:
        async def chunks() -> AsyncIterator[str]:
            for piece in words(answer):
                yield piece

        stream = astream_check(chunks(), context=DOCS, model=scripted(slow, "scripted:slow"), gateway=gateway)

        async def read() -> None:
            async for _ in stream:
                pass

        reading = asyncio.ensure_future(read())
        await asyncio.sleep(0.5)  # a few calls under way, most still waiting for one of the judge's 3 slots
        reading.cancel()  # the reader leaves
        await asyncio.gather(reading, return_exceptions=True)
        left.append(time.monotonic())
        await asyncio.sleep(2)  # what was still running had time to go on

    asyncio.run(leave_after_the_first())
    assert len(started) < 24  # 12 sentences x 2 documents, had the checks gone on without their reader
    assert not [t for t in started if t > left[0]]  # none started once the reader had left


def test_a_sentence_that_occurs_twice_keeps_each_occurrences_span(
    gateway: Gateway, scripted: Callable[..., Any]
) -> None:
    twice = "It lies in Melbourne. Canberra is the capital of Australia. It lies in Melbourne."
    events = list(stream_check(words(twice), context=DOCS, model=scripted(judge([])), gateway=gateway))
    result = events[-1]
    assert [u.spans for u in result.units] == [[(0, 21)], [(22, 59)], [(60, 81)]]
    assert result.verdict.flagged == [0, 2]
