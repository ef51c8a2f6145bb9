"""Samples per second on a local model: n samples of one prompt decoded together against one at a time.

For each model and each n, the same TriviaQA questions are sampled n times at temperature 1 (the
semantic-entropy answer prompt, as semantic entropy samples them), with no cache: once as n separate
calls (each its own decode, the prompt's KV prefix reused from the call before) and once through the
gateway's batched path (the prompt evaluated once, one decode per token step carrying every sample).
Both in this run, on this machine, one after the other.

    .venv/bin/python benchmarks/local_batching.py --out out/local-batching
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from halluscope.backends.gateway import CallStats, Gateway  # noqa: E402
from halluscope.bench.papers.qa import load_qa  # noqa: E402
from halluscope.bench.provenance import envelope  # noqa: E402
from halluscope.bench.report import markdown_table, write_json  # noqa: E402

PROMPT = "semantic_entropy.answer"
PARAMS = {"temperature": 1.0, "max_tokens": 32, "seed": 0}


def one_way(gateway: Gateway, model: str, questions: list[str], n: int, together: bool) -> dict[str, Any]:
    """The questions' n samples each, together or as separate calls: samples, tokens and seconds."""
    stats = CallStats()
    began = time.perf_counter()
    for question in questions:
        variables = {"question": question}
        if together:
            gateway.sample(model, PROMPT, variables, n, stats=stats, **PARAMS)
        else:
            for i in range(n):
                gateway.call(model, PROMPT, variables, sample_index=i, stats=stats, **PARAMS)
    seconds = time.perf_counter() - began
    samples = n * len(questions)
    return {
        "samples": samples,
        "seconds": round(seconds, 2),
        "samples_per_s": round(samples / seconds, 3),
        "prompt_tokens": stats.prompt_tokens,
        "completion_tokens": stats.completion_tokens,
        "evaluated_tokens": stats.evaluated_tokens,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="local:qwen2.5-coder-0.5b,local:qwen2.5-coder-1.5b")
    ap.add_argument("--n", default="1,3,5,10", help="samples per prompt (default 1,3,5,10)")
    ap.add_argument("--questions", type=int, default=3, help="TriviaQA validation questions (default 3)")
    ap.add_argument("--out", default="benchmarks/results")
    args = ap.parse_args()
    began = time.perf_counter()
    questions = [q.question for q in load_qa("triviaqa", limit=args.questions)]
    gateway = Gateway(cache=None)
    models = args.models.split(",")
    rows, calls = [], 0
    for model in models:
        gateway.call(model, PROMPT, {"question": "Warm-up: what is 2 + 2?"}, max_tokens=4)  # weights loaded
        for n in [int(k) for k in args.n.split(",")]:
            alone = one_way(gateway, model, questions, n, together=False)
            together = one_way(gateway, model, questions, n, together=True)
            calls += alone["samples"] + together["samples"]
            rows.append(
                {
                    "model": model,
                    "n": n,
                    "one_at_a_time_samples_per_s": alone["samples_per_s"],
                    "together_samples_per_s": together["samples_per_s"],
                    "speedup": round(together["samples_per_s"] / alone["samples_per_s"], 2),
                    "one_at_a_time": alone,
                    "together": together,
                }
            )
            print(rows[-1], file=sys.stderr)
    shown = ["model", "n", "one_at_a_time_samples_per_s", "together_samples_per_s", "speedup"]
    print(f"local sampling, {len(questions)} TriviaQA questions, {os.cpu_count()} cores, {platform.machine()}")
    print(markdown_table(rows, [(k, k) for k in shown]))
    prompt_tokens = sum(r[way]["prompt_tokens"] for r in rows for way in ("one_at_a_time", "together"))
    made = envelope(
        models=models,
        items=len(questions),
        item="question",
        calls=calls,
        seconds=time.perf_counter() - began,
        prompt_tokens=prompt_tokens,
    )
    path = Path(args.out) / "local_batching.json"
    write_json(path, {**made, "prompt": PROMPT, "params": PARAMS, "rows": rows})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
