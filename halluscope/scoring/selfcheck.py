"""SelfCheckGPT baselines as the FIBE paper uses them.

SelfCheck-Prompt (SCGP, FIBE Appendix E.2 and Section 2): supported(r_i, S^j) is 1.0 for Yes, 0.0
for No, 0.5 otherwise; H_P(i) = mean_j (1 - supported). Our option ``scoring="prob"`` reads supported
as p(Yes) / (p(Yes) + p(No)) of the answer's first token instead, where the model gives log-probs.

SelfCheck-Unigram (Manakul et al. 2023): a unigram model counted over the passage and all its
samples, no smoothing (k = 0); a sentence's score is the max (or mean) over its tokens of -log p.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

SUPPORTED_VALUE = {"yes": 1.0, "no": 0.0}
OTHERWISE = 0.5


def supported_value(answer: str | None) -> float:
    """The paper's reading of one Yes/No answer (``None``: an answer that was neither)."""
    return SUPPORTED_VALUE.get(answer or "", OTHERWISE)


def supported_probability(p_yes: float | None, answer: str | None) -> tuple[float, bool]:
    """supported from the answer's p(Yes) / (p(Yes) + p(No)), and False; without it (no log-probs,
    neither Yes nor No among the top tokens) the paper's discrete value, and True (a fallback)."""
    if p_yes is None:
        return supported_value(answer), True
    return p_yes, False


def scgp_score(supported: Sequence[float]) -> float:
    """H_P(i) for one sentence from its supported values against the N samples."""
    if not supported:
        raise ValueError("a sentence needs at least one sample to be scored")
    return sum(1.0 - s for s in supported) / len(supported)


@dataclass(frozen=True)
class UnigramScore:
    max_neg_logprob: float  # SelfCheck-Unigram (max): the paper's headline variant
    avg_neg_logprob: float


def unigram_scores(
    sentences: Sequence[str],
    passage: str,
    samples: Sequence[str],
    tokenize: Callable[[str], list[str]],
    tokenize_passage: Callable[[str], list[str]],
    k: float = 0.0,
) -> list[UnigramScore]:
    """Score each sentence (``tokenize``) against unigram counts over the passage plus its samples
    (``tokenize_passage``: SelfCheckGPT counts a passage sentence by sentence).

    p(w) = (count(w) + k) / (total + k * |vocabulary + <unk>|); an unseen token gets p(<unk>) = k / ...,
    which is 0 when k = 0 (its -log p is then infinite, as in SelfCheckGPT)."""
    counts: Counter[str] = Counter()
    for text in (passage, *samples):
        counts.update(tokenize_passage(text))
    total = sum(counts.values())
    vocabulary = len(counts) + 1  # + <unk>
    denominator = total + k * vocabulary

    def neg_logprob(token: str) -> float:
        p = (counts.get(token, 0) + k) / denominator
        return math.inf if p == 0 else -math.log(p)

    out = []
    for sentence in sentences:
        values = [neg_logprob(t) for t in tokenize(sentence)]
        if not values:
            raise ValueError(f"sentence has no tokens: {sentence!r}")
        out.append(UnigramScore(max(values), sum(values) / len(values)))
    return out


def selfcheck_nli_score(contradiction: Sequence[float]) -> float:
    """SelfCheck-NLI for one sentence (Manakul et al. 2023; SelfCheckGPT's SelfCheckNLI): the mean over
    the N samples of P(contradiction | sentence, sample), each renormalised over entailment and
    contradiction (neutral left out, as SelfCheckGPT's DeBERTa has no neutral head)."""
    if not contradiction:
        raise ValueError("a sentence needs at least one sample to be scored")
    return sum(contradiction) / len(contradiction)
