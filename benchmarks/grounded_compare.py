"""Grounded checking on RTE beside its peers, like for like: every row on the same 277 validation pairs
and the same model, scored on each method's own decision (accuracy, balanced accuracy, precision,
recall, F1), and on AUC-ROC and AUC-PR only where a method gives a graded score; `grounded` also at a
threshold fitted on RTE's training pairs (the threshold that maximises balanced accuracy there).

    .venv/bin/python benchmarks/grounded_compare.py     # docs/results/grounded-rte-compared.json

It reads the records, never a run's folder: halluscope's runs in docs/results/grounded.json (their
rows: ``records.py add grounded LABEL OUT --items``) and the peers' in docs/results/peers/grounded-rte.json.
Intervals are 95% percentile-bootstrap intervals over pairs (1,000 resamples, seed 0), the same
resamples for every row.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from records import RESULTS, read, write  # noqa: E402 - beside this script

from halluscope.bench.provenance import provenance  # noqa: E402
from halluscope.metrics import auc_pr_resampled, auc_roc_resampled, decisions_resampled, resample_counts  # noqa: E402

OURS = "rte qwen2.5-coder-1.5b"
TRAIN = "rte train qwen2.5-coder-1.5b"
DECISION = 0.5  # grounded's own: not supported when 1 - p(Yes) >= 0.5
RESAMPLES = 1000


def ours_rows(run: dict[str, Any]) -> tuple[dict[str, bool], dict[str, float]]:
    """Each pair's label (positive: not entailed) and grounded's score, by the pair's id."""
    labels = {r["id"]: r["labels"][0] == "not_entailment" for r in run["rows"]}
    scores = {r["id"]: float(r["scores"]["hypothesis"]) for r in run["rows"]}
    return labels, scores


def fitted_threshold(y: np.ndarray, scores: np.ndarray) -> float:
    """The cut (flag at score >= t) that maximises balanced accuracy on the given pairs; among equals,
    the one nearest the method's own 0.5."""
    values = np.unique(scores)
    cuts = np.r_[values[0] - 1e-9, (values[:-1] + values[1:]) / 2, values[-1] + 1e-9]
    flagged = scores[None, :] >= cuts[:, None]
    tpr = (flagged & y).sum(axis=1) / y.sum()
    tnr = (~flagged & ~y).sum(axis=1) / (~y).sum()
    balanced = (tpr + tnr) / 2
    best = np.flatnonzero(np.isclose(balanced, balanced.max()))
    return float(cuts[best[np.argmin(np.abs(cuts[best] - DECISION))]])


def scored(y: np.ndarray, flagged: np.ndarray, graded: np.ndarray | None, draws: np.ndarray) -> dict[str, Any]:
    """Every like-for-like metric of one row (x100), with its bootstrap interval over the same draws."""
    weights = np.vstack([np.ones(y.size), draws])
    values = {k: v * 100 for k, v in decisions_resampled(y, flagged, weights).items()}
    if graded is not None:
        values["auc_roc"] = auc_roc_resampled(y, graded, weights) * 100
        values["auc_pr"] = auc_pr_resampled(y, graded, weights) * 100
    return {
        "metrics": {k: float(v[0]) for k, v in values.items()},
        "intervals": {
            k: [float(np.nanpercentile(v[1:], 2.5)), float(np.nanpercentile(v[1:], 97.5))] for k, v in values.items()
        },
        "flagged": int(flagged.sum()),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="grounded-rte-compared", help="the record's name under docs/results")
    args = ap.parse_args(argv)
    ours = read("grounded")["runs"]
    peers = read("peers/grounded-rte")["runs"]
    labels, grounded = ours_rows(ours[OURS])
    ids = sorted(labels, key=lambda i: int(i.split()[-1]))
    y = np.array([labels[i] for i in ids])
    draws = resample_counts(y.size, RESAMPLES)
    train_labels, train_scores = ours_rows(ours[TRAIN])
    train_ids = list(train_scores)
    cut = fitted_threshold(
        np.array([train_labels[i] for i in train_ids]), np.array([train_scores[i] for i in train_ids])
    )
    s = np.array([grounded[i] for i in ids])
    rows: dict[str, Any] = {
        "grounded": {
            "source": f"grounded.json / {OURS}",
            "decision": f"score >= {DECISION} (p(Yes) < 0.5)",
            **scored(y, s >= DECISION, s, draws),
        },
        "grounded, threshold fitted on train": {
            "source": f"grounded.json / {OURS}; threshold from grounded.json / {TRAIN}",
            "decision": f"score >= {cut:.4f}, the balanced-accuracy-best cut on {len(train_ids)} training pairs",
            "threshold": cut,
            **scored(y, s >= cut, s, draws),
        },
    }
    for peer, run in peers.items():
        by_id = {r["id"]: r for r in run["rows"]}
        missing = [i for i in ids if by_id.get(i, {}).get("score") is None]
        if missing:
            raise SystemExit(f"{peer}: {len(missing)} pairs unscored (e.g. {missing[0]}): rerun the peer first")
        p = np.array([float(by_id[i]["score"]) for i in ids])
        rows[peer] = {
            "source": f"peers/grounded-rte.json / {peer}",
            "decision": "score >= 0.5 (1 - its groundedness score)" if run["graded"] else "its own label",
            "distinct_scores": int(np.unique(p).size),
            **scored(y, p >= 0.5, p if run["graded"] else None, draws),
        }
    made = provenance()
    record = {
        "title": "Grounded checking on RTE's validation pairs beside its peers, like for like",
        "runs": {
            "compared": {
                **{k: made[k] for k in ("command", "commit", "machine")},
                "recorded": True,
                "models": ours[OURS]["models"],
                "items": int(y.size),
                "item": "pair",
                "positives": int(y.sum()),
                "calls": 0,
                "cache_hits": 0,
                "prompt_tokens": 0,
                "seconds": 0.0,
                "derived_from": ["grounded.json", "peers/grounded-rte.json"],
                "resamples": RESAMPLES,
                "rows": rows,
            }
        },
    }
    print(f"wrote {write(args.out, record).relative_to(RESULTS.parents[1])}")
    for name, row in rows.items():
        m = row["metrics"]
        auc = f"  AUC-ROC {m['auc_roc']:.1f}" if "auc_roc" in m else ""
        print(f"{name}: accuracy {m['accuracy']:.1f}  balanced {m['balanced_accuracy']:.1f}  F1 {m['f1']:.1f}{auc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
