"""The posterior hallucination rate (Jesson et al., NeurIPS 2024) and the uncertainties of its
Appendix D, written against a small conditional-generative-model protocol so the same estimators run
on an exact Bayesian model (to check them) and on a language model doing in-context learning.

- Algorithm 2, ``thr_estimate``: the epsilon-quantile Q of log p(y | x, D) under y ~ p(y | x, D), then
  the share of K responses y ~ p(y | x, D_n) with log p(y | x, D) < Q (and the entropy given D);
- Algorithm 1, ``phr_estimate``: the mean of Algorithm 2 over M imagined completions D of D_n (with
  Algorithm 3's aleatoric entropy from the same completions and log-probs);
- Appendix D: total predictive entropy (eq. 35), aleatoric entropy (Algorithm 3) and their difference,
  the mutual information (eq. 37);
- ``categorical_thr`` / ``categorical_entropy``: Algorithm 2 and the predictive entropy computed exactly
  when responses come from a finite support with known log-probs (single-token responses of a
  language model: one forward pass gives the whole distribution), instead of by K draws;
- the model hallucination rate and empirical error rate of Section 3.2, the references PHR is judged by;
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

    def imagine(self, context: Sequence[Pair], count: int, rng: np.random.Generator, index: int) -> list[Pair]:
        """``count`` new pairs continuing the context: (x_j, y_j) ~ p(x, y | D), D growing (Alg. 1, 4-6).
        ``index`` numbers the completions of one context (a cached model replays completion i of D_n for
        every query that shares D_n)."""
        ...

    def sample_responses(self, x: Any, context: Sequence[Pair], k: int, rng: np.random.Generator) -> list[Any]:
        """K responses y ~ p(y | x, D)."""
        ...

    def log_prob(self, responses: Sequence[Any], x: Any, context: Sequence[Pair]) -> np.ndarray:
        """log p(y | x, D) of each response."""
        ...


class CategoricalCGM(CGM, Protocol):
    """A CGM whose responses to x come from a finite support: its whole predictive is one vector."""

    def distribution(self, x: Any, context: Sequence[Pair]) -> np.ndarray:
        """log p(y | x, D) for every y of the support (y is the index)."""
        ...


def categorical_quantile(log_probs: np.ndarray, epsilon: float) -> float:
    """The exact epsilon-quantile of L = log p(Y) with Y ~ p: the least l with P(L <= l) >= epsilon."""
    order = np.argsort(log_probs, kind="stable")
    cdf = np.cumsum(np.exp(log_probs[order]))
    at = min(int(np.searchsorted(cdf, epsilon * cdf[-1], side="left")), len(order) - 1)
    return float(log_probs[order[at]])


def categorical_thr(extended: np.ndarray, context: np.ndarray, epsilon: float) -> float:
    """Algorithm 2 with K -> infinity: Q is the exact epsilon-quantile of log p(y | x, D) under
    p(y | x, D), and the rate is the probability under p(y | x, D_n) of a y with log p(y | x, D) < Q."""
    _check_epsilon(epsilon)
    below = extended < categorical_quantile(extended, epsilon)
    return float(np.exp(context[below]).sum() / np.exp(context).sum())


def categorical_entropy(log_probs: np.ndarray) -> float:
    """-sum p log p, the exact counterpart of -mean log p(y_k) over K draws."""
    p = np.exp(log_probs)
    return float(-(p[p > 0] * log_probs[p > 0]).sum())


def _check_epsilon(epsilon: float) -> None:
    if not 0 < epsilon < 1:
        raise ValueError(f"epsilon must lie in (0, 1), got {epsilon}")


def thr_estimate(
    cgm: CGM,
    x: Any,
    context: Sequence[Pair],
    extended: Sequence[Pair],
    k: int,
    epsilon: float,
    rng: np.random.Generator,
    exact: bool = False,
) -> tuple[float, float]:
    """Algorithm 2: the share of K responses to x given D_n that fall below the epsilon-quantile of
    log p(y | x, D) under D's own predictive (D = D_n plus imagined pairs), and for free the predictive
    entropy given D that Algorithm 3 averages (its K log-probs are the ones the quantile is taken over);
    ``exact`` (a CategoricalCGM) takes K to infinity."""
    _check_epsilon(epsilon)
    if exact:
        finite = _categorical(cgm)
        given_d = finite.distribution(x, extended)
        return categorical_thr(given_d, finite.distribution(x, context), epsilon), categorical_entropy(given_d)
    scores = cgm.log_prob(cgm.sample_responses(x, extended, k, rng), x, extended)
    quantile = float(np.quantile(scores, epsilon))
    candidates = cgm.sample_responses(x, context, k, rng)
    return float(np.mean(cgm.log_prob(candidates, x, extended) < quantile)), float(-np.mean(scores))


def _categorical(cgm: CGM) -> CategoricalCGM:
    if not hasattr(cgm, "distribution"):
        raise ValueError(f"{type(cgm).__name__} has no finite response support: exact=True needs distribution()")
    return cgm  # type: ignore[return-value]


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
    exact: bool = False,
    imagined: Sequence[Sequence[Pair]] | None = None,
) -> PHREstimate:
    """Algorithm 1: M completions of D_n by N - n imagined pairs each, Algorithm 2 on each, averaged.
    ``imagined``: the M completions when already drawn (they depend on D_n only, not on x)."""
    if m < 1 or k < 1 or n_imagined < 0:
        raise ValueError(f"need M >= 1, K >= 1, N - n >= 0; got M={m}, K={k}, N - n={n_imagined}")
    completions = list(imagined) if imagined is not None else imagine_completions(cgm, context, m, n_imagined, rng)
    thr, entropies = [], []
    for pairs in completions:
        rate, entropy = thr_estimate(cgm, x, context, [*context, *pairs], k, epsilon, rng, exact)
        thr.append(rate)
        entropies.append(entropy)
    return PHREstimate(float(np.mean(thr)), thr, entropies, [list(p) for p in completions])


def imagine_completions(
    cgm: CGM, context: Sequence[Pair], m: int, n_imagined: int, rng: np.random.Generator
) -> list[list[Pair]]:
    """Algorithm 1, lines 2-6: M completions of D_n by N - n imagined pairs each."""
    return [cgm.imagine(context, n_imagined, rng, i) for i in range(m)]


def total_entropy(
    cgm: CGM, x: Any, context: Sequence[Pair], k: int, rng: np.random.Generator, exact: bool = False
) -> float:
    """Equation 35: -mean log p(y | x, D_n) over K responses y ~ p(y | x, D_n)."""
    if exact:
        return categorical_entropy(_categorical(cgm).distribution(x, context))
    return float(-np.mean(cgm.log_prob(cgm.sample_responses(x, context, k, rng), x, context)))


def aleatoric_entropy(
    cgm: CGM, x: Any, context: Sequence[Pair], m: int, n_imagined: int, k: int, rng: np.random.Generator
) -> float:
    """Algorithm 3: the mean over M imagined completions D of the predictive entropy given D."""
    return float(
        np.mean(
            [total_entropy(cgm, x, [*context, *cgm.imagine(context, n_imagined, rng, i)], k, rng) for i in range(m)]
        )
    )


def model_hallucination_rate(
    cgm: CGM,
    x: Any,
    context: Sequence[Pair],
    evaluation: Sequence[Pair],
    k: int,
    epsilon: float,
    rng: np.random.Generator,
    exact: bool = False,
) -> float:
    """Section 3.2's MHR: Algorithm 2 with D = D_n plus a held-out D_eval of real pairs in place of
    imagined ones (a reference for evaluation only: D_eval does not exist at test time)."""
    return thr_estimate(cgm, x, context, [*context, *evaluation], k, epsilon, rng, exact)[0]


def error_rate(
    cgm: CGM, x: Any, context: Sequence[Pair], truth: Any, k: int, rng: np.random.Generator, exact: bool = False
) -> float:
    """Equation 9: the share of K responses y ~ p(y | x, D_n) that differ from the true y (exact: 1 - p(y))."""
    if exact:
        log_probs = _categorical(cgm).distribution(x, context)
        return float(1.0 - np.exp(log_probs[truth]) / np.exp(log_probs).sum())
    return float(np.mean([y != truth for y in cgm.sample_responses(x, context, k, rng)]))


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

    def imagine(self, context: Sequence[Pair], count: int, rng: np.random.Generator, index: int = 0) -> list[Pair]:
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
