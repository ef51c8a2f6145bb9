"""The posterior hallucination rate of an in-context learning query (Jesson et al., NeurIPS 2024) on a
language model, as a LangGraph graph:

    start -> imagine the M completions of D_n, fanned out (N - n pairs each: the context continued
             at temperature 1, top_p 0.9, up to 200 tokens, parsed back into (x, y); a malformed
             continuation is drawn again, at most 3 times, then dropped and counted)
          -> estimate: Algorithm 2 per completion, their mean (Algorithm 1), the total and aleatoric
             entropies and their difference (Appendix D); with a held-out D_eval the model
             hallucination rate, with the true label the empirical error rate (Section 3.2).

Prompts follow Appendix E.2: "Input: {x}\\nLabel: {y}\\n\\n" per example, "Input: {x}\\nLabel:" for
the query. Responses are single tokens (every label of the paper's tasks is told apart by its first
token). With ``responses="distribution"`` one forward pass gives the whole next-token distribution:
every log p(y | x, D) at once, K draws for free, and with ``exact`` Algorithm 2's quantile and
indicator computed over the distribution itself instead of K draws. ``responses="sampled"`` draws K
tokens and scores them by teacher forcing, as any completion server can.

Imagined pairs go through the gateway's cache by completion index, so the queries that share a
context D_n share its M completions (they depend on D_n only); forward passes are recomputed.
"""

from __future__ import annotations

import operator
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Annotated, Any, Literal, TypeVar

import numpy as np
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Send
from typing_extensions import TypedDict  # a state pydantic reads (Studio's schemas) on Python 3.11

from halluscope.backends import readings
from halluscope.backends.gateway import CallStats, Gateway
from halluscope.backends.local import local_spec
from halluscope.backends.logprobs import LogProbModel
from halluscope.backends.steps import Steps
from halluscope.errors import ConfigError
from halluscope.results import DetectionResult, Unit
from halluscope.runtime import options
from halluscope.runtime.contract import Flag, Method, Need, Prepared, RunContext, Streamed, arg
from halluscope.runtime.nodes import plan_calls
from halluscope.scoring.phr import (
    Pair,
    error_rate,
    model_hallucination_rate,
    mutual_information,
    phr_estimate,
    total_entropy,
)

NAME = "phr"
SUMMARY = "posterior hallucination rate of an in-context learning query (Jesson et al., NeurIPS 2024)"
EXAMPLE = "phr.example"
QUERY = "phr.query"
IMAGINE_ATTEMPTS = 3
PAIR_END = "\n\n"  # an imagined pair is complete at the blank line that ends "Label: y"
Responses = Literal["distribution", "sampled"]
T = TypeVar("T")


