"""Claims of action checked against what ran, with no model: a sentence of an answer that says an action
was done ("I have cancelled your order", "your refund has been processed") is matched to the tool calls
of the conversation by the action's verb (``cancelled`` to a tool named ``cancel_order``; a verb that
names no action, such as ``processed``, to the calls whose names share a word with the sentence, else to
any call), and flagged where no matching call ran, or where every one that ran failed (its result an
error). A sentence that says an action was not done ("I could not cancel it") claims nothing. Where the
words cannot decide, the claim says why (``undecided``): it names no tool and shares a word with none (so
it was matched to every call), or the call it matched ran but its result reads as a failure in words ("the
card was declined", "order not found") with no error payload; a judge reads those against the trajectory
(``tool_calls.check_action_claims``). Version 2
(the default) also reads the past forms and the outcome ("the payment was successful") that replies a
model wrote use; version 1, the first list alone, is kept to measure against. Imports nothing of halluscope.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# past forms an answer uses to say it acted, each with the stem a tool's name would share
DONE = {
    "cancelled": "cancel", "canceled": "cancel", "booked": "book", "reserved": "reserv", "sent": "send",
    "emailed": "email", "mailed": "mail", "messaged": "messag", "refunded": "refund", "scheduled": "schedul",
    "created": "creat", "added": "add", "opened": "open", "deleted": "delet", "removed": "remov",
    "updated": "updat", "changed": "chang", "modified": "modif", "ordered": "order", "purchased": "purchas",
    "bought": "buy", "transferred": "transfer", "moved": "mov", "paid": "pay", "submitted": "submit",
    "posted": "post", "published": "publish", "called": "call", "registered": "regist", "renewed": "renew",
    "confirmed": "confirm", "processed": "", "completed": "", "done": "", "finished": "", "placed": "",
    "issued": "", "initiated": "", "arranged": "", "set up": "",
}  # fmt: skip
# version 2 (the default): past forms and outcomes read in replies a model wrote (a development draw of
# benchmarks/action_claims_written.py, seed 1, benchmarks/labels/): "has been set", "was rescheduled",
# "was handled", "was turned down", and an outcome that names no verb, "the payment was successful"
DONE_V2 = {**DONE, "rescheduled": "schedul", "set": "", "handled": "", "turned": ""}  # "set" names no one action
OUTCOME = "successful"  # a claim of an action it does not name, matched as "processed" is
VERSIONS = (1, 2)


def _claim(verbs: Sequence[str]) -> re.Pattern[str]:
    """A claim of one of ``verbs``: first person ("I have cancelled", "I've just booked", "we sent") or a
    result ("has been refunded", "is booked")."""
    alternatives = "|".join(re.escape(v) for v in sorted(verbs, key=len, reverse=True))
    return re.compile(
        rf"\b(?:(?:i|we)(?:'ve|'d| have| had)?|(?:has|have) been|(?:is|are|was|were)(?: now| all)?)"
        rf"(?:\s+(?:just|now|already|successfully|also))*\s+({alternatives})\b",
        re.IGNORECASE,
    )


CLAIMS = {1: _claim(list(DONE)), 2: _claim([*DONE_V2, OUTCOME])}
NEGATED = re.compile(r"\b(?:not|n't|never|unable|couldn't|cannot|can't|failed|could not|wasn't|weren't)\b", re.I)
# a tool's result that says in words it did not do what was asked, though it carries no error payload
FAILURE_WORDS = re.compile(
    r"\b(?:declined|denied|rejected|refused|not found|unavailable|invalid|failed|failure|unable|could not|cannot"
    r"|insufficient|expired|unauthori[sz]ed|forbidden)\b",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Call:
    """A tool call of the conversation and how it ended: ``failed`` where its result was an error (or it
    has no result at all); ``result``, the tool's reply as text where it has one (read for failure in words
    and by a judge), and ``arguments``, what it was called with (shown to a judge)."""

    name: str
    failed: bool
    result: str | None = None
    arguments: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class ActionClaim:
    """A sentence that claims an action, the verb it claims, the calls it matched, and the finding:
    grounded where a matching call ran and did not fail, with why; ``undecided``, why the words cannot
    decide it (None: they can)."""

    sentence: str
    verb: str
    matched: tuple[str, ...]
    grounded: bool
    reason: str
    undecided: str | None = None


def claimed_verb(sentence: str, version: int = 2) -> str | None:
    """The action a sentence says was done (its past form, lowercased), or None: no claim, or a negated one;
    ``version`` 1 reads the first list of past forms alone."""
    found = CLAIMS[version].search(sentence)
    if found is None or NEGATED.search(sentence[: found.end()]):
        return None
    return found.group(1).lower()


def _stem_in(stem: str, name: str) -> bool:
    return stem in re.sub(r"[^a-z]", " ", name.lower())


def _shares_a_word(sentence: str, name: str) -> bool:
    """Whether a tool's name and a sentence share a word (its first five letters: ``refund_payment`` and
    "your refund"), for a verb that names no action of its own ("processed")."""
    heads = {w[:5] for w in re.findall(r"[a-z]{4,}", sentence.lower())}
    return any(w[:5] in heads for w in re.findall(r"[a-z]{4,}", name.lower()))


def matching(sentence: str, verb: str, calls: Sequence[Call]) -> tuple[list[Call], bool]:
    """The calls a claim is about: those whose name shares its verb's stem, or for a verb that names no
    action ("processed", "done") those whose name shares a word with the sentence, else every call; and
    whether it fell back to every call (the words did not say which)."""
    stem = DONE_V2.get(verb, "")
    if stem:
        return [c for c in calls if _stem_in(stem, c.name)], False
    named = [c for c in calls if _shares_a_word(sentence, c.name)]
    return (named, False) if named else (list(calls), bool(calls))


def _undecided(ran: Sequence[Call], fell_back: bool) -> str | None:
    """Why a claim grounded by ``ran`` (its matching calls that did not fail) is not decided by words."""
    if fell_back:
        return "the claim names no tool it was called: matched to every call"
    said = [c for c in ran if c.result is not None and FAILURE_WORDS.search(c.result)]
    if len(said) == len(ran):
        return f"the result of {', '.join(c.name for c in said)} reads as a failure in words, with no error"
    return None


def check_claims(sentences: Sequence[str], calls: Sequence[Call], version: int = 2) -> list[ActionClaim]:
    """Each sentence that claims an action, matched to ``calls`` (the conversation's, in order)."""
    if version not in VERSIONS:
        raise ValueError(f"the claims' reading has versions {', '.join(map(str, VERSIONS))}, not {version!r}")
    found = []
    for sentence in sentences:
        verb = claimed_verb(sentence, version)
        if verb is None:
            continue
        matched, fell_back = matching(sentence, verb, calls)
        names = tuple(c.name for c in matched)
        ran = [c for c in matched if not c.failed]
        if not matched:
            stem = DONE_V2.get(verb, "")
            why = f"no tool whose name says {stem!r} was called" if stem else "no tool was called"
            found.append(ActionClaim(sentence, verb, names, False, why))
        elif not ran:
            found.append(ActionClaim(sentence, verb, names, False, f"the call failed: {', '.join(names)}"))
        else:
            done = f"done by {', '.join(c.name for c in ran)}"
            found.append(ActionClaim(sentence, verb, names, True, done, _undecided(ran, fell_back)))
    return found
