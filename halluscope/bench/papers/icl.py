"""In-context learning tasks and the PHR benchmark of Jesson et al., Section 3.2, scaled to a CPU.

Tasks (Appendix F.2, labels as the paper writes them): SST-2 positive/negative, Subjectivity
subjective/objective, AG News World/Sports/Business/Science (Sci/Tech -> Science), RTE and WNLI
entailment/not (not_entailment -> not), Medical Question Pairs similar/dissimilar. A pair task's input
is its two texts on two lines. Inputs longer than 116 tokens (the model's tokenizer) are left out.

Per context size n: ``contexts`` response-balanced D_n drawn from the demonstration pool, each with a
disjoint D_eval (random pool examples) and ``queries`` held-out queries; per query the PHR, the model
hallucination rate and the empirical error rate at each epsilon, the accuracy of the most likely
response, and the entropies. Reported per n (as the paper's Figure 4): mean PHR, MHR and error rate,
and the PHR as a linear predictor of MHR and of the error rate over the queries (MAE, beta, R^2).
"""

from __future__ import annotations

import csv
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from halluscope.backends.local import local_spec
from halluscope.backends.logprobs import LogProbModel
from halluscope.bench.benchmark import REQUIRED, Benchmark, Settings, context_sizes, option, switch
from halluscope.bench.datasets import dataset_dir
from halluscope.bench.report import markdown_table, write_text
from halluscope.bench.runner import BenchResult, Plan
from halluscope.errors import ConfigError, DataError
from halluscope.runtime import registry
from halluscope.runtime.contract import Flag, arg
from halluscope.scoring.phr import Pair

if TYPE_CHECKING:
    from halluscope.backends.gateway import CallStats

PHR_MODEL = local_spec("qwen2.5-coder-0.5b")  # Section 3.2's runs here: fast, and gives log-probs
MAX_QUERY_TOKENS = 116
HELD_OUT = 0.2  # share of a single-file dataset kept for queries (never a demonstration)


@dataclass(frozen=True)
class ICLTask:
    name: str
    labels: tuple[str, ...]
    pool: list[Pair]  # demonstrations and D_eval
    queries: list[Pair]

    def filtered(self, count_tokens: Callable[[str], int], limit: int = MAX_QUERY_TOKENS) -> ICLTask:
        """The task without inputs longer than ``limit`` tokens (the paper's 116-token rule)."""

        def keep(pairs: list[Pair]) -> list[Pair]:
            return [p for p in pairs if count_tokens(p[0]) <= limit]

        return ICLTask(self.name, self.labels, keep(self.pool), keep(self.queries))


def _lines(path: Path, encoding: str = "utf-8") -> list[str]:
    return [line for line in path.read_text(encoding=encoding).split("\n") if line.strip()]


def _labelled_lines(path: Path, names: dict[str, str], encoding: str = "utf-8") -> list[Pair]:
    out = []
    for line in _lines(path, encoding):
        label, _, text = line.partition(" ")
        out.append((" ".join(text.split()), names[label]))
    return out


def _hold_out(rows: Sequence[Any], seed: int = 0) -> tuple[list[Any], list[Any]]:
    """A fixed split of a dataset that ships as one file: (pool, queries)."""
    order = np.random.default_rng(seed).permutation(len(rows))
    cut = int(len(rows) * (1 - HELD_OUT))
    return [rows[i] for i in order[:cut]], [rows[i] for i in order[cut:]]


def _sst2(root: Path) -> ICLTask:
    names = {"1": "positive", "0": "negative"}
    return ICLTask(
        "sst2",
        ("positive", "negative"),
        _labelled_lines(root / "stsa.binary.train", names),
        _labelled_lines(root / "stsa.binary.dev", names),
    )


def _subj(root: Path) -> ICLTask:
    rows = _labelled_lines(root / "subj.all", {"0": "subjective", "1": "objective"}, encoding="latin-1")
    pool, queries = _hold_out(rows)
    return ICLTask("subj", ("subjective", "objective"), pool, queries)


