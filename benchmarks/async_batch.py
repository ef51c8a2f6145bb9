"""abatch on the event loop against detect_many on threads: wall time and the threads it holds.

Each method on the first WikiBio passages with a model that takes ``--latency`` a call, answering on
its async path with ``asyncio.sleep`` (what a provider's async client does while it waits) and on its
sync path with ``time.sleep``. ``detect_many`` runs ``concurrency`` items on threads, each graph's
fan-out on LangGraph's thread pool; ``abatch`` runs them as tasks of one event loop, every model call
awaited through the gateway's ``acall_all``. No cache (every call waits); the gateway's per-model
limit is raised and each run's fan-out is bounded at 64 (``max_concurrency``) so that
``concurrency`` (items at once) is what limits. ``peak_threads`` is the most live threads
sampled every 5 ms during the run (the process starts with a few of its own).

    .venv/bin/python benchmarks/async_batch.py [--passages 20] [--latency 0.2] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import sys
import threading
import time
from pathlib import Path
from typing import Any

from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatResult

import halluscope
from halluscope.backends.gateway import Gateway
from halluscope.bench.provenance import envelope
from halluscope.bench.report import markdown_table, write_json
from halluscope.bench.wikibio import load_wikibio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: tests/ is not shipped
from tests.scripted import ScriptedChatModel  # noqa: E402
from tests.test_fibe import generic_model  # noqa: E402

SAMPLES = 3
FAN_OUT = 64  # each run's own bound on its fan-out (LangGraph's thread pool would otherwise hold it to CPUs + 4)
THREADS, ASYNC = "detect_many (threads)", "abatch (event loop)"


class Waiting(ScriptedChatModel):
    """Sleeps ``latency`` a call: the thread on the sync path, only the task on the async path."""

    latency: float = 0.2

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        time.sleep(self.latency)
        return super()._generate(messages, *args, **kwargs)

    async def _agenerate(
        self, messages: list[BaseMessage], stop: list[str] | None = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        await asyncio.sleep(self.latency)
        return ScriptedChatModel._generate(self, messages, stop, None, **kwargs)


class PeakThreads:
    """The most live threads seen while the block runs."""

    def __enter__(self) -> PeakThreads:
        self.peak, self._done = threading.active_count(), threading.Event()
        self._watch = threading.Thread(target=self._poll, daemon=True)
        self._watch.start()
        return self

    def _poll(self) -> None:
        while not self._done.wait(0.005):
            self.peak = max(self.peak, threading.active_count() - 1)  # not this watcher

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._watch.join()


def measure(method: str, way: str, level: int, items: list[dict[str, Any]], latency: float) -> dict[str, Any]:
    """One method, one way, one concurrency level: a row of the table."""
    model = Waiting(respond=generic_model([]), model_id="scripted:waiting", latency=latency)
    gateway = Gateway(cache=None, concurrency=1000)
    det = halluscope.detector(method, model=model, n=SAMPLES, gateway=gateway, max_concurrency=FAN_OUT)
    mine = [{k: v for k, v in item.items() if k in det.spec.input_names} for item in items]
    with PeakThreads() as threads:
        start = time.perf_counter()
        if way == ASYNC:
            results = asyncio.run(det.abatch(mine, config={"max_concurrency": level}))
        else:
            results = det.detect_many(mine, concurrency=level, progress=False)
        wall = time.perf_counter() - start
    calls = sum(r.meta.calls for r in results)
    return {
        "method": method,
        "concurrency": level,
        "way": way,
        "calls": calls,
        "prompt_tokens": sum(r.meta.tokens.prompt for r in results),
        "failed": sum(not r.ok for r in results),
        "wall_s": round(wall, 2),
        "peak_threads": threads.peak,
        "serial_calls_s": round(calls * latency, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--passages", type=int, default=20)
    ap.add_argument("--latency", type=float, default=0.2, help="seconds per model call (default 0.2)")
    ap.add_argument("--concurrency", default="4,16", help="comma-separated levels (default 4,16)")
    ap.add_argument("--methods", default="selfcheck-prompt,fibe+sbc+dq")
    ap.add_argument("--data", help="benchmark data directory (default: HALLUSCOPE_DATA)")
    ap.add_argument("--out", default="benchmarks/results")
    args = ap.parse_args()
    passages = load_wikibio(args.data)[: args.passages]
    items = [{"sentences": p.sentences, "text": p.text, "concept": p.concept, "prompt": p.concept} for p in passages]
    rows = []
    began = time.perf_counter()
    for method in args.methods.split(","):
        for level in [int(c) for c in args.concurrency.split(",")]:
            for way in (THREADS, ASYNC):
                rows.append(measure(method, way, level, items, args.latency))
                print(rows[-1], file=sys.stderr)
    print(
        f"abatch vs detect_many, N = {SAMPLES}, {len(items)} WikiBio passages, {args.latency * 1000:.0f} ms a call "
        f"({platform.machine()}, Python {platform.python_version()})"
    )
    columns = [(k, k) for k in ("method", "concurrency", "way", "calls", "failed", "wall_s", "peak_threads")]
    print(markdown_table(rows, [*columns, ("serial_calls_s", "serial_calls_s")]))
    path = Path(args.out) / "async_batch.json"
    stub = f"a scripted model that answers in {args.latency} s (tests/scripted.py)"
    calls = sum(r["calls"] for r in rows)
    tokens = sum(r["prompt_tokens"] for r in rows)  # the scripted model reports each message's words as its tokens
    made = envelope(
        models=[stub], items=len(items), item="passage", calls=calls, seconds=time.perf_counter() - began,
        prompt_tokens=tokens,
    )  # fmt: skip
    write_json(path, {**made, "latency_s": args.latency, "samples": SAMPLES, "passages": len(items), "rows": rows})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
