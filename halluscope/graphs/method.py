"""The method contract: what every graph module exports (``METHOD``), and the run setup every
``detect()`` shares.

``halluscope.detector`` reads the contracts (name, inputs, where the question, answer and model go,
what an item must give); the command line builds each ``detect`` subcommand's flags from the
contract's options. One contract per method means a method added here reaches the Python API, the
CLI, the tool, the guard and the evaluators at once.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from langgraph.graph.state import CompiledStateGraph

from halluscope.backends.gateway import CallStats, Gateway, default_gateway
from halluscope.graphs.stages import MAX_CALLS, CallBudget, arun_streamed, run_streamed
from halluscope.results import DetectionResult, RunMeta

Reader = Callable[[str, str], Any]  # (the command-line value, its flag) -> the keyword's value


@dataclass(frozen=True)
class Option:
    """One keyword of a method's ``detect`` as the command line offers it: ``flags`` name it there
    (``--samples-file`` reads a file into ``samples``), ``read`` turns the flag's text into the
    value, ``append`` collects a repeated flag into a list (free text), ``listed`` takes names
    comma-separated or repeated; a flag with a ``const`` takes no value and sets the keyword to it
    (``--strict`` sets ``mode='strict'``)."""

    param: str
    flags: tuple[str, ...]
    help: str
    read: Reader | None = None
    type: type = str
    choices: tuple[str, ...] | None = None
    append: bool = False
    listed: bool = False
    const: Any = None
    metavar: str | None = None


# What an item must give: one or more (keyword, phrase) alternatives; the phrase names the keyword
# through '{}' ('{} to sample answers'), so one need reads right in Python and on the command line.
Need = tuple[tuple[str, str], ...]


def python_label(param: str) -> str:
    return param


@dataclass(frozen=True)
class Method:
    """A method as the rest of halluscope sees it.

    ``inputs``: the fields an item, a tool call or an evaluator fills; ``question_field``: where the
    user's question (the prompt an answer answered) goes; ``answer_field``: where the answer to check
    goes ('answers', a list, for FEWL); ``model_field``: where ``detector(model=...)`` goes;
    ``needs``: what a run cannot start without, and ``check`` what else it refuses, both checked
    before any model is loaded; ``describe``: the lines a person reads for one result (default:
    every unit and the run's cost); ``adetect``: the same run on the event loop, its model calls
    awaiting the provider's async client (None: ``Detector.adetect`` runs ``detect`` on a thread, as
    for PHR, whose work is a local model's forward passes); ``presets``: options by name, so
    'selfcheck-prompt:prob' names SelfCheck-Prompt with scoring='prob' where benchmarks, calibrations
    and ensembles name methods; ``combines``: it runs other methods (an ensemble is no member of one)."""

    name: str
    detect: Callable[..., DetectionResult]
    summary: str
    inputs: tuple[str, ...]
    question_field: str | None
    answer_field: str | None
    options: tuple[Option, ...] = ()
    needs: tuple[Need, ...] = ()
    model_field: str = "model"
    check: Callable[[Mapping[str, Any], Callable[[str], str]], str | None] | None = None
    describe: Callable[[DetectionResult], str] = field(default=lambda result: result.report())
    adetect: Callable[..., Awaitable[DetectionResult]] | None = None
    presets: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    combines: bool = False

    def problem(self, kwargs: Mapping[str, Any], label: Callable[[str], str] = python_label) -> str | None:
        """What keeps ``kwargs`` from running, as a sentence naming the keywords through ``label``
        (the Python name, or the command-line flag): the first unmet need, then the method's own
        ``check``; None when it can run."""
        for need in self.needs:
            if not any(_given(kwargs.get(param)) for param, _ in need):
                alternatives = ", or ".join(phrase.format(label(param)) for param, phrase in need)
                return f"{self.name} needs {alternatives}"
        return self.check(kwargs, label) if self.check is not None else None


def _given(value: Any) -> bool:
    if value is None:
        return False
    if isinstance(value, str):
        return bool(value.strip())
    if isinstance(value, Sequence):
        return len(value) > 0
    return True


@dataclass
class RunContext:
    """The setup every ``detect`` repeated: the gateway (the process's by default), the run's call
    counters, its concurrency, the progress hook and the calls it may plan; ``stream`` runs a built
    graph with them."""

    gateway: Gateway
    stats: CallStats
    max_concurrency: int | None = None
    on_step: Callable[[str], None] | None = None
    budget: CallBudget = field(default_factory=CallBudget)

    def stream(self, graph: CompiledStateGraph, state: Mapping[str, Any]) -> dict[str, Any]:
        return run_streamed(graph, state, self.stats, self.max_concurrency, self.on_step, self.budget)

    async def astream(self, graph: CompiledStateGraph, state: Mapping[str, Any]) -> dict[str, Any]:
        return await arun_streamed(graph, state, self.stats, self.max_concurrency, self.on_step, self.budget)

    def plan(self, calls: int) -> None:
        """Calls a method that runs no graph now knows it will make (``stages.plan_calls``'s rule)."""
        self.budget.plan(calls)
        self.stats.plan(calls)

    def meta(self, method: str, events: Mapping[str, int] | None = None, **params: Any) -> RunMeta:
        return self.stats.meta(method, dict(events or {}), **params)


def bound_arguments(detect: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """An async twin's arguments as its ``detect`` binds them, defaults filled in: one signature for both."""
    bound = inspect.signature(detect).bind(*args, **kwargs)
    bound.apply_defaults()
    return dict(bound.arguments)


def start(
    gateway: Gateway | None = None,
    stats: CallStats | None = None,
    max_concurrency: int | None = None,
    on_step: Callable[[str], None] | None = None,
) -> RunContext:
    """A run on ``gateway`` (default: the process's) counting into ``stats`` (default: its own), planning
    at most the calls ``call_limit`` allows (MAX_CALLS unless a detector says otherwise)."""
    return RunContext(gateway or default_gateway(), stats or CallStats(), max_concurrency, on_step, _budget())


_max_calls: ContextVar[int | None] = ContextVar("halluscope_max_calls", default=MAX_CALLS)


@contextmanager
def call_limit(max_calls: int | None) -> Iterator[None]:
    """The runs started inside may plan at most ``max_calls`` model calls each (None: no limit): how a
    detector's ``max_calls`` / ``yes`` reach every method's run without each signature repeating them."""
    CallBudget(max_calls)  # checked here, where the caller set it
    token = _max_calls.set(max_calls)
    try:
        yield
    finally:
        _max_calls.reset(token)


def _budget() -> CallBudget:
    return CallBudget(_max_calls.get())
