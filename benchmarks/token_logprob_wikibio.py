"""token-logprob on all of WikiBio: one table row per model and variant, from the runs of

    halluscope bench wikibio --model local:MODEL --out OUT \\
        --method token-logprob:avg-nll,token-logprob:max-nll,token-logprob:avg-entropy,token-logprob:max-entropy

(the first variant reads every passage once; the others read the cached token statistics back), beside
the random baseline of the same sentences.

    .venv/bin/python benchmarks/token_logprob_wikibio.py OUT [OUT ...] [--json docs/results/token-logprob.json]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from halluscope.bench.report import markdown_table, write_json

VARIANTS = {
    "token-logprob:avg-nll": "Avg(-log p)",
    "token-logprob:max-nll": "Max(-log p)",
    "token-logprob:avg-entropy": "Avg(H)",
    "token-logprob:max-entropy": "Max(H)",
}
METRICS = (
    ("auc_pr_nonfact", "NonFact AUC-PR"),
    ("auc_pr_nonfact_star", "NonFact* AUC-PR"),
    ("auc_pr_factual", "Factual AUC-PR"),
    ("auc_roc_nonfact", "NonFact AUC-ROC"),
    ("pearson", "Pearson"),
    ("spearman", "Spearman"),
)


def _interval(result: dict[str, Any], key: str) -> str:
    low, high = (result.get("intervals") or {}).get(key, (None, None))
    value = result["metrics"][key]
    return f"{value:.2f}" if low is None else f"{value:.2f} [{low:.1f}, {high:.1f}]"


def rows_of(out: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """One row per variant run under ``out``, and the run that read the passages (the one that sent the
    forward passes; the others read its cached token statistics)."""
    rows, runs = [], []
    for path in sorted(out.glob("token-logprob*/results.json")):
        result = json.loads(path.read_text())
        runs.append(result)
        label = VARIANTS.get(result["params"]["method"])
        if label is not None:
            metrics = {name: _interval(result, key) for key, name in METRICS}
            rows.append({"model": result["params"]["model"], "score": label, **metrics})
    if not rows:
        raise SystemExit(f"no token-logprob run under {out}")
    rows.sort(key=lambda r: list(VARIANTS.values()).index(r["score"]))
    return rows, max(runs, key=lambda r: r["meta"]["calls"])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("outs", nargs="+", help="bench wikibio output directories")
    p.add_argument("--json", help="write the table and the costs here")
    args = p.parse_args()
    rows, costs = [], []
    for out in args.outs:
        found, reader = rows_of(Path(out))
        rows.extend(found)
        meta, metrics = reader["meta"], reader["metrics"]
        costs.append(
            {
                "model": reader["params"]["model"],
                "passages": metrics["n_passages"],
                "sentences": metrics["n_sentences"],
                "forward passes": meta["params"].get("forward_passes", meta["calls"]),
                "tokens read": meta["tokens"]["prompt"],
                "minutes": round(meta["seconds"] / 60, 1),
                "random NonFact AUC-PR": round(metrics["random_auc_pr_nonfact"], 2),
                "random Factual AUC-PR": round(metrics["random_auc_pr_factual"], 2),
            }
        )
    print(markdown_table(rows, [(k, k) for k in rows[0]]))
    print()
    print(markdown_table(costs, [(k, k) for k in costs[0]]))
    if args.json:
        write_json(Path(args.json), {"rows": rows, "costs": costs})
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
