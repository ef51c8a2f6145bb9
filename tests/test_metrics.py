"""The metrics every bench reports, and their bootstrap intervals computed for all resamples at once:
equal to scikit-learn's and scipy's on the same data to 1e-12 (issue 32, item 7)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy.stats import pearsonr, spearmanr
from sklearn.metrics import auc, precision_recall_curve, roc_auc_score

from halluscope.bench.wikibio import load_wikibio, wikibio_plans
from halluscope.metrics import (
    auc_pr,
    auc_pr_resampled,
    auc_roc,
    auc_roc_resampled,
    bootstrap_metrics,
    both_classes,
    decision_metrics,
    decisions_resampled,
    mean_resampled,
    pearson_resampled,
    spearman_resampled,
)

TOLERANCE = 1e-12


def _sklearn_auc_pr(y: np.ndarray, scores: np.ndarray) -> float:
    precision, recall, _ = precision_recall_curve(y, scores)
    return float(auc(recall, precision))


def _cases(seed: int, count: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Labels and scores with ties (scores rounded), of many sizes and positive rates."""
    rng = np.random.default_rng(seed)
    cases = []
    while len(cases) < count:
        n = int(rng.integers(2, 80))
        y = rng.random(n) < rng.random()
        if both_classes(y):
            cases.append((y, np.round(rng.normal(size=n), int(rng.integers(0, 3)))))
    return cases


def test_auc_pr_and_auc_roc_equal_scikit_learn() -> None:
    for y, scores in _cases(0, 300):
        assert auc_pr(y, scores) == pytest.approx(_sklearn_auc_pr(y, scores) * 100, abs=TOLERANCE)
        assert auc_roc(y, scores) == pytest.approx(roc_auc_score(y, scores) * 100, abs=TOLERANCE)
    assert auc_pr(np.ones(3, bool), np.arange(3.0)) is None and auc_roc(np.zeros(3, bool), np.arange(3.0)) is None


def test_each_resample_row_equals_the_metric_of_the_drawn_items() -> None:
    """A row of counts is the resample: each metric equals scikit-learn's / scipy's on the drawn items
    themselves (repeated as drawn), NaN where it is undefined there (one class, a constant)."""
    rng = np.random.default_rng(1)
    for y, scores in _cases(2, 60):
        n = y.size
        x2, y2 = np.round(rng.normal(size=n), 1), np.round(rng.normal(size=n), 1)
        draws = [rng.integers(0, n, n) for _ in range(25)]
        counts = np.stack([np.bincount(d, minlength=n) for d in draws]).astype(float)
        pr, roc = auc_pr_resampled(y, scores, counts), auc_roc_resampled(y, scores, counts)
        mean = mean_resampled(scores, counts)
        pearson, spearman = pearson_resampled(x2, y2, counts), spearman_resampled(x2, y2, counts)
        for row, drawn in enumerate(draws):
            assert mean[row] == pytest.approx(scores[drawn].mean(), abs=TOLERANCE)
            if both_classes(y[drawn]):
                assert pr[row] == pytest.approx(_sklearn_auc_pr(y[drawn], scores[drawn]), abs=TOLERANCE)
                assert roc[row] == pytest.approx(roc_auc_score(y[drawn], scores[drawn]), abs=TOLERANCE)
            else:
                assert np.isnan(roc[row]) and np.isnan(pr[row])
            if len(set(x2[drawn])) > 1 and len(set(y2[drawn])) > 1:
                assert pearson[row] == pytest.approx(pearsonr(x2[drawn], y2[drawn])[0], abs=TOLERANCE)
                assert spearman[row] == pytest.approx(spearmanr(x2[drawn], y2[drawn])[0], abs=TOLERANCE)
            else:
                assert np.isnan(pearson[row]) and np.isnan(spearman[row])


def test_wikibio_intervals_at_once_equal_one_resample_at_a_time(data_dir: Path) -> None:
    """The vectorised bootstrap of the WikiBio protocol and the one that calls the protocol's summarise
    for each resample: the same draws, the same intervals (SelfCheck-Unigram on 40 passages)."""
    plan = wikibio_plans(["selfcheck-unigram"], data_dir, limit=40)[0]
    records = [plan.score(p) for p in load_wikibio(data_dir)[:40]]
    at_once = bootstrap_metrics(plan.summarise, records, resampled=plan.resampled)
    one_by_one = bootstrap_metrics(plan.summarise, records)
    assert plan.resampled is not None and set(at_once) == set(one_by_one) and len(at_once) == 9
    for name, (low, high) in one_by_one.items():
        assert at_once[name] == pytest.approx([low, high], abs=1e-9), name


