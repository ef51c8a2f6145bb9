"""Semantic entropy for a short answer (Farquhar et al., Nature 2024) as a LangGraph graph:

    [sample N answers (the paper's M) at temperature 1 with the paper's QA prompt, fanned out, unless given]
      -> cluster them by bidirectional entailment (greedy, conditioned on the question)
      -> discrete semantic entropy of the cluster sizes; where the answers carry token log-probs,
         likelihood semantic entropy (``predictive_entropy_rao``) and the naive predictive entropy.

Calls: N answers (none when given) + two judge calls per pair of distinct answers compared.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Annotated, Any

from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Send
from typing_extensions import TypedDict  # a state pydantic reads (Studio's schemas) on Python 3.11

from halluscope.backends.entailment import Entailment, Mode, entailment_judge
from halluscope.backends.fanout import Calls
from halluscope.backends.gateway import Gateway, default_gateway
from halluscope.backends.models import ModelLike
from halluscope.backends.steps import Steps
from halluscope.errors import ConfigError
from halluscope.methods.sampling import answer_ask, clustering, read_answer
from halluscope.prompts.short_answer import ANSWER, ANSWER_MAX_TOKENS, ENTAILMENT
from halluscope.results import DetectionResult, Unit
from halluscope.runtime import contract, options
from halluscope.runtime.contract import Method, Need, RunContext, Streamed, arg
from halluscope.runtime.nodes import node, plan_calls, planner
from halluscope.scoring import (
    ClusterRule,
    cluster_logprobs,
    discrete_semantic_entropy,
    naive_predictive_entropy,
    predictive_entropy_rao,
)
from halluscope.scoring.semantic_entropy import ESTIMATES
from halluscope.text import checked_text

NAME = "semantic-entropy"
SUMMARY = "semantic entropy of sampled answers to a short question (Farquhar et al., Nature 2024)"


class Sampled(TypedDict):
    j: int
    text: str
    log_likelihood: float | None  # length-normalised; None without log-probs


class SampleInput(TypedDict):
    j: int
    question: str


class SEInput(TypedDict, total=False):
    """What a host passes in: the question, and the answers if it has them."""

    question: str
    given: list[str]


class SEOutput(TypedDict, total=False):
    """What a host gets back (no input key, no reducer: a checkpointed host's next turn starts clean)."""

    answers: list[str]
    log_likelihoods: list[float | None]
    clusters: list[list[int]]
    pairs_judged: int
    scores: dict[str, float | None]


class SEState(SEInput, SEOutput, total=False):
    sampled: Annotated[list[Sampled], operator.add]


def entropies(
    clusters: Sequence[Sequence[int]], log_likelihoods: Sequence[float | None], base: float = math.e
) -> dict[str, float | None]:
    """Discrete SE always; likelihood SE and naive entropy only when every answer has a log-likelihood
    and some answer is possible (all -inf leaves them undefined, None)."""
    out: dict[str, float | None] = dict.fromkeys(ESTIMATES)
    out["semantic_entropy"] = discrete_semantic_entropy([len(c) for c in clusters], base=base)
    out["n_clusters"] = float(len(clusters))
    known = [ll for ll in log_likelihoods if ll is not None]
    if known and len(known) == len(log_likelihoods) and max(known) > -math.inf:  # all -inf: undefined
        lls = [float(ll) for ll in known]
        ids = [0] * len(lls)
        for cid, members in enumerate(clusters):
            for i in members:
                ids[i] = cid
        out["likelihood_semantic_entropy"] = predictive_entropy_rao(cluster_logprobs(ids, lls))
        out["naive_entropy"] = naive_predictive_entropy(lls)
    return out


@dataclass(frozen=True)
class _Setup:
    """What every node of one graph reads: the answering model (None: answers are always given), the
    judge, how many answers to draw and how to cluster and score them."""

    model: ModelLike | None
    judge: Entailment
    gateway: Gateway
    n: int
    mode: Mode
    cluster_rule: ClusterRule
    base: float
    logprobs: bool


def _start(setup: _Setup, state: SEState, config: RunnableConfig) -> dict[str, Any]:
    if not (state.get("question") or "").strip():
        raise ConfigError("semantic entropy needs the question that the answers answer")
    if not state.get("given") and setup.model is None:
        raise ConfigError("semantic entropy needs a model to sample answers, or the answers")
    plan_calls(config, 0 if state.get("given") else setup.n)  # the judge's calls are announced as it clusters
    return {}


def _route(setup: _Setup, state: SEState) -> list[Send] | list[str]:
    if state.get("given"):
        return ["cluster"]
    return [Send("sample", SampleInput(j=j, question=state["question"])) for j in range(setup.n)]


def _sample(setup: _Setup, state: SampleInput, config: RunnableConfig) -> Steps[dict[str, Any]]:
    assert setup.model is not None
    variables = {"question": state["question"]}
    ask = answer_ask(setup.model, ANSWER, variables, state["j"], ANSWER_MAX_TOKENS, setup.logprobs)
    text, ll = read_answer((yield Calls(setup.gateway, ask)), setup.logprobs)
    return {"sampled": [Sampled(j=state["j"], text=text, log_likelihood=ll)]}


def _cluster(setup: _Setup, state: SEState, config: RunnableConfig) -> Steps[dict[str, Any]]:
    if state.get("given"):
        answers = list(state["given"])
        lls: list[float | None] = [None] * len(answers)
    else:
        ordered = sorted(state["sampled"], key=lambda s: s["j"])
        answers, lls = [s["text"] for s in ordered], [s["log_likelihood"] for s in ordered]
    clusters, pairs = yield from clustering(
        answers, setup.judge, state["question"], setup.mode, rule=setup.cluster_rule, plan=planner(config)
    )
    return {
        "answers": answers,
        "log_likelihoods": lls,
        "clusters": clusters,
        "pairs_judged": pairs,
        "scores": entropies(clusters, lls, setup.base),
    }


def build(
    model: ModelLike | None,
    judge: Entailment,
    gateway: Gateway | None = None,
    n: int = 10,
    mode: Mode = "strict",
    cluster_rule: ClusterRule = "paper",
    base: float = math.e,
    logprobs: bool | None = None,
) -> CompiledStateGraph:
    """The graph for one answering model (None: answers are always given) and one judge.

    ``logprobs``: ask for token log-probs with each sampled answer (likelihood SE); None asks where
    ``Gateway.gives_logprobs`` says the model has them."""
    if n < 1:
        raise ConfigError(f"semantic entropy needs at least one answer, got n={n}")
    gw = gateway or default_gateway()
    if logprobs is None:
        logprobs = model is not None and gw.gives_logprobs(model)
    setup = _Setup(model, judge, gw, n, mode, cluster_rule, base, logprobs)
    graph = StateGraph(SEState, input_schema=SEInput, output_schema=SEOutput)
    graph.add_node("start", partial(_start, setup))
    # the samples and an LLM judge's calls run on threads under invoke, on the event loop under ainvoke
    graph.add_node("sample", node("sample", partial(_sample, setup)), input_schema=SampleInput)
    graph.add_node("cluster", node("cluster", partial(_cluster, setup)))
    graph.add_edge(START, "start")
    graph.add_conditional_edges("start", partial(_route, setup), ["sample", "cluster"])
    graph.add_edge("sample", "cluster")
    graph.add_edge("cluster", END)
    return graph.compile(name=NAME)


@dataclass(frozen=True, kw_only=True)
class Inputs:
    """An item: the question, and the answers to cluster when they are not to be sampled."""

    question: str | None = options.question("the question the answers answer")
    answers: list[str] | None = options.texts_file("--answers-file", "the answers to cluster instead of sampling them")


@dataclass(frozen=True, kw_only=True)
class Options:
    model: ModelLike | None = options.model("samples the answers")
    judge: Entailment | str | None = options.judge()
    n: int = options.samples(10, "answers sampled at temperature 1")
    mode: Mode = options.mode("strict")
    cluster_rule: ClusterRule = options.cluster_rule()
    base: float = arg(math.e, help="the logarithm's base of the entropies (e: nats)", shown=False)
    logprobs: bool | None = arg(
        help="sample with token log-probs, for likelihood semantic entropy (default: where the model gives them)"
    )


@dataclass(frozen=True)
class Prepared(contract.Prepared):
    judge: Entailment | None = None


def prepare(opts: Options, ctx: RunContext) -> Prepared:
    """The entailment judge from its spec, and the graph."""
    judged = entailment_judge(opts.judge, ctx.gateway, prompt=ENTAILMENT)
    graph = build(
        opts.model,
        judged,
        ctx.gateway,
        n=opts.n,
        mode=opts.mode,
        cluster_rule=opts.cluster_rule,
        base=opts.base,
        logprobs=opts.logprobs,
    )
    return Prepared(graph, opts, judged)


def run(prepared: Prepared, inputs: Inputs, ctx: RunContext) -> Steps[DetectionResult]:
    """Semantic entropy of the answers to one question: the unit's score is the discrete SE (higher =
    more likely confabulated); the evidence holds the answers, clusters and the other estimates."""
    question = checked_text(inputs.question, "question")
    if isinstance(inputs.answers, str | bytes):
        raise ConfigError("answers must be a list of texts, got one string")
    given = [a for a in inputs.answers or [] if checked_text(a, "an answer").strip()]
    if inputs.answers is not None and not given:
        raise ConfigError("the answers given are all empty")
    state = SEInput(question=question, given=given)
    out = yield Streamed(ctx, prepared.graph, state)
    assert prepared.judge is not None
    opts: Options = prepared.options
    return _result(out, ctx, state, prepared.judge, opts.mode, opts.cluster_rule, opts.base)


def _result(
    out: dict[str, Any],
    ctx: RunContext,
    state: SEInput,
    judge: Entailment,
    mode: Mode,
    cluster_rule: ClusterRule,
    base: float,
) -> DetectionResult:
    scores = out["scores"]
    unit = Unit(
        text=state["question"],
        score=scores["semantic_entropy"],
        evidence={
            "answers": out["answers"],
            "clusters": out["clusters"],
            "log_likelihoods": out["log_likelihoods"],
            **scores,
        },
    )
    meta = ctx.meta(
        NAME,
        n=len(out["answers"]),
        answers_given=bool(state["given"]),
        judge=judge.name,
        mode=mode,
        cluster_rule=cluster_rule,
        base=base,
        pairs_judged=out["pairs_judged"],
    )
    return DetectionResult(method=NAME, units=[unit], meta=meta)


def describe(result: DetectionResult) -> str:
    """The answers by cluster and the entropies."""
    unit = result.units[0]
    ev = unit.evidence
    lines = [f"semantic entropy of {len(ev['answers'])} answers to: {unit.text}"]
    for k, cluster in enumerate(ev["clusters"], start=1):
        lines.append(f"  cluster {k} ({len(cluster)}): " + " | ".join(ev["answers"][i] for i in cluster))
    likelihood = ev["likelihood_semantic_entropy"]
    lines.append(
        f"  discrete SE {unit.score:.3f} nats over {len(ev['clusters'])} cluster(s)"
        + ("" if likelihood is None else f"; likelihood SE {likelihood:.3f}; naive entropy {ev['naive_entropy']:.3f}")
    )
    lines.append(result.meta.cost(f"{result.meta.params['pairs_judged']} pairs judged"))
    return "\n".join(lines)


METHOD = Method.from_module(
    __name__,
    answer_field=None,
    positional=("question",),
    needs=(Need("question"), Need("model", "answers", model="to sample answers")),
    describe=describe,
)
detect, adetect = METHOD.detect, METHOD.adetect
