"""LangSmith-style evaluators: the result shape, where each method reads its answer and question, a
failing example scored None with its reason, and a LangSmith-free experiment loop (sync and async)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from halluscope import evaluators as factories
from halluscope.backends.gateway import Gateway
from halluscope.detector import detector
from halluscope.errors import ConfigError
from halluscope.evaluators import example_arguments

EXAMPLES = [
    ({"question": "Who was Einstein?"}, {"answer": "Einstein was a physicist. He was born in Paris."}),
    ({"question": "Who was Curie?"}, {"output": "Marie Curie was a chemist."}),
    ({"question": "Who was Lovelace?"}, {"answer": "   "}),
]


def respond(prompt: str, params: dict[str, Any]) -> str:
    if prompt.startswith("Who was"):  # the example's question, asked again for a sample
        return f"A short article. Sample {params.get('seed')}."
    return "No" if "born in" in prompt.split("Sentence: ")[1] else "Yes"


def test_each_method_reads_its_fields() -> None:
    q, a = {"question": "Q?"}, {"answer": "A."}
    assert example_arguments(detector("fibe"), q, a) == {"text": "A.", "prompt": "Q?"}
    assert example_arguments(detector("selfcheck-prompt"), q, a) == {"text": "A.", "question": "Q?"}
    assert example_arguments(detector("semantic-entropy"), q, a) == {"question": "Q?"}
    assert example_arguments(detector("semantic-entropy-paragraph"), q, "A.") == {"question": "Q?", "text": "A."}
    assert example_arguments(detector("clue"), "Q?", a) == {"question": "Q?"}
    assert example_arguments(detector("fewl"), q, a) == {"question": "Q?", "answers": ["A."]}
    chat = {"messages": [HumanMessage("Q?"), AIMessage("A.")]}
    assert example_arguments(detector("fewl"), {"messages": [HumanMessage("Q?")]}, chat)["answers"] == ["A."]
    icl = {"context": [("good film", "positive")], "query": "bad film"}
    assert example_arguments(detector("phr"), icl, None) == icl
    with pytest.raises(ConfigError, match="no answer in outputs found: expected one of the keys answer"):
        example_arguments(detector("fibe"), q, {"score": 1})
    with pytest.raises(ConfigError, match="phr reads inputs"):
        example_arguments(detector("phr"), q, a)


def test_every_method_has_a_sync_and_an_async_factory() -> None:
    for name in ("fibe", "selfcheck_prompt", "selfcheck_unigram", "semantic_entropy"):
        assert callable(getattr(factories, f"create_{name}_evaluator"))
    for name in ("semantic_entropy_paragraph", "clue", "fewl", "phr"):
        assert callable(getattr(factories, f"create_{name}_evaluator"))
        assert asyncio.iscoroutinefunction(getattr(factories, f"create_async_{name}_evaluator")(model="x:y"))


def test_an_evaluation_loop_without_langsmith(gateway: Gateway, scripted: Any) -> None:
    model = scripted(respond)
    evaluator = factories.create_selfcheck_prompt_evaluator(model=model, n=2, gateway=gateway)
    rows = [evaluator(inputs=i, outputs=o, reference_outputs={"answer": "unused"}) for i, o in EXAMPLES]
    assert [r["key"] for r in rows] == ["halluscope_selfcheck_prompt"] * 3
    assert set(rows[0]) == {"key", "score", "comment", "metadata"}
    assert [r["score"] for r in rows] == [1.0, 0.0, None]
    assert rows[0]["metadata"]["units"] == [
        {"text": "Einstein was a physicist.", "score": 0.0},
        {"text": "He was born in Paris.", "score": 1.0},
    ]
    assert "He was born in Paris." in rows[0]["comment"] and rows[0]["metadata"]["calls"] == 2 + 2 * 2
    assert rows[2]["comment"] == "selfcheck-prompt: failed (ConfigError: selfcheck-prompt: the text is empty)"

    twin = factories.create_async_selfcheck_prompt_evaluator(model=model, n=2, gateway=gateway, key="scgp")

    async def experiment() -> list[dict[str, Any]]:
        return await asyncio.gather(*(twin(inputs=i, outputs=o) for i, o in EXAMPLES))

    async_rows = asyncio.run(experiment())
    assert [r["score"] for r in async_rows] == [1.0, 0.0, None] and async_rows[0]["key"] == "scgp"
    assert async_rows[0]["metadata"]["calls"] == 0  # replayed from the cache the sync loop filled
