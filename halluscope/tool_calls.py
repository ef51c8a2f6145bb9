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
the action's verb, no model call), flagged where no matching call ran or where each one failed. Where
the words cannot decide (the claim names no tool; the call ran but its result says in words that it did
not work), a ``judge`` reads the sentence against the trajectory (each call, its arguments, its result).

``actions_checked``: both for a conversation's calls as every door takes them (``given_tool_calls``:
``halluscope.check(..., tool_calls=...)``, ``POST /check``, the MCP check tool, the proxy's request),
in the one shape the middleware's record, the proxy's reply and ``DetectionResult.actions`` share.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from halluscope.checks import check_value
from halluscope.detectors import Detector
from halluscope.errors import ConfigError
from halluscope.results import DetectionResult, RunMeta, TokenUsage, Unit
from halluscope.scoring.actions import VERSIONS, Call, check_claims
from halluscope.scoring.arguments import ArgumentCheck, check_arguments
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
    judge: Detector | None = None,
) -> DetectionResult:
    """Check a call of tool ``name`` with ``arguments`` against ``context`` (the conversation's texts,
    oldest first) and the tool's ``parameters`` (its JSON schema: ``properties``, each one's ``enum`` and
    ``default``); ``result.verdict.flagged`` lists the ungrounded arguments. ``lenient``: a qualifier
    after a comma and a date given against today's are let through (``scoring.arguments.lenient_check``).
    ``judge``: a grounded detector (``Detector("grounded", ...)``, an LLM judge or a fitted checker) that
    second-reads each phrase matching flags (``second_read``); its calls are the result's cost."""
    check_value("check_tool_call", "name", name, str)
    check_value("check_tool_call", "arguments", arguments, Mapping)
    if isinstance(context, str) or not all(isinstance(t, str) for t in context):
        raise ConfigError("context is a list of texts (the conversation's messages and tool results)")
    if isinstance(max_context_chars, bool) or not isinstance(max_context_chars, int) or max_context_chars < 1:
        raise ConfigError(f"max_context_chars is a positive whole number, got {max_context_chars!r}")
    reading_judge(judge)
    began = time.perf_counter()
    kept, dropped = bounded(list(context), max_context_chars)
    units, metas = [], []
    for c in check_arguments(arguments, parameters, kept, lenient):
        unit = Unit(
            text=f"{c.path}={json.dumps(c.value, ensure_ascii=False, default=str)}",
            score=None if c.grounded is None else float(not c.grounded),
            evidence={"argument": c.path, "kind": c.kind, "reason": c.reason, "found": c.found},
        )
        if judge is not None and c.kind == "phrase" and c.grounded is False:
            unit, read = second_read(unit, c, kept, judge)
            metas += [read] if read is not None else []
        units.append(unit)
    params = {"tool": name, "context_texts": len(kept), "context_dropped": dropped, "lenient": lenient}
    meta = cost_of(metas, time.perf_counter() - began, {**params, "judged": len(metas)})
    result = DetectionResult(method=METHOD, units=units, meta=meta, evidence={"tool": name})
    result.decide(UNGROUNDED)
    return result


def reading_judge(judge: Detector | None) -> None:
    """Refuse a judge that cannot read a text against documents."""
    if judge is not None and (not isinstance(judge, Detector) or judge.spec.context_field is None):
        raise ConfigError("judge is a detector that reads documents: halluscope.Detector('grounded', model=...)")


def cost_of(reads: Sequence[RunMeta], seconds: float, params: dict[str, Any], method: str = METHOD) -> RunMeta:
    """A check's cost: its judge's reads summed (none where no judge read)."""
    return RunMeta(
        method=method,
        calls=sum(m.calls for m in reads),
        cache_hits=sum(m.cache_hits for m in reads),
        tokens=TokenUsage(
            prompt=sum(m.tokens.prompt for m in reads), completion=sum(m.tokens.completion for m in reads)
        ),
        seconds=seconds,
        models=sorted({m for read in reads for m in read.models}),
        prompts=sorted({p for read in reads for p in read.prompts}),
        params=params,
    )


