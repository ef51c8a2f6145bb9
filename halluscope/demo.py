"""`halluscope demo`: the main job, offline, on the embedded local model.

Two real checks on real inference: semantic entropy of sampled answers to a question the model
knows and to one no model can know (answers, clusters by bidirectional entailment, entropy), and
SelfCheck-Prompt sentence scores for a short biography with one planted false sentence. Every call
goes through the gateway, so a second run is replayed from the disk cache.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TextIO

from tqdm import tqdm

from halluscope.backends.entailment import LLMEntailment
from halluscope.backends.gateway import CallStats, Gateway, ModelLike
from halluscope.backends.local import default_local_model
from halluscope.detector import detector
from halluscope.results import DetectionResult, RunMeta, Unit

QUESTIONS = (
    "What is the capital of France?",  # a question the model knows
    "What did the author of this demo eat for breakfast on 3 March 2019?",  # one no model can know
)
ANSWERS_PER_QUESTION = 10  # M = 10 at temperature 1, as in the semantic-entropy paper

CONCEPT = "Albert Einstein"
BIOGRAPHY = (
    "Albert Einstein was a German-born theoretical physicist.",
    "He developed the theory of relativity.",
    "He received the Nobel Prize in Physics in 1921.",
    "Einstein was born in Paris, France, in 1879.",  # planted: he was born in Ulm
    "He died in Princeton, New Jersey, in 1955.",
)
PLANTED = 3
PASSAGES = 3  # N regenerated passages for SelfCheck-Prompt (the FIBE paper uses 5)


@dataclass
class QuestionReport:
    question: str
    answers: list[str]
    clusters: list[list[int]]
    entropy: float


@dataclass
class SentenceReport:
    sentence: str
    score: float
    answers: list[str | None]  # 'yes' / 'no' / None (neither) against each regenerated passage
    planted: bool


@dataclass
class DemoReport:
    model: str
    judge: str
    questions: list[QuestionReport]
    sentences: list[SentenceReport]
    passages: list[str]
    meta: RunMeta

    def to_result(self) -> DetectionResult:
        units = [
            Unit(
                text=q.question,
                score=q.entropy,
                evidence={"kind": "semantic_entropy", "answers": q.answers, "clusters": q.clusters},
            )
            for q in self.questions
        ] + [
            Unit(
                text=s.sentence,
                score=s.score,
                evidence={"kind": "selfcheck_prompt", "supported": s.answers, "planted_false": s.planted},
            )
            for s in self.sentences
        ]
        return DetectionResult(
            method="demo",
            units=units,
            meta=self.meta,
            evidence={"model": self.model, "judge": self.judge, "passages": self.passages},
        )


def run_demo(
    gateway: Gateway, model: ModelLike | None = None, judge: ModelLike | None = None, progress: bool = True
) -> DemoReport:
    """The two checks through the public detectors, counted in one CallStats."""
    chosen: ModelLike = model if model is not None else f"local:{default_local_model()}"
    model_key = gateway.model(chosen).key  # a missing model or key fails here, before any progress
    entail = LLMEntailment(judge if judge is not None else chosen, gateway=gateway, with_probs=False)
    with tqdm(desc="model calls", unit=" call", disable=not progress, leave=False) as bar:
        stats = CallStats(on_reply=bar.update)
        entropy = detector("semantic-entropy", chosen, judge=entail, n=ANSWERS_PER_QUESTION, gateway=gateway)
        questions = []
        for question in QUESTIONS:
            unit = entropy.detect(question=question, stats=stats).units[0]
            answers, clusters = unit.evidence["answers"], unit.evidence["clusters"]
            questions.append(QuestionReport(question, answers, clusters, unit.evidence["semantic_entropy"]))
        check = detector("selfcheck-prompt", chosen, n=PASSAGES, gateway=gateway)
        checked = check.detect(text=" ".join(BIOGRAPHY), sentences=list(BIOGRAPHY), concept=CONCEPT, stats=stats)
    sentences = [
        SentenceReport(u.text, float(u.score or 0.0), u.evidence["supported"], i == PLANTED)
        for i, u in enumerate(checked.units)
    ]
    meta = stats.meta("demo", answers_per_question=ANSWERS_PER_QUESTION, passages=PASSAGES)
    return DemoReport(model_key, entail.name, questions, sentences, checked.evidence["samples"], meta)


def print_report(report: DemoReport, out: TextIO) -> None:
    out.write(f"halluscope demo on {report.model} (entailment judge: {report.judge})\n\n")
    out.write(f"1. Semantic entropy of {ANSWERS_PER_QUESTION} sampled answers (higher = more likely confabulated)\n")
    out.write("   clusters by strict bidirectional entailment; identical answers join without a judge call\n")
    for q in report.questions:
        out.write(f"\nQ: {q.question}\n")
        for n, cluster in enumerate(sorted(q.clusters, key=len, reverse=True), start=1):
            out.write(f"  cluster {n} ({len(cluster)} answers): {q.answers[cluster[0]]}\n")
            for other in cluster[1:]:
                out.write(f"      also: {q.answers[other]}\n")
        out.write(f"  semantic entropy: {q.entropy:.3f} nats over {len(q.clusters)} cluster(s)\n")
    out.write(
        f"\n2. SelfCheck-Prompt on a biography of {CONCEPT} "
        f"({PASSAGES} regenerated passages; score = share not supported)\n\n"
    )
    for s in report.sentences:
        verdicts = " ".join((v or "?")[:3].ljust(3) for v in s.answers)
        flag = "   <- planted false sentence" if s.planted else ""
        out.write(f"  {s.score:.2f}  [{verdicts}]  {s.sentence}{flag}\n")
    m = report.meta
    out.write(
        f"\nmodel calls: {m.calls}   cache hits: {m.cache_hits}   tokens: {m.tokens.prompt} in / "
        f"{m.tokens.completion} out   {m.seconds:.1f} s\n"
    )
    out.write(f"prompts: {', '.join(m.prompts)}\n")
    if m.calls == 0:
        out.write("Every answer came from the disk cache: this run replayed the previous one exactly.\n")
    else:
        out.write("Run it again: every answer will be replayed from the disk cache in seconds.\n")
