"""The PHR estimators (Algorithms 1-3 of Jesson et al.) against the exact Bayesian linear regression of
Appendix G.1.2, whose Definition 4 PHR and aleatoric entropy are known in closed form.

Tolerances come from the Monte Carlo error, not from taste: Algorithm 1's estimate is a mean of M
per-completion THRs, so its standard error is their standard deviation over sqrt(M) (each THR
carries its own K-sample noise, quantile included); 4 standard errors bound a fixed-seed draw. The
truncation to N - n imagined pairs leaves p(y | x, D_N) wider than p(y | x, f) by the posterior
variance of f_1 + f_2 x after N points, about sigma_y^2 (1 + x^2) / N: with N - n = 500 that moves a
rate by well under 0.005, which the bound adds."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import norm

from halluscope.bench.runner import BenchResult
from halluscope.cli import main
from halluscope.scoring.phr import (
    BayesianLinearRegression,
    Pair,
    aleatoric_entropy,
    categorical_entropy,
    categorical_quantile,
    categorical_thr,
    mutual_information,
    phr_estimate,
    thr_estimate,
    total_entropy,
)

BLR = BayesianLinearRegression()
TRUNCATION = 0.005


@pytest.mark.parametrize("n", [2, 8, 32])
def test_algorithm_1_matches_definition_4_on_the_exact_model(n: int) -> None:
    rng = np.random.default_rng(n)
    _, context, x = BLR.sample_problem(n, rng)
    reference = BLR.posterior_hallucination_rate(x, context, epsilon=0.05)
    estimate = phr_estimate(BLR, x, context, m=200, n_imagined=500, k=500, epsilon=0.05, rng=rng)
    assert len(estimate.thr) == 200 and len(estimate.imagined[0]) == 500
    assert abs(estimate.phr - reference) <= 4 * estimate.standard_error + TRUNCATION
    # Algorithm 3's terms come from the same completions' log-probs
    assert len(estimate.entropies) == 200
    assert estimate.aleatoric == pytest.approx(
        BLR.aleatoric_entropy(), abs=4 * math.sqrt(0.5 / (200 * 500)) + TRUNCATION
    )


def test_phr_falls_towards_epsilon_as_the_context_grows() -> None:
    rng = np.random.default_rng(0)
    means = []
    for n in (2, 8, 32):
        problems = [BLR.sample_problem(n, rng) for _ in range(20)]
        reference = np.mean([BLR.posterior_hallucination_rate(x, c, 0.05) for _, c, x in problems])
        estimate = np.mean([phr_estimate(BLR, x, c, 40, 200, 200, 0.05, rng).phr for _, c, x in problems])
        means.append((reference, estimate))
    assert means[0][0] > means[1][0] > means[2][0] > 0.05  # the exact PHR
    assert means[0][1] > means[1][1] > means[2][1]  # Algorithm 1


def test_definition_4_by_quadrature_equals_brute_force_monte_carlo() -> None:
    """Sample f from the posterior and y from the predictive; a hallucination is y outside f's central
    95% interval (log-density below its 5% quantile)."""
    rng = np.random.default_rng(7)
    _, context, x = BLR.sample_problem(3, rng)
    mean, cov = BLR.posterior(context)
    fs = rng.multivariate_normal(mean, cov, 200_000)
    centre, sd = BLR.predictive(x, context)
    ys = rng.normal(centre, sd, 200_000)
    outside = np.abs(ys - (fs[:, 0] + fs[:, 1] * x)) > BLR.sigma_y * norm.ppf(0.975)
    se = math.sqrt(outside.mean() * (1 - outside.mean()) / outside.size)
    assert BLR.posterior_hallucination_rate(x, context, 0.05) == pytest.approx(outside.mean(), abs=4 * se)


def test_no_context_gives_the_prior_predictive_and_a_worked_rate() -> None:
    """With D_0 and x = 0: p(f_1) = N(0, 1) and the predictive is N(0, 1 + 0.01); a mechanism with
    f_1 = 0 hallucinates when |y| > 0.1 * 1.95996, i.e. with probability 2 * (1 - Phi(0.19600 / 1.00499))."""
    assert BLR.predictive(0.0, []) == pytest.approx((0.0, math.sqrt(1.01)))
    worked = 2 * norm.sf(0.1 * norm.ppf(0.975) / math.sqrt(1.01))
    assert BLR.true_hallucination_rate(np.array([0.0, 3.0]), 0.0, [], 0.05) == pytest.approx(worked)
    assert worked == pytest.approx(0.8454, abs=1e-4)  # Phi(0.19502) = 0.57731


def test_algorithm_2_on_an_extended_context_equal_to_the_context_is_epsilon() -> None:
    """With D = D_n, responses and quantile come from the same distribution: the rate is epsilon."""
    rng = np.random.default_rng(3)
    _, context, x = BLR.sample_problem(5, rng)
    rates = [thr_estimate(BLR, x, context, context, 2000, 0.2, rng)[0] for _ in range(50)]
    assert np.mean(rates) == pytest.approx(0.2, abs=4 * math.sqrt(0.2 * 0.8 / 2000 / 50) + 0.002)
    with pytest.raises(ValueError, match="epsilon must lie in"):
        thr_estimate(BLR, x, context, context, 10, 1.0, rng)


def test_algorithm_3_recovers_the_noise_entropy_and_mi_is_the_difference() -> None:
    """Aleatoric entropy = 0.5 log(2 pi e sigma_y^2) for every f; eq. 35's estimate is a mean of
    -log p over M K Gaussian draws, whose standard deviation is sqrt(1/2)."""
    rng = np.random.default_rng(11)
    _, context, x = BLR.sample_problem(4, rng)
    m, k = 100, 500
    aleatoric = aleatoric_entropy(BLR, x, context, m, 500, k, rng)
    exact = BLR.aleatoric_entropy()
    assert exact == pytest.approx(-0.8836, abs=1e-4)
    assert aleatoric == pytest.approx(exact, abs=4 * math.sqrt(0.5 / (m * k)) + TRUNCATION)
    total = total_entropy(BLR, x, context, 20_000, rng)
    _, sd = BLR.predictive(x, context)
    assert total == pytest.approx(0.5 * math.log(2 * math.pi * math.e * sd**2), abs=4 * math.sqrt(0.5 / 20_000))
    assert mutual_information(total, aleatoric) == total - aleatoric > 0


def test_bench_phr_synthetic_writes_rows_report_and_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        ["bench", "phr-synthetic", "--n", "1,16", "--problems", "5", "--M", "10", "--K", "200", "--out", str(tmp_path)]
    )
    out = capsys.readouterr().out
    assert code == 0 and "| 16 |" in out
    result = json.loads((tmp_path / "results.json").read_text())
    assert set(result) == set(BenchResult.model_fields) and result["bench"] == "phr-synthetic"
    assert [r["n"] for r in result["metrics"]["rows"]] == [1, 16]
    for row in result["metrics"]["rows"]:
        assert {"n", "reference_phr", "phr", "abs_error", "thr"} <= row.keys()
        assert 0 <= row["abs_error"] <= 1 and 0.05 < row["reference_phr"] < 1
    assert result["metrics"]["rows"][0]["reference_phr"] > result["metrics"]["rows"][1]["reference_phr"]
    assert (tmp_path / "phr_vs_n.png").read_bytes()[:4] == b"\x89PNG" and "Definition 4" in (
        tmp_path / "report.md"
    ).read_text()
    with pytest.raises(SystemExit) as exited:  # refused as the flags are read, as argparse refuses a bad value
        main(["bench", "phr-synthetic", "--n", "2,x", "--out", str(tmp_path)])
    assert exited.value.code == 2 and "--n takes comma-separated integers, got '2,x'" in capsys.readouterr().err


def test_the_exact_categorical_quantile_and_rate_by_hand() -> None:
    """p_D = (0.9, 0.06, 0.04): L = log p_D(Y) has cdf 0.04 at log 0.04, 0.10 at log 0.06, 1 at log 0.9."""
    given_d, given_dn = np.log([0.9, 0.06, 0.04]), np.log([0.5, 0.2, 0.3])
    assert categorical_quantile(given_d, 0.01) == pytest.approx(math.log(0.04))
    assert categorical_quantile(given_d, 0.05) == pytest.approx(math.log(0.06))
    assert categorical_quantile(given_d, 0.12) == pytest.approx(math.log(0.9))
    assert categorical_thr(given_d, given_dn, 0.01) == 0.0  # nothing lies below the least likely token
    assert categorical_thr(given_d, given_dn, 0.05) == pytest.approx(0.3)
    assert categorical_thr(given_d, given_dn, 0.12) == pytest.approx(0.5)
    assert categorical_entropy(np.array([math.log(0.5), math.log(0.5), -np.inf])) == pytest.approx(math.log(2))


class DirichletCategorical:
    """y in {0, 1, 2} ignoring x, p(y | D) = (count + alpha_y) / (n + sum alpha): an exact CategoricalCGM."""

    alpha = np.array([1.0, 0.5, 0.2])

    def distribution(self, x: float, context: Sequence[Pair]) -> np.ndarray:
        counts = np.bincount([int(y) for _, y in context], minlength=3)
        return np.log((counts + self.alpha) / (len(context) + self.alpha.sum()))

    def imagine(self, context: Sequence[Pair], count: int, rng: np.random.Generator, index: int) -> list[Pair]:
        pairs: list[Pair] = []
        for _ in range(count):  # the Polya urn: each pair from the predictive given all before it
            pairs.append((0.0, int(rng.choice(3, p=np.exp(self.distribution(0.0, [*context, *pairs]))))))
        return pairs

    def sample_responses(self, x: float, context: Sequence[Pair], k: int, rng: np.random.Generator) -> list[int]:
        return [int(y) for y in rng.choice(3, size=k, p=np.exp(self.distribution(x, context)))]

    def log_prob(self, responses: Sequence[int], x: float, context: Sequence[Pair]) -> np.ndarray:
        return self.distribution(x, context)[np.asarray(responses)]


def test_k_draws_converge_to_the_exact_categorical_rate() -> None:
    """On the same completions, Algorithm 1 with K draws approaches the K -> infinity computation; its
    error over 40 repeats shrinks as K grows (the quantile of K draws converges where the cdf crosses
    epsilon inside a jump, as it does here)."""
    cgm, context = DirichletCategorical(), [(0.0, 0), (0.0, 0), (0.0, 1)]
    rng = np.random.default_rng(0)
    completions = [cgm.imagine(context, 3, rng, i) for i in range(20)]
    exact = phr_estimate(cgm, 0.0, context, 20, 3, 1, 0.3, rng, exact=True, imagined=completions)
    assert 0 < exact.phr < 1
    errors = {}
    for k in (20, 2000):
        runs = [phr_estimate(cgm, 0.0, context, 20, 3, k, 0.3, rng, imagined=completions).phr for _ in range(40)]
        errors[k] = float(np.mean(np.abs(np.array(runs) - exact.phr)))
    assert errors[2000] < errors[20] / 3, errors
    assert errors[2000] < 0.02, errors
    # Algorithm 3's terms: exact entropies against the mean -log p of K draws
    assert exact.aleatoric == pytest.approx(
        phr_estimate(cgm, 0.0, context, 20, 3, 20000, 0.3, rng, imagined=completions).aleatoric, abs=0.02
    )
    assert total_entropy(cgm, 0.0, context, 1, rng, exact=True) == pytest.approx(
        categorical_entropy(cgm.distribution(0.0, context))
    )


def test_a_synthetic_problem_scores_the_same_whatever_ran_before_it() -> None:
    """Each problem has its own random stream: scored alone (a resumed run, a Ray worker) it gives the
    record it gives in a full run."""
    from halluscope.bench.papers.phr_synthetic import phr_synthetic_plan

    plan = phr_synthetic_plan(ns=(2, 8), problems=3, m=5, k=100, n_imagined=10)
    in_order = [plan.score(item) for item in plan.items]
    alone = phr_synthetic_plan(ns=(2, 8), problems=3, m=5, k=100, n_imagined=10).score((8, 1))
    assert alone == in_order[plan.items.index((8, 1))] and in_order[0] != in_order[1]
