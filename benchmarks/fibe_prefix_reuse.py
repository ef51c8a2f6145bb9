"""FIBE's N exam answers on a local model: back to back (the graph's order, so llama.cpp reuses the
shared exam prompt in its KV cache) against interleaved with another prompt (a Direct Question),
which evicts that prefix, as a graph running its stages in parallel would. No cache: every call is
real; the same sample indexes (seeds) in both orders. The answers' lengths are kept beside their
seconds: llama.cpp does not give the same tokens in both orders, so compare seconds per generated token
as well as per answer. Measure it on a quiet machine: its figures are wall-clock seconds.

    .venv/bin/python benchmarks/fibe_prefix_reuse.py [--model local:qwen2.5-coder-1.5b] [--passages 2] [--n 3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path
from typing import Any

from halluscope.backends.gateway import CallStats, Gateway
from halluscope.bench.provenance import envelope
from halluscope.bench.wikibio import load_wikibio
from halluscope.methods import fibe
from halluscope.scoring.fibe import build_exam


def answer_once(
    gw: Gateway, model: str, prompt: str, exam: list[str], j: int, total: CallStats
) -> tuple[float, int, int]:
    stats = total.part()  # this answer's counts, counted in the run's too
    start = time.perf_counter()
    gw.call(
        model,
        fibe.ANSWER,
        fibe.answer_variables(prompt, exam),
        sample_index=j,
        stats=stats,
        max_tokens=fibe.answer_max_tokens(len(exam)),
    )
    return time.perf_counter() - start, stats.prompt_tokens, stats.completion_tokens


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="local:qwen2.5-coder-1.5b")
    ap.add_argument("--passages", type=int, default=2)
    ap.add_argument("--n", type=int, default=3)
    ap.add_argument("--data", default=os.environ.get("HALLUSCOPE_DATA"))
    ap.add_argument("--out", default="benchmarks/results")
    args = ap.parse_args()

    gw = Gateway(cache=None)
    total = CallStats()
    began = time.perf_counter()
    rows: list[dict[str, Any]] = []
    for passage in load_wikibio(args.data)[: args.passages]:
        created = gw.call(
            args.model,
            fibe.CREATE,
            fibe.create_variables(passage.prompt, passage.sentences),
            max_tokens=fibe.create_max_tokens(len(passage.sentences)),
            stats=total,
        )
        exam = build_exam(passage.sentences, created.parsed if created.ok else []).sentences
        for order in ("back to back", "interleaved"):
            seconds, prompt_tokens, completion_tokens = [], 0, 0
            for j in range(args.n):
                if order == "interleaved":  # another prompt between answers evicts the exam prefix
                    gw.call(
                        args.model,
                        fibe.DIRECT_QUESTION,
                        {"context": fibe.quoted(passage.prompt), "claim": passage.sentences[j % len(exam)]},
                        max_tokens=8,
                        stats=total,
                    )
                s, p, c = answer_once(gw, args.model, passage.prompt, exam, j, total)
                seconds.append(s)
                prompt_tokens += p
                completion_tokens += c
            rows.append(
                {
                    "passage": passage.index,
                    "order": order,
                    "answers": args.n,
                    "prompt_tokens_per_answer": prompt_tokens // args.n,
                    "completion_tokens": completion_tokens,
                    "seconds": [round(x, 2) for x in seconds],
                    "seconds_total": round(sum(seconds), 2),
                }
            )
            print(f"passage {passage.index} {order}: {rows[-1]['seconds']} s", flush=True)

    print(f"\nFIBE exam answers on {args.model}, N={args.n} ({platform.machine()}, {os.cpu_count()} cores)")
    print(f"{'passage':>7}  {'order':<13} {'prompt tok':>10} {'gen tok':>8} {'s total':>8}  per answer (s)")
    for r in rows:
        print(
            f"{r['passage']:>7}  {r['order']:<13} {r['prompt_tokens_per_answer']:>10} {r['completion_tokens']:>8} "
            f"{r['seconds_total']:>8.1f}  {r['seconds']}"
        )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    made = envelope(
        models=[args.model], items=sum(r["answers"] for r in rows), item="exam answer", calls=total.calls,
        seconds=time.perf_counter() - began, prompt_tokens=total.prompt_tokens, cache_hits=0,
    )  # fmt: skip
    (out / "fibe_prefix_reuse.json").write_text(json.dumps({**made, "model": args.model, "rows": rows}, indent=2))
    print(f"wrote {out / 'fibe_prefix_reuse.json'}")


if __name__ == "__main__":
    main()
