"""The posterior hallucination rate (Jesson et al., NeurIPS 2024) and the uncertainties of its
Appendix D, written against a small conditional-generative-model protocol so the same estimators run
on an exact Bayesian model (to check them) and on a language model doing in-context learning.

- Algorithm 2, ``thr_estimate``: the epsilon-quantile Q of log p(y | x, D) under y ~ p(y | x, D), then
  the share of K responses y ~ p(y | x, D_n) with log p(y | x, D) < Q;
- Algorithm 1, ``phr_estimate``: the mean of Algorithm 2 over M imagined completions D of D_n (with
  Algorithm 3's aleatoric entropy from the same completions and log-probs);
- Appendix D: total predictive entropy (eq. 35), aleatoric entropy (Algorithm 3) and their difference,
  the mutual information (eq. 37);
- ``BayesianLinearRegression``: the Appendix G.1.2 model (f ~ N(0, I_2), x ~ N(0, 1),
  y ~ N(f_1 + f_2 x, 0.1^2)) as an exact CGM, with Definition 4's PHR and Definition 3's THR computed
  by quadrature, to test the estimators against.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

Pair = tuple[Any, Any]


class CGM(Protocol):
    """What the estimators need of a conditional generative model p(x, y | D)."""

    def imagine(self, context: Sequence[Pair], count: int, rng: np.random.Generator) -> list[Pair]:
        """``count`` new pairs continuing the context: (x_j, y_j) ~ p(x, y | D), D growing (Alg. 1, 4-6)."""
        ...

    def sample_responses(self, x: Any, context: Sequence[Pair], k: int, rng: np.random.Generator) -> list[Any]:
        """K responses y ~ p(y | x, D)."""
        ...

    def log_prob(self, responses: Sequence[Any], x: Any, context: Sequence[Pair]) -> np.ndarray:
        """log p(y | x, D) of each response."""
        ...


def thr_estimate(
    cgm: CGM,
    x: Any,
    context: Sequence[Pair],
    extended: Sequence[Pair],
    k: int,
    epsilon: float,
    rng: np.random.Generator,
) -> float:
    """Algorithm 2: the share of K responses to x given D_n that fall below the epsilon-quantile of
    log p(y | x, D) under D's own predictive (D = D_n plus imagined pairs)."""
    return _thr_and_entropy(cgm, x, context, extended, k, epsilon, rng)[0]


def _thr_and_entropy(
    cgm: CGM,
    x: Any,
    context: Sequence[Pair],
    extended: Sequence[Pair],
    k: int,
    epsilon: float,
    rng: np.random.Generator,
) -> tuple[float, float]:
    """Algorithm 2, and for free the predictive entropy given D that Algorithm 3 averages: its K
    log-probs of responses drawn given D are the ones the quantile is taken over."""
    if not 0 < epsilon < 1:
        raise ValueError(f"epsilon must lie in (0, 1), got {epsilon}")
    scores = cgm.log_prob(cgm.sample_responses(x, extended, k, rng), x, extended)
    quantile = float(np.quantile(scores, epsilon))
    candidates = cgm.sample_responses(x, context, k, rng)
    return float(np.mean(cgm.log_prob(candidates, x, extended) < quantile)), float(-np.mean(scores))


@dataclass
class PHREstimate:
    phr: float
    thr: list[float]  # Algorithm 2 per imagined completion
    entropies: list[float]  # predictive entropy given each completion (Algorithm 3's terms)
    imagined: list[list[Pair]] = field(default_factory=list)

    @property
    def standard_error(self) -> float:
        """Monte Carlo standard error of the PHR over the M completions (each THR holds its own K noise)."""
        return float(np.std(self.thr, ddof=1) / math.sqrt(len(self.thr))) if len(self.thr) > 1 else math.nan

    @property
    def aleatoric(self) -> float:
        """Algorithm 3 on the same completions: no second round of imagined pairs."""
        return float(np.mean(self.entropies))


def phr_estimate(
    cgm: CGM,
    x: Any,
    context: Sequence[Pair],
    m: int,
    n_imagined: int,
    k: int,
    epsilon: float,
    rng: np.random.Generator,
) -> PHREstimate:
    """Algorithm 1: M completions of D_n by N - n imagined pairs each, Algorithm 2 on each, averaged."""
    if m < 1 or k < 1 or n_imagined < 0:
        raise ValueError(f"need M >= 1, K >= 1, N - n >= 0; got M={m}, K={k}, N - n={n_imagined}")
    thr, entropies, imagined = [], [], []
    for _ in range(m):
        pairs = cgm.imagine(context, n_imagined, rng)
        imagined.append(pairs)
        rate, entropy = _thr_and_entropy(cgm, x, context, [*context, *pairs], k, epsilon, rng)
        thr.append(rate)
        entropies.append(entropy)
    return PHREstimate(float(np.mean(thr)), thr, entropies, imagined)


def total_entropy(cgm: CGM, x: Any, context: Sequence[Pair], k: int, rng: np.random.Generator) -> float:
    """Equation 35: -mean log p(y | x, D_n) over K responses y ~ p(y | x, D_n)."""
    return float(-np.mean(cgm.log_prob(cgm.sample_responses(x, context, k, rng), x, context)))


def aleatoric_entropy(
    cgm: CGM, x: Any, context: Sequence[Pair], m: int, n_imagined: int, k: int, rng: np.random.Generator
) -> float:
    """Algorithm 3: the mean over M imagined completions D of the predictive entropy given D."""
    return float(
        np.mean([total_entropy(cgm, x, [*context, *cgm.imagine(context, n_imagined, rng)], k, rng) for _ in range(m)])
    )


