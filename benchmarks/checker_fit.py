"""A checker's fit measured: `halluscope checker fit` on one dataset (RTE's training pairs by default),
alone on this machine, its time, peak memory and losses written as a record run. Its held-out scores
come from the grounded bench with ``--model nli:OUT`` (docs/results/checker.md says which).

    .venv/bin/python benchmarks/checker_fit.py --data rte --out out/rec/checker-rte
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from halluscope.backends.embeddings import default_model_dir
from halluscope.bench.provenance import envelope
from halluscope.tune.calibrate import passage_range
from halluscope.tune.checker import FitSettings, fit_checker, training_pairs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="rte", help="rte, qnli, wikibio or a labelled file")
    ap.add_argument("--items", help="FIRST-LAST: the pairs, passages or rows (WikiBio's default 0-119)")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--data-dir", default=os.environ.get("HALLUSCOPE_DATA", "../shared/data"))
    ap.add_argument("--out", required=True, help="the checker's folder; its record is OUT.json")
    args = ap.parse_args()
    began = time.perf_counter()
    items = passage_range(args.items, "--items") if args.items else None
    pairs = training_pairs(args.data, items, args.data_dir)
    fitted = fit_checker(
        pairs,
        args.out,
        FitSettings(epochs=args.epochs),
        described={"data": args.data, "items": args.items},
        report=lambda line: print(line, file=sys.stderr),
    )
    base = "all-MiniLM-L6-v2" if fitted["base"] == str(default_model_dir()) else fitted["base"]
    made = envelope(
        models=[base], items=len(pairs), item="pair", calls=0, seconds=time.perf_counter() - began,
        cache_hits=0,
    )  # fmt: skip
    shown = {k: v for k, v in fitted.items() if k not in ("halluscope", "format", "base")}
    print(json.dumps(shown, indent=1))
    Path(f"{args.out}.json").write_text(json.dumps({**made, **shown}, indent=2))
    print(f"wrote {args.out}.json")


if __name__ == "__main__":
    main()
