"""The methods' graphs for LangGraph Studio and the LangGraph API server (``langgraph.json``).

The server calls each factory with the run's config, so one deployed graph serves any model: the
model, the judge and the method's build options come from ``configurable`` as plain values (model
spec strings, numbers), never objects. Without a model the strongest installed local model runs.
The graph's input is the method's own state: ``{"text": ..., "samples": [...]}`` for SelfCheck-Prompt,
``{"question": ...}`` for semantic entropy and CLUE, ``{"items": [{"question", "answers"}], "pool": []}``
for FEWL, ``{"context": [[x, y], ...], "query": ..., "seed": 0}`` for PHR; its output holds the scores.
Objects a build takes (CLUE's zero-shot scorer, PHR's in-context model) are made here from strings.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.graph.state import CompiledStateGraph

from halluscope.backends.entailment import entailment_judge, zero_shot_judge
from halluscope.backends.gateway import Gateway, default_gateway
from halluscope.backends.local import default_local_model
from halluscope.errors import ConfigError
from halluscope.graphs import (
    clue,
    direct_question,
    fewl,
    fibe,
    phr,
    selfcheck_prompt,
    semantic_entropy,
    semantic_entropy_paragraph,
)
from halluscope.graphs.fewl import reference_setup
from halluscope.graphs.phr import TextICL

Build = Callable[..., CompiledStateGraph]
# what the server puts in configurable itself: not build options
_SERVER_KEYS = frozenset(
    {"thread_id", "checkpoint_id", "checkpoint_ns", "run_id", "graph_id", "assistant_id", "user_id"}
)
_SERVER_PREFIXES = ("__", "langgraph_")


# a build argument made from the run's configurable (a spec string) rather than taken from it as is
Make = Callable[[Mapping[str, Any], Gateway], Any]


def _options(
    build: Build, configurable: Mapping[str, Any], made: Iterable[str], reads: Iterable[str]
) -> dict[str, Any]:
    """The build's keyword arguments from ``configurable``: its plain options by name; an unknown key
    is an error that lists the ones it accepts (a typo must not run with the default silently)."""
    made = set(made)
    accepted = [name for name in inspect.signature(build).parameters if name not in ("gateway", *made)]
    allowed = [*accepted, *(key for key in reads if key not in accepted)]
    given = {
        key: value
        for key, value in configurable.items()
        if key not in _SERVER_KEYS and not key.startswith(_SERVER_PREFIXES)
    }
    unknown = sorted(set(given) - set(allowed))
    if unknown:
        raise ConfigError(f"unknown configurable {', '.join(unknown)}; this graph accepts: {', '.join(allowed)}")
    options = {key: value for key, value in given.items() if key in accepted}
    if "model" in accepted and not options.get("model"):
        options["model"] = f"local:{default_local_model()}"
    return options


def _factory(
    build: Build, made: Mapping[str, Make] | None = None, reads: tuple[str, ...] = ()
) -> Callable[[RunnableConfig], Awaitable[CompiledStateGraph]]:
    """``made``: build arguments made from the configurable; ``reads``: the configurable keys they read
    that are not build arguments themselves."""
    made = dict(made or {})

    def built(configurable: Mapping[str, Any]) -> CompiledStateGraph:
        options = _options(build, configurable, made, reads)
        gateway = default_gateway()
        options |= {name: make(configurable, gateway) for name, make in made.items()}
        if "gateway" in inspect.signature(build).parameters:  # PHR's calls go through its model's gateway
            options["gateway"] = gateway
        return build(**options)

    async def graph(config: RunnableConfig) -> CompiledStateGraph:
        # the server calls a factory on its event loop: opening the cache and finding the local model
        # touch the disk, so the build runs on a thread (the graph's own nodes run on threads anyway)
        return await asyncio.to_thread(built, config.get("configurable") or {})

    graph.__doc__ = f"The graph of {build.__module__.rsplit('.', 1)[-1]}, built from the run's configurable."
    return graph


def _judge(configurable: Mapping[str, Any], gateway: Gateway) -> Any:
    """An entailment judge spec (or none: the strongest installed local model)."""
    return entailment_judge(configurable.get("judge"), gateway)


def _scorer(configurable: Mapping[str, Any], gateway: Gateway) -> Any:
    """CLUE's zero-shot scorer from ``judge``: an NLI checkpoint or a model spec (default: bart-large-mnli's
    stand-in, as `detect clue` picks it)."""
    return zero_shot_judge(configurable.get("judge"), gateway)


def _references(configurable: Mapping[str, Any], _gateway: Gateway) -> list[Any]:
    """FEWL's reference model specs (default: the strongest installed local model)."""
    return reference_setup(configurable.get("references"), configurable.get("n"))[0]


def _diversify(configurable: Mapping[str, Any], _gateway: Gateway) -> int | None:
    """One reference model is asked for several answers unless ``n`` says otherwise (FEWL's default)."""
    return reference_setup(configurable.get("references"), configurable.get("n"))[1]


def _in_context_model(configurable: Mapping[str, Any], gateway: Gateway) -> TextICL:
    """PHR's conditional generative model: a log-prob model spec (default: PHR's own)."""
    model = gateway.logprob_model(configurable.get("model") or phr.DEFAULT_MODEL)
    return TextICL(model, gateway, configurable.get("responses", "distribution"), configurable.get("seed", 0))


selfcheck_prompt_graph = _factory(selfcheck_prompt.build)
direct_question_graph = _factory(direct_question.build)
fibe_graph = _factory(fibe.build)
semantic_entropy_graph = _factory(semantic_entropy.build, {"judge": _judge}, reads=("judge",))
semantic_entropy_paragraph_graph = _factory(semantic_entropy_paragraph.build, {"judge": _judge}, reads=("judge",))
clue_graph = _factory(clue.build, {"scorer": _scorer}, reads=("judge",))
fewl_graph = _factory(fewl.build, {"references": _references, "n": _diversify}, reads=("references", "n"))
phr_graph = _factory(phr.build, {"cgm": _in_context_model}, reads=("model", "responses", "seed"))
