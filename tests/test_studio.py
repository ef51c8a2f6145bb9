"""LangGraph Studio / API server: the real in-memory server (`langgraph dev`, from langgraph-cli[inmem])
on 127.0.0.1 loads the repository's langgraph.json, and langgraph_sdk runs a method's graph through it
against the stub server."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langgraph_sdk import get_sync_client

from halluscope.backends.budget import BudgetError
from halluscope.errors import ConfigError, DataError, ModelSpecError, ModelUnavailableError, ParseError, PromptError
from halluscope.runtime import studio
from tests.stub_servers import StubAPI, free_port

ROOT = Path(__file__).resolve().parents[1]
TEXT = "Paris is in France. It has a tower."


@contextlib.contextmanager
def serving(folder: Path) -> Iterator[Any]:
    """The API server on a free port with its cache and log in ``folder``, its log kept for a failing
    test (``client.log``); stopped at the end of the block."""
    port, log = free_port(), folder / "server.log"
    env = {
        **os.environ,
        "LANGGRAPH_CLI_NO_ANALYTICS": "1",
        "LANGSMITH_TRACING": "false",
        "HALLUSCOPE_CACHE_DIR": str(folder / "calls"),
    }
    command = [str(Path(sys.executable).parent / "langgraph"), "dev", "--config", str(ROOT / "langgraph.json")]
    command += ["--host", "127.0.0.1", "--port", str(port), "--no-browser", "--no-reload"]
    with log.open("w") as out:
        proc = subprocess.Popen(command, cwd=folder, env=env, stdout=out, stderr=subprocess.STDOUT)
    client = get_sync_client(url=f"http://127.0.0.1:{port}")
    client.log = log  # type: ignore[attr-defined]  # the server's log, which a test reads
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                client.assistants.search()
                break
            except Exception:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"langgraph dev did not start:\n{log.read_text()[-3000:]}") from None
                time.sleep(0.5)
        yield client
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One server for the module's tests."""
    with serving(tmp_path_factory.mktemp("langgraph")) as client:
        yield client


def test_the_server_serves_every_graph_of_langgraph_json(server: Any) -> None:
    declared = json.loads((ROOT / "langgraph.json").read_text())["graphs"]
    assert sorted(a["graph_id"] for a in server.assistants.search(limit=100)) == sorted(declared)


def test_a_method_runs_through_the_server_with_its_model_from_configurable(server: Any) -> None:
    with StubAPI(answer="No") as stub:
        spec = f"openai-compatible:{stub.base_url}/v1#stub"
        out = server.runs.wait(
            None,
            "selfcheck-prompt",
            input={"text": TEXT, "samples": ["Paris, France."]},
            config={"configurable": {"model": spec, "n": 1}},
        )
        assert len(stub.requests) == 2 and stub.requests[0]["body"]["model"] == "stub"
    assert out["scores"] == [1.0, 1.0] and out["scored_sentences"] == ["Paris is in France.", "It has a tower."]


def test_the_exam_and_an_llm_judge_are_awaited_on_the_servers_event_loop(server: Any) -> None:
    """The server runs a graph on its event loop, where its blocking-call guard refuses a synchronous
    model call or disk read: FIBE's exam and semantic entropy's LLM judge await them instead."""
    with StubAPI(answer="Contradiction") as stub:
        spec = f"openai-compatible:{stub.base_url}/v1#stub"
        out = server.runs.wait(
            None,
            "semantic-entropy",
            input={"question": "What is the capital of France?", "given": ["Paris", "Lyon"]},
            config={"configurable": {"model": spec, "judge": spec}},
        )
        assert out["clusters"] == [[0], [1]] and len(stub.requests) == 2  # one pair, judged both ways
        out = server.runs.wait(
            None, "fibe", input={"text": TEXT, "prompt": "Paris"}, config={"configurable": {"model": spec, "n": 2}}
        )
        assert len(stub.requests) == 2 + 1 + 2  # the exam's creation (unreadable: no blanks), two answers
    assert out["scored_sentences"] == ["Paris is in France.", "It has a tower."]


