"""Every method's graph for LangGraph Studio and the LangGraph API server, from the registry.

The server calls a method's factory with the run's config, so one deployed graph serves any model: the
method's options come from ``configurable`` as plain values (model spec strings, numbers) and the
method's own ``prepare`` makes its graph of them, judges and references included, as a detector
does. Without a model the strongest installed local model runs. A method that runs no graph of its
own (SelfCheck-Unigram, the learned ensemble) is served as one node that runs it: its input is the
item's fields, its output the result. ``config()`` is langgraph.json (`halluscope studio config`).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from langchain_core.runnables import RunnableConfig, RunnableLambda
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from pydantic import create_model

from halluscope import registry
from halluscope.backends.local import default_local_model
from halluscope.checks import check_value
from halluscope.errors import ConfigError
from halluscope.graphs.method import Method, Prepared, RunContext, start
from halluscope.graphs.stages import afinish, finish

Factory = Callable[[RunnableConfig], Awaitable[CompiledStateGraph]]
# what the server puts in configurable itself: not options
_SERVER_KEYS = frozenset(
    {"thread_id", "checkpoint_id", "checkpoint_ns", "run_id", "graph_id", "assistant_id", "user_id"}
)
_SERVER_PREFIXES = ("__", "langgraph_")


def attribute(method: str) -> str:
    """The name of a method's factory in this module: 'fibe+sbc+dq' is ``fibe_sbc_dq_graph``."""
    return re.sub(r"[^a-z0-9]+", "_", method) + "_graph"


def config() -> dict[str, Any]:
    """langgraph.json: every registered method's graph, by its name."""
    graphs = {name: f"{__name__}:{attribute(name)}" for name in registry.methods()}
    return {"dependencies": ["."], "graphs": graphs}


def factory(name: str) -> Factory:
    """The server's factory of a method's graph, built from the run's configurable."""
    method = registry.get(name)

    def built(configurable: Mapping[str, Any]) -> CompiledStateGraph:
        ctx = start()
        prepared = method.prepare(method.options(**options(method, configurable)), ctx)
        return prepared.graph if prepared.graph is not None else _one_node(method, prepared, ctx)

    async def graph(config: RunnableConfig) -> CompiledStateGraph:
        # the server calls a factory on its event loop: opening the cache and finding the local model
        # touch the disk, so the build runs on a thread (the graph's own nodes run on threads anyway)
        return await asyncio.to_thread(built, config.get("configurable") or {})

    graph.__doc__ = f"{method.summary}: the graph, built from the run's configurable."
    graph.__name__ = attribute(name)
    return graph


def options(method: Method, configurable: Mapping[str, Any]) -> dict[str, Any]:
    """The method's options from ``configurable``, each checked against its type; an unknown key is an
    error listing the ones it takes (a typo must not run with the default silently)."""
    given = {
        key: value
        for key, value in configurable.items()
        if key not in _SERVER_KEYS and not key.startswith(_SERVER_PREFIXES)
    }
    accepted = method.option_names
    unknown = sorted(set(given) - set(accepted))
    if unknown:
        raise ConfigError(f"unknown configurable {', '.join(unknown)}; this graph accepts: {', '.join(accepted)}")
    for key, value in given.items():
        check_value(method.name, key, value, method.hints[key])
    if method.model_field == "model" and "model" in accepted and not given.get("model"):
        default = next(f.default for f in method.fields() if f.name == "model")
        given["model"] = default or f"local:{default_local_model()}"
    return given


def _one_node(method: Method, prepared: Prepared, ctx: RunContext) -> CompiledStateGraph:
    """A method without a graph of its own, as a graph of one node that runs it on the item."""
    fields = {name: (method.hints[name] | None, None) for name in method.input_names}
    title = "".join(part.capitalize() for part in re.split(r"[^a-z0-9]+", method.name))
    item = create_model(f"{title}Input", **fields)  # type: ignore[call-overload]
    state = create_model(f"{title}State", __base__=item, result=(dict[str, Any] | None, None))
    result = create_model(f"{title}Output", result=(dict[str, Any] | None, None))

    def inputs(value: Any) -> Any:
        given = {name: getattr(value, name) for name in method.input_names}
        return method.inputs(**{name: v for name, v in given.items() if v is not None})

    def run(value: Any) -> dict[str, Any]:
        found = finish(method.run(prepared, inputs(value), ctx), ctx.stats)
        return {"result": found.model_dump(mode="json")}

    async def arun(value: Any) -> dict[str, Any]:
        found = await afinish(method.run(prepared, inputs(value), ctx), ctx.stats)
        return {"result": found.model_dump(mode="json")}

    graph = StateGraph(state, input_schema=item, output_schema=result)
    graph.add_node(method.name, RunnableLambda(run, afunc=arun, name=method.name))
    graph.add_edge(START, method.name)
    graph.add_edge(method.name, END)
    return graph.compile(name=method.name)


# the server looks a graph up among the module's own attributes (not through __getattr__)
globals().update({attribute(name): factory(name) for name in registry.methods()})


def __getattr__(name: str) -> Factory:
    """``<method>_graph`` for a method registered after this module was imported."""
    by_attribute = {attribute(method): method for method in registry.methods()}
    if name not in by_attribute:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return factory(by_attribute[name])
