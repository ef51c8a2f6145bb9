"""Local-model throughput on this machine: load time, sampling (prefix-reusing vs one-by-one),
score() throughput, entailment pairs/s, embeddings/s and peak memory, per installed registry model.

Each model runs in its own process so its peak RSS is its own. No cache: every call is real.

    .venv/bin/python benchmarks/local_models.py [--models NAME ...] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import resource
import time
from pathlib import Path
from typing import Any

QUESTION = [
    {
        "role": "user",
        "content": "Answer the following question in a single brief but complete sentence.\n"
        "Question: Who wrote the novel Middlemarch?\nAnswer: ",
    }
]
SAMPLES, SAMPLE_TOKENS = 10, 20
CONTINUATIONS = [
    f"The novel was written by {name}."
    for name in (
        "George Eliot",
        "Charles Dickens",
        "Jane Austen",
        "Mary Shelley",
        "Thomas Hardy",
        "Virginia Woolf",
        "Emily Bronte",
        "Henry James",
        "Leo Tolstoy",
        "Mark Twain",
    )
] * 2
PAIRS = [
    ("George Eliot wrote Middlemarch.", "Middlemarch was written by George Eliot."),
    ("George Eliot wrote Middlemarch.", "Charles Dickens wrote Middlemarch."),
    ("The author is George Eliot.", "Mary Ann Evans, known as George Eliot, wrote it."),
]


def bench_model(name: str, queue: Any) -> None:
    from halluscope.backends.entailment import LLMEntailment
    from halluscope.backends.gateway import Gateway
    from halluscope.backends.local import load_llama, model_file
    from halluscope.backends.providers.llama_cpp import LlamaCppLogProbModel

    path = model_file(name)
    start = time.perf_counter()
    load_llama(path, logits_all=True)
    load_s = time.perf_counter() - start
    model = LlamaCppLogProbModel(name)
    prompt = model.chat_prompt(QUESTION)

    start = time.perf_counter()
    reused = model.sample(prompt, n=SAMPLES, max_tokens=SAMPLE_TOKENS, seed=0)
    reuse_s = time.perf_counter() - start
    start = time.perf_counter()
    fresh = []
    for i in range(SAMPLES):
        model._llama.n_tokens = 0  # forget the prompt: every sample evaluates it again
        fresh += model.sample(prompt, n=1, max_tokens=SAMPLE_TOKENS, seed=100 + i)
    fresh_s = time.perf_counter() - start

    model._llama.n_tokens = 0
    start = time.perf_counter()
    model.score_many(prompt, CONTINUATIONS)
    score_s = time.perf_counter() - start

    judge = LLMEntailment(
        f"local:{name}", gateway=Gateway(cache=None), with_probs=False, prompt="semantic_entropy.entailment"
    )
    start = time.perf_counter()
    judge.judge_many(PAIRS, "Who wrote Middlemarch?")
    judge_s = time.perf_counter() - start

    queue.put(
        {
            "model": name,
            "file_mb": round(path.stat().st_size / 1e6, 1),
            "load_s": round(load_s, 2),
            "sample_prefix_reuse_tok_s": round(sum(len(s.token_logprobs) for s in reused) / reuse_s, 1),
            "sample_one_by_one_tok_s": round(sum(len(s.token_logprobs) for s in fresh) / fresh_s, 1),
            "sample_10x20_reuse_s": round(reuse_s, 2),
            "sample_10x20_one_by_one_s": round(fresh_s, 2),
            "score_continuations_s": round(len(CONTINUATIONS) / score_s, 2),
            "entailment_pairs_s": round(len(PAIRS) / judge_s, 2),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        }
    )


def bench_embeddings(queue: Any) -> None:
    from halluscope.backends.embeddings import Embedder

    start = time.perf_counter()
    embedder = Embedder(threads=os.cpu_count())
    load_s = time.perf_counter() - start
    sentences = [f"Sentence number {i} about a topic that varies: {i * 7 % 13}." for i in range(512)]
    embedder.encode(sentences[:16])
    start = time.perf_counter()
    embedder.encode(sentences)
    queue.put(
        {
            "model": "all-MiniLM-L6-v2",
            "load_s": round(load_s, 2),
            "embeddings_s": round(len(sentences) / (time.perf_counter() - start), 1),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        }
    )


def run_isolated(target: Any, *args: Any) -> dict[str, Any]:
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=target, args=(*args, queue))
    proc.start()
    result = queue.get(timeout=1800)
    proc.join()
    return dict(result)


def main() -> None:
    from halluscope.backends.local import DEFAULT_ORDER, is_installed

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", default=[m for m in DEFAULT_ORDER if is_installed(m)])
    ap.add_argument("--out", default="benchmarks/results")
    args = ap.parse_args()
    rows = []
    began = time.perf_counter()
    for name in args.models:
        print(f"benchmarking local:{name} ...", flush=True)
        rows.append(run_isolated(bench_model, name))
    embeddings = run_isolated(bench_embeddings)

    cols = [
        ("model", 20),
        ("file_mb", 8),
        ("load_s", 7),
        ("sample_prefix_reuse_tok_s", 10),
        ("sample_one_by_one_tok_s", 10),
        ("score_continuations_s", 9),
        ("entailment_pairs_s", 9),
        ("peak_rss_mb", 9),
    ]
    heads = ["model", "file MB", "load s", "tok/s reuse", "tok/s 1-by-1", "scores/s", "entail/s", "peak MB"]
    print(
        f"\nlocal models on {os.cpu_count()} cores ({platform.machine()}); sampling {SAMPLES} answers of "
        f"<= {SAMPLE_TOKENS} tokens; {len(CONTINUATIONS)} scored continuations; {len(PAIRS)} entailment pairs"
    )
    print("  ".join(h.rjust(w) for h, (_, w) in zip(heads, cols, strict=True)))
    for r in rows:
        print("  ".join(str(r[k]).rjust(w) for k, w in cols))
    print(
        f"\nembeddings ({embeddings['model']}): {embeddings['embeddings_s']} sentences/s, "
        f"load {embeddings['load_s']} s, peak {embeddings['peak_rss_mb']} MB"
    )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "local_models.json"
    from halluscope.bench.provenance import envelope

    made = envelope(  # the model work is timed inside, not counted as calls
        models=[f"local:{name}" for name in args.models],
        items=len(args.models),
        item="model",
        calls=0,
        seconds=time.perf_counter() - began,
        prompt_tokens=None,
        unknown={"prompt_tokens": "the models are driven directly, not through the gateway: each row times its work"},
    )
    path.write_text(json.dumps({**made, "cores": os.cpu_count(), "rows": rows, "embeddings": embeddings}, indent=2))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
