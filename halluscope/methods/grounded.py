"""Grounded checking: is each sentence of an answer supported by the context the user gave (RAG)?

    units (the answer's sentences, or its claims with ``decompose=True``: one call)
      -> select (the context cut into chunks that fit a judge's window; with ``top_k``, each unit's k
         most similar chunks by the project's embeddings, so calls grow with k, not with the context)
      -> check every (unit, chunk) pair: an LLM asked ``grounded.support`` (context and sentence fenced:
         a retrieved document is untrusted input), or an NLI classifier (``model="nli:PATH"``)
      -> score: 1 - the best chunk's support (``scoring.grounded``); the evidence names that chunk.

Support is p(Yes) / (p(Yes) + p(No)) of the judge's first answer token where the model gives
log-probs, else Yes 1 / No 0 / otherwise 0.5 (SelfCheck-Prompt's rule); an NLI classifier's is
P(entailment | chunk, unit). Unlike every other method, this one is not reference-free: a falsehood
the model believes is still flagged when the documents do not say it.

Calls: one per (unit, chunk) pair checked (+1 with ``decompose``); an NLI judge runs one forward pass
per batch of pairs instead.

A cascade (``fast="nli:DIR"``): the fast check (a fitted checker) scores every unit first, and only a
unit whose score falls in ``band`` (where the fast check is unsure) is checked again by the judge
(``model``), whose score replaces it; each unit says whether it was escalated and what the fast check
gave it, so its calls are the escalated units' pairs alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from typing_extensions import TypedDict  # a state pydantic reads (Studio's schemas) on Python 3.11

from halluscope.backends.embeddings import Embedder, default_embedder
from halluscope.backends.entailment import Entailment, Judged, judge_target, nli_checkpoint, yes_probability
from halluscope.backends.fanout import Ask, Calls
from halluscope.backends.gateway import Gateway
from halluscope.backends.models import ModelLike
from halluscope.backends.steps import Steps
from halluscope.errors import ConfigError
from halluscope.prompts.parsers import numbered, one_call_max_tokens, one_call_verdicts
from halluscope.results import DetectionResult, Unit
from halluscope.runtime import options
from halluscope.runtime.contract import (
    Documents,
    Flag,
    Method,
    Need,
    Prepared,
    RunContext,
    Streamed,
    arg,
    checked_documents,
)
from halluscope.runtime.nodes import node, plan_calls
from halluscope.scoring.grounded import grounded_score
from halluscope.scoring.selfcheck import supported_probability
from halluscope.text import CHUNK_WORDS, OVERLAP_WORDS, checked_text, checked_texts, chunk_context, chunks_of
from halluscope.text import sentences as split_sentences

NAME = "grounded"
SUMMARY = "Grounded: is each sentence of an answer supported by the documents given with it (RAG)"
SUPPORT = "grounded.support"
SUPPORT_ALL = "grounded.support_all"  # batch: every unit against one chunk in one call
DECOMPOSE = "semantic_entropy.decompose"  # paragraph semantic entropy's claim list, reused
TOP_LOGPROBS = 10  # alternatives of the first answer token: Yes and No are among them
BAND = (0.2, 0.8)  # a cascade escalates a unit whose fast score lies in [low, high] to the judge
CHECK_MAX_TOKENS = 8
NO_QUESTION = "(not given)"


def nearest_chunks(embedder: Embedder, units: list[str], chunks: list[str], k: int) -> list[list[int]]:
    """Each unit's ``k`` most similar chunks (cosine of the project's embeddings), in chunk order."""
    if k >= len(chunks):
        return [list(range(len(chunks))) for _ in units]
    found = embedder.nearest(units, chunks, k, exclude_identical=False)
    return [sorted(j for j, _ in near) for near in found]


# ---------------------------------------------------------------- the graph


class Check(TypedDict):
    unit: int
    chunk: int
    support: float
    answer: str | None  # 'yes', 'no', None (neither; an NLI judge's label otherwise)
    p_yes: float | None  # the LLM judge's p(Yes) / (p(Yes) + p(No)); None without log-probs
    raw: str | None


class GroundedInput(TypedDict, total=False):
    text: str
    sentences: list[str]
    context: list[str]
    question: str


class GroundedOutput(TypedDict, total=False):
    units: list[str]
    chunks: list[str]
    chunk_documents: list[int]  # the document (its position in the context) each chunk comes from
    checks: list[Check]
    scores: list[float]
    best: list[int]  # each unit's best-supporting chunk
    events: list[str]
    no_probability: int  # checks that asked for log-probs and got none (the discrete value stood in)
    asked_alone: list[list[int]]  # batch: the (unit, chunk) pairs the one-call reply gave no clean verdict for
    fast_scores: list[float]  # a cascade: each unit's score from the fast check, before any escalation
    escalated: list[int]  # a cascade: the units the judge checked again


class GroundedState(GroundedInput, GroundedOutput, total=False):
    pairs: list[tuple[int, int]]  # (unit, chunk) pairs to check, private to one run


@dataclass(frozen=True)
class Setup:
    """What the nodes share: the judge (an LLM spec or an NLI ``Entailment``) and its gateway, whether
    the answer is decomposed into claims, the chunking, and the retrieval of each unit's chunks."""

    judge: ModelLike | Entailment
    gateway: Gateway
    decompose: bool
    chunk_words: int
    overlap_words: int
    top_k: int | None
    embedder: Embedder | None
    probability: dict[str, Any]  # what an LLM judge is asked for to give p(Yes): its log-probs
    batch: bool  # an LLM judge checks every unit against a chunk in one call
    escalate_to: Setup | None = None  # a cascade: the judge's setup, for the units the fast check is unsure of
    band: tuple[float, float] = BAND


