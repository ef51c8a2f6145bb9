"""FEWL, factualness evaluations via weighting LLMs (Wei et al., Algorithm 1), as a LangGraph graph
over a batch of questions:

    plan: each question's K nearest questions in the pool (embedding cosine), and the questions whose
          reference answers are needed (the batch's and their neighbours', each once)
      -> fan out, in one step:
           reference answers h_i(q) to every needed question: one call per reference model at
             temperature 0, or one call asking a single model for N diversified answers (what the
             paper's experiments do, for time);
           25 intentionally wrong (IW) answers with their corrected (CO) versions per batch question
             (D.1), in one call;
           the answers of candidate models to the batch questions (model ranking)
      -> score: embed every text once; per question the expertise scores r_i and weights
           lambda = softmax(r); per answer y the truthfulness and laziness terms, FEWL (Eq. 4) and
           every ablation of the paper's tables.

Calls per batch: |needed| x (N reference models, or 1 diversified call) + |batch| IW/CO calls
+ |batch| x |candidate models|. A neighbour shared by several questions is answered once.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Annotated, Any

import numpy as np
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Send
from typing_extensions import TypedDict  # a state pydantic reads (Studio's schemas) on Python 3.11

from halluscope.backends.embeddings import Embedder, default_embedder
from halluscope.backends.fanout import Ask, Calls
from halluscope.backends.gateway import Gateway, default_gateway
from halluscope.backends.local import default_spec
from halluscope.backends.models import ModelLike, model_name
from halluscope.backends.steps import Steps
from halluscope.errors import ConfigError
from halluscope.results import DetectionResult, Unit
from halluscope.runtime import contract, options
from halluscope.runtime.contract import Flag, Method, Need, RunContext, Streamed, arg
from halluscope.runtime.nodes import node, plan_calls
from halluscope.scoring.fewl import expertise_score, expertise_weights, fewl_terms, variant_scores

NAME = "fewl"
SUMMARY = "FEWL: each answer against reference models weighted by their expertise (Wei et al.)"
ANSWER = "fewl.answer"
DIVERSE = "fewl.diverse_answers"
IW_CO = "fewl.iw_co"
IW_CO_MAX_TOKENS = 1024  # 25 pairs of one-sentence answers take about 1,000 tokens; a cut pair is dropped
DIVERSE_TOKENS_PER_ANSWER = 48
DIVERSIFY = 5  # "multi": one reference model gives five answers (Section 4.2)
NEIGHBOURS = 5  # K of the laziness penalty; Section 4 does not state it, Section 5.1 uses 5 neighbours


class Item(TypedDict):
    question: str
    answers: list[str]


class ReferenceAnswer(TypedDict):
    question: str
    i: int  # reference index h_i
    text: str | None  # None: that reference gave no usable answer
    raw: str


class WrongAnswers(TypedDict):
    question: str
    pairs: list[dict[str, str]]
    raw: str
    parsed: bool


class Response(TypedDict):
    question: str
    model: str
    text: str | None
    raw: str


class FewlInput(TypedDict, total=False):
    """What a host passes in: the batch and the neighbour pool."""

    items: list[Item]
    pool: list[str]


class FewlOutput(TypedDict, total=False):
    """What a host gets back (no input key, no reducer: a checkpointed host's next turn starts clean)."""

    scored: list[dict[str, Any]]
    events: dict[str, int]


class FewlState(FewlInput, FewlOutput, total=False):
    neighbours: dict[str, list[tuple[str, float]]]
    references: Annotated[list[ReferenceAnswer], operator.add]
    wrongs: Annotated[list[WrongAnswers], operator.add]
    responses: Annotated[list[Response], operator.add]


@dataclass(frozen=True)
class Setup:
    """What the nodes share: the reference models (one asked for ``n`` diversified answers, or each once),
    the model that writes the IW/CO answers, the candidates, the neighbours' count and the embedder."""

    references: list[ModelLike]
    n: int | None
    neighbours: int
    writer: ModelLike
    candidates: Sequence[ModelLike]
    embedder: Embedder | None
    gateway: Gateway

    def embed(self) -> Embedder:
        """Loaded on first use: a graph that never embeds needs no model."""
        return self.embedder or default_embedder()


def plan(setup: Setup, state: FewlState, config: RunnableConfig) -> dict[str, Any]:
    """The batch checked, each question's K nearest questions of the pool found, the calls announced."""
    items = state.get("items") or []
    if not items:
        raise ConfigError("FEWL needs at least one question")
    blank = [k for k, it in enumerate(items) if not it["question"].strip()]
    if blank:
        raise ConfigError(f"empty question(s) at batch position(s) {blank}")
    pool = [q for q in state.get("pool") or [] if q.strip()]
    found: dict[str, list[tuple[str, float]]] = {}
    if pool:
        questions = [it["question"] for it in items]
        near = setup.embed().nearest(questions, pool, setup.neighbours)
        found = {q: [(pool[j], cos) for j, cos in picked] for q, picked in zip(questions, near, strict=True)}
    plan_calls(config, len(calls(setup, items, found)))  # one model call each
    return {"neighbours": found, "pool": pool}


def calls(setup: Setup, items: Sequence[Item], neighbours: dict[str, list[tuple[str, float]]]) -> list[Send]:
    """Every needed question (the batch's and their neighbours') answered once per reference, the
    batch's IW/CO answers written, and the candidates' answers asked."""
    batch = list(dict.fromkeys(it["question"] for it in items))
    needed = list(dict.fromkeys(batch + [q for q in batch for q, _ in neighbours.get(q, [])]))
    if setup.n is None:
        sends = [Send("answer", {"question": q, "i": i}) for q in needed for i in range(len(setup.references))]
    else:
        sends = [Send("diversified", {"question": q}) for q in needed]
    sends += [Send("wrong", {"question": q}) for q in batch]
    sends += [Send("respond", {"question": q, "model": m}) for q in batch for m in setup.candidates]
    return sends


def fan_out(setup: Setup, state: FewlState) -> list[Send]:
    return calls(setup, state["items"], state["neighbours"])


def answer(setup: Setup, state: dict[str, Any], config: RunnableConfig) -> Steps[dict[str, Any]]:
    """Reference model i's answer h_i(x)."""
    reply = yield Calls(setup.gateway, Ask(setup.references[state["i"]], ANSWER, {"question": state["question"]}))
    text = reply.parsed if reply.ok else None
    return {"references": [ReferenceAnswer(question=state["question"], i=state["i"], text=text, raw=reply.text)]}


def diversified(setup: Setup, state: dict[str, Any], config: RunnableConfig) -> Steps[dict[str, Any]]:
    """The one reference model's N diversified answers, in one call."""
    n = setup.n
    assert n is not None
    variables = {"question": state["question"], "n": n}
    ask = Ask(setup.references[0], DIVERSE, variables, {"max_tokens": DIVERSE_TOKENS_PER_ANSWER * n})
    reply = yield Calls(setup.gateway, ask)
    # an answer that is not a list is still one answer (the rest are recorded as missing)
    listed = list(reply.parsed)[:n] if reply.ok else [reply.text.strip()] if reply.text.strip() else []
    texts: list[str | None] = [*listed, *[None] * (n - len(listed))]
    return {
        "references": [
            ReferenceAnswer(question=state["question"], i=i, text=t, raw=reply.text) for i, t in enumerate(texts)
        ]
    }


def wrong(setup: Setup, state: dict[str, Any], config: RunnableConfig) -> Steps[dict[str, Any]]:
    """D.1: the intentionally wrong answers with their corrected versions."""
    ask = Ask(setup.writer, IW_CO, {"question": state["question"]}, {"max_tokens": IW_CO_MAX_TOKENS})
    reply = yield Calls(setup.gateway, ask)
    pairs = list(reply.parsed) if reply.ok else []
    return {"wrongs": [WrongAnswers(question=state["question"], pairs=pairs, raw=reply.text, parsed=reply.ok)]}


def respond(setup: Setup, state: dict[str, Any], config: RunnableConfig) -> Steps[dict[str, Any]]:
    """A candidate model's own answer, scored beside the given ones."""
    reply = yield Calls(setup.gateway, Ask(state["model"], ANSWER, {"question": state["question"]}))
    text = reply.parsed if reply.ok else None
    response = Response(question=state["question"], model=model_name(state["model"]), text=text, raw=reply.text)
    return {"responses": [response]}


def score(setup: Setup, state: FewlState) -> dict[str, Any]:
    return score_batch(
        state["items"],
        state.get("references", []),
        state.get("wrongs", []),
        state.get("responses", []),
        state["neighbours"],
        setup.n or len(setup.references),
        setup.embed(),
        penalty=bool(state["pool"]),
    )


def build(
    references: Sequence[ModelLike],
    *,
    n: int | None = None,
    neighbours: int = NEIGHBOURS,
    wrong_model: ModelLike | None = None,
    candidates: Sequence[ModelLike] = (),
    embedder: Embedder | None = None,
    gateway: Gateway | None = None,
) -> CompiledStateGraph:
    """The graph for N reference models (``n=None``) or one reference model asked for ``n``
    diversified answers. ``wrong_model`` writes the IW/CO answers (default: the first reference);
    ``candidates`` answer every batch question and are scored beside the given answers."""
    references = list(references)
    if not references:
        raise ConfigError("FEWL needs at least one reference model")
    if n is not None and (n < 1 or len(references) != 1):
        raise ConfigError(
            f"n asks one reference model to diversify into N >= 1 answers; got n={n} with {len(references)} models"
        )
    if neighbours < 1:
        raise ConfigError(f"the laziness penalty needs K >= 1 neighbour questions, got {neighbours}")
    writer = wrong_model or references[0]
    setup = Setup(references, n, neighbours, writer, candidates, embedder, gateway or default_gateway())
    graph = StateGraph(FewlState, input_schema=FewlInput, output_schema=FewlOutput)
    graph.add_node("plan", partial(plan, setup))
    # the model calls run on threads under invoke, on the event loop under ainvoke
    for name, asking in (("answer", answer), ("diversified", diversified), ("wrong", wrong), ("respond", respond)):
        graph.add_node(name, node(name, partial(asking, setup)))
    graph.add_node("score", partial(score, setup))
    graph.add_edge(START, "plan")
    graph.add_conditional_edges("plan", partial(fan_out, setup), ["answer", "diversified", "wrong", "respond"])
    for asking_node in ("answer", "diversified", "wrong", "respond"):
        graph.add_edge(asking_node, "score")
    graph.add_edge("score", END)
    return graph.compile(name=NAME)


@dataclass
class _Batch:
    """A batch's answers to every question, their embeddings and the events its scoring handled."""

    ref_text: dict[tuple[str, int], str | None]
    wrong_of: dict[str, WrongAnswers]
    responses: Sequence[Response]
    neighbours: dict[str, list[tuple[str, float]]]
    n_refs: int
    vectors: dict[str, Any]
    penalty: bool
    events: dict[str, int] = field(default_factory=dict)

    def event(self, name: str, count: int = 1) -> None:
        if count:
            self.events[name] = self.events.get(name, 0) + count

    def sim(self, a: str, b: str) -> float:
        return float(np.dot(self.vectors[a], self.vectors[b]))

    def weights(self, h: list[str], pairs: list[dict[str, str]]) -> tuple[list[float], list[float]]:
        """Each reference's expertise r_i and lambda (uniform without IW/CO pairs)."""
        if not (pairs and h):
            return [], [1.0 / len(h)] * len(h) if h else []
        corrected = [[self.sim(hi, p["corrected"]) for p in pairs] for hi in h]
        wrong = [[self.sim(hi, p["wrong"]) for p in pairs] for hi in h]
        r = [expertise_score(c, w) for c, w in zip(corrected, wrong, strict=True)]
        return r, expertise_weights(r)

    def scored(self, it: Item) -> dict[str, Any]:
        """One question's expertise weights and every answer's FEWL terms and ablations."""
        x = it["question"]
        present = [i for i in range(self.n_refs) if self.ref_text.get((x, i))]
        h = [self.ref_text[(x, i)] or "" for i in present]
        pairs = self.wrong_of[x]["pairs"] if x in self.wrong_of else []
        if x in self.wrong_of and not self.wrong_of[x]["parsed"]:
            self.event("iw_co_unparsed")
        elif 0 < len(pairs) < 25:
            self.event("iw_co_short")
        r, weights = self.weights(h, pairs)
        near = self.neighbours.get(x, [])
        lazy_refs = {i: [t for q, _ in near if (t := self.ref_text.get((q, i)))] for i in present}
        answers = [(a, "given") for a in it["answers"]]
        answers += [(resp["text"], resp["model"]) for resp in self.responses if resp["question"] == x and resp["text"]]
        rows = []
        for y, source in answers:
            row: dict[str, Any] = {"text": y, "source": source}
            if not h:
                row.update(fewl=None, variants={})
            else:
                truth = [self.sim(y, hi) for hi in h]
                lazy = [[self.sim(y, t) for t in lazy_refs[i]] for i in present] if self.penalty and near else None
                terms = fewl_terms(truth, weights, lazy)
                row.update(
                    fewl=terms["score"],
                    similarity=truth,
                    truthfulness=terms["truthfulness"],
                    penalty=terms["penalty"],
                    variants=variant_scores(truth, weights, lazy),
                )
            rows.append(row)
        if not h:
            self.event("no_reference_answer")
        return {
            "question": x,
            "references": h,
            "reference_index": present,
            "expertise": r,
            "weights": weights,
            "wrong_pairs": len(pairs),
            "neighbours": [{"question": q, "cosine": c} for q, c in near],
            "answers": rows,
        }


def score_batch(
    items: Sequence[Item],
    references: Sequence[ReferenceAnswer],
    wrongs: Sequence[WrongAnswers],
    responses: Sequence[Response],
    neighbours: dict[str, list[tuple[str, float]]],
    n_refs: int,
    embedder: Embedder,
    penalty: bool = True,
) -> dict[str, Any]:
    """The score node: every text embedded once, then Algorithm 1's terms for every answer.

    A reference with no answer to x is left out of x's weights (and a neighbour it did not answer out
    of its penalty); IW/CO answers that could not be read leave lambda uniform. Both are events."""
    texts = [a for it in items for a in it["answers"]]
    texts += [r["text"] for r in references if r["text"]]
    texts += [t for w in wrongs for p in w["pairs"] for t in (p["wrong"], p["corrected"])]
    texts += [r["text"] for r in responses if r["text"]]
    unique = list(dict.fromkeys(texts))
    batch = _Batch(
        ref_text={(r["question"], r["i"]): r["text"] for r in references},
        wrong_of={w["question"]: w for w in wrongs},
        responses=responses,
        neighbours=neighbours,
        n_refs=n_refs,
        vectors=dict(zip(unique, embedder.encode(unique), strict=True)) if unique else {},
        penalty=penalty,
    )
    batch.event("reference_missing", sum(r["text"] is None for r in references))
    batch.event("response_missing", sum(r["text"] is None for r in responses))
    scored = [batch.scored(it) for it in items]
    return {"scored": scored, "events": batch.events}


def _input(items: Sequence[Item], pool: Sequence[str]) -> FewlState:
    return {
        "items": [Item(question=it["question"], answers=list(it["answers"])) for it in items],
        "pool": list(pool),
    }


def _read(out: dict[str, Any]) -> dict[str, Any]:
    """What ``run`` returns, from the graph's final state."""
    return {
        "scored": out["scored"],
        "wrongs": sorted(out.get("wrongs", []), key=lambda w: w["question"]),
        "responses": out.get("responses", []),
        "events": out["events"],
        "penalty": bool(out["pool"]),
    }


def reference_setup(references: Sequence[ModelLike] | None, n: int | None) -> tuple[list[ModelLike], int | None]:
    """The reference models (default: the default local model) and N: one reference model is asked
    for ``DIVERSIFY`` answers unless ``n`` says otherwise; several are asked once each."""
    refs: list[ModelLike] = list(references) if references else [default_spec()]
    if n is None and len(refs) == 1:
        n = DIVERSIFY
    return refs, n


def reference_params(refs: Sequence[ModelLike], n: int | None, wrong_model: ModelLike | None) -> dict[str, Any]:
    """How the references were asked, as results record it."""
    return {
        "references": [model_name(m) for m in refs],
        "mode": "diversified" if n else "models",
        "n": n or len(refs),
        "wrong_model": model_name(wrong_model or refs[0]),
    }


@dataclass(frozen=True, kw_only=True)
class Inputs:
    """An item: a question and the answers to score (the candidates' own answers are added)."""

    question: str | None = options.question()
    answers: list[str] | None = arg(help="the answers to score (repeatable)", flags=(Flag(("--answer",), append=True),))


@dataclass(frozen=True, kw_only=True)
class Options:
    references: Sequence[ModelLike] | None = arg(
        help="reference models (default: the default local model asked for 5 answers)",
        flags=(Flag(("--reference",), listed=True, metavar="SPEC"),),
        refers="model",
    )
    n: int | None = options.samples(
        None, f"diversified answers of the one reference model (default {DIVERSIFY})", ("--diversify", "--samples")
    )
    pool: Sequence[str] = arg(
        (),
        help="questions to find neighbours in (the laziness penalty): a JSON list or one per line",
        flags=options.lines_file_flags("--pool"),
    )
    neighbours: int = arg(
        NEIGHBOURS, help="K: nearest questions of the penalty", flags=(Flag(("--neighbours",), type=int, metavar="K"),)
    )
    wrong_model: ModelLike | None = arg(
        help="the model that writes IW/CO answers (default: the first reference)",
        flags=(Flag(("--wrong-model",), metavar="SPEC"),),
        refers="model",
    )
    candidates: Sequence[ModelLike] = arg(
        (),
        help="models that answer the question themselves, each answer scored beside the given ones (Section 4.3)",
        refers="model",
    )
    embedder: Embedder | None = arg(help="the similarity's embeddings (default: all-MiniLM-L6-v2)", refers="model")


@dataclass(frozen=True)
class Prepared(contract.Prepared):
    asked: Mapping[str, Any] | None = None  # how the references are asked (reference_params)


def prepare(opts: Options, ctx: RunContext) -> Prepared:
    """The reference models and N, and the graph."""
    refs, n = reference_setup(opts.references, opts.n)
    graph = build(
        refs,
        n=n,
        neighbours=opts.neighbours,
        wrong_model=opts.wrong_model,
        candidates=list(opts.candidates),
        embedder=opts.embedder,
        gateway=ctx.gateway,
    )
    return Prepared(graph, opts, reference_params(refs, n, opts.wrong_model))


def run(prepared: Prepared, inputs: Inputs, ctx: RunContext) -> Steps[DetectionResult]:
    """FEWL of each answer to one question. A unit's score is the risk -FEWL (higher = more likely
    hallucinated); its evidence holds FEWL, the truthfulness and penalty terms per reference and the
    ablations. One reference model is asked for ``n`` diversified answers (default 5, the paper's
    setting); several are asked once each. Without a ``pool`` there is no laziness penalty."""
    answers = [a.strip() for a in inputs.answers or []]
    opts: Options = prepared.options
    if not all(answers) or not (answers or opts.candidates):
        raise ConfigError("FEWL needs at least one non-empty answer to score")
    state = _input([Item(question=inputs.question or "", answers=answers)], opts.pool)
    out = _read((yield Streamed(ctx, prepared.graph, state)))
    return _result(out, ctx, dict(prepared.asked or {}), opts.neighbours)


def _result(out: dict[str, Any], ctx: RunContext, asked: dict[str, Any], neighbours: int) -> DetectionResult:
    """The result of one run, from ``_read``'s output."""
    scored = out["scored"][0]
    units = []
    for row in scored["answers"]:
        risk = None if row["fewl"] is None else -row["fewl"]
        evidence = {k: v for k, v in row.items() if k != "text"}
        units.append(Unit(text=row["text"], score=risk, parsed=row["fewl"] is not None, evidence=evidence))
    meta = ctx.meta(
        NAME,
        events=out["events"],
        neighbours=neighbours if out["penalty"] else 0,
        penalty=out["penalty"],
        **asked,
    )
    evidence = {k: v for k, v in scored.items() if k != "answers"}
    evidence["wrong_answers"] = out["wrongs"][0]["pairs"] if out["wrongs"] else []
    return DetectionResult(method=NAME, units=units, meta=meta, evidence=evidence)


def describe(result: DetectionResult) -> str:
    """FEWL per answer with its mean similarity and penalty, and the expertise weights."""
    p = result.meta.params
    refs = f"{', '.join(p['references'])} ({p['mode']}, N = {p['n']})"
    lines = [f"fewl: score = -FEWL per answer (higher = more likely hallucinated, as in --json); references {refs}"]
    for unit in result.units:
        ev = unit.evidence
        if ev.get("fewl") is None:
            lines.append(f"   n/a    {unit.text}  (no reference answer)")
            continue
        similarity = sum(ev["similarity"]) / len(ev["similarity"])
        lazy = sum(ev["penalty"]) / len(ev["penalty"])
        lines.append(
            f"  {unit.score:7.4f}  {unit.text}  (FEWL {ev['fewl']:.4f}, mean similarity {similarity:.3f}, "
            f"penalty {lazy:.3f})"
        )
    weights = ", ".join(f"{w:.3f}" for w in result.evidence["weights"])
    lines.append(f"expertise weights lambda: {weights}; {len(result.evidence['wrong_answers'])} IW/CO pairs")
    if not p["penalty"]:
        lines.append("no laziness penalty: give a pool of questions to find neighbours in")
    lines.append(result.meta.cost())
    return "\n".join(lines)


def _check(kwargs: Mapping[str, Any], label: Callable[[str], str]) -> str | None:
    references = kwargs.get("references") or []
    if kwargs.get("n") is not None and len(references) > 1:
        return f"{label('n')} asks one {label('references')} model for N answers; {len(references)} references given"
    return None


METHOD = Method.from_module(
    __name__,
    answer_field="answers",
    model_field="references",
    positional=("question", "answers"),
    needs=(Need("question"), Need("answers", "candidates", answers="(one or more)", candidates="to answer")),
    check=_check,
    describe=describe,
)
detect, adetect = METHOD.detect, METHOD.adetect
