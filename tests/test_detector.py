"""The one public API: ``halluscope.detector`` on scripted models: options and items checked by name,
blank inputs and failing items recorded per item, input order kept, one instance shared by threads
and by concurrent async runs."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

import halluscope
from halluscope.backends.entailment import LLMEntailment
from halluscope.backends.gateway import CallStats, Gateway
from halluscope.errors import ConfigError

PASSAGES = [
    "Einstein was a physicist. He was born in Paris.",
    "Marie Curie was a chemist. She won two Nobel prizes.",
    "Ada Lovelace wrote programs. She was born in Rome.",
]


class ProviderDown(Exception):
    status_code = 503  # retried, then given up on: a ModelUnavailableError


def respond(prompt: str, params: dict[str, Any]) -> str:
    """Regenerations deny every birthplace; a check says No to a birthplace, Yes otherwise; 'explode'
    stands for a provider that keeps failing."""
    if "explode" in prompt:
        raise ProviderDown("provider down")
    if "Write an article" in prompt:
        return f"A short article. Sample {params.get('seed')}."
    return "No" if "born in" in prompt.split("Sentence: ")[1] else "Yes"


def scores(result: halluscope.DetectionResult) -> list[float | None]:
    return [u.score for u in result.units]


def test_detector_binds_options_and_checks_names(gateway: Gateway, scripted: Any) -> None:
    det = halluscope.detector("selfcheck_prompt", model=scripted(respond), n=2, gateway=gateway)
    assert det.method == "selfcheck-prompt"
    result = det.detect(text=PASSAGES[0], concept="Einstein")
    assert scores(result) == [0.0, 1.0] and result.ok and result.risk == 1.0
    assert "highest risk 1.000" in result.summary() and "born in Paris" in result.summary()
    with pytest.raises(
        ConfigError,
        match="unknown method 'selfcheck'; did you mean .* available: clue, clue-diversity, direct-question",
    ):
        halluscope.detector("selfcheck")
    with pytest.raises(ConfigError, match="selfcheck-prompt has no option 'samples_n'; it accepts: text"):
        halluscope.detector("selfcheck-prompt", model="local:smollm2-135m", samples_n=3)
    with pytest.raises(ConfigError, match="has no argument 'passage'"):
        det.detect(passage=PASSAGES[0])
    with pytest.raises(ConfigError, match="selfcheck-prompt: the text is empty"):
        det.detect(text="  ", concept="x")
    with pytest.raises(TypeError):  # a detector is configuration only, and frozen
        det.options["n"] = 3  # type: ignore[index]


@pytest.mark.parametrize(
    ("method", "options", "planned"),
    [
        ("selfcheck-prompt", {"n": 2}, 2 + 2 * 2),  # 2 regenerations, then 2 sentences x 2 checks
        ("selfcheck-prompt", {"samples": ["Einstein was a chemist."]}, 2 * 1),  # the checks against given samples
        ("direct-question", {}, 2),  # one question per sentence
        ("selfcheck-unigram", {"n": 3}, 3),  # the regenerations; the scores are counts
    ],
)
def test_a_detect_announces_its_calls_before_it_makes_them(
    gateway: Gateway, scripted: Any, method: str, options: dict[str, Any], planned: int
) -> None:
    """What `halluscope detect` shows as its bar's total, announced as the method learns it."""
    totals: list[int] = []
    stats = CallStats(on_plan=totals.append)
    model = scripted(lambda prompt, _p: "Yes" if "Answer Yes or No" in prompt else "Einstein was a physicist.")
    det = halluscope.detector(method, model=model, gateway=gateway, **options)
    about = {"prompt": "Einstein"} if method == "direct-question" else {"concept": "Einstein"}
    result = det.detect(text=PASSAGES[0], stats=stats, **about)
    assert result.ok and totals == [planned] and result.meta.calls + result.meta.cache_hits == planned


def test_fewl_model_is_its_reference() -> None:
    det = halluscope.detector("fewl", model="local:qwen2.5-coder-0.5b", n=3)
    assert det.options["references"] == ["local:qwen2.5-coder-0.5b"]


