"""FIBE, the multiple-fill-in-the-blank exam (Hirano et al.), with Direct Question, Snowballing
Correction and the SCGP ensemble, as one LangGraph graph per variant:

    split -> create the exam (E.3.1, one call) -> answer it N times (E.3.2, fanned out)
          -> grade each sentence's N answers in one call (E.3.3, fanned out over |R|)
          [-> Direct Question per sentence (E.4)] [-> SelfCheck-Prompt (E.1, E.2)] -> combine

Calls: 1 + N + |R| for FIBE, + |R| with DQ, + N|R| (+ N to regenerate) with SCGP. The stages run
one after another, each fanned out inside: a local model then answers the N copies of one exam
back to back and reuses their shared prompt prefix (interleaving other prompts would evict it).

A bad model answer never stops the passage: a create() answer that cannot be read leaves the
sentences unmasked; a sentence missing from an exam answer, or a student the grader did not score,
drops that answer for that sentence; a sentence left with no graded answer gets H_F = 0.5 (as SCGP's
"otherwise"). Every such event is kept with its sentence and counted in the run metadata.
"""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Mapping
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
from halluscope.methods import selfcheck_prompt
from halluscope.results import DetectionResult, Unit
from halluscope.runtime import options
from halluscope.runtime.contract import Method, Need, Prepared, RunContext, Streamed, arg
from halluscope.runtime.nodes import Subgraph, node, plan_calls
from halluscope.scoring.fibe import (
    THETA,
    build_exam,
    ensemble_weights,
    fibe_score,
    first_token_probability,
    known_value,
    variant_scores,
)
from halluscope.text import checked_passage
from halluscope.text import sentences as split_sentences

CREATE, ANSWER, SCORE, DIRECT_QUESTION = "fibe.create", "fibe.answer", "fibe.score", "fibe.direct_question"
# Fixed examinee names (the paper's five first); student j is always STUDENTS[j].
STUDENTS = ("Tom", "Amy", "Max", "Leo", "Ava", "Ben", "Eva", "Sam", "Zoe", "Ian")
UNGRADED = 0.5  # H_F of a sentence with no graded answer (SCGP's value for an answer that is neither)


def create_max_tokens(n_sentences: int) -> int:
    """Bounds against runaway generation on local models: about twice what a full answer takes."""
    return 150 * n_sentences + 100


def answer_max_tokens(n_sentences: int) -> int:
    return 80 * n_sentences + 100


def _score_max_tokens(n_students: int) -> int:
    return 10 * n_students + 20


DIRECT_QUESTION_MAX_TOKENS = 8


@dataclass(frozen=True)
class Variant:
    direct_question: bool = False
    selfcheck: bool = False
    sbc: bool = False


VARIANTS = {
    "fibe": Variant(),
    "fibe+dq": Variant(direct_question=True),
    "fibe+sbc": Variant(sbc=True),
    "fibe+sbc+dq": Variant(direct_question=True, sbc=True),
    "fibe+selfcheck+sbc": Variant(selfcheck=True, sbc=True),
    "fibe+selfcheck+sbc+dq": Variant(direct_question=True, selfcheck=True, sbc=True),
}


def planned_calls(variant: str, n: int, n_sentences: int) -> int:
    """Model calls one passage takes when every answer is readable (SCGP on given samples)."""
    v, r = VARIANTS[variant], n_sentences
    return 1 + n + r + (r if v.direct_question else 0) + (n * r if v.selfcheck else 0)


class AnswerSheet(TypedDict):
    j: int
    sentences: dict[str, str]  # str(sentence index) -> the filled-in sentence
    raw: str


class Grade(TypedDict):
    i: int
    scores: dict[str, float]  # str(answer index j) -> 0..100
    raw: str


class Known(TypedDict):
    i: int
    answer: str | None  # 'yes', 'no', or None when neither
    p_first: float | None
    known: float
    raw: str


