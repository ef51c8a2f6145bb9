"""CLUE, concept-level uncertainty (Wang et al.), as a LangGraph graph:

    [sample N outputs at temperature 1 with the paper's prompt, fanned out, unless given]
      -> extract concepts from each output (Table 7's one-shot prompt, temperature 0), fanned out
      -> pool them and merge equivalent ones (both mutual zero-shot scores > 0.99, premise = one
         concept, hypothesis "This concept is similar to {other}"; greedy, the first seen is kept)
      -> score every pooled concept against every output: f(o_i, "This example is about {c}"),
         in one batch (and against reference texts, and the question baseline, on request)
      -> U(c) = -(1/N) sum_i log f(o_i, c), concepts sorted by uncertainty.

Calls: N samples (none when given) + N extractions + the merge's scorer calls (a forward score per
pair of concepts compared, a backward one only when the forward passes) + N x |pool| scores
(+ |pool| per reference text, + |pool| for the baseline).
"""

from __future__ import annotations

import operator
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Annotated, Any

from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Send
from typing_extensions import TypedDict  # a state pydantic reads (Studio's schemas) on Python 3.11

from halluscope.backends.embeddings import Embedder, default_embedder
from halluscope.backends.entailment import Scored, ZeroShot, zero_shot_judge
from halluscope.backends.fanout import Ask, Calls
from halluscope.backends.gateway import CallStats, Gateway, default_gateway
from halluscope.backends.models import ModelLike
from halluscope.backends.steps import Steps, finish
from halluscope.checks import finite_number
from halluscope.errors import ConfigError
from halluscope.methods.sampling import answer_ask, cluster_by, read_answer
from halluscope.results import DetectionResult, Unit
from halluscope.runtime import contract, options
from halluscope.runtime.contract import Flag, Method, Need, RunContext, Streamed, arg
from halluscope.runtime.nodes import node, plan_calls
from halluscope.scoring import (
    concept_uncertainties,
)
from halluscope.scoring.clue import FLOOR

NAME = "clue"
SUMMARY = "CLUE: uncertainty of each concept in a model's outputs for one prompt (Wang et al.)"
SAMPLE = "clue.sample"
CONCEPTS = "clue.concepts"
SAMPLE_MAX_TOKENS = 128  # "one single sentence with details"
CONCEPTS_MAX_TOKENS = 160
MERGE_THRESHOLD = 0.99
UNSCORED = 0.5  # a scorer answer with neither Yes nor No: no evidence either way (recorded as an event)
SIMILAR = "This concept is similar to {}"
ABOUT = "This example is about {}"
ZERO_SHOT = "clue.zero_shot"  # the prompt an LLM zero-shot scorer asks
RELEVANT = "This question is relevant to {}"
BASELINE = "question"


class Extracted(TypedDict):
    i: int
    concepts: list[str]
    raw: str
    parsed: bool


class Row(TypedDict):
    name: str  # "output:i", a reference's name, or BASELINE
    scores: list[float]
    unscored: int


class ClueInput(TypedDict, total=False):
    """What a host passes in: the question, outputs if it has them, references to score, the baseline flag."""

    question: str
    given: list[str]
    references: dict[str, str]
    baseline: bool


class ClueOutput(TypedDict, total=False):
    """What a host gets back (no input key, no reducer: a checkpointed host's next turn starts clean)."""

    outputs: list[str]
    pool: list[str]
    merged: dict[str, list[str]]
    merge_pairs: int
    rows: list[Row]


class ClueState(ClueInput, ClueOutput, total=False):
    sampled: Annotated[list[tuple[int, str]], operator.add]
    extracted: Annotated[list[Extracted], operator.add]


def _output(i: int) -> str:
    return f"output:{i}"