def test_an_unknown_configurable_key_fails_the_run_instead_of_running_with_defaults(server: Any) -> None:
    """The client reads the sentence (not the server's 'An internal error occurred'): a bad configurable,
    and an input the method refuses inside its graph."""
    with pytest.raises(Exception, match="unknown configurable modle; this graph accepts: model, n, scoring"):
        server.runs.wait(None, "selfcheck-prompt", input={"text": TEXT}, config={"configurable": {"modle": "x"}})
    with pytest.raises(Exception, match="n takes a whole number, got str 'x'"):
        server.runs.wait(None, "selfcheck-prompt", input={"text": TEXT}, config={"configurable": {"n": "x"}})
    with pytest.raises(Exception, match="SelfCheck-Prompt needs a non-empty text"):
        server.runs.wait(None, "selfcheck-prompt", input={"text": "  "}, config={"configurable": {"n": 1}})
    with pytest.raises(Exception, match="the ensemble needs a calibration fitted for its methods"):
        server.runs.wait(None, "ensemble", input={"text": TEXT})


def test_every_graph_serves_its_input_output_and_config_schema(server: Any) -> None:
    """Studio's forms: the item's fields in, the result out, the method's options as the configurable
    (with help and defaults), for every graph of langgraph.json; never the whole internal state."""
    for assistant in server.assistants.search(limit=100):
        schemas = server.assistants.get_schemas(assistant["assistant_id"])
        name = assistant["graph_id"]
        for kind in ("input_schema", "output_schema", "config_schema"):
            assert schemas[kind] and schemas[kind]["properties"], (name, kind)
        assert set(schemas["input_schema"]["properties"]) < set(schemas["state_schema"]["properties"]), name
    scgp = next(a for a in server.assistants.search(limit=100) if a["graph_id"] == "selfcheck-prompt")
    schemas = server.assistants.get_schemas(scgp["assistant_id"])
    assert set(schemas["input_schema"]["properties"]) == {"text", "question", "concept", "sentences", "samples"}
    assert set(schemas["output_schema"]["properties"]) == {
        "scored_sentences",
        "used_samples",
        "verdicts",
        "scores",
        "fallbacks",
    }
    config = schemas["config_schema"]["properties"]
    assert set(config) == {"model", "n", "scoring", "batch"} and config["n"]["default"] == 5
    assert config["scoring"]["enum"] == ["discrete", "prob"] and "samples regenerated" in config["n"]["description"]


def test_phr_runs_through_the_server_on_a_local_log_prob_model(server: Any) -> None:
    """PHR's in-context model is made from the configurable's spec string (the server passes no objects)."""
    out = server.runs.wait(
        None,
        "phr",
        input={"context": [["great movie", "positive"], ["awful film", "negative"]], "query": "a fine film", "seed": 0},
        config={"configurable": {"model": "local:smollm2-135m", "n": 2, "k": 5, "n_imagined": 1}},
    )
    estimate = out["estimate"]
    assert 0.0 <= estimate["phr"] <= 1.0 and len(estimate["thr"]) == len(estimate["imagined"]) == 2  # M = 2


def test_judges_and_references_are_spec_strings_in_the_configurable() -> None:
    clue = asyncio.run(
        studio.clue_graph({"configurable": {"model": "local:smollm2-135m", "judge": "local:smollm2-135m"}})
    )
    fewl = asyncio.run(studio.fewl_graph({"configurable": {"references": ["local:smollm2-135m"], "n": 2}}))
    local = {"model": "local:smollm2-135m", "judge": "local:smollm2-135m"}
    se = asyncio.run(studio.semantic_entropy_graph({"configurable": local}))
    paragraph = asyncio.run(studio.semantic_entropy_paragraph_graph({"configurable": local}))
    assert [g.name for g in (clue, fewl, se, paragraph)] == [
        "clue",
        "fewl",
        "semantic-entropy",
        "semantic-entropy-paragraph",
    ]
    refusing = asyncio.run(studio.clue_graph({"configurable": {"scorer": "x"}}))  # its schemas still served
    with pytest.raises(studio.ClientError, match="unknown configurable scorer; this graph accepts: model, judge, n"):
        refusing.invoke({"question": "Who?"})


def test_langgraph_json_is_the_registrys() -> None:
    """langgraph.json is written by `halluscope studio config`: every registered method, and nothing else."""
    assert json.loads((ROOT / "langgraph.json").read_text()) == studio.config(), (
        "langgraph.json is stale: run `halluscope studio config --out langgraph.json`"
    )