def test_no_units_is_undefined_not_an_error() -> None:
    """A NonFact* subset can be empty (one passage, wholly major-inaccurate)."""
    empty, weights = np.array([], dtype=bool), np.ones((3, 0))
    assert np.isnan(auc_pr_resampled(empty, np.array([]), weights)).all()
    assert np.isnan(auc_roc_resampled(empty, np.array([]), weights)).all()
    assert auc_pr(empty, np.array([])) is None and auc_roc(empty, np.array([])) is None


def test_decision_metrics_by_hand() -> None:
    """4 positives, 6 negatives; flagged: 3 of the positives and 1 negative. TP 3, FN 1, FP 1, TN 5:
    accuracy 8/10, TPR 3/4, TNR 5/6, balanced (3/4 + 5/6) / 2 = 19/24, precision 3/4, F1 6/8."""
    y = [1, 1, 1, 1, 0, 0, 0, 0, 0, 0]
    flagged = [1, 1, 1, 0, 1, 0, 0, 0, 0, 0]
    m = decision_metrics([bool(v) for v in y], [bool(v) for v in flagged])
    assert m["accuracy"] == pytest.approx(80.0)
    assert m["balanced_accuracy"] == pytest.approx(100 * 19 / 24)
    assert m["precision"] == pytest.approx(75.0) and m["recall"] == pytest.approx(75.0)
    assert m["f1"] == pytest.approx(75.0)
    # a binary score's AUC-ROC is its balanced accuracy: why a yes/no peer gets no AUC beside a graded one
    assert auc_roc(np.array(y, dtype=bool), np.array(flagged, dtype=float)) == pytest.approx(m["balanced_accuracy"])
    assert decision_metrics([True, False], [False, False])["precision"] is None  # nothing flagged


def test_decisions_resampled_weigh_units_as_repeats() -> None:
    y, flagged = np.array([True, True, False]), np.array([True, False, True])
    twice_first = decisions_resampled(y, flagged, np.array([[2.0, 1.0, 1.0]]))
    repeated = decision_metrics([True, True, True, False], [True, True, False, True])
    for key, value in repeated.items():
        assert twice_first[key][0] * 100 == pytest.approx(value)


# ---------------------------------------------------------------- the paired difference of two methods


def _reference_difference(y, a, b, groups, metric, n_resamples, seed):  # type: ignore[no-untyped-def]
    """scikit-learn on each resample built by hand: the drawn groups' units repeated, A and B alike."""
    from halluscope.metrics import resample_counts

    def value(labels: np.ndarray, scores: np.ndarray) -> float:
        if metric == "auc_roc":
            return float(roc_auc_score(labels, scores)) * 100
        precision, recall, _ = precision_recall_curve(labels, scores)
        return float(auc(recall, precision)) * 100

    names, index = np.unique(groups, return_inverse=True)
    found = []
    for counts in resample_counts(names.size, n_resamples, seed):
        units = np.repeat(np.arange(y.size), counts[index])
        if y[units].all() or not y[units].any():
            continue
        found.append(value(y[units], a[units]) - value(y[units], b[units]))
    return value(y, a) - value(y, b), np.percentile(found, [2.5, 97.5])


@pytest.mark.parametrize("metric", ["auc_roc", "auc_pr"])
@pytest.mark.parametrize("grouped", [False, True])
def test_the_paired_difference_equals_scikit_learn_on_the_same_resamples(metric: str, grouped: bool) -> None:
    from halluscope.metrics import paired_difference

    rng = np.random.default_rng(3)
    y = rng.integers(0, 2, 60)
    a = y * 0.6 + rng.random(60)  # A ranks the labels better than B
    b = y * 0.2 + rng.random(60)
    groups = np.repeat(np.arange(20), 3) if grouped else np.arange(60)  # 20 questions of three answers
    found = paired_difference(y, a, b, groups if grouped else None, metric=metric, n_resamples=300, seed=5)
    point, (low, high) = _reference_difference(y, a, b, groups, metric, 300, 5)
    assert found.difference == pytest.approx(point, abs=1e-9) and found.interval is not None
    assert found.interval == pytest.approx((low, high), abs=1e-9)
    assert found.groups == (20 if grouped else 60) and found.units == 60


def test_a_grouped_interval_is_wider_when_a_groups_units_move_together() -> None:
    """TruthfulQA's answers come from questions: resampling the answers as if independent understates
    the uncertainty when a question's answers share their difficulty."""
    from halluscope.metrics import paired_difference

    rng = np.random.default_rng(0)
    question = np.repeat(np.arange(30), 8)
    hard = rng.random(30)[question]  # what a question's answers share
    y = (rng.random(240) < 0.5).astype(int)
    a = y * 0.5 + hard + rng.random(240) * 0.3
    b = y * 0.3 + rng.random(240) * 0.3 + hard * 0.2
    alone, together = paired_difference(y, a, b), paired_difference(y, a, b, question)
    assert alone.interval is not None and together.interval is not None
    assert together.interval[1] - together.interval[0] > alone.interval[1] - alone.interval[0]


