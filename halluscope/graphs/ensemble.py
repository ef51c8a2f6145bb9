"""A learned ensemble: several sentence-level methods run on one text (their calls shared through
the cache) and their scores stacked by a calibration fitted for exactly these methods
(`halluscope calibrate --method A,B,...`), so each sentence's score is P(hallucinated).

The FIBE paper's fixed-weight ensembles (``fibe+dq`` ...) stay as they are; this one learns its
weights from labelled data. A member is any method that scores a text's sentences, or a configured
name such as ``selfcheck-prompt:prob`` (``method.configured``), as the benchmark names it.
"""

from __future__ import annotations

import asyncio
import inspect
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from halluscope import registry
from halluscope.backends.gateway import CallStats, Gateway, ModelLike, model_name
from halluscope.calibration import Calibration, fitted_score
from halluscope.errors import ConfigError
from halluscope.graphs import options
from halluscope.graphs.method import Method, Option, RunContext, bound_arguments, start
from halluscope.results import DetectionResult, Unit
from halluscope.text import checked_passage
from halluscope.text import sentences as split_sentences

NAME = "ensemble"


def _calibration(calibration: str | Path | Calibration | None, methods: Sequence[str]) -> Calibration:
    if calibration is None:
        raise ConfigError("the ensemble needs a calibration fitted for its methods: halluscope calibrate --method A,B")
    cal = calibration if isinstance(calibration, Calibration) else Calibration.load(calibration)
    if list(methods) and list(methods) != cal.methods:
        raise ConfigError(f"this calibration stacks {', '.join(cal.methods)}, not {', '.join(methods)}")
    for member in cal.methods:  # every member resolves before any model is asked
        _member(member)
    return cal


def _member(name: str) -> tuple[Method, dict[str, Any]]:
    """A member's contract and options; it must score the sentences of a text."""
    if name not in registry.sentence_methods():
        raise ConfigError(f"an ensemble member must be a method that scores a text's sentences, got {name!r}")
    method, extra = registry.configured(name)
    return registry.get(method), extra


def detect(
    text: str | None = None,
    *,
    model: ModelLike | None = None,
    calibration: str | Path | Calibration | None = None,
    methods: Sequence[str] = (),
    prompt: str | None = None,
    sentences: list[str] | None = None,
    samples: list[str] | None = None,
    n: int = 5,
    gateway: Gateway | None = None,
    stats: CallStats | None = None,
) -> DetectionResult:
    """Each member on the same sentences (``prompt`` is the prompt that produced the text: FIBE's and
    DQ's context, the concept SelfCheck regenerates from), then each sentence's stacked probability;
    the evidence holds every member's score."""
    cal, found, ctx, members = _prepare(**locals())
    return _result(cal, found, ctx, [spec.detect(**kwargs) for spec, kwargs in members])


async def adetect(*args: Any, **kwargs: Any) -> DetectionResult:
    """``detect`` (the same arguments) on the event loop: the members run together, each through its
    own ``adetect`` where it has one (else its ``detect`` on a thread)."""
    cal, found, ctx, members = _prepare(**bound_arguments(detect, args, kwargs))
    runs = [
        spec.adetect(**kwargs) if spec.adetect is not None else asyncio.to_thread(spec.detect, **kwargs)
        for spec, kwargs in members
    ]
    return _result(cal, found, ctx, list(await asyncio.gather(*runs)))


def _prepare(
    text: str | None,
    model: ModelLike | None,
    calibration: str | Path | Calibration | None,
    methods: Sequence[str],
    prompt: str | None,
    sentences: list[str] | None,
    samples: list[str] | None,
    n: int,
    gateway: Gateway | None,
    stats: CallStats | None,
) -> tuple[Calibration, list[str], RunContext, list[tuple[Method, dict[str, Any]]]]:
    """The calibration, the sentences, the run's context and each member's contract and arguments (in
    ``cal.methods`` order)."""
    cal = _calibration(calibration, methods)
    if cal.model is not None and model is not None and model_name(model) != cal.model:
        raise ConfigError(f"this calibration was fitted on {cal.model}'s scores, not {model_name(model)}'s")
    text, sentences, samples = checked_passage(text, sentences, samples)
    found = sentences or split_sentences(text or "")
    if not found:
        raise ConfigError("the ensemble needs a non-empty text (no sentence found)")
    ctx = start(gateway, stats)
    members: list[tuple[Method, dict[str, Any]]] = []
    for member in cal.methods:
        spec, kwargs = _member(member)
        accepted = inspect.signature(spec.detect).parameters
        kwargs |= {"sentences": found, "gateway": ctx.gateway, "stats": ctx.stats}
        given = {
            "text": " ".join(found),
            spec.question_field: prompt,
            spec.model_field: model,
            "samples": samples,
            "n": n,
        }
        kwargs |= {k: v for k, v in given.items() if k in accepted and v is not None}
        members.append((spec, kwargs))
    return cal, found, ctx, members


def _result(cal: Calibration, found: list[str], ctx: RunContext, results: list[DetectionResult]) -> DetectionResult:
    """Each sentence's stacked probability from the members' results (in ``cal.methods`` order)."""
    member_scores = {m: [fitted_score(u) for u in r.units] for m, r in zip(cal.methods, results, strict=True)}
    cal.check_prompts(sorted(ctx.stats.prompts))
    units = []
    for i, sentence in enumerate(found):
        scores = {m: member_scores[m][i] for m in cal.methods}
        p = cal.probability(scores)
        shown = {m: (None if s is None or math.isinf(s) else s) for m, s in scores.items()}
        units.append(Unit(text=sentence, score=p, probability=p, evidence={"scores": shown}))
    meta = ctx.meta(NAME, methods=cal.methods, calibration=cal.kind)
    return DetectionResult(method=NAME, units=units, meta=meta)


METHOD = Method(
    name=NAME,
    detect=detect,
    adetect=adetect,
    summary="a learned ensemble: sentence-level methods stacked by a calibration fitted for them",
    inputs=("text", "prompt"),
    question_field="prompt",
    answer_field="text",
    options=(
        *options.TEXT,
        options.PROMPT,
        options.texts_file("samples", "--samples-file", "passages for the SelfCheck members"),
        options.model("runs every member"),
        options.samples(5, "samples the SelfCheck members regenerate, and FIBE's exam answers"),
        Option(
            "calibration", ("--calibration",), "the stacked calibration of the members (it names them)", metavar="FILE"
        ),
    ),
    needs=((("text", "{}"),), (("calibration", "{}"),)),
    combines=True,
)
