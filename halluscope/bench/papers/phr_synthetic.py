"""The PHR exactness check (Jesson et al., Appendix G.1.2 setting): Algorithm 1 on the exact Bayesian
linear regression CGM against Definition 4 computed by quadrature, and against the true mechanism's
hallucination rate (Definition 3), for several context sizes n."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from halluscope.bench.benchmark import Benchmark, Settings, context_sizes, option
from halluscope.bench.report import markdown_table, write_text
from halluscope.bench.runner import BenchResult, Plan
from halluscope.checks import finite_number
from halluscope.errors import ConfigError
from halluscope.scoring.phr import BayesianLinearRegression, phr_estimate

COLUMNS = (
    ("n", "n"),
    ("reference_phr", "PHR, Definition 4 (exact)"),
    ("phr", "PHR, Algorithm 1"),
    ("abs_error", "mean abs error"),
    ("thr", "THR of f* (exact)"),
    ("aleatoric", "aleatoric, Algorithm 3"),
    ("aleatoric_reference", "aleatoric (exact)"),
)


def _summary(blr: BayesianLinearRegression, ns: Sequence[int], records: list[dict[str, Any]]) -> dict[str, Any]:
    """Per context size: the estimate against the exact PHR (mean and largest error), THR, aleatoric."""
    rows = []
    for n in ns:
        mine = [r for r in records if r["n"] == n]
        reference = np.array([r["reference_phr"] for r in mine])
        estimate = np.array([r["scores"]["phr"] for r in mine])
        errors = np.abs(estimate - reference)
        rows.append(
            {
                "n": n,
                "reference_phr": float(reference.mean()),
                "phr": float(estimate.mean()),
                "abs_error": float(errors.mean()),
                "max_abs_error": float(errors.max()),
                "thr": float(np.mean([r["thr"] for r in mine])),
                "aleatoric": float(np.mean([r["aleatoric"] for r in mine])),
                "aleatoric_reference": blr.aleatoric_entropy(),
            }
        )
    return {"rows": rows}


def phr_synthetic_plan(
    ns: Sequence[int] = (2, 8, 32),
    problems: int = 100,
    m: int = 40,
    k: int = 2000,
    n_imagined: int = 100,
    epsilon: float = 0.05,
    seed: int = 0,
) -> Plan:
    """Per n: ``problems`` random (f*, D_n, x), each scored exactly and by Algorithms 1 and 3 on the same
    imagined completions (defaults as the paper's synthetic runs: M = 40, K = 2000, N - n = 100,
    epsilon = 0.05). Each problem draws from its own stream, seeded by (seed, n, problem): its numbers do
    not depend on which items ran before it (a resumed run, a Ray worker)."""
    if not ns or any(n < 0 for n in ns):
        raise ConfigError(f"context sizes must be non-negative, got {list(ns)}")
    if problems < 1 or m < 1 or k < 2 or n_imagined < 0:
        raise ConfigError(
            "need problems >= 1, M >= 1, K >= 2 and imagined >= 0", settings=("problems", "M", "K", "imagined")
        )
    if not 0 < epsilon < 1:
        raise ConfigError(f"epsilon must lie in (0, 1), got {epsilon}", settings=("epsilon",))
    blr = BayesianLinearRegression()

    def score(item: tuple[int, int]) -> dict[str, Any]:
        n, problem = item
        rng = np.random.default_rng((seed, n, problem))
        f, context, x = blr.sample_problem(n, rng)
        reference = blr.posterior_hallucination_rate(x, context, epsilon)
        run = phr_estimate(blr, x, context, m, n_imagined, k, epsilon, rng)
        thr = blr.true_hallucination_rate(f, x, context, epsilon)
        return {"n": n, "reference_phr": reference, "aleatoric": run.aleatoric, "thr": thr, "scores": {"phr": run.phr}}

    params = {
        "method": "phr",
        "setting": "f ~ N(0, I_2), x ~ N(0, 1), y ~ N(f_1 + f_2 x, 0.1^2) (Appendix G.1.2)",
        "ns": list(ns),
        "problems": problems,
        "M": m,
        "K": k,
        "imagined": n_imagined,
        "epsilon": epsilon,
        "seed": seed,
    }
    return Plan(
        bench="phr-synthetic",
        method="phr",
        what="problem",
        items=[(n, i) for n in ns for i in range(problems)],
        item_id=lambda item: f"n={item[0]} problem={item[1]}",
        score=score,
        summarise=partial(_summary, blr, ns),
        params=params,
        report=_write_report,
    )


def _write_report(result: BenchResult, out_dir: Path, failed: str) -> None:
    p, rows = result.params, result.metrics["rows"]
    _plot(out_dir / "phr_vs_n.png", rows, p["epsilon"])
    write_text(
        out_dir / "report.md",
        f"# PHR exactness check\n\n{p['setting']}; {p['problems']} problems per n; M = {p['M']}, K = {p['K']}, "
        f"N - n = {p['imagined']}, epsilon = {p['epsilon']}, seed {p['seed']}.\n\n"
        f"{markdown_table(rows, COLUMNS, digits=4)}\n\n"
        "Definition 4 and the THR of the true mechanism are computed by quadrature; Algorithm 1 sees only "
        "the CGM's samples and log-probabilities.\n\n![PHR vs n](phr_vs_n.png)\n" + failed,
    )


def _plot(path: Path, rows: list[dict[str, Any]], epsilon: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ns = [r["n"] for r in rows]
    fig, ax = plt.subplots(figsize=(5.5, 4.0), dpi=120)
    ax.plot(ns, [r["reference_phr"] for r in rows], "o-", label="PHR, Definition 4 (exact)")
    ax.plot(ns, [r["phr"] for r in rows], "s--", label="PHR, Algorithm 1")
    ax.plot(ns, [r["thr"] for r in rows], "^:", label="THR of the true f*")
    ax.axhline(epsilon, color="grey", linestyle=":", label=f"epsilon = {epsilon}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("context size n")
    ax.set_ylabel("hallucination rate")
    ax.set_title("Bayesian linear regression")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


@dataclass(frozen=True, kw_only=True)
class SyntheticSettings(Settings):
    sizes: tuple[int, ...] = context_sizes((2, 8, 32))
    problems: int = option(100, "problems per n", "--problems", type=int)
    M: int = option(40, "imagined completions per problem", "--M", type=int)
    K: int = option(2000, "responses per quantile and per rate", "--K", type=int)
    imagined: int = option(100, "N - n, imagined pairs per completion", "--imagined", type=int)
    epsilon: float = option(0.05, "the likely set's epsilon", "--epsilon", type=finite_number)
    seed: int = option(0, "the seed of the problems drawn", "--seed", type=int)


def _plans(s: SyntheticSettings, _gateway: Any) -> list[Plan]:
    return [phr_synthetic_plan(s.sizes, s.problems, s.M, s.K, s.imagined, s.epsilon, s.seed)]


BENCHMARK = Benchmark(
    name="phr-synthetic",
    help="PHR exactness check: Algorithm 1 vs Definition 4 on exact Bayesian linear regression",
    description="Random problems per context size n; the PHR of Definition 4 and the THR of the true "
    "mechanism computed exactly, against Algorithm 1 (and Algorithm 3's aleatoric entropy) run on "
    "the model's samples and log-probabilities only.",
    settings=SyntheticSettings,
    plans=_plans,
    describe=lambda results, _settings: markdown_table(results[0].metrics["rows"], COLUMNS, digits=4),
    calls_models=False,
)
