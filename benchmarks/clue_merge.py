"""CLUE's concept merge, exact (the paper: every pair asked) against the embedding pre-filter.

Reads the concepts that a `halluscope bench clue` run extracted (its results.json), pools them per
question as the graph does, and merges them in both modes with the same zero-shot scorer: pairs asked,
scorer calls, seconds, merges and whether the kept concepts differ. The scorer's gateway has no disk
cache here, so both modes are timed from cold.

    .venv/bin/python benchmarks/clue_merge.py --results out/clue/results.json [--questions 0,3]
        [--prefilter 0.5] [--judge local:qwen2.5-coder-1.5b] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path
from typing import Any

from halluscope.backends.embeddings import Embedder
from halluscope.backends.entailment import LLMZeroShot
from halluscope.backends.gateway import CallStats, Gateway
from halluscope.bench.provenance import envelope
from halluscope.bench.runner import BenchResult
from halluscope.methods.clue import merge_concepts, pooled_concepts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", required=True, help="results.json of a bench clue run")
    ap.add_argument("--questions", default="0", help="indexes of the questions, comma-separated (default 0)")
    ap.add_argument("--prefilter", type=float, default=0.5, help="embedding cosine of the pre-filter (default 0.5)")
    ap.add_argument("--judge", default="local:qwen2.5-coder-1.5b", help="zero-shot scorer spec")
    ap.add_argument("--out", default="benchmarks/results", help="where clue_merge.json goes")
    args = ap.parse_args()

    every = BenchResult.read(Path(args.results).parent).records
    questions = [every[int(i)] for i in args.questions.split(",")]
    scorer = LLMZeroShot(args.judge, gateway=Gateway(cache=None), prompt="clue.zero_shot")
    embedder = Embedder()
    rows: list[dict[str, Any]] = []
    began = time.perf_counter()
    for q in questions:
        pool = pooled_concepts(q["extracted"])
        kept_by_mode = {}
        for mode, prefilter in (("exact", None), (f"prefilter {args.prefilter}", args.prefilter)):
            stats = CallStats()
            started = time.perf_counter()
            kept, merged, asked = merge_concepts(pool, scorer, prefilter=prefilter, embedder=embedder, stats=stats)
            kept_by_mode[mode] = kept
            rows.append(
                {
                    "question": q["index"],
                    "mode": mode,
                    "concepts": len(pool),
                    "pairs_asked": asked,
                    "scorer_calls": stats.calls,
                    "prompt_tokens": stats.prompt_tokens,
                    "seconds": round(time.perf_counter() - started, 1),
                    "kept": len(kept),
                    "merged": merged,
                }
            )
        exact, filtered = kept_by_mode.values()
        rows[-1]["same_pool_as_exact"] = rows[-2]["same_pool_as_exact"] = exact == filtered

    print(f"{'question':>8} {'mode':<16} {'concepts':>8} {'pairs':>6} {'calls':>6} {'s':>7} {'kept':>5} same")
    for r in rows:
        print(
            f"{r['question']:>8} {r['mode']:<16} {r['concepts']:>8} {r['pairs_asked']:>6} {r['scorer_calls']:>6} "
            f"{r['seconds']:>7} {r['kept']:>5} {r['same_pool_as_exact']}"
        )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    calls = sum(r["scorer_calls"] for r in rows)
    made = envelope(models=[args.judge], items=len(questions), item="question", calls=calls,
                    seconds=time.perf_counter() - began,
                    prompt_tokens=sum(r["prompt_tokens"] for r in rows))  # fmt: skip
    report = {**made, "judge": args.judge, "platform": platform.platform(), "rows": rows}
    (out / "clue_merge.json").write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {out / 'clue_merge.json'}")


if __name__ == "__main__":
    main()
