"""Direct Question (DQ) as a method of its own: the FIBE paper's Appendix E.4 check without the exam.

    split -> ask E.4 of every sentence r_i, fanned out ("Is the above claim true? Answer only Yes or
    No", the original prompt P as context) -> score: H_D(i) = 1 - known(r_i, P), known = p_1 of the
    first answer token for Yes (1 - p_1 for No) where the model gives log-probs, else 1 / 0, and 0 for
    an answer that is neither.

Calls: |R|, one per sentence. FIBE's ``+dq`` variants ask the same question (the same cache entries).

``batch=True`` (issue 45) asks about every numbered sentence in one call (``fibe.direct_question_all``)
and reads each verdict's probability from its own token; a sentence whose verdict the reply misses,
repeats with another answer, or garbles is asked alone with E.4 (a ``fallback``, counted in the meta):
one call per answer plus its fallbacks.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from functools import partial
from typing import Annotated, Any

from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Send
from typing_extensions import TypedDict  # a state pydantic reads (Studio's schemas) on Python 3.11

from halluscope.backends.fanout import Ask, Calls
from halluscope.backends.gateway import Gateway, default_gateway
from halluscope.backends.models import ModelLike
from halluscope.backends.steps import Steps
from halluscope.errors import ConfigError
from halluscope.methods.fibe import Known, KnownInput, ask_direct_question, quoted
from halluscope.prompts.parsers import numbered, one_call_max_tokens, one_call_verdicts
from halluscope.results import DetectionResult, Unit
from halluscope.runtime import options
from halluscope.runtime.contract import Method, Need, Prepared, RunContext, Streamed, arg
from halluscope.runtime.nodes import node, plan_calls
from halluscope.scoring.fibe import known_value
from halluscope.text import checked_passage
from halluscope.text import sentences as split_sentences

NAME = "direct-question"
SUMMARY = "Direct Question: does the model itself hold each sentence true (FIBE paper, Appendix E.4)"
DIRECT_QUESTION_ALL = "fibe.direct_question_all"


class DQInput(TypedDict, total=False):
    """What a host passes in: the text (or its sentences) and the prompt that produced it."""

    text: str
    sentences: list[str]
    prompt: str


class DQOutput(TypedDict, total=False):
    scored_sentences: list[str]
    known: list[Known]  # one per sentence, in order
    scores: list[float]
    fallbacks: list[int]  # batch: the sentences asked alone, the one-call reply having no clean verdict for them


class DQState(DQInput, DQOutput, total=False):
    asked: Annotated[list[Known], operator.add]  # the fan-out's results, private to one run


def build(
    model: ModelLike, gateway: Gateway | None = None, logprobs: bool | None = None, batch: bool = False
) -> CompiledStateGraph:
    """The DQ graph for one model; ``logprobs`` (default: where the model gives them) reads known()
    from the first answer token's probability, as the paper does when it has log-probs; ``batch`` asks
    about every sentence in one call."""
    gw = gateway or default_gateway()
    asks = gw.gives_logprobs(model) if logprobs is None else logprobs

    def split(state: DQState, config: RunnableConfig) -> dict[str, Any]:
        found = state.get("sentences") or split_sentences(state.get("text", ""))
        if not found:
            raise ConfigError("Direct Question needs a non-empty text (no sentence found)")
        plan_calls(config, 1 if batch else len(found))
        return {"sentences": found}

    def fan_out(state: DQState) -> list[Send]:
        prompt = state.get("prompt", "")
        return [Send("ask", KnownInput(i=i, prompt=prompt, claim=s)) for i, s in enumerate(state["sentences"])]

    def ask(state: KnownInput, config: RunnableConfig) -> Steps[dict[str, Any]]:
        known = yield from ask_direct_question(gw, model, state, asks)
        return {"asked": [known]}

    def score(state: DQState) -> dict[str, Any]:
        known = sorted(state["asked"], key=lambda k: k["i"])
        return {"scored_sentences": state["sentences"], "known": known, "scores": [1.0 - k["known"] for k in known]}

    graph = StateGraph(DQState, input_schema=DQInput, output_schema=DQOutput)
    graph.add_node("split", split)
    graph.add_node("score", score)
    graph.add_edge(START, "split")
    if batch:
        graph.add_node("ask_all", node("ask_all", partial(ask_all, gw, model, asks)))
        graph.add_edge("split", "ask_all")
        graph.add_edge("ask_all", "score")
    else:
        graph.add_node("ask", node("ask", ask), input_schema=KnownInput)
        graph.add_conditional_edges("split", fan_out, ["ask"])
        graph.add_edge("ask", "score")
    graph.add_edge("score", END)
    return graph.compile(name=NAME)


def ask_all(
    gateway: Gateway, model: ModelLike, logprobs: bool, state: DQState, config: RunnableConfig
) -> Steps[dict[str, Any]]:
    """Every sentence in one call (``fibe.direct_question_all``), then E.4 alone for each sentence the
    reply gave no clean verdict for."""
    sentences, prompt = state["sentences"], state.get("prompt", "")
    variables = {"context": quoted(prompt), "claims": numbered(sentences)}
    params = {"max_tokens": one_call_max_tokens(len(sentences)), **({"logprobs": True} if logprobs else {})}
    reply = yield Calls(gateway, Ask(model, DIRECT_QUESTION_ALL, variables, params))
    read = one_call_verdicts(reply.parsed if reply.ok else None, reply.logprobs if logprobs else None, len(sentences))
    asked = []
    for i, (said, token) in read.items():
        p = math.exp(float(token["logprob"])) if token is not None else None  # the verdict token's own probability
        asked.append({"i": i, "answer": said, "p_first": p, "known": known_value(said, p), "raw": reply.text})
    missing = [i for i in range(len(sentences)) if i not in read]
    if missing:
        plan_calls(config, len(missing))
    for i in missing:
        asked.append(
            (
                yield from ask_direct_question(
                    gateway, model, KnownInput(i=i, prompt=prompt, claim=sentences[i]), logprobs
                )
            )
        )
    return {"asked": asked, "fallbacks": missing}


Inputs = options.PromptedText


@dataclass(frozen=True, kw_only=True)
class Options:
    model: ModelLike | None = options.model("is asked whether each sentence is true")
    logprobs: bool | None = arg(
        help="read known() from the first answer token's probability (default: where the model gives log-probs)"
    )
    batch: bool = options.batch(
        "ask about every sentence in one call (fibe.direct_question_all), each verdict's probability from its token",
        alone="asked",
    )


def prepare(opts: Options, ctx: RunContext) -> Prepared:
    if opts.model is None:
        raise ConfigError("Direct Question needs a model")
    return Prepared(build(opts.model, ctx.gateway, opts.logprobs, opts.batch), opts)


def run(prepared: Prepared, inputs: Inputs, ctx: RunContext) -> Steps[DetectionResult]:
    """H_D of each sentence (higher = more likely hallucinated): the model's own answer to whether the
    sentence is true, with its probability where the model gives log-probs."""
    text, sentences, _ = checked_passage(inputs.text, inputs.sentences, None)
    state: DQInput = {"text": text or "", "prompt": inputs.prompt or ""}
    if sentences:
        state["sentences"] = sentences
    return _result((yield Streamed(ctx, prepared.graph, state)), ctx)


def _result(out: dict[str, Any], ctx: RunContext) -> DetectionResult:
    fallbacks = out.get("fallbacks")
    units = [
        Unit(
            text=sentence,
            score=out["scores"][i],
            parsed=out["known"][i]["answer"] is not None,
            evidence={
                **{k: out["known"][i][k] for k in ("answer", "p_first", "known", "raw")},
                **({"asked_alone": i in fallbacks} if fallbacks is not None else {}),
            },
        )
        for i, sentence in enumerate(out["scored_sentences"])
    ]
    unread = sum(u.parsed is False for u in units)
    with_probability = sum(u.evidence["p_first"] is not None for u in units)
    events = {"unanswered": unread} if unread else {}
    if fallbacks:  # sentences the one-call reply gave no clean verdict for, asked alone
        events["asked_alone"] = len(fallbacks)
    batched = {"batch": True} if fallbacks is not None else {}
    meta = ctx.meta(NAME, events, with_probability=with_probability, **batched)
    return DetectionResult(method=NAME, units=units, meta=meta)


METHOD = Method.from_module(
    __name__,
    scores=(0.0, 1.0),
    question_field="prompt",
    needs=(Need("text", "sentences"), Need("model")),
    presets=options.BATCH_PRESETS,  # one call per answer (per chunk): e.g. in a bench, --method NAME:batch
)
detect, adetect = METHOD.detect, METHOD.adetect
