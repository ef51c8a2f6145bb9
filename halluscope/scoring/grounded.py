"""Grounded checking's formula: a unit is as supported as its best-supported chunk of the context.

support(u, c) is p(Yes) / (p(Yes) + p(No)) of the judge's first answer token, or the discrete Yes 1 /
No 0 / otherwise 0.5 without log-probs, or an NLI classifier's P(entailment | chunk, unit); a unit's
score is 1 - max_c support(u, c) (higher = less supported by anything the user gave).
"""

from __future__ import annotations

from collections.abc import Sequence


def grounded_score(supports: Sequence[float]) -> tuple[float, int]:
    """1 - the best support among the chunks a unit was checked against, and that chunk's position in
    ``supports`` (the first of equals)."""
    if not supports:
        raise ValueError("a unit needs at least one chunk of context to be scored")
    best = max(range(len(supports)), key=lambda c: (supports[c], -c))
    return 1.0 - supports[best], best
