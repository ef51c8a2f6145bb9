"""Stages that several graphs compose (one implementation each)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.graph.state import CompiledStateGraph

from halluscope.backends.entailment import Entailment, Mode, equivalent
from halluscope.backends.gateway import CallStats, ChatReply, Gateway, ModelLike
from halluscope.errors import ConfigError
from halluscope.scoring import ClusterRule, greedy_cluster, length_normalised

REGENERATE = "selfcheck.regenerate"
RESAMPLE = "selfcheck.resample"


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
    stats: CallStats | None = None,
    question: str | None = None,
) -> list[str]:
    """N comparison passages (sample indexes 0..N-1), see ``regeneration_prompt``."""
    prompt, variables = regeneration_prompt(concept, n_sentences, question)
    return [r.text for r in gateway.sample(model, prompt, variables, n, stats=stats)]


def sample_answer(
    gateway: Gateway,
    model: ModelLike,
    prompt: str,
    variables: Mapping[str, Any],
    sample_index: int,
    max_tokens: int,
    logprobs: bool = False,
    stats: CallStats | None = None,
) -> tuple[str, float | None]:
    """One sampled answer for semantic entropy (seed 0 + sample index, so each sample is its own cache
    entry) and, with ``logprobs``, its length-normalised log-likelihood (None without token log-probs)."""
    params = answer_params(sample_index, max_tokens, logprobs)
    return read_answer(gateway.call(model, prompt, variables, stats=stats, **params), logprobs)


def answer_params(sample_index: int, max_tokens: int, logprobs: bool) -> dict[str, Any]:
    """The gateway parameters of one sampled answer (sync or async)."""
    return {
        "sample_index": sample_index,
        "max_tokens": max_tokens,
        "seed": 0,
        **({"logprobs": True} if logprobs else {}),
    }


def read_answer(reply: ChatReply, logprobs: bool) -> tuple[str, float | None]:
    """A sampled answer's text and, with ``logprobs``, its length-normalised log-likelihood."""
    tokens = [float(t["logprob"]) for t in reply.logprobs or []]
    return reply.text.strip(), (length_normalised(tokens) if logprobs and tokens else None)


def stats_of(config: RunnableConfig | None) -> CallStats | None:
    """The run's CallStats, passed as ``{"configurable": {"stats": ...}}``."""
    return ((config or {}).get("configurable") or {}).get("stats")


def plan_calls(config: RunnableConfig | None, calls: int) -> None:
    """Announce the replies a graph now knows it will take (its own, not its subgraphs'): the total of
    the run's progress bar."""
    stats = stats_of(config)
    if stats is not None and calls > 0:
        stats.plan(calls)


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


def cluster_answers(
    answers: Sequence[str],
    entailment: Entailment,
    question: str | None = None,
    mode: Mode = "strict",
    on_pair: Callable[[], None] | None = None,
    rule: ClusterRule = "paper",
    stats: CallStats | None = None,
) -> tuple[list[list[int]], int]:
    """Greedy clustering by bidirectional entailment (semantic entropy), conditioned on the question.

    Identical answers join without a judge call (a small judge may call such a pair "neutral"); a
    pair of texts already judged in this run is never judged again; the two directions of one
    comparison run concurrently. ``rule``: ``greedy_cluster``'s (the paper's first match, or the
    official code's last). Returns the clusters and the number of pairs sent to the judge."""
    verdicts: dict[tuple[str, str], bool] = {}

    def same(a: str, b: str) -> bool:
        if a.strip() == b.strip():
            return True
        if (a, b) not in verdicts:
            if stats is not None:
                stats.plan(entailment.replies_for(2))
            forward, backward = entailment.judge_many([(a, b), (b, a)], question, stats)
            verdicts[(a, b)] = verdicts[(b, a)] = equivalent(forward.label, backward.label, mode)
            if on_pair is not None:
                on_pair()
        return verdicts[(a, b)]

    clusters = greedy_cluster(list(answers), same, rule)
    return clusters, len(verdicts) // 2
