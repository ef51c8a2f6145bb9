"""The pure parts of the FIBE paper (Hirano et al.): exam construction, H_F, Direct Question's
known(), Snowballing Correction and the ensembles (Sections 3.1-3.4, Appendix E).

- Exam: each blank object of sentence r_i becomes ``"$hypernym_k"``; one object (with its hypernym)
  keeps one variable across the exam, as in the paper's Appendix E.3.2 example; objects that stand
  before the sentence's subject are never masked (they would invite topic picking).
- H_F(i) = 1 - (100 N)^-1 sum_j score(a_i^j, r_i), over the N answers that were graded.
- known(r_i, P): Yes -> 1.0 (or p_1, the first answer token's probability, when the model gives
  log-probs), No -> 0.0 (or 1 - p_1), anything else -> 0.0; H_D = 1 - known.
- H_S(i; H, theta) = clip(H(i) + |R|^-1 max(0, sum_{k<i} H(k) - theta)).
- H_+(i) = clip(C_F H_F(i) + C_D H_D(i) + C_P H_P(i)); H_o = H_S(H_+).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

THETA = 0.1  # the paper's SBC threshold (Section 4.1)
C_D = 0.2  # the paper's Direct Question weight
C_BOTH = 0.5  # C_F and C_P when both FIBE and SCGP are in the ensemble, else 1.0 for the one used


@dataclass
class Exam:
    """The fill-in-the-blank exam built from a passage and the create() answer."""

    sentences: list[str]  # exam sentence i: r_i with its blanks replaced by "$hypernym_k"
    answer_key: dict[str, str]  # variable ("$year_0") -> the original object ("1983")
    events: list[dict[str, Any]] = field(default_factory=list)  # what could not be used, per sentence


def _pattern(text: str) -> re.Pattern[str]:
    """The object as a whole word or phrase, case-insensitively."""
    return re.compile(rf"(?<!\w){re.escape(text.strip())}(?!\w)", re.IGNORECASE)


def _overlaps(span: tuple[int, int], taken: Sequence[tuple[int, int]]) -> bool:
    return any(span[0] < end and start < span[1] for start, end in taken)


def build_exam(sentences: Sequence[str], created: Sequence[Mapping[str, Any]]) -> Exam:
    """Mask each sentence with the subject and blanks that create() extracted for its serial number.

    ``created`` is the fibe_exam parser's output ([{sid, subject, blanks}]). A sentence create() did
    not cover stays unmasked; a blank that does not occur in its sentence, a subject that does not,
    and an entry for a serial number the passage lacks are recorded as events."""
    entries: dict[int, Mapping[str, Any]] = {}
    events: list[dict[str, Any]] = []
    for block in created:
        sid = int(block["sid"])
        if not 0 <= sid < len(sentences):
            events.append({"sentence": sid, "event": "unknown_sentence"})
        else:
            entries.setdefault(sid, block)
    masks: list[list[tuple[int, int, str, str]]] = []  # per sentence: (start, end, object, hypernym)
    for i, sentence in enumerate(sentences):
        masks.append([])
        if (entry := entries.get(i)) is None:
            events.append({"sentence": i, "event": "not_in_exam"})
            continue
        subject_span = (0, 0)
        subject = (entry.get("subject") or {}).get("object") or ""
        if not subject.strip():
            events.append({"sentence": i, "event": "no_subject"})
        elif found := _pattern(subject).search(sentence):
            subject_span = found.span()
        else:
            events.append({"sentence": i, "event": "subject_not_found", "detail": subject})
        taken: list[tuple[int, int]] = [subject_span] if subject_span[1] > 0 else []
        unique: dict[tuple[str, str], Mapping[str, Any]] = {}  # a looping model repeats its blanks
        for b in entry.get("blanks") or []:
            if str(b.get("object", "")).strip():
                unique.setdefault((str(b["object"]).strip().lower(), str(b.get("hypernym") or "").lower()), b)
        blanks = list(unique.values())
        for blank in sorted(blanks, key=lambda b: -len(b["object"])):  # longest first: "University of X" before "X"
            spans = [m.span() for m in _pattern(blank["object"]).finditer(sentence)]
            if not spans:
                events.append({"sentence": i, "event": "blank_not_found", "detail": blank["object"]})
                continue
            hypernym = (blank.get("hypernym") or "").strip() or "blank"
            for span in spans:
                if span[0] >= subject_span[0] and not _overlaps(span, taken):  # never before the subject
                    taken.append(span)
                    masks[i].append((*span, blank["object"].strip(), hypernym))
    # variables are numbered in order of first appearance; one (object, hypernym) keeps one variable
    variables: dict[tuple[str, str], str] = {}
    answer_key: dict[str, str] = {}
    exam = []
    for sentence, masked in zip(sentences, masks, strict=True):
        out, last = [], 0
        for start, end, obj, hypernym in sorted(masked):
            key = (obj.lower(), hypernym.lower())
            if key not in variables:
                variables[key] = f"${hypernym}_{len(variables)}"
                answer_key[variables[key]] = obj
            out.append(f'{sentence[last:start]}"{variables[key]}"')
            last = end
        exam.append("".join(out) + sentence[last:])
    return Exam(exam, answer_key, events)


def fibe_score(scores: Sequence[float]) -> float:
    """H_F(i) from the 0-100 grades of the N answers of one sentence."""
    if not scores:
        raise ValueError("H_F needs at least one graded answer")
    return 1.0 - sum(scores) / (100.0 * len(scores))


def first_token_probability(logprobs: Sequence[Mapping[str, Any]] | None) -> float | None:
    """p_1: the probability of the answer's first token that holds a letter (leading spaces and
    quotes are not the answer); None when the model gave no log-probs."""
    for entry in logprobs or []:
        if any(ch.isalpha() for ch in entry["token"]):
            return math.exp(float(entry["logprob"]))
    return None


def known_value(answer: str | None, p_first: float | None = None) -> float:
    """known(r_i, P) from the Direct Question answer ('yes', 'no', or None for neither)."""
    if answer == "yes":
        return 1.0 if p_first is None else p_first
    if answer == "no":
        return 0.0 if p_first is None else 1.0 - p_first
    return 0.0


def clip(x: float) -> float:
    return min(1.0, max(0.0, x))


def snowballing_correction(scores: Sequence[float], theta: float = THETA) -> list[float]:
    """H_S: each sentence gets |R|^-1 of the hallucination that the sentences before it exceed theta by."""
    n = len(scores)
    out, before = [], 0.0
    for h in scores:
        out.append(clip(h + max(0.0, before - theta) / n))
        before += h
    return out


def ensemble_weights(fibe: bool, direct_question: bool, selfcheck: bool) -> dict[str, float]:
    """The paper's fixed weights: C_F = C_P = 0.5 when both are used, else 1.0 for the one used; C_D = 0.2."""
    both = fibe and selfcheck
    return {
        "fibe": (C_BOTH if both else 1.0) if fibe else 0.0,
        "direct_question": C_D if direct_question else 0.0,
        "selfcheck": (C_BOTH if both else 1.0) if selfcheck else 0.0,
    }


