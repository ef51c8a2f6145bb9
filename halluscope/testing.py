"""Assertions for a test suite (pytest or any other): an application's answer checked as a test checks
anything else. A failure lists the flagged sentences with their scores and evidence::

    from halluscope.testing import assert_not_hallucinated, assert_supported

    def test_the_rag_answer_rests_on_its_documents():
        answer, documents = my_rag("Where is Canberra?")
        assert_supported(answer, documents, question="Where is Canberra?", model="local:qwen2.5-coder-1.5b")

Thresholds as ``halluscope.check`` takes them: given, or from a calibration file (p >= 0.5), or 0.5 on
the default methods' 0-1 scores.
"""

from __future__ import annotations

import json
from typing import Any

from halluscope.check_answer import check
from halluscope.errors import ConfigError
from halluscope.results import DetectionResult

EVIDENCE_SHOWN = ("best_chunk_metadata", "answers", "parsed")  # what a reader acts on, beside the closest sentences


def assert_supported(answer: str, context: Any, **settings: Any) -> DetectionResult:
    """Fail unless every sentence of ``answer`` is supported by ``context`` (``grounded`` by default);
    returns the result when it passes. ``settings``: ``check``'s own (``question``, ``model``,
    ``method``, ``threshold``, ``calibration``, a method's options)."""
    __tracebackhide__ = True  # pytest shows the failing test's line, not this helper's
    if context is None:
        raise ConfigError("assert_supported checks an answer against documents: give its context")
    return _passed(check(answer, context=context, **settings), "not supported by its documents")


def assert_not_hallucinated(answer: str, **settings: Any) -> DetectionResult:
    """Fail when any sentence of ``answer`` is flagged as hallucinated (``direct-question`` by default:
    no documents); returns the result when it passes. ``settings``: ``check``'s own, as for
    ``assert_supported``."""
    __tracebackhide__ = True
    return _passed(check(answer, **settings), "flagged as hallucinated")


def _passed(result: DetectionResult, what: str) -> DetectionResult:
    __tracebackhide__ = True
    if result.error:
        raise AssertionError(f"{result.method} could not check the answer: {result.error}")
    verdict = result.verdict
    if verdict is None or not verdict.count:
        return result
    on = "p(hallucinated)" if verdict.on == "probability" else "score"
    lines = [f"{verdict.count} of {verdict.units} sentences {what} ({result.method}, {on} >= {verdict.threshold:g}):"]
    for position in verdict.flagged:
        unit = result.units[position]
        value = unit.probability if verdict.on == "probability" else unit.score
        lines.append(f"  [{position}] {on} {value:.3f} >= {verdict.threshold:g}: {unit.text}")
        for sentence in unit.closest_evidence(most=2):  # what the documents say closest to it
            lines.append(f"        closest in the documents: {sentence}")
        shown = {k: unit.evidence[k] for k in EVIDENCE_SHOWN if k in unit.evidence}
        if shown:
            lines.append(f"        evidence: {json.dumps(shown, ensure_ascii=False, default=str)[:400]}")
    raise AssertionError("\n".join(lines))
