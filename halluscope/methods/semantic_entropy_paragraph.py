"""Semantic entropy for a paragraph (Farquhar et al., Nature 2024, "Detecting confabulations in
biographies") as a LangGraph graph:

    decompose the text into factual claims (one call)
      -> for claim k, with claims 1..k-1 as the text so far: questions that could have produced it,
         with their expected answers, in two batches of three (two calls, fanned out over claims)
      -> for each question, three new answers continuing the text so far (fanned out)
      -> per question, cluster [expected answer + the three new answers] by bidirectional entailment
         (shared stage with short-answer semantic entropy); discrete entropy, or the maximum
         log(number of answers) when at least half of them say the answer is unknown (official code)
      -> claim score = mean over its questions; each sentence scores as its most uncertain claim.

Calls: 1 + per claim 2 (+ retries of unreadable question lists) + 6 x 3 + the judge's. Defaults as
the official long-form code (jlko/long_hallucinations): two batches of three questions, three new
answers per question, lax equivalence.

A bad model answer never stops the paragraph: an unreadable claim list falls back to the sentences;
an unreadable question list is asked again (new sample, at most QUESTION_ATTEMPTS times, as the
official code retries); a claim left without questions gets the maximum entropy. Each such event
is kept with its claim and counted in the run metadata.
"""

from __future__ import annotations

import math
import operator
from collections import Counter
from dataclasses import dataclass
from functools import partial
from typing import Annotated, Any

from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Send
from typing_extensions import TypedDict  # a state pydantic reads (Studio's schemas) on Python 3.11

from halluscope.backends.entailment import Entailment, Mode, entailment_judge
from halluscope.backends.fanout import Ask, Calls
from halluscope.backends.gateway import Gateway, default_gateway
from halluscope.backends.models import ModelLike
from halluscope.backends.steps import Steps
from halluscope.errors import ConfigError
from halluscope.methods.sampling import answer_ask, clustering, read_answer
from halluscope.prompts.short_answer import ENTAILMENT
from halluscope.results import DetectionResult, Unit
from halluscope.runtime import contract, options
from halluscope.runtime.contract import Method, Need, RunContext, Streamed, arg
from halluscope.runtime.nodes import node, plan_calls, planner
from halluscope.scoring import ClusterRule, claim_entropy, question_entropy, unanswered
from halluscope.text import align_claims, tokens
from halluscope.text import sentences as split_sentences

NAME = "semantic-entropy-paragraph"
SUMMARY = "semantic entropy of a paragraph: decompose, question, resample, cluster (Farquhar et al.)"
DECOMPOSE = "semantic_entropy.decompose"
QUESTIONS, QUESTIONS_FIRST = "semantic_entropy.questions", "semantic_entropy.questions_first"
NEW_ANSWER, NEW_ANSWER_FIRST = "semantic_entropy.new_answer", "semantic_entropy.new_answer_first"
BATCHES = 2  # question-generation calls per claim
PER_BATCH = 3  # questions kept from each call (the prompt asks for three)
REGENERATE = 3  # new answers per question
QUESTION_ATTEMPTS = 3
QUESTIONS_MAX_TOKENS = 256
NEW_ANSWER_MAX_TOKENS = 32


def decompose_max_tokens(text: str) -> int:
    """Claims restate the text with the subject repeated: about twice its tokens bounds a full list."""
    return 2 * len(tokens(text)) + 100


def planned_calls(n_claims: int) -> int:
    """Model calls without the judge's and without retries."""
    return 1 + n_claims * (BATCHES + BATCHES * PER_BATCH * REGENERATE)


class QuestionsInput(TypedDict):
    k: int
    batch: int
    question: str
    claim: str
    text_so_far: str


class AnswerInput(TypedDict):
    k: int
    q: int
    r: int
    question: str
    claim_question: str
    text_so_far: str


class ClusterInput(TypedDict):
    k: int
    q: int
    claim_question: str
    answers: list[str]


class Asked(TypedDict):
    k: int
    batch: int
    pairs: list[dict[str, str]]  # {question, answer}


class NewAnswer(TypedDict):
    k: int
    q: int
    r: int
    text: str


class Scored(TypedDict):
    k: int
    q: int
    question: str
    answers: list[str]  # [expected answer, new answers...]
    clusters: list[list[int]]
    unanswered: bool
    entropy: float
    pairs_judged: int


class ScoredClaim(TypedDict):
    index: int
    text: str
    score: float  # mean entropy over its questions
    questions: list[Scored]


