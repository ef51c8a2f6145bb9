"""SelfCheck-Prompt (SCGP) as a LangGraph graph, as the FIBE paper specifies it (Appendix E.1, E.2).

    split -> [regenerate N passages with E.1, unless samples are given] -> check every
    (sentence r_i, sample S^j) with E.2, fanned out -> score: H_P(i) = mean_j (1 - supported),
    supported = 1 for Yes, 0 for No, 0.5 otherwise (``scoring="discrete"``, the paper's).

``scoring="prob"`` (our option, not the paper's) asks each check for its log-probs and reads
supported = p(Yes) / (p(Yes) + p(No)) of the first answer token, so a sentence's score is continuous;
a check without them falls back to the discrete value and counts a ``no_probability`` event. The
same calls as the paper's scoring, but cached apart from them (the request differs).

Calls: N|R| for the checks, plus N when the samples are regenerated. Scoring samples the caller
already has (e.g. the WikiBio dataset's GPT-3 samples) costs nothing to regenerate.

Input (``SCGPInput``): ``text`` or ``sentences``; ``samples`` (optional); ``concept`` (to regenerate).
Output (``SCGPOutput``): ``scored_sentences``, ``used_samples``, ``verdicts`` (one per check), ``scores``. A host mounts
the graph on a state with these keys (``SCGPState`` will do); the working state stays private to a run.
Per-run accounting: pass ``{"configurable": {"stats": CallStats()}}``.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from functools import partial
from typing import Annotated, Any, Literal

from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Send
from typing_extensions import TypedDict  # a state pydantic reads (Studio's schemas) on Python 3.11

from halluscope.backends.entailment import yes_probability
from halluscope.backends.fanout import Ask, Calls
from halluscope.backends.gateway import ChatReply, Gateway, default_gateway
from halluscope.backends.models import ModelLike
from halluscope.backends.steps import Steps
from halluscope.errors import ConfigError
from halluscope.methods.sampling import regenerate_passages
from halluscope.prompts.parsers import numbered, one_call_max_tokens, one_call_verdicts
from halluscope.results import DetectionResult, Unit
from halluscope.runtime import options
from halluscope.runtime.contract import Flag, Method, Need, Prepared, RunContext, Streamed, arg
from halluscope.runtime.nodes import node, plan_calls
from halluscope.scoring import scgp_score, supported_probability, supported_value
from halluscope.text import checked_passage
from halluscope.text import sentences as split_sentences

NAME = "selfcheck-prompt"
SUMMARY = "SelfCheck-Prompt: is each sentence supported by passages the model regenerates (FIBE's E.2 prompt)"
CHECK = "selfcheck.prompt"
CHECK_ALL = "selfcheck.prompt_all"  # batch: every sentence against one sample in one call
TOP_LOGPROBS = 10  # alternatives of the first answer token: Yes and No are among them
Scoring = Literal["discrete", "prob"]
SCORINGS: tuple[Scoring, ...] = ("discrete", "prob")


class Verdict(TypedDict):
    i: int  # sentence
    j: int  # sample
    answer: str | None  # 'yes', 'no', or None when the answer was neither
    p_yes: float | None  # p(Yes) / (p(Yes) + p(No)) with scoring="prob"; None without log-probs
    raw: str


class CheckInput(TypedDict):
    """What the fan-out sends to one check."""

    i: int
    j: int
    sentence: str
    context: str


class SampleInput(TypedDict):
    """What the batch fan-out sends to one sample's check: every sentence against it."""

    j: int
    context: str
    sentences: list[str]


class SCGPInput(TypedDict, total=False):
    """What a host passes in: the text (or its sentences), the question it answered or its concept,
    and samples if it has them."""

    text: str
    question: str
    concept: str
    sentences: list[str]
    samples: list[str]


