"""How soon a streamed answer's sentences get their verdicts: ``astream_check`` against checking after the
whole answer, on WikiBio passages (GPT-3's text as the answer, its Wikipedia text as the documents).

The answer arrives word by word at a fixed pace (``--words-per-second``, a local model's speed on a few
cores), as a model's stream would. Streamed, each sentence is checked once the next has begun, while the
stream goes on; a sentence's latency is the time from its last word to its verdict. Checked after the
whole answer, every sentence waits for the answer's end and then for the whole check; its latency is from
its own last word to that check's verdict. Each way runs on its own empty cache, so every call is real.
``grounded`` with ``top_k=1`` (one judge call a sentence). Wall-clock seconds: measure on a quiet machine.

    .venv/bin/python benchmarks/stream_latency.py [--model local:smollm2-135m] [--passages 3] [--words-per-second 15]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np

import halluscope
from halluscope.backends.gateway import Gateway
from halluscope.bench.provenance import envelope
from halluscope.bench.wikibio import load_wikibio


async def paced(words: list[str], rate: float, ends: list[float]) -> AsyncIterator[str]:
    """The words at ``rate`` a second from now; ``ends`` gets the time each word was handed out."""
    start = time.perf_counter()
    for i, word in enumerate(words):
        delay = start + i / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        ends.append(time.perf_counter())
        yield word


def pieces(text: str) -> list[str]:
    parts = text.split(" ")
    return [p + (" " if i < len(parts) - 1 else "") for i, p in enumerate(parts)]


async def streamed(text: str, context: str, model: str, rate: float) -> dict[str, Any]:
    words, handed = pieces(text), []
    latencies, result = [], None
    gateway = Gateway(cache=None)
    async for event in halluscope.astream_check(
        paced(words, rate, handed), context=[context], model=model, gateway=gateway, top_k=1
    ):
        now = time.perf_counter()
        if isinstance(event, halluscope.SentenceVerdict):
            last_word = len(text[: event.end].split(" ")) - 1  # the word that ended the sentence
            latencies.append(now - handed[min(last_word, len(handed) - 1)])
        else:
            result = event
            answer_end = now - handed[-1]
    assert result is not None
    return {"latencies": latencies, "after_answer": answer_end, "meta": result.meta}


async def whole(text: str, context: str, model: str, rate: float) -> dict[str, Any]:
    words, handed = pieces(text), []
    async for _ in paced(words, rate, handed):
        pass
    gateway = Gateway(cache=None)
    det = halluscope.detector("grounded", model, gateway=gateway, top_k=1)
    result = await det.adetect(text=text, context=[context])
    done = time.perf_counter()
    ends = [handed[min(len(text[: u.spans[0][1]].split(" ")) - 1, len(handed) - 1)] for u in result.units]
    return {"latencies": [done - end for end in ends], "after_answer": done - handed[-1], "meta": result.meta}


def _summed(metas: list[Any], name: str) -> int | None:
    """A count every passage's meta holds, summed (None where one does not: its provider said nothing)."""
    return sum(m.params[name] for m in metas) if all(name in m.params for m in metas) else None


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    latencies = [x for r in runs for x in r["latencies"]]
    metas = [r["meta"] for r in runs]
    return {
        "sentences": len(latencies),
        "p50_s": round(float(np.percentile(latencies, 50)), 2),
        "p95_s": round(float(np.percentile(latencies, 95)), 2),
        "after_answer_mean_s": round(float(np.mean([r["after_answer"] for r in runs])), 2),
        "calls": sum(m.calls for m in metas),
        "prompt_tokens_sent": sum(m.tokens.prompt for m in metas),
        "prompt_tokens_evaluated": _summed(metas, "evaluated_tokens"),
        "prompt_tokens_floor": _summed(metas, "floor_tokens"),  # each passage's distinct prompt tokens
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", action="append", help="the judge (repeatable; default SmolLM2 and the 1.5B)")
    ap.add_argument("--passages", type=int, default=3)
    ap.add_argument("--words-per-second", type=float, default=15.0)
    ap.add_argument("--data", default=os.environ.get("HALLUSCOPE_DATA", "../shared/data"))
    ap.add_argument("--out", default="benchmarks/results")
    args = ap.parse_args()
    models = args.model or ["local:smollm2-135m", "local:qwen2.5-coder-1.5b"]
    passages = load_wikibio(args.data)[: args.passages]
    began = time.perf_counter()
    rows = []
    for model in models:
        # the judge, the embeddings and spaCy loaded before either way is timed
        halluscope.check("Warm up.", context=[passages[0].wiki_text], model=model, top_k=1, gateway=Gateway(cache=None))
        for way, run in (("streamed", streamed), ("after the whole answer", whole)):
            runs = [asyncio.run(run(p.text, p.wiki_text, model, args.words_per_second)) for p in passages]
            rows.append({"model": model, "way": way, **summary(runs)})
            print(json.dumps(rows[-1]), flush=True)
    print(f"\nSentence-end to verdict, grounded top_k=1, {args.passages} WikiBio passages, "
          f"{args.words_per_second:g} words/s ({platform.machine()}, {os.cpu_count()} cores)")  # fmt: skip
    print(f"{'model':<28} {'way':<24} {'sentences':>9} {'p50 s':>7} {'p95 s':>7} {'end->verdict s':>15} {'calls':>6}")
    for r in rows:
        print(
            f"{r['model']:<28} {r['way']:<24} {r['sentences']:>9} {r['p50_s']:>7.2f} {r['p95_s']:>7.2f} "
            f"{r['after_answer_mean_s']:>15.2f} {r['calls']:>6}"
        )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    made = envelope(
        models=models, items=len(passages), item="passage", calls=sum(r["calls"] for r in rows),
        seconds=time.perf_counter() - began, cache_hits=0,
        prompt_tokens=sum(r["prompt_tokens_sent"] for r in rows),
    )  # fmt: skip
    settings = {"passages": args.passages, "words_per_second": args.words_per_second, "top_k": 1}
    (out / "stream_latency.json").write_text(json.dumps({**made, "settings": settings, "rows": rows}, indent=2))
    print(f"wrote {out / 'stream_latency.json'}")


if __name__ == "__main__":
    main()
