"""A checker fit's batches grouped by length against plain shuffled batches: the same pairs, settings and
code, one epoch each, one after the other in this run, timed and with the tokens a batch pads to.

    .venv/bin/python benchmarks/checker_batching.py --data mnli:max=160,anli:max=160,factcg:max=160 \
        --out out/checker-batching

Padding is what a batch of pairs costs beyond their own tokens (every pair padded to the batch's
longest); the fit's wall time is the measurement, the padded tokens say why it moves.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from halluscope.backends.embeddings import default_model_dir  # noqa: E402
from halluscope.bench.provenance import envelope  # noqa: E402
from halluscope.bench.report import markdown_table, write_json  # noqa: E402
from halluscope.cli.checker import data_parts  # noqa: E402
from halluscope.tune.checker import Fit, FitSettings, fit_checker, training_pairs  # noqa: E402


def one_way(pairs: list[Any], settings: FitSettings, threads: int) -> dict[str, Any]:
    """One epoch of a fit with these settings: its seconds, and the tokens its batches hold and pad to."""
    counted = Fit(pairs, default_model_dir(), settings, Path("unused"))
    batches = counted.batches(0)
    padded = sum(len(b) * max(counted.lengths[i] for i in b) for b in batches)
    began = time.perf_counter()
    with tempfile.TemporaryDirectory() as out:
        fitted = fit_checker(pairs, out, settings, threads=threads, force=True)
    return {
        "group_by_length": settings.group_by_length,
        "batches": len(batches),
        "tokens": sum(counted.lengths),
        "padded_tokens": padded,
        "seconds": round(time.perf_counter() - began, 1),
        "fit_seconds": fitted["fit_seconds"],
        "loss": round(fitted["losses"][-1], 4),
        "peak_memory_mib": fitted["peak_memory_mib"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="mnli:max=160,anli:max=160,factcg:max=160", help="as checker fit's --data")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--max-length", type=int, default=512)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--data-dir", default=os.environ.get("HALLUSCOPE_DATA", "../shared/data"))
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    began = time.perf_counter()
    pairs = training_pairs(data_parts(args.data, None), data_dir=args.data_dir)
    rows = []
    for grouped in (False, True):
        settings = FitSettings(
            epochs=1, batch_size=args.batch_size, max_length=args.max_length, dev=0, group_by_length=grouped
        )
        rows.append(one_way(pairs, settings, args.threads))
        print(json.dumps(rows[-1]), file=sys.stderr)
    plain, grouped_row = rows
    columns = [(k, k) for k in ("group_by_length", "batches", "tokens", "padded_tokens", "fit_seconds", "loss")]
    print(markdown_table(rows, columns))
    print(f"plain / grouped fit seconds: {plain['fit_seconds'] / grouped_row['fit_seconds']:.2f}")
    made = envelope(
        models=["all-MiniLM-L6-v2"], items=len(pairs), item="pair", calls=0, seconds=time.perf_counter() - began,
        prompt_tokens=0,
    )  # fmt: skip
    out = Path(args.out)
    write_json(out / "checker-batching.json", {**made, "data": args.data, "threads": args.threads, "rows": rows})
    print(f"wrote {out / 'checker-batching.json'}")


if __name__ == "__main__":
    main()
