"""Detectors as LangChain Runnables, and one trace per item: a callback handler that records every
run and its parent, offline, against the stub server (the real OpenAI client on the wire)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any
from uuid import UUID

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableLambda

import halluscope
from halluscope.backends.entailment import LLMEntailment
from halluscope.backends.gateway import Gateway
from halluscope.errors import ConfigError
from halluscope.results import DetectionResult
from tests.scripted import AsyncOnly, ScriptedChatModel
from tests.stub_servers import StubAPI

TEXT = "Paris is in France. It has a tower."


class Runs(BaseCallbackHandler):
    """Every run started: its kind, name, id, parent and tags."""

    def __init__(self) -> None:
        self.runs: list[dict[str, Any]] = []

    def _add(self, kind: str, run_id: UUID, parent_run_id: UUID | None, kwargs: dict[str, Any]) -> None:
        self.runs.append(
            {
                "kind": kind,
                "name": kwargs.get("name"),
                "id": run_id,
                "parent": parent_run_id,
                "tags": kwargs.get("tags"),
            }
        )

    def on_chain_start(
        self, serialized: Any, inputs: Any, *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any
    ) -> None:
        self._add("chain", run_id, parent_run_id, kwargs)

    def on_chat_model_start(
        self, serialized: Any, messages: Any, *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any
    ) -> None:
        self._add("chat", run_id, parent_run_id, kwargs)

    def roots(self) -> list[dict[str, Any]]:
        return [run for run in self.runs if run["parent"] is None]

    def chats(self) -> list[dict[str, Any]]:
        return [run for run in self.runs if run["kind"] == "chat"]


@pytest.fixture
def spec() -> Iterator[str]:
    with StubAPI(answer="Yes") as stub:
        yield f"openai-compatible:{stub.base_url}/v1#stub"


def test_one_detect_is_one_trace_named_after_the_method(spec: str) -> None:
    """SelfCheck-Prompt regenerating 2 samples (the gateway's sampling threads) then 4 checks (the
    graph's fan-out): 6 model runs, every one under the one root, with the config's tags."""
    det = halluscope.detector("selfcheck-prompt", model=spec, gateway=Gateway(cache=None), n=2)
    runs = Runs()
    result = det.invoke({"text": TEXT, "concept": "Paris"}, config={"callbacks": [runs], "tags": ["nightly"]})
    assert result.ok and result.meta.calls == 6
    [root] = runs.roots()
    assert root["name"] == "selfcheck-prompt" and root["kind"] == "chain"
    assert len(runs.chats()) == 6 and all("nightly" in run["tags"] for run in runs.chats())
    names = {run["name"] for run in runs.runs}
    assert {"split", "regenerate", "check", "score"} <= names


def test_the_judges_threads_and_detect_many_keep_one_trace() -> None:
    """Semantic entropy's entailment judge runs its pairs on threads; detect_many runs items on
    threads: under one parent run, every model run still has that parent as its root."""
    with StubAPI(answer="entailment") as stub:
        spec = f"openai-compatible:{stub.base_url}/v1#stub"
        det = halluscope.detector("semantic-entropy", judge=spec, gateway=Gateway(cache=None))
        runs = Runs()
        batch = RunnableLambda(lambda items: det.detect_many(items, progress=False), name="nightly-batch")
        items = [{"question": q, "answers": ["Paris", "Lyon", "Paris, France"]} for q in ("Capital?", "City?")]
        results = batch.invoke(items, {"callbacks": [runs]})
    assert all(r.ok for r in results)
    [root] = runs.roots()
    assert root["name"] == "nightly-batch"
    calls = sum(r.meta.calls for r in results)
    assert calls >= 4 and len(runs.chats()) == calls == len(stub.requests)


def test_a_detector_composes_in_a_chain_and_batches(spec: str) -> None:
    det = halluscope.detector("selfcheck-prompt", model=spec, gateway=Gateway(cache=None))
    chain = RunnableLambda(lambda text: {"text": text, "samples": ["Paris, France."]}) | det
    scores = (chain | RunnableLambda(lambda result: [u.score for u in result.units])).invoke(TEXT)
    assert scores == [0.0, 0.0]
    out = det.batch([{"text": TEXT, "samples": ["x"]}, {"text": "  ", "samples": ["x"]}], return_exceptions=True)
    assert isinstance(out[0], DetectionResult) and isinstance(out[1], ConfigError)
    runs = Runs()
    det.with_config(run_name="check-answer").invoke({"text": TEXT, "samples": ["x"]}, {"callbacks": [runs]})
    assert [run["name"] for run in runs.roots()] == ["check-answer"]


def yes_to_paris(prompt: str, _params: dict[str, Any]) -> str:
    return "Yes" if "Answer Yes or No" in prompt and "tower" not in prompt.split("\n")[-1] else "No"


@pytest.mark.parametrize(
    ("method", "item"),
    [
        ("selfcheck-prompt", {"text": TEXT, "samples": ["Paris, France.", "Paris is French."]}),
        ("direct-question", {"text": TEXT, "prompt": "Paris"}),
    ],
)
async def test_ainvoke_awaits_the_providers_async_client(method: str, item: dict[str, Any]) -> None:
    """True async: the graph's model calls await the chat model's async path on the event loop, in one
    trace named after the method, and score as the synchronous run does."""
    det = halluscope.detector(method, model=AsyncOnly(respond=yes_to_paris), gateway=Gateway(cache=None))
    runs = Runs()
    result = await det.ainvoke(item, config={"callbacks": [runs]})
    assert result.ok and [run["name"] for run in runs.roots()] == [method]
    assert len(runs.chats()) == result.meta.calls > 0
    synchronous = halluscope.detector(
        method, model=ScriptedChatModel(respond=yes_to_paris), gateway=Gateway(cache=None)
    )
    assert [u.score for u in result.units] == [u.score for u in synchronous.detect(**item).units]
    assert [u.score for u in (await det.adetect(**item)).units] == [u.score for u in result.units]


Options = Callable[[Callable[..., Any], Gateway], dict[str, Any]]


def _async_cases() -> dict[str, tuple[Options, dict[str, Any]]]:
    """Per method: the detector's options from a chat-model maker (``make(respond, model_id)``) and the
    run's gateway, and the item. One maker gives synchronous models, the other async-only ones."""
    from tests.test_clue import OUTPUTS, QUESTION, TableScorer
    from tests.test_clue import _responder as clue_model
    from tests.test_fewl import WordEmbedder
    from tests.test_fewl import _reference as reference_model
    from tests.test_fibe import generic_model
    from tests.test_semantic_entropy_paragraph import CLAIMS, Writer, judge_model

    def paris(_prompt: str, _params: dict[str, Any]) -> str:
        return "Paris is in France. It has a tower and a river."

    def exam(make: Callable[..., Any], _gateway: Gateway) -> dict[str, Any]:
        return {"model": make(generic_model([]))}

    def judged(make: Callable[..., Any], gateway: Gateway) -> dict[str, Any]:
        judge = LLMEntailment(make(judge_model([]), "scripted:judge"), gateway, prompt="semantic_entropy.entailment")
        return {"model": make(Writer()), "judge": judge}

    fewl_item = {"question": "What colour is the sky on a clear day?", "answers": ["Blue.", "Green."]}
    return {
        "fibe": (exam, {"text": TEXT, "prompt": "Tell me about Paris."}),
        "fibe+sbc+dq": (exam, {"text": TEXT, "prompt": "Tell me about Paris."}),
        "fibe+selfcheck+sbc+dq": (exam, {"text": TEXT, "prompt": "Tell me about Paris."}),
        "selfcheck-unigram": (lambda make, _: {"model": make(paris), "n": 3}, {"text": TEXT, "concept": "Paris"}),
        "semantic-entropy-paragraph": (judged, {"text": " ".join(CLAIMS), "question": "Who was Ada Lovelace?"}),
        "clue": (
            lambda make, _: {"model": make(clue_model), "judge": TableScorer(), "n": len(OUTPUTS)},
            {"question": QUESTION},
        ),
        "fewl": (lambda make, _: {"model": make(reference_model), "embedder": WordEmbedder()}, fewl_item),
    }


@pytest.mark.parametrize("method", list(_async_cases()))
async def test_every_method_awaits_the_async_client(method: str) -> None:
    """True async beyond the two above: every model call (the judge's too) awaits the async client, and
    the run gives the synchronous run's scores from as many calls, in one trace named after the method."""
    options, item = _async_cases()[method]

    def asynchronous(respond: Callable[..., str], model_id: str = "scripted:async") -> AsyncOnly:
        return AsyncOnly(respond=respond, model_id=model_id)

    def synchronous(respond: Callable[..., str], model_id: str = "scripted:sync") -> ScriptedChatModel:
        return ScriptedChatModel(respond=respond, model_id=model_id)

    runs, uncached, again = Runs(), Gateway(cache=None), Gateway(cache=None)
    det = halluscope.detector(method, gateway=uncached, **options(asynchronous, uncached))
    result = await det.ainvoke(item, config={"callbacks": [runs]})
    expected = halluscope.detector(method, gateway=again, **options(synchronous, again)).detect(**item)
    assert result.ok and result.meta.calls == expected.meta.calls > 0
    assert [u.score for u in result.units] == [u.score for u in expected.units]
    assert [run["name"] for run in runs.roots()] == [method] and len(runs.chats()) == result.meta.calls


async def test_ainvoke_and_abatch(spec: str) -> None:
    det = halluscope.detector("selfcheck-prompt", model=spec, gateway=Gateway(cache=None))
    one = await det.ainvoke({"text": TEXT, "samples": ["x"]})
    many = await det.abatch([{"text": TEXT, "samples": ["x"]}] * 2)
    assert one.ok and [r.ok for r in many] == [True, True]


def test_a_text_or_message_is_the_answer_or_the_question(spec: str) -> None:
    scgp = halluscope.detector("selfcheck-prompt", model=spec, samples=["x"])
    assert scgp.item(AIMessage(content=TEXT)) == {"text": TEXT}
    assert halluscope.detector("semantic-entropy", model=spec).item("Capital of France?") == {
        "question": "Capital of France?"
    }
    with pytest.raises(ConfigError, match="takes a dict of its arguments or the text to check, got int"):
        scgp.item(3)


def test_the_input_schema_names_the_methods_inputs(spec: str) -> None:
    det = halluscope.detector("selfcheck-prompt", model=spec)
    schema = det.get_input_schema().model_json_schema()
    assert schema["title"] == "SelfcheckPromptInput"
    assert set(schema["properties"]) == {"text", "sentences", "samples", "question", "concept"}
    assert det.OutputType is DetectionResult


async def test_astream_events_reports_progress_node_by_node(spec: str) -> None:
    """LangChain's event stream is the detector's progress: every node and model call as it starts and
    ends, then the result (the gateway's clients never switch to streaming under it)."""
    det = halluscope.detector("selfcheck-prompt", model=spec, gateway=Gateway(cache=None))
    events = [e async for e in det.astream_events({"text": TEXT, "samples": ["x"]}, version="v2")]
    started = [e["name"] for e in events if e["event"] == "on_chain_start"]
    assert started[0] == "selfcheck-prompt" and {"split", "check", "score"} <= set(started)
    assert sum(e["event"] == "on_chat_model_end" for e in events) == 2
    assert events[-1]["event"] == "on_chain_end" and isinstance(events[-1]["data"]["output"], DetectionResult)


async def test_semantic_entropy_samples_and_judges_on_the_event_loop() -> None:
    """The samples and the LLM judge's calls await the async client."""

    def capital(_prompt: str, params: dict[str, Any]) -> str:
        return "Paris" if params.get("seed", 0) % 2 else "Lyon"

    def contradiction(_prompt: str, _params: dict[str, Any]) -> str:
        return "Contradiction"

    question = "What is the capital of France?"
    uncached = Gateway(cache=None)  # the synchronous run below must call its model, not replay this one
    det = halluscope.detector(
        "semantic-entropy",
        model=AsyncOnly(respond=capital, model_id="scripted:async"),
        judge=LLMEntailment(
            AsyncOnly(respond=contradiction, model_id="scripted:judge-async"),
            gateway=uncached,
            prompt="semantic_entropy.entailment",
        ),
        n=4,
        gateway=uncached,
    )
    result = await det.ainvoke(question)
    assert result.ok and result.units[0].evidence["answers"] == ["Lyon", "Paris", "Lyon", "Paris"]
    assert result.meta.calls == 4 + 2  # one pair judged both ways: Lyon vs Paris
    judge = LLMEntailment(
        ScriptedChatModel(respond=contradiction, model_id="scripted:judge"),
        gateway=uncached,
        prompt="semantic_entropy.entailment",
    )
    scripted = ScriptedChatModel(respond=capital)
    synchronous = halluscope.detector("semantic-entropy", model=scripted, judge=judge, n=4, gateway=uncached)
    assert result.units[0].score == synchronous.detect(question=question).units[0].score == pytest.approx(math.log(2))


def test_the_readmes_chain_runs_on_a_real_chat_model_s_message(spec: str) -> None:
    """The README's chain as written: a chat model's AIMessage, whose .text is LangChain's TextAccessor (a
    str subclass spaCy refuses), goes into the detector as the answer; a message itself does too."""
    from langchain_core.prompts import ChatPromptTemplate
    from langchain_openai import ChatOpenAI

    base_url = spec.removeprefix("openai-compatible:").split("#")[0]
    llm = ChatOpenAI(model="stub", base_url=base_url, api_key="not-needed", max_retries=0)
    prompt = ChatPromptTemplate.from_messages([("user", "{question}")])
    question = "Is Paris the capital of France? Answer in a sentence."
    det = halluscope.detector("selfcheck-prompt", model=spec, gateway=Gateway(cache=None), n=2)
    chain = prompt | llm | RunnableLambda(lambda msg: {"text": msg.text, "question": question}) | det
    result = chain.invoke({"question": question})
    assert isinstance(result, DetectionResult) and [u.text for u in result.units] == ["Yes"]
    message = llm.invoke(question)
    assert type(message.text) is not str  # the str subclass the README's lambda hands on
    assert [u.text for u in det.invoke({"text": message, "question": question}).units] == ["Yes"]


def test_a_batchs_max_calls_covers_the_whole_batch_sync_and_async() -> None:
    """Five two-sentence items of SelfCheck-Prompt with one sample are ten calls: under max_calls=3,
    ``batch`` once made all ten (each item had a budget of its own); now the batch is refused past 3."""
    import asyncio

    from halluscope.backends.budget import BudgetError

    items = [{"text": TEXT, "samples": ["x"]}] * 5
    with StubAPI(answer="Yes") as stub:
        det = halluscope.detector(
            "selfcheck-prompt",
            model=f"openai-compatible:{stub.base_url}/v1#stub",
            gateway=Gateway(cache=None),
            max_calls=3,
        )
        with pytest.raises(BudgetError, match="covers the whole batch"):
            det.batch(items, config={"max_concurrency": 1})
        assert len(stub.requests) <= 3
        sent = len(stub.requests)
        with pytest.raises(BudgetError, match="covers the whole batch"):
            asyncio.run(det.abatch(items, config={"max_concurrency": 1}))
        assert len(stub.requests) - sent <= 3
