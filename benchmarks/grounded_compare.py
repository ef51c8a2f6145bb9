"""Grounded checking beside its peers, like for like: every row on the same items and the same model,
scored on each method's own decision (accuracy, balanced accuracy, precision, recall, F1), and on
AUC-ROC and AUC-PR only where a method gives a graded score. On RTE's 277 validation pairs `grounded`
is also scored at a threshold fitted on RTE's training pairs (the cut that maximises balanced accuracy
there); on WikiBio's passages 0-9 the reference-free methods of the same passages stand beside it.

    .venv/bin/python benchmarks/grounded_compare.py     # docs/results/grounded-compared.json

It reads the records, never a run's folder: halluscope's runs in docs/results/grounded.json (their rows:
``records.py add grounded LABEL OUT --items``) and the peers' in docs/results/peers/. Intervals are 95%
percentile-bootstrap intervals over items (1,000 resamples, seed 0), the same resamples for every row:
RTE's pairs, WikiBio's passages.
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

RESAMPLES = 1000
DECISION = 0.5  # grounded's own, and every graded score's: flagged at 1 - p(Yes) >= 0.5
RTE, RTE_TRAIN = "rte qwen2.5-coder-1.5b", "rte train qwen2.5-coder-1.5b"
WIKIBIO = {  # the runs of WikiBio passages 0-9 beside the peers, and each one's name in the table
    "wikibio 0-9 grounded qwen2.5-coder-1.5b": "grounded, every chunk",
    "wikibio 0-9 grounded top_k=1 qwen2.5-coder-1.5b": "grounded, top_k=1",
}


def rte_rows(run: dict[str, Any]) -> tuple[dict[str, bool], dict[str, float]]:
    """Each pair's label (positive: not entailed) and the score, by the pair's id."""
    labels = {r["id"]: r["labels"][0] == "not_entailment" for r in run["rows"]}
    return labels, {r["id"]: float(r["scores"]["hypothesis"]) for r in run["rows"]}


def wikibio_rows(run: dict[str, Any]) -> tuple[dict[str, bool], dict[str, float]]:
    """Each sentence's label (positive: minor or major inaccurate) and score, by the peers' ids."""
    labels, scores = {}, {}
    for row in run["rows"]:
        for s, (label, score) in enumerate(zip(row["labels"], row["scores"].values(), strict=True)):
            key = f"passage {row['index']} sentence {s}"
            labels[key], scores[key] = label != "accurate", float(score)
    return labels, scores


def fitted_threshold(y: np.ndarray, scores: np.ndarray) -> float:
    """The cut (flag at score >= t) that maximises balanced accuracy on the given items; among equals,
    the one nearest the method's own 0.5."""
    values = np.unique(scores)
    cuts = np.r_[values[0] - 1e-9, (values[:-1] + values[1:]) / 2, values[-1] + 1e-9]
    flagged = scores[None, :] >= cuts[:, None]
    balanced = ((flagged & y).sum(axis=1) / y.sum() + (~flagged & ~y).sum(axis=1) / (~y).sum()) / 2
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
        "metrics": {k: float(v[0]) if np.isfinite(v[0]) else None for k, v in values.items()},
        "intervals": {k: [float(q) for q in np.nanpercentile(v[1:], [2.5, 97.5])] for k, v in values.items()},
        "flagged": int(flagged.sum()),
    }


def peer_rows(
    peers: dict[str, Any], ids: list[str], y: np.ndarray, draws: np.ndarray, ours: tuple[str, np.ndarray]
) -> dict[str, Any]:
    """Each peer's row on the items it scored. A peer that left some unscored (an answer that was not a
    score) is measured on the rest, and ``ours`` (grounded's name and scores) on the same items beside it."""
    rows = {}
    for peer, run in peers.items():
        by_id = {r["id"]: r for r in run["rows"]}
        kept = np.array([by_id.get(i, {}).get("score") is not None for i in ids])
        if not kept.any():
            raise SystemExit(f"{peer}: no item scored: rerun the peer first")
        p = np.array([float(by_id[i]["score"]) for i, keep in zip(ids, kept, strict=True) if keep])
        graded = bool(run.get("graded", False))
        row = {
            "source": f"{peer} run",
            "decision": f"score >= {DECISION} (1 - its groundedness score)" if graded else "its own label",
            "distinct_scores": int(np.unique(p).size),
            "scored_items": int(kept.sum()),
            **scored(y[kept], p >= DECISION, p if graded else None, draws[:, kept]),
        }
        rows[peer] = row
        if not kept.all():
            name, s = ours
            rows[f"{name}, on the {int(kept.sum())} items {peer} scored"] = {
                "source": f"the {name} row, on the items {peer} scored",
                "decision": f"score >= {DECISION} (p(Yes) < 0.5)",
                "scored_items": int(kept.sum()),
                **scored(y[kept], s[kept] >= DECISION, s[kept], draws[:, kept]),
            }
    return rows