class FIBEInput(TypedDict, total=False):
    """What a host passes in."""

    text: str
    prompt: str  # the original prompt P, the exam's context
    sentences: list[str]
    samples: list[str]  # for SCGP: given, or regenerated


class FIBEOutput(TypedDict, total=False):
    """What a host gets back: no input key and no reducer, so a checkpointed host's next turn starts clean."""

    scored_sentences: list[str]
    exam: list[str]
    answer_key: dict[str, str]
    parts: dict[str, list[float]]  # H_F, H_D, H_P per sentence, before SBC
    scores: list[float]
    handled: list[dict[str, Any]]  # the bad model answers handled (the run's events)


class FIBEState(FIBEInput, FIBEOutput, total=False):
    created: list[dict[str, Any]]
    events: Annotated[list[dict[str, Any]], operator.add]
    answers: Annotated[list[AnswerSheet], operator.add]
    grades: Annotated[list[Grade], operator.add]
    known: Annotated[list[Known], operator.add]
    selfcheck: list[float]
    selfcheck_verdicts: list[dict[str, Any]]


class AnswerInput(TypedDict):
    j: int
    prompt: str
    exam: list[str]


class GradeInput(TypedDict):
    i: int
    correct: str
    students: dict[str, str]  # str(j) -> answer


class KnownInput(TypedDict):
    i: int
    prompt: str
    claim: str


def quoted(prompt: str) -> str:
    """The paper's {context}: the original prompt in quotes ('' when there is none)."""
    return f'"{prompt.strip()}"' if prompt.strip() else ""


def numbered(lines: list[str]) -> str:
    return "\n".join(f"[s{i}] {line}" for i, line in enumerate(lines))


def _context_line(prompt: str) -> str:
    """E.3.1's and E.3.2's {context}: the quoted prompt and a newline ('' when there is none)."""
    return f"{quoted(prompt)}\n" if prompt.strip() else ""


def ask_direct_question(gateway: Gateway, model: ModelLike, question: KnownInput, logprobs: bool) -> Steps[Known]:
    """E.4 for one claim: the answer, p_1 of its first token (with ``logprobs``), and known()."""
    variables = {"context": quoted(question["prompt"]), "claim": question["claim"]}
    params = {"max_tokens": DIRECT_QUESTION_MAX_TOKENS, **({"logprobs": True} if logprobs else {})}
    reply = yield Calls(gateway, Ask(model, DIRECT_QUESTION, variables, params))
    said = reply.parsed if reply.ok else None
    p_first = first_token_probability(reply.logprobs) if logprobs else None
    return {
        "i": question["i"],
        "answer": said,
        "p_first": p_first,
        "known": known_value(said, p_first),
        "raw": reply.text,
    }


def create_variables(prompt: str, sentences: list[str]) -> dict[str, Any]:
    """E.3.1's {context}, {sentences} ('[sK] ...' lines) and {sids}."""
    return {
        "context": _context_line(prompt),
        "sentences": numbered(sentences),
        "sids": ",".join(f"[s{i}]" for i in range(len(sentences))),
    }


def answer_variables(prompt: str, exam: list[str]) -> dict[str, Any]:
    """E.3.2's {context}, {source} (the exam's '[sK] ...' lines) and {max_sentences}."""
    return {
        "context": _context_line(prompt),
        "source": numbered(exam),
        "max_sentences": len(exam) - 1,
    }


@dataclass(frozen=True)
class Exam:
    """What every node of one FIBE variant's graph shares: its model and gateway, its settings, and
    SelfCheck-Prompt's graph in the +selfcheck variants."""

    model: ModelLike
    gateway: Gateway
    n: int
    variant: str
    theta: float
    dq_logprobs: bool
    scgp: CompiledStateGraph | None

    @property
    def steps(self) -> Variant:
        return VARIANTS[self.variant]

    @property
    def after_grading(self) -> str:
        v = self.steps
        return "direct_question_all" if v.direct_question else ("selfcheck" if v.selfcheck else "combine")

    @property
    def after_direct_question(self) -> str:
        return "selfcheck" if self.steps.selfcheck else "combine"