def mutual_information(total: float, aleatoric: float) -> float:
    """Equation 37: epistemic uncertainty = total - aleatoric."""
    return total - aleatoric


# ---------------------------------------------------------------- an exact model to test against


def _gauss_hermite(points: int) -> tuple[np.ndarray, np.ndarray]:
    """Nodes and weights for E[g(Z)], Z ~ N(0, 1)."""
    nodes, weights = np.polynomial.hermite_e.hermegauss(points)
    return nodes, weights / math.sqrt(2 * math.pi)


@dataclass(frozen=True)
class BayesianLinearRegression:
    """f ~ N(0, I_2), x ~ N(0, sigma_x^2), y ~ N(f_1 + f_2 x, sigma_y^2) (Appendix G.1.2) as an exact CGM."""

    sigma_x: float = 1.0
    sigma_y: float = 0.1

    def posterior(self, context: Sequence[Pair]) -> tuple[np.ndarray, np.ndarray]:
        """Mean and covariance of p(f | D)."""
        xs = np.array([p[0] for p in context], dtype=np.float64)
        ys = np.array([p[1] for p in context], dtype=np.float64)
        phi = np.stack([np.ones_like(xs), xs], axis=1)
        precision = np.eye(2) + phi.T @ phi / self.sigma_y**2
        cov = np.linalg.inv(precision)
        return cov @ phi.T @ ys / self.sigma_y**2, cov

    def predictive(self, x: float, context: Sequence[Pair]) -> tuple[float, float]:
        """Mean and standard deviation of p(y | x, D)."""
        mean, cov = self.posterior(context)
        phi = np.array([1.0, x])
        return float(phi @ mean), math.sqrt(self.sigma_y**2 + float(phi @ cov @ phi))

    def imagine(self, context: Sequence[Pair], count: int, rng: np.random.Generator) -> list[Pair]:
        """Exactly p((x_j, y_j)_{n+1}^N | D): by exchangeability, draw f ~ p(f | D) once, then the pairs
        i.i.d. given f (the same joint law as sampling pair by pair from the growing predictive)."""
        mean, cov = self.posterior(context)
        f = rng.multivariate_normal(mean, cov)
        xs = rng.normal(0.0, self.sigma_x, count)
        ys = f[0] + f[1] * xs + rng.normal(0.0, self.sigma_y, count)
        return [(float(a), float(b)) for a, b in zip(xs, ys, strict=True)]

    def sample_responses(self, x: float, context: Sequence[Pair], k: int, rng: np.random.Generator) -> list[float]:
        mean, sd = self.predictive(x, context)
        return list(rng.normal(mean, sd, k))

    def log_prob(self, responses: Sequence[float], x: float, context: Sequence[Pair]) -> np.ndarray:
        mean, sd = self.predictive(x, context)
        z = (np.asarray(responses, dtype=np.float64) - mean) / sd
        return -0.5 * z**2 - math.log(sd) - 0.5 * math.log(2 * math.pi)

    def sample_problem(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, list[Pair], float]:
        """A true mechanism f*, a context D_n drawn from it, and a query x."""
        f = rng.normal(0.0, 1.0, 2)
        xs = rng.normal(0.0, self.sigma_x, n)
        ys = f[0] + f[1] * xs + rng.normal(0.0, self.sigma_y, n)
        return f, [(float(a), float(b)) for a, b in zip(xs, ys, strict=True)], float(rng.normal(0.0, self.sigma_x))

    def _outside(self, f_mean: np.ndarray | float, x: float, context: Sequence[Pair], epsilon: float) -> np.ndarray:
        """P(y ~ p(y | x, D_n) is a hallucination for a mechanism whose mean at x is f_mean): with
        S = log N(y; f_mean, sigma_y^2), the (1 - epsilon)-likely set is |y - f_mean| <= sigma_y z_{1-eps/2}."""
        from scipy.stats import norm

        mean, sd = self.predictive(x, context)
        half = self.sigma_y * norm.ppf(1 - epsilon / 2)
        f_mean = np.asarray(f_mean, dtype=np.float64)
        return np.asarray(norm.cdf((f_mean - half - mean) / sd) + norm.sf((f_mean + half - mean) / sd))

    def true_hallucination_rate(self, f: np.ndarray, x: float, context: Sequence[Pair], epsilon: float) -> float:
        """Definition 3 for the true mechanism f*, exactly."""
        return float(self._outside(f[0] + f[1] * x, x, context, epsilon))

    def posterior_hallucination_rate(
        self, x: float, context: Sequence[Pair], epsilon: float, points: int = 64
    ) -> float:
        """Definition 4 exactly: Definition 3 averaged over f ~ p(f | D_n), i.e. over the posterior of
        f_1 + f_2 x, N(m, phi' Sigma phi), by Gauss-Hermite quadrature (no Monte Carlo error)."""
        mean, cov = self.posterior(context)
        phi = np.array([1.0, x])
        centre, spread = float(phi @ mean), math.sqrt(float(phi @ cov @ phi))
        nodes, weights = _gauss_hermite(points)
        return float(weights @ self._outside(centre + spread * nodes, x, context, epsilon))

    def aleatoric_entropy(self) -> float:
        """E_f[H(Y | x, f)] exactly: the noise is the same for every f, so the Gaussian entropy of sigma_y."""
        return 0.5 * math.log(2 * math.pi * math.e * self.sigma_y**2)