def _agnews(root: Path) -> ICLTask:
    names = {"1": "World", "2": "Sports", "3": "Business", "4": "Science"}
    with (root / "test.csv").open(encoding="utf-8", newline="") as f:
        rows = [
            (" ".join(f"{r['Title']} {r['Description']}".replace("\\", " ").split()), names[r["Class Index"]])
            for r in csv.DictReader(f)
        ]
    pool, queries = _hold_out(rows)
    return ICLTask("agnews", tuple(names.values()), pool, queries)


def _rte(root: Path) -> ICLTask:
    def read(name: str) -> list[Pair]:
        rows = [json.loads(line) for line in _lines(root / name)]
        return [
            (f"{r['premise']}\n{r['hypothesis']}", "entailment" if r["label"] == "entailment" else "not") for r in rows
        ]

    return ICLTask("rte", ("entailment", "not"), read("train.jsonl"), read("val.jsonl"))


def _wnli(root: Path) -> ICLTask:
    def read(path: Path) -> list[Pair]:
        with path.open(encoding="utf-8", newline="") as f:
            rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
        return [(f"{r['sentence1']}\n{r['sentence2']}", "entailment" if r["label"] == "1" else "not") for r in rows]

    pool = read(root / "glue_train_resplit" / "train.tsv") + read(root / "glue_train_resplit" / "dev.tsv")
    return ICLTask("wnli", ("entailment", "not"), pool, read(root / "dev.tsv"))


def _mqp(root: Path) -> ICLTask:
    with (root / "mqp.csv").open(encoding="utf-8", newline="") as f:
        rows = [(f"{q1}\n{q2}", "similar" if label == "1" else "dissimilar") for _, q1, q2, label in csv.reader(f)]
    # rows come in pairs sharing question_1: split by pair, so no query's question is a demonstration
    pool, queries = _hold_out([rows[i : i + 2] for i in range(0, len(rows), 2)])
    return ICLTask("mqp", ("similar", "dissimilar"), [p for g in pool for p in g], [p for g in queries for p in g])


LOADERS: dict[str, tuple[str, Callable[[Path], ICLTask]]] = {
    "sst2": ("sst2", _sst2),
    "subj": ("subj", _subj),
    "agnews": ("agnews", _agnews),
    "rte": ("rte", _rte),
    "wnli": ("wnli", _wnli),
    "mqp": ("medical_question_pairs", _mqp),
}


def load_icl_task(name: str, data: str | Path | None = None) -> ICLTask:
    if name not in LOADERS:
        raise ConfigError(f"unknown ICL task {name!r}; known: {', '.join(LOADERS)}")
    directory, loader = LOADERS[name]
    try:
        return loader(dataset_dir(directory, data))
    except (OSError, KeyError, ValueError) as exc:
        raise DataError(f"cannot read the {name} data under {dataset_dir(directory, data)}: {exc}") from exc


