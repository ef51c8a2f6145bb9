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
import collections.abc
import functools
import operator
import re
import types
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from typing import Annotated, Any, Union, get_args, get_origin

from langchain_core.runnables import RunnableConfig, RunnableLambda
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from pydantic import BaseModel, Field, TypeAdapter, create_model
from typing_extensions import TypedDict

from halluscope.backends.budget import CallBudget
from halluscope.backends.local import default_spec
from halluscope.backends.stats import CallStats
from halluscope.backends.steps import afinish, finish
from halluscope.checks import check_value
from halluscope.errors import ConfigError, HalluscopeError
from halluscope.runtime import registry
from halluscope.runtime.contract import Method, Prepared, RunContext, start
from halluscope.runtime.serving import MAX_CALLS_ENV, Operator
from halluscope.text import sentences as split_sentences

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


def run_limit(configurable: Mapping[str, Any]) -> int:
    """The calls one served run may plan: its configurable ``max_calls``, at most the server's ceiling."""
    return Operator.from_env().limit(configurable.get("max_calls"), f" ({MAX_CALLS_ENV})")


def warm() -> None:
    """What a first run would otherwise import on the server's event loop, where its blocking-call guard
    stops it half-way (spaCy, and torch beneath it): loaded here, on the build's thread."""
    split_sentences("Warm up.")


def factory(name: str) -> Factory:
    """The server's factory of a method's graph, built from the run's configurable."""
    method = registry.get(name)

    def built(configurable: Mapping[str, Any]) -> CompiledStateGraph:
        try:
            warm()
            ctx = start(budget=CallBudget(run_limit(configurable)))
            given = {k: v for k, v in configurable.items() if k != "max_calls"}
            prepared = method.prepare(method.options(**options(method, given)), ctx)
        except HalluscopeError as exc:  # the schemas stay served; a run says why it cannot run
            return _one_node(method, _refusing(exc))
        if prepared.graph is not None:
            return prepared.graph
        return _one_node(method, _running(method, prepared, ctx))

    async def graph(config: RunnableConfig) -> CompiledStateGraph:
        # the server calls a factory on its event loop: opening the cache and finding the local model
        # touch the disk, so the build runs on a thread (the graph's own nodes run on threads anyway)
        compiled = await asyncio.to_thread(built, config.get("configurable") or {})
        attributes = {k: v for k, v in compiled.__dict__.items() if k != "__orig_class__"}  # as Pregel.copy
        return served(**{**attributes, "context_schema": options_schema(method)})  # Studio's form: the options

    # the method a class attribute: the server copies a graph (Pregel.copy) into a new one of its class
    served = type(f"Served_{attribute(name)}", (Served,), {"method": method})
    graph.__doc__ = f"{method.summary}: the graph, built from the run's configurable."
    graph.__name__ = attribute(name)
    return graph


class ClientError(ValueError):
    """A problem the server's client must read (a bad configurable, a model that cannot be found): the
    LangGraph server sends a ValueError's message to the client, and hides other errors' behind 'An
    internal error occurred'."""


