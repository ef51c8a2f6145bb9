"""The calibrated-risk table of docs/results/calibrated-risk.md, from `halluscope calibrate` files.

Each file holds one fit (a method, or several stacked) on WikiBio passages and its held-out report; its
runs (``NAME.runs/METHOD/results.json``) hold what the scores cost. The table puts every fit side by
side on the same held-out sentences: raw and calibrated AUC-ROC, AUC-PR, Brier, ECE, the threshold for
the target precision, and the model calls and seconds per passage each method needs.

    .venv/bin/python benchmarks/calibrated_risk.py out/cal/dq.json out/cal/scgp-prob.json ... \
        [--out docs/results/calibrated-risk.json]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from halluscope.bench.runner import BenchResult
from halluscope.calibration import Calibration


def cost(runs: Path, method: str) -> dict[str, Any]:
    """Calls a passage needs (sent or replayed), and the run's wall seconds per call it sent (the last
    process of a resumed run: its seconds and its calls), from the method's run."""
    result = BenchResult.read(runs / method)
    passages = len(result.items) or 1
    per_passage = (result.meta.calls + result.meta.cache_hits) / passages
    per_call = result.meta.seconds / result.meta.calls if result.meta.calls else None
    return {
        "calls_per_passage": round(per_passage, 1),
        "seconds_per_call": None if per_call is None else round(per_call, 2),
        "minutes_per_passage": None if per_call is None else round(per_passage * per_call / 60, 2),
    }


def row(path: Path) -> dict[str, Any]:
    cal = Calibration.load(path)
    report, test = cal.report, cal.report["test"]
    runs = Path(cal.data["runs"])
    return {
        "file": str(path),
        "methods": "+".join(cal.methods),
        "kind": cal.kind,
        "model": cal.model,
        "samples": cal.data["n"],  # the sample count a SelfCheck member read
        "fit_passages": cal.data["fit_passages"],
        "test_passages": cal.data["test_passages"],
        "test_sentences": test["units"],
        "test_inaccurate": test["hallucinated"],
        "raw_auc_roc": {m: round(v["auc_roc"], 1) for m, v in report["raw_scores_test"].items()},
        "auc_roc": round(test["auc_roc"], 1),
        "auc_pr": round(test["auc_pr"], 1),
        "brier": round(test["brier"], 3),
        "ece": round(test["ece"], 3),
        "threshold": None if report["threshold"] is None else round(report["threshold"], 3),
        "held_out_precision": test["threshold_precision"] and round(test["threshold_precision"], 3),
        "held_out_recall": test["threshold_recall"] and round(test["threshold_recall"], 3),
        "cost": {m: cost(runs, m) for m in cal.methods},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", type=Path, help="calibration JSON files")
    ap.add_argument("--out", type=Path, default=Path("docs/results/calibrated-risk.json"))
    args = ap.parse_args()
    rows = [row(p) for p in args.files]
    first = rows[0]
    print(
        f"WikiBio, fit on passages {first['fit_passages']}, held out {first['test_passages']}: "
        f"{first['test_sentences']} sentences ({first['test_inaccurate']} inaccurate); {first['model']}"
    )
    print("| fit | samples | raw AUC-ROC | AUC-ROC | AUC-PR | Brier | ECE | threshold (precision, recall held out) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        raw = ", ".join(f"{v}" for v in r["raw_auc_roc"].values())
        threshold = (
            "none on the fit split"
            if r["threshold"] is None
            else f"p >= {r['threshold']} ({r['held_out_precision']}, {r['held_out_recall']})"
        )
        print(
            f"| {r['methods']}, {r['kind']} | {r['samples']} | {raw} | {r['auc_roc']} | {r['auc_pr']} | "
            f"{r['brier']} | {r['ece']} | {threshold} |"
        )
    print("\n| method | calls per passage | run seconds per call sent | minutes per passage |")
    print("| --- | --- | --- | --- |")
    seen: dict[str, dict[str, Any]] = {}
    for r in rows:
        for method, c in r["cost"].items():
            if c["seconds_per_call"] is not None or method not in seen:
                seen[method] = c
    for method, c in seen.items():
        seconds, minutes = c["seconds_per_call"] or "-", c["minutes_per_passage"] or "-"
        print(f"| {method} | {c['calls_per_passage']} | {seconds} | {minutes} |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"rows": rows}, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
