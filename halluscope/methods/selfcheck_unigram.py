"""SelfCheck-Unigram (max): no model at all when the samples are given; N calls (E.1) otherwise."""

from __future__ import annotations

import math
from dataclasses import dataclass

from halluscope.backends.models import ModelLike
from halluscope.backends.steps import Steps
from halluscope.methods.sampling import sampled_passage
from halluscope.results import DetectionResult, Unit
from halluscope.runtime import options
from halluscope.runtime.contract import Method, Need, Prepared, RunContext
from halluscope.scoring import unigram_scores
from halluscope.text import passage_tokens, tokens

NAME = "selfcheck-unigram"
SUMMARY = "SelfCheck-Unigram (max): how surprising each sentence's rarest token is under the samples"


Inputs = options.SampledText


@dataclass(frozen=True, kw_only=True)
class Options:
    model: ModelLike | None = options.model("writes the samples when none are given")
    n: int = options.samples(5, "samples regenerated when none are given")


def prepare(opts: Options, ctx: RunContext) -> Prepared:
    """Nothing to build: counting needs no model, and regenerating only the options' model."""
    return Prepared(options=opts)


def run(prepared: Prepared, inputs: Inputs, ctx: RunContext) -> Steps[DetectionResult]:
    """Score each sentence by the max over its tokens of -log p under unigram counts of the text and
    its samples; an unseen token scores as infinitely surprising (reported as score None)."""
    opts: Options = prepared.options
    text, found, samples, given = yield from sampled_passage(
        "SelfCheck-Unigram", inputs, opts.model, opts.n, ctx.gateway, ctx.plan
    )
    scored = unigram_scores(found, text, samples, tokens, passage_tokens)
    units = [
        Unit(
            text=s,
            score=None if math.isinf(u.max_neg_logprob) else u.max_neg_logprob,
            evidence={
                "avg_neg_logprob": None if math.isinf(u.avg_neg_logprob) else u.avg_neg_logprob,
                "unseen_token": math.isinf(u.max_neg_logprob),
            },
        )
        for s, u in zip(found, scored, strict=True)
    ]
    meta = ctx.meta(NAME, n=len(samples), samples_given=given)
    return DetectionResult(method=NAME, units=units, meta=meta, evidence={"samples": samples})


METHOD = Method.from_module(__name__, needs=(Need("text", "sentences"),), draws_samples=options.sampled_draw)
detect, adetect = METHOD.detect, METHOD.adetect