class Served(CompiledStateGraph):
    """A method's graph as the server runs it, held to what the Python API holds a run to: its input
    checked as the method checks it (an empty or non-text context is the same one line), a call budget
    (the server's ceiling, or the run's configurable ``max_calls``: n=1,000,000 once grew the server to
    7.5 GB) with its retries counted, and a halluscope error (an empty text, a provider that stays down)
    reaching the client as its message, a ClientError."""

    method: Method | None = None

    def _guarded(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
        """The run's arguments with its stats and budget in its config (its nodes count their calls and
        retries on them), after its input is checked."""
        given, rest = (args[0], args[1:]) if args else (kwargs.pop("input", None), ())
        config = dict((rest[0] if rest else kwargs.pop("config", None)) or {})
        configurable = dict(config.get("configurable") or {})
        limit = run_limit(configurable)
        budget = CallBudget(
            limit,
            allow=f"a run's configurable max_calls may raise it to this server's ceiling of "
            f"{Operator.from_env().max_calls:,} ({MAX_CALLS_ENV})",
        )
        if self.method is not None and isinstance(given, Mapping):
            self.method.validate_fields({k: v for k, v in given.items() if k in self.method.input_names})
        config["configurable"] = {**configurable, "stats": CallStats(budget=budget)}
        return (given, config, *rest[1:])

    async def astream(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:  # type: ignore[override]
        try:
            async for chunk in super().astream(*self._guarded(args, kwargs), **kwargs):
                yield chunk
        except HalluscopeError as exc:
            raise ClientError(f"{type(exc).__name__}: {exc}") from exc

    def stream(self, *args: Any, **kwargs: Any) -> Iterator[Any]:  # type: ignore[override]
        try:
            yield from super().stream(*self._guarded(args, kwargs), **kwargs)
        except HalluscopeError as exc:
            raise ClientError(f"{type(exc).__name__}: {exc}") from exc


def options_schema(method: Method) -> type:
    """The method's options as the configurable takes them (spec strings, numbers, lists of text), each
    with its help and default: Studio's form, and the server's ``config_schema``. An option no JSON value
    can give (an embedder object) is left out."""
    fields: dict[str, Any] = {}
    for f in method.fields():
        plain = _json_hint(f.hint) if f.name in method.option_names else None
        if plain is None or plain is type(None):
            continue
        extra = {"default": f.default} if _json_value(f.default) else {}
        fields[f.name] = Annotated[plain, Field(description=f.help, json_schema_extra=extra or None)]
    return TypedDict(f"{_title(method)}Configurable", fields, total=False)  # type: ignore[operator]


def _json_hint(hint: Any) -> Any:
    """The part of a type hint a JSON value can take (a model spec string, not a chat model object);
    None when no part can."""
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        kept = [found for found in map(_json_hint, get_args(hint)) if found is not None]
        return functools.reduce(operator.or_, kept) if kept else None
    if origin in (list, tuple, collections.abc.Sequence) and get_args(hint):
        inner = _json_hint(get_args(hint)[0])
        return None if inner is None else list[inner]  # type: ignore[valid-type]
    if isinstance(hint, type) and issubclass(hint, BaseModel):  # a Calibration object: its file's path is the JSON
        return None
    try:
        TypeAdapter(hint).json_schema()
    except Exception:  # pydantic has no JSON schema for it: an object only Python can pass
        return None
    return hint


def _json_value(value: Any) -> bool:
    return value is not None and isinstance(value, str | int | float | bool)


def _title(method: Method) -> str:
    return "".join(part.capitalize() for part in re.split(r"[^a-z0-9]+", method.name))


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
        takes = ", ".join([*accepted, "max_calls"])
        raise ConfigError(f"unknown configurable {', '.join(unknown)}; this graph accepts: {takes}")
    operator = Operator.from_env()  # a shared server's operator chooses models and files (runtime.serving)
    if operator.shared:
        given = operator.options(method, given)
    for key, value in given.items():
        check_value(method.name, key, value, method.hints[key])
    if method.model_field == "model" and "model" in accepted and not given.get("model"):
        default = next(f.default for f in method.fields() if f.name == "model")
        given["model"] = default or default_spec()
    return given


Node = tuple[Callable[[Any], dict[str, Any]], Callable[[Any], Awaitable[dict[str, Any]]]]


def _running(method: Method, prepared: Prepared, ctx: RunContext) -> Node:
    """A method without a graph of its own, run on the item: its result, or why not (told to the client)."""

    def inputs(value: Any) -> Any:
        given = {name: getattr(value, name) for name in method.input_names}
        return method.inputs(**{name: v for name, v in given.items() if v is not None})

    def run(value: Any) -> dict[str, Any]:
        try:
            found = finish(method.run(prepared, inputs(value), ctx), ctx.stats)
        except HalluscopeError as exc:
            raise ClientError(f"{type(exc).__name__}: {exc}") from exc
        return {"result": found.model_dump(mode="json")}

    async def arun(value: Any) -> dict[str, Any]:
        try:
            found = await afinish(method.run(prepared, inputs(value), ctx), ctx.stats)
        except HalluscopeError as exc:
            raise ClientError(f"{type(exc).__name__}: {exc}") from exc
        return {"result": found.model_dump(mode="json")}

    return run, arun


def _refusing(exc: HalluscopeError) -> Node:
    """The node of a graph that cannot be built from the configurable given: a run tells the client why."""
    message = f"{type(exc).__name__}: {exc}"

    def run(value: Any) -> dict[str, Any]:
        raise ClientError(message) from exc

    async def arun(value: Any) -> dict[str, Any]:
        raise ClientError(message) from exc

    return run, arun


def _one_node(method: Method, node: Node) -> CompiledStateGraph:
    """A graph of one node over the method's item and result: a method without a graph of its own, or
    one whose configurable cannot build it (its schemas still served)."""
    fields = {name: (method.hints[name] | None, None) for name in method.input_names}
    title = _title(method)
    item = create_model(f"{title}Input", **fields)  # type: ignore[call-overload]
    state = create_model(f"{title}State", __base__=item, result=(dict[str, Any] | None, None))
    result = create_model(f"{title}Output", result=(dict[str, Any] | None, None))
    run, arun = node
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