class SCGPOutput(TypedDict, total=False):
    """What a host gets back: no input key (a checkpointed host would feed it to the next turn) and no
    reducer (a host's list would grow turn after turn)."""

    scored_sentences: list[str]
    used_samples: list[str]  # given, or regenerated
    verdicts: list[Verdict]
    scores: list[float]
    fallbacks: int  # batch: the (sentence, sample) checks asked alone, the one-call reply giving no clean verdict


class SCGPState(SCGPInput, SCGPOutput, total=False):
    checks: Annotated[list[Verdict], operator.add]  # the fan-out's results, private to one run
    alone: Annotated[list[int], operator.add]  # batch: one entry per check asked alone


@dataclass(frozen=True)
class Setup:
    """What the nodes share: the model that writes the samples and checks each sentence against each, the
    sample count, and how a verdict is read (``probability``: the log-probs asked for p(Yes))."""

    model: ModelLike
    gateway: Gateway
    n: int
    check_max_tokens: int | None
    scoring: Scoring
    probability: dict[str, Any]
    batch: bool  # every sentence against a sample in one call

    def ask_one(self, sample: str, sentence: str) -> Ask:
        """The paper's check of one sentence against one sample (E.2)."""
        params = {"max_tokens": self.check_max_tokens, **self.probability}
        return Ask(self.model, CHECK, {"context": sample, "sentence": sentence}, params)

    def verdict(self, i: int, j: int, reply: ChatReply) -> Verdict:
        """Sentence ``i`` against sample ``j`` as one E.2 reply answers it."""
        p_yes = yes_probability(reply.logprobs) if self.probability else None
        return {"i": i, "j": j, "answer": reply.parsed if reply.ok else None, "p_yes": p_yes, "raw": reply.text}

    def supported(self, verdict: Verdict) -> float:
        if self.scoring == "prob":
            return supported_probability(verdict["p_yes"], verdict["answer"])[0]
        return supported_value(verdict["answer"])


def split(setup: Setup, state: SCGPState, config: RunnableConfig) -> dict[str, Any]:
    """The sentences, and the calls they take (the samples' too when none are given)."""
    found = state.get("sentences") or split_sentences(state.get("text", ""))
    if not found:
        raise ConfigError("SelfCheck-Prompt needs a non-empty text (no sentence found)")
    given = len(state.get("samples") or [])
    per_sample = 1 if setup.batch else len(found)
    plan_calls(config, per_sample * given if given else setup.n + setup.n * per_sample)
    return {"sentences": found}


def regenerate(setup: Setup, state: SCGPState, config: RunnableConfig) -> Steps[dict[str, Any]]:
    """N further passages from the prompt (the question or concept), as SelfCheckGPT draws them."""
    samples = yield from regenerate_passages(
        setup.gateway, setup.model, state.get("concept", ""), len(state["sentences"]), setup.n, state.get("question")
    )
    return {"samples": samples}


def needs_samples(state: SCGPState) -> str:
    return "check_all" if state.get("samples") else "regenerate"


def fan_out(state: SCGPState) -> list[Send]:
    # sample-major: the E.2 prompt puts the sample first, so consecutive checks of one sample share
    # their prompt prefix (a local model reuses its KV cache for it)
    return [
        Send("check", CheckInput(i=i, j=j, sentence=sentence, context=sample))
        for j, sample in enumerate(state["samples"])
        for i, sentence in enumerate(state["sentences"])
    ]


def fan_out_samples(state: SCGPState) -> list[Send]:
    return [
        Send("check_sample", SampleInput(j=j, context=sample, sentences=state["sentences"]))
        for j, sample in enumerate(state["samples"])
    ]


