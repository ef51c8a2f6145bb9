"""LangSmith-style evaluators: the result shape, where each method reads its answer and question, a
failing example scored None with its reason, a LangSmith-free experiment loop (sync and async), and
the real langsmith.evaluate / aevaluate offline."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from halluscope import evaluators as factories
from halluscope.backends.gateway import Gateway
from halluscope.detectors import detector
from halluscope.errors import ConfigError
from halluscope.evaluators import example_arguments
from tests.stub_servers import SinkAPI, StubAPI

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
    with pytest.raises(ConfigError, match="phr needs context"):
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


def _langsmith_examples() -> list[Any]:
    from langsmith.schemas import Example

    dataset = uuid.uuid4()
    return [
        Example(
            id=uuid.uuid4(), dataset_id=dataset, inputs={"question": q}, outputs={"samples": ["Paris is in France."]}
        )
        for q in ("Where is Paris?", "Which country is Paris in?")
    ]


def test_langsmith_evaluate_and_aevaluate_accept_both_evaluators() -> None:
    """The real LangSmith client, offline (its API is a local sink; results not uploaded): both the
    sync and the async evaluator run, and each example's samples come from its reference outputs (one
    check per example, no regeneration)."""
    from langsmith import Client, aevaluate, evaluate

    with StubAPI(answer="No") as stub, SinkAPI() as sink:
        spec = f"openai-compatible:{stub.base_url}/v1#stub"
        client = Client(api_key="offline", api_url=sink.base_url)
        sync = factories.create_selfcheck_prompt_evaluator(model=spec, gateway=Gateway(cache=None))
        rows = evaluate(
            lambda inputs: {"answer": "Paris is in Spain."},
            data=_langsmith_examples(),
            evaluators=[sync],
            client=client,
            upload_results=False,
        )
        scores = [row["evaluation_results"]["results"][0].score for row in rows]
        assert scores == [1.0, 1.0] and len(stub.requests) == 2

        async def target(inputs: dict[str, Any]) -> dict[str, Any]:
            return {"answer": "Paris is in Spain."}

        async def run_async() -> list[float]:
            evaluator = factories.create_async_selfcheck_prompt_evaluator(model=spec, gateway=Gateway(cache=None))
            results = await aevaluate(
                target, data=_langsmith_examples(), evaluators=[evaluator], client=client, upload_results=False
            )
            return [row["evaluation_results"]["results"][0].score async for row in results]

        assert asyncio.run(run_async()) == [1.0, 1.0] and len(stub.requests) == 4
        client.flush()  # the client's background traces go to the sink before it stops
    assert all("Sentence: Paris is in Spain." in json.dumps(r["body"]) for r in stub.requests)


def _offline_recipe(rows: list[tuple[dict[str, Any], dict[str, Any]]], evaluator: Any, info: bool = True) -> list[Any]:
    """docs/usage.md's offline recipe, as written there: plain (inputs, reference outputs) rows made
    Examples, a client told the server's info (so it asks for none) and nothing uploaded."""
    from langsmith import Client, evaluate
    from langsmith.schemas import Example, LangSmithInfo

    client = Client(api_key="offline", api_url="http://localhost:1", info=LangSmithInfo() if info else None)
    dataset = uuid.uuid4()
    examples = [Example(id=uuid.uuid4(), dataset_id=dataset, inputs=i, outputs=o) for i, o in rows]
    results = evaluate(
        lambda inputs: {"answer": "Paris is in Spain."},
        data=examples,
        evaluators=[evaluator],
        client=client,
        upload_results=False,
        disable_evaluator_tracing=True,
    )
    return [row["evaluation_results"]["results"][0].score for row in results]


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every outbound connection and name lookup refused (and recorded), LangSmith tracing switched on."""
    import socket

    tried: list[Any] = []

    def refuse(*args: Any, **kwargs: Any) -> Any:
        tried.append(args[1] if len(args) > 1 else args[0])
        raise ConnectionRefusedError(f"outbound connection refused: {tried[-1]}")

    monkeypatch.setattr(socket.socket, "connect", lambda self, address: refuse(self, address))
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setenv("LANGSMITH_TRACING", "true")
    return tried


def test_the_offline_evaluation_recipe_reaches_no_network(
    no_network: list[Any], gateway: Gateway, scripted: Any
) -> None:
    """The recipe evaluates a list of examples with every connection refused: each example's samples from
    its reference outputs, one check each. The client asks for the server's info when not told it: the
    same run without ``info`` tries the network, so this test would see a recipe that does."""
    evaluator = factories.create_selfcheck_prompt_evaluator(model=scripted(lambda p, k: "No"), gateway=gateway)
    rows = [({"question": q}, {"samples": ["Paris is in France."]}) for q in ("Where is Paris?", "Which country?")]
    assert _offline_recipe(rows, evaluator) == [1.0, 1.0]
    assert no_network == []
    _offline_recipe(rows, evaluator, info=False)
    assert no_network, "without info the client asks the server: the guard must see it"


# the offline recipe in a process of its own, every connection refused and counted from its first line to
# its exit: the LangSmith client's background tracing flushes after evaluate returns, at exit
OFFLINE_PROCESS = """
import atexit, socket, sys, uuid
tried = []
def refuse(*args, **kwargs):
    tried.append(repr(args[1] if len(args) > 1 else args[0]))
    raise ConnectionRefusedError("refused")