def units(setup: Setup, state: GroundedState, config: RunnableConfig) -> Steps[dict[str, Any]]:
    """The units checked: the answer's sentences, or with ``decompose`` the claims the judge writes."""
    given = state.get("sentences") or split_sentences(state.get("text", ""))
    if not given:
        raise ConfigError("grounded needs a non-empty text (no sentence found)")
    if not setup.decompose:
        return {"units": given, "events": []}
    plan_calls(config, 1)
    text = state.get("text") or " ".join(given)
    ask = Ask(setup.judge, DECOMPOSE, {"text": text}, {"max_tokens": 2 * len(text.split()) + 100})
    reply = yield Calls(setup.gateway, ask)
    if reply.ok and reply.parsed:
        return {"units": list(reply.parsed), "events": []}
    return {"units": given, "events": ["decompose_unparsed"]}  # the sentences, and the reply's failure noted


def select(setup: Setup, state: GroundedState, config: RunnableConfig) -> dict[str, Any]:
    """The documents as chunks, and the (unit, chunk) pairs to check: every chunk, or each unit's top_k."""
    found = chunks_of(state["context"], setup.chunk_words, setup.overlap_words)
    chunks = [chunk for chunk, _ in found]
    picked = (
        nearest_chunks(setup.embedder, state["units"], chunks, setup.top_k)
        if setup.top_k is not None and setup.embedder is not None
        else [list(range(len(chunks))) for _ in state["units"]]
    )
    # chunk-major: the support prompt puts the chunk first, so the checks of one chunk, asked back to
    # back, share their prompt prefix (a local model evaluates the chunk once, reusing its KV cache)
    pairs = sorted(((u, c) for u, near in enumerate(picked) for c in near), key=lambda pair: (pair[1], pair[0]))
    if isinstance(setup.judge, Entailment):
        plan_calls(config, setup.judge.replies_for(len(pairs)))
    else:
        plan_calls(config, len({c for _, c in pairs}) if setup.batch else len(pairs))
    return {"chunks": chunks, "chunk_documents": [document for _, document in found], "pairs": pairs}