class ParagraphInput(TypedDict, total=False):
    """What a host passes in: the question (prompt), the text or its sentences."""

    question: str
    text: str
    sentences: list[str]


class ParagraphOutput(TypedDict, total=False):
    """What a host gets back (no input key, no reducer: a checkpointed host's next turn starts clean)."""

    scored_sentences: list[str]
    scored_claims: list[ScoredClaim]
    held: list[list[int]]  # claim indexes per sentence
    handled: list[dict[str, Any]]  # the bad model answers handled: {k, kind}; k = -1 for the paragraph


class ParagraphState(ParagraphInput, ParagraphOutput, total=False):
    claims: list[str]
    asked: Annotated[list[Asked], operator.add]
    new_answers: Annotated[list[NewAnswer], operator.add]
    scored: Annotated[list[Scored], operator.add]
    events: Annotated[list[dict[str, Any]], operator.add]


def text_so_far(claims: list[str], k: int) -> str:
    """Claims 1..k-1 joined by spaces, as the official code does."""
    return " ".join(claims[:k])


def questions_of(asked: list[Asked], k: int) -> list[dict[str, str]]:
    """Claim k's questions in batch order (each batch's first PER_BATCH)."""
    return [qa for a in sorted((a for a in asked if a["k"] == k), key=lambda a: a["batch"]) for qa in a["pairs"]]


@dataclass(frozen=True)
class Setup:
    """What the nodes share: the model that asks and answers the questions, the judge of equivalence,
    and how clusters are made and measured."""

    model: ModelLike
    judge: Entailment
    gateway: Gateway
    mode: Mode
    cluster_rule: ClusterRule
    base: float


def start(state: ParagraphState, config: RunnableConfig) -> dict[str, Any]:
    """The question and text checked, the sentences found; the decomposition's call announced (the rest
    is known once the claims are)."""
    if not (state.get("question") or "").strip():
        raise ConfigError("paragraph semantic entropy needs the question (prompt) the text answers")
    if not (state.get("text") or "").strip():
        raise ConfigError("the text to check is empty")
    plan_calls(config, 1)
    return {"sentences": state.get("sentences") or split_sentences(state["text"])}


def decompose(setup: Setup, state: ParagraphState, config: RunnableConfig) -> Steps[dict[str, Any]]:
    """The text as claims (an unreadable list: its sentences), and the calls the claims take."""
    params = {"max_tokens": decompose_max_tokens(state["text"])}
    reply = yield Calls(setup.gateway, Ask(setup.model, DECOMPOSE, {"text": state["text"]}, params))
    update: dict[str, Any] = (
        {"claims": list(reply.parsed)}
        if reply.ok
        else {"claims": list(state["sentences"]), "events": [{"k": -1, "kind": "decompose_unparsed"}]}
    )
    plan_calls(config, planned_calls(len(update["claims"])) - 1)
    return update


def route_questions(state: ParagraphState) -> list[Send]:
    claims = state["claims"]
    return [
        Send(
            "questions",
            QuestionsInput(k=k, batch=b, question=state["question"], claim=claim, text_so_far=text_so_far(claims, k)),
        )
        for k, claim in enumerate(claims)
        for b in range(BATCHES)
    ]


def questions(setup: Setup, state: QuestionsInput, config: RunnableConfig) -> Steps[dict[str, Any]]:
    """One batch of questions (with their expected answers) that claim k answers, given the text so far;
    an unreadable list is asked again, as a new sample."""
    first = not state["text_so_far"]
    variables = {"claim": state["claim"]} | ({} if first else {"text_so_far": state["text_so_far"]})
    events: list[dict[str, Any]] = []
    for attempt in range(QUESTION_ATTEMPTS):
        params = {"sample_index": state["batch"] + BATCHES * attempt, "max_tokens": QUESTIONS_MAX_TOKENS, "seed": 0}
        reply = yield Calls(setup.gateway, Ask(setup.model, QUESTIONS_FIRST if first else QUESTIONS, variables, params))
        if reply.ok:
            asked = Asked(k=state["k"], batch=state["batch"], pairs=list(reply.parsed)[:PER_BATCH])
            return {"asked": [asked], "events": events}
        events.append({"k": state["k"], "kind": "questions_unparsed"})
        if attempt + 1 < QUESTION_ATTEMPTS:
            plan_calls(config, 1)  # the next attempt
    return {"asked": [Asked(k=state["k"], batch=state["batch"], pairs=[])], "events": events}