def split(exam: Exam, state: FIBEState, config: RunnableConfig) -> dict[str, Any]:
    """The passage's sentences; the calls they take are announced (SelfCheck-Prompt's own are its)."""
    found = state.get("sentences") or split_sentences(state.get("text", ""))
    if not found:
        raise ConfigError("FIBE needs a non-empty text (no sentence found)")
    selfcheck = exam.n * len(found) if exam.steps.selfcheck else 0
    plan_calls(config, planned_calls(exam.variant, exam.n, len(found)) - selfcheck)
    return {"sentences": found}


def create(exam: Exam, state: FIBEState, config: RunnableConfig) -> Steps[dict[str, Any]]:
    """E.3.1: the model blanks out the passage's key words; the exam and its answer key are built."""
    sentences = state["sentences"]
    variables = create_variables(state.get("prompt", ""), sentences)
    params = {"max_tokens": create_max_tokens(len(sentences))}
    reply = yield Calls(exam.gateway, Ask(exam.model, CREATE, variables, params))
    events: list[dict[str, Any]] = []
    created = reply.parsed if reply.ok else []
    if not reply.ok:
        events.append({"sentence": None, "event": "create_unparsed", "detail": reply.text[:200]})
    made = build_exam(sentences, created)
    return {"created": created, "exam": made.sentences, "answer_key": made.answer_key, "events": events + made.events}


def fan_answers(exam: Exam, state: FIBEState) -> list[Send]:
    return [Send("answer", AnswerInput(j=j, prompt=state.get("prompt", ""), exam=state["exam"])) for j in range(exam.n)]


def answer(exam: Exam, state: AnswerInput, config: RunnableConfig) -> Steps[dict[str, Any]]:
    """E.3.2: student j fills in the blanks (sample j of the same prompt)."""
    variables = answer_variables(state["prompt"], state["exam"])
    params = {"sample_index": state["j"], "max_tokens": answer_max_tokens(len(state["exam"]))}
    reply = yield Calls(exam.gateway, Ask(exam.model, ANSWER, variables, params))
    filled = reply.parsed if reply.ok else {}
    sheet: AnswerSheet = {
        "j": state["j"],
        "sentences": {str(i): filled[i] for i in range(len(state["exam"])) if filled.get(i)},
        "raw": reply.text,
    }
    events = [
        {"sentence": i, "event": "missing_answer", "detail": f"answer {state['j']}"}
        for i in range(len(state["exam"]))
        if str(i) not in sheet["sentences"]
    ]
    return {"answers": [sheet], "events": events}


def fan_grades(exam: Exam, state: FIBEState) -> list[Send] | list[str]:
    """One grading per sentence that some student answered (none answered: straight on)."""
    sends = []
    for i, sentence in enumerate(state["sentences"]):
        students = {
            str(a["j"]): a["sentences"][str(i)]
            for a in sorted(state["answers"], key=lambda a: a["j"])
            if str(i) in a["sentences"]
        }
        if students:
            sends.append(Send("grade", GradeInput(i=i, correct=sentence, students=students)))
    return sends or [exam.after_grading]


def grade(exam: Exam, state: GradeInput, config: RunnableConfig) -> Steps[dict[str, Any]]:
    """E.3.3: the students' answers to one sentence graded 0-100 against the original."""
    lines = "\n".join(f"[{STUDENTS[int(j)]}] {said}" for j, said in state["students"].items())
    variables = {"correct_answer": state["correct"], "student_answers": lines}
    params = {"max_tokens": _score_max_tokens(len(state["students"]))}
    reply = yield Calls(exam.gateway, Ask(exam.model, SCORE, variables, params))
    by_name = {name.lower(): score for name, score in (reply.parsed if reply.ok else {}).items()}
    scores = {j: by_name[STUDENTS[int(j)].lower()] for j in state["students"] if STUDENTS[int(j)].lower() in by_name}
    if not reply.ok:
        events = [{"sentence": state["i"], "event": "grade_unparsed", "detail": reply.text[:200]}]
    else:
        events = [
            {"sentence": state["i"], "event": "grade_missing", "detail": STUDENTS[int(j)]}
            for j in state["students"]
            if j not in scores
        ]
    return {"grades": [Grade(i=state["i"], scores=scores, raw=reply.text)], "events": events}