def check(setup: Setup, state: GroundedState, config: RunnableConfig) -> Steps[dict[str, Any]]:
    """Each pair's support: the NLI judge's entailment probability, or the LLM judge's p(Yes)."""
    pairs, chunks, found = state["pairs"], state["chunks"], state["units"]
    if isinstance(setup.judge, Entailment):
        judged = yield Judged(setup.judge, [(chunks[c], found[u]) for u, c in pairs])
        checks = [
            Check(unit=u, chunk=c, support=(j.probs or {}).get("entailment", 0.0), answer=j.label, p_yes=None, raw=None)
            for (u, c), j in zip(pairs, judged, strict=True)
        ]
        return {"checks": checks}
    question = state.get("question") or NO_QUESTION
    asked_alone: list[list[int]] = []
    checks: list[Check] = []
    if setup.batch:
        checks, alone = yield from check_all(setup, state, question, config)
        pairs, asked_alone = alone, [list(pair) for pair in alone]
    params = {"max_tokens": CHECK_MAX_TOKENS, **setup.probability}
    asks = [  # the prompt fences all three (grounded.support's `fenced`): a document is untrusted input
        Ask(setup.judge, SUPPORT, {"context": chunks[c], "question": question, "sentence": found[u]}, params)
        for u, c in pairs
    ]
    replies = (yield Calls(setup.gateway, asks)) if asks else []
    for (u, c), reply in zip(pairs, replies, strict=True):
        answer = reply.parsed if reply.ok else None
        p_yes = yes_probability(reply.logprobs) if setup.probability else None
        support, _ = supported_probability(p_yes, answer)
        checks.append(Check(unit=u, chunk=c, support=support, answer=answer, p_yes=p_yes, raw=reply.text))
    no_probability = sum(c["p_yes"] is None for c in checks) if setup.probability else 0
    return {"checks": checks, "no_probability": no_probability, "asked_alone": asked_alone}


def check_all(
    setup: Setup, state: GroundedState, question: str, config: RunnableConfig
) -> Steps[tuple[list[Check], list[tuple[int, int]]]]:
    """Every unit paired with a chunk checked against it in one call (``grounded.support_all``); the
    checks read from the replies, and the pairs whose unit got no clean verdict (asked alone after)."""
    chunks, found = state["chunks"], state["units"]
    by_chunk: dict[int, list[int]] = {}
    for u, c in state["pairs"]:
        by_chunk.setdefault(c, []).append(u)
    asks = []
    for c, mine in by_chunk.items():
        variables = {"context": chunks[c], "question": question, "sentences": numbered([found[u] for u in mine])}
        params = {"max_tokens": one_call_max_tokens(len(mine)), **setup.probability}
        asks.append(Ask(setup.judge, SUPPORT_ALL, variables, params))
    replies = yield Calls(setup.gateway, asks)
    checks, alone = [], []
    for (c, mine), reply in zip(by_chunk.items(), replies, strict=True):
        read = one_call_verdicts(
            reply.parsed if reply.ok else None, reply.logprobs if setup.probability else None, len(mine)
        )
        for k, u in enumerate(mine):
            if k not in read:
                alone.append((u, c))
                continue
            answer, token = read[k]
            p_yes = yes_probability([dict(token)]) if token is not None else None
            support, _ = supported_probability(p_yes, answer)
            checks.append(Check(unit=u, chunk=c, support=support, answer=answer, p_yes=p_yes, raw=reply.text))
    if alone:
        plan_calls(config, len(alone))
    return checks, alone


def score(state: GroundedState) -> dict[str, Any]:
    """Each unit's score from its best-supporting chunk."""
    scores, best = [], []
    for u in range(len(state["units"])):
        mine = [check for check in state["checks"] if check["unit"] == u]
        value, at = grounded_score([check["support"] for check in mine])
        scores.append(value)
        best.append(mine[at]["chunk"])
    return {"scores": scores, "best": best}


