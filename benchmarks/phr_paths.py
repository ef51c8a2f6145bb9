"""Time per PHR query with and without the single-token path and prefix (KV cache) reuse.

Four ways to the same estimate on one SST-2 context: the whole next-token distribution (exact
quantile; one forward pass per prompt) or K sampled one-token responses scored by teacher forcing,
each with llama.cpp's KV cache reused across prompts sharing a prefix or every prompt evaluated from
its first token. Every case starts from an empty call cache, so the imagined completions are paid
for in each; the first query of a context pays for its M completions, the later ones reuse them.

    .venv/bin/python benchmarks/phr_paths.py [--model local:qwen2.5-coder-0.5b] [--n 4] [--queries 2]
        [--M 3] [--K 50] [--imagined 5] [--data ../shared/data] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

import halluscope
from halluscope.backends.cache import CallCache
from halluscope.backends.chat import load_logprob_model
from halluscope.backends.gateway import CallStats, Gateway
from halluscope.backends.providers.llama_cpp import LlamaCppLogProbModel
from halluscope.bench.papers.icl import balanced_context, load_icl_task
from halluscope.bench.provenance import envelope

CASES = (
    ("distribution, exact; prefix reuse", "distribution", True, True),
    ("distribution, exact; no prefix reuse", "distribution", True, False),
    ("K sampled tokens; prefix reuse", "sampled", False, True),
    ("K sampled tokens; no prefix reuse", "sampled", False, False),
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="local:qwen2.5-coder-0.5b")
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--queries", type=int, default=2)
    ap.add_argument("--M", type=int, default=3)
    ap.add_argument("--K", type=int, default=50)
    ap.add_argument("--imagined", type=int, default=5)
    ap.add_argument("--data", default="../shared/data")
    ap.add_argument("--out", default="benchmarks/results")
    args = ap.parse_args()

    model = load_logprob_model(args.model)
    assert isinstance(model, LlamaCppLogProbModel), "prefix reuse is a llama.cpp switch: use a local: model"
    task = load_icl_task("sst2", args.data).filtered(model.count_tokens)
    rng = np.random.default_rng(0)
    context = balanced_context(task.pool, task.labels, args.n, rng)
    queries = [task.queries[int(i)] for i in rng.choice(len(task.queries), size=args.queries, replace=False)]
    rows: list[dict[str, Any]] = []
    began = time.perf_counter()
    for label, responses, exact, reuse in CASES:
        model.reuse_prefix = reuse
        with tempfile.TemporaryDirectory() as tmp:
            gw = Gateway(cache=CallCache(tmp))
            stats = CallStats()
            options = {"n": args.M, "k": args.K, "n_imagined": args.imagined, "exact": exact, "responses": responses}
            detector = halluscope.detector("phr", model, gateway=gw, epsilon=0.05, **options)
            seconds, rates = [], []
            for x, truth in queries:  # one detector: the context's imagined completions are reused from the cache
                started = time.perf_counter()
                result = detector.detect(context=context, query=x, truth=truth, stats=stats)
                seconds.append(time.perf_counter() - started)
                rates.append(result.units[0].score)
            gw.cache.close()  # type: ignore[union-attr]
        rows.append(
            {
                "case": label,
                "seconds_first_query": round(seconds[0], 2),
                "seconds_later_queries": round(float(np.mean(seconds[1:])), 2) if len(seconds) > 1 else None,
                "seconds_per_query": round(float(np.mean(seconds)), 2),
                "calls": stats.calls,
                "forward_passes": stats.forward_passes,
                "prompt_tokens": stats.prompt_tokens,
                "phr": [round(r, 4) for r in rates],
            }
        )
        print(rows[-1], flush=True)
    model.reuse_prefix = True
    base = rows[0]["seconds_per_query"]
    for r in rows:
        r["ratio_to_fastest"] = round(r["seconds_per_query"] / base, 1)
    print(
        f"\nPHR per query on SST-2 (n = {args.n}, M = {args.M}, K = {args.K}, N - n = {args.imagined}, "
        f"{args.queries} queries sharing one context; {model.name}; {platform.machine()})"
    )
    print(f"{'case':<40} {'first s':>8} {'later s':>8} {'mean s':>8} {'ratio':>6} {'calls':>6}")
    for r in rows:
        later = "" if r["seconds_later_queries"] is None else f"{r['seconds_later_queries']:.2f}"
        print(
            f"{r['case']:<40} {r['seconds_first_query']:>8.2f} {later:>8} {r['seconds_per_query']:>8.2f} "
            f"{r['ratio_to_fastest']:>6} {r['calls']:>6}"
        )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    passes = sum(r["forward_passes"] for r in rows)
    made = envelope(models=[args.model], items=args.queries, item="query", calls=sum(r["calls"] for r in rows),
                    seconds=time.perf_counter() - began, forward_passes=passes,
                    prompt_tokens=sum(r["prompt_tokens"] for r in rows))  # fmt: skip
    (out / "phr_paths.json").write_text(json.dumps({**made, "args": vars(args), "rows": rows}, indent=2) + "\n")
    print(f"wrote {out / 'phr_paths.json'}")


if __name__ == "__main__":
    main()