def check_sample(setup: Setup, state: SampleInput, config: RunnableConfig) -> Steps[dict[str, Any]]:
    """Every sentence against one sample in one call (``selfcheck.prompt_all``); a sentence the reply
    gives no clean verdict for is checked alone with E.2."""
    sentences, j = state["sentences"], state["j"]
    variables = {"context": state["context"], "sentences": numbered(sentences)}
    params = {"max_tokens": one_call_max_tokens(len(sentences)), **setup.probability}
    reply = yield Calls(setup.gateway, Ask(setup.model, CHECK_ALL, variables, params))
    read = one_call_verdicts(
        reply.parsed if reply.ok else None, reply.logprobs if setup.probability else None, len(sentences)
    )
    verdicts: list[Verdict] = []
    for i, (answer, token) in read.items():
        p_yes = yes_probability([dict(token)]) if setup.probability and token is not None else None
        verdicts.append({"i": i, "j": j, "answer": answer, "p_yes": p_yes, "raw": reply.text})
    alone = [i for i in range(len(sentences)) if i not in read]
    if alone:
        plan_calls(config, len(alone))
        asks = [setup.ask_one(state["context"], sentences[i]) for i in alone]
        for i, one in zip(alone, (yield Calls(setup.gateway, asks)), strict=True):
            verdicts.append(setup.verdict(i, j, one))
    return {"checks": verdicts, "alone": alone}


def check(setup: Setup, state: CheckInput, config: RunnableConfig) -> Steps[dict[str, Any]]:
    """One (sentence, sample) check; a Send target receives its own payload as its state."""
    reply = yield Calls(setup.gateway, setup.ask_one(state["context"], state["sentence"]))
    return {"checks": [setup.verdict(state["i"], state["j"], reply)]}


def score(setup: Setup, state: SCGPState) -> dict[str, Any]:
    """Each sentence's score from its verdicts against every sample."""
    verdicts = sorted(state["checks"], key=lambda v: (v["i"], v["j"]))
    scores = [scgp_score([setup.supported(v) for v in verdicts if v["i"] == i]) for i in range(len(state["sentences"]))]
    return {
        "scores": scores,
        "scored_sentences": state["sentences"],
        "used_samples": state["samples"],
        "verdicts": verdicts,
        **({"fallbacks": len(state.get("alone") or [])} if setup.batch else {}),
    }


def build(
    model: ModelLike,
    gateway: Gateway | None = None,
    n: int = 5,
    check_max_tokens: int | None = 8,
    scoring: Scoring = "discrete",
    batch: bool = False,
) -> CompiledStateGraph:
    """The SCGP graph for one model (compiled without a checkpointer, so a host can mount it); ``batch``
    checks every sentence against a sample in one call."""
    gw = gateway or default_gateway()
    if n < 1:
        raise ConfigError(f"SelfCheck-Prompt needs at least one sample, got n={n}")
    if scoring not in SCORINGS:
        raise ConfigError(f"unknown SelfCheck-Prompt scoring {scoring!r}; available: {', '.join(SCORINGS)}")
    # log-probs are asked only of a model that gives them (asked of one that does not, the gateway
    # would retry an answer it cannot have); without them every check falls back to the discrete value
    asks = scoring == "prob" and gw.gives_logprobs(model)
    probability: dict[str, Any] = {"logprobs": True, "top_logprobs": TOP_LOGPROBS} if asks else {}
    setup = Setup(model, gw, n, check_max_tokens, scoring, probability, batch)
    graph = StateGraph(SCGPState, input_schema=SCGPInput, output_schema=SCGPOutput)
    graph.add_node("split", partial(split, setup))
    graph.add_node("regenerate", node("regenerate", partial(regenerate, setup)))
    graph.add_node("check_all", lambda state: {})  # a join point the fan-out starts from
    graph.add_node("score", partial(score, setup))
    graph.add_edge(START, "split")
    graph.add_conditional_edges("split", needs_samples, ["regenerate", "check_all"])
    graph.add_edge("regenerate", "check_all")
    if batch:
        graph.add_node("check_sample", node("check_sample", partial(check_sample, setup)), input_schema=SampleInput)
        graph.add_conditional_edges("check_all", fan_out_samples, ["check_sample"])
        graph.add_edge("check_sample", "score")
    else:
        graph.add_node("check", node("check", partial(check, setup)), input_schema=CheckInput)
        graph.add_conditional_edges("check_all", fan_out, ["check"])
        graph.add_edge("check", "score")
    graph.add_edge("score", END)
    return graph.compile(name=NAME)


