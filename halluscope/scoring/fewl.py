"""FEWL (Wei et al., factualness evaluations via weighting LLMs), Algorithm 1: the expertise score
r_i = max_k sim(h_i(x), CO_k) - max_k sim(h_i(x), IW_k), the weights lambda = softmax(r), and

    FEWL(y|x) = (1/N) sum_i [ g*(lambda_i sim(y, h_i(x))) - f*(g*((1/K) sum_k sim(y, h_i(x_knn_k)))) ]

with the total-variation pair f*(u) = u, g*(v) = tanh(v)/2. Higher = less hallucinated. The
ablations of the paper's Tables 1, 3 and 10 are the same terms with uniform weights, no penalty, or
the first reference alone. Pure functions over similarities."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

# The paper's ablation names (Table 1 / Table 3 rows, Table 10 "Uniform"), in its table order.
VARIANTS: tuple[str, ...] = ("single", "single+penalty", "multi", "fewl", "fewl-uniform")
VARIANT_TITLES: Mapping[str, str] = {
    "single": "single + no penalty",
    "single+penalty": "single + penalty",
    "multi": "multi + no penalty",
    "fewl": "FEWL",
    "fewl-uniform": "FEWL (uniform lambda)",
}


def g_star(v: float) -> float:
    """Total variation's g*(v) = tanh(v) / 2."""
    return 0.5 * math.tanh(v)


def f_star(u: float) -> float:
    """Total variation's conjugate f*(u) = u."""
    return u


def expertise_score(sim_corrected: Sequence[float], sim_wrong: Sequence[float]) -> float:
    """r_i: the reference answer's best similarity to a corrected answer minus its best to a wrong one."""
    if not sim_corrected or not sim_wrong:
        raise ValueError("the expertise score needs at least one corrected and one wrong answer")
    return max(sim_corrected) - max(sim_wrong)


def expertise_weights(scores: Sequence[float]) -> list[float]:
    """lambda = softmax(r) over the reference models (max-shifted, so large r cannot overflow)."""
    if not scores:
        raise ValueError("expertise weights need at least one reference")
    top = max(scores)
    exps = [math.exp(r - top) for r in scores]
    total = sum(exps)
    return [e / total for e in exps]


def laziness_penalty(neighbour_sims: Sequence[float]) -> float:
    """f*(g*((1/K) sum_k sim(y, h_i(x_knn_k)))); 0 when reference i has no neighbour answer."""
    if not neighbour_sims:
        return 0.0
    return f_star(g_star(sum(neighbour_sims) / len(neighbour_sims)))


def fewl_terms(
    truth_sims: Sequence[float],
    weights: Sequence[float],
    neighbour_sims: Sequence[Sequence[float]] | None = None,
) -> dict[str, object]:
    """Eq. 4 for one answer y. ``truth_sims[i]`` = sim(y, h_i(x)); ``weights`` = lambda;
    ``neighbour_sims[i]`` = [sim(y, h_i(x_knn_k))] (None: no laziness penalty). Returns the score
    and every reference's truthfulness g*(lambda_i s_i) and penalty terms."""
    if not truth_sims:
        raise ValueError("FEWL needs at least one reference answer")
    if len(weights) != len(truth_sims):
        raise ValueError(f"{len(weights)} weights for {len(truth_sims)} reference answers")
    if neighbour_sims is not None and len(neighbour_sims) != len(truth_sims):
        raise ValueError(f"neighbour similarities for {len(neighbour_sims)} of {len(truth_sims)} references")
    truthfulness = [g_star(w * s) for w, s in zip(weights, truth_sims, strict=True)]
    penalty = [laziness_penalty(n) for n in neighbour_sims] if neighbour_sims is not None else [0.0] * len(weights)
    score = sum(t - p for t, p in zip(truthfulness, penalty, strict=True)) / len(truth_sims)
    return {"score": score, "truthfulness": truthfulness, "penalty": penalty}


def fewl_score(
    truth_sims: Sequence[float], weights: Sequence[float], neighbour_sims: Sequence[Sequence[float]] | None = None
) -> float:
    """FEWL(y | x) of Eq. 4 (see ``fewl_terms``)."""
    return float(fewl_terms(truth_sims, weights, neighbour_sims)["score"])  # type: ignore[arg-type]


def variant_scores(
    truth_sims: Sequence[float],
    weights: Sequence[float],
    neighbour_sims: Sequence[Sequence[float]] | None,
) -> dict[str, float | None]:
    """Every ablation from one set of similarities: ``single`` uses the first reference alone
    (lambda = 1), ``multi`` and ``fewl-uniform`` use lambda = 1/N; the ``+penalty`` variants are None
    when no neighbour answers exist."""
    n = len(truth_sims)
    uniform = [1.0 / n] * n
    first_neighbours = [neighbour_sims[0]] if neighbour_sims is not None else None
    return {
        "single": fewl_score(truth_sims[:1], [1.0]),
        "single+penalty": fewl_score(truth_sims[:1], [1.0], first_neighbours) if first_neighbours else None,
        "multi": fewl_score(truth_sims, uniform),
        "fewl": fewl_score(truth_sims, weights, neighbour_sims) if neighbour_sims is not None else None,
        "fewl-uniform": fewl_score(truth_sims, uniform, neighbour_sims) if neighbour_sims is not None else None,
    }