def escalate(setup: Setup, state: GroundedState, config: RunnableConfig) -> Steps[dict[str, Any]]:
    """A cascade's second step: the units whose fast score lies in the band, checked again by the judge
    on the same pairs, their scores replaced by the judge's; the others keep the fast check's."""
    judge, (low, high) = setup.escalate_to, setup.band
    assert judge is not None  # the graph has this node only for a cascade
    chosen = [u for u, value in enumerate(state["scores"]) if low <= value <= high]
    if not chosen:
        return {"fast_scores": state["scores"], "escalated": []}
    pairs = [(u, c) for u, c in state["pairs"] if u in chosen]
    if isinstance(judge.judge, Entailment):
        plan_calls(config, judge.judge.replies_for(len(pairs)))
    else:
        plan_calls(config, len(pairs))
    again = yield from check(judge, {**state, "pairs": pairs}, config)
    checks = [c for c in state["checks"] if c["unit"] not in chosen] + again["checks"]
    rescored = score({**state, "checks": checks})
    return {
        **again,
        "checks": checks,
        **rescored,
        "fast_scores": state["scores"],
        "escalated": chosen,
    }


def build(
    judge: ModelLike | Entailment,
    gateway: Gateway,
    decompose: bool = False,
    chunk_words: int = CHUNK_WORDS,
    overlap_words: int = OVERLAP_WORDS,
    top_k: int | None = None,
    embedder: Embedder | None = None,
    batch: bool = False,
    fast: Entailment | None = None,
    band: tuple[float, float] = BAND,
) -> CompiledStateGraph:
    """The grounded graph for one judge (an LLM spec or an NLI ``Entailment``); an LLM judge is asked
    for log-probs where it gives them (asked of one that does not, the gateway would retry an answer it
    cannot have); ``batch``: an LLM judge checks every unit against a chunk in one call. ``fast``: a
    cascade, the fast check first and the judge for the units in ``band``."""
    nli = isinstance(judge, Entailment)
    if batch and nli:
        raise ConfigError(
            "grounded: batch=True asks an LLM judge about every sentence at once; an NLI judge reads pairs"
        )
    if decompose and nli:
        raise ConfigError("grounded: decompose=True asks an LLM for the claims; an NLI judge cannot write them")
    if fast is not None and (decompose or batch):
        raise ConfigError("grounded: a cascade checks sentences pair by pair (no decompose, no batch)")
    if not 0 <= band[0] <= band[1] <= 1:
        raise ConfigError(
            f"grounded: band is LOW,HIGH with 0 <= LOW <= HIGH <= 1, got {list(band)}", settings=("band",)
        )
    if top_k is not None and (top_k < 1 or embedder is None):
        raise ConfigError(f"grounded: top_k takes a whole number >= 1 (and an embedder), got {top_k}")
    chunk_context(["x"], chunk_words, overlap_words)  # the chunk sizes checked now, not at the first item
    probability: dict[str, Any] = (
        {"logprobs": True, "top_logprobs": TOP_LOGPROBS} if not nli and gateway.gives_logprobs(judge) else {}
    )
    setup = Setup(judge, gateway, decompose, chunk_words, overlap_words, top_k, embedder, probability, batch)
    if fast is not None:  # the fast check runs the graph; the judge's setup is kept for the units it escalates
        setup = replace(setup, judge=fast, probability={}, escalate_to=setup, band=band)
    return _graph(setup)


def _graph(setup: Setup) -> CompiledStateGraph:
    """units -> select -> check -> score (-> escalate, for a cascade)."""
    graph = StateGraph(GroundedState, input_schema=GroundedInput, output_schema=GroundedOutput)
    graph.add_node("units", node("units", partial(units, setup)))
    graph.add_node("select", partial(select, setup))
    graph.add_node("check", node("check", partial(check, setup)))
    graph.add_node("score", score)
    graph.add_edge(START, "units")
    graph.add_edge("units", "select")
    graph.add_edge("select", "check")
    graph.add_edge("check", "score")
    if setup.escalate_to is None:
        graph.add_edge("score", END)
    else:
        graph.add_node("escalate", node("escalate", partial(escalate, setup)))
        graph.add_edge("score", "escalate")
        graph.add_edge("escalate", END)
    return graph.compile(name=NAME)


