"""CLUE's conceptual diversity (Wang et al., Section 5.3), a method of its own: how diverse a set of
outputs is along an upper-level concept (tone), from the uncertainty of its lower-level concepts
(happy, sad, humorous ...). Each output is scored against each sub-concept by the zero-shot scorer,
f(o_i, "This example is about c"); U(c) = -(1/N) sum_i log f(o_i, c); the diversity is the harmonic
mean of the sub-concepts' U (Eq. 4) and the entropy of the outputs' argmax assignment (Eq. 5).

    halluscope detect clue-diversity --outputs-file stories.json --concept tone \\
        --subconcepts "happy tone,sad tone,humorous tone,serious tone,romantic tone"
"""

from __future__ import annotations

from dataclasses import dataclass

from halluscope.backends.entailment import Scored, ZeroShot, zero_shot_judge
from halluscope.backends.steps import Steps
from halluscope.errors import ConfigError
from halluscope.methods.clue import ABOUT, UNSCORED, ZERO_SHOT
from halluscope.results import DetectionResult, Unit
from halluscope.runtime import contract, options
from halluscope.runtime.contract import Flag, Method, Need, RunContext, arg
from halluscope.scoring import (
    assignment_counts,
    concept_uncertainties,
    entropy_diversity,
    harmonic_mean_diversity,
)

NAME = "clue-diversity"
SUMMARY = "CLUE's conceptual diversity of outputs along a concept, from its sub-concepts' uncertainty"


@dataclass(frozen=True, kw_only=True)
class Inputs:
    """An item: the outputs, the upper-level concept they are compared along, and its sub-concepts."""

    outputs: list[str] | None = options.texts_file("--outputs-file", "the outputs")
    concept: str | None = arg(help="the upper-level concept, e.g. tone", flags=(Flag(("--concept",)),))
    subconcepts: list[str] | None = arg(
        help='its lower-level concepts: "happy tone,sad tone"',
        flags=(Flag(("--subconcepts",), listed=True, metavar="A,B"),),
    )


@dataclass(frozen=True, kw_only=True)
class Options:
    judge: ZeroShot | str | None = options.judge("zero-shot scorer")


@dataclass(frozen=True)
class Prepared(contract.Prepared):
    scorer: ZeroShot | None = None


def prepare(opts: Options, ctx: RunContext) -> Prepared:
    return Prepared(options=opts, scorer=zero_shot_judge(opts.judge, ctx.gateway, prompt=ZERO_SHOT))


def run(prepared: Prepared, inputs: Inputs, ctx: RunContext) -> Steps[DetectionResult]:
    """Every output against every sub-concept in one batch; units are the sub-concepts, each scored by
    its U(c) in nats with the outputs assigned to it; the result's evidence holds both diversities."""
    outputs = [o for o in inputs.outputs or [] if o.strip()]
    subconcepts = [c.strip() for c in inputs.subconcepts or [] if c.strip()]
    if not outputs:
        raise ConfigError("diversity needs at least one output")
    if len(subconcepts) < 2:
        raise ConfigError(f"diversity needs at least two lower-level concepts, got {subconcepts}")
    assert prepared.scorer is not None
    pairs = [(o, ABOUT.format(c)) for o in outputs for c in subconcepts]
    ctx.plan(prepared.scorer.replies_for(len(pairs)))
    probs = yield Scored(prepared.scorer, pairs)
    m = len(subconcepts)
    flat = [UNSCORED if p is None else float(p) for p in probs]
    matrix = [flat[i * m : (i + 1) * m] for i in range(len(outputs))]
    uncertainty, counts = concept_uncertainties(matrix), assignment_counts(matrix)
    units = [
        Unit(text=c, score=u, evidence={"assigned": count, "scores": [row[j] for row in matrix]})
        for j, (c, u, count) in enumerate(zip(subconcepts, uncertainty, counts, strict=True))
    ]
    evidence = {
        "concept": inputs.concept,
        "harmonic_mean": harmonic_mean_diversity(uncertainty),
        "entropy": entropy_diversity(counts),
        "outputs": outputs,
        "unscored": sum(p is None for p in probs),
    }
    meta = ctx.meta(NAME, n=len(outputs), scorer=prepared.scorer.name)
    return DetectionResult(method=NAME, units=units, meta=meta, evidence=evidence)


def describe(result: DetectionResult) -> str:
    e = result.evidence
    lines = [f"diversity of {e['concept'] or 'the concept'!r} over {len(e['outputs'])} outputs (CLUE Section 5.3)"]
    for unit in result.units:
        lines.append(f"  {unit.text:30s} U {unit.score:7.3f}   outputs assigned {unit.evidence['assigned']}")
    lines.append(f"harmonic mean {e['harmonic_mean']:.3f}   entropy {e['entropy']:.3f} nats")
    lines.append(result.meta.cost(f"{e['unscored']} unscored" if e["unscored"] else ""))
    return "\n".join(lines)


METHOD = Method.from_module(
    __name__,
    question_field=None,
    answer_field=None,
    positional=(),
    model_field="judge",
    needs=(Need("outputs"), Need("subconcepts")),
    describe=describe,
)
detect, adetect = METHOD.detect, METHOD.adetect
