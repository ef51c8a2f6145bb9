"""CLUE (Wang et al., concept-level uncertainty): the concept uncertainty U(c) = -(1/N) sum_i log f(o_i, c)
(Eq. 2), the concept labels of the hallucination-detection protocol (Eq. 3 thresholds), and the two
diversity metrics of Section 5.3 (harmonic mean of the lower-level uncertainties, Eq. 4; entropy of
the outputs' argmax assignment, Eqs. 5-7). Pure functions over concept scores in [0, 1]."""

from __future__ import annotations

import math
from collections.abc import Sequence

FLOOR = 1e-6  # f is clipped to [FLOOR, 1] before the log: an NLI or Yes/No probability can round to 0


def concept_uncertainty(scores: Sequence[float], floor: float = FLOOR) -> float:
    """U(c) = -(1/N) sum_i log max(f(o_i, c), floor) over the N outputs' scores of one concept."""
    if not scores:
        raise ValueError("a concept's uncertainty needs the scores of at least one output")
    bad = [s for s in scores if not 0.0 <= s <= 1.0]
    if bad:
        raise ValueError(f"concept scores must be probabilities in [0, 1], got {bad}")
    return -sum(math.log(max(s, floor)) for s in scores) / len(scores) + 0.0


def concept_uncertainties(matrix: Sequence[Sequence[float]], floor: float = FLOOR) -> list[float]:
    """U of every concept from an N x M score matrix (row i = output o_i, column j = concept c_j)."""
    if not matrix:
        raise ValueError("the score matrix has no outputs")
    width = len(matrix[0])
    if any(len(row) != width for row in matrix):
        raise ValueError("every output needs a score for every concept")
    return [concept_uncertainty([row[j] for row in matrix], floor) for j in range(width)]


def harmonic_mean_diversity(uncertainties: Sequence[float]) -> float:
    """Eq. 4: M / sum_j 1/U(c_j); a lower-level concept with U = 0 (every output is it) gives 0."""
    if not uncertainties:
        raise ValueError("diversity needs at least one lower-level concept")
    if any(u < 0 for u in uncertainties):
        raise ValueError(f"uncertainties are non-negative, got {list(uncertainties)}")
    if any(u == 0 for u in uncertainties):
        return 0.0
    return len(uncertainties) / sum(1.0 / u for u in uncertainties)


def assignment_counts(matrix: Sequence[Sequence[float]]) -> list[int]:
    """Eqs. 6-7: n(c_j), the outputs whose highest-scoring lower-level concept is c_j (ties: the first)."""
    if not matrix or not matrix[0]:
        raise ValueError("the score matrix needs at least one output and one concept")
    counts = [0] * len(matrix[0])
    for row in matrix:
        counts[max(range(len(row)), key=lambda j: (row[j], -j))] += 1
    return counts


def entropy_diversity(counts: Sequence[int]) -> float:
    """Eq. 5: -sum_j n(c_j)/N log(n(c_j)/N), natural log (the paper's uniform 5-tone set gives about
    log 5 = 1.609; it reports 1.594); empty classes contribute 0."""
    total = sum(counts)
    if total <= 0 or any(n < 0 for n in counts):
        raise ValueError(f"counts must be non-negative with a positive total, got {list(counts)}")
    return -sum((n / total) * math.log(n / total) for n in counts if n) + 0.0


def concept_labels(answer_scores: Sequence[float], theta_h: float, theta_l: float) -> list[int]:
    """Eq. 3: 0 (entailed concept) if S^a > theta_h, 1 (hallucinated) if S^a < theta_l, else -1 (left out)."""
    if not 0.0 <= theta_l <= theta_h <= 1.0:
        raise ValueError(f"thresholds need 0 <= theta_l <= theta_h <= 1, got theta_l={theta_l}, theta_h={theta_h}")
    return [0 if s > theta_h else 1 if s < theta_l else -1 for s in answer_scores]