socket.socket.connect = lambda self, address: refuse(self, address)
socket.create_connection = refuse
atexit.register(lambda: sys.stderr.write(f"CONNECTIONS {len(tried)} {tried[:2]}\\n"))  # runs last
from langsmith import Client, evaluate
from langsmith.schemas import Example, LangSmithInfo
from halluscope.backends.gateway import Gateway
from halluscope.evaluators import create_selfcheck_prompt_evaluator
from tests.scripted import ScriptedChatModel
model = ScriptedChatModel(respond=lambda prompt, params: "No")
evaluator = create_selfcheck_prompt_evaluator(model=model, gateway=Gateway(cache=None))
rows = [({"question": q}, {"samples": ["Paris is in France."]}) for q in ("Where is Paris?", "Which country?")]
client = Client(api_key="offline", api_url="http://localhost:1", info=LangSmithInfo())
dataset = uuid.uuid4()
examples = [Example(id=uuid.uuid4(), dataset_id=dataset, inputs=i, outputs=o) for i, o in rows]
results = evaluate(lambda inputs: {"answer": "Paris is in Spain."}, data=examples, evaluators=[evaluator],
                   client=client, upload_results=False, disable_evaluator_tracing=TRACING_OFF)
print([row["evaluation_results"]["results"][0].score for row in results])
"""


@pytest.mark.parametrize("tracing", [None, "true"])
def test_the_offline_recipe_attempts_no_connection_until_its_process_exits(tracing: str | None) -> None:
    """docs/usage.md's recipe, run as a user runs it: no connection is attempted, not even by the
    client's background tracing after evaluate returns (it POSTed the evaluator's runs to localhost:1 and
    held the process ~17 s at exit), with LANGSMITH_TRACING on or not; without
    ``disable_evaluator_tracing`` the same process does try, so this test would see a recipe that does."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith(("LANGSMITH_", "LANGCHAIN_"))}
    env |= {"PYTHONPATH": str(Path(__file__).resolve().parents[1])} | (
        {"LANGSMITH_TRACING": tracing} if tracing else {}
    )

    def recipe(off: bool) -> subprocess.CompletedProcess[str]:
        code = OFFLINE_PROCESS.replace("TRACING_OFF", str(off))
        return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)

    done = recipe(True)
    assert done.returncode == 0 and done.stdout.splitlines()[-1] == "[1.0, 1.0]", done.stderr[-500:]
    assert "CONNECTIONS 0 " in done.stderr and "Failed to" not in done.stderr, done.stderr[-500:]
    if tracing is None:  # once: the control costs the ~17 s the client waits on a refused server at exit
        traced = recipe(False)
        assert "CONNECTIONS 0 " not in traced.stderr, "without disable_evaluator_tracing the client posts its runs"


def test_the_upload_recipe_sends_each_score_to_the_langsmith_server(gateway: Gateway, scripted: Any) -> None:
    """docs/usage.md's upload recipe against a local stand-in of the LangSmith API: the experiment is
    created, and each example's score arrives as feedback under the evaluator's key."""
    from langsmith import Client, evaluate
    from langsmith.schemas import Example

    evaluator = factories.create_selfcheck_prompt_evaluator(model=scripted(lambda p, k: "No"), gateway=gateway)
    with SinkAPI() as server:
        client = Client(api_key="lsv2-your-key", api_url=server.base_url)
        dataset = uuid.uuid4()
        examples = [
            Example(
                id=uuid.uuid4(), dataset_id=dataset, inputs={"question": q}, outputs={"samples": ["Paris, France."]}
            )
            for q in ("Where is Paris?", "Which country?")
        ]
        evaluate(
            lambda inputs: {"answer": "Paris is in Spain."},
            data=examples,
            evaluators=[evaluator],
            client=client,
            experiment_prefix="halluscope",
        )
        client.flush()
    created = [json.loads(r["body"]) for r in server.requests if (r["method"], r["path"]) == ("POST", "/sessions")]
    feedback = [json.loads(r["body"]) for r in server.requests if r["path"] == "/feedback"]
    assert len(created) == 1 and created[0]["name"].startswith("halluscope")
    assert [(f["key"], f["score"]) for f in feedback] == [("halluscope_selfcheck_prompt", 1.0)] * 2


def test_an_evaluator_past_its_budget_says_why_in_its_row(gateway: Gateway, scripted: Any) -> None:
    evaluator = factories.create_direct_question_evaluator(
        model=scripted(lambda p, k: "Yes"), gateway=gateway, max_calls=1
    )
    row = evaluator(inputs={"question": "Q?"}, outputs={"answer": "Paris is in France. Rome is in Italy."})
    assert row["score"] is None and "BudgetError: this run plans 2 model calls" in row["comment"]
