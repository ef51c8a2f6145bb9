"""A learned ensemble: several sentence-level methods run on one text (their calls shared through
the cache) and their scores stacked by a calibration fitted for exactly these methods
(`halluscope calibrate --method A,B,...`), so each sentence's score is P(hallucinated).

The FIBE paper's fixed-weight ensembles (``fibe+dq`` ...) stay as they are; this one learns its
weights from labelled data. A member is any method that scores a text's sentences, or a configured
name such as ``selfcheck-prompt:prob`` (``method.configured``), as the benchmark names it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from halluscope.backends.models import ModelLike, model_name
from halluscope.backends.steps import Steps
from halluscope.calibration import Calibration, fitted_score
from halluscope.errors import ConfigError
from halluscope.methods.sampling import regenerate_passages
from halluscope.results import DetectionResult, Unit
from halluscope.runtime import contract, options, registry
from halluscope.runtime.contract import Documents, Flag, Method, Need, RunContext, Together, arg
from halluscope.text import checked_passage
from halluscope.text import sentences as split_sentences

NAME = "ensemble"
SUMMARY = "a learned ensemble: sentence-level methods stacked by a calibration fitted for them"
DEFAULT_N = 5  # a member's samples where neither the run nor its calibration says how many


def _calibration(calibration: str | Path | Calibration | None, methods: Sequence[str]) -> Calibration:
    if calibration is None:
        raise ConfigError(
            "the ensemble needs a calibration fitted for its methods (`halluscope calibrate --method A,B`)"
        )
    cal = calibration if isinstance(calibration, Calibration) else Calibration.load(calibration)
    if list(methods) and list(methods) != cal.methods:
        raise ConfigError(f"this calibration stacks {', '.join(cal.methods)}, not {', '.join(methods)}")
    for member in cal.methods:  # every member resolves before any model is asked
        _member(member)
    return cal


def _member(name: str, cal: Calibration | None = None) -> tuple[Method, dict[str, Any]]:
    """A member's contract and options: as the calibration records them (the options it was fitted with,
    top_k or n among them), a preset's and its bracketed ones (its own model among them) over them; it
    must score the sentences of a text."""
    method, preset = registry.configured(name)
    if name.partition("[")[0] not in registry.sentence_methods():
        raise ConfigError(f"an ensemble member must be a method that scores a text's sentences, got {name!r}")
    spec = registry.get(method)
    fitted = cal.settings.get(name, {}) if cal is not None else {}
    kept = {k: v for k, v in fitted.items() if k in spec.option_names and k != spec.model_field}
    return spec, {**kept, **preset}


@dataclass(frozen=True, kw_only=True)
class Inputs:
    """An item: the text (or its sentences), the prompt that produced it, samples for SelfCheck, and the
    documents for a grounded member."""

    text: str | None = options.text()
    sentences: list[str] | None = options.sentences()
    prompt: str | None = options.prompt()
    samples: list[str] | None = options.texts_file("--samples-file", "passages for the SelfCheck members")
    context: Documents | None = options.documents("the documents the text should rest on, for a grounded member")


@dataclass(frozen=True, kw_only=True)
class Options:
    model: ModelLike | None = options.model("runs every member")
    calibration: str | Path | Calibration | None = arg(
        help="the stacked calibration of the members (it names them)",
        flags=(Flag(("--calibration",), metavar="FILE"),),
        refers="file",
    )
    methods: Sequence[str] = arg((), help="the members, as a check: they must be the calibration's")
    n: int | None = options.samples(
        None,
        "samples the SelfCheck members draw, and FIBE's exam answers (default: each member's as the calibration "
        f"records it, else {DEFAULT_N})",
    )
    probe: str | None = arg(
        None,
        help="the fitted probe a `probe` member reads (its JSON file)",
        flags=(Flag(("--probe",), metavar="FILE"),),
        refers="file",
    )


@dataclass(frozen=True)
class Prepared(contract.Prepared):
    calibration: Calibration | None = None


def prepare(opts: Options, ctx: RunContext) -> Prepared:
    """The calibration, checked against the members and the model before any model is asked."""
    cal = _calibration(opts.calibration, opts.methods)
    if cal.model is not None and opts.model is not None and model_name(opts.model) != cal.model:
        raise ConfigError(f"this calibration was fitted on {cal.model}'s scores, not {model_name(opts.model)}'s")
    return Prepared(options=opts, calibration=cal)


def run(prepared: Prepared, inputs: Inputs, ctx: RunContext) -> Steps[DetectionResult]:
    """Each member on the same sentences (``prompt`` is the prompt that produced the text: FIBE's and
    DQ's context, the concept SelfCheck regenerates from), then each sentence's stacked probability;
    the evidence holds every member's score. Samples no one gave are drawn once for every member that
    would draw them alike (``Method.draws_samples``), not once a member. The members run together."""
    cal, opts = prepared.calibration, prepared.options
    assert cal is not None
    text, sentences, samples = checked_passage(inputs.text, inputs.sentences, inputs.samples)
    found = sentences or split_sentences(text or "")
    if not found:
        raise ConfigError("the ensemble needs a non-empty text (no sentence found)")
    members, drawn = [], {}
    for member in cal.methods:
        spec, kwargs = _member(member, cal)
        n = opts.n if opts.n is not None else kwargs.get("n", DEFAULT_N)
        given = {
            "text": " ".join(found),
            spec.question_field: inputs.prompt,
            spec.model_field: kwargs.get(spec.model_field, opts.model),  # a member that names its own keeps it
            "samples": samples,
            "n": n,
            "probe": opts.probe,
        }
        if spec.context_field is not None:
            given[spec.context_field] = inputs.context
        if not samples and spec.draws_samples is not None and opts.model is None:
            raise ConfigError(
                f"{member} reads {n} samples an answer and none came with it: give the model that draws them "
                "(model=...), or the samples",
                settings=("model=",),
            )
        if not samples and spec.draws_samples is not None:
            draw = spec.draws_samples(given)  # members that would draw alike share one draw
            if draw not in drawn:
                ctx.plan(n)
                concept, question = draw
                drawn[draw] = yield from regenerate_passages(ctx.gateway, opts.model, concept, len(found), n, question)
            given["samples"] = drawn[draw]
        accepted = spec.signature.parameters
        kwargs |= {"sentences": found, "gateway": ctx.gateway, "stats": ctx.stats}
        kwargs |= {k: v for k, v in given.items() if k in accepted and v is not None}
        members.append((spec, kwargs))
    results = yield Together(tuple(members))
    return _result(cal, found, ctx, results, len(drawn))


def _result(
    cal: Calibration, found: list[str], ctx: RunContext, results: list[DetectionResult], draws: int
) -> DetectionResult:
    """Each sentence's stacked probability from the members' results (in ``cal.methods`` order)."""
    member_scores = {m: [fitted_score(u) for u in r.units] for m, r in zip(cal.methods, results, strict=True)}
    cal.check_prompts(sorted(ctx.stats.prompts))
    for member, result in zip(cal.methods, results, strict=True):  # each member as it was fitted (n, judge ...)
        problem = cal.mismatch(result.meta.params, member)
        if problem:
            raise ConfigError(f"{problem}; fit it again with these settings")
    units = []
    for i, sentence in enumerate(found):
        scores = {m: member_scores[m][i] for m in cal.methods}
        p = cal.probability(scores)
        shown = {m: (None if s is None or math.isinf(s) else s) for m, s in scores.items()}
        evidence: dict[str, Any] = {"scores": shown}
        chunk = _member_chunk(results, i)
        if chunk is not None:  # the document text a member checked it against: what a reader sets it beside
            evidence["best_chunk_text"] = chunk
        units.append(Unit(text=sentence, score=p, probability=p, evidence=evidence))
    meta = ctx.meta(NAME, methods=cal.methods, calibration=cal.kind, sample_draws=draws)
    return DetectionResult(method=NAME, units=units, meta=meta)


def _member_chunk(results: list[DetectionResult], i: int) -> str | None:
    """The document chunk the first member that read documents (grounded) checked sentence ``i`` against."""
    for result in results:
        if i < len(result.units):
            chunk = result.units[i].evidence.get("best_chunk_text")
            if isinstance(chunk, str) and chunk.strip():
                return chunk
    return None


METHOD = Method.from_module(
    __name__,
    question_field="prompt",
    context_field="context",
    needs=(Need("text", "sentences"), Need("calibration")),
    combines=True,
)
detect, adetect = METHOD.detect, METHOD.adetect