def ensemble(
    fibe: Sequence[float] | None = None,
    direct_question: Sequence[float] | None = None,
    selfcheck: Sequence[float] | None = None,
    weights: Mapping[str, float] | None = None,
) -> list[float]:
    """H_+ per sentence from the methods given (H_F, H_D, H_P), with the paper's weights by default."""
    parts = {"fibe": fibe, "direct_question": direct_question, "selfcheck": selfcheck}
    used = {name: list(h) for name, h in parts.items() if h is not None}
    if not used:
        raise ValueError("an ensemble needs at least one method's scores")
    lengths = {len(h) for h in used.values()}
    if len(lengths) != 1:
        raise ValueError(f"every method must score the same sentences; got lengths {sorted(lengths)}")
    w = dict(weights) if weights is not None else ensemble_weights(*(parts[k] is not None for k in parts))
    n = lengths.pop()
    return [clip(sum(w.get(name, 0.0) * h[i] for name, h in used.items())) for i in range(n)]


def variant_scores(parts: Mapping[str, Sequence[float]], sbc: bool, theta: float = THETA) -> list[float]:
    """A variant's score per sentence from its parts (``fibe``: H_F, and ``direct_question`` H_D and
    ``selfcheck`` H_P where it uses them): their ensemble when there are several, then H_S with ``sbc``."""
    combined = (
        ensemble(parts["fibe"], parts.get("direct_question"), parts.get("selfcheck"))
        if len(parts) > 1
        else list(parts["fibe"])
    )
    return snowballing_correction(combined, theta) if sbc else combined