def fan_direct_questions(state: FIBEState) -> list[Send]:
    return [
        Send("direct_question", KnownInput(i=i, prompt=state.get("prompt", ""), claim=sentence))
        for i, sentence in enumerate(state["sentences"])
    ]


def direct_question(exam: Exam, state: KnownInput, config: RunnableConfig) -> Steps[dict[str, Any]]:
    """E.4: does the model know the sentence's claim (H_D = 1 - known)?"""
    known = yield from ask_direct_question(exam.gateway, exam.model, state, exam.dq_logprobs)
    return {"known": [known]}


def selfcheck(exam: Exam, state: FIBEState, config: RunnableConfig) -> Steps[dict[str, Any]]:
    """SelfCheck-Prompt's H_P, by its own graph, on the given samples or its own."""
    assert exam.scgp is not None
    scgp_state: dict[str, Any] = {"sentences": state["sentences"], "concept": state.get("prompt", "")}
    if state.get("samples"):
        scgp_state["samples"] = state["samples"]
    out = yield Subgraph(exam.scgp, scgp_state, config)
    return {"selfcheck": out["scores"], "samples": out["used_samples"], "selfcheck_verdicts": out["verdicts"]}


def combine(exam: Exam, state: FIBEState) -> dict[str, Any]:
    """H_F per sentence from its grades, then the variant's ensemble and snowballing correction."""
    grades = {g["i"]: g for g in state.get("grades", [])}
    graded = [list(grades[i]["scores"].values()) if i in grades else [] for i in range(len(state["sentences"]))]
    events = [{"sentence": i, "event": "ungraded"} for i, scores in enumerate(graded) if not scores]
    parts = {"fibe": [fibe_score(scores) if scores else UNGRADED for scores in graded]}
    if exam.steps.direct_question:
        known = {k["i"]: k["known"] for k in state["known"]}
        parts["direct_question"] = [1.0 - known[i] for i in range(len(state["sentences"]))]
    if exam.steps.selfcheck:
        parts["selfcheck"] = state["selfcheck"]
    return {
        "parts": parts,
        "scores": variant_scores(parts, exam.steps.sbc, exam.theta),
        "events": events,
        "scored_sentences": state["sentences"],
        "handled": [*state.get("events", []), *events],
    }


