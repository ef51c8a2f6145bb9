"""A tool call checked before it runs, and an answer's claims of action checked against what ran.

``halluscope.check_tool_call(name, arguments, context=...,
parameters=...)``. Each argument value is checked against what the conversation holds (its system and
user messages and its tools' results, never the model's own words) and the tool's schema, with no model
call (``scoring.arguments``), and comes back as a unit of a ``DetectionResult`` (``argument=value``,
score 1 where ungrounded, 0 where grounded, None where matching cannot check it: a flag, a phrase of no
content word), with why in its evidence and the verdict drawn at 0.5: the shape every answer's check has.

The context is bounded (``max_context_chars``): the newest texts are kept, the oldest dropped first, and
the result's params say how many were dropped.

``halluscope.check_action_claims(answer, calls)``: each sentence of an answer that says an action was
done ("I have cancelled your order") matched to the conversation's tool calls (``scoring.actions``: by
the action's verb, no model call), flagged where no matching call ran or where each one failed.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

from halluscope.checks import check_value
from halluscope.errors import ConfigError
from halluscope.results import DetectionResult, RunMeta, Unit
from halluscope.scoring.actions import Call, check_claims
from halluscope.scoring.arguments import check_arguments
from halluscope.text import sentences

METHOD = "tool-call"
ACTIONS = "action-claims"
MAX_CONTEXT_CHARS = 200_000  # about 50k tokens of conversation: the oldest texts beyond it are dropped
UNGROUNDED = 0.5  # the verdict's threshold: an ungrounded value scores 1, a grounded one 0


def bounded(texts: Sequence[str], limit: int) -> tuple[list[str], int]:
    """The newest texts whose characters fit in ``limit`` (in their order), and how many older were dropped."""
    kept: list[str] = []
    used = 0
    for text in reversed(texts):
        if used + len(text) > limit:
            break
        kept.append(text)
        used += len(text)
    return kept[::-1], len(texts) - len(kept)


def check_tool_call(
    name: str,
    arguments: Mapping[str, Any],
    *,
    context: Sequence[str],
    parameters: Mapping[str, Any] | None = None,
    max_context_chars: int = MAX_CONTEXT_CHARS,
    lenient: bool = False,
) -> DetectionResult:
    """Check a call of tool ``name`` with ``arguments`` against ``context`` (the conversation's texts,
    oldest first) and the tool's ``parameters`` (its JSON schema: ``properties``, each one's ``enum`` and
    ``default``); ``result.verdict.flagged`` lists the ungrounded arguments. ``lenient``: a qualifier
    after a comma and a date given against today's are let through (``scoring.arguments.lenient_check``)."""
    check_value("check_tool_call", "name", name, str)
    check_value("check_tool_call", "arguments", arguments, Mapping)
    if isinstance(context, str) or not all(isinstance(t, str) for t in context):
        raise ConfigError("context is a list of texts (the conversation's messages and tool results)")
    if isinstance(max_context_chars, bool) or not isinstance(max_context_chars, int) or max_context_chars < 1:
        raise ConfigError(f"max_context_chars is a positive whole number, got {max_context_chars!r}")
    began = time.perf_counter()
    kept, dropped = bounded(list(context), max_context_chars)
    units = [
        Unit(
            text=f"{c.path}={json.dumps(c.value, ensure_ascii=False, default=str)}",
            score=None if c.grounded is None else float(not c.grounded),
            evidence={"argument": c.path, "kind": c.kind, "reason": c.reason, "found": c.found},
        )
        for c in check_arguments(arguments, parameters, kept, lenient)
    ]
    meta = RunMeta(
        method=METHOD,
        seconds=time.perf_counter() - began,
        params={"tool": name, "context_texts": len(kept), "context_dropped": dropped, "lenient": lenient},
    )
    result = DetectionResult(method=METHOD, units=units, meta=meta, evidence={"tool": name})
    result.decide(UNGROUNDED)
    return result


def check_action_claims(answer: str, calls: Sequence[Call]) -> DetectionResult:
    """Check the sentences of ``answer`` that claim an action against the conversation's tool ``calls``
    (``scoring.actions``, no model call): a unit a sentence, scored 1 where its claim has no matching call
    that ran without failing, 0 where it has, None where it claims no action; the verdict drawn at 0.5."""
    check_value("check_action_claims", "answer", answer, str)
    began = time.perf_counter()
    found = sentences(answer)
    claims = {c.sentence: c for c in check_claims(found, calls)}
    units = [
        Unit(text=s, score=None, evidence={"claims_action": False})
        if (claim := claims.get(s)) is None
        else Unit(
            text=s,
            score=float(not claim.grounded),
            evidence={"claims_action": True, "verb": claim.verb, "calls": list(claim.matched), "reason": claim.reason},
        )
        for s in found
    ]
    meta = RunMeta(method=ACTIONS, seconds=time.perf_counter() - began, params={"calls": [c.name for c in calls]})
    result = DetectionResult(method=ACTIONS, units=units, meta=meta)
    result.decide(UNGROUNDED)
    return result


def flagged_reasons(result: DetectionResult) -> list[str]:
    """Each ungrounded argument with why, as a line a model or a person reads."""
    assert result.verdict is not None  # check_tool_call draws it
    return [f"{result.units[i].text}: {result.units[i].evidence['reason']}" for i in result.verdict.flagged]
