"""From choice to guard, measured: `choose` on WikiBio passages as a team's labelled file, then its pick
deployed as a guard deploys it (``halluscope.from_calibration``) on the same rows.

The rows are WikiBio passages FIRST-LAST as `bench mine` reads a user's file: each passage's text, its
annotated sentences, its 20 GPT-3 samples and its labels (1 = minor or major inaccurate). The candidate
is SelfCheck-Unigram, which reads the samples and calls no model, so the run fits one sitting. What it
checks:

- the deployed detector's probabilities on the same rows (the same samples given) equal choose's fitted
  calibration applied to choose's own raw scores: the pick runs as it was chosen;
- the plain figure (the candidate's cross-validated AUC-ROC, the selection made on the same scores)
  beside the nested one (the whole selection held out in each outer fold), and their difference.

    .venv/bin/python benchmarks/choose_deploy.py [--passages 0-119] [--folds 5] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

import halluscope
from halluscope.bench.provenance import envelope
from halluscope.bench.report import write_json
from halluscope.bench.runner import BenchResult
from halluscope.bench.wikibio import load_wikibio, score_list
from halluscope.calibration import Calibration
from halluscope.checks import numbers
from halluscope.tune.choose import ChooseSettings, choose

METHOD = "selfcheck-unigram"


def rows(data: str, first: int, last: int) -> list[dict[str, Any]]:
    """WikiBio passages first..last as a user's labelled rows."""
    return [
        {
            "id": f"passage {p.index}",
            "text": p.text,
            "sentences": p.sentences,
            "samples": p.samples,
            "labels": [int(label != "accurate") for label in p.labels],
        }
        for p in load_wikibio(data)[first : last + 1]
    ]


def deployed_difference(labelled: list[dict[str, Any]], out: Path) -> dict[str, Any]:
    """The deployed detector on every row against the fitted calibration on choose's own raw scores."""
    fitted = Calibration.load(out / "calibration.json")
    run = BenchResult.read(out / "runs" / METHOD)
    raw = {item.id: score_list(item.scores) for item in run.items}
    deployed = halluscope.from_calibration(out / "calibration.json")
    differences, units = [], 0
    for row in labelled:
        result = deployed.detect(text=row["text"], sentences=row["sentences"], samples=row["samples"])
        expected = fitted.probabilities({METHOD: raw[f"answer {row['id']}"]})
        got = np.array([u.probability for u in result.units], dtype=np.float64)
        differences.append(float(np.max(np.abs(got - expected))))
        units += len(result.units)
    return {"rows": len(labelled), "units": units, "max_abs_difference": max(differences)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--passages", default="0-119", metavar="FIRST-LAST")
    p.add_argument("--folds", type=int, default=5)
    p.add_argument("--data", default=None, help="the benchmark data directory (default: HALLUSCOPE_DATA)")
    p.add_argument("--out", default="benchmarks/results")
    args = p.parse_args()
    first, last = numbers(args.passages.replace("-", ","), "--passages", int)
    began = time.perf_counter()
    labelled = rows(args.data, first, last)
    out = Path(args.out) / "choose-deploy"
    choice = choose(labelled, ChooseSettings(methods=[METHOD], folds=args.folds), out, progress=False)
    [candidate] = choice.candidates
    found = {
        "passages": f"{first}-{last}",
        "candidate": METHOD,
        "plain": {"auc_roc": candidate.auc_roc, "interval": candidate.auc_roc_interval, "raw": candidate.raw_auc_roc},
        "nested": choice.nested,
        "operating_point": choice.operating_point,
        "deployed": deployed_difference(labelled, out),
        "use": choice.use,
    }
    made = envelope(models=[], items=len(labelled), item="passage", calls=0, seconds=time.perf_counter() - began,
                    prompt_tokens=0)  # fmt: skip
    path = Path(args.out) / "choose_deploy.json"
    write_json(path, {**made, **found})
    print(f"plain AUC-ROC {candidate.auc_roc:.1f}, nested {choice.nested['auc_roc']:.1f}" if choice.nested else "")
    print(f"deployed against fitted: largest difference {found['deployed']['max_abs_difference']:.2e}")
    print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