class TextICL:
    """A LogProbModel doing in-context learning, as the estimators' conditional generative model.

    Responses are token ids (``distribution``) or one-token texts (``sampled``); ``label_response``
    turns a label into the response it is compared with."""

    def __init__(
        self,
        model: LogProbModel,
        gateway: Gateway,
        responses: Responses = "distribution",
        seed: int = 0,
        stats: CallStats | None = None,
    ) -> None:
        if responses not in ("distribution", "sampled"):
            raise ConfigError(f"responses must be 'distribution' or 'sampled', got {responses!r}")
        self.model, self.gateway, self.responses, self.seed, self.stats = model, gateway, responses, seed, stats
        self.example = gateway.registry.get(EXAMPLE)
        self.query = gateway.registry.get(QUERY)
        self._distributions: dict[str, np.ndarray] = {}
        self._draws: Counter[str] = Counter()  # sampled responses drawn per prompt so far: their sample indexes
        self._lock = threading.Lock()

    # -- prompts

    def render(self, context: Sequence[Pair]) -> str:
        return "".join(self.example.render_text(x=x, y=y) for x, y in context)

    def prompt(self, x: str, context: Sequence[Pair]) -> str:
        return self.render(context) + self.query.render_text(x=x)

    def label_response(self, label: str) -> int | str:
        """The first token of " label" after "Label:", as an id or (sampled responses) its text."""
        token = self.model.first_token(self.query.render_text(x="x"), " " + label)
        return token if self.responses == "distribution" else self.model.token_text(token)

    # -- the CGM protocol

    def imagine(self, context: Sequence[Pair], count: int, rng: np.random.Generator, index: int) -> list[Pair]:
        return self.imagine_counted(context, count, index)[0]

    def imagine_counted(self, context: Sequence[Pair], count: int, index: int) -> tuple[list[Pair], Counter[str]]:
        """Completion ``index`` of the context, with the malformed continuations it met."""
        pairs: list[Pair] = []
        events: Counter[str] = Counter()
        for _ in range(count):
            text = self.render([*context, *pairs])
            for attempt in range(IMAGINE_ATTEMPTS):
                reply = readings.complete(
                    self.gateway,
                    self.model,
                    self.example,
                    text,
                    sample_index=index * IMAGINE_ATTEMPTS + attempt,
                    stats=self.stats,
                    seed=self.seed,
                    stop=[PAIR_END],
                )
                if reply.ok:
                    pairs.append((reply.parsed["x"], reply.parsed["y"]))
                    break
                events["imagined_unparsed"] += 1
            else:
                events["imagined_dropped"] += 1
        return pairs, events

    def distribution(self, x: str, context: Sequence[Pair]) -> np.ndarray:
        prompt = self.prompt(x, context)
        with self._lock:
            if prompt not in self._distributions:
                self._distributions[prompt] = self._forward(prompt, lambda: self.model.next_token_logprobs(prompt))
            return self._distributions[prompt]

    def sample_responses(self, x: str, context: Sequence[Pair], k: int, rng: np.random.Generator) -> list[Any]:
        if self.responses == "distribution":
            p = np.exp(self.distribution(x, context))
            return [int(t) for t in rng.choice(len(p), size=k, p=p / p.sum())]
        prompt = self.prompt(x, context)
        with self._lock:
            first = self._draws[prompt]
            self._draws[prompt] += k
        return [
            readings.complete(
                self.gateway, self.model, self.query, prompt, sample_index=first + i, stats=self.stats, seed=self.seed
            ).text
            for i in range(k)
        ]

    def log_prob(self, responses: Sequence[Any], x: str, context: Sequence[Pair]) -> np.ndarray:
        if self.responses == "distribution":
            return self.distribution(x, context)[np.asarray(responses, dtype=np.int64)]
        prompt = self.prompt(x, context)
        return np.asarray(self._forward(prompt, lambda: self.model.score_many(prompt, list(responses))), np.float64)

    def _forward(self, prompt: str, compute: Callable[[], T]) -> T:
        """A forward pass over the prompt, through the gateway: limited and counted (never cached)."""
        return readings.forward(self.gateway, self.model, prompt, compute, self.stats)

    def forget(self) -> None:
        """Drop the distributions kept for one query (each is a vocabulary-sized vector)."""
        with self._lock:
            self._distributions.clear()


class Completion(TypedDict):
    index: int
    pairs: list[Pair]
    events: dict[str, int]


class ImagineInput(TypedDict):
    index: int
    context: list[Pair]


class PHRInput(TypedDict, total=False):
    """What a host passes in: the in-context problem and query (and, for measurement, the truth)."""

    context: list[Pair]
    query: str
    truth: str | None
    evaluation: list[Pair]
    seed: int


class PHROutput(TypedDict, total=False):
    """What a host gets back (no input key, no reducer: a checkpointed host's next turn starts clean)."""

    estimate: dict[str, Any]


class PHRState(PHRInput, PHROutput, total=False):
    completions: Annotated[list[Completion], operator.add]


@dataclass(frozen=True)
class Setup:
    """What the nodes share: the in-context model and the estimators' settings (M completions of N - n
    imagined pairs, K responses, the epsilons, exact or sampled quantiles)."""

    cgm: TextICL
    m: int
    k: int
    n_imagined: int
    epsilons: tuple[float, ...]
    exact: bool


def start(setup: Setup, state: PHRState, config: RunnableConfig) -> dict[str, Any]:
    """The problem checked, the imagined completions' calls announced, the model's memo cleared."""
    if not state.get("query", "").strip():
        raise ConfigError("PHR needs a query x")
    if not state.get("context"):
        raise ConfigError("PHR needs an in-context dataset D_n of at least one (x, y) pair")
    for pair in state["context"]:
        if len(pair) != 2 or not str(pair[0]).strip() or not str(pair[1]).strip():
            raise ConfigError(f"each in-context example is a non-empty (x, y) pair, got {pair!r}")
    plan_calls(config, setup.m * setup.n_imagined)  # forward passes follow from them
    setup.cgm.forget()
    return {}


