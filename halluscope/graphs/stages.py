"""Stages that several graphs compose (one implementation each)."""

from __future__ import annotations

import asyncio
import re
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from langchain_core.runnables import RunnableConfig, RunnableLambda
from langgraph.graph.state import CompiledStateGraph

from halluscope.backends.entailment import Entailment, Judgement, Mode, ZeroShot, equivalent
from halluscope.backends.gateway import Ask, CallStats, ChatReply, Gateway, ModelLike, samples
from halluscope.backends.stats import run_guard
from halluscope.errors import ConfigError, ParseError
from halluscope.prompts.parsers import numbered_yes_no
from halluscope.scoring import ClusterRule, cluster_steps, length_normalised
from halluscope.scoring.token_probability import token_at
from halluscope.text import checked_passage
from halluscope.text import sentences as split_sentences

REGENERATE = "selfcheck.regenerate"
RESAMPLE = "selfcheck.resample"


# ---------------------------------------------------------------- nodes written once, run both ways

T = TypeVar("T")


class Step(ABC):
    """Work a graph node waits on, in both forms: ``run`` on the node's thread (``invoke``), ``arun``
    on the event loop (``ainvoke``, where a provider's async client is awaited)."""

    @abstractmethod
    def run(self, stats: CallStats | None) -> Any: ...

    @abstractmethod
    async def arun(self, stats: CallStats | None) -> Any: ...


Steps = Generator[Step, Any, T]  # yields the steps it waits on, is sent each one's result, returns T


@dataclass(frozen=True)
class Calls(Step):
    """Chat calls through the gateway, run together: their replies in order (the reply, for one Ask)."""

    gateway: Gateway
    asks: Ask | list[Ask]

    def run(self, stats: CallStats | None) -> Any:
        return self._shaped(self.gateway.call_all(self._listed(), stats))

    async def arun(self, stats: CallStats | None) -> Any:
        return self._shaped(await self.gateway.acall_all(self._listed(), stats))

    def _listed(self) -> list[Ask]:
        return self.asks if isinstance(self.asks, list) else [self.asks]

    def _shaped(self, replies: list[ChatReply]) -> ChatReply | list[ChatReply]:
        return replies if isinstance(self.asks, list) else replies[0]


@dataclass(frozen=True)
class Judged(Step):
    """An entailment judge's verdicts on (premise, hypothesis) pairs, in order."""

    judge: Entailment
    pairs: list[tuple[str, str]]
    question: str | None = None

    def run(self, stats: CallStats | None) -> list[Judgement]:
        return self.judge.judge_many(self.pairs, self.question, stats)

    async def arun(self, stats: CallStats | None) -> list[Judgement]:
        return await self.judge.ajudge_many(self.pairs, self.question, stats)


@dataclass(frozen=True)
class Scored(Step):
    """A zero-shot scorer's probabilities for (premise, hypothesis) pairs, in order."""

    scorer: ZeroShot
    pairs: list[tuple[str, str]]

    def run(self, stats: CallStats | None) -> list[float | None]:
        return self.scorer.scores(self.pairs, stats)

    async def arun(self, stats: CallStats | None) -> list[float | None]:
        return await self.scorer.ascores(self.pairs, stats)


@dataclass(frozen=True)
class Blocking(Step):
    """Local work that has no async form (a classifier's or a proxy model's forward pass): ``work(stats)``
    on the node's thread (``run``), or on a thread off the event loop (``arun``)."""

    work: Callable[[CallStats | None], Any]

    def run(self, stats: CallStats | None) -> Any:
        return self.work(stats)

    async def arun(self, stats: CallStats | None) -> Any:
        return await asyncio.to_thread(self.work, stats)


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


def finish(steps: Steps[T], stats: CallStats | None = None) -> T:
    """Run steps to their end on this thread."""
    result: Any = None
    while True:
        try:
            step = steps.send(result)
        except StopIteration as done:
            return cast(T, done.value)
        result = step.run(stats)


async def afinish(steps: Steps[T], stats: CallStats | None = None) -> T:
    """Run steps to their end on the event loop."""
    result: Any = None
    while True:
        try:
            step = steps.send(result)
        except StopIteration as done:
            return cast(T, done.value)
        result = await step.arun(stats)


