"""`halluscope demo`: the main job, offline, on the embedded local model.

Two real checks on real inference: semantic entropy of sampled answers to a question the model
knows and to one no model can know (answers, clusters by bidirectional entailment, entropy), and
Direct Question with p(Yes) on our planted-falsehood biographies (one false sentence each): which
sentence it ranks riskiest, whether that is the planted one, and the hit rate. Every call goes
through the gateway, so a second run is replayed from the disk cache.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TextIO

from tqdm import tqdm

from halluscope.backends.entailment import LLMEntailment
from halluscope.backends.gateway import CallStats, Gateway
from halluscope.backends.local import default_spec
from halluscope.backends.models import ModelLike
from halluscope.bench.planted import BIOGRAPHIES, Biography, riskiest
from halluscope.detectors import detector
from halluscope.prompts import short_answer
from halluscope.results import DetectionResult, RunMeta, Unit

QUESTIONS = (
    "What is the capital of France?",  # a question the model knows
    "What did the author of this demo eat for breakfast on 3 March 2019?",  # one no model can know
)
ANSWERS_PER_QUESTION = 5  # the paper samples 10; 5 keep the demo under 3 minutes on 2 cores
CHECK_METHOD = "direct-question"  # the best hit rate on the planted set with the default model (docs/results)


@dataclass
class QuestionReport:
    question: str
    answers: list[str]
    clusters: list[list[int]]
    entropy: float


@dataclass
class BiographyReport:
    biography: Biography
    scores: list[float]
    answers: list[str | None]  # the model's Yes / No (None: neither) to each sentence

    @property
    def riskiest(self) -> list[int]:
        return riskiest(list(self.scores))

    @property
    def hit(self) -> bool:
        """The planted sentence alone scores highest (a tie at the top is a miss)."""
        return self.riskiest == [self.biography.planted]


@dataclass
class DemoReport:
    model: str
    judge: str
    questions: list[QuestionReport]
    biographies: list[BiographyReport]
    meta: RunMeta

    @property
    def hits(self) -> int:
        return sum(b.hit for b in self.biographies)

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
                text=sentence,
                score=b.scores[i],
                evidence={"kind": CHECK_METHOD, "answer": b.answers[i], "planted_false": i == b.biography.planted},
            )
            for b in self.biographies
            for i, sentence in enumerate(b.biography.sentences)
        ]
        return DetectionResult(
            method="demo",
            units=units,
            meta=self.meta,
            evidence={
                "model": self.model,
                "judge": self.judge,
                "hits": self.hits,
                "biographies": len(self.biographies),
            },
        )


def run_demo(
    gateway: Gateway, model: ModelLike | None = None, judge: ModelLike | None = None, progress: bool = True
) -> DemoReport:
    """The two checks through the public detectors, counted in one CallStats."""
    chosen: ModelLike = model if model is not None else default_spec()
    model_key = gateway.model(chosen).key  # a missing model or key fails here, before any progress
    entail = LLMEntailment(
        judge if judge is not None else chosen, gateway=gateway, prompt=short_answer.ENTAILMENT, with_probs=False
    )
    # one step per question and per biography, so the bar has a total and an ETA (a question's judge
    # calls are not known before its answers are clustered); the calls so far ride along
    steps = len(QUESTIONS) + len(BIOGRAPHIES)
    with tqdm(total=steps, desc="demo", unit=" check", disable=not progress, leave=False) as bar:
        stats = CallStats(on_reply=lambda: bar.set_postfix(calls=stats.calls, cached=stats.cache_hits))
        entropy = detector("semantic-entropy", chosen, judge=entail, n=ANSWERS_PER_QUESTION, gateway=gateway)
        questions = []
        for question in QUESTIONS:
            unit = entropy.detect(question=question, stats=stats).units[0]
            answers, clusters = unit.evidence["answers"], unit.evidence["clusters"]
            questions.append(QuestionReport(question, answers, clusters, unit.evidence["semantic_entropy"]))
            bar.update(1)
        check = detector(CHECK_METHOD, chosen, gateway=gateway)
        biographies = []
        for bio in BIOGRAPHIES:
            result = check.detect(
                text=" ".join(bio.sentences), sentences=list(bio.sentences), prompt=bio.prompt, stats=stats
            )
            scores = [float(u.score or 0.0) for u in result.units]
            biographies.append(BiographyReport(bio, scores, [u.evidence["answer"] for u in result.units]))
            bar.update(1)
    meta = stats.meta("demo", answers_per_question=ANSWERS_PER_QUESTION, check=CHECK_METHOD)
    return DemoReport(model_key, entail.name, questions, biographies, meta)


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
        f"\n2. Which sentence is false? {CHECK_METHOD} (the model asked whether each sentence is true; "
        "risk = 1 - its probability of Yes)\n   on short biographies with one planted false sentence each\n\n"
    )
    for b in report.biographies:
        top = b.riskiest[0]
        verdict = "HIT " if b.hit else "miss"
        out.write(f'  {verdict} {b.biography.person}: riskiest ({b.scores[top]:.2f}) "{b.biography.sentences[top]}"\n')
        if not b.hit:
            planted = b.biography.planted
            out.write(f'        planted ({b.scores[planted]:.2f}) "{b.biography.sentences[planted]}"\n')
    chance = 1 / len(BIOGRAPHIES[0].sentences)
    out.write(
        f"\n  planted falsehood ranked riskiest in {report.hits} of {len(report.biographies)} biographies "
        f"(chance: {chance:.0%} each)\n"
    )
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
