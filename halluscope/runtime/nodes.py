"""How a method's graph runs: a node written once as steps (run by ``invoke`` on its thread, awaited by
``ainvoke``), the run's stats (and the budget on them) carried in its config, the calls a graph announces before it
makes them, and a graph run to its final state with every node run heard (progress)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from langchain_core.runnables import RunnableConfig, RunnableLambda
from langgraph.graph.state import CompiledStateGraph

from halluscope.backends.stats import CallStats
from halluscope.backends.steps import Step, Steps, afinish, finish


@dataclass(frozen=True)
class Subgraph(Step):
    """A compiled graph run inside a node, under the node's config (its stats and callbacks)."""

    graph: CompiledStateGraph
    state: Mapping[str, Any]
    config: RunnableConfig

    def run(self, stats: CallStats | None) -> dict[str, Any]:
        return cast(dict[str, Any], self.graph.invoke(self.state, self.config))

    async def arun(self, stats: CallStats | None) -> dict[str, Any]:
        return cast(dict[str, Any], await self.graph.ainvoke(self.state, self.config))


def node(name: str, steps: Callable[[Any, RunnableConfig], Steps[dict[str, Any]]]) -> RunnableLambda:
    """A graph node written once as steps (``steps(state, config)`` yields what it waits on and returns
    the state update): ``invoke`` runs them on the node's thread, ``ainvoke`` awaits them on the event
    loop, so a graph's model calls use the provider's async client without a second copy of the node."""

    def run(state: Any, config: RunnableConfig) -> dict[str, Any]:
        return finish(steps(state, config), stats_of(config))

    async def arun(state: Any, config: RunnableConfig) -> dict[str, Any]:
        return await afinish(steps(state, config), stats_of(config))

    return RunnableLambda(run, afunc=arun, name=name)


def stats_of(config: RunnableConfig | None) -> CallStats | None:
    """The run's CallStats, with its budget on them, passed as ``{"configurable": {"stats": ...}}``."""
    return ((config or {}).get("configurable") or {}).get("stats")


def plan_calls(config: RunnableConfig | None, calls: int) -> None:
    """Announce the replies a graph now knows it will take (its own, not its subgraphs'), before it makes
    them: the run's budget refuses a run past its limit, and the total of the run's progress bar grows."""
    stats = stats_of(config)
    if stats is not None:
        stats.plan(calls)


def planner(config: RunnableConfig | None) -> Callable[[int], None]:
    """``plan_calls`` bound to a run's config, for a stage that learns its calls as it goes (clustering)."""
    return lambda calls: plan_calls(config, calls)


def _run_config(stats: CallStats, max_concurrency: int | None) -> RunnableConfig:
    config: RunnableConfig = {"configurable": {"stats": stats}}
    if max_concurrency:
        config["max_concurrency"] = max_concurrency
    return config


class _Folded:
    """A streamed run folded as it goes: ``on_step`` hears every node run (subgraphs' included), and
    ``out`` is the graph's own final state.

    Inside a node of a host graph (a detector in an agent), LangGraph runs the graph as the host's
    subgraph and names its events under the host node's namespace; the graph's own state is the one
    under the shortest namespace, whichever that is."""

    def __init__(self, on_step: Callable[[str], None] | None) -> None:
        self.on_step = on_step
        self.out: dict[str, Any] = {}
        self._root: tuple[str, ...] | None = None

    def add(self, namespace: Any, mode: Any, chunk: Any) -> None:
        if mode == "values" and (self._root is None or len(namespace) <= len(self._root)):
            self._root = cast(tuple[str, ...], namespace)
            self.out = cast(dict[str, Any], chunk)
        elif mode == "updates" and self.on_step is not None:
            for node in chunk:
                self.on_step(node)


def run_streamed(
    graph: CompiledStateGraph,
    state: Mapping[str, Any],
    stats: CallStats,
    max_concurrency: int | None = None,
    on_step: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Run a graph to its final state, telling ``on_step`` of every node run."""
    folded = _Folded(on_step)
    config = _run_config(stats, max_concurrency)
    for namespace, mode, chunk in graph.stream(state, config, stream_mode=["updates", "values"], subgraphs=True):
        folded.add(namespace, mode, chunk)
    return folded.out


async def arun_streamed(
    graph: CompiledStateGraph,
    state: Mapping[str, Any],
    stats: CallStats,
    max_concurrency: int | None = None,
    on_step: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """``run_streamed`` on the event loop: a node with an async form awaits the provider's async
    client; one without runs on LangGraph's threads."""
    folded = _Folded(on_step)
    config = _run_config(stats, max_concurrency)
    stream = graph.astream(state, config, stream_mode=["updates", "values"], subgraphs=True)
    async for namespace, mode, chunk in stream:
        folded.add(namespace, mode, chunk)
    return folded.out