def balanced_context(pool: Sequence[Pair], labels: Sequence[str], n: int, rng: np.random.Generator) -> list[Pair]:
    """n examples with every label equally often (the remainder to labels drawn at random), shuffled."""
    per_label = {label: [p for p in pool if p[1] == label] for label in labels}
    counts = dict.fromkeys(labels, n // len(labels))
    for label in rng.choice(list(labels), size=n % len(labels), replace=False):
        counts[str(label)] += 1
    chosen: list[Pair] = []
    for label, count in counts.items():
        if count > len(per_label[label]):
            raise DataError(f"only {len(per_label[label])} examples labelled {label!r} for a context of {n}")
        chosen += [per_label[label][i] for i in rng.choice(len(per_label[label]), size=count, replace=False)]
    return [chosen[i] for i in rng.permutation(len(chosen))]


def _linear_fit(x: Sequence[float], y: Sequence[float]) -> dict[str, float | None]:
    """The PHR as a linear predictor of a reference rate: MAE, MSE, beta, p-value, R^2."""
    from scipy.stats import linregress

    xs, ys = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    out: dict[str, float | None] = {
        "mae": float(np.mean(np.abs(xs - ys))),
        "mse": float(np.mean((xs - ys) ** 2)),
        "beta": None,
        "p_value": None,
        "r2": None,
    }
    if len(xs) > 2 and np.ptp(xs) > 0 and np.ptp(ys) > 0:
        fit = linregress(xs, ys)
        out.update(beta=float(fit.slope), p_value=float(fit.pvalue), r2=float(fit.rvalue**2))
    return out


COLUMNS = (
    ("n", "n"),
    ("queries", "queries"),
    ("accuracy", "accuracy"),
    ("phr_low", "PHR (eps low)"),
    ("mhr_low", "MHR (eps low)"),
    ("mae_mhr", "MAE vs MHR"),
    ("r2_mhr", "R^2 vs MHR"),
    ("phr_high", "PHR (eps high)"),
    ("error_rate", "error rate"),
    ("mae_error", "MAE vs error"),
    ("r2_error", "R^2 vs error"),
    ("seconds_per_query", "s / query"),
)


def summarise(records: list[dict[str, Any]], n: int, low: str, high: str) -> dict[str, Any]:
    """One row of the table: means over the queries of context size n, and the linear fits."""
    rows = [r for r in records if r["n"] == n]
    phr_low = [r["by_epsilon"][low]["phr"] for r in rows]
    mhr_low = [r["by_epsilon"][low]["mhr"] for r in rows]
    phr_high = [r["by_epsilon"][high]["phr"] for r in rows]
    errors = [r["error_rate"] for r in rows]
    vs_mhr, vs_error = _linear_fit(phr_low, mhr_low), _linear_fit(phr_high, errors)
    return {
        "n": n,
        "queries": len(rows),
        "accuracy": float(np.mean([r["correct"] for r in rows])),
        "phr_low": float(np.mean(phr_low)),
        "mhr_low": float(np.mean(mhr_low)),
        "mae_mhr": vs_mhr["mae"],
        "r2_mhr": vs_mhr["r2"],
        "phr_high": float(np.mean(phr_high)),
        "mhr_high": float(np.mean([r["by_epsilon"][high]["mhr"] for r in rows])),
        "error_rate": float(np.mean(errors)),
        "mae_error": vs_error["mae"],
        "r2_error": vs_error["r2"],
        "fit_vs_mhr": vs_mhr,
        "fit_vs_error": vs_error,
        "total_entropy": float(np.mean([r["total_entropy"] for r in rows])),
        "mutual_information": float(np.mean([r["mutual_information"] for r in rows])),
        "seconds_per_query": float(np.mean([r["seconds"] for r in rows])),
    }


@dataclass(frozen=True)
class ICLQuery:
    """One query of the protocol, with the context D_n and the D_eval drawn for its (n, context)."""

    n: int
    context_index: int
    query_index: int
    x: str
    truth: str
    context: list[Pair]
    evaluation: list[Pair]

    @property
    def id(self) -> str:
        return f"n={self.n} context={self.context_index} query={self.query_index}"


def _queries(
    task: ICLTask, ns: Sequence[int], contexts: int, queries: int, eval_size: int, seed: int
) -> list[ICLQuery]:
    """Per n and context: a response-balanced D_n, a disjoint D_eval, and ``queries`` held-out queries."""
    out = []
    for n in ns:
        for c in range(contexts):
            rng = np.random.default_rng([seed, n, c])
            context = balanced_context(task.pool, task.labels, n, rng)
            rest = [p for p in task.pool if p not in context]
            evaluation = [rest[i] for i in rng.choice(len(rest), size=eval_size, replace=False)]
            for q in rng.choice(len(task.queries), size=queries, replace=False):
                x, truth = task.queries[int(q)]
                out.append(ICLQuery(n, c, int(q), x, truth, context, evaluation))
    return out


def score_query(rate: Callable[[Any], Any], stats: CallStats, item: ICLQuery) -> dict[str, Any]:
    """One query's PHR record: the estimate's evidence (less its imagined datasets) and what it cost."""
    began, calls_before, tokens_before = time.perf_counter(), stats.calls, stats.prompt_tokens
    query = registry.get("phr").inputs(context=item.context, query=item.x, truth=item.truth, evaluation=item.evaluation)
    result = rate(query)
    est = {**result.units[0].evidence, "events": dict(result.meta.events)}
    est.pop("imagined")
    return {
        "n": item.n,
        "context": item.context_index,
        "x": item.x,
        "truth": item.truth,
        **est,
        "calls": stats.calls - calls_before,
        "prompt_tokens": stats.prompt_tokens - tokens_before,
        "seconds": time.perf_counter() - began,
        "scores": {"phr": est["phr"]},
    }


def phr_plan(settings: ICLSettings, gateway: Any = None) -> Plan:
    """The Section 3.2 protocol as ``settings`` give it (their defaults the paper's: 50 contexts x 10
    queries, M = 10, K = 50, N - n = 5, PHR vs MHR at epsilon 0.05 and vs error at 0.75; n is the context
    size); ``settings.model`` is a log-prob model spec, or the model itself."""
    from halluscope.backends.gateway import CallStats, default_gateway
    from halluscope.backends.providers.llama_cpp import LlamaCppLogProbModel
    from halluscope.runtime.contract import start

    s = settings
    gw = gateway or default_gateway()
    lm = gw.logprob_model(s.model)
    if isinstance(lm, LlamaCppLogProbModel):
        lm.reuse_prefix = not s.no_prefix_reuse
    task = load_icl_task(s.task, s.data).filtered(_counter(lm))
    stats = CallStats()
    phr = registry.get("phr")
    exact, responses = not s.draws and not s.sampled, "sampled" if s.sampled else "distribution"
    options = phr.options(
        model=lm, n=s.M, k=s.K, n_imagined=s.imagined, epsilon=s.epsilon, exact=exact, responses=responses, seed=s.seed
    )
    rate = phr.scorer(options, start(gw, stats))
    low, high = (str(e) for e in s.epsilon)
    eval_size = s.imagined if s.eval_size is None else s.eval_size
    params = {
        "task": s.task,
        "method": phr.name,
        "model": lm.name,
        "protocol": "Jesson et al. 2024, Section 3.2 (response-balanced D_n, disjoint D_eval, queries <= 116 tokens)",
        "labels": list(task.labels),
        "pool": len(task.pool),
        "query_pool": len(task.queries),
        "ns": list(s.sizes),
        "contexts": s.contexts,
        "queries": s.queries,
        "M": s.M,
        "K": s.K,
        "imagined": s.imagined,
        "eval_size": eval_size,
        "epsilons": list(s.epsilon),
        "exact": exact,
        "responses": responses,
        "reuse_prefix": not s.no_prefix_reuse,
        "seed": s.seed,
    }
    return Plan(
        bench="phr",
        method=phr.name,
        what="query",
        items=_queries(task, s.sizes, s.contexts, s.queries, eval_size, s.seed),
        item_id=lambda item: item.id,
        score=partial(score_query, rate, stats),
        summarise=lambda records: {
            "random_error": 1 - 1 / len(task.labels),
            "rows": [summarise(records, n, low, high) for n in s.sizes],
        },
        params=params,
        report=_write_report,
        stats=stats,
    )


def _counter(model: Any) -> Callable[[str], int]:
    """The model's tokenizer, or whitespace words where a server exposes none (stated in the report)."""
    try:
        model.count_tokens("a")
        return model.count_tokens  # type: ignore[no-any-return]
    except ConfigError:
        return lambda text: len(text.split())


def _write_report(result: BenchResult, out_dir: Path, failed: str) -> None:
    _plot(out_dir / "phr_icl.png", result)
    write_text(out_dir / "report.md", _report(result) + failed)


def _report(result: BenchResult) -> str:
    p, meta = result.params, result.meta
    low, high = p["epsilons"]
    return (
        f"# PHR on {p['task']} ({p['model']})\n\n{p['protocol']}. Per n: {p['contexts']} "
        f"contexts x {p['queries']} queries; M = {p['M']}, K = {p['K']}, "
        f"N - n = {p['imagined']}, |D_eval| = {p['eval_size']}; eps low = {low}, "
        f"eps high = {high}; exact = {p['exact']}, responses = {p['responses']}. "
        f"Random-guess error rate {result.metrics['random_error']:.2f}. {meta.calls} model calls "
        f"({meta.params.get('forward_passes', 0)} forward passes), {meta.cache_hits} from the cache, "
        f"{meta.seconds:.0f} s.\n\n"
        + markdown_table(result.metrics["rows"], COLUMNS, digits=3)
        + "\n\nMAE and R^2: the PHR as a linear predictor of the MHR (eps low) and of the error rate (eps high) "
        "over the queries of each n.\n\n![PHR vs MHR and error rate](phr_icl.png)\n"
    )


def _plot(path: Path, result: BenchResult) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows, (low, high) = result.metrics["rows"], result.params["epsilons"]
    ns = [r["n"] for r in rows]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(5.0, 6.0), dpi=120, sharex=True)
    top.plot(ns, [r["mhr_low"] for r in rows], "o-", color="tab:orange", label="MHR")
    top.plot(ns, [r["phr_low"] for r in rows], "s--", color="tab:blue", label="PHR")
    top.set_ylabel(f"rate (epsilon = {low})")
    top.set_title(f"{result.params['task']}: {result.params['model']}")
    top.legend(fontsize=8)
    bottom.plot(ns, [r["error_rate"] for r in rows], "o-", color="tab:green", label="error rate")
    bottom.plot(ns, [r["phr_high"] for r in rows], "s--", color="tab:blue", label="PHR")
    bottom.axhline(result.metrics["random_error"], color="grey", linestyle="--", label="random guess")
    bottom.set_ylabel(f"rate (epsilon = {high})")
    bottom.set_xscale("log", base=2)
    bottom.set_xlabel("in-context examples n")
    bottom.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