def pooled_concepts(extracted: Sequence[Extracted]) -> list[str]:
    """Every output's concepts in output order, identical ones (case and spacing aside) once."""
    seen: dict[str, str] = {}
    for item in sorted(extracted, key=lambda e: e["i"]):
        for concept in item["concepts"]:
            seen.setdefault(re.sub(r"\s+", " ", concept.strip().lower()), concept.strip())
    return list(seen.values())


def merge_concepts(
    concepts: Sequence[str],
    scorer: ZeroShot,
    threshold: float = MERGE_THRESHOLD,
    prefilter: float | None = None,
    embedder: Embedder | None = None,
    stats: CallStats | None = None,
) -> tuple[list[str], dict[str, list[str]], int]:
    """``merging`` run to its end on this thread."""
    return finish(merging(concepts, scorer, threshold, prefilter, embedder), stats)


def merging(
    concepts: Sequence[str],
    scorer: ZeroShot,
    threshold: float = MERGE_THRESHOLD,
    prefilter: float | None = None,
    embedder: Embedder | None = None,
) -> Steps[tuple[list[str], dict[str, list[str]], int]]:
    """Greedy consolidation (Section 4.1): a concept joins the first kept concept with which both
    mutual scores exceed ``threshold``. ``prefilter``: pairs whose embedding cosine is below it are
    taken as different without asking the scorer (an option; the paper asks for every pair).

    Returns the kept concepts, {kept: [concepts merged into it]}, and the pairs sent to the scorer."""
    if prefilter is not None and embedder is None:
        raise ConfigError("the merge pre-filter needs an embedder")
    cosine = embedder.similarity(concepts, concepts) if prefilter is not None and embedder and concepts else None
    asked = 0

    def same(k: int, j: int) -> Steps[bool]:  # the kept concept k, the new concept j
        nonlocal asked
        if cosine is not None and prefilter is not None and cosine[k, j] < prefilter:
            return False
        asked += 1
        kept, new = concepts[k], concepts[j]
        (forward,) = yield Scored(scorer, [(new, SIMILAR.format(kept))])
        if forward is None or forward <= threshold:
            return False
        (backward,) = yield Scored(scorer, [(kept, SIMILAR.format(new))])
        return backward is not None and backward > threshold

    clusters = yield from cluster_by(len(concepts), same)
    kept = [concepts[c[0]] for c in clusters]
    merged = {concepts[c[0]]: [concepts[i] for i in c[1:]] for c in clusters if len(c) > 1}
    return kept, merged, asked


@dataclass(frozen=True)
class Setup:
    """What the nodes share: the model that samples the outputs and extracts their concepts (None:
    outputs are always given), the zero-shot scorer, the sample count and how concepts merge."""

    model: ModelLike | None
    scorer: ZeroShot
    gateway: Gateway
    n: int
    threshold: float
    prefilter: float | None
    embedder: Embedder | None


def start(setup: Setup, state: ClueState, config: RunnableConfig) -> dict[str, Any]:
    """The question checked; the samples' and extractions' calls announced (scoring's once merged)."""
    if not (state.get("question") or "").strip():
        raise ConfigError("CLUE needs the question (the prompt that the outputs answer)")
    if setup.model is None:
        raise ConfigError("CLUE needs a model: it extracts the concepts, and samples the outputs unless given")
    given = len(state.get("given") or [])
    plan_calls(config, given if given else 2 * setup.n)
    return {}


def route(setup: Setup, state: ClueState) -> list[Send]:
    if state.get("given"):
        return [Send("extract", {"i": i, "text": t}) for i, t in enumerate(state["given"])]
    return [Send("sample", {"j": j, "question": state["question"]}) for j in range(setup.n)]


def sample(setup: Setup, state: dict[str, Any], config: RunnableConfig) -> Steps[dict[str, Any]]:
    """Output j at temperature 1 with the paper's one-sentence prompt."""
    assert setup.model is not None
    ask = answer_ask(setup.model, SAMPLE, {"question": state["question"]}, state["j"], SAMPLE_MAX_TOKENS)
    text, _ = read_answer((yield Calls(setup.gateway, ask)))
    return {"sampled": [(state["j"], text)]}


