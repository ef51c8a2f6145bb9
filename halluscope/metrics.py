"""Detection metrics shared by the benchmarks: AUC-PR, AUC-ROC, AURAC and bootstrap intervals (of one
metric over scored units, of every metric of a run over its items, and of the difference of two
methods on the same items: the paired interval every verdict between two methods is decided by)."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from functools import partial
from typing import Any

import numpy as np

Record = dict[str, Any]


def both_classes(y: np.ndarray) -> bool:
    """AUCs are undefined when every label is the same (e.g. no major-inaccurate sentence in a small subset)."""
    return bool(y.any()) and not bool(y.all())


def auc_pr(y: np.ndarray, scores: np.ndarray) -> float | None:
    """sklearn's precision_recall_curve, then auc(recall, precision), x100 (the SelfCheckGPT protocol);
    None with one class only. Computed by ``auc_pr_resampled`` on one unweighted row: equal to
    scikit-learn's to 1e-12 (tests/test_metrics.py), without its per-call validation."""
    y = np.asarray(y, dtype=bool)
    if not both_classes(y):
        return None
    return float(auc_pr_resampled(y, np.asarray(scores, dtype=np.float64), np.ones((1, y.size)))[0] * 100)


def auc_roc(y: np.ndarray, scores: np.ndarray) -> float | None:
    """Area under the ROC curve (sklearn's roc_auc_score), x100; None with one class only."""
    y = np.asarray(y, dtype=bool)
    if not both_classes(y):
        return None
    return float(auc_roc_resampled(y, np.asarray(scores, dtype=np.float64), np.ones((1, y.size)))[0] * 100)


# ---------------------------------------------------------------- metrics of many resamples at once
#
# A bootstrap resample of items is a row of counts (how often each item was drawn); a unit weighs its
# item's count. Repeating a unit w times and weighing it by w give the same curves, so one sort of the
# scores serves every row, and the whole bootstrap is a few matrix operations instead of a thousand
# scikit-learn calls. Each function returns one value per row (NaN where the metric is undefined).