def test_a_method_without_a_graph_is_served_as_one_node() -> None:
    graph = asyncio.run(studio.selfcheck_unigram_graph({"configurable": {}}))
    item = {"text": "Ada wrote a program. She was a poet.", "samples": ["Ada wrote a program.", "A poet."]}
    assert graph.get_input_jsonschema()["properties"].keys() == {"text", "sentences", "samples", "question", "concept"}
    out = graph.invoke(item)
    assert [u["text"] for u in out["result"]["units"]] == ["Ada wrote a program.", "She was a poet."]
    assert asyncio.run(graph.ainvoke(item))["result"]["units"] == out["result"]["units"]


SECRET = "sk-studio-secret-0123456789"


def test_a_grounded_run_answers_twice_and_no_server_log_line_holds_a_key(server: Any) -> None:
    """The server's HTTP client logged each request's full URL, ?api_key= included; a second grounded run
    once failed on the torch the first had left half-imported (the first run of each graph on a fresh
    server: test_every_graphs_first_run_on_a_fresh_default_server_runs_or_says_why)."""
    with StubAPI(answer="No") as stub:
        spec = f"openai-compatible:{stub.base_url}/v1?api_key={SECRET}#stub"
        out = server.runs.wait(
            None,
            "grounded",
            input={"text": TEXT, "context": ["Paris is the capital of France."]},
            config={"configurable": {"model": spec}},
        )
        no = pytest.approx([math.exp(-0.05)] * 2)  # the probability of the stub's "No" (log-prob -0.05)
        assert out["scores"] == no and len(stub.requests) == 2
        again = server.runs.wait(
            None, "grounded", input={"text": TEXT, "context": ["Lyon."]}, config={"configurable": {"model": spec}}
        )
        assert again["scores"] == no
    assert SECRET not in server.log.read_text() and "api_key=***" in server.log.read_text()


def test_a_served_run_is_held_to_a_call_budget_and_checks_its_input(server: Any) -> None:
    """No budget reached a served graph (n=1,000,000 grew the server to 7.5 GB; 6,000 documents sent
    12,036 requests): the server's ceiling holds, a configurable max_calls may lower it, not raise it;
    a context the Python API refuses in one line is refused in that line."""
    with StubAPI(answer="Yes") as stub:
        spec = f"openai-compatible:{stub.base_url}/v1#stub"
        over = "plans 3,000,000 model calls, more than the limit of 10,000; a run's configurable max_calls may"
        with pytest.raises(Exception, match=over):
            server.runs.wait(
                None,
                "selfcheck-prompt",
                input={"text": TEXT, "question": "Where is Paris?"},
                config={"configurable": {"model": spec, "n": 1_000_000}},
            )
        with pytest.raises(Exception, match="plans 4 model calls, more than the limit of 3"):
            server.runs.wait(
                None,
                "grounded",
                input={"text": TEXT, "context": ["A.", "B."]},
                config={"configurable": {"model": spec, "max_calls": 3}},
            )
        with pytest.raises(Exception, match="max_calls takes 1 to this server's ceiling of 10,000"):
            server.runs.wait(
                None, "grounded", input={"text": TEXT, "context": ["A."]}, config={"configurable": {"max_calls": 10**6}}
            )
        for context, said in (
            ([], "context is empty"),
            ([123], "context\\[0\\] must be a text or a LangChain Document"),
        ):
            with pytest.raises(Exception, match=said):
                server.runs.wait(
                    None, "grounded", input={"text": TEXT, "context": context}, config={"configurable": {"model": spec}}
                )
        assert stub.requests == []  # nothing past a limit, nothing for a refused input


