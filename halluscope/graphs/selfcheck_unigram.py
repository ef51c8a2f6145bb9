"""SelfCheck-Unigram (max): no model at all when the samples are given; N calls (E.1) otherwise."""

from __future__ import annotations

import math
from typing import Any

from halluscope.backends.gateway import CallStats, Gateway, ModelLike
from halluscope.errors import ConfigError
from halluscope.graphs import options
from halluscope.graphs.method import Method, RunContext, bound_arguments, start
from halluscope.graphs.stages import Steps, afinish, finish, regenerate_passages
from halluscope.results import DetectionResult, Unit
from halluscope.scoring import unigram_scores
from halluscope.text import checked_passage, passage_tokens, tokens
from halluscope.text import sentences as split_sentences

NAME = "selfcheck-unigram"


def detect(
    text: str,
    *,
    samples: list[str] | None = None,
    model: ModelLike | None = None,
    question: str | None = None,
    concept: str | None = None,
    n: int = 5,
    sentences: list[str] | None = None,
    gateway: Gateway | None = None,
    stats: CallStats | None = None,
) -> DetectionResult:
    """Score each sentence by the max over its tokens of -log p under unigram counts of the text and
    its samples; an unseen token scores as infinitely surprising (reported as score None)."""
    ctx = start(gateway, stats)
    return finish(_steps(ctx, text, samples, model, question, concept, n, sentences), ctx.stats)


async def adetect(*args: Any, **kwargs: Any) -> DetectionResult:
    """``detect`` (the same arguments) on the event loop: the regenerations await the provider's async
    client."""
    arguments = bound_arguments(detect, args, kwargs)
    ctx = start(arguments.pop("gateway"), arguments.pop("stats"))
    return await afinish(_steps(ctx, **arguments), ctx.stats)


def _steps(
    ctx: RunContext,
    text: str,
    samples: list[str] | None,
    model: ModelLike | None,
    question: str | None,
    concept: str | None,
    n: int,
    sentences: list[str] | None,
) -> Steps[DetectionResult]:
    checked, sentences, samples = checked_passage(text, sentences, samples)
    text = checked or ""
    given = bool(samples)
    found = sentences or split_sentences(text)
    if not found:
        raise ConfigError("SelfCheck-Unigram needs a non-empty text (no sentence found)")
    if not samples:
        if model is None:
            raise ConfigError("SelfCheck-Unigram needs samples: pass them, or a model to regenerate them")
        ctx.plan(n)
        samples = yield from regenerate_passages(ctx.gateway, model, concept or "", len(found), n, question)
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


METHOD = Method(
    name=NAME,
    detect=detect,
    adetect=adetect,
    summary="SelfCheck-Unigram (max): how surprising each sentence's rarest token is under the samples",
    inputs=("text", "question", "concept"),
    question_field="question",
    answer_field="text",
    options=(
        *options.TEXT,
        options.texts_file("samples", "--samples-file", "passages you already have"),
        *options.REGENERATE_FROM,
        options.model("writes the samples when none are given"),
        options.samples(5, "samples regenerated when none are given"),
    ),
    needs=((("text", "{}"),),),
)