def route_answers(state: ParagraphState) -> list[Send] | list[str]:
    sends = [
        Send(
            "new_answer",
            AnswerInput(
                k=k,
                q=q,
                r=r,
                question=state["question"],
                claim_question=qa["question"],
                text_so_far=text_so_far(state["claims"], k),
            ),
        )
        for k in range(len(state["claims"]))
        for q, qa in enumerate(questions_of(state["asked"], k))
        for r in range(REGENERATE)
    ]
    return sends or ["score"]


def new_answer(setup: Setup, state: AnswerInput, config: RunnableConfig) -> Steps[dict[str, Any]]:
    """A new short answer to one of claim k's questions, given the text so far."""
    first = not state["text_so_far"]
    variables = {"question": state["question"], "claim_question": state["claim_question"]}
    if not first:
        variables["text_so_far"] = state["text_so_far"]
    ask = answer_ask(
        setup.model,
        NEW_ANSWER_FIRST if first else NEW_ANSWER,
        variables,
        REGENERATE * state["q"] + state["r"],  # the same question asked twice gets its own samples
        NEW_ANSWER_MAX_TOKENS,
    )
    text, _ = read_answer((yield Calls(setup.gateway, ask)))
    return {"new_answers": [NewAnswer(k=state["k"], q=state["q"], r=state["r"], text=text)]}


def route_clusters(state: ParagraphState) -> list[Send]:
    sends = []
    for k in range(len(state["claims"])):
        for q, qa in enumerate(questions_of(state["asked"], k)):
            regenerated = sorted((a for a in state["new_answers"] if a["k"] == k and a["q"] == q), key=lambda a: a["r"])
            answers = [qa["answer"], *(a["text"] for a in regenerated)]
            sends.append(Send("cluster", ClusterInput(k=k, q=q, claim_question=qa["question"], answers=answers)))
    return sends


def cluster(setup: Setup, state: ClusterInput, config: RunnableConfig) -> Steps[dict[str, Any]]:
    """A question's expected and new answers clustered by the judge, and their entropy."""
    answers = state["answers"]
    clusters, pairs = yield from clustering(
        answers, setup.judge, state["claim_question"], setup.mode, rule=setup.cluster_rule, plan=planner(config)
    )
    scored = Scored(
        k=state["k"],
        q=state["q"],
        question=state["claim_question"],
        answers=answers,
        clusters=clusters,
        unanswered=unanswered(answers),
        entropy=question_entropy(answers, [len(c) for c in clusters], base=setup.base),
        pairs_judged=pairs,
    )
    return {"scored": [scored]}


def score(setup: Setup, state: ParagraphState) -> dict[str, Any]:
    """Each claim's score from its questions' entropies, and the claims held by each sentence."""
    scored = state.get("scored", [])
    claims, events = [], []
    for k, text in enumerate(state["claims"]):
        mine = sorted((s for s in scored if s["k"] == k), key=lambda s: s["q"])
        if not mine:
            events.append({"k": k, "kind": "no_questions"})
        value = claim_entropy([s["entropy"] for s in mine], REGENERATE, setup.base)
        claims.append(ScoredClaim(index=k, text=text, score=value, questions=mine))
    return {
        "scored_claims": claims,
        "held": align_claims(state["claims"], state["sentences"]),
        "events": events,
        "scored_sentences": state["sentences"],
        "handled": [*state.get("events", []), *events],
    }


def build(
    model: ModelLike,
    judge: Entailment,
    gateway: Gateway | None = None,
    mode: Mode = "lax",
    cluster_rule: ClusterRule = "paper",
    base: float = math.e,
) -> CompiledStateGraph:
    """The graph for one model that asks and answers the questions and one judge of equivalence."""
    setup = Setup(model, judge, gateway or default_gateway(), mode, cluster_rule, base)
    graph = StateGraph(ParagraphState, input_schema=ParagraphInput, output_schema=ParagraphOutput)
    graph.add_node("start", start)
    # each model-calling node runs its calls on threads under invoke, on the event loop under ainvoke
    graph.add_node("decompose", node("decompose", partial(decompose, setup)))
    graph.add_node("questions", node("questions", partial(questions, setup)), input_schema=QuestionsInput)
    graph.add_node("ask", lambda _state: {})
    graph.add_node("new_answer", node("new_answer", partial(new_answer, setup)), input_schema=AnswerInput)
    graph.add_node("judge", lambda _state: {})
    graph.add_node("cluster", node("cluster", partial(cluster, setup)), input_schema=ClusterInput)
    graph.add_node("score", partial(score, setup))
    graph.add_edge(START, "start")
    graph.add_edge("start", "decompose")
    graph.add_conditional_edges("decompose", route_questions, ["questions"])
    graph.add_edge("questions", "ask")
    graph.add_conditional_edges("ask", route_answers, ["new_answer", "score"])
    graph.add_edge("new_answer", "judge")
    graph.add_conditional_edges("judge", route_clusters, ["cluster"])
    graph.add_edge("cluster", "score")
    graph.add_edge("score", END)
    return graph.compile(name=NAME)


