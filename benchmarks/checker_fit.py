"""A checker's fit measured: `halluscope checker fit` on one dataset (RTE's training pairs by default),
or on a teacher's labels of unlabelled answers, alone on this machine, its time, peak memory, losses
and the teacher's calls written as a record run. Its held-out scores come from the grounded bench or
`bench mine` with ``--model nli:OUT`` (docs/results/checker.md says which).

    .venv/bin/python benchmarks/checker_fit.py --data rte --out out/rec/checker-rte
    .venv/bin/python benchmarks/checker_fit.py --data none --teacher local:qwen2.5-coder-1.5b \
        --unlabelled out/labelled/wikibio-0-119.jsonl --out out/rec/checker-taught
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from functools import partial
from pathlib import Path

from tqdm import tqdm

from halluscope.backends.cache import open_cache
from halluscope.backends.embeddings import default_model_dir
from halluscope.backends.gateway import Gateway
from halluscope.backends.stats import CallStats
from halluscope.bench.provenance import envelope
from halluscope.cli.checker import data_parts
from halluscope.cli.flags import passage_range
from halluscope.prompts.registry import PromptRegistry
from halluscope.tune.checker import FitSettings, fit_checker, taught_pairs, training_pairs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--data",
        default="rte",
        help="as checker fit's: mnli, fever, anli, factcg, wice, rte, qnli, wikibio or a labelled file, each with "
        "its own FIRST-LAST and max=N (mnli:max=8000), comma-separated; or none",
    )
    ap.add_argument(
        "--items", help="FIRST-LAST: the pairs, passages or rows, in each of several --data (WikiBio's default 0-119)"
    )
    ap.add_argument("--teacher", help="a judge whose p(support) labels --unlabelled's sentences")
    ap.add_argument("--unlabelled", help="answers with their documents, no labels (JSON Lines)")
    ap.add_argument("--cache", help="the teacher's call cache (default: the user cache dir)")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--max-length", type=int, default=512)
    ap.add_argument("--dev", type=float, default=0.05, help="the share of contexts held out to choose the epoch on")
    ap.add_argument("--no-length-groups", action="store_true", help="batches in plain shuffled order")
    ap.add_argument("--data-dir", default=os.environ.get("HALLUSCOPE_DATA", "../shared/data"))
    ap.add_argument("--out", required=True, help="the checker's folder; its record is OUT.json")
    args = ap.parse_args()
    began = time.perf_counter()
    items = passage_range(args.items, "--items") if args.items else None
    pairs = training_pairs(data_parts(args.data, items), data_dir=args.data_dir) if args.data != "none" else []
    described = {"data": args.data, "items": args.items}
    stats = CallStats()
    if args.teacher:
        gateway = Gateway(cache=open_cache(args.cache), registry=PromptRegistry())
        bar = partial(tqdm, desc="teacher", unit=" answer", file=sys.stderr)
        taught = taught_pairs(args.unlabelled, args.teacher, gateway, bar, stats)
        pairs += taught
        described |= {"teacher": args.teacher, "unlabelled": Path(args.unlabelled).name, "taught": len(taught)}
    fitted = fit_checker(
        pairs,
        args.out,
        FitSettings(
            epochs=args.epochs,
            batch_size=args.batch_size,
            max_length=args.max_length,
            dev=args.dev,
            group_by_length=not args.no_length_groups,
        ),
        described=described,
        report=lambda line: print(line, file=sys.stderr),
    )
    base = "all-MiniLM-L6-v2" if fitted["base"] == str(default_model_dir()) else fitted["base"]
    made = envelope(
        models=[base, *([args.teacher] if args.teacher else [])], items=len(pairs), item="pair",
        calls=stats.calls, seconds=time.perf_counter() - began, cache_hits=stats.cache_hits,
        prompt_tokens=stats.prompt_tokens,
    )  # fmt: skip
    shown = {k: v for k, v in fitted.items() if k not in ("halluscope", "format", "base")}
    print(json.dumps(shown, indent=1))
    Path(f"{args.out}.json").write_text(json.dumps({**made, **shown}, indent=2))
    print(f"wrote {args.out}.json")


if __name__ == "__main__":
    main()