def node(name: str, steps: Callable[[Any, RunnableConfig], Steps[dict[str, Any]]]) -> RunnableLambda:
    """A graph node written once as steps (``steps(state, config)`` yields what it waits on and returns
    the state update): ``invoke`` runs them on the node's thread, ``ainvoke`` awaits them on the event
    loop, so a graph's model calls use the provider's async client without a second copy of the node."""

    def run(state: Any, config: RunnableConfig) -> dict[str, Any]:
        with guarded(budget_of(config)):
            return finish(steps(state, config), stats_of(config))

    async def arun(state: Any, config: RunnableConfig) -> dict[str, Any]:
        with guarded(budget_of(config)):
            return await afinish(steps(state, config), stats_of(config))

    return RunnableLambda(run, afunc=arun, name=name)


# ---------------------------------------------------------------- shared stages

_WIKIBIO_PROMPT = re.compile(r"passage about (.+?):?\s*$")


def concept_from_prompt(prompt: str) -> str:
    """'This is a Wikipedia passage about X:' -> 'X'; any other prompt is taken as the concept."""
    m = _WIKIBIO_PROMPT.search(prompt.strip())
    return m.group(1) if m else prompt.strip()


def regeneration_prompt(concept: str, n_sentences: int, question: str | None) -> tuple[str, dict[str, Any]]:
    """The prompt and variables of the N comparison passages: the user's ``question`` asked again when
    the caller has one (a tool, a guard, an evaluator: the samples answer what the text answered), else
    the FIBE paper's E.1 prompt about the concept (a question of the WikiBio form 'This is a
    Wikipedia passage about X:' asks E.1 about X, as the papers' benchmark did)."""
    if question and question.strip() and not _WIKIBIO_PROMPT.search(question):
        return RESAMPLE, {"question": question.strip()}
    concept = concept_from_prompt(question or concept)
    if not concept:
        raise ConfigError("regenerating samples needs the concept or the question; or pass samples")
    return REGENERATE, {"n_sentences": n_sentences, "concept": concept}


def regenerate_passages(
    gateway: Gateway,
    model: ModelLike,
    concept: str,
    n_sentences: int,
    n: int,
    question: str | None = None,
) -> Steps[list[str]]:
    """N comparison passages (sample indexes 0..N-1), see ``regeneration_prompt``."""
    prompt, variables = regeneration_prompt(concept, n_sentences, question)
    replies = yield Calls(gateway, samples(model, prompt, variables, n, {}))
    return [r.text for r in replies]


def sampled_passage(
    method: str,
    item: Any,
    model: ModelLike | None,
    n: int,
    gateway: Gateway,
    plan: Callable[[int], None],
) -> Steps[tuple[str, list[str], list[str], bool]]:
    """A SelfCheck item (``options.SampledText``) checked: its text, its sentences (given, or split),
    its samples (given, or N regenerated by ``model``, planned before they are asked) and whether they
    were given."""
    text, sentences, samples = checked_passage(item.text, item.sentences, item.samples)
    found = sentences or split_sentences(text or "")
    if not found:
        raise ConfigError(f"{method} needs a non-empty text (no sentence found)")
    if samples:
        return text or "", found, samples, True
    if model is None:
        raise ConfigError(f"{method} needs samples: pass them, or a model to regenerate them")
    plan(n)
    regenerated = yield from regenerate_passages(gateway, model, item.concept or "", len(found), n, item.question)
    return text or "", found, regenerated, False


def answer_ask(
    model: ModelLike,
    prompt: str,
    variables: Mapping[str, Any],
    sample_index: int,
    max_tokens: int,
    logprobs: bool = False,
) -> Ask:
    """One sampled answer (semantic entropy, CLUE): seed 0 + sample index, so each sample is its own
    cache entry; with ``logprobs``, the tokens' log-probs too."""
    params = {"sample_index": sample_index, "max_tokens": max_tokens, "seed": 0}
    return Ask(model, prompt, variables, params | ({"logprobs": True} if logprobs else {}))


def read_answer(reply: ChatReply, logprobs: bool = False) -> tuple[str, float | None]:
    """A sampled answer's text and, with ``logprobs``, its length-normalised log-likelihood (None
    without token log-probs)."""
    tokens = [float(t["logprob"]) for t in reply.logprobs or []]
    return reply.text.strip(), (length_normalised(tokens) if logprobs and tokens else None)


def stats_of(config: RunnableConfig | None) -> CallStats | None:
    """The run's CallStats, passed as ``{"configurable": {"stats": ...}}``."""
    return ((config or {}).get("configurable") or {}).get("stats")