def said_as(path: str, value: Any) -> str:
    """An argument as a sentence a grounded judge reads: "The destination city is Tel Aviv, Israel." (its
    name's last part, underscores and camel case as words)."""
    field = re.sub(r"(?<=[a-z])(?=[A-Z])", " ", path.rsplit(".", 1)[-1].split("[")[0]).replace("_", " ").lower()
    return f"The {field} is {str(value).rstrip('.')}."


def second_read(unit: Unit, check: ArgumentCheck, said: Sequence[str], judge: Detector) -> tuple[Unit, RunMeta | None]:
    """A phrase matching flagged, read again by ``judge``: the argument said as a sentence (``said_as``)
    checked against the conversation's texts; its score becomes the judge's (p not supported, its riskiest
    sentence's), with both readings in the evidence. Where the judge gives no score (its answer unread)
    the flag stands, and the evidence says so; where the conversation holds no text, no judge is asked."""
    sentence, documents = said_as(check.path, check.value), [t for t in said if t.strip()]
    if not documents:  # a conversation of blank texts: nothing to read it against
        return unit, None
    found = judge.detect(**judge.answer_item(sentence, None, documents))
    evidence = {**unit.evidence, "judged_as": sentence, "judge_score": found.risk}
    if found.risk is None:
        evidence["reason"] = f"{check.reason}; the judge gave no score, so the flag stands"
        return unit.model_copy(update={"evidence": evidence}), found.meta
    verdict = "unsupported" if found.risk >= UNGROUNDED else "supported"
    evidence["reason"] = f"{check.reason}; the judge finds it {verdict} ({found.risk:.2f})"
    return unit.model_copy(update={"score": found.risk, "evidence": evidence}), found.meta


def trajectory(calls: Sequence[Call]) -> str:
    """What the agent did, as a judge reads it: each call with its arguments and what it returned (or that
    it failed, or never ran)."""
    lines = []
    for c in calls:
        called = f"The agent called {c.name}" + (f" with {json.dumps(c.arguments, default=str)}" if c.arguments else "")
        ended = "It never ran." if c.result is None else f"It {'failed' if c.failed else 'returned'}: {c.result}"
        lines.append(f"{called}. {ended}")
    return "\n".join(lines) or "The agent called no tool."


def judged_claim(
    unit: Unit, calls: Sequence[Call], judge: Detector, question: str | None = None
) -> tuple[Unit, RunMeta]:
    """A claim the words could not decide, read by ``judge`` against the trajectory (and the user's
    ``question``, what the agent was asked to do, where given): its score becomes the judge's (p not
    supported), both readings in the evidence; where the judge gives no score the words' finding stands,
    and the evidence says so."""
    asked = question if question and judge.spec.question_field is not None else None
    found = judge.detect(**judge.answer_item(unit.text, asked, [trajectory(calls)]))
    evidence = {**unit.evidence, "judge_score": found.risk}
    if found.risk is None:
        evidence["reason"] = f"{unit.evidence['reason']}; the judge gave no score, so the matching stands"
        return unit.model_copy(update={"evidence": evidence}), found.meta
    verdict = "unsupported" if found.risk >= UNGROUNDED else "supported"
    evidence["reason"] = f"{unit.evidence['reason']}; read against the trajectory, the judge finds it {verdict}"
    return unit.model_copy(update={"score": found.risk, "evidence": evidence}), found.meta