# ---------------------------------------------------------------- the method


@dataclass(frozen=True, kw_only=True)
class Inputs:
    """An item: the answer (or its sentences), the documents it should rest on, the question it answers."""

    text: str | None = options.text("the answer to check")
    sentences: list[str] | None = options.sentences()
    context: Documents | None = options.documents()
    question: str | None = options.question("the question the answer answers (shown to the judge)")


@dataclass(frozen=True, kw_only=True)
class Options:
    model: ModelLike | Entailment | None = arg(
        help="judges support: a model spec (e.g. local:qwen2.5-coder-1.5b) or an NLI checkpoint: nli:PATH, or "
        "nli:NAME once pulled (default: the default local model)",
        flags=(Flag(("--model",), metavar="SPEC"),),
        refers="model",
    )
    decompose: bool = arg(
        False,
        help="check the answer's claims (one call: paragraph semantic entropy's decomposition), not its sentences",
        flags=(Flag(("--decompose",), const=True),),
    )
    chunk_words: int = arg(
        CHUNK_WORDS,
        help="a chunk of context holds at most this many words",
        flags=(Flag(("--chunk-words",), type=int, metavar="N"),),
    )
    overlap_words: int = arg(
        OVERLAP_WORDS,
        help="words of whole sentences consecutive chunks share",
        flags=(Flag(("--overlap-words",), type=int, metavar="N"),),
    )
    top_k: int | None = arg(
        help="check each unit only against its k most similar chunks (embeddings), not every chunk",
        flags=(Flag(("--top-k",), type=int, metavar="K"),),
    )
    batch: bool = options.batch("an LLM judge checks every sentence against a chunk in one call (grounded.support_all)")
    fast: ModelLike | Entailment | None = arg(
        help="a cascade: this fast check (a fitted checker, nli:DIR) scores every sentence first, and the judge "
        "(--model) checks again only a sentence whose fast score lies in --band",
        flags=(Flag(("--fast",), metavar="nli:DIR"),),
        refers="model",
    )
    band: tuple[float, float] | str = arg(
        BAND,
        help="a cascade escalates a sentence whose fast score (p not supported) lies in LOW,HIGH",
        flags=(Flag(("--band",), listed=True, type=float, metavar="LOW,HIGH"),),
    )


def _judge(model: ModelLike | Entailment | None) -> ModelLike | Entailment:
    """An NLI judge (given, or nli:PATH loaded once), a chat model given as an object, or a model spec
    (None: the default local model), as semantic entropy's judges are read."""
    if isinstance(model, Entailment) or (model is not None and not isinstance(model, str)):
        return model
    nli, target = judge_target(model, "an Entailment")
    return nli_checkpoint(target) if nli else target


def prepare(opts: Options, ctx: RunContext) -> Prepared:
    """The judge from its spec (an NLI checkpoint loaded once), the embedder where top_k asks for it, the graph."""
    judge = _judge(opts.model)
    if not isinstance(judge, Entailment):
        ctx.gateway.model(judge)  # a bad spec or a missing key fails here, before any item
    embedder = default_embedder() if opts.top_k is not None else None
    fast = _fast(opts.fast) if opts.fast is not None else None
    graph = build(
        judge,
        ctx.gateway,
        opts.decompose,
        opts.chunk_words,
        opts.overlap_words,
        opts.top_k,
        embedder,
        opts.batch,
        fast,
        _band(opts.band),
    )
    return Prepared(graph, opts)


def _fast(model: ModelLike | Entailment) -> Entailment:
    """A cascade's fast check: an NLI checker (a fitted checker's nli:DIR), never an LLM."""
    found = _judge(model)
    if not isinstance(found, Entailment):
        raise ConfigError(
            f"grounded: fast takes a fitted checker or NLI model (nli:DIR), not {model!r}: the judge is model",
            settings=("fast", "model"),
        )
    return found