MAX_CALLS = 10_000  # a run that plans more model calls than this is refused unless allowed


class BudgetError(ConfigError):
    """A run that plans more model calls than it is allowed: refused before they are made."""


class RunCut(BudgetError):
    """A run whose budget was cut (its client left, its timeout passed): it makes no further call."""


class CallBudget:
    """The model calls a run may plan (None: no limit), or a batch's runs together (``scope``). A method
    announces its calls as soon as it knows them (``plan_calls``), before it makes them; the gateway
    counts each retry of a request as one more (``guarded``). The announcement that passes the limit
    raises, naming the count, what the limit covers and how to allow it. A budget ``cut`` refuses every
    call from then on (the gateway asks it before each request: ``sending``)."""

    def __init__(self, limit: int | None = MAX_CALLS, scope: str = "run", allow: str | None = None) -> None:
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
            raise ConfigError(f"max_calls takes a whole number of at least 1 (or None: no limit), got {limit!r}")
        self.limit = limit
        self.scope = scope
        self.allow = allow  # how to allow more, where the Python and command-line ways do not apply
        self.planned = 0
        self.retries = 0
        self.cut_because: str | None = None
        self._lock = threading.Lock()

    def cut(self, because: str) -> None:
        """No further call: the run's next request, forward pass or plan raises RunCut saying ``because``."""
        self.cut_because = because

    def sending(self) -> None:
        if self.cut_because is not None:
            raise RunCut(f"this {self.scope} was stopped: {self.cut_because}")

    def retrying(self) -> None:
        self.plan(1, retry=True)

    def plan(self, calls: int, retry: bool = False) -> None:
        self.sending()
        with self._lock:
            self.planned += calls
            self.retries += calls if retry else 0
            planned, retries = self.planned, self.retries
        self.check(planned, retries)

    def check(self, planned: int, retries: int) -> None:
        """Refuse a count past the limit (a subclass that counts elsewhere, a cluster's, checks here too)."""
        if self.limit is not None and planned > self.limit:
            counted = f" ({retries} of them retries of failed requests)" if retries else ""
            covers = " (max_calls covers the whole batch)" if self.scope == "batch" else ""
            allow = self.allow or (
                f"allow it with max_calls={planned} or yes=True (on the command line: --max-calls {planned} or --yes)"
            )
            raise BudgetError(
                f"this {self.scope} plans {planned:,} model calls{counted}, more than the limit of {self.limit:,}"
                f"{covers}; {allow}"
            )


@contextmanager
def guarded(budget: CallBudget | None) -> Iterator[None]:
    """While a run (or a node of its graph) runs, the gateway asks its budget before each request (a cut
    run makes no further call) and counts each retry as one more call of it: a run that plans exactly its
    limit against a failing server once sent twice as many requests. Set and reset on the run's own
    thread or task."""
    token = run_guard.set(budget)
    try:
        yield
    finally:
        run_guard.reset(token)


def budget_of(config: RunnableConfig | None) -> CallBudget | None:
    """The run's CallBudget, passed as ``{"configurable": {"budget": ...}}``."""
    return ((config or {}).get("configurable") or {}).get("budget")


def plan_calls(config: RunnableConfig | None, calls: int) -> None:
    """Announce the replies a graph now knows it will take (its own, not its subgraphs'), before it makes
    them: the run's budget refuses a run past its limit, and the total of the run's progress bar grows."""
    if calls <= 0:
        return
    budget, stats = budget_of(config), stats_of(config)
    if budget is not None:
        budget.plan(calls)
    if stats is not None:
        stats.plan(calls)


def planner(config: RunnableConfig | None) -> Callable[[int], None]:
    """``plan_calls`` bound to a run's config, for a stage that learns its calls as it goes (clustering)."""
    return lambda calls: plan_calls(config, calls)


def _run_config(stats: CallStats, max_concurrency: int | None, budget: CallBudget | None) -> RunnableConfig:
    config: RunnableConfig = {"configurable": {"stats": stats, "budget": budget}}
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
    budget: CallBudget | None = None,
) -> dict[str, Any]:
    """Run a graph to its final state, telling ``on_step`` of every node run."""
    folded = _Folded(on_step)
    config = _run_config(stats, max_concurrency, budget)
    for namespace, mode, chunk in graph.stream(state, config, stream_mode=["updates", "values"], subgraphs=True):
        folded.add(namespace, mode, chunk)
    return folded.out