@dataclass(frozen=True, kw_only=True)
class Inputs:
    """An item: the paragraph (or its sentences) and the question or prompt it answers."""

    text: str | None = options.text()
    sentences: list[str] | None = options.sentences()
    question: str | None = options.question("the question or prompt the text answers", metavar="PROMPT")


@dataclass(frozen=True, kw_only=True)
class Options:
    model: ModelLike | None = options.model("decomposes the text, asks the questions and answers them again")
    judge: Entailment | str | None = options.judge()
    mode: Mode = options.mode("lax")
    cluster_rule: ClusterRule = options.cluster_rule()
    base: float = arg(math.e, help="the logarithm's base of the entropies (e: nats)", shown=False)


@dataclass(frozen=True)
class Prepared(contract.Prepared):
    judge: Entailment | None = None


def prepare(opts: Options, ctx: RunContext) -> Prepared:
    """The entailment judge from its spec, and the graph."""
    if opts.model is None:
        raise ConfigError("paragraph semantic entropy needs a model")
    judged = entailment_judge(opts.judge, ctx.gateway, prompt=ENTAILMENT)
    graph = build(opts.model, judged, ctx.gateway, mode=opts.mode, cluster_rule=opts.cluster_rule, base=opts.base)
    return Prepared(graph, opts, judged)


def run(prepared: Prepared, inputs: Inputs, ctx: RunContext) -> Steps[DetectionResult]:
    """Sentence scores of a paragraph (higher = more likely confabulated): each sentence scores as the
    most uncertain of its claims; the evidence holds those claims, their questions, answers and
    clusters. Give ``sentences`` to score a benchmark's own sentence split."""
    if inputs.text is None and not inputs.sentences:
        raise ConfigError("paragraph semantic entropy needs the text or its sentences")
    paragraph = inputs.text if inputs.text is not None else " ".join(inputs.sentences or [])
    state = ParagraphInput(question=inputs.question or "", text=paragraph, sentences=list(inputs.sentences or []))
    out = yield Streamed(ctx, prepared.graph, state)
    assert prepared.judge is not None
    return _result(out, ctx, prepared.judge, prepared.options, inputs.question or "")


def _result(out: dict[str, Any], ctx: RunContext, judge: Entailment, opts: Options, question: str) -> DetectionResult:
    """The result of one run, from the graph's final state."""
    claims: list[ScoredClaim] = out["scored_claims"]
    events = out.get("events", [])
    units = []
    for sentence, held in zip(out["sentences"], out["held"], strict=True):
        mine = [claims[k] for k in held]
        units.append(
            Unit(
                text=sentence,
                score=max((c["score"] for c in mine), default=None),
                evidence={
                    "claims": mine,
                    "events": [e["kind"] for e in events if e["k"] in held],
                },
            )
        )
    meta = ctx.meta(
        NAME,
        events=Counter(e["kind"] for e in events),
        question=question,
        judge=judge.name,
        mode=opts.mode,
        cluster_rule=opts.cluster_rule,
        base=opts.base,
        claims=len(claims),
        questions=sum(len(c["questions"]) for c in claims),
        pairs_judged=sum(q["pairs_judged"] for c in claims for q in c["questions"]),
        paragraph_events=[e["kind"] for e in events if e["k"] == -1],
    )
    return DetectionResult(method=NAME, units=units, meta=meta)


def describe(result: DetectionResult) -> str:
    """Each sentence with the claims it holds."""
    lines = [
        f"{result.method}: higher = more likely confabulated (nats; a sentence scores as its most uncertain claim)"
    ]
    for unit in result.units:
        lines.append(f"  {'  n/a' if unit.score is None else f'{unit.score:5.2f}'}  {unit.text}")
        lines += [f"         {c['score']:5.2f}  claim: {c['text']}" for c in unit.evidence["claims"]]
    p = result.meta.params
    lines.append(f"{p['claims']} claims, {p['questions']} questions")
    lines.append(result.meta.cost(f"{p['pairs_judged']} pairs judged"))
    return "\n".join(lines)


METHOD = Method.from_module(
    __name__,
    needs=(Need("text", "sentences"), Need("question"), Need("model")),
    describe=describe,
)
detect, adetect = METHOD.detect, METHOD.adetect