def _band(band: tuple[float, float] | Sequence[float] | str) -> tuple[float, float]:
    """LOW,HIGH as given (a pair, or 'LOW,HIGH' from a configured name or --opt)."""
    try:
        values = [float(v) for v in (band.split(",") if isinstance(band, str) else band)]
        low, high = values
    except (TypeError, ValueError):
        raise ConfigError(f"grounded: band is LOW,HIGH (two numbers), got {band!r}", settings=("band",)) from None
    return low, high


def run(prepared: Prepared, inputs: Inputs, ctx: RunContext) -> Steps[DetectionResult]:
    """Per-unit support by the context, with the best chunk, and its document's metadata, named in each
    unit's evidence."""
    if inputs.context is None:
        raise ConfigError("grounded needs the context the answer should rest on (context=...)")
    documents = checked_documents(inputs.context)
    state: GroundedInput = {"context": [text for text, _ in documents]}
    if inputs.text is not None:
        state["text"] = checked_text(inputs.text, "text")
    if inputs.sentences is not None:
        state["sentences"] = checked_texts(inputs.sentences, "sentences")
    if inputs.question:
        state["question"] = inputs.question
    out = yield Streamed(ctx, prepared.graph, state)
    return _result(out, ctx, prepared.options, [metadata for _, metadata in documents])


def _result(out: dict[str, Any], ctx: RunContext, opts: Options, metadata: list[dict[str, Any]]) -> DetectionResult:
    units = []
    for u, text in enumerate(out["units"]):
        mine = [check for check in out["checks"] if check["unit"] == u]
        best = out["best"][u]
        document = out["chunk_documents"][best]
        units.append(
            Unit(
                text=text,
                score=out["scores"][u],
                parsed=not mine or any(c["answer"] is not None or c["p_yes"] is not None for c in mine),
                evidence={
                    "best_chunk": best,
                    "best_chunk_text": out["chunks"][best],
                    "best_chunk_document": document,
                    "best_chunk_metadata": metadata[document],
                    "chunks_checked": [check["chunk"] for check in mine],
                    "support": [check["support"] for check in mine],
                    "answers": [check["answer"] for check in mine],
                    **(
                        {"fast_score": out["fast_scores"][u], "escalated": u in out["escalated"]}
                        if "escalated" in out
                        else {}
                    ),
                },
            )
        )
    checks = out["checks"]
    no_probability = out.get("no_probability", 0)
    events: dict[str, int] = {"no_probability": no_probability} if no_probability else {}
    unparsed = sum(check["answer"] is None for check in checks if check["p_yes"] is None)
    if unparsed:  # neither Yes nor No, no probability: the paper's 0.5 (SelfCheck-Prompt's rule)
        events["unparsed_verdict"] = unparsed
    for event in out.get("events") or []:
        events[event] = events.get(event, 0) + 1
    if out.get("asked_alone"):  # (unit, chunk) pairs the one-call reply gave no clean verdict for
        events["asked_alone"] = len(out["asked_alone"])
    meta = ctx.meta(
        NAME,
        events,
        decompose=opts.decompose,
        chunk_words=opts.chunk_words,
        overlap_words=opts.overlap_words,
        top_k=opts.top_k,
        chunks=len(out["chunks"]),
        checks=len(checks),
        **({"batch": True} if opts.batch else {}),
        **({"escalated": len(out["escalated"]), "band": list(_band(opts.band))} if "escalated" in out else {}),
    )
    return DetectionResult(method=NAME, units=units, meta=meta, evidence={"chunks": out["chunks"]})


METHOD = Method.from_module(
    __name__,
    scores=(0.0, 1.0),
    context_field="context",
    needs=(
        Need("text", "sentences"),
        Need("context"),
    ),
    presets=options.BATCH_PRESETS,  # one call per answer (per chunk): e.g. in a bench, --method NAME:batch
)
detect, adetect = METHOD.detect, METHOD.adetect