def item_draws(ids: list[str], items: list[str]) -> np.ndarray:
    """Bootstrap resamples of whole items (a pair; a passage's sentences together), as unit weights."""
    names = sorted(set(items), key=items.index)
    counts = resample_counts(len(names), RESAMPLES)
    at = {name: k for k, name in enumerate(names)}
    return counts[:, [at[item] for item in items]]


def comparison(runs: dict[str, Any], peers: dict[str, Any], rte: bool) -> dict[str, Any]:
    """One like-for-like table: RTE's (with the fitted threshold) or WikiBio 0-9's."""
    ours = {RTE: "grounded"} if rte else WIKIBIO
    read_rows = rte_rows if rte else wikibio_rows
    labels, _ = read_rows(runs[next(iter(ours))])
    ids = sorted(labels, key=lambda i: [int(w) for w in i.split() if w.isdigit()])
    y = np.array([labels[i] for i in ids])
    draws = item_draws(ids, [i.split(" sentence")[0] for i in ids])
    rows: dict[str, Any] = {}
    for label, name in ours.items():
        _, scores = read_rows(runs[label])
        s = np.array([scores[i] for i in ids])
        rows[name] = {"source": f"grounded.json / {label}", "decision": f"score >= {DECISION} (p(Yes) < 0.5)",
                      **scored(y, s >= DECISION, s, draws)}  # fmt: skip
    if rte:
        train_labels, train_scores = rte_rows(runs[RTE_TRAIN])
        keys = list(train_scores)
        cut = fitted_threshold(np.array([train_labels[k] for k in keys]), np.array([train_scores[k] for k in keys]))
        s = np.array([read_rows(runs[RTE])[1][i] for i in ids])
        rows["grounded, threshold fitted on train"] = {
            "source": f"grounded.json / {RTE}; the threshold from grounded.json / {RTE_TRAIN}",
            "decision": f"score >= {cut:.3f}, fitted on {len(keys)} training pairs",
            "threshold": cut,
            "fitted_on": len(keys),
            **scored(y, s >= cut, s, draws),
        }
    main_label, main_name = next(iter(ours.items()))
    main_scores = np.array([read_rows(runs[main_label])[1][i] for i in ids])
    rows.update(peer_rows(peers, ids, y, draws, (main_name, main_scores)))
    made = provenance()
    return {
        **{k: made[k] for k in ("command", "commit", "machine")},
        "recorded": True,
        "models": runs[next(iter(ours))]["models"],
        "items": int(y.size),
        "item": "pair" if rte else "sentence",
        "positives": int(y.sum()),
        "calls": 0,
        "cache_hits": 0,
        "prompt_tokens": 0,
        "seconds": 0.0,
        "derived_from": ["grounded.json", "peers/grounded-rte.json" if rte else "peers/grounded-wikibio10.json"],
        "resamples": RESAMPLES,
        "rows": rows,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--record", default="grounded-compared", help="the record's name under docs/results")
    args = ap.parse_args(argv)
    runs = read("grounded")["runs"]
    compared = {
        "rte": comparison(runs, read("peers/grounded-rte")["runs"], rte=True),
        "wikibio 0-9": comparison(runs, read("peers/grounded-wikibio10")["runs"], rte=False),
    }
    title = "Grounded checking beside its peers, like for like (each method's own decision; AUCs for graded scores)"
    print(f"wrote {write(args.record, {'title': title, 'runs': compared}).relative_to(RESULTS.parents[1])}")
    for table, run in compared.items():
        for name, row in run["rows"].items():
            m = row["metrics"]
            auc = f"  AUC-ROC {m['auc_roc']:.1f}" if "auc_roc" in m else ""
            print(f"{table} / {name}: accuracy {m['accuracy']:.1f}  balanced {m['balanced_accuracy']:.1f}{auc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
