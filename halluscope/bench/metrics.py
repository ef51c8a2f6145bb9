"""Detection metrics shared by the benchmarks: AUC-PR, AUC-ROC, AURAC and bootstrap intervals (of one
metric over scored units, and of every metric of a run over its items)."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

Record = dict[str, Any]


def both_classes(y: np.ndarray) -> bool:
    """AUCs are undefined when every label is the same (e.g. no major-inaccurate sentence in a small subset)."""
    return bool(y.any()) and not bool(y.all())


def auc_pr(y: np.ndarray, scores: np.ndarray) -> float | None:
    """sklearn's precision_recall_curve, then auc(recall, precision), x100 (the SelfCheckGPT protocol)."""
    from sklearn.metrics import auc, precision_recall_curve

    if not both_classes(y):
        return None
    precision, recall, _ = precision_recall_curve(y, scores)
    return float(auc(recall, precision) * 100)


def auc_roc(y: np.ndarray, scores: np.ndarray) -> float | None:
    """Area under the ROC curve, x100; None with one class only."""
    from sklearn.metrics import roc_auc_score

    if not both_classes(y):
        return None
    return float(roc_auc_score(y, scores) * 100)


def fraction(x100: float | None) -> float | None:
    """An x100 metric (AUC-PR, AUC-ROC) back to [0, 1], for protocols that report fractions."""
    return None if x100 is None else x100 / 100


AURAC_QUANTILES = np.linspace(0.1, 1, 20)


def aurac(correct: np.ndarray, uncertainty: np.ndarray) -> float:
    """Area under the rejection-accuracy curve as the official semantic-entropy code computes it: the
    accuracy of the answers kept when those above the q-quantile of uncertainty are rejected, for 20
    q from 0.1 to 1, summed times the step (so a perfect model with accuracy 1 scores 20 x 0.9/19)."""
    if correct.size == 0:
        raise ValueError("AURAC of no answers")
    kept = [float(np.mean(correct[uncertainty <= np.quantile(uncertainty, q)])) for q in AURAC_QUANTILES]
    return float(np.sum(kept) * (AURAC_QUANTILES[1] - AURAC_QUANTILES[0]))


def bootstrap_ci(
    metric: Callable[[np.ndarray, np.ndarray], float | None],
    y: np.ndarray,
    scores: np.ndarray,
    n_resamples: int = 1000,
    level: float = 0.95,
    seed: int = 0,
) -> tuple[float, float] | None:
    """Percentile bootstrap interval of ``metric(y, scores)`` over resampled items (fixed seed, so a
    rerun prints the same interval); resamples where the metric is undefined are dropped, and None
    comes back when fewer than half of them are defined."""
    rng = np.random.default_rng(seed)
    values = []
    for _ in range(n_resamples):
        idx = rng.integers(0, y.size, y.size)
        value = metric(y[idx], scores[idx])
        if value is not None:
            values.append(value)
    if len(values) < n_resamples / 2:
        return None
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(values, [tail, 100 - tail])
    return float(low), float(high)


def flat_metrics(metrics: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """The metrics a table can show: numbers and short strings, nested ones under 'outer.inner'."""
    flat: dict[str, Any] = {}
    for key, value in metrics.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat |= flat_metrics(value, f"{name}.")
        elif isinstance(value, int | float | str | bool) or value is None:
            flat[name] = value
    return flat


BOOTSTRAP_RESAMPLES = 1000


def bootstrap_metrics(
    summarise: Callable[[list[Record]], dict[str, Any]],
    records: Sequence[Record],
    n_resamples: int = BOOTSTRAP_RESAMPLES,
    level: float = 0.95,
    seed: int = 0,
) -> dict[str, list[float]]:
    """A percentile bootstrap interval for every real-valued metric of ``summarise(records)``, resampling
    whole items (a passage's sentences move together: they are not independent draws). Fixed seed, so a
    rerun gives the same intervals; counts (integers) get none, and a metric defined in fewer than half
    the resamples (one class only) gets none."""
    if len(records) < 2:
        return {}
    names = [k for k, v in flat_metrics(summarise(list(records))).items() if isinstance(v, float)]
    rng = np.random.default_rng(seed)
    values: dict[str, list[float]] = {name: [] for name in names}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a resample of constant scores: scipy warns, the metric is None or nan
        for _ in range(n_resamples):
            drawn = [records[i] for i in rng.integers(0, len(records), len(records))]
            try:
                flat = flat_metrics(summarise(drawn))
            except (ValueError, ZeroDivisionError, FloatingPointError):  # undefined on this resample
                continue
            for name in names:
                value = flat.get(name)
                if isinstance(value, float) and math.isfinite(value):
                    values[name].append(value)
    tail = (1 - level) / 2 * 100
    return {
        name: [float(x) for x in np.percentile(found, [tail, 100 - tail])]
        for name, found in values.items()
        if len(found) >= n_resamples / 2
    }