def check_action_claims(
    answer: str,
    calls: Sequence[Call],
    version: int = 2,
    judge: Detector | None = None,
    question: str | None = None,
) -> DetectionResult:
    """Check the sentences of ``answer`` that claim an action against the conversation's tool ``calls``
    (``scoring.actions``, no model call): a unit a sentence, scored 1 where its claim has no matching call
    that ran without failing, 0 where it has, None where it claims no action; the verdict drawn at 0.5.
    A claim the matching cannot decide says why in its evidence (``undecided``); ``judge`` (a grounded
    detector) reads each such one against the trajectory and its score replaces the matching's
    (``judged_claim``; ``question``, the user's request, read beside it), its calls the result's cost.
    ``version`` 1: the first reading of claims (past forms alone), kept to measure against."""
    check_value("check_action_claims", "answer", answer, str)
    check_value("check_action_claims", "question", question, str | None)
    if version not in VERSIONS:
        raise ConfigError(f"version is one of {', '.join(map(str, VERSIONS))}, got {version!r}")
    reading_judge(judge)
    began = time.perf_counter()
    found = sentences(answer)
    claims = {c.sentence: c for c in check_claims(found, calls, version)}
    units, reads = [], []
    for s in found:
        claim = claims.get(s)
        if claim is None:
            units.append(Unit(text=s, score=None, evidence={"claims_action": False}))
            continue
        evidence = {"claims_action": True, "verb": claim.verb, "calls": list(claim.matched), "reason": claim.reason}
        unit = Unit(text=s, score=float(not claim.grounded), evidence=evidence)
        if claim.undecided is not None:
            unit = unit.model_copy(update={"evidence": {**evidence, "undecided": claim.undecided}})
            if judge is not None:
                unit, read = judged_claim(unit, calls, judge, question)
                reads.append(read)
        units.append(unit)
    params = {"calls": [c.name for c in calls], "version": version, "judged": len(reads)}
    meta = cost_of(reads, time.perf_counter() - began, params, ACTIONS)
    result = DetectionResult(method=ACTIONS, units=units, meta=meta)
    result.decide(UNGROUNDED)
    return result


CALL_FIELDS = ("name", "arguments", "result", "status", "parameters", "id")  # a call as tool_calls= takes it
STATUSES = ("success", "error")  # a tool result's status, as LangChain's ToolMessage and MCP's say it


@dataclass(frozen=True)
class ToolCallMade:
    """A tool call of the conversation: its arguments (None where they are not a JSON object), its
    tool's reply (None: it never ran), whether it failed, and the tool's JSON schema where given."""

    name: str
    arguments: Mapping[str, Any] | None
    result: str | None
    failed: bool
    parameters: Mapping[str, Any] | None = None

    def call(self) -> Call:
        """The call as claims of action are matched to it."""
        return Call(self.name, self.failed, self.result, self.arguments)


def failed_result(result: str | None, status: str | None = None) -> bool:
    """A call that failed: it has no result, its status is ``"error"``, or its result is an error payload
    (a JSON object with an ``error``)."""
    if result is None or status == "error":
        return True
    try:
        payload = json.loads(result)
    except ValueError:
        return False
    return isinstance(payload, dict) and bool(payload.get("error"))


def _arguments(value: Any, where: str) -> Mapping[str, Any] | None:
    """A call's arguments: an object, or its JSON text as OpenAI writes it (None: not a JSON object)."""
    if isinstance(value, Mapping):
        return value
    if not isinstance(value, str):
        raise ConfigError(f"{where}.arguments is an object or its JSON text, got {type(value).__name__}")
    try:
        found = json.loads(value)
    except ValueError:
        return None
    return found if isinstance(found, Mapping) else None


def given_tool_calls(given: Any, name: str = "tool_calls") -> list[ToolCallMade]:
    """``tool_calls=`` as every door takes it: the conversation's calls in order, each an object with
    ``name``, ``arguments`` (an object, or its JSON text), ``result`` (the tool's reply as text; left out:
    the call never ran), ``status`` (``"error"``: it failed) and ``parameters`` (the tool's JSON schema),
    or OpenAI's ``{"function": {"name", "arguments"}}`` with those beside it; every problem named."""
    if isinstance(given, str | Mapping) or not isinstance(given, Sequence):
        raise ConfigError(f"{name} is a list of calls, each an object with a name and arguments")
    calls = []
    for k, call in enumerate(given):
        where = f"{name}[{k}]"
        if not isinstance(call, Mapping):
            raise ConfigError(f"{where} is an object with a name and arguments, got {type(call).__name__}")
        nested = call.get("function") if isinstance(call.get("function"), Mapping) else {}
        flat = {k: v for k, v in {**call, **nested}.items() if k not in ("function", "type")}
        unknown = sorted(set(flat) - set(CALL_FIELDS))
        if unknown:
            raise ConfigError(f"{where} takes no {', '.join(unknown)}; it takes: {', '.join(CALL_FIELDS)}")
        if not isinstance(flat.get("name"), str) or not flat["name"].strip() or "arguments" not in flat:
            raise ConfigError(f"{where} needs a name (a text) and its arguments")
        result, status = flat.get("result"), flat.get("status")
        if result is not None and not isinstance(result, str):
            result = json.dumps(result, ensure_ascii=False, default=str)
        if status is not None and status not in STATUSES:
            raise ConfigError(f"{where}.status is one of {', '.join(STATUSES)}, got {status!r}")
        parameters = flat.get("parameters")
        if parameters is not None and not isinstance(parameters, Mapping):
            raise ConfigError(f"{where}.parameters is the tool's JSON schema (an object)")
        arguments = _arguments(flat["arguments"], where)
        calls.append(ToolCallMade(flat["name"], arguments, result, failed_result(result, status), parameters))
    return calls


