"""A grounded probe's fit measured: `halluscope probe fit --kind grounded` on one dataset (WikiBio
passages 0-119 by default), alone on this machine, its forward passes, prompt tokens, time and peak
memory written as a record run beside the probe. Its held-out scores come from `bench mine` with
``--method probe --opt probe=OUT`` on a labelled file of other items (docs/results/checker.md says which).

    .venv/bin/python benchmarks/grounded_probe_fit.py --data wikibio --items 0-119 --out out/rec/gprobe-wb.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path

from tqdm import tqdm

from halluscope.backends.cache import open_cache
from halluscope.backends.gateway import Gateway
from halluscope.backends.stats import CallStats
from halluscope.bench.provenance import envelope
from halluscope.cli.flags import passage_range
from halluscope.prompts.registry import PromptRegistry
from halluscope.tune.probe_fit import ProbeFitSettings, fit, summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="wikibio", help="wikibio, rte or a labelled file with a context")
    ap.add_argument("--items", help="FIRST-LAST: the passages, pairs or rows to fit on")
    ap.add_argument("--model", default="local:qwen2.5-coder-0.5b", help="the model whose hidden states are read")
    ap.add_argument("--cache", help="the call cache (default: the user cache dir)")
    ap.add_argument("--data-dir", default=os.environ.get("HALLUSCOPE_DATA", "../shared/data"))
    ap.add_argument("--out", required=True, help="the probe's JSON; its record is OUT with .record.json")
    args = ap.parse_args()
    began = time.perf_counter()
    stats = CallStats()
    gateway = Gateway(cache=open_cache(args.cache), registry=PromptRegistry())
    probe, examples = fit(
        ProbeFitSettings(
            kind="grounded",
            data=args.data,
            model=args.model,
            items=passage_range(args.items, "--items") if args.items else None,
            data_dir=args.data_dir,
        ),
        gateway,
        stats=stats,
        progress=lambda it: tqdm(list(it), desc="grounded probe", file=sys.stderr),
    )
    probe.save(args.out)
    print(summary(probe))
    seconds = time.perf_counter() - began
    made = envelope(
        models=[args.model], items=len(examples), item="answer", calls=stats.calls, seconds=seconds,
        cache_hits=stats.cache_hits, prompt_tokens=stats.prompt_tokens,
    )  # fmt: skip
    fitted = {
        "data": probe.data,
        "layer": probe.layer,
        "prompt": probe.prompt,
        "base_rate": probe.base_rate,
        "validation": probe.validation,
        "forward_seconds": round(stats.model_seconds, 1),
        "peak_memory_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }
    record = Path(args.out).with_suffix(".record.json")
    record.write_text(json.dumps({**made, **fitted}, indent=2))
    print(f"wrote {args.out} and {record}")


if __name__ == "__main__":
    main()