Inputs = options.SampledText


@dataclass(frozen=True, kw_only=True)
class Options:
    model: ModelLike | None = options.model("checks each sentence against each sample (and writes the samples)")
    n: int = options.samples(5, "samples regenerated when none are given")
    scoring: Scoring = arg(
        "discrete",
        help="discrete: the paper's Yes 1 / No 0 / else 0.5; prob: p(Yes) / (p(Yes) + p(No)) from the answer's "
        "log-probs (the same calls)",
        flags=(Flag(("--scoring",), choices=SCORINGS),),
    )
    batch: bool = options.batch(
        "check every sentence against a sample in one call (selfcheck.prompt_all): S calls, not N x S"
    )


def prepare(opts: Options, ctx: RunContext) -> Prepared:
    """The graph for the options' model, sample count and scoring."""
    if opts.model is None:
        raise ConfigError("SelfCheck-Prompt needs a model")
    return Prepared(build(opts.model, ctx.gateway, n=opts.n, scoring=opts.scoring, batch=opts.batch), opts)


def run(prepared: Prepared, inputs: Inputs, ctx: RunContext) -> Steps[DetectionResult]:
    """Per-sentence scores of one passage, with their evidence and the run's metadata."""
    text, sentences, samples = checked_passage(inputs.text, inputs.sentences, inputs.samples)
    state: SCGPState = {"text": text or "", "concept": inputs.concept or ""}
    if inputs.question:
        state["question"] = inputs.question
    if sentences:
        state["sentences"] = sentences
    if samples:
        state["samples"] = samples
    out = yield Streamed(ctx, prepared.graph, state)
    return _result(out, ctx, prepared.options.scoring, bool(samples))


def _result(out: dict[str, Any], ctx: RunContext, scoring: Scoring, samples_given: bool) -> DetectionResult:
    verdicts = out["verdicts"]
    units = [
        Unit(
            text=sentence,
            score=out["scores"][i],
            evidence={
                "supported": [v["answer"] for v in verdicts if v["i"] == i],
                **({"p_yes": [v["p_yes"] for v in verdicts if v["i"] == i]} if scoring == "prob" else {}),
                "raw": [v["raw"] for v in verdicts if v["i"] == i],
            },
        )
        for i, sentence in enumerate(out["sentences"])
    ]
    no_probability = sum(v["p_yes"] is None for v in verdicts) if scoring == "prob" else 0
    events = {"no_probability": no_probability} if no_probability else {}
    if out.get("fallbacks"):  # (sentence, sample) checks the one-call reply gave no clean verdict for
        events["asked_alone"] = out["fallbacks"]
    batched = {"batch": True} if "fallbacks" in out else {}
    meta = ctx.meta(NAME, events, n=len(out["samples"]), samples_given=samples_given, scoring=scoring, **batched)
    return DetectionResult(method=NAME, units=units, meta=meta, evidence={"samples": out["samples"]})


METHOD = Method.from_module(
    __name__,
    scores=(0.0, 1.0),
    needs=(
        Need("text", "sentences"),
        Need("model"),
        Need("samples", "question", "concept", question="to regenerate samples"),
    ),
    presets={  # each by name: 'selfcheck-prompt:prob', 'selfcheck-prompt:batch' (one call per sample)
        "prob": {"scoring": "prob"},
        **options.BATCH_PRESETS,
        "prob-batch": {"scoring": "prob", "batch": True},
    },
    draws_samples=options.sampled_draw,
)
detect, adetect = METHOD.detect, METHOD.adetect