def fan_out(setup: Setup, state: PHRState) -> list[Send]:
    return [Send("imagine", ImagineInput(index=i, context=state["context"])) for i in range(setup.m)]


def imagine(setup: Setup, state: ImagineInput) -> dict[str, Any]:
    """Algorithm 1's completion i: N - n imagined pairs continuing D_n."""
    pairs, events = setup.cgm.imagine_counted(state["context"], setup.n_imagined, state["index"])
    return {"completions": [Completion(index=state["index"], pairs=pairs, events=dict(events))]}


def estimate(setup: Setup, state: PHRState) -> dict[str, Any]:
    """The PHR at each epsilon (and the MHR with an evaluation set), the entropies, and with the truth
    the error rate."""
    cgm, context, x = setup.cgm, state["context"], state["query"]
    rng = np.random.default_rng(state.get("seed", 0))
    completions = sorted(state["completions"], key=lambda c: c["index"])
    imagined = [c["pairs"] for c in completions]
    by_epsilon: dict[str, dict[str, Any]] = {}
    for eps in setup.epsilons:
        run = phr_estimate(cgm, x, context, setup.m, setup.n_imagined, setup.k, eps, rng, setup.exact, imagined)
        row: dict[str, Any] = {"phr": run.phr, "thr": run.thr, "standard_error": run.standard_error}
        if state.get("evaluation"):
            row["mhr"] = model_hallucination_rate(cgm, x, context, state["evaluation"], setup.k, eps, rng, setup.exact)
        by_epsilon[str(eps)] = row
    total = total_entropy(cgm, x, context, setup.k, rng, setup.exact)
    out: dict[str, Any] = {
        **by_epsilon[str(setup.epsilons[0])],
        "total_entropy": total,
        "aleatoric_entropy": run.aleatoric,
        "mutual_information": mutual_information(total, run.aleatoric),
        "imagined": run.imagined,
        "events": dict(sum((Counter(c["events"]) for c in completions), Counter())),
    }
    if len(setup.epsilons) > 1:
        out["by_epsilon"] = by_epsilon
    if state.get("truth"):
        truth = cgm.label_response(str(state["truth"]))
        out["error_rate"] = error_rate(cgm, x, context, truth, setup.k, rng, setup.exact)
        if cgm.responses == "distribution":
            out["correct"] = int(np.argmax(cgm.distribution(x, context))) == truth
    if cgm.responses == "distribution":
        log_probs = cgm.distribution(x, context)
        top = np.argsort(log_probs)[::-1][:5]
        out["top_responses"] = [
            {"token": cgm.model.token_text(int(t)), "p": round(float(np.exp(log_probs[t])), 4)} for t in top
        ]
    cgm.forget()
    return {"estimate": out}


def build(
    cgm: TextICL,
    m: int = 10,
    k: int = 50,
    n_imagined: int = 5,
    epsilon: float | Sequence[float] = 0.05,
    exact: bool = True,
) -> CompiledStateGraph:
    """The graph for one model; defaults are the paper's language runs (M = 10, K = 50, N - n = 5).
    Several epsilons share one run's completions and distributions (the first is the headline PHR)."""
    epsilons = (epsilon,) if isinstance(epsilon, int | float) else tuple(epsilon)
    if m < 1 or k < 1 or n_imagined < 0:
        raise ConfigError(f"PHR needs M >= 1, K >= 1 and N - n >= 0; got M={m}, K={k}, N - n={n_imagined}")
    if not epsilons or not all(0 < e < 1 for e in epsilons):
        raise ConfigError(f"epsilon must lie in (0, 1), got {list(epsilons)}")
    if exact and cgm.responses != "distribution":
        raise ConfigError("exact PHR needs the whole next-token distribution (responses='distribution')")
    setup = Setup(cgm, m, k, n_imagined, epsilons, exact)
    graph = StateGraph(PHRState, input_schema=PHRInput, output_schema=PHROutput)
    graph.add_node("start", partial(start, setup))
    graph.add_node("imagine", partial(imagine, setup), input_schema=ImagineInput)
    graph.add_node("estimate", partial(estimate, setup))
    graph.add_edge(START, "start")
    graph.add_conditional_edges("start", partial(fan_out, setup), ["imagine"])
    graph.add_edge("imagine", "estimate")
    graph.add_edge("estimate", END)
    return graph.compile(name=NAME)


