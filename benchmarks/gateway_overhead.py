"""What the gateway itself costs per call: render + key + cache miss/write, cache hit, no cache.

Runs on a scripted model that answers instantly, so the numbers are the gateway's own overhead
(prompt rendering, hashing, diskcache I/O, tenacity, limiter), not a provider's latency.

    .venv/bin/python benchmarks/gateway_overhead.py [--calls 500] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

from halluscope.backends.cache import CallCache
from halluscope.backends.gateway import Gateway

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: tests/ is not shipped
from tests.scripted import ScriptedChatModel  # noqa: E402

PROMPT = "semantic_entropy.answer"


def timed(gateway: Gateway, model: ScriptedChatModel, calls: int, concurrent: bool) -> list[float]:
    """Per-call microseconds; concurrent runs one sample() of `calls` answers and averages."""
    if concurrent:
        start = time.perf_counter()
        gateway.sample(model, PROMPT, {"question": "q-batch"}, calls)
        return [(time.perf_counter() - start) / calls * 1e6]
    out = []
    for i in range(calls):
        start = time.perf_counter()
        gateway.call(model, PROMPT, {"question": "q"}, sample_index=i)
        out.append((time.perf_counter() - start) * 1e6)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=500)
    ap.add_argument("--out", default="benchmarks/results")
    args = ap.parse_args()
    model = ScriptedChatModel(
        respond=lambda prompt, params: "Paris is the capital of France.", model_id="scripted:bench"
    )
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        cached = Gateway(cache=CallCache(tmp), concurrency=4)
        uncached = Gateway(cache=None, concurrency=4)
        cases = [
            ("no cache, sequential", uncached, False),
            ("cache miss + write, sequential", cached, False),
            ("cache hit, sequential", cached, False),
            ("cache miss + write, sample() x4 threads", cached, True),
        ]
        for name, gateway, concurrent in cases:
            us = timed(gateway, model, args.calls, concurrent)
            rows.append(
                {
                    "case": name,
                    "calls": args.calls,
                    "median_us": round(statistics.median(us), 1),
                    "p95_us": round(sorted(us)[int(0.95 * (len(us) - 1))], 1),
                }
            )
        entries = len(cached.cache) if cached.cache else 0
    print(
        f"gateway overhead per call ({args.calls} calls, scripted model, {platform.processor() or platform.machine()})"
    )
    print(f"{'case':<42} {'median us':>10} {'p95 us':>10}")
    for r in rows:
        print(f"{r['case']:<42} {r['median_us']:>10.1f} {r['p95_us']:>10.1f}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "gateway_overhead.json"
    path.write_text(json.dumps({"rows": rows, "cache_entries": entries, "python": platform.python_version()}, indent=2))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
