"""detect_many's wall time against the critical-path bound, with a model that takes 200 ms a call.

SelfCheck-Prompt on the first 50 WikiBio passages, samples regenerated (N = 3), so each passage is
two stages in sequence (regenerate N passages | check every (sentence, sample)), each stage's calls
fanned out. With calls inside a stage fully parallel, a passage cannot finish in less than
2 x 200 ms, and ``concurrency`` passages run at once: the bound is 2 x 0.2 s x passages / concurrency.
No cache (every call sleeps); the gateway's per-model limit is raised so that ``concurrency`` is
what limits across passages. Within a passage, LangGraph runs a stage's fan-out on a thread pool
of ``max_concurrency`` workers (Python's default, min(32, CPUs + 4), when unset): each level is run
with the default and with ``max_concurrency=64``.

    .venv/bin/python benchmarks/detect_many.py [--passages 50] [--latency 0.2] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import halluscope
from halluscope.backends.gateway import Gateway
from halluscope.bench.provenance import envelope
from halluscope.bench.report import markdown_table, write_json
from halluscope.bench.wikibio import load_wikibio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: tests/ is not shipped
from tests.scripted import ScriptedChatModel  # noqa: E402

STAGES = 2  # regenerate, check
SAMPLES = 3


def sleepy(latency: float) -> ScriptedChatModel:
    def respond(prompt: str, params: dict[str, Any]) -> str:
        time.sleep(latency)
        if "Write an article" in prompt:
            return f"A regenerated passage. Sample {params.get('seed')}."
        return "Yes"

    return ScriptedChatModel(respond=respond, model_id="scripted:sleepy")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--passages", type=int, default=50)
    ap.add_argument("--latency", type=float, default=0.2, help="seconds per model call (default 0.2)")
    ap.add_argument("--concurrency", default="1,4,16", help="comma-separated levels (default 1,4,16)")
    ap.add_argument("--data", help="benchmark data directory (default: HALLUSCOPE_DATA)")
    ap.add_argument("--out", default="benchmarks/results")
    args = ap.parse_args()
    passages = load_wikibio(args.data)[: args.passages]
    items = [{"sentences": p.sentences, "text": p.text, "concept": p.concept} for p in passages]
    rows = []
    began = time.perf_counter()
    levels = [int(c) for c in args.concurrency.split(",")]
    for level, workers in [(level, workers) for workers in (None, 64) for level in levels]:
        gateway = Gateway(cache=None, concurrency=1000)
        det = halluscope.detector(
            "selfcheck-prompt", model=sleepy(args.latency), n=SAMPLES, gateway=gateway, max_concurrency=workers
        )
        start = time.perf_counter()
        results = det.detect_many(items, concurrency=level, progress=False)
        wall = time.perf_counter() - start
        bound = STAGES * args.latency * len(items) / level
        calls = sum(r.meta.calls for r in results)
        rows.append(
            {
                "concurrency": level,
                "stage_workers": workers or f"default ({min(32, (os.cpu_count() or 1) + 4)})",
                "passages": len(items),
                "calls": calls,
                "prompt_tokens": sum(r.meta.tokens.prompt for r in results),
                "failed": sum(not r.ok for r in results),
                "wall_s": round(wall, 2),
                "bound_s": round(bound, 2),
                "wall_over_bound": round(wall / bound, 2),
                "serial_calls_s": round(calls * args.latency, 1),
            }
        )
    print(
        f"detect_many, SelfCheck-Prompt (N = {SAMPLES}, regenerated), {len(items)} WikiBio passages, "
        f"{args.latency * 1000:.0f} ms a call ({platform.machine()}, Python {platform.python_version()})"
    )
    columns = [(k, k) for k in ("concurrency", "stage_workers", "calls", "failed", "wall_s", "bound_s")]
    columns += [(k, k) for k in ("wall_over_bound", "serial_calls_s")]
    print(markdown_table(rows, columns))
    path = Path(args.out) / "detect_many.json"
    stub = f"a scripted model that answers in {args.latency} s (tests/scripted.py)"
    calls = sum(r["calls"] for r in rows)
    tokens = sum(r["prompt_tokens"] for r in rows)  # the scripted model reports each message's words as its tokens
    made = envelope(
        models=[stub], items=len(items), item="passage", calls=calls, seconds=time.perf_counter() - began,
        prompt_tokens=tokens,
    )  # fmt: skip
    write_json(path, {**made, "latency_s": args.latency, "samples": SAMPLES, "rows": rows})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
