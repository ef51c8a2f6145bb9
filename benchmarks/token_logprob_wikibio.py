"""token-logprob on all of WikiBio: one table row per model and variant, from the runs of

    halluscope bench wikibio --model local:MODEL --out OUT \\
        --method token-logprob,token-logprob:max-nll,token-logprob:avg-entropy,token-logprob:max-entropy

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
    "token-logprob": "Avg(-log p)",
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
    """One row per variant run under ``out``, and the run of the first (what reading the passages cost)."""
    rows, first = [], None
    for method, label in VARIANTS.items():
        path = out / method / "results.json"
        if not path.is_file():
            continue
        result = json.loads(path.read_text())
        first = first or result
        model = result["params"]["model"]
        rows.append({"model": model, "score": label, **{name: _interval(result, key) for key, name in METRICS}})
    if first is None:
        raise SystemExit(f"no token-logprob run under {out}")
    return rows, first


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("outs", nargs="+", help="bench wikibio output directories")
    p.add_argument("--json", help="write the table and the costs here")
    args = p.parse_args()
    rows, costs = [], []
    for out in args.outs:
        found, first = rows_of(Path(out))
        rows.extend(found)
        meta, metrics = first["meta"], first["metrics"]
        costs.append(
            {
                "model": first["params"]["model"],
                "passages": metrics["n_passages"],
                "sentences": metrics["n_sentences"],
                "forward passes": meta["params"].get("forward_passes", meta["calls"]),
                "tokens read": meta["tokens"]["prompt"],
                "minutes": round(meta["seconds"] / 60, 1),
                "random NonFact AUC-PR": round(metrics["random_auc_pr_nonfact"], 2),
                "random Factual AUC-PR": round(metrics["random_auc_pr_factual"], 2),
            }
        )
    print(markdown_table(rows))
    print()
    print(markdown_table(costs))
    if args.json:
        write_json(Path(args.json), {"rows": rows, "costs": costs})
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