DEFAULT_MODEL = local_spec("qwen2.5-coder-0.5b")  # fast and gives log-probs: the model of the PHR runs


@dataclass(frozen=True, kw_only=True)
class Inputs:
    """An in-context learning problem: the examples D_n and the query, and what to check it against."""

    context: Sequence[Pair] | None = options.pairs_file("--context-file", "the in-context examples")
    query: str | None = arg(help="the input whose label the model is asked for", flags=(Flag(("--query",)),))
    truth: str | None = arg(help="the query's true label (adds the error rate)", flags=(Flag(("--truth",)),))
    evaluation: Sequence[Pair] = arg((), help="D_eval, labelled examples for the model hallucination rate (MHR)")


@dataclass(frozen=True, kw_only=True)
class Options:
    model: str | LogProbModel = options.model(
        "scores the queries: a local, transformers or openai-compatible model with log-probs", DEFAULT_MODEL
    )
    n: int = options.samples(10, "M, the completions of the context imagined")
    k: int = arg(50, help="K, the responses sampled per imagined context")
    n_imagined: int = arg(5, help="N - n, the examples each completion imagines")
    epsilon: float | Sequence[float] = arg(0.05, help="the likely set's epsilon (several: one run, each estimate)")
    exact: bool = arg(True, help="Definition 4's quantile from the whole next-token distribution")
    responses: Responses = arg("distribution", help="responses: the whole distribution, or sampled")
    seed: int = arg(0, help="the seed of the imagined completions and sampled responses")


def prepare(opts: Options, ctx: RunContext) -> Prepared:
    """The in-context model from its spec (its forward passes count on the run's stats), and the graph."""
    cgm = TextICL(ctx.gateway.logprob_model(opts.model), ctx.gateway, opts.responses, opts.seed, ctx.stats)
    return Prepared(build(cgm, opts.n, opts.k, opts.n_imagined, opts.epsilon, opts.exact), opts)


def run(prepared: Prepared, inputs: Inputs, ctx: RunContext) -> Steps[DetectionResult]:
    """The PHR of one query given its in-context examples (higher = more likely hallucinated); ``n``
    is the paper's M, the completions of the context imagined. The evidence holds each completion's
    THR, the entropies, the imagined datasets, the most likely responses, and MHR / error rate when
    D_eval / the true label are given. The M completions run concurrently under the gateway's
    per-model limit; a local model takes them one at a time, each reusing the KV cache of D_n."""
    opts: Options = prepared.options
    state: PHRState = {
        "context": [tuple(p) for p in inputs.context or []],  # type: ignore[misc]
        "query": inputs.query or "",
        "truth": inputs.truth,
        "evaluation": [tuple(p) for p in inputs.evaluation],  # type: ignore[misc]
        "seed": opts.seed,
    }
    out = dict((yield Streamed(ctx, prepared.graph, state))["estimate"])
    events = out.pop("events")
    unit = Unit(text=inputs.query or "", score=out["phr"], evidence=out)
    meta = ctx.meta(
        NAME,
        events=events,
        M=opts.n,
        K=opts.k,
        imagined=opts.n_imagined,
        epsilon=opts.epsilon,
        exact=opts.exact,
        responses=opts.responses,
    )
    return DetectionResult(method=NAME, units=[unit], meta=meta)


def describe(result: DetectionResult) -> str:
    """The PHR with the entropies it rests on, then the generic report."""
    ev = result.units[0].evidence
    extra = f"; error rate {ev['error_rate']:.3f}" if ev.get("error_rate") is not None else ""
    head = (
        f"PHR {ev['phr']:.3f} (higher = more likely hallucinated); total entropy {ev['total_entropy']:.3f}, "
        f"aleatoric {ev['aleatoric_entropy']:.3f}, epistemic (MI) {ev['mutual_information']:.3f} nats{extra}"
    )
    return f"{head}\n{result.report()}"


METHOD = Method.from_module(
    __name__,
    scores=(0.0, 1.0),
    question_field=None,
    answer_field=None,
    positional=("context", "query"),
    needs=(Need("context"), Need("query")),
    describe=describe,
)
detect, adetect = METHOD.detect, METHOD.adetect
