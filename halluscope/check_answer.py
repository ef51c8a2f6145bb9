"""One call to check an answer: ``halluscope.check(answer, context=..., question=...)`` and `halluscope
check`. It picks the method (``grounded`` when documents come with the answer, ``direct-question``
otherwise, unless one is named; with a calibration, the method or stack it was fitted for, with its
options and model), runs it, and draws the verdict: at the threshold given, at a calibration's own
(the operating point `choose` chose; else p >= 0.5), or at 0.5 on a method whose raw score is a
probability-like 0-1 value (both defaults' are: 1 - p(Yes)); another method's raw scores need one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from halluscope.backends.budget import MAX_CALLS
from halluscope.backends.local import default_spec
from halluscope.calibration import Calibration
from halluscope.checks import check_value
from halluscope.detectors import Detector, bound, deployed, loaded
from halluscope.errors import ConfigError
from halluscope.results import DEFAULT_PROBABILITY_THRESHOLD, DetectionResult
from halluscope.runtime import registry
from halluscope.runtime.contract import checked_documents
from halluscope.tool_calls import actions_checked, given_tool_calls

WITH_CONTEXT = "grounded"  # an answer with the documents it should rest on
WITHOUT_CONTEXT = "direct-question"  # an open answer: the model asked about each sentence
RAW_DECISION = 0.5  # a 0-1 raw score's decision, where no threshold or calibration is given


def chosen_method(method: str | None, context: Any) -> str:
    """The method a check runs: the one named, else grounded with a context and Direct Question without."""
    if method is not None:
        return registry.name_of(method)
    return WITH_CONTEXT if context is not None else WITHOUT_CONTEXT


def default_threshold(method: str, threshold: float | None, calibrated: bool) -> float | None:
    """The threshold a check decides at: the one given; none with a calibration (decide's p >= 0.5); 0.5
    on a method whose raw scores lie in [0, 1]; another method's raw scores need one."""
    spec = registry.get(method)
    problem = spec.threshold_problem(threshold, calibrated)
    if problem:
        raise ConfigError(f"threshold: {problem}")
    if threshold is not None or calibrated:
        return threshold
    if spec.scores == (0.0, 1.0):
        return RAW_DECISION
    raise ConfigError(
        f"{method}'s raw scores have no default decision: give a threshold, or a calibration (probabilities)"
    )


def method_of(method: str | None, calibration: Calibration | None, grounded: bool) -> tuple[str, dict[str, Any]]:
    """The method a deployment runs and the options it was fitted with: a calibration's (refusing another
    method named), else the one named, else grounded where the answer comes with documents and Direct
    Question where not."""
    if calibration is None:
        return chosen_method(method, True if grounded else None), {}
    name, settings = deployed(calibration)
    if method is not None and registry.name_of(method) != name:
        raise ConfigError(
            f"this calibration was fitted for {'+'.join(calibration.methods)}, not {method}: leave the method "
            "out to run it as it was fitted"
        )
    return name, settings


def resolved(
    grounded: bool,
    sentences: bool,
    method: str | None = None,
    model: Any = None,
    calibration: str | Path | Calibration | None = None,
    threshold: float | None = None,
    prior: float | None = None,
    max_calls: int | None = MAX_CALLS,
    force_calibration: bool = False,
    **options: Any,
) -> tuple[Detector, float]:
    """The one resolution of a deployment into its detector and the threshold it decides at (a
    calibration's p >= 0.5 where it has no operating point of its own): the method (``method_of``); with
    a calibration, loaded once, its options, model and threshold (its prior applied once), unless given;
    else the default local model where the method needs one. ``sentences``: refuse a method that does not
    score an answer's sentences (what a check reads)."""
    check_value("check", "calibration", calibration, str | Path | Calibration | None)
    fitted, corrected = loaded(calibration, prior)
    name, settings = method_of(method, fitted, grounded)
    spec = registry.get(name)
    if fitted is not None:
        if model is None and spec.model_field not in settings:  # a member's own model runs it, not the file's
            model = fitted.model
        threshold = corrected.decides_at() if threshold is None and corrected is not None else threshold
    if model is None and spec.model_field is not None and spec.model_field not in options | settings:
        model = default_spec() if spec.needs_input(spec.model_field) else model  # as `check --help` says
    if sentences and spec.answer_field != "text":
        raise ConfigError(f"check scores an answer's sentences; {name} does not (use halluscope.detector)")
    decided_at = default_threshold(name, threshold, fitted is not None)
    det = bound(name, model, corrected, name, settings, max_calls, force_calibration, options)
    return det, DEFAULT_PROBABILITY_THRESHOLD if decided_at is None else decided_at


def deployable(grounded: bool, **settings: Any) -> tuple[Detector, float]:
    """A deployment that checks an answer's sentences (``check`` per answer, the stream, the agent
    middleware and the proxy once for every answer they guard), resolved once (``resolved``)."""
    return resolved(grounded, True, **settings)


def from_calibration(calibration: str | Path | Calibration, model: Any = None, **options: Any) -> Detector:
    """The detector a calibration file describes, run as it was fitted: its method with its options, or
    the ensemble of its methods, on its model unless ``model`` is given (what `choose` picked, for a
    guard or a tool: ``hallucination_guard(from_calibration(FILE), threshold, on="probability")``);
    resolved as every deployment is (``resolved``)."""
    check_value("from_calibration", "calibration", calibration, str | Path | Calibration)
    return resolved(False, False, model=model, calibration=calibration, **options)[0]


def check_item(det: Detector, answer: str, context: Any = None, question: str | None = None) -> dict[str, Any]:
    """The detector's keywords for an answer, its documents and its question, refusing documents or a
    question the method would not read (a check must not quietly ignore what it was given)."""
    spec = det.spec
    if context is not None and spec.context_field is None:
        raise ConfigError(f"{spec.name} reads no context; leave it out, or check with method='{WITH_CONTEXT}'")
    if question is not None and spec.question_field is None:
        raise ConfigError(f"{spec.name} reads no question; leave it out")
    return det.answer_item(answer, question, context)


def check(
    answer: str,
    *,
    context: Any = None,
    question: str | None = None,
    method: str | None = None,
    model: Any = None,
    calibration: str | Path | Calibration | None = None,
    threshold: float | None = None,
    prior: float | None = None,
    max_calls: int | None = MAX_CALLS,
    force_calibration: bool = False,
    tool_calls: Sequence[Mapping[str, Any]] | None = None,
    judge_actions: bool = False,
    **options: Any,
) -> DetectionResult:
    """Check ``answer`` and draw its verdict (``result.verdict``: the flagged units' positions; each unit
    its score, its probability where calibrated, its evidence; ``result.meta`` the cost). ``context``:
    the documents the answer should rest on (a text, texts or LangChain Documents, whose metadata travels
    into the evidence); ``question``: what the answer answers; ``prior``: your base rate, to which a
    calibration's probabilities are corrected; ``force_calibration``: run a calibration with settings it was
    not fitted with, warning instead of refusing; ``tool_calls``: the conversation's tool calls in order
    (``tool_calls.given_tool_calls``), each call's arguments checked against the question, the documents
    and the earlier calls' results, and the answer's claims of action against the calls, with no model
    call (``result.actions``); ``judge_actions``: the check's own detector (one that reads documents)
    second-reads what matching flags in a free-text argument and the claims of action matching cannot
    decide, its calls added to the cost; ``options``: the method's own keywords (``gateway``, ``n``,
    ``top_k`` ...)."""
    check_value("check", "answer", answer, str)
    check_value("check", "judge_actions", judge_actions, bool)
    calls = given_tool_calls(tool_calls) if tool_calls is not None else None
    if judge_actions and calls is None:
        raise ConfigError("judge_actions reads the conversation's tool calls; give them as tool_calls")
    det, decided_at = deployable(
        context is not None,
        method=method,
        model=model,
        calibration=calibration,
        threshold=threshold,
        prior=prior,
        max_calls=max_calls,
        force_calibration=force_calibration,
        **options,
    )
    if judge_actions and det.spec.context_field is None:
        raise ConfigError(f"judge_actions needs a check that reads documents (grounded); {det.spec.name} does not")
    result = det.detect(**check_item(det, answer, context, question))
    result.decide(decided_at)
    if calls is not None:
        said = ([question] if question else []) + ([t for t, _ in checked_documents(context)] if context else [])
        result.actions = actions_checked(answer, calls, said, judge=det if judge_actions else None, question=question)
        if judge_actions:
            spent, meta = result.actions["judge_calls"], result.meta
            update = {"calls": meta.calls + spent["calls"], "cache_hits": meta.cache_hits + spent["cache_hits"]}
            result.meta = meta.model_copy(update=update)
    return result