def _tied_counts(y: np.ndarray, scores: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """True and false positives at each distinct threshold, highest first: (rows, thresholds) each."""
    order = np.argsort(-scores, kind="mergesort")
    ranked, positive = scores[order], y[order]
    ends = np.r_[np.flatnonzero(np.diff(ranked)), ranked.size - 1]  # the last unit of each run of ties
    w = weights[:, order]
    tps = np.cumsum(w * positive, axis=1)[:, ends]
    fps = np.cumsum(w * ~positive, axis=1)[:, ends]
    return tps, fps


def auc_roc_resampled(y: np.ndarray, scores: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """AUC-ROC (a fraction) of each row of unit ``weights``: the trapezoid under (FPR, TPR) from (0, 0)."""
    if not scores.size:
        return np.full(weights.shape[0], np.nan)
    tps, fps = _tied_counts(y, scores, weights)
    zero = np.zeros((tps.shape[0], 1))
    tps, fps = np.hstack([zero, tps]), np.hstack([zero, fps])
    with np.errstate(invalid="ignore", divide="ignore"):
        tpr, fpr = tps / tps[:, -1:], fps / fps[:, -1:]
        return np.sum(np.diff(fpr, axis=1) * (tpr[:, 1:] + tpr[:, :-1]) / 2, axis=1)


def auc_pr_resampled(y: np.ndarray, scores: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """AUC-PR (a fraction) of each row as sklearn computes it: precision and recall at each threshold
    from the highest, the point (recall 0, precision 1) before them, and the trapezoid over recall.
    A threshold whose units all weigh 0 repeats the point before it (it adds no area). NaN for a row
    of one class only, as ``auc_pr`` has none."""
    if not scores.size:
        return np.full(weights.shape[0], np.nan)
    tps, fps = _tied_counts(y, scores, weights)
    with np.errstate(invalid="ignore", divide="ignore"):
        predicted = tps + fps
        precision = np.where(predicted > 0, tps / np.where(predicted > 0, predicted, 1), 1.0)
        recall = tps / tps[:, -1:]
    one, zero = np.ones((tps.shape[0], 1)), np.zeros((tps.shape[0], 1))
    precision, recall = np.hstack([one, precision]), np.hstack([zero, recall])
    area = np.sum(np.diff(recall, axis=1) * (precision[:, 1:] + precision[:, :-1]) / 2, axis=1)
    return np.where((tps[:, -1] > 0) & (fps[:, -1] > 0), area, np.nan)  # one class only: undefined


def mean_resampled(x: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """The weighted mean of ``x`` in each row."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return (weights @ x) / weights.sum(axis=1)


def decisions_resampled(y: np.ndarray, flagged: np.ndarray, weights: np.ndarray) -> dict[str, np.ndarray]:
    """Yes/no decisions against labels, for each row of unit ``weights`` (fractions; NaN where a ratio
    has nothing under it): accuracy, balanced accuracy (the mean of the true-positive and true-negative
    rates, which is also the AUC-ROC of a binary score), precision, recall and F1 of the positive class.
    A method that answers a label is compared with one that gives a graded score on these, never on an
    AUC (``auc_roc`` over two values is this balanced accuracy)."""
    y, flagged = np.asarray(y, dtype=bool), np.asarray(flagged, dtype=bool)
    tp, fp = weights @ (flagged & y), weights @ (flagged & ~y)
    fn, tn = weights @ (~flagged & y), weights @ (~flagged & ~y)
    with np.errstate(invalid="ignore", divide="ignore"):
        recall, specificity = tp / (tp + fn), tn / (tn + fp)
        precision = tp / (tp + fp)
        return {
            "accuracy": (tp + tn) / (tp + fp + fn + tn),
            "balanced_accuracy": (recall + specificity) / 2,
            "precision": precision,
            "recall": recall,
            "f1": 2 * tp / (2 * tp + fp + fn),
        }


def unresampled(
    resampled: Callable[[np.ndarray], Mapping[str, np.ndarray]], n: int, scale: float = 1.0
) -> dict[str, float | None]:
    """A resampled metric set on the data as it is (one row of weights, all ones), times ``scale``; None
    where a value is undefined (no unit flagged: no precision), so a summary and its intervals read one
    computation."""
    rows = resampled(np.ones((1, n)))
    return {k: float(v[0]) * scale if np.isfinite(v[0]) else None for k, v in rows.items()}


def decision_metrics(y: Sequence[bool], flagged: Sequence[bool]) -> dict[str, float | None]:
    """``decisions_resampled`` on the data as it is, x100."""
    return unresampled(partial(decisions_resampled, np.asarray(y), np.asarray(flagged)), len(y), 100.0)


def pearson_resampled(x: np.ndarray, y: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Pearson's r of (x, y) with each item repeated its row's count (scipy's pearsonr of the drawn
    items); NaN where the drawn x or y are constant. x and y: one value per item, or per row and item."""
    x, y = np.broadcast_to(x, weights.shape), np.broadcast_to(y, weights.shape)
    total = weights.sum(axis=1, keepdims=True)
    dx = x - (weights * x).sum(axis=1, keepdims=True) / total
    dy = y - (weights * y).sum(axis=1, keepdims=True) / total
    cov, vx, vy = (weights * dx * dy).sum(axis=1), (weights * dx**2).sum(axis=1), (weights * dy**2).sum(axis=1)
    drawn = weights > 0
    with np.errstate(invalid="ignore", divide="ignore"):
        r = np.clip(cov / np.sqrt(vx * vy), -1.0, 1.0)
    return np.where(_constant(x, drawn) | _constant(y, drawn), np.nan, r)


def spearman_resampled(x: np.ndarray, y: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Spearman's rho with each item repeated its row's count: Pearson's r of the average ranks that
    the repeated items take (ties share their mean rank, as scipy's spearmanr ranks them)."""
    return pearson_resampled(_ranks(x, weights), _ranks(y, weights), weights)


def _ranks(x: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Each item's average rank (1-based) among the repeated items of each row: (rows, items)."""
    order = np.argsort(x, kind="mergesort")
    ranked = x[order]
    group = np.r_[0, np.cumsum(np.diff(ranked) != 0)]  # the tie group of each sorted item
    groups = group[-1] + 1
    counts = np.zeros((weights.shape[0], groups))
    np.add.at(counts.T, group, weights[:, order].T)
    below = np.cumsum(counts, axis=1) - counts
    mean_rank = below + (counts + 1) / 2
    ranks = np.empty_like(weights, dtype=np.float64)
    ranks[:, order] = mean_rank[:, group]
    return ranks


def _constant(x: np.ndarray, drawn: np.ndarray) -> np.ndarray:
    """Whether the drawn items of each row all share one value (x: per item, or per row and item)."""
    high = np.where(drawn, x, -np.inf).max(axis=1)
    low = np.where(drawn, x, np.inf).min(axis=1)
    return high == low


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
MIN_BOOTSTRAP_GROUPS = 20  # fewer groups than this: a percentile interval decides no verdict (an exact test may)
CHUNK_CELLS = 2_000_000  # rows x units computed at once by a vectorised bootstrap (memory stays bounded)
# a protocol's metrics for rows of item counts (resamples x items): name -> one value per row, NaN undefined
Resampled = Callable[[list[Record], np.ndarray], dict[str, np.ndarray]]


def resample_counts(items: int, n_resamples: int = 1000, seed: int = 0) -> np.ndarray:
    """Bootstrap resamples of ``items`` items as rows of counts (how often each item was drawn), the
    weights the ``*_resampled`` metrics take; fixed seed, so a rerun draws the same resamples."""
    rng = np.random.default_rng(seed)
    return np.stack([np.bincount(rng.integers(0, items, items), minlength=items) for _ in range(n_resamples)])


def bootstrap_metrics(
    summarise: Callable[[list[Record]], dict[str, Any]],
    records: Sequence[Record],
    n_resamples: int = BOOTSTRAP_RESAMPLES,
    level: float = 0.95,
    seed: int = 0,
    resampled: Resampled | None = None,
    groups: Sequence[Any] | None = None,
) -> dict[str, list[float]]:
    """A percentile bootstrap interval for every real-valued metric of ``summarise(records)``, resampling
    whole items (a passage's sentences move together: they are not independent draws), or whole
    ``groups`` of items where given (TruthfulQA's answers to one question move together). Fixed seed, so
    a rerun gives the same intervals; counts (integers) get none, and a metric defined in fewer than half
    the resamples (one class only) gets none.

    ``resampled``: the protocol's metrics computed for all resamples at once (rows of item counts), in
    place of ``summarise`` called once per resample; the same draws, so the same intervals."""
    if len(records) < 2:
        return {}
    names = [k for k, v in flat_metrics(summarise(list(records))).items() if isinstance(v, float)]
    rng = np.random.default_rng(seed)
    if groups is None:
        draws = [rng.integers(0, len(records), len(records)) for _ in range(n_resamples)]
    else:
        _, index = np.unique(np.asarray(list(groups), dtype=str), return_inverse=True)
        members = [np.flatnonzero(index == g) for g in range(int(index.max()) + 1)]
        draws = [
            np.concatenate([members[g] for g in rng.integers(0, len(members), len(members))])
            for _ in range(n_resamples)
        ]
    if resampled is not None:
        values = _vectorised(resampled, list(records), draws, names)
    else:
        values = _one_by_one(summarise, records, draws, names)
    tail = (1 - level) / 2 * 100
    return {
        name: [float(x) for x in np.percentile(found, [tail, 100 - tail])]
        for name, found in values.items()
        if len(found) >= n_resamples / 2
    }


def _one_by_one(
    summarise: Callable[[list[Record]], dict[str, Any]],
    records: Sequence[Record],
    draws: list[np.ndarray],
    names: list[str],
) -> dict[str, list[float]]:
    values: dict[str, list[float]] = {name: [] for name in names}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a resample of constant scores: scipy warns, the metric is None or nan
        for drawn_items in draws:
            drawn = [records[i] for i in drawn_items]
            try:
                flat = flat_metrics(summarise(drawn))
            except (ValueError, ZeroDivisionError, FloatingPointError):  # undefined on this resample
                continue
            for name in names:
                value = flat.get(name)
                if isinstance(value, float) and math.isfinite(value):
                    values[name].append(value)
    return values


def _vectorised(
    resampled: Resampled, records: list[Record], draws: list[np.ndarray], names: list[str]
) -> dict[str, list[float]]:
    counts = np.stack([np.bincount(d, minlength=len(records)) for d in draws]).astype(np.float64)
    units = max(1, sum(len(r.get("scores") or {}) for r in records))
    rows = max(1, CHUNK_CELLS // units)
    found: dict[str, list[np.ndarray]] = {name: [] for name in names}
    for start in range(0, len(draws), rows):
        computed = resampled(records, counts[start : start + rows])
        for name in names:
            found[name].append(np.asarray(computed[name], dtype=np.float64))
    return {name: [float(v) for v in np.concatenate(parts) if np.isfinite(v)] for name, parts in found.items()}


# ---------------------------------------------------------------- two methods on the same items

PAIRED_METRICS: dict[str, Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]] = {
    "auc_roc": auc_roc_resampled,
    "auc_pr": auc_pr_resampled,
}
Verdict = str  # "met", "not met" or "no detectable difference"


@dataclass(frozen=True)
class PairedDifference:
    """A's metric minus B's on the same units, with the percentile interval of that difference over
    bootstrap resamples of the units' groups (the unit of independence: an answer, a passage, a
    question): both methods are scored on every resample alike, so what they share cancels. x100."""

    metric: str
    a: float
    b: float
    difference: float
    interval: tuple[float, float] | None  # None: defined on fewer than half the resamples
    groups: int
    units: int
    resamples: int
    level: float
    exact_p: float | None = None  # two-sided exact McNemar p of paired 0/1 values (a hit rate), where it applies

    def verdict(self, margin: float = 0.0) -> Verdict:
        """Whether A - B > ``margin`` holds: 'met' when the whole interval lies above it, 'not met' when
        the whole interval lies below, else 'no detectable difference' (the data cannot tell). A goal of
        "within 3 points of B" is ``margin=-3``; "better than B" is ``margin=0``. On fewer than
        ``MIN_BOOTSTRAP_GROUPS`` groups a percentile interval decides nothing: an exact test does (paired
        0/1 values against a margin of 0), or the verdict is 'no detectable difference'."""
        if self.groups < MIN_BOOTSTRAP_GROUPS:
            if self.exact_p is None or margin != 0.0 or self.exact_p >= 1 - self.level:
                return "no detectable difference"
            return "met" if self.difference > 0 else "not met"
        if self.interval is None:
            return "no detectable difference"
        low, high = self.interval
        if low > margin:
            return "met"
        if high < margin:
            return "not met"
        return "no detectable difference"

    def shown(self) -> str:
        """The difference and its interval, as a sentence quotes them: '+1.2 [-0.4, 2.9]'."""
        if self.interval is None:
            return f"{self.difference:+.1f} (no interval)"
        return f"{self.difference:+.1f} [{self.interval[0]:.1f}, {self.interval[1]:.1f}]"

    def as_record(self, margin: float = 0.0) -> dict[str, Any]:
        """What a benchmark writes into its record: the figures, the margin and the verdict they give."""
        return {**asdict(self), "margin": margin, "verdict": self.verdict(margin)}


def paired_difference(
    y: Sequence[int] | np.ndarray,
    scores_a: Sequence[float] | np.ndarray,
    scores_b: Sequence[float] | np.ndarray,
    groups: Sequence[Any] | None = None,
    metric: str = "auc_roc",
    n_resamples: int = BOOTSTRAP_RESAMPLES,
    level: float = 0.95,
    seed: int = 0,
) -> PairedDifference:
    """The paired bootstrap of ``metric`` (AUC-ROC or AUC-PR, x100) of two methods' scores of the same
    units, resampling whole ``groups`` (None: each unit its own group). TruthfulQA's 235 answers come from
    30 questions: their groups are the questions, or the interval is too narrow."""
    if metric not in PAIRED_METRICS:
        raise ValueError(f"a paired difference of {metric!r}: one of {', '.join(PAIRED_METRICS)}")
    labels = np.asarray(y, dtype=bool)
    a, b = np.asarray(scores_a, dtype=np.float64), np.asarray(scores_b, dtype=np.float64)
    if not labels.size == a.size == b.size:
        raise ValueError(
            f"a paired difference needs one label and two scores a unit: {labels.size}, {a.size}, {b.size}"
        )
    if not np.isfinite(a).all() or not np.isfinite(b).all():
        raise ValueError("a paired difference needs every unit scored by both methods (no None or NaN)")
    names, index = np.unique(
        np.asarray(list(range(labels.size)) if groups is None else list(groups)), return_inverse=True
    )
    counts = resample_counts(names.size, n_resamples, seed)[:, index].astype(np.float64)  # each unit its group's count
    whole = np.ones((1, labels.size))
    compute = PAIRED_METRICS[metric]
    point_a, point_b = float(compute(labels, a, whole)[0]) * 100, float(compute(labels, b, whole)[0]) * 100
    if not (math.isfinite(point_a) and math.isfinite(point_b)):
        raise ValueError(f"{metric} is undefined on these labels (one class only)")
    differences = (compute(labels, a, counts) - compute(labels, b, counts)) * 100
    found = differences[np.isfinite(differences)]
    tail = (1 - level) / 2 * 100
    interval = None
    if found.size >= n_resamples / 2:
        low, high = np.percentile(found, [tail, 100 - tail])
        interval = (float(low), float(high))
    return PairedDifference(
        metric, point_a, point_b, point_a - point_b, interval, int(names.size), int(labels.size), n_resamples, level
    )


def paired_mean_difference(
    values_a: Sequence[float] | np.ndarray,
    values_b: Sequence[float] | np.ndarray,
    n_resamples: int = BOOTSTRAP_RESAMPLES,
    level: float = 0.95,
    seed: int = 0,
) -> PairedDifference:
    """The paired bootstrap of the mean of two methods' per-item values (a hit rate: 1 when an item's
    planted sentence ranks riskiest), each item its own group, x100."""
    a, b = np.asarray(values_a, dtype=np.float64), np.asarray(values_b, dtype=np.float64)
    if a.size != b.size or not a.size:
        raise ValueError(f"a paired mean difference needs the same items on both sides: {a.size} and {b.size}")
    counts = resample_counts(a.size, n_resamples, seed).astype(np.float64)
    differences = (mean_resampled(a, counts) - mean_resampled(b, counts)) * 100
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(differences, [tail, 100 - tail])
    point_a, point_b = float(a.mean()) * 100, float(b.mean()) * 100
    binary = bool(np.isin(a, (0.0, 1.0)).all() and np.isin(b, (0.0, 1.0)).all())
    exact = mcnemar_exact(int(((a == 1) & (b == 0)).sum()), int(((a == 0) & (b == 1)).sum())) if binary else None
    return PairedDifference(
        "mean", point_a, point_b, point_a - point_b, (float(low), float(high)), a.size, a.size, n_resamples, level,
        exact,
    )  # fmt: skip


def mcnemar_exact(a_only: int, b_only: int) -> float:
    """The two-sided exact McNemar p of paired 0/1 outcomes: of the items where they differ (``a_only``
    where only A scored 1, ``b_only`` where only B did), a split as uneven as this one under a fair coin."""
    n = a_only + b_only
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(min(a_only, b_only) + 1)) / 2**n
    return min(1.0, 2 * tail)