def collect(state: ClueState) -> dict[str, Any]:
    return {}  # the N samples join here, so extraction fans out once


def fan_extract(state: ClueState) -> list[Send]:
    return [Send("extract", {"i": j, "text": text}) for j, text in sorted(state["sampled"])]


def extract(setup: Setup, state: dict[str, Any], config: RunnableConfig) -> Steps[dict[str, Any]]:
    """Table 7's one-shot extraction of an output's concepts."""
    assert setup.model is not None
    if not state["text"].strip():
        return {"extracted": [Extracted(i=state["i"], concepts=[], raw="", parsed=False)]}
    ask = Ask(setup.model, CONCEPTS, {"output": state["text"]}, {"max_tokens": CONCEPTS_MAX_TOKENS})
    reply = yield Calls(setup.gateway, ask)
    concepts = list(reply.parsed) if reply.ok else []
    return {"extracted": [Extracted(i=state["i"], concepts=concepts, raw=reply.text, parsed=reply.ok)]}


def merge(setup: Setup, state: ClueState, config: RunnableConfig) -> Steps[dict[str, Any]]:
    """The outputs' concepts pooled and merged where both mutual scores pass the threshold."""
    outputs = list(state["given"]) if state.get("given") else [t for _, t in sorted(state["sampled"])]
    pool, merged, asked = yield from merging(
        pooled_concepts(state["extracted"]), setup.scorer, setup.threshold, setup.prefilter, setup.embedder
    )
    return {"outputs": outputs, "pool": pool, "merged": merged, "merge_pairs": asked}


def score(setup: Setup, state: ClueState, config: RunnableConfig) -> Steps[dict[str, Any]]:
    """Every kept concept against every output (and reference, and the question for the baseline) in
    one batch, premise by premise: an NLI scorer fills its batches, and a local LLM scorer keeps each
    premise's KV prefix across its hypotheses (parallel nodes would interleave premises)."""
    pool = state["pool"]
    if not pool:
        return {"rows": []}
    about = [ABOUT.format(c) for c in pool]
    premises = {_output(i): o for i, o in enumerate(state["outputs"])} | dict(state.get("references") or {})
    jobs = [(name, text, about) for name, text in premises.items()]
    if state.get("baseline"):
        jobs.append((BASELINE, state["question"], [RELEVANT.format(c) for c in pool]))
    pairs = [(text, h) for _, text, hyps in jobs for h in hyps]
    plan_calls(config, setup.scorer.replies_for(len(pairs)))
    probs = yield Scored(setup.scorer, pairs)
    rows = []
    for k, (name, _, _) in enumerate(jobs):
        part = probs[k * len(pool) : (k + 1) * len(pool)]
        scores = [UNSCORED if p is None else float(p) for p in part]
        rows.append(Row(name=name, scores=scores, unscored=sum(p is None for p in part)))
    return {"rows": rows}