def build(
    model: ModelLike,
    gateway: Gateway | None = None,
    n: int = 5,
    variant: str = "fibe",
    theta: float = THETA,
    dq_logprobs: bool | None = None,
) -> CompiledStateGraph:
    """The graph of one FIBE variant (see VARIANTS) for one model.

    ``dq_logprobs``: read known() from the first answer token's probability, as the paper does when
    the model gives it; None asks for it where ``Gateway.gives_logprobs`` says the model has them."""
    if variant not in VARIANTS:
        raise ConfigError(f"unknown FIBE variant {variant!r}; available: {', '.join(VARIANTS)}")
    if not 1 <= n <= len(STUDENTS):
        raise ConfigError(f"FIBE needs 1 to {len(STUDENTS)} exam answers (one per named student), got n={n}")
    gw = gateway or default_gateway()
    v = VARIANTS[variant]
    exam = Exam(
        model=model,
        gateway=gw,
        n=n,
        variant=variant,
        theta=theta,
        dq_logprobs=gw.gives_logprobs(model) if dq_logprobs is None else dq_logprobs,
        scgp=selfcheck_prompt.build(model, gw, n=n) if v.selfcheck else None,
    )
    graph = StateGraph(FIBEState, input_schema=FIBEInput, output_schema=FIBEOutput)
    graph.add_node("split", partial(split, exam))
    # each model-calling node runs its calls on threads under invoke, on the event loop under ainvoke
    graph.add_node("create", node("create", partial(create, exam)))
    graph.add_node("answer", node("answer", partial(answer, exam)), input_schema=AnswerInput)
    graph.add_node("grade_all", lambda state: {})  # join: all N answers are in
    graph.add_node("grade", node("grade", partial(grade, exam)), input_schema=GradeInput)
    graph.add_node("combine", partial(combine, exam))
    graph.add_edge(START, "split")
    graph.add_edge("split", "create")
    graph.add_conditional_edges("create", partial(fan_answers, exam), ["answer"])
    graph.add_edge("answer", "grade_all")
    graph.add_conditional_edges("grade_all", partial(fan_grades, exam), ["grade", exam.after_grading])
    graph.add_edge("grade", exam.after_grading)
    if v.direct_question:
        graph.add_node("direct_question_all", lambda state: {})
        graph.add_node(
            "direct_question", node("direct_question", partial(direct_question, exam)), input_schema=KnownInput
        )
        graph.add_conditional_edges("direct_question_all", fan_direct_questions, ["direct_question"])
        graph.add_edge("direct_question", exam.after_direct_question)
    if v.selfcheck:
        graph.add_node("selfcheck", node("selfcheck", partial(selfcheck, exam)))
        graph.add_edge("selfcheck", "combine")
    graph.add_edge("combine", END)
    return graph.compile(name=variant)


Inputs = options.PromptedText


@dataclass(frozen=True, kw_only=True)
class SelfCheckInputs(Inputs):
    """The +selfcheck variants' item: SelfCheck-Prompt's samples too (or it regenerates them from the prompt)."""

    samples: list[str] | None = options.texts_file("--samples-file", "passages for SelfCheck-Prompt")


@dataclass(frozen=True, kw_only=True)
class Options:
    model: ModelLike | None = options.model("writes, takes and grades the exam")
    n: int = options.samples(
        5, "students who take the exam (and SelfCheck-Prompt's samples in +selfcheck)", most=len(STUDENTS)
    )
    theta: float = arg(THETA, help="the exam grade above which a sentence's answer counts as correct")
    dq_logprobs: bool | None = arg(
        help="Direct Question reads the first answer token's probability (default: where the model gives them)"
    )


def prepare(opts: Options, ctx: RunContext, variant: str) -> Prepared:
    """The variant's graph for the options' model."""
    if opts.model is None:
        raise ConfigError(f"{variant} needs a model")
    graph = build(opts.model, ctx.gateway, n=opts.n, variant=variant, theta=opts.theta, dq_logprobs=opts.dq_logprobs)
    return Prepared(graph, opts)


def run(prepared: Prepared, inputs: Inputs, ctx: RunContext, variant: str) -> Steps[DetectionResult]:
    """One FIBE variant on one passage: per-sentence scores with the exam, the answers, the grades (and
    DQ / SCGP evidence), and run metadata with every handled event counted."""
    samples_in = getattr(inputs, "samples", None)
    text, sentences, samples = checked_passage(inputs.text, inputs.sentences, samples_in)
    state: FIBEState = {"text": text or "", "prompt": inputs.prompt or ""}
    if sentences:
        state["sentences"] = sentences
    if samples:
        state["samples"] = samples
    out = yield Streamed(ctx, prepared.graph, state)
    opts: Options = prepared.options
    return _result(variant, out, ctx, n=opts.n, theta=opts.theta, samples_given=bool(samples))


