"""detect_many on Ray against the thread executor, with a model that takes 200 ms a call.

400 items of SelfCheck-Prompt on given samples (2 sentences x 2 samples: 4 calls of one stage, fanned
out) against the project's OpenAI-compatible stub server on 127.0.0.1. Each worker scores one item at
a time (``concurrency=1``), so an item takes one call's latency and W workers finish W items per
latency: the critical-path bound is items x latency / W. The model's cluster-wide limit (64) never
binds. A cold run starts its worker actors inside the timed run (each imports halluscope, spaCy and the
OpenAI client: about 4 s of CPU a worker); a warm run is the next map, on the workers the cold one left
up. Ray's per-item overhead is (wall - bound) x W / items, and cpu_busy the share of the machine's CPU
time that was busy (every process: the workers, Ray's own, the stub). Then the same 400 items again,
every call from the cache: the local disk cache against a real redis-server on 127.0.0.1.

    .venv/bin/python benchmarks/ray_scale.py [--items 400] [--latency 0.2] [--workers 1,2,4] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import halluscope
from halluscope.backends.cache import open_cache
from halluscope.backends.gateway import Gateway
from halluscope.bench.provenance import envelope
from halluscope.bench.report import markdown_table, write_json
from halluscope.scale import release_workers

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: tests/ is not shipped
from tests.stub_servers import StubAPI, redis_server  # noqa: E402

LIMIT = 64  # the model's concurrency limit: high enough never to bind here


def items(n: int) -> list[dict[str, Any]]:
    return [
        {"text": f"Person {i} was born in Ulm. Person {i} played the violin.", "samples": ["Born in Ulm.", "A violin."]}
        for i in range(n)
    ]


def cpu_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine, from /proc/stat (every process: workers, Ray, the stub)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


def timed(det: Any, batch: list[dict[str, Any]], **how: Any) -> tuple[float, list[Any], float]:
    """Wall seconds, the results, and the share of the machine's CPU time that was busy meanwhile."""
    busy0, total0 = cpu_ticks()
    start = time.perf_counter()
    results = det.detect_many(batch, concurrency=1, progress=False, **how)
    wall = time.perf_counter() - start
    busy1, total1 = cpu_ticks()
    return wall, results, (busy1 - busy0) / max(1, total1 - total0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, default=400)
    ap.add_argument("--latency", type=float, default=0.2, help="seconds per model call (default 0.2)")
    ap.add_argument("--workers", default="1,2,4", help="Ray worker counts (default 1,2,4)")
    ap.add_argument("--out", default="benchmarks/results")
    args = ap.parse_args()
    import ray

    ray.init(include_dashboard=False, log_to_driver=False, namespace="halluscope")
    batch = items(args.items)
    rows: list[dict[str, Any]] = []
    began = time.perf_counter()
    with StubAPI(latency=args.latency) as stub, tempfile.TemporaryDirectory() as tmp:
        spec = f"openai-compatible:{stub.base_url}/v1#stub"

        def detector(cache: Any) -> Any:
            return halluscope.detector("selfcheck-prompt", model=spec, gateway=Gateway(cache=cache, concurrency=LIMIT))

        def row(executor: str, workers: int, timing: tuple[float, list[Any], float], cache: str) -> None:
            wall, results, busy = timing
            calls = sum(r.meta.calls for r in results)
            bound = args.items * args.latency / workers if calls else 0.0  # a cached rerun waits on no model
            rows.append(
                {
                    "executor": executor,
                    "workers": workers,
                    "cache": cache,
                    "items": len(results),
                    "failed": sum(not r.ok for r in results),
                    "calls": calls,
                    "prompt_tokens": sum(r.meta.tokens.prompt for r in results),
                    "wall_s": round(wall, 2),
                    "bound_s": round(bound, 2),
                    "wall_over_bound": round(wall / bound, 2) if bound else None,
                    "overhead_ms_per_item": round(1000 * (wall - bound) * workers / args.items, 1),
                    "cpu_busy": round(busy, 2),
                }
            )
            print(rows[-1], flush=True)

        row("thread", 1, timed(detector(None), batch), "none")
        for workers in [int(w) for w in args.workers.split(",")]:
            release_workers()  # cold: every worker starts inside the timed run
            row("ray, cold", workers, timed(detector(None), batch, executor="ray", workers=workers), "none")
            row("ray, warm", workers, timed(detector(None), batch, executor="ray", workers=workers), "none")
        server, url = redis_server(Path(tmp))
        try:
            for name, location in (("disk", f"{tmp}/calls"), ("redis", url)):
                timed(detector(open_cache(location)), batch, executor="ray", workers=4)  # fill the cache
                row("thread rerun", 1, timed(detector(open_cache(location)), batch), name)  # another client
                row("ray rerun, warm", 4, timed(detector(open_cache(location)), batch, executor="ray", workers=4), name)
        finally:
            server.kill()
    ray.shutdown()
    print(
        f"\ndetect_many, SelfCheck-Prompt on given samples (4 calls an item), {args.items} items, "
        f"{args.latency * 1000:.0f} ms a call, one item at a time per worker "
        f"({platform.machine()}, {platform.python_version()}, Ray {ray.__version__})"
    )
    columns = [(k, k) for k in ("executor", "workers", "cache", "calls", "failed", "wall_s", "bound_s")]
    columns += [(k, k) for k in ("wall_over_bound", "overhead_ms_per_item", "cpu_busy")]
    print(markdown_table(rows, columns))
    path = Path(args.out) / "ray_scale.json"
    stub = f"the stub OpenAI-compatible server at {args.latency} s a call (tests/stub_servers.py)"
    calls = sum(r["calls"] for r in rows)
    tokens = sum(r["prompt_tokens"] for r in rows)  # as the stub server reports them in each reply's usage
    made = envelope(
        models=[stub], items=args.items, item="item", calls=calls, seconds=time.perf_counter() - began,
        prompt_tokens=tokens,
    )  # fmt: skip
    write_json(path, {**made, "ray": ray.__version__, "latency_s": args.latency, "limit": LIMIT, "rows": rows})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