def build(
    model: ModelLike | None,
    scorer: ZeroShot,
    gateway: Gateway | None = None,
    n: int = 5,
    threshold: float = MERGE_THRESHOLD,
    prefilter: float | None = None,
    embedder: Embedder | None = None,
) -> CompiledStateGraph:
    """The graph for one generating model (None: outputs are always given) and one zero-shot scorer.
    The model also extracts the concepts (the paper uses one LLM for both)."""
    if n < 1:
        raise ConfigError(f"CLUE needs at least one output, got n={n}")
    if not 0.0 < threshold <= 1.0:
        raise ConfigError(f"the merge threshold is a probability in (0, 1], got {threshold}")
    if prefilter is not None and embedder is None:
        embedder = default_embedder()
    setup = Setup(model, scorer, gateway or default_gateway(), n, threshold, prefilter, embedder)
    graph = StateGraph(ClueState, input_schema=ClueInput, output_schema=ClueOutput)
    graph.add_node("start", partial(start, setup))
    # the model's and an LLM scorer's calls run on threads under invoke, on the event loop under ainvoke
    graph.add_node("sample", node("sample", partial(sample, setup)))
    graph.add_node("collect", collect)
    graph.add_node("extract", node("extract", partial(extract, setup)))
    graph.add_node("merge", node("merge", partial(merge, setup)))
    graph.add_node("score", node("score", partial(score, setup)))
    graph.add_edge(START, "start")
    graph.add_conditional_edges("start", partial(route, setup), ["sample", "extract"])
    graph.add_edge("sample", "collect")
    graph.add_conditional_edges("collect", fan_extract, ["extract"])
    graph.add_edge("extract", "merge")
    graph.add_edge("merge", "score")
    graph.add_edge("score", END)
    return graph.compile(name=NAME)


def _input(
    question: str, outputs: Sequence[str] | None, references: Mapping[str, str] | None, baseline: bool
) -> ClueState:
    clash = [k for k in references or {} if k == BASELINE or k.startswith("output:")]
    if clash:
        raise ConfigError(f"reference names {clash} are taken (BASELINE and 'output:i' name the graph's own rows)")
    return {
        "question": question,
        "given": list(outputs or []),
        "references": dict(references or {}),
        "baseline": baseline,
    }


def _read(out: dict[str, Any], references: Mapping[str, str] | None) -> dict[str, Any]:
    """What ``run`` returns, from the graph's final state."""
    rows = {r["name"]: r for r in out.get("rows", [])}
    outputs_used = out["outputs"]
    extracted = sorted(out["extracted"], key=lambda e: e["i"])
    pool = out["pool"]
    matrix = [rows[_output(i)]["scores"] for i in range(len(outputs_used))] if pool else []
    events = {
        "concepts_unparsed": sum(not e["parsed"] for e in extracted),
        "scores_unscored": sum(r["unscored"] for r in rows.values()),
    }
    return {
        "outputs": outputs_used,
        "extracted": extracted,
        "pool": pool,
        "merged": out["merged"],
        "merge_pairs": out["merge_pairs"],
        "matrix": matrix,
        "uncertainty": concept_uncertainties(matrix) if pool else [],
        "references": {k: rows[k]["scores"] for k in (references or {}) if k in rows},
        "baseline": rows[BASELINE]["scores"] if BASELINE in rows else None,
        "events": {k: v for k, v in events.items() if v},
    }


@dataclass(frozen=True, kw_only=True)
class Inputs:
    """An item: the prompt, the outputs when they are not to be sampled, and named texts to score."""

    question: str | None = options.question("the prompt that the outputs answer", metavar="PROMPT")
    outputs: list[str] | None = options.texts_file("--outputs-file", "outputs you already have")
    references: dict[str, str] | None = arg(
        help="named texts scored against every concept beside the outputs (CLUE's benchmark: the QNLI answers)"
    )


@dataclass(frozen=True, kw_only=True)
class Options:
    model: ModelLike | None = options.model("extracts the concepts (and samples the outputs unless given)")
    judge: ZeroShot | str | None = options.judge("zero-shot scorer")
    n: int = options.samples(5, "outputs sampled when none are given")
    threshold: float = arg(MERGE_THRESHOLD, help="mutual entailment above which two concepts merge")
    prefilter: float | None = arg(
        help="ask the scorer to merge only concept pairs with embedding cosine >= COS (default: every pair)",
        flags=(Flag(("--prefilter",), type=finite_number, metavar="COS"),),
    )
    baseline: bool = arg(
        True, help="score each concept's question relevance too, one more scorer call per concept (the baseline)"
    )
    embedder: Embedder | None = arg(help="the embeddings of --prefilter (default: all-MiniLM-L6-v2)", refers="model")


