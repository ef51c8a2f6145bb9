"""The methods' graphs for LangGraph Studio and the LangGraph API server (``langgraph.json``).

The server calls each factory with the run's config, so one deployed graph serves any model: the
model, the judge and the method's build options come from ``configurable`` as plain values (model
spec strings, numbers), never objects. Without a model the strongest installed local model runs.
The graph's input is the method's own state: ``{"text": ..., "samples": [...]}`` for SelfCheck-Prompt,
``{"question": ...}`` for semantic entropy; its output holds the scores.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.graph.state import CompiledStateGraph

from halluscope.backends.entailment import entailment_judge
from halluscope.backends.gateway import default_gateway
from halluscope.backends.local import default_local_model
from halluscope.errors import ConfigError
from halluscope.graphs import direct_question, fibe, selfcheck_prompt, semantic_entropy, semantic_entropy_paragraph

Build = Callable[..., CompiledStateGraph]
# what the server puts in configurable itself: not build options
_SERVER_KEYS = frozenset(
    {"thread_id", "checkpoint_id", "checkpoint_ns", "run_id", "graph_id", "assistant_id", "user_id"}
)
_SERVER_PREFIXES = ("__", "langgraph_")


def _options(build: Build, configurable: Mapping[str, Any], objects: tuple[str, ...]) -> dict[str, Any]:
    """The build's keyword arguments from ``configurable``: its plain options by name; an unknown key
    is an error that lists the ones it accepts (a typo must not run with the default silently)."""
    accepted = [name for name in inspect.signature(build).parameters if name not in ("gateway", *objects)]
    given = {
        key: value
        for key, value in configurable.items()
        if key not in _SERVER_KEYS and not key.startswith(_SERVER_PREFIXES)
    }
    unknown = sorted(set(given) - {*accepted, *objects})
    if unknown:
        raise ConfigError(f"unknown configurable {', '.join(unknown)}; this graph accepts: {', '.join(accepted)}")
    options = {key: value for key, value in given.items() if key in accepted}
    if "model" in accepted and not options.get("model"):
        options["model"] = f"local:{default_local_model()}"
    return options


def _factory(build: Build, judged: bool = False) -> Callable[[RunnableConfig], Awaitable[CompiledStateGraph]]:
    def built(configurable: Mapping[str, Any]) -> CompiledStateGraph:
        options = _options(build, configurable, ("judge",) if judged else ())
        if judged:  # a judge spec string (or none: the strongest installed local model)
            options["judge"] = entailment_judge(configurable.get("judge"), default_gateway())
        return build(gateway=default_gateway(), **options)

    async def graph(config: RunnableConfig) -> CompiledStateGraph:
        # the server calls a factory on its event loop: opening the cache and finding the local model
        # touch the disk, so the build runs on a thread (the graph's own nodes run on threads anyway)
        return await asyncio.to_thread(built, config.get("configurable") or {})

    graph.__doc__ = f"The graph of {build.__module__.rsplit('.', 1)[-1]}, built from the run's configurable."
    return graph


selfcheck_prompt_graph = _factory(selfcheck_prompt.build)
direct_question_graph = _factory(direct_question.build)
fibe_graph = _factory(fibe.build)
semantic_entropy_graph = _factory(semantic_entropy.build, judged=True)
semantic_entropy_paragraph_graph = _factory(semantic_entropy_paragraph.build, judged=True)