async def arun_streamed(
    graph: CompiledStateGraph,
    state: Mapping[str, Any],
    stats: CallStats,
    max_concurrency: int | None = None,
    on_step: Callable[[str], None] | None = None,
    budget: CallBudget | None = None,
) -> dict[str, Any]:
    """``run_streamed`` on the event loop: a node with an async form awaits the provider's async
    client; one without runs on LangGraph's threads."""
    folded = _Folded(on_step)
    config = _run_config(stats, max_concurrency, budget)
    stream = graph.astream(state, config, stream_mode=["updates", "values"], subgraphs=True)
    async for namespace, mode, chunk in stream:
        folded.add(namespace, mode, chunk)
    return folded.out


def cluster_by(
    n_items: int, same: Callable[[int, int], Steps[bool]], rule: ClusterRule = "paper"
) -> Steps[list[list[int]]]:
    """``cluster_steps`` with each pair (i, j) decided by steps of its own, ``same(i, j)`` (a judge's,
    a scorer's): one clustering algorithm for every node that clusters, sync or async."""
    walk = cluster_steps(n_items, rule)
    verdict: bool | None = None
    while True:
        try:
            i, j = walk.send(verdict)
        except StopIteration as done:
            return cast(list[list[int]], done.value)
        verdict = yield from same(i, j)


def clustering(
    answers: Sequence[str],
    entailment: Entailment,
    question: str | None = None,
    mode: Mode = "strict",
    rule: ClusterRule = "paper",
    plan: Callable[[int], None] | None = None,
) -> Steps[tuple[list[list[int]], int]]:
    """Greedy clustering by bidirectional entailment (semantic entropy), conditioned on the question.

    Identical answers join without a judge call (a small judge may call such a pair "neutral"); a
    pair of texts already judged in this run is never judged again; the two directions of one
    comparison are one judge step. ``rule``: ``cluster_steps``'s (the paper's first match, or the
    official code's last); ``plan`` hears each pair's judge calls before they are made. Returns the clusters
    and the number of pairs sent to the judge."""
    verdicts: dict[tuple[str, str], bool] = {}

    def same(i: int, j: int) -> Steps[bool]:
        a, b = answers[i], answers[j]
        if a.strip() != b.strip() and (a, b) not in verdicts:
            if plan is not None:
                plan(entailment.replies_for(2))
            forward, backward = yield Judged(entailment, [(a, b), (b, a)], question)
            verdicts[(a, b)] = verdicts[(b, a)] = equivalent(forward.label, backward.label, mode)
        return a.strip() == b.strip() or verdicts[(a, b)]

    clusters = yield from cluster_by(len(answers), same, rule)
    return clusters, len(verdicts) // 2


ONE_CALL_TOKENS_PER_LINE = 8  # a one-call reply's room for each numbered verdict ('12. Yes' and its newline)


def numbered(texts: Sequence[str]) -> str:
    """The units a one-call prompt asks about, one numbered line each ('1. ...'), as its reply numbers them."""
    return "\n".join(f"{k + 1}. {text}" for k, text in enumerate(texts))


def one_call_max_tokens(n: int) -> int:
    """Room for a one-call reply's ``n`` numbered verdicts, and a little over."""
    return ONE_CALL_TOKENS_PER_LINE * n + 16


def one_call_verdicts(
    parsed: list[dict[str, Any]] | None, logprobs: list[dict[str, Any]] | None, n: int
) -> dict[int, tuple[str, Mapping[str, Any] | None]]:
    """Each unit's verdict ('yes'/'no') and its token's log-prob entry, by position, from a one-call
    reply's numbered lines (``numbered_yes_no``); a number missing, out of range, or given two different
    verdicts is left out (its unit is asked alone). The tokens are found in the text the reply's
    tokens join to."""
    by_number: dict[int, set[str]] = {}
    for line in parsed or []:
        by_number.setdefault(line["number"], set()).add(line["verdict"])
    clean = {
        number - 1: verdicts.pop() for number, verdicts in by_number.items() if 1 <= number <= n and len(verdicts) == 1
    }
    at: dict[int, int] = {}
    if logprobs:
        try:
            for line in numbered_yes_no("".join(entry["token"] for entry in logprobs)):
                at.setdefault(line["number"] - 1, line["at"])
        except ParseError:
            pass
    return {i: (said, token_at(logprobs, at[i]) if logprobs and i in at else None) for i, said in sorted(clean.items())}