@dataclass(frozen=True, kw_only=True)
class ICLSettings(Settings):
    task: str = option(REQUIRED, "the in-context learning task", "--task", choices=tuple(LOADERS))
    sizes: tuple[int, ...] = context_sizes((2, 4, 8, 16))
    contexts: int = option(50, "contexts D_n per n", "--contexts", type=int)
    queries: int = option(10, "queries per context", "--queries", type=int)
    M: int = option(10, "imagined completions per context", "--M", type=int)
    K: int = option(50, "responses per draw where drawn", "--K", type=int)
    imagined: int = option(5, "N - n, imagined pairs per completion", "--imagined", type=int)
    eval_size: int | None = option(None, "|D_eval| for the MHR (default: N - n)", "--eval-size", type=int)
    epsilon: tuple[float, ...] = arg(
        (0.05, 0.75),
        help="low (vs MHR) and high (vs error) epsilon",
        flags=(Flag(("--epsilon",), listed=True, type=float),),
    )
    model: str | LogProbModel = option(PHR_MODEL, "a log-prob model spec (local:, transformers:)", "--model")
    draws: bool = switch("K draws from the next-token distribution, not exact", "--draws")
    sampled: bool = switch("K sampled responses scored by teacher forcing", "--sampled")
    no_prefix_reuse: bool = switch("evaluate every prompt from its first token", "--no-prefix-reuse")
    seed: int = option(0, "the seed of the contexts and queries drawn", "--seed", type=int)

    def __post_init__(self) -> None:
        object.__setattr__(self, "sizes", tuple(self.sizes))
        object.__setattr__(self, "epsilon", tuple(self.epsilon))
        if not self.sizes or min(self.sizes) < 1 or self.contexts < 1 or self.queries < 1:
            raise ConfigError(
                "need context sizes >= 1, contexts >= 1 and queries >= 1", settings=("sizes", "contexts", "queries")
            )
        if len(self.epsilon) != 2:
            raise ConfigError(
                f"give two epsilons, the low one for MHR and the high one for the error rate: {self.epsilon}",
                settings=("epsilon",),
            )


def _plans(settings: ICLSettings, gateway: Callable[[], Any]) -> list[Plan]:
    return [phr_plan(settings, gateway())]


def _describe(results: Sequence[BenchResult], _settings: ICLSettings) -> str:
    table = markdown_table(results[0].metrics["rows"], COLUMNS, digits=3)
    return f"{table}\nrandom-guess error {results[0].metrics['random_error']:.2f}; {results[0].meta.cost()}"


BENCHMARK = Benchmark(
    name="phr",
    help="PHR on an in-context learning task vs the model hallucination rate and the error rate",
    description="Jesson et al., Section 3.2: per context size n, response-balanced contexts, a disjoint "
    "D_eval and held-out queries (<= 116 tokens); the PHR against the MHR at the low epsilon and "
    "against the empirical error rate at the high one. Defaults are the paper's budget; on a CPU try "
    "--contexts 8 --queries 5 --M 5.",
    settings=ICLSettings,
    plans=_plans,
    describe=_describe,
)