def test_a_verdict_is_met_only_when_the_interval_clears_the_margin() -> None:
    from halluscope.metrics import PairedDifference

    def diff(low: float, high: float) -> PairedDifference:
        return PairedDifference("auc_roc", 70.0, 67.0, 3.0, (low, high), 300, 300, 1000, 0.95)

    assert diff(0.5, 5.5).verdict() == "met"  # better: the whole interval above 0
    assert diff(-0.5, 5.5).verdict() == "no detectable difference"
    assert diff(-5.5, -0.5).verdict() == "not met"
    assert diff(-2.5, 5.5).verdict(margin=-3) == "met"  # within 3 points: the whole interval above -3
    assert diff(-3.5, 5.5).verdict(margin=-3) == "no detectable difference"
    record = diff(-3.5, 5.5).as_record(margin=-3)
    assert (
        record["verdict"] == "no detectable difference" and record["margin"] == -3 and record["interval"] == (-3.5, 5.5)
    )


def test_the_paired_mean_difference_is_the_bootstrap_of_the_same_items() -> None:
    from halluscope.metrics import paired_mean_difference, resample_counts

    hits_a, hits_b = [1, 1, 0, 1, 1, 0, 1, 1], [1, 0, 0, 0, 1, 0, 1, 0]
    found = paired_mean_difference(hits_a, hits_b, n_resamples=200, seed=1)
    by_hand = [(np.repeat(hits_a, c).mean() - np.repeat(hits_b, c).mean()) * 100 for c in resample_counts(8, 200, 1)]
    assert found.difference == pytest.approx(37.5) and found.interval is not None
    assert found.interval == pytest.approx(tuple(np.percentile(by_hand, [2.5, 97.5])), abs=1e-9)


def test_a_bootstrap_by_group_draws_whole_groups() -> None:
    """Records of one group (one question's answers) are drawn together: each resample holds whole groups."""
    records = [{"group": f"q{i // 4}", "x": float(i // 4 + (i % 4) * 0.01)} for i in range(40)]
    seen: list[list[str]] = []

    def summarise(drawn: list[dict]) -> dict:  # type: ignore[type-arg]
        seen.append([r["group"] for r in drawn])
        return {"mean": float(np.mean([r["x"] for r in drawn]))}

    grouped = bootstrap_metrics(summarise, records, n_resamples=50, groups=[r["group"] for r in records])
    assert all(drawn.count(g) % 4 == 0 for drawn in seen[1:] for g in set(drawn))  # whole groups only
    alone = bootstrap_metrics(summarise, records, n_resamples=50)
    assert grouped["mean"] != alone["mean"]


def test_on_fewer_than_20_groups_only_an_exact_test_decides() -> None:
    """token-logprob.md once said 'met' of +50.0 [12.5, 87.5] over 8 biographies (4 discordant, all one
    way): a percentile bootstrap on 8 units decides nothing, and the exact McNemar p of 4 to 0 is 0.125."""
    from halluscope.metrics import PairedDifference, mcnemar_exact, paired_mean_difference

    assert mcnemar_exact(4, 0) == pytest.approx(0.125) and mcnemar_exact(3, 1) == pytest.approx(0.625)
    assert mcnemar_exact(0, 0) == 1.0 and mcnemar_exact(6, 0) == pytest.approx(2 / 64)
    eight = paired_mean_difference([1, 1, 1, 1, 1, 1, 0, 0], [0, 0, 0, 0, 1, 1, 0, 0], seed=0)
    assert eight.groups == 8 and eight.exact_p == pytest.approx(0.125)
    assert eight.interval is not None and eight.interval[0] > 0  # the bootstrap alone would have said "met"
    assert eight.verdict() == "no detectable difference"
    twelve = paired_mean_difference([1] * 7 + [0] * 5, [0] * 12)  # 7 to 0: p = 2 / 128
    assert twelve.exact_p == pytest.approx(2 / 128) and twelve.verdict() == "met"
    assert twelve.verdict(margin=-3) == "no detectable difference"  # the exact test answers "better" only
    few = PairedDifference("auc_roc", 90.0, 60.0, 30.0, (20.0, 40.0), 12, 120, 1000, 0.95)
    assert few.verdict() == "no detectable difference"  # 12 passages: no exact test for an AUC