def test_detect_many_keeps_order_and_records_each_failure(gateway: Gateway, scripted: Any) -> None:
    det = halluscope.detector("selfcheck-prompt", model=scripted(respond), n=2, gateway=gateway)
    items: list[Any] = [
        {"text": PASSAGES[0], "concept": "Einstein"},
        {"text": "", "concept": "nobody"},
        {"text": PASSAGES[1], "concept": "explode"},
        "not a dict",
        {"text": PASSAGES[2], "concept": "Lovelace"},
    ]
    results = det.detect_many(items, concurrency=3, progress=False)
    assert len(results) == 5
    assert [r.ok for r in results] == [True, False, False, False, True]
    assert scores(results[0]) == [0.0, 1.0] and scores(results[4]) == [0.0, 1.0]
    assert results[4].units[1].text == "She was born in Rome."
    assert results[1].error == "ConfigError: selfcheck-prompt: the text is empty"
    assert "provider down" in (results[2].error or "")
    assert "must be a dict" in (results[3].error or "") and results[3].units == []
    assert results[2].summary().startswith("selfcheck-prompt: failed (")
    again = det.detect_many(items[:1], progress=False)  # answered calls stay in the cache
    assert again[0].meta.calls == 0 and again[0].meta.cache_hits == 2 + 2 * 2