# graph: (input, configurable), "stub" standing for the stub server's spec
FIRST_RUNS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "clue": ({"question": "Where is Paris?", "outputs": ["Paris is in France."]}, {"judge": "stub", "n": 1}),
    "clue-diversity": ({"outputs": ["A happy tale."], "subconcepts": ["happy tone", "sad tone"]}, {"judge": "stub"}),
    "direct-question": ({"text": TEXT}, {}),
    "ensemble": ({"text": TEXT, "samples": ["Paris, France."], "context": ["Paris is in France."]}, {"n": 1}),
    "fewl": ({"items": [{"question": "Where is Paris?", "answers": ["In France."]}]}, {"references": ["stub"], "n": 2}),
    "fibe": ({"text": TEXT}, {"n": 1}),
    "fibe+dq": ({"text": TEXT}, {"n": 1}),
    "fibe+sbc": ({"text": TEXT}, {"n": 1}),
    "fibe+sbc+dq": ({"text": TEXT}, {"n": 1}),
    "fibe+selfcheck+sbc": ({"text": TEXT, "samples": ["Paris, France."]}, {"n": 1}),
    "fibe+selfcheck+sbc+dq": ({"text": TEXT, "samples": ["Paris, France."]}, {"n": 1}),
    "grounded": ({"text": TEXT, "context": "Paris is the capital of France."}, {}),
    "phr": ({"context": [["great movie", "positive"], ["awful film", "negative"]], "query": "a fine film"}, {}),
    "probe": ({"text": TEXT}, {}),
    "selfcheck-nli": ({"text": TEXT, "samples": ["Paris, France."]}, {}),
    "selfcheck-prompt": ({"text": TEXT, "samples": ["Paris, France."]}, {"n": 1}),
    "selfcheck-unigram": ({"text": TEXT, "samples": ["Paris, France."]}, {}),
    "semantic-entropy": ({"question": "Where is Paris?", "answers": ["France", "France"]}, {"judge": "stub"}),
    "semantic-entropy-paragraph": ({"text": TEXT, "question": "Where is Paris?"}, {"judge": "stub"}),
    "token-logprob": ({"text": TEXT}, {"model": "local:smollm2-135m"}),
}
LOCAL = {"phr": {"model": "local:smollm2-135m", "n": 2, "k": 5, "n_imagined": 1}}


def test_every_graphs_first_run_on_a_fresh_default_server_runs_or_says_why(tmp_path: Path) -> None:
    """Each method's lazy imports (spaCy, torch, sentence-transformers, llama.cpp) happen on its first
    run, which the server (no --allow-blocking) makes on its event loop: the first grounded run died
    there and left torch half-imported for every later run. Each method module's graphs run first on a
    fresh server of their own: each answers, or refuses in a halluscope error's one line."""
    assert sorted(FIRST_RUNS) == sorted(json.loads((ROOT / "langgraph.json").read_text())["graphs"])
    by_module: dict[str, list[str]] = {}  # FIBE's variants are one module's graphs
    for name in FIRST_RUNS:
        by_module.setdefault(name.partition("+")[0], []).append(name)
    outcomes: dict[str, str] = {}
    with StubAPI(answer="Yes") as stub:
        spec = f"openai-compatible:{stub.base_url}/v1#stub"
        for number, names in enumerate(by_module.values()):
            folder = tmp_path / str(number)
            folder.mkdir()
            with serving(folder) as client:
                for name in names:
                    outcomes[name] = _first_run(client, name, spec)
                log = client.log.read_text()
            assert "BlockingError" not in log and "partially initialized" not in log, (names, log[-3000:])
    refused = {k: v for k, v in outcomes.items() if v != "ran"}  # what no stub can stand in for
    assert sorted(refused) == ["ensemble", "probe", "selfcheck-nli"], outcomes
    assert "needs a calibration" in refused["ensemble"] and "needs an NLI classifier" in refused["selfcheck-nli"]
    assert "needs a fitted probe" in refused["probe"]


def _first_run(client: Any, name: str, spec: str) -> str:
    """'ran', or the error the server's client read."""
    given, configurable = FIRST_RUNS[name]
    settings = {k: [spec] if v == ["stub"] else spec if v == "stub" else v for k, v in configurable.items()}
    takes_model = "model" in studio.registry.get(name).option_names
    settings = LOCAL.get(name) or ({"model": spec} if takes_model else {}) | settings
    try:
        client.runs.wait(None, name, input=given, config={"configurable": settings})
    except Exception as exc:  # the server's error, as its client reads it
        assert any(kind in str(exc) for kind in HALLUSCOPE_ERRORS), (name, str(exc))
        return str(exc)
    return "ran"


HALLUSCOPE_ERRORS = tuple(
    kind.__name__
    for kind in (ConfigError, ModelSpecError, ModelUnavailableError, PromptError, ParseError, BudgetError, DataError)
)