@dataclass(frozen=True)
class Prepared(contract.Prepared):
    scorer: ZeroShot | None = None


def prepare(opts: Options, ctx: RunContext) -> Prepared:
    """The zero-shot scorer from its spec, and the graph."""
    scorer = zero_shot_judge(opts.judge, ctx.gateway, prompt=ZERO_SHOT)
    graph = build(
        opts.model,
        scorer,
        ctx.gateway,
        n=opts.n,
        threshold=opts.threshold,
        prefilter=opts.prefilter,
        embedder=opts.embedder,
    )
    return Prepared(graph, opts, scorer)


def run(prepared: Prepared, inputs: Inputs, ctx: RunContext) -> Steps[DetectionResult]:
    """Concept-level uncertainty of a model's outputs for one prompt. Units are the pooled concepts,
    most uncertain first; a unit's score is U(c) in nats (higher = more likely hallucinated), its
    evidence the per-output scores, the concepts merged into it, each reference's score and, with
    ``baseline``, the question relevance f(question, "This question is relevant to c")."""
    given = [o for o in inputs.outputs or [] if o.strip()]
    if inputs.outputs is not None and not given:
        raise ConfigError("the outputs given are all empty")
    opts: Options = prepared.options
    state = _input(inputs.question or "", given, inputs.references, opts.baseline)
    out = _read((yield Streamed(ctx, prepared.graph, state)), inputs.references)
    assert prepared.scorer is not None
    return _result(out, ctx, prepared.scorer, opts, inputs)


def _result(out: dict[str, Any], ctx: RunContext, scorer: ZeroShot, opts: Options, inputs: Inputs) -> DetectionResult:
    """The result of one run, from ``_read``'s output."""
    units = []
    for j, concept in enumerate(out["pool"]):
        evidence: dict[str, Any] = {
            "scores": [row[j] for row in out["matrix"]],
            "merged": out["merged"].get(concept, []),
        }
        if out["baseline"] is not None:
            evidence["question_relevance"] = out["baseline"][j]
        if out["references"]:
            evidence["references"] = {name: scores[j] for name, scores in out["references"].items()}
        units.append(Unit(text=concept, score=out["uncertainty"][j], evidence=evidence))
    units.sort(key=lambda u: -(u.score or 0.0))
    meta = ctx.meta(
        NAME,
        events=out["events"],
        n=len(out["outputs"]),
        outputs_given=any(o.strip() for o in inputs.outputs or []),
        scorer=scorer.name,
        merge_threshold=opts.threshold,
        merge_prefilter=opts.prefilter,
        merge_pairs=out["merge_pairs"],
        concepts_extracted=sum(len(e["concepts"]) for e in out["extracted"]),
        concepts_kept=len(out["pool"]),
        score_floor=FLOOR,
    )
    return DetectionResult(
        method=NAME,
        units=units,
        meta=meta,
        evidence={"question": inputs.question, "outputs": out["outputs"], "extracted": out["extracted"]},
    )


def describe(result: DetectionResult) -> str:
    """The concepts, most uncertain first, with what was merged into each."""
    p = result.meta.params
    lines = [f"clue: concept uncertainty U(c) in nats over {p['n']} outputs, higher = more uncertain"]
    for unit in result.units:
        merged = unit.evidence["merged"]
        lines.append(f"  {unit.score:6.3f}  {unit.text}" + (f"  (merged: {'; '.join(merged)})" if merged else ""))
    lines.append(f"{p['concepts_extracted']} concepts extracted, {p['concepts_kept']} kept")
    lines.append(result.meta.cost(f"{p['merge_pairs']} pairs asked in merging"))
    return "\n".join(lines)


METHOD = Method.from_module(
    __name__,
    answer_field=None,
    positional=("question",),
    needs=(Need("question"), Need("model")),
    describe=describe,
)
detect, adetect = METHOD.detect, METHOD.adetect