def claims_found(result: DetectionResult) -> dict[str, Any]:
    """``check_action_claims``'s result as every door reports it: how many sentences claim an action, and
    each flagged one with its verb, the calls it matched and why; ``undecided``, the claims let through
    that matching could not decide and no judge read (a person's to look at)."""
    assert result.verdict is not None  # check_action_claims draws it
    flagged = [{"text": result.units[i].text, **result.units[i].evidence} for i in result.verdict.flagged]
    undecided = [
        {"text": u.text, **u.evidence}
        for i, u in enumerate(result.units)
        if "undecided" in u.evidence and "judge_score" not in u.evidence and i not in result.verdict.flagged
    ]
    return {"claims": sum(u.score is not None for u in result.units), "flagged": flagged, "undecided": undecided}


def actions_checked(
    answer: str | None,
    calls: Sequence[ToolCallMade],
    said: Sequence[str],
    *,
    lenient: bool = False,
    max_context_chars: int = MAX_CONTEXT_CHARS,
    judge: Detector | None = None,
    question: str | None = None,
) -> dict[str, Any]:
    """A conversation's actions checked: each call's arguments against what was ``said`` (its system and
    user texts, oldest first) and the results of the calls before it that did not fail; the ``answer``'s
    claims of action against every call (``actions``, where an answer is given). No model call, unless a
    ``judge`` is given: it second-reads the phrases matching flags and the claims matching cannot decide
    (beside the user's ``question``), and ``judge_calls`` says what it cost. ``flagged``: whether any finding is."""
    texts, found, reads = list(said), [], []
    for call in calls:
        if call.arguments is None:
            found.append({"name": call.name, "unchecked": "its arguments are not a JSON object"})
        else:
            checked = check_tool_call(
                call.name, call.arguments, context=texts, parameters=call.parameters,
                max_context_chars=max_context_chars, lenient=lenient, judge=judge,
            )  # fmt: skip
            found.append({"name": call.name, "flagged": flagged_reasons(checked)})
            reads.append(checked.meta)
        if not call.failed and call.result is not None and call.result.strip():
            texts.append(call.result)
    claimed = check_action_claims(answer, [c.call() for c in calls], judge=judge, question=question) if answer else None
    claims = claims_found(claimed) if claimed is not None else None
    flagged = any(c.get("flagged") or "unchecked" in c for c in found) or bool(claims and claims["flagged"])
    checked = {"tool_calls": found, **({"actions": claims} if claims is not None else {}), "flagged": flagged}
    if judge is None:
        return checked
    cost = cost_of([*reads, *([claimed.meta] if claimed else [])], 0.0, {})
    return {**checked, "judge_calls": {"calls": cost.calls, "cache_hits": cost.cache_hits, "models": cost.models}}


def flagged_reasons(result: DetectionResult) -> list[str]:
    """Each ungrounded argument with why, as a line a model or a person reads."""
    assert result.verdict is not None  # check_tool_call draws it
    return [f"{result.units[i].text}: {result.units[i].evidence['reason']}" for i in result.verdict.flagged]