def test_one_detector_shared_across_threads_and_async_runs(gateway: Gateway, scripted: Any) -> None:
    seen: list[str] = []
    lock = threading.Lock()

    def counting(prompt: str, params: dict[str, Any]) -> str:
        with lock:
            seen.append(prompt)
        return respond(prompt, params)

    det = halluscope.detector("selfcheck-prompt", model=scripted(counting), n=3, gateway=gateway)
    items = [{"text": f"Person {i} was a physicist. He was born in City {i}.", "concept": f"P{i}"} for i in range(12)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        threaded = list(pool.map(lambda item: det.detect(**item), items))
    assert [scores(r) for r in threaded] == [[0.0, 1.0]] * len(items)
    assert len(seen) == 12 * (3 + 3 * 2)  # each passage: 3 regenerations + 3 x 2 checks, nothing lost or doubled
    assert sum(r.meta.calls for r in threaded) == len(seen)

    async def both() -> list[halluscope.DetectionResult]:
        return await asyncio.gather(*(det.adetect(**item) for item in items))

    concurrent = asyncio.run(both())
    assert [scores(r) for r in concurrent] == [scores(r) for r in threaded]
    assert all(r.meta.calls == 0 for r in concurrent) and len(seen) == 108


def test_a_method_graph_mounts_as_a_subgraph_under_the_hosts_checkpointer(gateway: Gateway, scripted: Any) -> None:
    """A host graph whose state shares SCGP's keys mounts the compiled graph as a node and brings its own
    checkpointer; the run's calls are counted through the host's config."""
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import START, StateGraph

    from halluscope.backends.gateway import CallStats
    from halluscope.methods.selfcheck_prompt import SCGPState, build

    host = StateGraph(SCGPState)
    host.add_node("selfcheck", build(scripted(respond), gateway, n=2))
    host.add_edge(START, "selfcheck")
    app = host.compile(checkpointer=InMemorySaver())
    stats = CallStats()
    config: Any = {"configurable": {"thread_id": "t", "stats": stats}}
    out = app.invoke({"text": PASSAGES[0], "concept": "Einstein"}, config)
    assert out["scores"] == [0.0, 1.0] and len(out["verdicts"]) == 4 and stats.calls == 2 + 4
    assert app.get_state(config).values["scores"] == [0.0, 1.0]  # the host's checkpointer holds the state


MOUNTABLE = {  # module: (input schema, output schema)
    "selfcheck_prompt": ("SCGPInput", "SCGPOutput"),
    "fibe": ("FIBEInput", "FIBEOutput"),
    "semantic_entropy": ("SEInput", "SEOutput"),
    "semantic_entropy_paragraph": ("ParagraphInput", "ParagraphOutput"),
    "clue": ("ClueInput", "ClueOutput"),
    "fewl": ("FewlInput", "FewlOutput"),
    "phr": ("PHRInput", "PHROutput"),
}


@pytest.mark.parametrize("module", sorted(MOUNTABLE))
def test_every_graph_gives_a_host_only_its_result(module: str) -> None:
    """A host mounting a graph gets its output keys only: none of them is an input (a checkpointed host
    would feed the last turn's value into the next) and none has a reducer (a host's list would grow)."""
    import importlib
    import typing

    graphs = importlib.import_module(f"halluscope.methods.{module}")
    inputs, outputs = (getattr(graphs, name) for name in MOUNTABLE[module])
    assert not set(inputs.__annotations__) & set(outputs.__annotations__)
    hints = typing.get_type_hints(outputs, include_extras=True)
    assert not [k for k, v in hints.items() if typing.get_origin(v) is typing.Annotated]
    source = importlib.import_module(f"halluscope.methods.{module}").__file__
    assert f"input_schema={MOUNTABLE[module][0]}, output_schema={MOUNTABLE[module][1]}" in Path(str(source)).read_text()


def test_two_turns_on_one_checkpointed_thread_do_not_leak(gateway: Gateway, scripted: Any) -> None:
    """The README's recipe, twice on one thread: the second text is scored on its own sentences, and
    nothing of the first turn's working state (sentences, checks) carries over."""
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import START, StateGraph

    from halluscope.backends.gateway import CallStats
    from halluscope.methods import semantic_entropy
    from halluscope.methods.selfcheck_prompt import SCGPState, build

    host = StateGraph(SCGPState)  # the method's own state type as the host's
    host.add_node("selfcheck", build(scripted(respond), gateway, n=2))
    host.add_edge(START, "selfcheck")
    app = host.compile(checkpointer=InMemorySaver())
    config: Any = {"configurable": {"thread_id": "t", "stats": CallStats()}}
    first = app.invoke({"text": PASSAGES[0], "concept": "Einstein"}, config)
    second = app.invoke({"text": "Albert Einstein was a chemist.", "concept": "Einstein"}, config)
    assert first["scored_sentences"] == ["Einstein was a physicist.", "He was born in Paris."]
    assert second["scored_sentences"] == ["Albert Einstein was a chemist."]
    assert len(first["verdicts"]) == 4 and len(second["verdicts"]) == 2 and len(second["scores"]) == 1
    assert app.get_state(config).values.get("checks", []) == []  # the working list never reaches the host

    se_host = StateGraph(semantic_entropy.SEState)
    judge = LLMEntailment(
        scripted(lambda p, _k: "entailment", "scripted:judge"), gateway=gateway, prompt="semantic_entropy.entailment"
    )
    se_host.add_node("se", semantic_entropy.build(None, judge, gateway))
    se_host.add_edge(START, "se")
    se_app = se_host.compile(checkpointer=InMemorySaver())
    a = se_app.invoke({"question": "Capital of France?", "given": ["Paris", "Paris", "Lyon"]}, config)
    b = se_app.invoke({"question": "Capital of Italy?", "given": ["Rome"]}, config)
    assert a["answers"] == ["Paris", "Paris", "Lyon"] and b["answers"] == ["Rome"] and b["clusters"] == [[0]]


def test_a_bug_raises_instead_of_being_recorded_as_a_failed_item(gateway: Gateway, scripted: Any) -> None:
    """User and provider errors are per-item data; a programming error is not hidden among them."""

    def broken(_prompt: str, _params: dict[str, Any]) -> str:
        raise TypeError("a bug in a model wrapper")

    det = halluscope.detector("selfcheck-prompt", model=scripted(broken, "scripted:bug"), gateway=gateway)
    with pytest.raises(TypeError, match="a bug in a model wrapper"):
        det.detect_many([{"text": PASSAGES[0], "samples": ["A sample."]}], progress=False)
    failed = det.detect_many([{"text": " ", "samples": ["A sample."]}], progress=False)
    assert failed[0].error is not None and "the text is empty" in failed[0].error


def test_a_judge_is_a_spec_string_or_an_object_everywhere(gateway: Gateway) -> None:
    """judge='provider:model' reaches the graphs as a judge (it reached them as a bare string)."""
    from tests.stub_servers import StubAPI

    with StubAPI(answer="entailment") as stub:
        spec = f"openai-compatible:{stub.base_url}/v1#judge"
        det = halluscope.detector("semantic-entropy", judge=spec, gateway=gateway)
        result = det.detect(question="Capital of France?", answers=["Paris", "It is Paris"])
        assert result.units[0].evidence["clusters"] == [[0, 1]] and result.meta.params["judge"] == spec
        assert len(stub.requests) == 2  # one pair, judged both ways
        # the model is named (CLUE needs one) but never loaded: the judge is resolved first
        clue = halluscope.detector("clue", model=spec, judge="nli:/no/such/checkpoint", gateway=gateway)
        with pytest.raises(ConfigError, match="/no/such/checkpoint"):
            clue.detect(question="Who founded Apple?", outputs=["Jobs founded Apple."])
