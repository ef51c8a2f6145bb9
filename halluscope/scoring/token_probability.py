"""Token-probability scores of sentences: SelfCheckGPT's grey-box and proxy-LLM baselines (Manakul et al.
2023, Section 5): over the J tokens of sentence i, with p_ij the probability of its j-th token and
H_ij the entropy of the next-token distribution at that position,

    Avg(-log p) = -1/J sum_j log p_ij        Max(-log p) = max_j (-log p_ij)
    Avg(H)      =  1/J sum_j H_ij             Max(H)      = max_j H_ij

Tokens reach sentences by character offsets: a token belongs to the sentence where it starts, and a
token that starts in the space between two sentences to the next one (its leading space is part of
that sentence's first word)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

import numpy as np

from halluscope.scoring.phr import categorical_entropy

Variant = Literal["avg-nll", "max-nll", "avg-entropy", "max-entropy"]
VARIANTS: tuple[Variant, ...] = get_args(Variant)
ENTROPY_VARIANTS: tuple[Variant, ...] = ("avg-entropy", "max-entropy")


@dataclass(frozen=True)
class TokenStat:
    """One token of a text: where it starts (a character offset into the text), its log-probability,
    and the entropy (nats) of the distribution it was drawn from (None where no distribution is known)."""

    start: int
    logprob: float
    entropy: float | None = None


@dataclass(frozen=True)
class SentenceScore:
    """A sentence's four scores (None where it has no token, or no entropy is known) and its token count."""

    tokens: int
    avg_nll: float | None
    max_nll: float | None
    avg_entropy: float | None
    max_entropy: float | None

    def variant(self, name: Variant) -> float | None:
        value: float | None = getattr(self, name.replace("-", "_"))  # 'avg-nll' is avg_nll
        return value


def entropy(logprobs: Iterable[float]) -> float:
    """H = -sum p log p of a distribution given by its log-probabilities, renormalised over what is
    given (the whole vocabulary gives the entropy; an API's top-k gives the top-k renormalised one)."""
    values = np.array([v for v in logprobs if v is not None and math.isfinite(v)], dtype=np.float64)
    if not values.size:
        raise ValueError("an entropy needs at least one finite log-probability")
    return categorical_entropy(values - np.logaddexp.reduce(values))


def sentence_spans(text: str, sentences: Sequence[str]) -> list[tuple[int, int] | None]:
    """Where each sentence sits in the text, found in order (None for one not found verbatim)."""
    spans: list[tuple[int, int] | None] = []
    cursor = 0
    for sentence in (s.strip() for s in sentences):
        at = text.find(sentence, cursor) if sentence else -1
        if at < 0:
            spans.append(None)
            continue
        cursor = at + len(sentence)
        spans.append((at, cursor))
    return spans


def tokens_by_sentence(stats: Sequence[TokenStat], spans: Sequence[tuple[int, int] | None]) -> list[list[TokenStat]]:
    """Each sentence's tokens: those that start after the previous found sentence's last character up
    to its own last (the gap before a sentence is its first word's leading space); the first found
    sentence also takes any tokens before it, the last any after it."""
    found = [(i, span) for i, span in enumerate(spans) if span is not None]
    groups: list[list[TokenStat]] = [[] for _ in spans]
    for k, (i, (_, end)) in enumerate(found):
        low = -math.inf if k == 0 else found[k - 1][1][1]
        high = end if k + 1 < len(found) else math.inf
        groups[i] = [t for t in stats if low <= t.start < high]
    return groups


def sentence_score(tokens: Sequence[TokenStat]) -> SentenceScore:
    """The four scores of one sentence's tokens (SelfCheckGPT's definitions above)."""
    if not tokens:
        return SentenceScore(0, None, None, None, None)
    nll = [-t.logprob for t in tokens]
    known = [t.entropy for t in tokens if t.entropy is not None]
    whole = len(known) == len(tokens)
    return SentenceScore(
        tokens=len(tokens),
        avg_nll=sum(nll) / len(nll),
        max_nll=max(nll),
        avg_entropy=sum(known) / len(known) if whole else None,
        max_entropy=max(known) if whole else None,
    )


def sentence_scores(text: str, sentences: Sequence[str], stats: Sequence[TokenStat]) -> list[SentenceScore]:
    """Each sentence's scores from the tokens of the text it is part of."""
    return [sentence_score(group) for group in tokens_by_sentence(stats, sentence_spans(text, sentences))]


def token_at(logprobs: Sequence[Mapping[str, Any]], at: int) -> Mapping[str, Any] | None:
    """The reply's token (its log-prob entry) that covers character ``at`` of the text its tokens join to:
    a verdict word of a one-call reply; None past the end."""
    end = 0
    for entry in logprobs:
        end += len(entry["token"])
        if end > at:
            return entry
    return None
