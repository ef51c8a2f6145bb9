"""The WikiBio protocol's metrics of a peer's recorded per-sentence scores (SelfCheckGPT's own Unigram and
NLI runs in docs/results/peers/), computed here with halluscope's protocol code and the dataset's labels,
and written into the peer's record beside its scores (``metrics``, ``metrics_by``).

    .venv/bin/python benchmarks/peer_metrics.py peers/selfcheckgpt-unigram peers/selfcheckgpt-nli --data ../shared/data

The peer's venv cannot import halluscope, so its run records scores only; the metrics are the same
function our bench applies to our scores (``bench.wikibio.protocol_metrics``), so the two sides compare
like for like.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from records import read, write  # noqa: E402 - beside this script

from halluscope.bench.provenance import provenance  # noqa: E402
from halluscope.bench.wikibio import load_wikibio, protocol_metrics  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("records", nargs="+", help="peer records under docs/results (peers/selfcheckgpt-unigram)")
    ap.add_argument("--data", help="the benchmark data directory (or HALLUSCOPE_DATA)")
    args = ap.parse_args()
    passages = {p.index: p for p in load_wikibio(args.data)}
    made = provenance()
    for name in args.records:
        record = read(name)
        for label, run in record["runs"].items():
            entries = run["per_passage"]
            chosen = [passages[e["passage"]] for e in entries]
            scores = [[math.inf if s is None else float(s) for s in e["selfcheckgpt"]] for e in entries]
            run["metrics"] = protocol_metrics(chosen, scores)
            run["metrics_by"] = {k: made[k] for k in ("command", "commit")}
            print(f"{name} / {label}: NonFact AUC-PR {run['metrics']['auc_pr_nonfact']:.2f}")
        write(name, record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