def _result(variant: str, out: dict[str, Any], ctx: RunContext, **params: Any) -> DetectionResult:
    v = VARIANTS[variant]
    events: list[dict[str, Any]] = out.get("events", [])
    answers = sorted(out["answers"], key=lambda a: a["j"])
    grades = {g["i"]: g for g in out.get("grades", [])}
    known = {k["i"]: k for k in out.get("known", [])}
    verdicts = sorted(out.get("selfcheck_verdicts", []), key=lambda x: (x["i"], x["j"]))
    units = []
    for i, sentence in enumerate(out["sentences"]):
        mine = [e for e in events if e["sentence"] == i]
        evidence: dict[str, Any] = {
            "exam": out["exam"][i],
            "answers": {STUDENTS[a["j"]]: a["sentences"].get(str(i)) for a in answers},
            "grades": {STUDENTS[int(j)]: s for j, s in grades[i]["scores"].items()} if i in grades else {},
            **{f"h_{name}": values[i] for name, values in out["parts"].items()},
        }
        if v.direct_question:
            evidence["direct_question"] = {k: known[i][k] for k in ("answer", "p_first", "known", "raw")}
        if v.selfcheck:
            evidence["supported"] = [x["answer"] for x in verdicts if x["i"] == i]
        if mine:
            evidence["events"] = [{k: e[k] for k in e if k != "sentence"} for e in mine]
        parsed = not any(e["event"] in ("ungraded", "not_in_exam") for e in mine)
        units.append(Unit(text=sentence, score=out["scores"][i], parsed=parsed, evidence=evidence))
    meta = ctx.meta(
        variant,
        events=Counter(e["event"] for e in events),
        weights=ensemble_weights(True, v.direct_question, v.selfcheck),
        sbc=v.sbc,
        **params,
    )
    return DetectionResult(
        method=variant,
        units=units,
        meta=meta,
        evidence={
            "exam": out["exam"],
            "answer_key": out["answer_key"],
            "answers_raw": [a["raw"] for a in answers],
            "events": events,
            **({"samples": out["samples"]} if v.selfcheck else {}),
        },
    )


def _method(variant: str) -> Method:
    """One FIBE variant as a method of its own ('fibe+sbc+dq'), as the paper's tables name them."""
    v = VARIANTS[variant]
    parts = ["the exam"] + ["Snowballing Correction"] * v.sbc + ["Direct Question"] * v.direct_question
    parts += ["SelfCheck-Prompt"] * v.selfcheck
    regenerate = Need("samples", "prompt", prompt="to regenerate SelfCheck-Prompt's samples from")
    return Method(
        name=variant,
        scores=(0.0, 1.0),
        summary=f"FIBE: {', '.join(parts)} (Hirano et al.)",
        inputs=SelfCheckInputs if v.selfcheck else Inputs,
        options=Options,
        prepare=partial(prepare, variant=variant),
        run=partial(run, variant=variant),
        question_field="prompt",
        needs=(Need("text", "sentences"), Need("model"), *((regenerate,) if v.selfcheck else ())),
        draws_samples=_selfcheck_draw if v.selfcheck else None,
    )


def _selfcheck_draw(given: Mapping[str, Any]) -> tuple[str, str | None]:
    """The SelfCheck-Prompt part regenerates its samples from the prompt, as its concept."""
    return given.get("prompt") or "", None


METHODS = {variant: _method(variant) for variant in VARIANTS}


def detect(*args: Any, variant: str = "fibe", **kwargs: Any) -> DetectionResult:
    """One FIBE variant (default the exam alone) on one passage: ``METHODS[variant].detect``."""
    return _variant(variant).detect(*args, **kwargs)


async def adetect(*args: Any, variant: str = "fibe", **kwargs: Any) -> DetectionResult:
    """``detect`` on the event loop."""
    return await _variant(variant).adetect(*args, **kwargs)


def _variant(variant: str) -> Method:
    if variant not in METHODS:
        raise ConfigError(f"unknown FIBE variant {variant!r}; available: {', '.join(VARIANTS)}")
    return METHODS[variant]
